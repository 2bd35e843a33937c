# The task image variants and the load generator, built on every configured host.
# A variant's only rerun trigger is the digest of what it holds (params), not
# file times: touching or checking out an unchanged file rebuilds nothing.
# Builds go before any measurement (priority above every repetition's): a later
# repetition whose image is ready must not overtake a first one waiting for its build.


rule build_image:
    output:
        ref="results/images/{variant}.json",
    log:
        "results/logs/build_image/{variant}.log",
    priority: BUILD_PRIORITY
    params:
        digest=get_image_digest,
        base_image=EXPERIMENT.image["base"],
    script:
        "../scripts/build_image.py"

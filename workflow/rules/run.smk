# One job per repetition of a condition: one measured run, stored raw as
# results/<preset>/runs/<id>/rep<N>.parquet. A run depends on its own parameters
# (params), the load settings (params) and the images it uses (inputs), and on
# nothing else; its repetition index is in its path. Priorities interleave the
# repetitions: every condition's first before any second.


rule run_condition:
    input:
        task_image=get_task_image_ref,
        loadgen_image="results/images/loadgen.json",
    output:
        run="results/{preset}/runs/{condition}/rep{repeat}.parquet",
    log:
        "results/{preset}/logs/run_condition/{condition}/rep{repeat}.log",
    priority: get_repeat_priority
    params:
        condition=get_condition,
        load=EXPERIMENT.load.measured(),
    script:
        "../../scripts/run_condition.py"

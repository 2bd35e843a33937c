# One job per repetition of a condition: one measured run, stored raw as
# results/<preset>/runs/<id>/rep<N>.parquet. A run depends on its own parameters
# (params), the load settings (params) and the images it uses (inputs), and on
# nothing else; its repetition index is in its path. Priorities interleave the
# repetitions: every condition's first before any second.


rule run_condition:
    input:
        task_image=get_task_image_ref,
        loadgen_image="results/images/loadgen.json",
        # Open loop only (empty for a closed run): the generator's image and the rate's source.
        open_loadgen_image=get_open_loadgen_image,
        capacity=get_capacity_input,
    output:
        run="results/{preset}/runs/{condition}/rep{repeat}.parquet",
    log:
        "results/{preset}/logs/run_condition/{condition}/rep{repeat}.log",
    priority: get_repeat_priority
    params:
        condition=get_condition,
        load=get_load,
    # A plain Python process (sidecar_bench.runjob): the params stay the rerun triggers they were.
    shell:
        "{RUN_JOB} --condition {params.condition:q} --repeat {wildcards.repeat}"
        " --out {output.run:q} --log {log:q} --task-image {input.task_image:q}"
        " --loadgen-image {input.loadgen_image:q}"
        " --open-loadgen-image={input.open_loadgen_image:q} --capacity={input.capacity:q}"

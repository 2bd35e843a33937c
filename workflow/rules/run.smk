# One job per condition: one measured run, stored raw as results/<preset>/runs/<id>.parquet.
# A run depends on its own parameters (params), the load settings (params) and
# the images it uses (inputs), and on nothing else.


rule run_condition:
    input:
        task_image=get_task_image_ref,
        loadgen_image="results/images/loadgen.json",
    output:
        run="results/{preset}/runs/{condition}.parquet",
    log:
        "results/{preset}/logs/run_condition/{condition}.log",
    params:
        condition=get_condition,
        load=EXPERIMENT.load.measured(),
    script:
        "../../scripts/run_condition.py"

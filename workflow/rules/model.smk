# The CPU-budget model: calibrate each app's CPU cost per request alone; decompose every condition's RPS into the
# CPU left to the app and its cost (reading its own CPU), and predict it forward from its settings and other
# cells only (scripts/sidecar_bench/forward.py).
# Calibration: each app of the preset with no sidecar at each of its vCPU levels and with no CPU limit
# (a quota of all the host's CPUs; scripts/sidecar_bench/calibration.py). Conditions the matrix already has
# are read from its run files; the others are measured like a run (same script, same rerun triggers) into
# results/<preset>/calibration/runs/. They use the app-only images: a changed app reruns them, a changed
# sidecar does not. The cells, their run files and the burn peers are computed in common.smk.


rule run_calibration:
    input:
        task_image=get_calibration_image_ref,
        loadgen_image="results/images/loadgen.json",
    output:
        run="results/{preset}/calibration/runs/{condition}/rep{repeat}.parquet",
    log:
        "results/{preset}/logs/run_calibration/{condition}/rep{repeat}.log",
    priority: get_repeat_priority
    params:
        condition=get_calibration_condition,
        load=get_calibration_load,
    # As run_condition's (run.smk).
    shell:
        "{RUN_JOB} --condition {params.condition:q} --repeat {wildcards.repeat}"
        " --out {output.run:q} --log {log:q} --task-image {input.task_image:q}"
        " --loadgen-image {input.loadgen_image:q}"


rule calibrate:
    input:
        runs=CALIBRATION_RUN_FILES,
        code=get_analysis_code("calibrate"),
    output:
        summary="results/{preset}/calibration/summary.parquet",
        summary_csv="results/{preset}/calibration/summary.csv",
        runs_csv="results/{preset}/calibration/runs_summary.csv",
        md="results/{preset}/calibration/calibration.md",
        csv=report(
            "results/{preset}/calibration/calibration.csv",
            caption="../report/calibration.rst",
            category="Model",
        ),
    log:
        "results/{preset}/logs/calibrate.log",
    params:
        no_limit_vcpu=CALIBRATION_NO_LIMIT_VCPU,
        in_matrix=sorted(
            cell.condition.id for cell in CALIBRATION_CELLS if cell.in_matrix
        ),
    script:
        "../scripts/calibrate.py"


rule model_report:
    input:
        summary=rules.aggregate_runs.output.parquet,
        runs_summary=rules.aggregate_runs.output.runs_parquet,
        calibration=rules.calibrate.output.csv,
        calibration_runs=rules.calibrate.output.runs_csv,
        reference="workflow/reference/article-results.csv",
        code=get_analysis_code("model_report"),
    output:
        tables=report(
            directory("results/{preset}/model/tables"),
            patterns=["{name}.csv"],
            caption="../report/model_tables.rst",
            category="Model",
        ),
        charts=report(
            directory("results/{preset}/model/charts"),
            patterns=["{name}.png"],
            caption="../report/model_charts.rst",
            category="Model",
        ),
    log:
        "results/{preset}/logs/model_report.log",
    params:
        sidecar_burn=EXPERIMENT.load.sidecar_burn,
    script:
        "../scripts/model_report.py"


# Sidecars that burn what they claim: where another preset whose sidecars burn the other way
# (load.sidecar_burn wall / cpu) has been measured, the same conditions side by side. Its summary is read
# as it is; this rule never measures it (BURN_PEERS: common.smk).
if BURN_PEERS:

    rule burn_comparison:
        input:
            summaries=[rules.aggregate_runs.output.parquet.format(preset=PRESET)]
            + [f"results/{peer}/summary.parquet" for peer in BURN_PEERS],
            reference="workflow/reference/article-results.csv",
            code=get_analysis_code("burn_comparison"),
        output:
            burn=report(
                directory("results/{preset}/model/burn"),
                patterns=["{name}.png"],
                caption="../report/burn_comparison.rst",
                category="Model",
            ),
        log:
            "results/{preset}/logs/burn_comparison.log",
        params:
            burns=[EXPERIMENT.load.sidecar_burn] + list(BURN_PEERS.values()),
            presets=[PRESET] + list(BURN_PEERS),
        script:
            "../scripts/burn_comparison.py"

    localrules:
        burn_comparison,


# `snakemake calibration` / `snakemake model`: the targets of this file for the chosen preset.
# Each names the run files it reads too (see get_final_outputs): a deleted one is measured again.
rule calibration:
    input:
        f"results/{PRESET}/calibration/calibration.csv",
        CALIBRATION_RUN_FILES,


rule model:
    input:
        f"results/{PRESET}/model/tables",
        f"results/{PRESET}/model/charts",
        BURN_OUTPUTS,
        sorted(set(RUN_FILES) | set(CALIBRATION_RUN_FILES)),


localrules:
    calibrate,
    model_report,
    calibration,
    model,

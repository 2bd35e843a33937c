"""Snakemake script of rule calibrate: the app-only runs -> cost per request per app and vCPU.

results/<preset>/calibration/summary.parquet, .csv: the calibration conditions' summary with the cost columns;
results/<preset>/calibration/runs_summary.csv: one row per calibration run with its cost (the forward prediction
  reads the runs, not only their summary);
results/<preset>/calibration/calibration.md, .csv: the calibration table (calibration.py, model_tables).
"""

# Where the workflow's job server runs, its forked process (the library imported) runs this job instead.
from sidecar_bench.jobserver import delegate_script, open_job_log

delegate_script(globals())

import sys
from pathlib import Path

from sidecar_bench import model_tables
from sidecar_bench.calibration import calibration_table
from sidecar_bench.model import add_cost_columns
from sidecar_bench.stats import summarise_conditions, summarise_runs
from sidecar_bench.table_format import render


def main(
    runs,
    summary_parquet,
    summary_csv,
    table_md,
    table_csv,
    no_limit_vcpu=None,
    in_matrix=(),
    runs_csv=None,
):
    per_run = summarise_runs(runs)
    per_run, summary = add_cost_columns(per_run, summarise_conditions(per_run))
    for path in (summary_parquet, summary_csv, table_md, table_csv, runs_csv):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    summary.to_parquet(summary_parquet, index=False)
    summary.to_csv(summary_csv, index=False, float_format="%.6g")
    if runs_csv:
        per_run.to_csv(runs_csv, index=False, float_format="%.6g")
    calibration = calibration_table(summary, no_limit=no_limit_vcpu, in_matrix=in_matrix)
    table = model_tables.calibration_table(calibration)
    table.data.to_csv(table_csv, index=False, float_format="%.6g")
    Path(table_md).write_text(render(table), encoding="utf-8")
    print(
        f"calibrate: {len(per_run)} runs, {len(summary)} conditions -> {table_md}", file=sys.stderr
    )
    return calibration


if __name__ == "__main__" and "snakemake" in globals():
    sys.stderr = open_job_log(snakemake.log[0])
    main(
        runs=list(snakemake.input.runs),
        summary_parquet=snakemake.output.summary,
        summary_csv=snakemake.output.summary_csv,
        table_md=snakemake.output.md,
        table_csv=snakemake.output.csv,
        no_limit_vcpu=snakemake.params.no_limit_vcpu,
        in_matrix=snakemake.params.in_matrix,
        runs_csv=snakemake.output.runs_csv,
    )

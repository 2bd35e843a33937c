"""Snakemake script: run files -> per-run and per-condition summaries.

results/<preset>/runs_summary.parquet, .csv: one row per run file (repetition).
results/<preset>/summary.parquet, .csv: one row per condition, the mean of its
repetitions with a t interval over them (within-run only for a single repetition),
run-to-run CVs and validity flags.
Statistics and their definitions live in sidecar_bench.stats (intervals.py, flags.py).
"""

# Where the workflow's job server runs, its forked process (the library imported) runs this job instead.
from sidecar_bench.jobserver import delegate_script, open_job_log

delegate_script(globals())

import sys
from pathlib import Path

import pandas as pd

from sidecar_bench.model import add_cost_columns
from sidecar_bench.stats import FAILED, summarise_conditions, summarise_runs


def _write(frame, parquet, csv):
    for path in (parquet, csv):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    frame.to_parquet(parquet, index=False)
    frame.to_csv(csv, index=False, float_format="%.6g")


def main(runs, summary_parquet, summary_csv, runs_parquet=None, runs_csv=None):
    per_run = summarise_runs(runs)
    summary = summarise_conditions(per_run)
    # Cost per request (app CPU / successful responses) per run and per condition: sidecar_bench.model.
    # Over the measured runs only: a failed run (status failed) has no number to pool.
    failed = per_run["status"] == FAILED
    measured, summary = add_cost_columns(per_run[~failed], summary)
    per_run = (
        pd.concat([measured, per_run[failed]]).loc[per_run.index] if failed.any() else measured
    )
    if runs_parquet and runs_csv:
        _write(per_run, runs_parquet, runs_csv)
    _write(summary, summary_parquet, summary_csv)
    print(
        f"aggregate_runs: {len(per_run)} runs ({int(failed.sum())} failed), {len(summary)} conditions -> "
        f"{summary_parquet}, {summary_csv}",
        file=sys.stderr,
    )
    return summary


if __name__ == "__main__" and "snakemake" in globals():
    sys.stderr = open_job_log(snakemake.log[0])
    main(
        runs=list(snakemake.input.runs),
        summary_parquet=snakemake.output.parquet,
        summary_csv=snakemake.output.csv,
        runs_parquet=getattr(snakemake.output, "runs_parquet", None),
        runs_csv=getattr(snakemake.output, "runs_csv", None),
    )

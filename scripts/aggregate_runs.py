"""Snakemake script: per-run Parquet files -> results/<preset>/summary.parquet + summary.csv.

Statistics and their definitions live in sidecar_bench.stats.
"""

import sys
from pathlib import Path

from sidecar_bench.stats import summarise_runs


def main(runs, summary_parquet, summary_csv):
    summary = summarise_runs(runs)
    for path in (summary_parquet, summary_csv):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    summary.to_parquet(summary_parquet, index=False)
    summary.to_csv(summary_csv, index=False, float_format="%.6g")
    print(f"aggregate_runs: {len(summary)} runs -> {summary_parquet}, {summary_csv}", file=sys.stderr)
    return summary


if __name__ == "__main__" and "snakemake" in globals():
    sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
    main(runs=list(snakemake.input.runs), summary_parquet=snakemake.output.parquet,  # noqa: F821
         summary_csv=snakemake.output.csv)  # noqa: F821

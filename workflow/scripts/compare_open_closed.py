"""Snakemake script: summary -> results/<preset>/openloop/ (open-loop cells beside closed-loop ones)."""

# Where the workflow's job server runs, its forked process (the library imported) runs this job instead.
from sidecar_bench.jobserver import delegate_script, open_job_log

delegate_script(globals())

import sys

import pandas as pd

from sidecar_bench.openloop_report import write


def main(summary, out_dir, formats=("html", "png")):
    written = write(pd.read_parquet(summary), out_dir, formats)
    print(f"compare_open_closed: wrote {len(written)} files to {out_dir}", file=sys.stderr)
    return written


if __name__ == "__main__" and "snakemake" in globals():
    sys.stderr = open_job_log(snakemake.log[0])
    main(snakemake.input.summary, snakemake.output.tables)

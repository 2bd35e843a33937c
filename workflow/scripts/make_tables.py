"""Snakemake script: summary + the article's numbers -> results/<preset>/tables/<name>.md and .csv."""

# Where the workflow's job server runs, its forked process (the library imported) runs this job instead.
from sidecar_bench.jobserver import delegate_script, open_job_log

delegate_script(globals())

import sys
from pathlib import Path

import pandas as pd

from sidecar_bench.layouts import has_task_layout, layouts_table
from sidecar_bench.loadmodel import closed_loop
from sidecar_bench.reference import load_reference
from sidecar_bench.table_format import environment_note, write_table
from sidecar_bench.tables import write_tables


def main(summary, reference, out_dir):
    # The article's tables are closed-loop tables: open-loop cells go to compare_open_closed.
    closed = closed_loop(pd.read_parquet(summary))
    written = write_tables(closed, load_reference(reference), out_dir)
    if has_task_layout(closed):  # a set with ECS's task layout: both layouts side by side
        written += write_table(layouts_table(closed), Path(out_dir), environment_note(closed))
    print(f"make_tables: wrote {len(written)} files to {out_dir}", file=sys.stderr)
    return written


if __name__ == "__main__" and "snakemake" in globals():
    sys.stderr = open_job_log(snakemake.log[0])
    main(
        summary=snakemake.input.summary,
        reference=snakemake.input.reference,
        out_dir=snakemake.output.tables,
    )

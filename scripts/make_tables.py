"""Snakemake script: summary + the article's numbers -> results/<preset>/tables/<name>.md and .csv."""

import sys

import pandas as pd

from sidecar_bench.loadmodel import closed_loop
from sidecar_bench.reference import load_reference
from sidecar_bench.tables import write_tables


def main(summary, reference, out_dir):
    # The article's tables are closed-loop tables: open-loop cells go to compare_open_closed.
    written = write_tables(closed_loop(pd.read_parquet(summary)), load_reference(reference), out_dir)
    print(f"make_tables: wrote {len(written)} files to {out_dir}", file=sys.stderr)
    return written


if __name__ == "__main__" and "snakemake" in globals():
    sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
    main(summary=snakemake.input.summary, reference=snakemake.input.reference,  # noqa: F821
         out_dir=snakemake.output.tables)  # noqa: F821

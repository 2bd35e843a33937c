"""Snakemake script of rule burn_comparison: the same conditions with wall-clock and CPU-time sidecars.

Inputs: this preset's summary and those of the presets whose sidecars burn the other way (already measured);
output: results/<preset>/model/burn/{burn_comparison,burn_breaking_points}.md, .csv and
burn_comparison.{html,png,svg}.
"""

# Where the workflow's job server runs, its forked process (the library imported) runs this job instead.
from sidecar_bench.jobserver import delegate_script, open_job_log

delegate_script(globals())

import sys
from pathlib import Path

import pandas as pd

from sidecar_bench.burn_charts import burn_comparison_chart
from sidecar_bench.burn_tables import burn_breaking_points_table, burn_comparison_table
from sidecar_bench.chart_files import save_chart
from sidecar_bench.model import burn_comparison
from sidecar_bench.reference import load_reference
from sidecar_bench.table_format import write_table_files


def main(summaries, burns, presets, reference, out_dir, formats=("html", "png", "svg")):
    frames = {
        (burn, preset): pd.read_parquet(path)
        for path, burn, preset in zip(summaries, burns, presets)
    }
    long = burn_comparison(frames)
    by_burn = {}
    for (burn, _), frame in frames.items():
        by_burn.setdefault(burn, frame)
    built = [
        burn_comparison_table(long),
        burn_breaking_points_table(by_burn, load_reference(reference)),
    ]
    written = write_table_files(built, out_dir)
    written += save_chart(
        burn_comparison_chart(long), Path(out_dir), "burn_comparison", tuple(formats)
    )
    print(f"burn_comparison: wrote {len(written)} files", file=sys.stderr)
    return long


if __name__ == "__main__" and "snakemake" in globals():
    sys.stderr = open_job_log(snakemake.log[0])
    main(
        summaries=list(snakemake.input.summaries),
        burns=snakemake.params.burns,
        presets=snakemake.params.presets,
        reference=snakemake.input.reference,
        out_dir=snakemake.output.burn,
    )

"""Snakemake script: summary + the article's numbers + run files (runs/<condition id>/rep<N>.parquet)
-> results/<preset>/charts/<name>.{html,png,svg}."""

# Where the workflow's job server runs, its forked process (the library imported) runs this job instead.
from sidecar_bench.jobserver import delegate_script, open_job_log

delegate_script(globals())

# Run by Snakemake, the process that draws the charts starts first: its engine starts while this one imports
# pandas and altair (imported, as by the tests, the module starts nothing).
from sidecar_bench import render_worker

if "snakemake" in globals():
    render_worker.start()

import sys
from pathlib import Path

import pandas as pd

from sidecar_bench.chart_files import rendering_in_background, save_chart
from sidecar_bench.charts import write_charts
from sidecar_bench.layout_charts import layouts_chart
from sidecar_bench.layouts import has_task_layout
from sidecar_bench.loadmodel import closed_loop
from sidecar_bench.mitigation_charts import has_knobs, knobs_chart
from sidecar_bench.reference import load_reference


def main(summary, reference, runs, out_dir):
    # Each chart is drawn by a second process while the next is made (its engine starts while the data is read).
    with rendering_in_background():
        # The article's charts are closed-loop charts: open-loop cells go to compare_open_closed.
        closed = closed_loop(pd.read_parquet(summary))
        written = write_charts(closed, load_reference(reference), list(runs), out_dir)
        if has_task_layout(closed):  # a set with ECS's task layout: both layouts side by side
            written += save_chart(layouts_chart(closed), Path(out_dir), "layouts")
        if has_knobs(
            closed
        ):  # knobs against throttling (or the task layout) beside the article's settings
            written += save_chart(knobs_chart(closed), Path(out_dir), "knobs")
    print(f"plot_charts: wrote {len(written)} files to {out_dir}", file=sys.stderr)
    return written


if __name__ == "__main__" and "snakemake" in globals():
    sys.stderr = open_job_log(snakemake.log[0])
    main(
        summary=snakemake.input.summary,
        reference=snakemake.input.reference,
        runs=list(snakemake.input.runs),
        out_dir=snakemake.output.charts,
    )

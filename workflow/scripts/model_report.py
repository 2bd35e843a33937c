"""Snakemake script of rule model_report: summary + calibration + the article's numbers -> the model's tables and
charts.

results/<preset>/model/tables/:
  decomposition, decomposition_share, decomposition_misses (model.py: each cell's RPS split into the CPU left to
  the app, read from its own measured sidecar CPU, and its cost per request: not a prediction);
  forward, forward_share, forward_misses (forward.py: each cell predicted from its settings and other cells only,
  scored on the cells it was not fit on);
  article_costs; each as .md and .csv.
results/<preset>/model/charts/{decomposition_vs_measured,forward_ratio_vs_load,sweeps_vs_delivered_load,
  retained_vs_sidecar_share}.html, .png, .svg.

Also a command for a published set, whose raw runs are gone but whose summaries are not: it makes the set's
model/tables and model/charts (PNG, SVG) again from its summary.csv, runs_summary.csv and calibration/ with this
version's model, replacing what was there, and its report.html:

    .venv/bin/python workflow/scripts/model_report.py results/published/article

A set published without its calibration's runs (calibration/runs_summary.csv; sets published before
2026-12-06) keeps its model tables; only its model charts are drawn again, from those tables, and its
PROVENANCE.md says so.
"""

# Where the workflow's job server runs, its forked process (the library imported) runs this job instead.
from sidecar_bench.jobserver import delegate_script, open_job_log

delegate_script(globals())

# Run by Snakemake, the process that draws the charts starts first: its engine starts while this one imports
# pandas and altair (imported, as by the tests, the module starts nothing).
from sidecar_bench import render_worker

if "snakemake" in globals():
    render_worker.start()

import argparse
import json
import shutil
import sys
from pathlib import Path

import pandas as pd

from sidecar_bench import forward as fwd
from sidecar_bench import model as modelmod
from sidecar_bench import model_tables, set_report
from sidecar_bench.cells import article_settings
from sidecar_bench.chart_files import rendering_in_background
from sidecar_bench.environment import project_commit
from sidecar_bench.loadmodel import closed_loop
from sidecar_bench.model_charts import write_model_charts
from sidecar_bench.reference import load_reference
from sidecar_bench.table_format import environment_note, write_table_files


def read_frame(path):
    """A summary from .parquet (the workflow) or .csv (a published set)."""
    path = Path(path)
    # read_csv leaves a block per column: one copy joins them (else pandas warns that the frame is
    # fragmented at its first new column, and every selection copies each column's block apart).
    frame = pd.read_csv(path).copy() if path.suffix == ".csv" else pd.read_parquet(path)
    # The model is of the closed loop's throughput: open-loop cells run at a set rate.
    return closed_loop(frame)


def model_frames(summary, runs_summary):
    """The runs and the conditions with their costs, at the article's settings (the knobs against throttling
    change the budget the model models)."""
    per_run = modelmod.with_run_costs(article_settings(read_frame(runs_summary)))
    return per_run, modelmod.summary_with_costs(article_settings(read_frame(summary)), per_run)


def main(
    summary,
    runs_summary,
    calibration,
    reference,
    tables_dir,
    charts_dir,
    sidecar_burn=None,
    formats=("html", "png", "svg"),
    calibration_runs=None,
):
    # The charts are drawn by a second process, whose engine starts while the model is made.
    with rendering_in_background():
        per_run, conditions = model_frames(summary, runs_summary)
        cal_runs = (
            modelmod.with_run_costs(read_frame(calibration_runs))
            if calibration_runs and Path(calibration_runs).exists()
            else None
        )
        cal = pd.read_csv(calibration)
        ref = load_reference(reference)
        model = modelmod.decompose(conditions, cal, sidecar_burn)
        forward = fwd.forward_predict(conditions, per_run, cal_runs)
        built = [
            model_tables.decomposition_table(model),
            model_tables.decomposition_share_table(modelmod.share_within(model)),
            model_tables.decomposition_misses_table(modelmod.largest_misses(model)),
            *model_tables.forward_tables(forward),
            model_tables.article_costs_table(modelmod.article_costs(ref, cal)),
        ]
        written = write_table_files(built, tables_dir, environment_note(conditions))
        written += write_model_charts(
            model, forward, conditions, per_run, ref, charts_dir, sidecar_burn, formats
        )
    for line in fwd.share_within(forward).to_string(index=False).splitlines():
        print(f"forward: {line}", file=sys.stderr)
    print(f"model: wrote {len(written)} files", file=sys.stderr)
    return model, forward


def redraw_charts(folder, reference, sidecar_burn=None):
    """A published set's model/charts drawn again from its model/tables (the tables stay as published).

    For a set published without its calibration's runs (calibration/runs_summary.csv): the forward model reads
    their costs, so it cannot be made again, but the charts can, from the model it was published with."""
    folder = Path(folder)
    tables = folder / "model" / "tables"
    needed = [tables / "decomposition.csv", tables / "forward.csv"]
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        raise SystemExit(f"{folder}: no model to draw: missing {', '.join(missing)}")
    with rendering_in_background():
        per_run, conditions = model_frames(folder / "summary.csv", folder / "runs_summary.csv")
        model, forward = (pd.read_csv(path) for path in needed)
        shutil.rmtree(folder / "model" / "charts", ignore_errors=True)
        written = write_model_charts(
            model,
            forward,
            conditions,
            per_run,
            load_reference(reference),
            folder / "model" / "charts",
            sidecar_burn,
            formats=("png", "svg"),
        )
    print(f"model: drew {len(written)} chart files from {tables}", file=sys.stderr)
    return written


REDRAWN = "- model charts drawn again from the published model tables at commit"


def note_redrawn(folder):
    """PROVENANCE.md says when the model's charts were drawn again, and that its tables were not made again."""
    set_report.replace_provenance_lines(
        folder,
        (REDRAWN,),
        [
            f"{REDRAWN} {project_commit()[:12]} (the calibration's runs were not published with this "
            "set, so the model tables are those it was published with)"
        ],
    )


def republish(folder, reference="workflow/reference/article-results.csv"):
    """Make a published set's model/tables and model/charts again from its summaries (module docstring).

    A set published without its calibration's runs keeps its model tables and has its charts drawn again
    from them (redraw_charts). Either way its report.html is written again."""
    folder = Path(folder)
    needed = [
        folder / "summary.csv",
        folder / "runs_summary.csv",
        folder / "calibration" / "calibration.csv",
    ]
    missing = [str(p) for p in needed if not p.exists()]
    if missing:
        raise SystemExit(
            f"{folder}: not a published set with a calibration: missing {', '.join(missing)}"
        )
    provenance = folder / "provenance.json"
    settings = json.loads(provenance.read_text()).get("settings", []) if provenance.exists() else []
    burns = sorted(
        {str(s["sidecar_burn"]) for s in settings if isinstance(s, dict) and s.get("sidecar_burn")}
    )
    burn = ",".join(burns) or None
    if not (folder / "calibration" / "runs_summary.csv").exists():
        redraw_charts(folder, reference, burn)
        note_redrawn(folder)
        set_report.write(folder, set_report.title_of(folder))
        return None
    for sub in ("tables", "charts"):
        shutil.rmtree(folder / "model" / sub, ignore_errors=True)
    made = main(
        needed[0],
        needed[1],
        needed[2],
        reference,
        folder / "model" / "tables",
        folder / "model" / "charts",
        burn,
        formats=("png", "svg"),
        calibration_runs=str(folder / "calibration" / "runs_summary.csv"),
    )
    set_report.write(folder, set_report.title_of(folder))
    return made


if __name__ == "__main__" and "snakemake" not in globals():
    parser = argparse.ArgumentParser(
        description="Make a published set's model tables and charts again from its summaries."
    )
    parser.add_argument("folder", help="a published set, e.g. results/published/article")
    parser.add_argument("--reference", default="workflow/reference/article-results.csv")
    args = parser.parse_args()
    republish(args.folder, args.reference)

if __name__ == "__main__" and "snakemake" in globals():
    sys.stderr = open_job_log(snakemake.log[0])
    main(
        summary=snakemake.input.summary,
        runs_summary=snakemake.input.runs_summary,
        calibration=snakemake.input.calibration,
        reference=snakemake.input.reference,
        tables_dir=snakemake.output.tables,
        charts_dir=snakemake.output.charts,
        sidecar_burn=snakemake.params.sidecar_burn,
        calibration_runs=snakemake.input.calibration_runs,
    )

"""Snakemake script of rule model: summary + calibration + the article's numbers -> the model's tables and charts.

results/<preset>/model/tables/{model,model_share,model_misses,article_costs}.md, .csv and
results/<preset>/model/charts/{model_predicted_vs_measured,sweeps_vs_delivered_load}.html, .png, .svg.
"""

import sys

import pandas as pd

from sidecar_bench import model as modelmod
from sidecar_bench import tables
from sidecar_bench.charts import write_model_charts
from sidecar_bench.reference import load_reference


def main(summary, runs_summary, calibration, reference, tables_dir, charts_dir, sidecar_burn=None,
         formats=("html", "png", "svg")):
    per_run = modelmod.with_run_costs(pd.read_parquet(runs_summary))
    conditions = modelmod.summary_with_costs(pd.read_parquet(summary), per_run)
    cal = pd.read_csv(calibration)
    ref = load_reference(reference)
    model = modelmod.predict(conditions, cal, sidecar_burn)
    built = [tables.model_table(model), tables.model_share_table(modelmod.share_within(model)),
             tables.model_misses_table(modelmod.largest_misses(model)),
             tables.article_costs_table(modelmod.article_costs(ref, cal))]
    written = tables.write_model_tables(built, tables_dir, tables.environment_note(conditions))
    written += write_model_charts(model, conditions, per_run, ref, charts_dir, sidecar_burn, formats)
    print(f"model: wrote {len(written)} files", file=sys.stderr)
    return model


if __name__ == "__main__" and "snakemake" in globals():
    sys.stderr = open(snakemake.log[0], "w")  # noqa: F821
    main(summary=snakemake.input.summary, runs_summary=snakemake.input.runs_summary,  # noqa: F821
         calibration=snakemake.input.calibration, reference=snakemake.input.reference,  # noqa: F821
         tables_dir=snakemake.output.tables, charts_dir=snakemake.output.charts,  # noqa: F821
         sidecar_burn=snakemake.params.sidecar_burn)  # noqa: F821

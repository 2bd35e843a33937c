"""The model's charts: the decomposition against the measured RPS, the forward prediction's ratio against load,
and the sweeps against the sidecars' delivered CPU (charts.py draws the last two kinds)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import altair as alt
import pandas as pd

from . import charts
from .charts import APP_NAMES, placeholder, save_chart

MODEL_CHART_NAMES = ("decomposition_vs_measured", "forward_ratio_vs_load", "sweeps_vs_delivered_load",
                     "retained_vs_sidecar_share")
DECOMPOSITION_TITLE = "Measured against decomposed RPS (CPU left from the cell's own sidecar CPU / calibrated cost)"
VERDICT_COLORS = {"within": "#54a24b", "undecided": "#eeca3b", "miss": "#e45756"}


def decomposition_chart(model: pd.DataFrame) -> alt.TopLevelMixin:
    """charts.predicted_measured_chart, titled for what it shows: a decomposition, not a prediction."""
    chart = charts.predicted_measured_chart(model)
    title = getattr(chart, "title", None)
    subtitle = getattr(title, "subtitle", alt.Undefined) if isinstance(title, alt.Title) else alt.Undefined
    return chart.properties(title=alt.Title(DECOMPOSITION_TITLE, subtitle=subtitle))


def forward_ratio_chart(forward: pd.DataFrame) -> alt.TopLevelMixin:
    """Scored cells: measured / forward-predicted RPS against the sidecars' total nominal load, one panel per app and
    vCPU, with the ratio's interval (from the cost's) and the 0.9-1.1 band."""
    title = "Measured / forward-predicted RPS against the sidecars' nominal load"
    data = forward[(forward["role"] == "scored") & forward["ratio"].notna()].copy()
    if data.empty:
        return placeholder(title, "No scored cell (no loaded cell at a quota-bound level with a fit).")
    data["setup"] = [f"{APP_NAMES.get(a, a)} {v:g} vCPU" for a, v in zip(data["app"], data["vcpu"])]
    data["sidecars"] = [f"{int(n)} sidecar{'s' if n != 1 else ''}" for n in data["sidecar_count"]]
    data["band_lo"], data["band_hi"], data["one"] = 0.9, 1.1, 1.0
    log = alt.Scale(type="log")
    x = alt.X("total_sidecar_load_pct:Q", title="Sidecars' total nominal load (%)")
    base = alt.Chart().encode(x=x, tooltip=[
        "condition_id:N", alt.Tooltip("predicted_rps:Q", format=".0f"), alt.Tooltip("rps:Q", format=".0f"),
        alt.Tooltip("ratio:Q", format=".2f"), alt.Tooltip("ratio_lo:Q", format=".2f"),
        alt.Tooltip("ratio_hi:Q", format=".2f"), "verdict:N", "reason:N"])
    color = alt.Color("verdict:N", title="within 10 %", scale=alt.Scale(domain=list(VERDICT_COLORS),
                                                                        range=list(VERDICT_COLORS.values())))
    layers = alt.layer(
        alt.Chart().mark_rule(color="gray", strokeDash=[4, 4]).encode(y=alt.Y("band_lo:Q", scale=log)),
        alt.Chart().mark_rule(color="gray", strokeDash=[4, 4]).encode(y=alt.Y("band_hi:Q", scale=log)),
        alt.Chart().mark_rule(color="gray").encode(y=alt.Y("one:Q", scale=log)),
        base.mark_rule().encode(y=alt.Y("ratio_lo:Q", scale=log), y2="ratio_hi:Q", color=color),
        base.mark_point(filled=True, size=45).encode(
            y=alt.Y("ratio:Q", title="Measured / predicted RPS (log)", scale=log), color=color,
            shape=alt.Shape("sidecars:N", title="Sidecars")),
        data=data,
    ).properties(width=220, height=180)
    share = []
    for app, group in data.groupby("app"):
        share.append(f"{APP_NAMES.get(app, app)}: {int((group['verdict'] == 'within').sum())} of {len(group)} "
                     "within 10 %")
    subtitle = ["Scored cells only (loaded, quota-bound, predicted without their own CPU). Bars: the ratio at the "
                "cost's 95 % interval ends; dashed: 0.9 and 1.1. " + "; ".join(share) + "."]
    return layers.facet(facet=alt.Facet("setup:N", title=None), columns=3).properties(
        title=alt.Title(title, subtitle=subtitle))


def write_model_charts(model: pd.DataFrame, forward: pd.DataFrame, summary: pd.DataFrame, per_run: pd.DataFrame,
                       ref: pd.DataFrame, out_dir: str | Path, sidecar_burn: str | None = None,
                       formats: Iterable[str] = ("html", "png", "svg")) -> list[Path]:
    """The model's charts (MODEL_CHART_NAMES). The sweeps' dashed line is the forward prediction."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    built = {"decomposition_vs_measured": decomposition_chart(model),
             "forward_ratio_vs_load": forward_ratio_chart(forward),
             "sweeps_vs_delivered_load": charts.delivered_load_chart(summary, per_run, ref, forward, sidecar_burn),
             "retained_vs_sidecar_share": charts.budget_line_chart(summary, sidecar_burn)}
    written = []
    for name, chart in built.items():
        written += save_chart(chart, out_dir, name, tuple(formats))
    return written

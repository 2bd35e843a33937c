"""The model's charts: the decomposition against the measured RPS, the forward prediction's ratio against load,
and the sweeps against the sidecars' delivered CPU (charts.py draws the last two kinds)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import altair as alt
import pandas as pd

from . import charts
from .charts import APP_COLORS, APP_NAMES, flag_ring, flagged_subtitle, model_flags, placeholder, save_chart, with_flags

MODEL_CHART_NAMES = ("decomposition_vs_measured", "forward_ratio_vs_load", "sweeps_vs_delivered_load",
                     "retained_vs_sidecar_share")
DECOMPOSITION_TITLE = "Measured against decomposed RPS (the CPU left to each cell's app over the calibrated cost)"
VERDICT_COLORS = {"within": "#54a24b", "undecided": "#eeca3b", "miss": "#e45756"}


def decomposition_chart(model: pd.DataFrame) -> alt.TopLevelMixin:
    """Every condition: measured RPS against its decomposition (CPU left from its own measured sidecar CPU /
    calibrated cost), y = x and the 10 % band. A decomposition, not a prediction: the forward chart is that."""
    title = DECOMPOSITION_TITLE
    data = model.dropna(subset=["predicted_rps", "rps"])
    data = data[(data["predicted_rps"] > 0) & (data["rps"] > 0)]
    if data.empty:
        return placeholder(title, "No condition with a calibration in this preset.")
    data = with_flags(data.assign(flags=[model_flags(v) for v in data["flags"]]))
    data["app_name"] = [APP_NAMES.get(a, a) for a in data["app"]]
    low = float(min(data["predicted_rps"].min(), data["rps"].min(), data["rps_lo"].min(skipna=True)
                    if data["rps_lo"].notna().any() else math.inf)) * 0.8
    high = float(max(data["predicted_rps"].max(), data["rps"].max(), data["rps_hi"].max(skipna=True)
                     if data["rps_hi"].notna().any() else 0)) * 1.25
    scale = alt.Scale(type="log", domain=[low, high], nice=False)
    line = pd.DataFrame({"x": [low, high]})
    band = pd.concat([line.assign(y=line["x"] * f, band=name) for f, name in
                      ((1.0, "measured = decomposed"), (0.9, "10 % below / above"), (1.1, "10 % below / above"))])
    guides = alt.Chart(band).mark_line(color="gray").encode(
        x=alt.X("x:Q", scale=scale), y=alt.Y("y:Q", scale=scale), detail="y0:N",
        strokeDash=alt.StrokeDash("band:N", title="Guide", scale=alt.Scale(
            domain=["measured = decomposed", "10 % below / above"], range=[[1, 0], [4, 4]])))
    guides = guides.transform_calculate(y0="datum.y / datum.x")
    color = alt.Color("app_name:N", title="App", scale=alt.Scale(domain=[APP_NAMES[a] for a in APP_COLORS],
                                                                  range=list(APP_COLORS.values())))
    x = alt.X("predicted_rps:Q", title="Decomposed RPS (quota - the cell's own sidecar and other CPU, over the "
                                       "calibrated cost; log)", scale=scale)
    y = alt.Y("rps:Q", title="Measured RPS (log)", scale=scale)
    base = alt.Chart(data).encode(x=x, color=color, tooltip=[
        "condition_id:N", alt.Tooltip("predicted_rps:Q", title="decomposed RPS", format=".0f"),
        alt.Tooltip("rps:Q", format=".0f"), alt.Tooltip("ratio:Q", format=".2f"),
        alt.Tooltip("sidecars_cpu_pct:Q", format=".1f"), alt.Tooltip("available_cpu_pct:Q", format=".1f"),
        "reason:N", "marks:N"])
    layers = [guides,
              base.transform_filter("isValid(datum.rps_lo) && isValid(datum.rps_hi)").mark_rule().encode(
                  y=alt.Y("rps_lo:Q", scale=scale), y2="rps_hi:Q"),
              base.transform_filter("isValid(datum.predicted_rps_lo) && isValid(datum.predicted_rps_hi)")
              .mark_rule().encode(x=alt.X("predicted_rps_lo:Q", scale=scale), x2="predicted_rps_hi:Q", y=y),
              base.mark_point(filled=True, size=40, opacity=0.9).encode(y=y),
              flag_ring(base, y)]
    share = [f"{APP_NAMES.get(app, app)}: {int(group['within'].sum())} of {len(group)} within 10 %"
             for app, group in data.groupby("app")]
    subtitle = ["Reads each cell's own CPU: in a quota-bound cell the ratio is the cost ratio, not a prediction.",
                "Bars: the measured RPS's interval; the decomposition at the calibrated cost's interval ends.",
                "; ".join(share) + "."]
    flagged = flagged_subtitle([data])
    if flagged:
        subtitle.append(flagged)
    return alt.layer(*layers).resolve_scale(x="shared", y="shared").properties(
        width=460, height=400, title=alt.Title(title, subtitle=subtitle))


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
    subtitle = ["Scored cells only (loaded, quota-bound, predicted without their own CPU).",
                "Bars: the ratio at the cost's 95 % interval ends; dashed: 0.9 and 1.1. " + "; ".join(share) + "."]
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

"""The model's charts: the decomposition against the measured RPS, the forward prediction's ratio against load,
the four sweeps against the sidecars' nominal load and against the CPU they delivered, and every sweep's RPS
retained against the share of the quota its sidecars used. Drawn with charts.py's look.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd

from . import reference as refmod
from . import vlspec
from .cells import APP_NAMES, baseline_memory, ratios_over, runs_of, setup_name
from .chart_files import save_chart
from .charts import (
    DELIVERED_TITLE,
    FIGURE_SETUPS,
    HEIGHT,
    LOAD_TITLE,
    MODEL_UNRINGED,
    WIDTH,
    column_of,
    flag_ring,
    figure_setup_parts,
    flagged_subtitle,
    latency_low_end,
    metric_flags,
    ours_and_article,
    placeholder,
    with_flags,
)
from .model import article_delivered_estimate

MODEL_CHART_NAMES = (
    "decomposition_vs_measured",
    "forward_ratio_vs_load",
    "sweeps_vs_delivered_load",
    "retained_vs_sidecar_share",
)
DECOMPOSITION_TITLE = (
    "Measured against decomposed RPS (the CPU left to each cell's app over the calibrated cost)"
)
VERDICT_COLORS = {"within": "#54a24b", "undecided": "#eeca3b", "miss": "#e45756"}
APP_COLORS = {"go": "#4c78a8", "next": "#f58518"}


def model_flags(value) -> str:
    """The flags of a cell that bear on RPS, less those the model's measured sidecar CPU already accounts for."""
    return ",".join(
        c for c in metric_flags(value, "rps").split(",") if c and c not in MODEL_UNRINGED
    )


def decomposition_chart(model: pd.DataFrame) -> vlspec.ChartLike:
    """Every condition: measured RPS against its decomposition (CPU left from its own measured sidecar CPU /
    calibrated cost), y = x and the 10 % band. A decomposition, not a prediction: the forward chart is that."""
    title = DECOMPOSITION_TITLE
    data = model.dropna(subset=["predicted_rps", "rps"])
    data = data[(data["predicted_rps"] > 0) & (data["rps"] > 0)]
    if data.empty:
        return placeholder(title, "No condition with a calibration in this preset.")
    data = with_flags(data.assign(flags=[model_flags(v) for v in data["flags"]]))
    data["app_name"] = [APP_NAMES.get(a, a) for a in data["app"]]
    # A log axis from the points: an interval's low end at or near 0 (a t interval over three runs can reach it)
    # would leave the axis without a scale, or spend decades of it on one bar; such a bar runs to the axis's
    # low end instead, half the lowest point.
    ends = [c for c in ("rps_lo", "predicted_rps_lo") if c in data]
    low = float(min(data["predicted_rps"].min(), data["rps"].min())) * 0.5
    for column in ends:
        data[column] = data[column].where(data[column].isna() | (data[column] > low), low)
    high = (
        float(
            max(
                data["predicted_rps"].max(),
                data["rps"].max(),
                data["rps_hi"].max(skipna=True) if data["rps_hi"].notna().any() else 0,
            )
        )
        * 1.25
    )
    scale = alt.Scale(type="log", domain=[low, high], nice=False)
    line = pd.DataFrame({"x": [low, high]})
    band = pd.concat(
        [
            # Each line keyed by its ratio as given: a ratio computed back from the points (y / x) can differ in
            # the last digit between a line's two ends, and a line whose ends fall in two groups is not drawn.
            line.assign(y=line["x"] * f, band=name, guide_ratio=f)
            for f, name in (
                (1.0, "measured = decomposed"),
                (0.9, "10 % below / above"),
                (1.1, "10 % below / above"),
            )
        ]
    )
    guides = (
        alt.Chart(band)
        .mark_line(color="gray")
        .encode(
            x=alt.X("x:Q", scale=scale),
            y=alt.Y("y:Q", scale=scale),
            detail=alt.Detail("guide_ratio:N"),
            strokeDash=alt.StrokeDash(
                "band:N",
                title="Guide",
                scale=alt.Scale(
                    domain=["measured = decomposed", "10 % below / above"], range=[[1, 0], [4, 4]]
                ),
            ),
        )
    )
    color = alt.Color(
        "app_name:N",
        title="App",
        scale=alt.Scale(domain=[APP_NAMES[a] for a in APP_COLORS], range=list(APP_COLORS.values())),
    )
    x = alt.X(
        "predicted_rps:Q",
        title="Decomposed RPS (quota - the cell's own sidecar and other CPU, over the "
        "calibrated cost; log)",
        scale=scale,
    )
    y = alt.Y("rps:Q", title="Measured RPS (log)", scale=scale)
    base = alt.Chart(data).encode(
        x=x,
        color=color,
        tooltip=[
            alt.Tooltip("condition_id:N"),
            alt.Tooltip("predicted_rps:Q", title="decomposed RPS", format=".0f"),
            alt.Tooltip("rps:Q", format=".0f"),
            alt.Tooltip("ratio:Q", format=".2f"),
            alt.Tooltip("sidecars_cpu_pct:Q", format=".1f"),
            alt.Tooltip("available_cpu_pct:Q", format=".1f"),
            alt.Tooltip("reason:N"),
            alt.Tooltip("marks:N"),
        ],
    )
    layers = [
        guides,
        base.transform_filter("isValid(datum.rps_lo) && isValid(datum.rps_hi)")
        .mark_rule()
        .encode(y=alt.Y("rps_lo:Q", scale=scale), y2=alt.Y2("rps_hi:Q")),
        base.transform_filter("isValid(datum.predicted_rps_lo) && isValid(datum.predicted_rps_hi)")
        .mark_rule()
        .encode(x=alt.X("predicted_rps_lo:Q", scale=scale), x2=alt.X2("predicted_rps_hi:Q"), y=y),
        base.mark_point(filled=True, size=40, opacity=0.9).encode(y=y),
        flag_ring(base, y),
    ]
    share = [
        f"{APP_NAMES.get(app, app)}: {int(group['within'].sum())} of {len(group)} within 10 %"
        for app, group in data.groupby("app")
    ]
    subtitle = [
        "Reads each cell's own CPU: in a quota-bound cell the ratio is the cost ratio, not a prediction.",
        "Bars: the measured RPS's interval; the decomposition at the calibrated cost's interval ends.",
        "; ".join(share) + ".",
    ]
    flagged = flagged_subtitle([data])
    if flagged:
        subtitle.append(flagged)
    return (
        vlspec.layer(*layers)
        .resolve_scale(x="shared", y="shared")
        .properties(width=460, height=400, title=alt.Title(title, subtitle=subtitle))
    )


def forward_ratio_chart(forward: pd.DataFrame) -> alt.TopLevelMixin:
    """Scored cells: measured / forward-predicted RPS against the sidecars' total nominal load, one panel per app and
    vCPU, with the ratio's interval (from the cost's) and the 0.9-1.1 band."""
    title = "Measured / forward-predicted RPS against the sidecars' nominal load"
    data = forward[(forward["role"] == "scored") & forward["ratio"].notna()].copy()
    if data.empty:
        return placeholder(
            title, "No scored cell (no loaded cell at a quota-bound level with a fit)."
        )
    data["setup"] = [f"{APP_NAMES.get(a, a)} {v:g} vCPU" for a, v in zip(data["app"], data["vcpu"])]
    data["sidecars"] = [f"{int(n)} sidecar{'s' if n != 1 else ''}" for n in data["sidecar_count"]]
    data["band_lo"], data["band_hi"], data["one"] = 0.9, 1.1, 1.0
    log = alt.Scale(type="log")
    x = alt.X("total_sidecar_load_pct:Q", title="Sidecars' total nominal load (%)")
    base = alt.Chart().encode(
        x=x,
        tooltip=[
            alt.Tooltip("condition_id:N"),
            alt.Tooltip("predicted_rps:Q", format=".0f"),
            alt.Tooltip("rps:Q", format=".0f"),
            alt.Tooltip("ratio:Q", format=".2f"),
            alt.Tooltip("ratio_lo:Q", format=".2f"),
            alt.Tooltip("ratio_hi:Q", format=".2f"),
            alt.Tooltip("verdict:N"),
            alt.Tooltip("reason:N"),
        ],
    )
    color = alt.Color(
        "verdict:N",
        title="within 10 %",
        scale=alt.Scale(domain=list(VERDICT_COLORS), range=list(VERDICT_COLORS.values())),
    )
    layers = alt.layer(
        alt.Chart()
        .mark_rule(color="gray", strokeDash=[4, 4])
        .encode(y=alt.Y("band_lo:Q", scale=log)),
        alt.Chart()
        .mark_rule(color="gray", strokeDash=[4, 4])
        .encode(y=alt.Y("band_hi:Q", scale=log)),
        alt.Chart().mark_rule(color="gray").encode(y=alt.Y("one:Q", scale=log)),
        base.mark_rule().encode(
            y=alt.Y("ratio_lo:Q", scale=log), y2=alt.Y2("ratio_hi:Q"), color=color
        ),
        base.mark_point(filled=True, size=45).encode(
            y=alt.Y("ratio:Q", title="Measured / predicted RPS (log)", scale=log),
            color=color,
            shape=alt.Shape("sidecars:N", title="Sidecars"),
        ),
        data=data,
    ).properties(width=220, height=180)
    share = []
    for app, group in data.groupby("app"):
        share.append(
            f"{APP_NAMES.get(app, app)}: {int((group['verdict'] == 'within').sum())} of {len(group)} "
            "within 10 %"
        )
    subtitle = [
        "Scored cells only (loaded, quota-bound, predicted without their own CPU).",
        "Bars: the ratio at the cost's 95 % interval ends; dashed: 0.9 and 1.1. "
        + "; ".join(share)
        + ".",
    ]
    return layers.facet(facet=alt.Facet("setup:N", title=None), columns=3).properties(
        title=alt.Title(title, subtitle=subtitle)
    )


# --- the sweeps against the delivered load ------------------------------------------------------------------


def delivered_data(
    summary: pd.DataFrame,
    per_run: pd.DataFrame,
    ref: pd.DataFrame,
    model: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The four sweeps: RPS retained and P99 at each nominal load and at the sidecars' measured CPU.

    Ours: the condition's mean sidecar CPU, with the lowest and highest of its runs;
    the article: its nominal load, and an estimate of what its sidecars used
    (model.article_delivered_estimate). predicted_retained: the model's prediction
    over our own 0 % RPS, where a model frame is given.
    """
    memory = baseline_memory(summary)
    predicted = (
        dict(zip(model["condition_id"], model["predicted_rps"]))
        if model is not None and len(model)
        else {}
    )
    spans = (
        per_run.groupby("condition_id")["sidecars_cpu_pct"].agg(["min", "max"])
        if per_run is not None and len(per_run)
        else pd.DataFrame(columns=["min", "max"])
    )
    frames = []
    for app, vcpu, sc in FIGURE_SETUPS:
        name = setup_name(app, vcpu, sc)
        rows = runs_of(summary, app, vcpu, sc, memory).sort_values("total_sidecar_load_pct")
        base = rows[np.isclose(rows["total_sidecar_load_pct"], 0.0)]
        rps0 = (
            float(base["rps"].iloc[0]) if len(base) and float(base["rps"].iloc[0]) > 0 else math.nan
        )
        if len(rows):
            ids = rows["condition_id"].to_numpy()
            retained = (
                ratios_over(rows, base.iloc[0])
                if not math.isnan(rps0)
                else (np.full(len(rows), math.nan),) * 3
            )
            frames.append(
                pd.DataFrame(
                    {
                        "setup": name,
                        "source": "ours",
                        "nominal": rows["total_sidecar_load_pct"].to_numpy(),
                        "delivered": rows["sidecars_cpu_pct"].fillna(0.0).to_numpy(),
                        "delivered_lo": [spans["min"].get(i, math.nan) for i in ids],
                        "delivered_hi": [spans["max"].get(i, math.nan) for i in ids],
                        "retained": retained[0],
                        "retained_lo": retained[1],
                        "retained_hi": retained[2],
                        "predicted_retained": [predicted.get(i, math.nan) / rps0 for i in ids],
                        "rps": rows["rps"].to_numpy(),
                        "p99": rows["p99_ms"].to_numpy(),
                        "p99_lo": latency_low_end(
                            column_of(rows, "p99_ms_lo")
                        ).to_numpy(),  # log axis
                        "p99_hi": column_of(rows, "p99_ms_hi").to_numpy(),
                        "flags": [model_flags(v) for v in column_of(rows, "flags")],
                    }
                )
            )
        article_rps = refmod.sweep(ref, app, vcpu, sc, "rps")
        article_p99 = refmod.sweep(ref, app, vcpu, sc, "p99_ms")
        loads = sorted(set(article_rps.index) | set(article_p99.index))
        if loads:
            a0 = float(article_rps.loc[0.0]) if 0.0 in article_rps.index else math.nan
            a_rps = [float(article_rps.get(x, math.nan)) for x in loads]
            frames.append(
                pd.DataFrame(
                    {
                        "setup": name,
                        "source": "article",
                        "nominal": loads,
                        "delivered": [article_delivered_estimate(r, a0, vcpu) for r in a_rps],
                        "delivered_lo": math.nan,
                        "delivered_hi": math.nan,
                        "retained": [r / a0 for r in a_rps],
                        "retained_lo": math.nan,
                        "retained_hi": math.nan,
                        "predicted_retained": math.nan,
                        "rps": a_rps,
                        "p99": [float(article_p99.get(x, math.nan)) for x in loads],
                        "p99_lo": math.nan,
                        "p99_hi": math.nan,
                        "flags": "",
                    }
                )
            )
    columns = [
        "setup",
        "source",
        "nominal",
        "delivered",
        "delivered_lo",
        "delivered_hi",
        "retained",
        "retained_lo",
        "retained_hi",
        "predicted_retained",
        "rps",
        "p99",
        "p99_lo",
        "p99_hi",
        "flags",
    ]
    data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    return with_flags(data)


def delivered_load_chart(
    summary: pd.DataFrame,
    per_run: pd.DataFrame,
    ref: pd.DataFrame,
    model: pd.DataFrame | None = None,
    sidecar_burn: str | None = None,
) -> vlspec.ChartLike:
    """Each of the four sweeps twice: against the nominal load (the article's x-axis) and against the CPU the
    sidecars really used; RPS retained (ours and the article's on one scale) and P99."""
    data = delivered_data(summary, per_run, ref, model)
    title = "The sweeps against the sidecars' nominal load and against the CPU they really used"
    if data.empty:
        return placeholder(title, "No run of the four setups in the current matrix.")
    tooltip = [
        alt.Tooltip("setup:N"),
        alt.Tooltip("source:N"),
        alt.Tooltip("nominal:Q", title="nominal load %"),
        alt.Tooltip("delivered:Q", format=".1f", title="sidecars' CPU %"),
        alt.Tooltip("rps:Q", format=".0f"),
        alt.Tooltip("retained:Q", format=".0%"),
        alt.Tooltip("p99:Q", format=".0f"),
        alt.Tooltip("marks:N"),
    ]
    views = (
        ("nominal", LOAD_TITLE, None),
        ("delivered", DELIVERED_TITLE, ("delivered_lo", "delivered_hi")),
    )
    metrics = (
        (
            "retained",
            alt.Y(
                "retained:Q",
                title="RPS retained (share of the 0 % RPS)",
                axis=alt.Axis(format="%"),
                scale=alt.Scale(zero=True),
            ),
            "retained_lo",
            "retained_hi",
        ),
        (
            "p99",
            alt.Y("p99:Q", title="P99 (ms, log)", scale=alt.Scale(type="log")),
            "p99_lo",
            "p99_hi",
        ),
    )
    rows = []
    # One x range per view across the rows, so that the sweeps compare row to row.
    scales = {}
    for view in ("nominal", "delivered"):
        values = data[[view] + ([f"{view}_hi"] if view == "delivered" else [])].to_numpy(
            dtype=float
        )
        top = float(np.nanmax(values)) if np.isfinite(values).any() else 1.0
        bottom = float(np.nanmin(values)) if np.isfinite(values).any() else 0.0
        scales[view] = alt.Scale(domain=[min(0.0, bottom), max(top, 1.0) * 1.05], nice=False)
    for app, name, part in figure_setup_parts(data, rows):
        panels = []
        for metric, y, lo, hi in metrics:
            for view, x_title, span in views:
                x_scale = scales[view]
                x = alt.X(f"{view}:Q", title=x_title, scale=x_scale)
                base = alt.Chart(part).encode(
                    x=x, color=alt.ColorValue(APP_COLORS.get(app, "gray")), tooltip=tooltip
                )
                layers = ours_and_article(base, y, lo, hi)
                if span:
                    layers.append(
                        base.transform_filter(alt.datum.source == "ours")
                        .transform_filter(f"isValid(datum['{span[0]}'])")
                        .mark_rule(strokeWidth=1.5)
                        .encode(
                            x=alt.X(f"{span[0]}:Q", scale=x_scale), x2=alt.X2(f"{span[1]}:Q"), y=y
                        )
                    )
                    if metric == "retained" and part["predicted_retained"].notna().any():
                        layers.append(
                            base.transform_filter(alt.datum.source == "ours")
                            .mark_line(strokeDash=[4, 3], color="gray")
                            .encode(y=alt.Y("predicted_retained:Q"))
                        )
                label = "nominal load" if view == "nominal" else "measured sidecar CPU"
                panels.append(
                    vlspec.layer(*layers).properties(
                        title=f"{name}: {'RPS retained' if metric == 'retained' else 'P99'} vs {label}",
                        width=WIDTH,
                        height=HEIGHT,
                    )
                )
        rows.append(vlspec.hconcat(*panels))
    burn = (
        f" Sidecars burn by {'CPU time' if sidecar_burn == 'cpu' else 'the wall clock'} "
        f"(load.sidecar_burn: {sidecar_burn})."
        if sidecar_burn
        else ""
    )
    subtitle = [
        "Left of each row: the nominal load (the article's x-axis); right: what the sidecars really used, our "
        "horizontal bars the lowest and highest of the repetitions. Hollow diamonds: the article, placed at an "
        "estimate of its sidecars' CPU (quota x (1 - RPS / its 0 % RPS)). Dashed grey: the model's prediction."
        + burn
    ]
    flagged = flagged_subtitle([data])
    if flagged:
        subtitle.append(flagged)
    return (
        vlspec.vconcat(*rows)
        .resolve_scale(shape="shared", stroke="shared")
        .properties(title=alt.Title(title, subtitle=subtitle))
    )


def budget_line_data(summary: pd.DataFrame) -> pd.DataFrame:
    """Every sweep of the matrix (app, vCPU, sidecar count at the baseline memory, with its 0 % load cell):
    RPS retained against the share of the quota the sidecars really used."""
    memory = baseline_memory(summary)
    rows = summary[(summary["memory_mb"] == memory) & (summary["sidecar_count"] > 0)]
    frames = []
    for (app, vcpu, sc), group in rows.groupby(["app", "vcpu", "sidecar_count"]):
        base = group[np.isclose(group["total_sidecar_load_pct"], 0.0)]["rps"]
        if not len(base) or not float(base.iloc[0]) > 0:
            continue
        rps0 = float(base.iloc[0])
        frames.append(
            pd.DataFrame(
                {
                    "app": APP_NAMES.get(app, app),
                    "setup": setup_name(app, vcpu, sc),
                    "condition_id": group["condition_id"].to_numpy(),
                    "nominal": group["total_sidecar_load_pct"].to_numpy(),
                    "sidecar_share": group["sidecars_cpu_pct"].fillna(0.0).to_numpy()
                    / (100.0 * vcpu),
                    "retained": group["rps"].to_numpy() / rps0,
                    "lo": column_of(group, "rps_lo").to_numpy() / rps0,
                    "hi": column_of(group, "rps_hi").to_numpy() / rps0,
                    "source": "ours",
                    "flags": [model_flags(v) for v in column_of(group, "flags")],
                }
            )
        )
    columns = [
        "app",
        "setup",
        "condition_id",
        "nominal",
        "sidecar_share",
        "retained",
        "lo",
        "hi",
        "source",
        "flags",
    ]
    data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    return with_flags(data)


def budget_line_chart(summary: pd.DataFrame, sidecar_burn: str | None = None) -> vlspec.ChartLike:
    """All sweeps on one axis: what share of the quota the sidecars used, against the share of RPS kept."""
    data = budget_line_data(summary)
    title = "RPS retained against the share of the quota the sidecars really used, every sweep"
    if data.empty:
        return placeholder(title, "No sweep with a 0 % load cell and sidecars in this matrix.")
    top = max(float(data["sidecar_share"].max()), 0.05) * 1.1
    guide = pd.DataFrame({"sidecar_share": [0.0, top], "retained": [1.0, 1.0 - top]})
    x = alt.X(
        "sidecar_share:Q",
        title="Sidecars' measured CPU / the quota",
        axis=alt.Axis(format="%"),
        scale=alt.Scale(domain=[0, top], nice=False),
    )
    y = alt.Y(
        "retained:Q",
        title="RPS retained (share of the 0 % RPS)",
        axis=alt.Axis(format="%"),
        scale=alt.Scale(zero=True),
    )
    panels = []
    for app, part in data.groupby("app"):
        base = alt.Chart(part).encode(
            x=x,
            color=alt.Color("setup:N", title="Setup"),
            tooltip=[
                alt.Tooltip("setup:N"),
                alt.Tooltip("condition_id:N"),
                alt.Tooltip("nominal:Q", title="nominal load %"),
                alt.Tooltip("sidecar_share:Q", format=".1%"),
                alt.Tooltip("retained:Q", format=".0%"),
                alt.Tooltip("marks:N"),
            ],
        )
        line = alt.Chart(guide).mark_line(color="gray", strokeDash=[4, 4]).encode(x=x, y=y)
        panels.append(
            vlspec.layer(
                line,
                base.transform_filter("isValid(datum.lo) && isValid(datum.hi)")
                .mark_rule()
                .encode(y=alt.Y("lo:Q"), y2=alt.Y2("hi:Q")),
                base.mark_point(filled=True, size=40, opacity=0.9).encode(y=y),
                flag_ring(base, y),
            ).properties(title=app, width=360, height=300)
        )
    burn = (
        f" Sidecars burn by {'CPU time' if sidecar_burn == 'cpu' else 'the wall clock'}."
        if sidecar_burn
        else ""
    )
    subtitle = [
        "Dashed: 1 - sidecar share, what a CPU-bound app at a fixed cost per request keeps. Bars: 95 % RPS "
        "intervals over the 0 % RPS." + burn
    ]
    flagged = flagged_subtitle([data])
    if flagged:
        subtitle.append(flagged)
    return (
        vlspec.hconcat(*panels)
        .resolve_scale(color="shared")
        .properties(title=alt.Title(title, subtitle=subtitle))
    )


def write_model_charts(
    model: pd.DataFrame,
    forward: pd.DataFrame,
    summary: pd.DataFrame,
    per_run: pd.DataFrame,
    ref: pd.DataFrame,
    out_dir: str | Path,
    sidecar_burn: str | None = None,
    formats: Iterable[str] = ("html", "png", "svg"),
) -> list[Path]:
    """The model's charts (MODEL_CHART_NAMES). The sweeps' dashed line is the forward prediction."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Each made when the one before is handed to be drawn (save_chart): the drawing goes on beside the making.
    makers = {
        "decomposition_vs_measured": lambda: decomposition_chart(model),
        "forward_ratio_vs_load": lambda: forward_ratio_chart(forward),
        "sweeps_vs_delivered_load": lambda: delivered_load_chart(
            summary, per_run, ref, forward, sidecar_burn
        ),
        "retained_vs_sidecar_share": lambda: budget_line_chart(summary, sidecar_burn),
    }
    written = []
    for name, make in makers.items():
        written += save_chart(make(), out_dir, name, tuple(formats))
    return written

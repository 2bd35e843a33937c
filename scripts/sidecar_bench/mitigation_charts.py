"""The knobs chart: each knob's RPS and P99 as a ratio to the article's settings, per setup and sidecar load.

Data: summary -> cells.knob_rows (the mitigations table's rows) -> knobs_chart. Apart from mitigations.py, the
table: editing the chart remakes the charts only, and editing the table the tables only.
"""

from __future__ import annotations

import math

import altair as alt
import pandas as pd

from . import vlspec
from .cells import ARTICLE_SETTINGS, knob_rows, setup_name
from .charts import placeholder

LOAD_LEVELS = ("idle sidecars", "middle load", "highest load")
LOAD_COLORS = ("#9e9e9e", "#f58518", "#d62728")


def has_knobs(summary: pd.DataFrame) -> bool:
    """Whether the set measured a knob (or the task layout) beside the article's settings."""
    return not knobs_data(summary).empty


def knobs_data(summary: pd.DataFrame) -> pd.DataFrame:
    """The mitigations table's knob rows (the article's settings are the ratios' 1), with each setup's loads
    named by their rank (idle, middle, highest: the setups' loads differ) and whether each ratio's 95 %
    interval excludes 1."""
    data = knob_rows(summary)
    data = data[data["knobs"] != ARTICLE_SETTINGS].copy()
    if data.empty:
        return data
    setup_keys = ["app", "vcpu", "memory_mb", "sidecar_count"]
    rank = data.groupby(setup_keys)["total_sidecar_load_pct"].rank(method="dense").astype(int) - 1
    levels = data.groupby(setup_keys)["total_sidecar_load_pct"].transform("nunique")
    data["load_level"] = [
        LOAD_LEVELS[0] if load == 0 else LOAD_LEVELS[2] if r == n - 1 else LOAD_LEVELS[1]
        for load, r, n in zip(data["total_sidecar_load_pct"], rank, levels)
    ]
    data["setup"] = [
        setup_name(r["app"], float(r["vcpu"]), int(r["sidecar_count"])) for _, r in data.iterrows()
    ]
    for prefix in ("rps_vs_article_settings", "p99_vs_article_settings"):
        lo, hi = data[f"{prefix}_lo"].astype(float), data[f"{prefix}_hi"].astype(float)
        data[f"{prefix}_clear"] = [
            math.isfinite(a) and math.isfinite(b) and not a <= 1 <= b for a, b in zip(lo, hi)
        ]
    return data.reset_index(drop=True)


def knobs_chart(summary: pd.DataFrame) -> vlspec.ChartLike:
    """Per setup (a row): each knob's RPS ratio (left) and P99 ratio (right) to the article's settings at the
    same load, one colour per load; bars: 95 % intervals with both sides' run-to-run variation; filled points:
    intervals that exclude 1. Knobs in the order of their mean RPS ratio over the setups' loads."""
    data = knobs_data(summary)
    title = "Knobs against CFS throttling: each beside the article's settings"
    if data.empty:
        return placeholder(title, "No knob condition was measured beside the article's settings.")
    setups = list(dict.fromkeys(data["setup"]))
    order = (
        data.groupby("knobs")["rps_vs_article_settings"]
        .mean()
        .sort_values(ascending=False)
        .index.tolist()
    )
    levels = [level for level in LOAD_LEVELS if level in set(data["load_level"])]
    color = alt.Color(
        "load_level:N",
        title="Sidecars' load",
        legend=alt.Legend(orient="top"),
        scale=alt.Scale(domain=levels, range=[LOAD_COLORS[LOAD_LEVELS.index(v)] for v in levels]),
    )
    y = alt.Y("knobs:N", title=None, sort=order)
    offset = alt.YOffset("load_level:N", sort=levels)
    tooltip = [
        alt.Tooltip("setup:N"),
        alt.Tooltip("knobs:N"),
        alt.Tooltip("total_sidecar_load_pct:Q", title="total load %"),
        alt.Tooltip("sidecars_cpu_pct:Q", title="sidecars' CPU %", format=".1f"),
        alt.Tooltip("rps:Q", format=".0f"),
        alt.Tooltip("rps_vs_article_settings:Q", title="RPS ratio", format=".2f"),
        alt.Tooltip("rps_vs_article_settings_lo:Q", title="RPS ratio lo", format=".2f"),
        alt.Tooltip("rps_vs_article_settings_hi:Q", title="RPS ratio hi", format=".2f"),
        alt.Tooltip("p99_ms:Q", title="P99 ms", format=".1f"),
        alt.Tooltip("p99_vs_article_settings:Q", title="P99 ratio", format=".2f"),
        alt.Tooltip("throttled_share:Q", title="throttled periods", format=".1%"),
    ]
    ticks = [0.1, 0.2, 0.5, 1, 2, 5, 10, 20]

    def panel(rows: pd.DataFrame, prefix: str, axis_title: str, labels: bool) -> vlspec.Compound:
        scale = alt.Scale(type="log")
        axis = alt.Axis(values=ticks, format="~g")
        y_here = (
            y
            if labels
            else alt.Y("knobs:N", title=None, sort=order, axis=alt.Axis(labels=False, ticks=False))
        )
        base = alt.Chart(rows).encode(y=y_here, yOffset=offset, color=color, tooltip=tooltip)
        valid = f"isValid(datum.{prefix}_lo) && isValid(datum.{prefix}_hi) && datum.{prefix}_lo > 0"
        return vlspec.layer(
            alt.Chart(rows)
            .transform_aggregate(rows="count()")
            .mark_rule(color="#555", strokeDash=[4, 3])
            .encode(x=alt.datum(1.0, scale=scale)),
            base.transform_filter(valid)
            .mark_rule(strokeWidth=1.5)
            .encode(
                x=alt.X(f"{prefix}_lo:Q", title=axis_title, scale=scale, axis=axis),
                x2=alt.X2(f"{prefix}_hi:Q"),
            ),
            base.mark_point(size=45, opacity=1, strokeWidth=1.5, shape="circle").encode(
                x=alt.X(f"{prefix}:Q", title=axis_title, scale=scale, axis=axis),
                fill=alt.condition(f"datum.{prefix}_clear", color, alt.value("white")),
            ),
        ).properties(width=260, height=alt.Step(9))

    rows = []
    for setup in setups:
        part = data[data["setup"] == setup]
        rows.append(
            vlspec.hconcat(
                panel(part, "rps_vs_article_settings", "RPS / the article's settings (log)", True),
                panel(part, "p99_vs_article_settings", "P99 / the article's settings (log)", False),
                spacing=12,
            ).properties(title=alt.Title(setup, anchor="middle", fontSize=13))
        )
    subtitle = [
        "Each knob at the same app, vCPU, sidecars and load as the article's settings (period 100 ms, no "
        "burst, a quota, any CPU, the runtimes' defaults); dashed line: no change.",
        "Bars: 95 % intervals with both conditions' run-to-run variation; filled points: the interval "
        "excludes 1. Right of 1 is better for RPS, left of 1 for P99.",
    ]
    return vlspec.vconcat(*rows, spacing=24).properties(title=alt.Title(title, subtitle=subtitle))

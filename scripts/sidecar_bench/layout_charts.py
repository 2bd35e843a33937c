"""The layouts chart: each layout's retention and slow-response share against the sidecars' load.

Data: summary -> layouts.layouts_data -> layouts_chart. Kept apart from layouts.py so that the tables do not
depend on the charts' code (editing a chart remakes charts only).
"""

from __future__ import annotations

import altair as alt
import pandas as pd

from .cells import baseline_memory
from .charts import LOAD_SCALE, LOAD_TITLE, placeholder
from .layouts import LAYOUT_COLORS, LAYOUT_NAMES, PROCESS, TASK, layouts_data, setup_text


def layouts_chart(summary: pd.DataFrame) -> alt.TopLevelMixin:
    """RPS retained (top) and the share of responses slower than one period (bottom) against the sidecars' total
    load, one column per setup, one colour per layout; bars: 95 % intervals of the retention."""
    data = layouts_data(summary)
    title = "One container or an ECS task: what the sidecars cost the app in each layout"
    if data.empty:
        return placeholder(title, "No setup of this set was measured in both layouts.")
    memory = baseline_memory(summary)
    data = data.assign(
        setup=[
            setup_text(
                r["app"],
                r["vcpu"],
                r["sidecar_count"],
                None if r["memory_mb"] == memory else r["memory_mb"],
            )
            for _, r in data.iterrows()
        ],
        layout_name=data["layout"].map(LAYOUT_NAMES),
        slow_pct=100 * data["slow_1p_share"],
    )
    setups = list(dict.fromkeys(data["setup"]))
    color = alt.Color(
        "layout_name:N",
        title="Layout",
        scale=alt.Scale(
            domain=[LAYOUT_NAMES[k] for k in (PROCESS, TASK)],
            range=[LAYOUT_COLORS[k] for k in (PROCESS, TASK)],
        ),
        legend=alt.Legend(orient="top"),
    )
    x = alt.X("total_sidecar_load_pct:Q", title=LOAD_TITLE, scale=LOAD_SCALE)
    tooltip = [
        alt.Tooltip("setup:N"),
        alt.Tooltip("layout_name:N"),
        alt.Tooltip("total_sidecar_load_pct:Q", title="load %"),
        alt.Tooltip("rps:Q", format=".0f"),
        alt.Tooltip("retained:Q", format=".0%"),
        alt.Tooltip("retained_lo:Q", format=".0%"),
        alt.Tooltip("retained_hi:Q", format=".0%"),
        alt.Tooltip("task_vs_process:Q", title="task / one container", format=".2f"),
        alt.Tooltip("slow_pct:Q", title="> 1 period %", format=".2f"),
        alt.Tooltip("app_cpu_pct:Q", title="app CPU %", format=".1f"),
    ]
    base = alt.Chart().encode(x=x, color=color, tooltip=tooltip)
    column = alt.Column("setup:N", title=None, sort=setups, header=alt.Header(labelFontSize=12))
    y = alt.Y(
        "retained:Q",
        title="RPS retained (share of 0 % load)",
        axis=alt.Axis(format="%"),
        scale=alt.Scale(zero=True),
    )
    retained = (
        alt.layer(
            base.mark_line(),
            base.transform_filter("isValid(datum.retained_lo) && isValid(datum.retained_hi)")
            .mark_rule(strokeWidth=1.5)
            .encode(
                y=alt.Y("retained_lo:Q", title="RPS retained (share of 0 % load)"),
                y2=alt.Y2("retained_hi:Q"),
            ),
            base.mark_point(filled=True, size=35, opacity=1),
            data=data,
        )
        .encode(y=y)
        .properties(width=200, height=170)
        .facet(column=column)
        .resolve_scale(x="independent")
    )
    slow_y = alt.Y("slow_pct:Q", title="Responses > 1 CFS period (%)", scale=alt.Scale(zero=True))
    slow = (
        alt.layer(base.mark_line(), base.mark_point(filled=True, size=35, opacity=1), data=data)
        .encode(y=slow_y)
        .properties(width=200, height=140)
        .facet(column=column)
        .resolve_scale(x="independent")
    )
    subtitle = [
        "Each layout's RPS over its own 0 % load; bars: 95 % interval with both conditions' run-to-run "
        "variation. Below: the share of responses slower than one CFS period.",
        "One container: the article's design. ECS task: a task cgroup with the quota and a container per "
        "role, every container at ECS's default weight.",
    ]
    return alt.vconcat(retained, slow).properties(title=alt.Title(title, subtitle=subtitle))

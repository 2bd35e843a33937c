"""The sidecar burns' chart: the main figure's four sweeps with wall-clock (the article's) and CPU-time sidecars
(load.sidecar_burn), drawn with charts.py's look. The tables are burn_tables.py's.
"""

from __future__ import annotations

import altair as alt
import numpy as np
import pandas as pd

from . import vlspec
from .cells import baseline_memory, setup_name
from .charts import (
    DELIVERED_TITLE,
    FIGURE_SETUPS,
    HEIGHT,
    LOAD_SCALE,
    LOAD_TITLE,
    MODEL_UNRINGED,
    WIDTH,
    flag_ring,
    latency_low_end,
    metric_flags,
    placeholder,
    with_flags,
)

BURN_COLORS = {"wall": "#4c78a8", "cpu": "#f58518"}


def burn_comparison_chart(long: pd.DataFrame) -> vlspec.ChartLike:
    """The four sweeps of the main figure with wall-clock and CPU-time sidecars: RPS retained, P99, and the
    sidecars' measured CPU, against the nominal load."""
    title = (
        "Sidecars that burn what they claim: wall-clock (the article's) against CPU-time sidecars"
    )
    if long.empty:
        return placeholder(title, "No condition measured under both sidecar_burn settings.")
    data = with_flags(
        long.assign(
            flags=[
                ",".join(
                    c for c in metric_flags(v, "p99_ms").split(",") if c and c not in MODEL_UNRINGED
                )
                for v in long["flags"]
            ],
            p99_ms_lo=latency_low_end(long["p99_ms_lo"]),  # P99 goes on a log axis
        )
    )
    color = alt.Color(
        "burn:N",
        title="load.sidecar_burn",
        scale=alt.Scale(domain=list(BURN_COLORS), range=list(BURN_COLORS.values())),
    )
    x = alt.X("total_sidecar_load_pct:Q", title=LOAD_TITLE, scale=LOAD_SCALE)
    panels_for = (
        (
            "retained",
            alt.Y(
                "retained:Q",
                title="RPS retained",
                axis=alt.Axis(format="%"),
                scale=alt.Scale(zero=True),
            ),
            None,
        ),
        (
            "p99_ms",
            alt.Y("p99_ms:Q", title="P99 (ms, log)", scale=alt.Scale(type="log")),
            ("p99_ms_lo", "p99_ms_hi"),
        ),
        (
            "sidecars_cpu_pct",
            alt.Y("sidecars_cpu_pct:Q", title=DELIVERED_TITLE, scale=alt.Scale(zero=True)),
            None,
        ),
    )
    rows = []
    for app, vcpu, sc in FIGURE_SETUPS:
        name = setup_name(app, vcpu, sc)
        part = data[
            (data["app"] == app)
            & np.isclose(data["vcpu"], vcpu)
            & (data["sidecar_count"] == sc)
            & (data["memory_mb"] == baseline_memory(long))
        ]
        if part.empty:
            continue
        base = alt.Chart(part).encode(
            x=x,
            color=color,
            tooltip=[
                alt.Tooltip("condition_id:N"),
                alt.Tooltip("burn:N"),
                alt.Tooltip("sidecars_cpu_pct:Q", format=".1f"),
                alt.Tooltip("retained:Q", format=".0%"),
                alt.Tooltip("p99_ms:Q", format=".0f"),
                alt.Tooltip("marks:N"),
            ],
        )
        panels = []
        for column, y, span in panels_for:
            layers = [
                base.mark_line().encode(y=y),
                base.mark_point(filled=True, size=35).encode(y=y),
            ]
            if span:
                layers.append(
                    base.transform_filter(f"isValid(datum['{span[0]}'])")
                    .mark_rule()
                    .encode(y=alt.Y(f"{span[0]}:Q"), y2=alt.Y2(f"{span[1]}:Q"))
                )
            layers.append(flag_ring(base, y))
            panels.append(
                vlspec.layer(*layers).properties(
                    title=f"{name}: {y.to_dict().get('title')}", width=WIDTH, height=HEIGHT
                )
            )
        rows.append(vlspec.hconcat(*panels))
    if not rows:
        return placeholder(
            title, "None of the main figure's four sweeps was measured under both settings."
        )
    return (
        vlspec.vconcat(*rows)
        .resolve_scale(color="shared")
        .properties(
            title=alt.Title(
                title,
                subtitle=[
                    "The same conditions measured with sidecars that count their busy time by the wall clock and by CPU time; "
                    "bars: 95 % P99 intervals."
                ],
            )
        )
    )

"""The task's two layouts side by side (docs/method.md, "The task topology").

The article's process layout (one container: the app and its sidecars processes of one cgroup) against ECS's task
layout (a task cgroup with the quota, one container per role under it) at the same app, vCPU, memory, sidecars and
load, every container at ECS's default weight. Each layout's retention is over its own no-load condition, so the
two curves say whether splitting the task into containers changes what the sidecars cost; the task / process RPS
ratio says whether it changes the app's speed at all. Weights and GOMAXPROCS are knobs of their own: the
mitigations table sets each beside the process layout.

Data: summary -> layouts_data (one row per setup, load and layout) -> layouts_table here and
layout_charts.layouts_chart.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .cells import (
    NO_RATIO,
    baseline_memory,
    between,
    cell_codes,
    codes_of,
    knob_labels,
    measured_only,
    ratios_over,
    setup_name,
)
from .conditions import TASK_TOPOLOGY_LABEL
from .repstats import as_float
from .table_format import (
    DEFINITIONS,
    Table,
    fmt,
    load_text,
    measured,
    missing_note,
    ratio_cell,
    ratio_text,
)

PROCESS, TASK = "process", "task"
LAYOUT_NAMES = {PROCESS: "one container (the article's)", TASK: "ECS task (a container per role)"}
LAYOUT_COLORS = {PROCESS: "#4c78a8", TASK: "#e45756"}
SETUP_KEYS = ["app", "vcpu", "memory_mb", "sidecar_count"]
COLUMNS = SETUP_KEYS + [
    "total_sidecar_load_pct",
    "layout",
    "rps",
    "rps_lo",
    "rps_hi",
    "retained",
    "retained_lo",
    "retained_hi",
    "task_vs_process",
    "task_vs_process_lo",
    "task_vs_process_hi",
    "p99_ms",
    "p99_ms_lo",
    "p99_ms_hi",
    "slow_1p_share",
    "app_cpu_pct",
    "sidecars_cpu_pct",
    "throttled_share",
    "repeats",
    "flags",
]


def _layout_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """The conditions at ECS's default weights in either layout: knobs "" (process) or "task topology" alone."""
    rows = measured_only(summary)
    if rows.empty or "knobs" not in rows.columns:
        return rows.iloc[0:0].assign(layout=pd.Series(dtype=str))
    knobs = knob_labels(rows["knobs"])
    layout = pd.Series(
        np.where(knobs == TASK_TOPOLOGY_LABEL, TASK, np.where(knobs == "", PROCESS, "")),
        index=rows.index,
    )
    return rows.assign(layout=layout)[layout != ""]


def has_task_layout(summary: pd.DataFrame) -> bool:
    """Whether a summary holds task-layout conditions at the default weights (then its set gets the layouts)."""
    rows = _layout_rows(summary)
    return bool((rows["layout"] == TASK).any())


def _value(row: pd.Series, name: str) -> float:
    return as_float(row.get(name))


def layouts_data(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per setup, load and layout, for every setup measured in both layouts: RPS, retention over the
    layout's own no-load condition, the task / process RPS ratio at the same load (on the task rows), P99, the
    share slower than one period, each role's CPU and the throttled share. Ratios carry both sides' run-to-run
    uncertainty (stats.condition_ratio)."""
    rows = _layout_rows(summary)
    records = []
    for key, setup in rows.groupby(SETUP_KEYS, sort=True):
        if set(setup["layout"]) != {PROCESS, TASK}:
            continue
        setup = setup.sort_values("total_sidecar_load_pct")
        retained = {}
        for layout, group in setup.groupby("layout"):
            base = group[np.isclose(group["total_sidecar_load_pct"], 0.0)]
            if len(base) == 1 and _value(base.iloc[0], "rps") > 0:
                retained[layout] = dict(zip(group.index, zip(*ratios_over(group, base.iloc[0]))))
        for _, row in setup.iterrows():
            same_load = setup[
                np.isclose(setup["total_sidecar_load_pct"], row["total_sidecar_load_pct"])
            ]
            process = same_load[same_load["layout"] == PROCESS]
            vs = between(row.to_frame().T, process, "rps") if row["layout"] == TASK else NO_RATIO
            kept = retained.get(row["layout"], {}).get(row.name, (math.nan,) * 3)
            records.append(
                {
                    **dict(zip(SETUP_KEYS, key)),
                    "total_sidecar_load_pct": row["total_sidecar_load_pct"],
                    "layout": row["layout"],
                    "rps": _value(row, "rps"),
                    "rps_lo": _value(row, "rps_lo"),
                    "rps_hi": _value(row, "rps_hi"),
                    "retained": kept[0],
                    "retained_lo": kept[1],
                    "retained_hi": kept[2],
                    "task_vs_process": vs.value,
                    "task_vs_process_lo": vs.lo,
                    "task_vs_process_hi": vs.hi,
                    "p99_ms": _value(row, "p99_ms"),
                    "p99_ms_lo": _value(row, "p99_ms_lo"),
                    "p99_ms_hi": _value(row, "p99_ms_hi"),
                    "slow_1p_share": _value(row, "slow_1p_share"),
                    "app_cpu_pct": _value(row, "app_cpu_pct"),
                    "sidecars_cpu_pct": _value(row, "sidecars_cpu_pct"),
                    "throttled_share": _value(row, "throttled_share"),
                    "repeats": _value(row, "repeats"),
                    "flags": "" if pd.isna(row.get("flags")) else str(row.get("flags", "")),
                }
            )
    return pd.DataFrame(records, columns=COLUMNS)


def setup_text(app: str, vcpu: float, sidecar_count: int, memory_mb: int | None = None) -> str:
    """cells.setup_name, with the memory limit where it is not the set's usual one."""
    text = setup_name(app, float(vcpu), int(sidecar_count))
    return text if memory_mb is None else f"{text}, {int(memory_mb)} MB"


def layouts_table(summary: pd.DataFrame) -> Table:
    """layouts.md: each setup and load in both layouts, one row each: RPS, retained, task / process, P99, the share
    slower than one period, each role's CPU and the throttled periods."""
    data = layouts_data(summary)
    memory = baseline_memory(summary) if not summary.empty else None
    seen: set[str] = set()
    for flags in data["flags"]:
        seen |= cell_codes(codes_of(flags), "rps") | cell_codes(codes_of(flags), "p99_ms")
    display = pd.DataFrame(
        {
            "Setup": [
                setup_text(
                    r["app"],
                    r["vcpu"],
                    r["sidecar_count"],
                    None if r["memory_mb"] == memory else r["memory_mb"],
                )
                for _, r in data.iterrows()
            ],
            "Total load": [
                load_text(r["total_sidecar_load_pct"], r["sidecars_cpu_pct"])
                for _, r in data.iterrows()
            ],
            "Layout": data["layout"].map(LAYOUT_NAMES),
            "RPS": [
                measured(r["rps"], r["rps_lo"], r["rps_hi"], codes_of(r["flags"]), "rps", 0)
                for _, r in data.iterrows()
            ],
            "RPS retained": [
                ratio_text(r["retained"], r["retained_lo"], r["retained_hi"])
                for _, r in data.iterrows()
            ],
            "Task / one container": [
                ratio_cell(r["task_vs_process"], r["task_vs_process_lo"], r["task_vs_process_hi"])
                if r["layout"] == TASK
                else ""
                for _, r in data.iterrows()
            ],
            "P99 ms": [
                measured(
                    r["p99_ms"], r["p99_ms_lo"], r["p99_ms_hi"], codes_of(r["flags"]), "p99_ms", 1
                )
                for _, r in data.iterrows()
            ],
            "> 1 period %": [fmt(100 * v, 2) for v in data["slow_1p_share"]],
            "App CPU %": [fmt(v, 1) for v in data["app_cpu_pct"]],
            "Throttled periods %": [fmt(100 * v, 1) for v in data["throttled_share"]],
        }
    )
    notes = [
        DEFINITIONS,
        "Layouts: one container - the app and its sidecars are processes of one container with the quota "
        "(the article's design); ECS task - a task cgroup holds the quota and each role runs in a container "
        "of its own under it, every container at ECS's default weight (2 CPU shares). RPS retained: over the "
        "same layout's 0 % load; Task / one container: the task layout's RPS over the one container's at the "
        "same load, * when its interval excludes 1 (a difference shown at 95 %).",
        "> 1 period: the share of responses slower than one CFS period. App CPU and total load (delivered): "
        "each role's CPU, from its process tree (one container) or its container's cgroup (ECS task). "
        "Throttled periods: the quota's cgroup's nr_throttled / nr_periods. Weights and GOMAXPROCS: "
        "mitigations.md.",
    ]
    if data.empty:
        notes.append("No setup of this set was measured in both layouts at the default weights.")
    return Table(
        "layouts",
        "The task's layouts side by side: one container against ECS's task",
        data,
        display,
        notes + missing_note(display[["RPS"]]),
        seen,
    )

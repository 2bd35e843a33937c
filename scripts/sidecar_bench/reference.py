"""The article's published numbers (workflow/reference/article-results.csv), for lookups.

Long form: table, app, vcpu, sidecar_count, total_sidecar_load_pct, memory_mb,
metric, value. total_sidecar_load_pct is a number, or a bucket such as "5-15"
in the rps_grid rows; it is kept as text and also parsed to `load` (NaN for
buckets) so both kinds of cell can be looked up.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

# Per-sidecar loads of the article's full grid; its RPS-grid buckets hold total loads sidecar_count x these.
GRID_SIDECAR_LOADS = (0.0, 5.0, 15.0, 25.0, 35.0)
# Ranges of total sidecar load (inclusive) by which the article's full RPS tables group their cells:
# (label, low, high); the labels are the rps_grid rows' total_sidecar_load_pct.
LOAD_BUCKETS = (
    ("0", 0.0, 0.0),
    ("5-15", 5.0, 15.0),
    ("25-45", 25.0, 45.0),
    ("50-75", 50.0, 75.0),
    ("105", 105.0, 105.0),
)

COLUMNS = [
    "table",
    "app",
    "vcpu",
    "sidecar_count",
    "total_sidecar_load_pct",
    "memory_mb",
    "metric",
    "value",
]


def load_reference(path: str | Path) -> pd.DataFrame:
    frame = pd.read_csv(path, dtype={"total_sidecar_load_pct": str})
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{path}: missing column(s) {', '.join(missing)}; expected {', '.join(COLUMNS)}"
        )
    frame["vcpu"] = frame["vcpu"].astype(float)
    frame["sidecar_count"] = frame["sidecar_count"].astype(int)
    frame["memory_mb"] = frame["memory_mb"].astype(int)
    frame["value"] = frame["value"].astype(float)
    frame["load"] = pd.to_numeric(frame["total_sidecar_load_pct"], errors="coerce")
    return frame


def _matching(ref: pd.DataFrame, table: str, where: dict) -> np.ndarray:
    """A boolean mask of the rows of one article table matching the given column values (vcpu and
    load compared as floats): one numpy mask, as the chained pandas filters chose but at a fraction
    of their cost (the tables ask for hundreds of cells)."""
    mask = ref["table"].to_numpy() == table
    for column, value in where.items():
        values = ref[column].to_numpy()
        if column in ("vcpu", "load"):
            mask &= np.abs(values.astype("float64") - float(value)) < 1e-9
        else:
            mask &= values == value
    return mask


def select(ref: pd.DataFrame, table: str, **where) -> pd.DataFrame:
    """Rows of one article table matching the given column values (vcpu compared as float)."""
    return ref[_matching(ref, table, where)]


def value(ref: pd.DataFrame, table: str, metric: str, **where) -> float:
    """One published number, or NaN if the article has none for that cell."""
    found = np.flatnonzero(_matching(ref, table, {"metric": metric, **where}))
    return float(ref["value"].to_numpy()[found[0]]) if len(found) else math.nan


def sweep(
    ref: pd.DataFrame,
    app: str,
    vcpu: float,
    sidecar_count: int,
    metric: str = "p99_ms",
    memory_mb: int = 2048,
) -> pd.Series:
    """The article's values of one metric along total load for one setup, from every table that has
    them (load sweeps, P99 grid, change points; for RPS also the 3-sidecar grid buckets that are one load).

    Index: total load %, values: the metric. Where tables repeat a cell, the load-sweep value wins.
    """
    parts = []
    base = ref[
        (ref["app"] == app)
        & ((ref["vcpu"] - float(vcpu)).abs() < 1e-9)
        & (ref["sidecar_count"] == sidecar_count)
        & (ref["memory_mb"] == memory_mb)
    ]
    order = {"load_sweep": 0, "p99_grid": 1, "change_point": 2, "rps_grid": 3}
    for table, rows in base.groupby("table"):
        if table not in order:
            continue
        if table == "change_point" and metric == "p99_ms":
            rows = rows[rows["metric"].isin(["p99_ms_before", "p99_ms_after"])]
        else:
            rows = rows[rows["metric"] == metric]
        if table == "rps_grid":
            rows = rows.assign(
                load=[_single_grid_load(b, sidecar_count) for b in rows["total_sidecar_load_pct"]]
            )
        rows = rows.dropna(subset=["load"])
        parts.append(rows.assign(rank=order[table]))
    if not parts:
        return pd.Series(dtype=float)
    rows = pd.concat(parts).sort_values(["load", "rank"]).drop_duplicates("load")
    return pd.Series(rows["value"].to_numpy(), index=rows["load"].to_numpy(), name=metric)


def bucket_bounds(label: object) -> tuple[float, float]:
    """The total loads (inclusive) an RPS-grid bucket holds: "25-45" -> (25, 45), "105" -> (105, 105);
    (NaN, NaN) for a label that names no bucket."""
    for name, low, high in LOAD_BUCKETS:
        if str(label) == name:
            return low, high
    return math.nan, math.nan


def _single_grid_load(bucket: str, sidecar_count: int) -> float:
    """The one grid total load inside an RPS-grid bucket ("25-45" -> 45 for 3 sidecars), else NaN."""
    low, high = bucket_bounds(bucket)
    inside = sorted(
        {sidecar_count * x for x in GRID_SIDECAR_LOADS if low <= sidecar_count * x <= high}
    )
    return inside[0] if len(inside) == 1 else math.nan


def change_points(ref: pd.DataFrame) -> pd.DataFrame:
    """The article's breaking points: one row per setup with before/after load and P99."""
    rows = ref[ref["table"] == "change_point"]
    out = []
    for (app, vcpu, sc, mem), group in rows.groupby(["app", "vcpu", "sidecar_count", "memory_mb"]):
        before = group[group["metric"] == "p99_ms_before"]
        after = group[group["metric"] == "p99_ms_after"]
        if before.empty or after.empty:
            continue
        out.append(
            {
                "app": app,
                "vcpu": vcpu,
                "sidecar_count": sc,
                "memory_mb": mem,
                "before_load_pct": float(before["load"].iloc[0]),
                "after_load_pct": float(after["load"].iloc[0]),
                "before_p99_ms": float(before["value"].iloc[0]),
                "after_p99_ms": float(after["value"].iloc[0]),
            }
        )
    return pd.DataFrame(
        out,
        columns=[
            "app",
            "vcpu",
            "sidecar_count",
            "memory_mb",
            "before_load_pct",
            "after_load_pct",
            "before_p99_ms",
            "after_p99_ms",
        ],
    )

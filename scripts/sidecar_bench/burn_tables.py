"""The sidecar burns' tables: the same conditions with sidecars that count their busy time by the wall clock (the
article's) and by CPU time (load.sidecar_burn), side by side; written to results/<preset>/model/burn/.

Data: model.burn_comparison (one row per condition and burn) -> burn_comparison_table; each burn's summary ->
tables.breaking_points -> burn_breaking_points_table. The chart is burn_charts.py's.
"""

from __future__ import annotations

import math

import pandas as pd

from .cells import APP_NAMES, cell_codes, codes_of
from .table_format import MISSING, Table, fmt, measured
from .tables import breaking_points


def burn_comparison_table(long: pd.DataFrame) -> Table:
    """Sidecars counting busy time by the wall clock (the article) against by CPU time, condition by condition."""
    burns = sorted(long["burn"].dropna().unique()) if len(long) else []
    records, display_rows, seen = [], [], set()
    for cid, group in long.groupby("condition_id", sort=False):
        by = {b: g.iloc[0] for b, g in group.groupby("burn")}
        record = {"condition_id": cid}
        row = {"condition": cid}
        for burn in burns:
            r = by.get(burn)
            for column in (
                "sidecars_cpu_pct",
                "rps",
                "rps_lo",
                "rps_hi",
                "retained",
                "p99_ms",
                "p99_ms_lo",
                "p99_ms_hi",
                "flags",
            ):
                record[f"{column}_{burn}"] = r[column] if r is not None else math.nan
            codes = codes_of(r["flags"]) if r is not None else []
            seen |= cell_codes(codes, "p99_ms")
            row[f"sidecars' CPU % ({burn})"] = (
                fmt(float(r["sidecars_cpu_pct"]), 1) if r is not None else MISSING
            )
            row[f"RPS retained ({burn})"] = (
                f"{100 * float(r['retained']):.0f} %"
                if r is not None and not math.isnan(float(r["retained"]))
                else MISSING
            )
            row[f"P99 ms ({burn})"] = (
                measured(
                    float(r["p99_ms"]),
                    float(r["p99_ms_lo"]),
                    float(r["p99_ms_hi"]),
                    codes,
                    "p99_ms",
                    0,
                )
                if r is not None
                else MISSING
            )
        records.append(record)
        display_rows.append(row)
    notes = [
        "wall: the sidecars count their busy time by the wall clock, as the article's did, and burn less than "
        "their load when throttled; cpu: they count CPU time and burn it (load.sidecar_burn).",
        "RPS retained: over the same sweep's 0 % load RPS under the same setting. Conditions measured under "
        "both settings only.",
    ]
    return Table(
        "burn_comparison",
        "Sidecars that burn what they claim: wall-clock against CPU-time sidecars",
        pd.DataFrame(records),
        pd.DataFrame(display_rows),
        notes,
        seen,
    )


def burn_breaking_points_table(summaries: dict, ref: pd.DataFrame) -> Table:
    """The breaking points of each sweep under each sidecar_burn, side by side ({burn: condition summary})."""
    frames = []
    for burn, summary in summaries.items():
        data = breaking_points(summary, ref).data.copy()
        data.insert(0, "burn", burn)
        frames.append(data)
    data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    keep = [
        c
        for c in (
            "burn",
            "app",
            "vcpu",
            "sidecar_count",
            "verdict",
            "before_load_pct",
            "after_load_pct",
        )
        if c in data.columns
    ]
    display = data[keep].copy() if len(data) else pd.DataFrame(columns=keep)
    if len(display):
        display["app"] = [APP_NAMES.get(a, a) for a in display["app"]]
        display = display.sort_values(["app", "vcpu", "sidecar_count", "burn"], kind="stable")
    return Table(
        "burn_breaking_points",
        "Breaking points with wall-clock and with CPU-time sidecars",
        data,
        display,
        [
            "Each sweep's breaking point by the rule of breaking_points.md, once per sidecar_burn setting."
        ],
    )

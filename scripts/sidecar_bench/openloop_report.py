"""openloop_report: open-loop cells beside the closed-loop cells of the same setup and sidecar load.

For every open-loop condition of a summary (load_model open), one row: its setup (app,
vCPU, memory, sidecars and their load), its rate (share of the setup's capacity, requests/s,
sent rate, share not sent on time), and for the open and the closed loop P50, P99, P99.9
and the shares slower than one and two CFS periods, each with its t interval over the runs
(stats.py), plus the ratio of the open to the closed P99 with the uncertainty of both sides
(repstats.ratio_interval). The existing tables, charts and model read closed-loop cells
only (closed_loop): an open cell shares their axes and would stand in a closed cell's place.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import altair as alt
import pandas as pd

from . import repstats
from .loadmodel import closed_loop, is_open
from .stats import run_values

SETUP_COLUMNS = [
    "app",
    "vcpu",
    "memory_mb",
    "sidecar_count",
    "sidecar_load_pct",
    "total_sidecar_load_pct",
]
METRICS = ("p50_ms", "p99_ms", "p99_9_ms", "slow_1p_share", "slow_2p_share")
RATE_COLUMNS = [
    "rate_share",
    "arrivals",
    "rate_per_s",
    "capacity_rps",
    "sent_rate_per_s",
    "not_on_time_share",
]


def comparison(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per open-loop condition, its closed-loop cell's values beside its own (NaN when not measured)."""
    opened, closed = summary[is_open(summary)], closed_loop(summary)
    rows = []
    for _, cell in opened.iterrows():
        match = closed
        for column in SETUP_COLUMNS[:5]:
            match = match[match[column] == cell[column]]
        twin = match.iloc[0] if len(match) else None
        row: dict[str, Any] = {
            "condition_id": cell["condition_id"],
            "closed_condition_id": None if twin is None else twin["condition_id"],
        }
        row.update({c: cell[c] for c in SETUP_COLUMNS + RATE_COLUMNS})
        row["repeats"] = cell["repeats"]
        for metric in METRICS:
            for side, source in (("open", cell), ("closed", twin)):
                for suffix in ("", "_lo", "_hi"):
                    row[f"{side}_{metric}{suffix}"] = (
                        math.nan if source is None else source[f"{metric}{suffix}"]
                    )
        ratio = (
            repstats.ratio_interval(
                run_values(cell["p99_ms_runs"]), run_values(twin["p99_ms_runs"])
            )
            if twin is not None
            else repstats.Estimate(math.nan, math.nan, math.nan, 0, "none")
        )
        row.update(
            {
                "p99_open_vs_closed": ratio.value,
                "p99_open_vs_closed_lo": ratio.lo,
                "p99_open_vs_closed_hi": ratio.hi,
            }
        )
        row["open_flags"] = cell.get("flags")
        row["closed_flags"] = None if twin is None else twin.get("flags")
        rows.append(row)
    return pd.DataFrame(rows)


def _sidecars(count: Any) -> str:
    count = int(count)
    return f"{count} sidecar" + ("" if count == 1 else "s")


def _interval(value: float, lo: float, hi: float, digits: int, scale: float = 1.0) -> str:
    if value is None or not math.isfinite(value):
        return "–"
    text = f"{value * scale:.{digits}f}"
    if math.isfinite(lo) and math.isfinite(hi):
        text += f" [{lo * scale:.{digits}f}–{hi * scale:.{digits}f}]"
    return text


def markdown(table: pd.DataFrame) -> str:
    """The comparison as a Markdown table: value [95 % t interval] per cell; shares in %."""
    header = ["setup", "sidecars' load %", "rate (share of capacity)", "not on time %"]
    for metric, label in (
        ("p50_ms", "P50 ms"),
        ("p99_ms", "P99 ms"),
        ("p99_9_ms", "P99.9 ms"),
        ("slow_1p_share", "> 1 period %"),
        ("slow_2p_share", "> 2 periods %"),
    ):
        header += [f"open {label}", f"closed {label}"]
    header += ["P99 open / closed"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for _, r in table.iterrows():
        cells = [
            f"{r['app']} {r['vcpu']:g} vCPU, {_sidecars(r['sidecar_count'])}",
            f"{r['total_sidecar_load_pct']:g}",
            f"{r['rate_per_s']:.0f}/s ({r['rate_share'] * 100:g} % of {r['capacity_rps']:.0f})"
            if r["repeats"]
            else f"{r['rate_share'] * 100:g} % of capacity: every run failed",
            _interval(r["not_on_time_share"], math.nan, math.nan, 2, 100)
            + (" O" if r["not_on_time_share"] > 0.01 else ""),
        ]
        for metric in METRICS:
            share = metric.startswith("slow_")
            for side in ("open", "closed"):
                cells.append(
                    _interval(
                        r[f"{side}_{metric}"],
                        r[f"{side}_{metric}_lo"],
                        r[f"{side}_{metric}_hi"],
                        2 if share else 1,
                        100 if share else 1,
                    )
                )
        cells.append(
            _interval(
                r["p99_open_vs_closed"], r["p99_open_vs_closed_lo"], r["p99_open_vs_closed_hi"], 2
            )
        )
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Values are means of the runs with their 95 % t interval over the runs. Open loop: latency from "
        "each request's intended send time; dropped and failed requests count as slower than any threshold "
        "in the shares; O: more than 1 % of the requests not sent on time. P99 open / closed: ratio of the "
        "runs' geometric means with Welch's t interval (repstats.ratio_interval).",
    ]
    return "\n".join(lines) + "\n"


P99_FLOOR_MS = 10.0


def chart(summary: pd.DataFrame) -> alt.TopLevelMixin:
    """P99 against the sidecars' total load, one panel per setup, one line per load model and share."""
    frame = summary.copy()
    frame["loop"] = [
        ("closed loop" if not o else f"open {s * 100:g} %")
        for o, s in zip(
            is_open(frame), frame.get("rate_share", pd.Series(math.nan, index=frame.index))
        )
    ]
    frame["setup"] = [
        f"{a} {v:g} vCPU, {_sidecars(n)}"
        for a, v, n in zip(frame["app"], frame["vcpu"], frame["sidecar_count"])
    ]
    open_setups = set(frame.loc[is_open(frame), "setup"])
    frame = frame[frame["setup"].isin(open_setups)]
    # A log scale: the tails run from milliseconds (below capacity) to seconds (above it). An interval reaching
    # below the floor (a t interval of three runs can reach below zero) is drawn from the floor.
    frame["p99_lo_drawn"] = frame["p99_ms_lo"].clip(lower=P99_FLOOR_MS)
    frame["p99_hi_drawn"] = frame["p99_ms_hi"].clip(lower=P99_FLOOR_MS)
    base = alt.Chart(frame).encode(
        x=alt.X("total_sidecar_load_pct:Q", title="sidecars' total load (% of one core)"),
        color=alt.Color("loop:N", title="load", scale=alt.Scale(scheme="tableau10")),
    )
    y = alt.Y("p99_ms:Q", title="P99 (ms, log scale)", scale=alt.Scale(type="log"))
    lines = base.mark_line(point=True).encode(
        y=y,
        tooltip=[
            alt.Tooltip("setup:N"),
            alt.Tooltip("loop:N"),
            alt.Tooltip("total_sidecar_load_pct:Q"),
            alt.Tooltip("p99_ms:Q", format=".1f"),
        ],
    )
    bars = base.mark_errorbar().encode(
        y=alt.Y("p99_lo_drawn:Q", title="P99 (ms, log scale)"), y2=alt.Y2("p99_hi_drawn:Q")
    )
    return (
        alt.layer(lines, bars)
        .facet(facet=alt.Facet("setup:N", title=None), columns=2)
        .resolve_scale(x="independent")
        .properties(
            title={
                "text": "P99: open loop at a share of capacity beside the closed loop",
                "subtitle": f"95 % t intervals over the runs, drawn from {P99_FLOOR_MS:g} ms "
                "where they reach lower",
            }
        )
    )


def write(summary: pd.DataFrame, out_dir: str | Path, formats=("html", "png")) -> list[Path]:
    from .chart_files import save_chart

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    table = comparison(summary)
    written = [out / "open_vs_closed.csv", out / "open_vs_closed.md"]
    table.to_csv(written[0], index=False, float_format="%.6g")
    written[1].write_text("# Open loop beside closed loop\n\n" + markdown(table))
    written += save_chart(chart(summary), out, "open_vs_closed_p99", formats)
    return written

"""The harness's time between runs, read from the run files: from one run's end of load to the next one's start.

A run's load is its warm-up (the same load, not recorded) and then its measured window; the run file records
the window's start and end on the runner's clock and the warm-up's length. The gap before a run is its load's
start less the previous run's window end: the job's process, the engine's lease, the containers, the app's own
start (its readiness, recorded as environment.ready_s) and the run file, plus the workflow's step between jobs.
Runs warmed up until steady (a `warmup` record of bursts) have no fixed warm-up and are left out, and so are
gaps longer than a stretch's (two sittings, or runs adopted from another preset).

Used by the benchmark of the workflow's gaps (scripts/dev/bench_workflow.py) and by the provenance of a
published set (scripts/publish.py).
"""

from __future__ import annotations

import datetime as dt
import statistics
from typing import Any, Iterable

# As publish.STRETCH_GAP_S: runs further apart than this were measured in two sittings.
STRETCH_GAP_S = 600


def load_span(meta: dict[str, Any]) -> tuple[float, float] | None:
    """(start of the run's load, end of it) in seconds since the epoch: its window less its warm-up; None for
    a run warmed up until steady (its warm-up has no fixed length)."""
    if (meta.get("warmup") or {}).get("bursts") is not None:
        return None

    def seconds(text: str) -> float:
        return dt.datetime.fromisoformat(text).timestamp()

    window = meta["window"]
    return seconds(window["start"]) - float(meta["load"].get("warmup_s") or 0), seconds(
        window["end"]
    )


def gaps(
    metas: Iterable[dict[str, Any]], stretch_gap_s: float = STRETCH_GAP_S
) -> list[dict[str, Any]]:
    """One row per gap between consecutive runs (by their load's start): the next run's app and condition, the
    gap in seconds and the gap less the next app's own start (None where the run file has no ready_s)."""
    # By the load's start; a tie is broken by the condition id (dicts do not compare).
    spans = sorted(
        ((span, meta) for meta in metas if (span := load_span(meta)) is not None),
        key=lambda item: (item[0], str((item[1].get("condition") or {}).get("id"))),
    )
    out = []
    for (previous, _), (span, meta) in zip(spans, spans[1:]):
        gap = span[0] - previous[1]
        if gap > stretch_gap_s:
            continue
        ready = (meta.get("environment") or {}).get("ready_s")
        out.append(
            {
                "app": str((meta.get("condition") or {}).get("app", "?")),
                "condition": str((meta.get("condition") or {}).get("id", "?")),
                "gap_s": round(gap, 3),
                "without_app_start_s": round(gap - float(ready), 3) if ready is not None else None,
            }
        )
    return out


def by_app(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per app of the next run: the gaps' count, median, least and most, and the median less the app's start."""
    out: dict[str, dict[str, Any]] = {}
    for app in sorted({row["app"] for row in rows}):
        mine = [row for row in rows if row["app"] == app]
        values = [row["gap_s"] for row in mine]
        beside = [
            row["without_app_start_s"] for row in mine if row["without_app_start_s"] is not None
        ]
        out[app] = {
            "gaps": len(values),
            "median_s": round(statistics.median(values), 2),
            "min_s": round(min(values), 2),
            "max_s": round(max(values), 2),
            "median_without_app_start_s": round(statistics.median(beside), 2) if beside else None,
        }
    return out

"""Breaking points of a load sweep: the first load step where the app clearly gets slower.

The rule, along one app / vCPU / sidecar-count sweep sorted by total sidecar
load (rows at one load are pooled: point values averaged, lo the lowest, hi the
highest). A step from load i-1 to load i is a **break** when it is large in CFS
units on the point values AND clear of the noise given the 95 % intervals:

- size, P99 (point values, period T from cgroup.period_us, 100 ms by default):
  P99 rises and either (jump) rises by at least half a period (50 ms), or
  (period) moves past a multiple k*T by more than 2 ms (previous <= k*T + 2 ms
  < current) while rising by at least 5 % of a period (5 ms). Throttled
  requests wait whole periods, so a rise within a period is not a break.
- noise, P99: every load from i on is above every load before i, interval to
  interval: min over loads >= i of p99_lo > max over loads < i of p99_hi. A
  neighbour-only comparison would call a dip and recovery (105, 98, 104 ms at
  0, 3, 6 %) a break; this does not.
- or, the tail: the share of responses slower than k periods (k = 1, 2, 3)
  rises by at least 1 percentage point (one response in a hundred now waits k
  periods more: what moves P99) and min over loads >= i of its lo > max over
  loads < i of its hi.

The intervals are the condition summary's: a t interval over the runs' values
with 2 or more repetitions (stats.py), whose 95 % is checked by simulation. A
wider, honest interval makes "clear of the noise" harder to meet than the
earlier bootstrap's, which covered about three times in four.

A step that meets a size criterion but not its noise criterion is reported as
**within noise** (not a break); a sweep with neither is **none**. A run with no
successful response (P99 undefined, successful == 0) is the worst point
(+inf): it cannot serve, so it does not drop out. Without intervals (the
article's own numbers) lo = hi = the value; the rule then finds the article's
four breaking points in its published sweeps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from .stats import DEFAULT_PERIOD_MS

# Rule parameters, in units that mean something for CFS throttling.
JUMP_PERIOD_FRACTION = 0.5  # a rise of half a period: requests now wait for a later period
CROSSING_MARGIN_MS = 2.0  # P99 within 2 ms of a period multiple is still "at" that multiple
PERIOD_RISE_FRACTION = (
    0.05  # a "period" break must also rise by 5 % of a period (5 ms): 101.5 -> 102.5 is noise
)
TAIL_PERIODS = (1, 2, 3)  # tail shares slower than k CFS periods (summary columns slow_<k>p_share)
TAIL_RISE_SHARE = 0.01  # one response in a hundred more waiting k periods: the share that moves P99

BREAK, WITHIN_NOISE, NONE, TOO_FEW = "break", "within noise", "none", "too few loads"


@dataclass(frozen=True)
class BreakingPoint:
    before_load_pct: float
    after_load_pct: float
    before_p99_ms: float
    after_p99_ms: float
    reason: str  # "jump", "period" or "tail>kT" (share slower than k periods)
    verdict: str = BREAK  # "break" or "within noise"
    evidence: str = ""  # the numbers that decided it, in one line


@dataclass(frozen=True)
class Assessment:
    verdict: str  # "break", "within noise", "none" or "too few loads"
    step: BreakingPoint | None  # the break, or the first step that was within noise
    loads: int


def period_level(
    p99_ms: float, period_ms: float = DEFAULT_PERIOD_MS, margin_ms: float = CROSSING_MARGIN_MS
) -> int:
    """How many CFS period multiples k*T (k >= 1) P99 lies above by more than the margin."""
    if p99_ms <= margin_ms:
        return 0
    if math.isinf(p99_ms):
        return 1 << 30
    return max(0, math.ceil((p99_ms - margin_ms) / period_ms) - 1)


def _column(values, n: int, fallback: np.ndarray) -> np.ndarray:
    if values is None:
        return fallback.copy()
    out = np.asarray(values, dtype=float)
    return np.where(np.isnan(out), fallback, out)  # no interval: the point value stands for it


def _pooled(loads, p99, p99_lo, p99_hi, successful, tails) -> pd.DataFrame:
    p99 = np.asarray(p99, dtype=float)
    n = len(p99)
    if successful is not None:
        # No successful response: the worst point, not a missing one.
        p99 = np.where(np.isnan(p99) & (np.asarray(successful, dtype=float) == 0), math.inf, p99)
    frame = pd.DataFrame(
        {
            "load": np.asarray(loads, dtype=float),
            "p99": p99,
            "p99_lo": _column(p99_lo, n, p99),
            "p99_hi": _column(p99_hi, n, p99),
        }
    )
    for k, (share, lo, hi) in (tails or {}).items():
        share = np.asarray(share, dtype=float)
        frame[f"t{k}"], frame[f"t{k}_lo"], frame[f"t{k}_hi"] = (
            share,
            _column(lo, n, share),
            _column(hi, n, share),
        )
    frame = frame.dropna(subset=["load", "p99"])
    agg = {
        c: ("min" if c.endswith("_lo") else "max" if c.endswith("_hi") else "mean")
        for c in frame.columns
        if c != "load"
    }
    return frame.groupby("load", sort=True).agg(agg)


def _fmt(v: float) -> str:
    return "no response" if math.isinf(v) else f"{v:.1f}"


def steps(
    loads_pct: Sequence[float],
    p99_ms: Sequence[float],
    p99_lo: Sequence[float] | None = None,
    p99_hi: Sequence[float] | None = None,
    *,
    successful: Sequence[float] | None = None,
    tails: dict[int, tuple[Sequence[float], Sequence[float] | None, Sequence[float] | None]]
    | None = None,
    period_ms: float = DEFAULT_PERIOD_MS,
    jump_fraction: float = JUMP_PERIOD_FRACTION,
    margin_ms: float = CROSSING_MARGIN_MS,
    period_rise_fraction: float = PERIOD_RISE_FRACTION,
) -> list[BreakingPoint]:
    """Every step that meets a size criterion, in load order, each with its verdict (break / within noise)."""
    frame = _pooled(loads_pct, p99_ms, p99_lo, p99_hi, successful, tails)
    loads = frame.index.to_numpy()
    found = []
    for i in range(1, len(frame)):
        before, after = frame["p99"].iloc[i - 1], frame["p99"].iloc[i]
        left, right = frame.iloc[:i], frame.iloc[i:]
        reason = None
        if after > before:
            rise = after - before
            if rise >= jump_fraction * period_ms:
                reason = "jump"
            elif rise >= period_rise_fraction * period_ms and period_level(
                after, period_ms, margin_ms
            ) > period_level(before, period_ms, margin_ms):
                reason = "period"
        if reason:
            low_after, high_before = right["p99_lo"].min(), left["p99_hi"].max()
            clear = low_after > high_before
            evidence = (
                f"P99 {_fmt(before)} -> {_fmt(after)} ms ({reason}); from {loads[i]:g}% on P99 >= "
                f"{_fmt(low_after)} ms {'>' if clear else '<='} {_fmt(high_before)} ms, the highest before"
            )
            found.append(
                BreakingPoint(
                    float(loads[i - 1]),
                    float(loads[i]),
                    float(before),
                    float(after),
                    reason,
                    BREAK if clear else WITHIN_NOISE,
                    evidence,
                )
            )
            if clear:
                continue
        for k in sorted(tails or {}):
            share_before, share_after = frame[f"t{k}"].iloc[i - 1], frame[f"t{k}"].iloc[i]
            if not share_after - share_before >= TAIL_RISE_SHARE:
                continue
            low_after, high_before = right[f"t{k}_lo"].min(), left[f"t{k}_hi"].max()
            clear = low_after > high_before
            evidence = (
                f"share slower than {k} period{'' if k == 1 else 's'} {share_before:.1%} -> {share_after:.1%}; from "
                f"{loads[i]:g}% on >= {low_after:.1%} {'>' if clear else '<='} {high_before:.1%}, the highest before"
            )
            found.append(
                BreakingPoint(
                    float(loads[i - 1]),
                    float(loads[i]),
                    float(before),
                    float(after),
                    f"tail>{k}T",
                    BREAK if clear else WITHIN_NOISE,
                    evidence,
                )
            )
            if clear:
                break
    return found


def breaking_point(
    loads_pct: Sequence[float],
    p99_ms: Sequence[float],
    p99_lo: Sequence[float] | None = None,
    p99_hi: Sequence[float] | None = None,
    **rule,
) -> BreakingPoint | None:
    """The first step of a load sweep that breaks (see the module docstring), or None."""
    return next(
        (s for s in steps(loads_pct, p99_ms, p99_lo, p99_hi, **rule) if s.verdict == BREAK), None
    )


def assess(loads_pct, p99_ms, p99_lo=None, p99_hi=None, **rule) -> Assessment:
    """The sweep's verdict: its first break, else its first step within noise, else none."""
    found = steps(loads_pct, p99_ms, p99_lo, p99_hi, **rule)
    count = len({float(x) for x in np.asarray(loads_pct, dtype=float) if not math.isnan(x)})
    breaks = [s for s in found if s.verdict == BREAK]
    if breaks:
        return Assessment(BREAK, breaks[0], count)
    if found:
        return Assessment(WITHIN_NOISE, found[0], count)
    return Assessment(NONE if count > 1 else TOO_FEW, None, count)


def assess_rows(rows: pd.DataFrame, period_ms: float | None = None) -> Assessment:
    """Assess a sweep given as summary rows (total_sidecar_load_pct, p99_ms[_lo/_hi], successful, slow_<k>p_share...)."""

    def col(name):
        return rows[name] if name in rows.columns else None

    if period_ms is None:
        period_ms = (
            float(rows["period_ms"].median())
            if "period_ms" in rows and rows["period_ms"].notna().any()
            else DEFAULT_PERIOD_MS
        )
    tails = {
        k: (rows[f"slow_{k}p_share"], col(f"slow_{k}p_share_lo"), col(f"slow_{k}p_share_hi"))
        for k in TAIL_PERIODS
        if f"slow_{k}p_share" in rows.columns
    }
    return assess(
        rows["total_sidecar_load_pct"],
        rows["p99_ms"],
        col("p99_ms_lo"),
        col("p99_ms_hi"),
        successful=col("successful"),
        tails=tails or None,
        period_ms=period_ms,
    )

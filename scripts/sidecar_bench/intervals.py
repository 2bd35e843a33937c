"""Within-run 95 % intervals: a two-level (hierarchical) block bootstrap.

The condition summary uses it only for a condition with ONE measured
repetition (interval_method "within-run only"); with 2 or more, the t
interval over the runs' values (repstats.py) replaces it, because this
bootstrap does not cover: with 3 runs, drawing the slowest run three times has
probability 1/27 > 2.5 %, so its ends land on the slowest and fastest run, and
simulated with a known truth it covered 0.73 at a 7 % run-to-run CV. The
method itself, for any number of runs: a resample
1. draws the condition's repetitions with replacement, then
2. within each drawn run draws its 1 s blocks (requests grouped by start time
   `offset_s`) with replacement,
and the statistic is computed on the pooled responses of the drawn blocks.
The interval is the 2.5th and 97.5th percentile (nearest rank) of B = 1000
such statistics. The seed derives from the condition id, so a summary is
reproducible byte for byte.

Level 1 carries the run-to-run variation (a new container, a new placement on
the host's CPUs), level 2 the variation within a run, keeping the time
correlation inside one second (a throttled period delays a burst of requests
together). With ONE repetition only level 2 is left: the interval then
reflects within-run variation alone and says nothing about how a second run
would differ.

Drawing m copies of one run, each with K blocks drawn uniformly, gives block
weights Multinomial(m * K, 1/K), which is how the weights are drawn here.

Speed: the responses of a condition are reduced to a block x unique-latency
count matrix C (hey reports 0.1 ms steps, so few thousand unique values). A
resample is a weight vector w over blocks; its latency histogram is w @ C, so
B resamples are one (B x K) @ (K x U) product, done in chunks to bound memory.
Nearest-rank percentiles read off cumulative counts are exact sample values.
RPS of a resample = its successful responses / the summed length of its
blocks (the last block of a run is as long as what is left of the window).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass
from typing import Sequence

import numpy as np

CONFIDENCE = 0.95
RESAMPLES = 1000
BLOCK_S = 1.0
# Resample rows per matrix product: bounds the (chunk x unique latencies) float matrix to ~64 MB.
CHUNK_CELLS = 8_000_000
INTERVAL_PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
SLOW_PERIODS = (1, 2, 3)


@dataclass(frozen=True)
class RunBlocks:
    """One run's successful responses cut into blocks of BLOCK_S by start time."""

    response_time_s: np.ndarray  # successful responses only
    block: np.ndarray  # block index of each response, 0 .. len(block_s) - 1
    block_s: np.ndarray  # length of each block in seconds (the last may be partial)

    def __post_init__(self) -> None:
        if len(self.response_time_s) != len(self.block):
            raise ValueError(
                f"{len(self.response_time_s)} response times but {len(self.block)} block indices"
            )
        if len(self.block_s) == 0:
            raise ValueError("a run needs at least one block (load window of 0 s?)")


def run_blocks(
    response_time_s: np.ndarray, offset_s: np.ndarray, load_s: float, block_s: float = BLOCK_S
) -> RunBlocks:
    """Cut a run's successful responses into blocks by start offset over a load window of load_s seconds."""
    if not load_s or load_s <= 0 or not math.isfinite(load_s):
        raise ValueError(f"load window {load_s!r} s is not > 0; cannot cut the run into blocks")
    full = int(math.floor(load_s / block_s))
    rest = load_s - full * block_s
    # A remainder below a microsecond is float noise of a whole number of blocks, not a block.
    lengths = [block_s] * full + ([rest] if rest > 1e-6 else [])
    lengths_arr = np.asarray(lengths or [load_s], dtype="float64")
    index = np.clip(
        np.floor(np.asarray(offset_s, dtype="float64") / block_s), 0, len(lengths_arr) - 1
    )
    return RunBlocks(
        np.asarray(response_time_s, dtype="float64"), index.astype("int64"), lengths_arr
    )


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float


@dataclass(frozen=True)
class ConditionIntervals:
    """Point values (all blocks of all runs once) and 95 % intervals, keyed by summary column name."""

    point: dict[str, float]
    intervals: dict[str, Interval]
    resamples: int
    repetitions: int


def percentile_name(p: float) -> str:
    """50 -> 'p50', 99.9 -> 'p99_9' (column names; stats re-exports it)."""
    return "p" + f"{p:g}".replace(".", "_")


def metric_names(
    percentiles: Sequence[float] = INTERVAL_PERCENTILES, slow_periods: Sequence[int] = SLOW_PERIODS
) -> list[str]:
    """Column names of the metrics with intervals: rps, p<..>_ms, slow_<k>p_share."""
    return (
        ["rps"]
        + [f"{percentile_name(p)}_ms" for p in percentiles]
        + [f"slow_{k}p_share" for k in slow_periods]
    )


def seed_for(condition_id: str, base_seed: int) -> np.random.Generator:
    """The condition's own fixed random stream: reproducible, and independent of which other conditions run."""
    return np.random.default_rng([zlib.crc32(condition_id.encode()), base_seed])


def draw_weights(
    rng: np.random.Generator, blocks_per_run: Sequence[int], resamples: int
) -> np.ndarray:
    """B x sum(K_r) block weights of the two-level bootstrap (see the module docstring)."""
    runs = len(blocks_per_run)
    copies = rng.multinomial(
        runs, np.full(runs, 1.0 / runs), size=resamples
    )  # B x R: repetitions drawn
    columns = []
    for r, k in enumerate(blocks_per_run):
        columns.append(rng.multinomial(copies[:, r] * k, np.full(k, 1.0 / k)))  # B x K_r
    return np.concatenate(columns, axis=1)


def _rank(p: float, n: np.ndarray) -> np.ndarray:
    # Same rounding as stats.nearest_rank: 99.9 % of 1000 is rank 999, not 1000.
    return np.maximum(np.ceil(np.round(p * n / 100.0, 9)), 1)


def _statistics(
    hist_cum: np.ndarray,
    responses: np.ndarray,
    seconds: np.ndarray,
    values: np.ndarray,
    percentiles: Sequence[float],
    slow_index: Sequence[int],
) -> np.ndarray:
    """Statistics (rows) of resamples given their cumulative latency histograms (resample x unique values)."""
    n = hist_cum[:, -1]
    out = np.empty((1 + len(percentiles) + len(slow_index), len(n)))
    with np.errstate(invalid="ignore", divide="ignore"):
        out[0] = responses / seconds
        for i, p in enumerate(percentiles, start=1):
            where = (hist_cum < _rank(p, n)[:, None]).sum(axis=1)
            out[i] = np.where(n > 0, values[np.minimum(where, len(values) - 1)] * 1000.0, np.nan)
        for j, idx in enumerate(slow_index, start=1 + len(percentiles)):
            at_or_below = hist_cum[:, idx - 1] if idx > 0 else np.zeros_like(n)
            out[j] = np.where(n > 0, (n - at_or_below) / n, np.nan)
    return out


def condition_intervals(
    condition_id: str,
    runs: Sequence[RunBlocks],
    period_ms: float,
    *,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    base_seed: int = 0,
    percentiles: Sequence[float] = INTERVAL_PERCENTILES,
    slow_periods: Sequence[int] = SLOW_PERIODS,
) -> ConditionIntervals:
    """Point values and bootstrap intervals of RPS, latency percentiles (ms) and slow shares for one condition.

    slow_<k>p_share = share of successful responses slower than k x period_ms.
    """
    if not runs:
        raise ValueError(f"{condition_id}: no runs to compute intervals from")
    names = metric_names(percentiles, slow_periods)
    times = np.concatenate([r.response_time_s for r in runs])
    values, inverse = np.unique(times, return_inverse=True)
    del times
    u = max(len(values), 1)
    if len(values) == 0:
        values = np.array([math.nan])
    # Rows: every block of every run, in run order.
    offsets = np.cumsum([0] + [len(r.block_s) for r in runs])
    row = np.concatenate([r.block + offsets[i] for i, r in enumerate(runs)])
    k_total = int(offsets[-1])
    counts = np.bincount(row * u + inverse.reshape(-1), minlength=k_total * u).reshape(k_total, u)
    del row, inverse
    cum = np.cumsum(counts, axis=1, dtype="float64")
    del counts
    block_s = np.concatenate([r.block_s for r in runs])
    block_n = cum[:, -1].copy()
    # Index of the last value <= k x period: counts at or below it are "not slow".
    slow_index = [
        int(np.searchsorted(values, k * period_ms / 1000.0, side="right")) for k in slow_periods
    ]

    ones = np.ones((1, k_total))
    point_values = _statistics(
        ones @ cum, ones @ block_n, ones @ block_s, values, percentiles, slow_index
    )[:, 0]
    point = dict(zip(names, (float(v) for v in point_values)))

    rng = seed_for(condition_id, base_seed)
    weights = draw_weights(rng, [len(r.block_s) for r in runs], resamples).astype("float64")
    chunk = max(1, CHUNK_CELLS // u)
    stats = np.empty((len(names), resamples))
    for start in range(0, resamples, chunk):
        w = weights[start : start + chunk]
        stats[:, start : start + chunk] = _statistics(
            w @ cum, w @ block_n, w @ block_s, values, percentiles, slow_index
        )
    tail = (1.0 - confidence) / 2.0 * 100.0
    intervals = {}
    for name, column in zip(names, stats):
        finite = column[np.isfinite(column)]
        if len(finite) == 0:
            intervals[name] = Interval(math.nan, math.nan)
            continue
        lo, hi = np.percentile(finite, [tail, 100.0 - tail], method="inverted_cdf")
        intervals[name] = Interval(float(lo), float(hi))
    return ConditionIntervals(point, intervals, resamples, len(runs))

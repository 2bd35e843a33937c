"""Per-second series of one run: does throughput or latency drift over the load window?

Seconds are counted by COMPLETION time (offset_s + response_time_s): second s
holds the successful responses that ended in [s, s + 1). RPS of a second is
what a meter on the client would read then. Only whole seconds are shown: what
ends after the last whole second of the load window is the drain (the requests
in flight when hey stopped starting new ones, finishing within a few
milliseconds), and a rate over that sliver would read as a spike of thousands
per second; the whole-window values include it. Latencies are nearest-rank
percentiles of the responses that ended in that second.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from .stats import nearest_rank, read_samples

COLUMNS = ["second", "responses", "rps", "p50_ms", "p99_ms", "slow_1p_share"]


def per_second(path: str | Path) -> pd.DataFrame:
    """One row per second of the run's load window (seconds without responses included, with NaN latencies)."""
    samples = read_samples(path)
    period_ms = float((samples.meta.get("cgroup") or {}).get("period_us") or 100_000) / 1000.0
    load_s = samples.load_s
    seconds = max(int(math.floor(load_s + 1e-9)), 1)
    ends = samples.ok_offset_s + samples.ok_response_time_s
    which = np.floor(ends).astype("int64")
    keep = (which >= 0) & (which < seconds)
    which, times = which[keep], samples.ok_response_time_s[keep]
    order = np.lexsort((times, which))  # by second, then latency: one sort for all seconds
    ms = times[order] * 1000.0
    bounds = np.searchsorted(which[order], np.arange(seconds + 1))
    rows = []
    for s in range(seconds):
        chunk = ms[bounds[s] : bounds[s + 1]]
        rows.append(
            {
                "second": s,
                "responses": len(chunk),
                "rps": float(len(chunk)),
                "p50_ms": nearest_rank(chunk, 50.0),
                "p99_ms": nearest_rank(chunk, 99.0),
                "slow_1p_share": float((chunk > period_ms).mean()) if len(chunk) else math.nan,
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)

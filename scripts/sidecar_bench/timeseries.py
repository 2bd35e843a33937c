"""Per-second series of one run: does throughput or latency drift over the load window?

Seconds are counted by COMPLETION time (offset_s + response_time_s): second s
holds the successful responses that ended in [s, s + 1). RPS of a second is
what a meter on the client would read then; the last second is divided by its
real length (what is left of the load window). Latencies are nearest-rank
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
    seconds = max(int(math.ceil(load_s - 1e-9)), 1)
    ends = samples.ok_offset_s + samples.ok_response_time_s
    which = np.clip(np.floor(ends).astype("int64"), 0, seconds - 1)
    order = np.lexsort((samples.ok_response_time_s, which))  # by second, then latency: one sort for all seconds
    ms = samples.ok_response_time_s[order] * 1000.0
    bounds = np.searchsorted(which[order], np.arange(seconds + 1))
    rows = []
    for s in range(seconds):
        chunk = ms[bounds[s]:bounds[s + 1]]
        length = min(s + 1.0, load_s) - s
        rows.append({
            "second": s,
            "responses": len(chunk),
            "rps": len(chunk) / length if length > 0 else math.nan,
            "p50_ms": nearest_rank(chunk, 50.0),
            "p99_ms": nearest_rank(chunk, 99.0),
            "slow_1p_share": float((chunk > period_ms).mean()) if len(chunk) else math.nan,
        })
    return pd.DataFrame(rows, columns=COLUMNS)

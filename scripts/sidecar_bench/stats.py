"""Statistics of runs, computed from the raw per-request samples.

Definitions (the tables and charts keep to these):

- Successful response: a row with status 200..299. hey's CSV has one row per
  response; requests that failed without a response appear only in the
  metadata (`requests.failed`).
- RPS = successful responses / measured window wall time (`window.wall_s`;
  `load.duration_s` when a file lacks it).
- Latency statistics (P50, P90, P95, P99, P99.9, max, mean; in ms) are over the
  successful responses' `response_time_s`.
- Percentile = nearest rank: the smallest sample with at least p % of the
  samples at or below it (numpy method "inverted_cdf"). It is always a latency
  that was observed, so the CFS-period steps (100 ms, 200 ms) stay sharp
  instead of being interpolated between two modes. It is also what hey's own
  summary reports, within one rank.
- Errors = non-2xx rows + failed requests; error rate = errors / (successful + errors).
- CPU window: the cgroup counters and per-process CPU seconds are deltas over
  the cgroup snapshot window, `cgroup.wall_s` (column `cgroup_wall_s`; it
  brackets hey's window, so it is slightly longer). Every cgroup and process
  rate divides by it; a file without `cgroup.wall_s` falls back to the RPS
  window (`wall_s`). RPS alone uses `window.wall_s`.
- Throttled share = nr_throttled / nr_periods; throttled time per second =
  throttled_s / cgroup_wall_s. On cgroup v1 (`cgroup_source` cgroup-v1)
  throttled_s is the kernel's throttled time summed over the task's CPUs, so
  it (and throttled_s_per_s) can exceed the wall time (> 1 s per s); it is
  reported as read, not corrected.
- Task CPU % = usage_s / cgroup_wall_s x 100; CPU of a process = cpu_s /
  cgroup_wall_s x 100 (% of one core); "vs target" = used / target.

Breaking points are in breaking.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

# One definition of the environment keys: the summary's env_* columns are all that the run file format requires.
from .record import ENVIRONMENT_KEYS
from .runfile import RunFileError, read_columns, read_meta

PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
SIDECAR_ROLES = ("proxy", "agent", "log_router")
DEFAULT_PERIOD_MS = 100.0


def percentile_name(p: float) -> str:
    """50 -> 'p50', 99.9 -> 'p99_9' (column names)."""
    return "p" + f"{p:g}".replace(".", "_")


def nearest_rank(sorted_values: np.ndarray, p: float) -> float:
    """Nearest-rank percentile of already sorted values: the ceil(p/100 * n)-th smallest."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    # round() keeps 99.9 * 1000 / 100 from becoming 999.0000000000001 -> rank 1000.
    rank = math.ceil(round(p * n / 100.0, 9))
    return float(sorted_values[min(max(rank, 1), n) - 1])


def latency_stats(response_time_s: np.ndarray, percentiles: Sequence[float] = PERCENTILES) -> dict[str, float]:
    """P50..P99.9, max and mean in ms of the given response times (seconds)."""
    ms = np.sort(np.asarray(response_time_s, dtype="float64")) * 1000.0
    out = {f"{percentile_name(p)}_ms": nearest_rank(ms, p) for p in percentiles}
    out["max_ms"] = float(ms[-1]) if len(ms) else math.nan
    out["mean_ms"] = float(ms.mean()) if len(ms) else math.nan
    return out


def _ratio(numerator: Any, denominator: Any) -> float:
    try:
        if numerator is None or denominator is None or float(denominator) == 0:
            return math.nan
        return float(numerator) / float(denominator)
    except (TypeError, ValueError):
        return math.nan


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def summarise_run(path: str | Path) -> dict[str, Any]:
    """One summary row for one run file (reads only response_time_s and status_code)."""
    path = Path(path)
    meta = read_meta(path)
    cols = read_columns(path, ["response_time_s", "status_code"])
    codes = cols["status_code"]
    ok_mask = (codes >= 200) & (codes <= 299)
    ok_times = cols["response_time_s"][ok_mask]
    del cols
    condition = meta.get("condition", {})
    load = meta.get("load", {}) or {}
    window = meta.get("window", {}) or {}
    requests = meta.get("requests", {}) or {}
    cgroup = meta.get("cgroup", {}) or {}
    container = meta.get("container", {}) or {}
    env = meta.get("environment", {}) or {}

    wall_s = window.get("wall_s") or load.get("duration_s")
    if not wall_s:
        raise RunFileError(f"{path}: neither window.wall_s nor load.duration_s is set; cannot compute RPS")
    wall_s = float(wall_s)
    # cgroup and process CPU deltas cover the cgroup snapshot window, not hey's.
    cpu_wall_s = float(cgroup.get("wall_s") or wall_s)
    ok = int(ok_mask.sum())
    non_2xx = int(len(codes) - ok)
    failed = int(requests.get("failed") or 0)
    errors = non_2xx + failed

    row: dict[str, Any] = {
        "condition_id": condition.get("id", path.stem),
        "app": condition.get("app"),
        "vcpu": _num(condition.get("vcpu")),
        "memory_mb": int(condition.get("memory_mb")),
        "sidecar_count": int(condition.get("sidecar_count")),
        "sidecar_load_pct": _num(condition.get("sidecar_load_pct")),
        "total_sidecar_load_pct": _num(condition.get("total_sidecar_load_pct")),
        "duration_s": _num(load.get("duration_s")),
        "concurrency": load.get("concurrency"),
        "warmup_s": _num(load.get("warmup_s")),
        "wall_s": wall_s,
        "cgroup_wall_s": cpu_wall_s,
        "responses": int(len(codes)),
        "successful": ok,
        "non_2xx": non_2xx,
        "failed": failed,
        "errors": errors,
        "error_rate": _ratio(errors, ok + errors),
        "rps": ok / wall_s,
    }
    row.update(latency_stats(ok_times))

    period_us = cgroup.get("period_us")
    row.update({
        "cgroup_source": cgroup.get("source"),
        "period_ms": _num(period_us) / 1000 if period_us else DEFAULT_PERIOD_MS,
        "quota_cpu_pct": 100 * _ratio(cgroup.get("quota_us"), period_us),
        "nr_periods": _num(cgroup.get("nr_periods")),
        "nr_throttled": _num(cgroup.get("nr_throttled")),
        "throttled_share": _ratio(cgroup.get("nr_throttled"), cgroup.get("nr_periods")),
        "throttled_s": _num(cgroup.get("throttled_s")),
        "throttled_s_per_s": _ratio(cgroup.get("throttled_s"), cpu_wall_s),
        "task_cpu_pct": 100 * _ratio(cgroup.get("usage_s"), cpu_wall_s),
    })

    by_role = {p.get("role"): p for p in meta.get("processes") or []}
    app_proc = by_role.get("app", {})
    row["app_cpu_pct"] = 100 * _ratio(app_proc.get("cpu_s"), cpu_wall_s)
    used_total, target_total = 0.0, 0.0
    for role in SIDECAR_ROLES:
        proc = by_role.get(role)
        used = 100 * _ratio(proc.get("cpu_s"), cpu_wall_s) if proc else math.nan
        target = _num(proc.get("target_pct")) if proc else math.nan
        row[f"{role}_cpu_pct"] = used
        row[f"{role}_target_pct"] = target
        row[f"{role}_cpu_vs_target"] = _ratio(used, target) if proc else math.nan
        if proc:
            used_total += used
            target_total += target if not math.isnan(target) else 0.0
    row["sidecars_cpu_pct"] = used_total
    row["sidecars_target_pct"] = target_total
    row["sidecars_cpu_vs_target"] = _ratio(used_total, target_total)

    peak = container.get("peak_memory_bytes")
    row.update({
        "oom_killed": bool(container.get("oom_killed", False)),
        "restart_count": container.get("restart_count"),
        "exit_code": container.get("exit_code"),
        "peak_memory_mb": _num(peak) / 2**20 if peak is not None else math.nan,
        "window_start": window.get("start"),
    })
    for key in ENVIRONMENT_KEYS:
        value = env.get(key)
        row[f"env_{key}"] = None if value is None else str(value)
    row["run_file"] = path.name
    return row


SORT_KEYS = ["app", "vcpu", "memory_mb", "sidecar_count", "total_sidecar_load_pct"]
SUMMARY_COLUMNS = (
    ["condition_id", "app", "vcpu", "memory_mb", "sidecar_count", "sidecar_load_pct", "total_sidecar_load_pct",
     "duration_s", "concurrency", "warmup_s", "wall_s", "cgroup_wall_s", "responses", "successful", "non_2xx",
     "failed", "errors", "error_rate", "rps"]
    + [f"{percentile_name(p)}_ms" for p in PERCENTILES] + ["max_ms", "mean_ms"]
    + ["cgroup_source", "period_ms", "quota_cpu_pct", "nr_periods", "nr_throttled", "throttled_share",
       "throttled_s", "throttled_s_per_s", "task_cpu_pct", "app_cpu_pct"]
    + [f"{role}_{what}" for role in SIDECAR_ROLES for what in ("cpu_pct", "target_pct", "cpu_vs_target")]
    + ["sidecars_cpu_pct", "sidecars_target_pct", "sidecars_cpu_vs_target", "oom_killed", "restart_count",
       "exit_code", "peak_memory_mb", "window_start"]
    + [f"env_{key}" for key in ENVIRONMENT_KEYS] + ["run_file"]
)


def summarise_runs(paths: Iterable[str | Path]) -> pd.DataFrame:
    """One row per run (= per condition); the run files are read one at a time."""
    rows = [summarise_run(p) for p in paths]
    frame = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    duplicated = frame["condition_id"][frame["condition_id"].duplicated()].tolist()
    if duplicated:
        raise RunFileError(f"condition(s) {duplicated} appear in more than one run file; pass each condition's file once")
    return frame.sort_values(SORT_KEYS, kind="stable").reset_index(drop=True)


def environments(summary: pd.DataFrame) -> pd.DataFrame:
    """The distinct measurement environments in a summary (host, CPU, kernel, engine, image...)."""
    keys = [c for c in ("env_hostname", "env_cpu_model", "env_kernel", "env_docker_version", "env_engine_id",
                        "env_hey_version") if c in summary.columns]
    if not keys or summary.empty:
        return pd.DataFrame()
    return summary[keys].fillna("?").drop_duplicates().reset_index(drop=True)

"""Statistics of runs and conditions, computed from the raw per-request samples.

Definitions (the tables and charts keep to these):

- Successful response: a row with status 200..299. hey's CSV has one row per
  response; requests that failed without a response appear only in the
  metadata (`requests.failed`).
- Load window (`load_s`): hey's own span, from its start to the end of the
  last recorded response (`window.load_s`; for format 1 files the span of the
  samples, max(offset_s + response_time_s); failing that `window.wall_s`).
- RPS = successful responses / load_s, per run.
- Latency statistics (P50, P90, P95, P99, P99.9, max, mean; in ms) are over the
  run's successful responses' `response_time_s`.
- A condition's value of a metric with an interval (rps, p50..p99_9_ms,
  slow_<k>p_share) is the mean of its measured runs' values: the runs are the
  independent units (repstats.py). With one run it is that run's value.
  max_ms = the largest of the runs' max_ms; mean_ms = the runs' mean_ms
  weighted by their successful responses (= the mean over all responses).
- Percentile = nearest rank: the smallest sample with at least p % of the
  samples at or below it (numpy method "inverted_cdf"). It is always a latency
  that was observed, so the CFS-period steps (100 ms, 200 ms) stay sharp
  instead of being interpolated between two modes. It is also what hey's own
  summary reports, within one rank.
- Tail shares: slow_<k>p_share = share of successful responses slower than
  k CFS periods (k = 1, 2, 3; period from `cgroup.period_us`, 100 ms when
  absent): the requests that waited for one, two, three later periods.
- Steady state, over the whole seconds of the load window only: W =
  floor(load_s) seconds from hey's start (the sliver after the last whole
  second is the drain, where hey starts nothing, and would skew any rate).
  first_third_rps / last_third_rps = successful responses started in the first
  / last floor(W / 3) whole seconds, per second; thirds_diff_se_rps = the
  standard error of their difference from the per-second counts of those
  seconds (Poisson, count / seconds^2, when a third is one second long).
  steady_rps = successful responses started in the second half of the W
  seconds / W / 2; steady_p99_ms is over those responses. A condition's are the
  means of its runs'.
- Intervals (`<metric>_lo`, `<metric>_hi`, condition summary only), named in
  `interval_method`:
  - "t over runs" (2 or more measured runs): Student's t 95 % interval of the
    mean of the runs' values (repstats.mean_interval), clipped to what the
    metric can be (shares to [0, 1], RPS and latencies to >= 0). Its coverage
    is checked by simulation through this function (tests/test_coverage.py).
    It needs only the per-run rows, so a published set whose run files are gone
    is summarised again from its runs_summary.csv.
  - "within-run only" (one measured run): the within-run block bootstrap of
    intervals.py (1 s blocks, B = 1000, seeded by the condition id); it says
    nothing about how a second run would differ. Without the run file (raw
    runs gone) there is no interval: "none".
- Run-to-run CV (`<metric>_cv`, 2 or more runs): the runs' sample standard
  deviation / their mean (repstats.run_cv), for every metric with an interval.
- Per-run values (`rps_runs`, `p99_ms_runs`): the runs' values in repeat order,
  joined by ";", so that tables and charts give a ratio of two conditions the
  uncertainty of both sides (repstats.ratio_interval) from the summary alone.
- Errors = non-2xx rows + failed requests; error rate = errors / (successful + errors).
- CPU window: the cgroup counters and per-process CPU seconds are deltas over
  the cgroup snapshot window, `cgroup.wall_s` (column `cgroup_wall_s`).
  Every cgroup and process rate divides by it; a file without `cgroup.wall_s`
  falls back to `window.wall_s`. A condition's CPU columns are means over its
  repetitions.
- Throttled share = nr_throttled / nr_periods; throttled time per second =
  throttled_s / cgroup_wall_s. On cgroup v1 (`cgroup_source` cgroup-v1)
  throttled_s is the kernel's throttled time summed over the task's CPUs, so
  it (and throttled_s_per_s) can exceed the wall time (> 1 s per s); it is
  reported as read, not corrected.
- Task CPU % = usage_s / cgroup_wall_s x 100; CPU of a process = cpu_s /
  cgroup_wall_s x 100 (% of one core); "vs target" = used / target.
- Host busy % = host.busy_s / host.total_s x 100 (all host CPUs, over the CPU
  window); load generator CPU % = loadgen.cpu_s / cgroup_wall_s x 100.
- Sidecars' delivered CPU (`sidecars_cpu_pct`, % of one core) is a value shown
  beside the nominal load, not a flag: the article's wall-clock sidecars burn
  less than nominal when the task is throttled, by its method.
- Flags: flags.py (codes, thresholds); `flags` holds the codes joined by ",".
- Failed runs (on_failure: record; README "Failed runs"): a failure record is a
  runs_summary row with `status` failed, its `failure` text, its condition's
  identity and no number (NaN), flag run_failed. A condition pools its
  measured repetitions only (`repeats` counts them, `failed_runs` the failed
  ones, `failure` joins their texts) and carries run_failed if any failed; with
  none measured every value is NaN and the tables read "failed".

- Open loop (load_model open; docs/open-loop.md): latencies run from each request's
  intended send time. Requests the generator dropped (never sent: every connection
  busy) and failed requests count as slower than any threshold in the tail shares:
  slow_<k>p_share = (successful slower than k periods + dropped + failed) /
  (successful + dropped + failed). Percentiles stay over the successful responses,
  and not_on_time_share ((late + dropped) / scheduled) stands beside them (flag
  not_on_time above 1 %). rate_ratio = sent rate / set rate replaces time coverage,
  which does not apply (time_coverage is empty). A closed run's open-loop columns
  are empty and its load_model is closed.

Breaking points are in breaking.py.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from . import flags as flagmod
from . import repstats
from .intervals import RESAMPLES, condition_intervals, metric_names, percentile_name, run_blocks

# One definition of the environment keys: the summary's env_* columns are all that the run file format requires.
from .record import ENVIRONMENT_KEYS
from .record import failure_text
from .runfile import RunFile, RunFileError

PERCENTILES = (50.0, 90.0, 95.0, 99.0, 99.9)
SIDECAR_ROLES = ("proxy", "agent", "log_router")
DEFAULT_PERIOD_MS = 100.0
SLOW_PERIODS = (1, 2, 3)
REPEAT_FILE = re.compile(r"^rep(\d+)\.parquet$")


def _identity(condition: dict, load: dict) -> dict[str, Any]:
    """A run row's condition and load columns, for measured runs and failure records alike."""
    return {
        "app": condition.get("app"),
        "vcpu": _num(condition.get("vcpu")),
        "memory_mb": int(condition.get("memory_mb")),
        "sidecar_count": int(condition.get("sidecar_count")),
        "sidecar_load_pct": _num(condition.get("sidecar_load_pct")),
        "total_sidecar_load_pct": _num(condition.get("total_sidecar_load_pct")),
        "duration_s": _num(load.get("duration_s")),
        "concurrency": load.get("concurrency"),
        "warmup_s": _num(load.get("warmup_s")),
        "knobs": knobs_label(condition),
    }


def knobs_label(condition: Mapping[str, Any]) -> str:
    """The knobs a condition (as a run file holds it) sets, as text; "" at the article's settings (and in
    files from before the knobs)."""
    from .conditions import ConfigError, Condition, KNOBS

    if not any(key in condition for key in KNOBS):
        return ""
    try:
        return Condition.from_dict(condition).knobs_text
    except (ConfigError, KeyError, TypeError) as err:
        raise RunFileError(
            f"run condition {condition.get('id')!r}: its knobs do not read back ({err})"
        ) from None


def nearest_rank(sorted_values: np.ndarray, p: float) -> float:
    """Nearest-rank percentile of already sorted values: the ceil(p/100 * n)-th smallest."""
    n = len(sorted_values)
    if n == 0:
        return math.nan
    # round() keeps 99.9 * 1000 / 100 from becoming 999.0000000000001 -> rank 1000.
    rank = math.ceil(round(p * n / 100.0, 9))
    return float(sorted_values[min(max(rank, 1), n) - 1])


def latency_stats(
    response_time_s: np.ndarray, percentiles: Sequence[float] = PERCENTILES
) -> dict[str, float]:
    """P50..P99.9, max and mean in ms of the given response times (seconds)."""
    ms = np.sort(np.asarray(response_time_s, dtype="float64")) * 1000.0
    out = {f"{percentile_name(p)}_ms": nearest_rank(ms, p) for p in percentiles}
    out["max_ms"] = float(ms[-1]) if len(ms) else math.nan
    out["mean_ms"] = float(ms.mean()) if len(ms) else math.nan
    return out


def slow_shares(
    response_time_s: np.ndarray, period_ms: float, periods: Sequence[int] = SLOW_PERIODS
) -> dict[str, float]:
    """slow_<k>p_share: share of the given response times slower than k x period_ms."""
    rt = np.asarray(response_time_s, dtype="float64")
    return {
        f"slow_{k}p_share": float((rt > k * period_ms / 1000.0).mean()) if len(rt) else math.nan
        for k in periods
    }


def _ratio(numerator: Any, denominator: Any) -> float:
    try:
        if numerator is None or denominator is None or float(denominator) == 0:
            return math.nan
        return float(numerator) / float(denominator)
    except (TypeError, ValueError):
        return math.nan


def _num(value: Any) -> float:
    return math.nan if value is None else float(value)


def repeat_of(path: str | Path, meta: dict[str, Any]) -> int:
    """The repetition index: meta `repeat` (format 2), else N of a rep<N>.parquet name, else 1."""
    if meta.get("repeat") is not None:
        return int(meta["repeat"])
    match = REPEAT_FILE.match(Path(path).name)
    return int(match.group(1)) if match else 1


@dataclass(frozen=True)
class RunSamples:
    """What the statistics need of one run file: metadata, successful responses, load window."""

    path: Path
    meta: dict[str, Any]
    ok_response_time_s: np.ndarray
    ok_offset_s: np.ndarray
    responses: int
    load_s: float
    wall_s: float


def read_samples(path: str | Path) -> RunSamples:
    """Read one run file's metadata and its successful responses (three columns only)."""
    with RunFile(path) as run:
        return samples_of(run)


def samples_of(run: RunFile) -> RunSamples:
    """read_samples of a run file already open."""
    path = run.path
    meta = run.meta()
    cols = run.columns(["response_time_s", "status_code", "offset_s"])
    codes = cols["status_code"]
    ok_mask = (codes >= 200) & (codes <= 299)
    window = meta.get("window", {}) or {}
    load = meta.get("load", {}) or {}
    wall_s = window.get("wall_s") or load.get("duration_s")
    if not wall_s:
        raise RunFileError(
            f"{path}: neither window.wall_s nor load.duration_s is set; cannot compute RPS"
        )
    load_s = window.get("load_s")
    if not load_s and len(codes):
        # Format 1: hey's span from the samples themselves (all rows: errors take time too).
        load_s = float(np.max(cols["offset_s"] + cols["response_time_s"]))
    load_s = float(load_s or wall_s)
    return RunSamples(
        path,
        meta,
        cols["response_time_s"][ok_mask],
        cols["offset_s"][ok_mask],
        int(len(codes)),
        load_s,
        float(wall_s),
    )


def whole_seconds(load_s: float) -> int:
    """The whole seconds of a load window: what rates over time are counted on (the rest is the drain)."""
    # A window of 9.9999999 s from float noise is 10 whole seconds, not 9.
    return int(math.floor(round(load_s, 6))) if math.isfinite(load_s) and load_s > 0 else 0


def _thirds(offset_s: np.ndarray, load_s: float) -> dict[str, float]:
    """First/last third RPS over the whole seconds of the window, and the standard error of their difference.

    The drain sliver after the last whole second is left out: hey starts nothing there, so its rate
    (0, or a few responses / 0.002 s) is no rate of the app and inflated the error tenfold."""
    seconds = whole_seconds(load_s)
    starts = np.floor(np.asarray(offset_s, dtype="float64"))
    starts = starts[(starts >= 0) & (starts < seconds)].astype("int64")
    return thirds_of_counts(np.bincount(starts, minlength=seconds))


def thirds_of_counts(counts: Sequence[float]) -> dict[str, float]:
    """First/last third RPS of responses counted per whole second, and the standard error of their difference."""
    counts = np.asarray(counts, dtype="float64")
    seconds = len(counts)
    third = seconds // 3
    if third < 1:
        return {
            "first_third_rps": math.nan,
            "last_third_rps": math.nan,
            "thirds_diff_se_rps": math.nan,
        }
    first, last = counts[:third], counts[seconds - third :]
    out = {"first_third_rps": float(first.mean()), "last_third_rps": float(last.mean())}
    # Per-second counts of each third give its rate's standard error; one second alone: Poisson.
    variances = [
        c.var(ddof=1) / third if third >= 2 else float(c.sum()) / third**2 for c in (first, last)
    ]
    out["thirds_diff_se_rps"] = math.sqrt(sum(variances))
    return out


def _steady(ok_rt: np.ndarray, ok_offset: np.ndarray, load_s: float) -> tuple[np.ndarray, float]:
    """Response times started in the second half of the window's whole seconds, and that half's length
    (a window shorter than a second: the second half of it)."""
    seconds = whole_seconds(load_s)
    span = float(seconds) if seconds >= 1 else load_s
    inside = (ok_offset >= span / 2.0) & (ok_offset < span)
    return ok_rt[inside], span / 2.0


def summarise_samples(samples: RunSamples) -> dict[str, Any]:
    """One summary row for one run (see the module docstring for every definition)."""
    path, meta = samples.path, samples.meta
    ok_times = samples.ok_response_time_s
    condition = meta.get("condition", {})
    load = meta.get("load", {}) or {}
    window = meta.get("window", {}) or {}
    requests = meta.get("requests", {}) or {}
    cgroup = meta.get("cgroup", {}) or {}
    container = meta.get("container", {}) or {}
    env = meta.get("environment", {}) or {}
    limits = meta.get("limits", {}) or {}
    host = meta.get("host", {}) or {}
    loadgen = meta.get("loadgen", {}) or {}

    wall_s, load_s = samples.wall_s, samples.load_s
    # cgroup and process CPU deltas cover the cgroup snapshot window, not hey's.
    cpu_wall_s = float(cgroup.get("wall_s") or wall_s)
    ok = int(len(ok_times))
    non_2xx = int(samples.responses - ok)
    failed = int(requests.get("failed") or 0)
    errors = non_2xx + failed
    period_us = cgroup.get("period_us")
    period_ms = _num(period_us) / 1000 if period_us else DEFAULT_PERIOD_MS

    row: dict[str, Any] = {
        "condition_id": condition.get("id", path.stem),
        "repeat": repeat_of(path, meta),
        **_identity(condition, load),
        "wall_s": wall_s,
        "load_s": load_s,
        "cgroup_wall_s": cpu_wall_s,
        "responses": samples.responses,
        "successful": ok,
        "non_2xx": non_2xx,
        "failed": failed,
        "errors": errors,
        "error_rate": _ratio(errors, ok + errors),
        "rps": ok / load_s,
    }
    row.update(latency_stats(ok_times))
    row.update(slow_shares(ok_times, period_ms))
    row.update(open_loop_columns(meta, ok_times, period_ms, failed))
    row.update(_thirds(samples.ok_offset_s, load_s))
    steady_times, steady_s = _steady(ok_times, samples.ok_offset_s, load_s)
    row["steady_rps"] = len(steady_times) / steady_s
    row["steady_p99_ms"] = nearest_rank(np.sort(steady_times) * 1000.0, 99.0)

    row.update(
        {
            "cgroup_source": cgroup.get("source"),
            "period_ms": period_ms,
            "quota_cpu_pct": 100 * _ratio(cgroup.get("quota_us"), period_us),
            "limit_vcpu": _num(limits.get("vcpu")),
            "memory_limit_mb": _num(limits.get("memory_limit_bytes")) / 2**20,
            "swap_limit_mb": _num(limits.get("swap_limit_bytes")) / 2**20,
            "nr_periods": _num(cgroup.get("nr_periods")),
            "nr_throttled": _num(cgroup.get("nr_throttled")),
            "throttled_share": _ratio(cgroup.get("nr_throttled"), cgroup.get("nr_periods")),
            "throttled_s": _num(cgroup.get("throttled_s")),
            "throttled_s_per_s": _ratio(cgroup.get("throttled_s"), cpu_wall_s),
            "task_cpu_pct": 100 * _ratio(cgroup.get("usage_s"), cpu_wall_s),
            # Where the kernel reports CFS burst (Linux 5.14+); NaN in older files.
            "nr_bursts": _num(cgroup.get("nr_bursts")),
            "burst_s": _num(cgroup.get("burst_s")),
        }
    )

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
    row.update(
        {
            "host_cpus": _num(host.get("cpus")),
            "host_busy_pct": 100 * _ratio(host.get("busy_s"), host.get("total_s")),
            "loadgen_cpu_pct": 100 * _ratio(loadgen.get("cpu_s"), cpu_wall_s),
            "time_coverage": _num(window.get("time_coverage")),
            "cap_reached": bool(requests.get("cap_reached", False)),
            "oom_killed": bool(container.get("oom_killed", False)),
            "restart_count": container.get("restart_count"),
            "exit_code": container.get("exit_code"),
            "peak_memory_mb": _num(peak) / 2**20 if peak is not None else math.nan,
            "window_start": window.get("start"),
        }
    )
    for key in ENVIRONMENT_KEYS:
        value = env.get(key)
        row[f"env_{key}"] = None if value is None else str(value)
    row["status"] = MEASURED
    row["failure"] = None
    row["flags"] = flagmod.join(flagmod.run_flags(row))
    row["run_file"] = str(path)
    return row


MEASURED, FAILED = "measured", "failed"


def failed_run_row(path: str | Path, failure: dict[str, Any]) -> dict[str, Any]:
    """The runs_summary row of a failure record: the condition's identity, status failed, no number."""
    condition = failure["condition"]
    load = failure.get("load") or {}
    row: dict[str, Any] = {column: math.nan for column in SUMMARY_COLUMNS}
    row.update(
        {
            "condition_id": condition["id"],
            "repeat": int(failure["repeat"]),
            **_identity(condition, load),
            "cgroup_source": None,
            "cap_reached": False,
            "oom_killed": bool(failure.get("oom_killed")),
            "exit_code": failure.get("container_exit_code"),
            "window_start": None,
            "status": FAILED,
            "failure": failure_text(failure),
            "run_file": str(path),
            "load_model": condition.get("load_model", "closed"),
        }
    )
    # What places an open-loop condition among the open loop's: its rate and arrivals.
    if row["load_model"] == "open":
        row.update(arrivals=condition.get("arrivals"), rate_share=_num(condition.get("rate_share")))
    for key in ENVIRONMENT_KEYS:
        row[f"env_{key}"] = None
    row["flags"] = flagmod.join(flagmod.failed_run_flags(row))
    return row


def summarise_run(path: str | Path) -> dict[str, Any]:
    """One summary row for one run file (reads three columns: response_time_s, status_code, offset_s),
    or for a failure record (failed_run_row)."""
    with RunFile(path) as run:
        failure = run.failure()
        if failure is not None:
            return failed_run_row(path, failure)
        return summarise_samples(samples_of(run))


# --- load model (open loop) ---------------------------------------------------------------------
# Last in both summaries, so that the columns before them keep their places; empty for closed runs.
OPEN_TEXT_COLUMNS = ["load_model", "arrivals"]
OPEN_MEAN_COLUMNS = [
    "rate_share",
    "rate_per_s",
    "sent_rate_per_s",
    "rate_ratio",
    "not_on_time_share",
    "capacity_rps",
]
OPEN_SUM_COLUMNS = ["late", "dropped"]
OPEN_COLUMNS = OPEN_TEXT_COLUMNS + OPEN_MEAN_COLUMNS + OPEN_SUM_COLUMNS


def open_loop_columns(
    meta: dict[str, Any], ok_times: np.ndarray, period_ms: float, failed: int
) -> dict[str, Any]:
    """A run's open-loop columns, and for an open run its tail shares with dropped and failed requests counted
    as slower than any threshold (they replace slow_shares' values)."""
    section = meta.get("open_loop")
    load_model = (meta.get("condition") or {}).get("load_model") or (meta.get("load") or {}).get(
        "load_model"
    )
    if not section:
        return {
            "load_model": load_model or "closed",
            "arrivals": None,
            **{c: math.nan for c in OPEN_MEAN_COLUMNS + OPEN_SUM_COLUMNS},
        }
    summary = section.get("summary") or {}
    scheduled = _num(summary.get("scheduled"))
    late, dropped = _num(summary.get("late")), _num(summary.get("dropped"))
    rate = _num(section.get("rate_per_s"))
    out = {
        "load_model": load_model or "open",
        "arrivals": section.get("arrivals"),
        "rate_share": _num(section.get("rate_share")),
        "rate_per_s": rate,
        "sent_rate_per_s": _num(summary.get("sent_rate_per_s")),
        "rate_ratio": _ratio(summary.get("sent_rate_per_s"), rate),
        "not_on_time_share": _ratio(late + dropped, scheduled),
        "capacity_rps": _num((section.get("capacity") or {}).get("rps_mean")),
        "late": late,
        "dropped": dropped,
    }
    never_answered = (0 if math.isnan(dropped) else dropped) + failed
    rt = np.asarray(ok_times, dtype="float64")
    total = len(rt) + never_answered
    for k in SLOW_PERIODS:
        slow = float((rt > k * period_ms / 1000.0).sum()) + never_answered
        out[f"slow_{k}p_share"] = slow / total if total else math.nan
    return out


def _numbers(values: np.ndarray) -> np.ndarray:
    """Values as floats, anything that is not a number as NaN (pandas.to_numeric, errors="coerce").
    Numbers and None, the common case, go through numpy at a fraction of the cost."""
    if all(value is None or isinstance(value, (int, float, np.number)) for value in values):
        return np.asarray(values, dtype="float64")
    return pd.to_numeric(pd.Series(values, dtype=object), errors="coerce").to_numpy(dtype="float64")


def _open_loop_condition(text: dict[str, np.ndarray]) -> dict[str, Any]:
    """A condition's open-loop columns from its measured runs' (text arrays): means, sums, the load model."""
    row: dict[str, Any] = {c: _distinct(text[c]) for c in OPEN_TEXT_COLUMNS}
    if row["load_model"] is None:
        row["load_model"] = "closed"
    for column in OPEN_MEAN_COLUMNS + OPEN_SUM_COLUMNS:
        values = _numbers(text[column])
        values = values[np.isfinite(values)]
        if column in OPEN_SUM_COLUMNS:
            row[column] = float(values.sum()) if len(values) else math.nan
        else:
            row[column] = float(values.mean()) if len(values) else math.nan
    return row


# --- end load model ---------------------------------------------------------------------------
SORT_KEYS = ["app", "vcpu", "memory_mb", "sidecar_count", "total_sidecar_load_pct", "knobs"]
IDENTITY_COLUMNS = [
    "condition_id",
    "app",
    "vcpu",
    "memory_mb",
    "sidecar_count",
    "sidecar_load_pct",
    "total_sidecar_load_pct",
    "duration_s",
    "concurrency",
    "warmup_s",
    "knobs",
]
LATENCY_COLUMNS = [f"{percentile_name(p)}_ms" for p in PERCENTILES] + ["max_ms", "mean_ms"]
SLOW_COLUMNS = [f"slow_{k}p_share" for k in SLOW_PERIODS]
STEADY_COLUMNS = [
    "first_third_rps",
    "last_third_rps",
    "thirds_diff_se_rps",
    "steady_rps",
    "steady_p99_ms",
]
CPU_COLUMNS = (
    [
        "period_ms",
        "quota_cpu_pct",
        "limit_vcpu",
        "nr_periods",
        "nr_throttled",
        "throttled_share",
        "throttled_s",
        "throttled_s_per_s",
        "task_cpu_pct",
        "app_cpu_pct",
    ]
    + [
        f"{role}_{what}"
        for role in SIDECAR_ROLES
        for what in ("cpu_pct", "target_pct", "cpu_vs_target")
    ]
    + [
        "sidecars_cpu_pct",
        "sidecars_target_pct",
        "sidecars_cpu_vs_target",
        "host_busy_pct",
        "loadgen_cpu_pct",
        "nr_bursts",
        "burst_s",
    ]
)
COUNT_COLUMNS = ["responses", "successful", "non_2xx", "failed", "errors"]
ENV_COLUMNS = [f"env_{key}" for key in ENVIRONMENT_KEYS]
SUMMARY_COLUMNS = (  # per run (runs_summary)
    IDENTITY_COLUMNS[:1]
    + ["repeat"]
    + IDENTITY_COLUMNS[1:]
    + ["wall_s", "load_s", "cgroup_wall_s"]
    + COUNT_COLUMNS
    + ["error_rate", "rps"]
    + LATENCY_COLUMNS
    + SLOW_COLUMNS
    + STEADY_COLUMNS
    + ["cgroup_source"]
    + CPU_COLUMNS[:2]
    + ["limit_vcpu", "memory_limit_mb", "swap_limit_mb"]
    + CPU_COLUMNS[3:]
    + [
        "host_cpus",
        "time_coverage",
        "cap_reached",
        "oom_killed",
        "restart_count",
        "exit_code",
        "peak_memory_mb",
        "window_start",
    ]
    + ENV_COLUMNS
    + ["status", "failure", "flags", "run_file"]
    + OPEN_COLUMNS
)
INTERVAL_METRICS = metric_names(PERCENTILES, SLOW_PERIODS)
CONDITION_COLUMNS = (  # per condition (summary)
    IDENTITY_COLUMNS
    + ["repeats", "failed_runs", "wall_s", "load_s", "cgroup_wall_s", "interval_method"]
    + ["rps", "rps_lo", "rps_hi", "rps_cv"]
    + [
        c
        for m in LATENCY_COLUMNS
        for c in ((m, f"{m}_lo", f"{m}_hi", f"{m}_cv") if m in INTERVAL_METRICS else (m,))
    ]
    + [c for m in SLOW_COLUMNS for c in (m, f"{m}_lo", f"{m}_hi", f"{m}_cv")]
    + ["rps_runs", "p99_ms_runs"]
    + ["steady_rps", "steady_p99_ms", "first_third_rps", "last_third_rps"]
    + COUNT_COLUMNS
    + ["error_rate", "cgroup_source"]
    + CPU_COLUMNS
    + ["time_coverage", "cap_reached", "oom_killed", "restart_count", "peak_memory_mb"]
    + ENV_COLUMNS
    + ["failure", "flags"]
    + [f"flag_{code}" for code in flagmod.CODES]
    + OPEN_COLUMNS
)


def summarise_runs(paths: Iterable[str | Path]) -> pd.DataFrame:
    """One row per run file (a condition has one per repetition); the files are read one at a time."""
    rows = [summarise_run(p) for p in paths]
    frame = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    duplicated = frame[frame.duplicated(["condition_id", "repeat"], keep=False)]
    if not duplicated.empty:
        runs = sorted(set(zip(duplicated["condition_id"], duplicated["repeat"])))
        raise RunFileError(
            f"condition repetition(s) {runs} appear in more than one run file "
            f"({sorted(duplicated['run_file'])}); pass each repetition's file once"
        )
    return frame.sort_values(SORT_KEYS + ["repeat"], kind="stable").reset_index(drop=True)


T_OVER_RUNS = "t over runs"
WITHIN_RUN_ONLY = "within-run only"
NO_INTERVAL = "none"
# Metrics bounded by what they can be: a t interval of a share near 0 can reach below it.
SHARE_METRICS = {name for name in INTERVAL_METRICS if name.startswith("slow_")}
RUN_VALUE_COLUMNS = ("rps", "p99_ms")  # per-run values carried in the summary as "<metric>_runs"


def join_run_values(values: Iterable[float]) -> str:
    """Runs' values as "512.3;498.1;530.2" (NaN as "nan"): the summary's `<metric>_runs` cells."""
    return ";".join("nan" if not math.isfinite(float(v)) else f"{float(v):.6g}" for v in values)


def run_values(cell: Any) -> np.ndarray:
    """The per-run values of a `<metric>_runs` cell; empty when the summary predates it."""
    if cell is None or (isinstance(cell, float) and math.isnan(cell)):
        return np.array([])
    text = str(cell).strip()
    if not text:
        return np.array([])
    try:
        return np.array([float(v) for v in text.split(";")], dtype="float64")
    except ValueError as err:
        raise ValueError(f"per-run values {text!r}: not numbers joined by ';' ({err})") from None


def _runs_of(row: Any, metric: str) -> np.ndarray:
    """A summary row's per-run values of a metric; its one value when the summary predates `<metric>_runs`."""
    values = run_values(row.get(f"{metric}_runs")) if hasattr(row, "get") else np.array([])
    if len(values) == 0:
        value = row.get(metric) if hasattr(row, "get") else None
        values = np.array([math.nan if value is None else float(value)])
    return values


def condition_ratio(numerator: Any, denominator: Any, metric: str = "rps") -> repstats.Estimate:
    """Ratio of two conditions' metric (summary rows), with both sides' run-to-run uncertainty:
    repstats.ratio_interval over their per-run values (`<metric>_runs`). A condition over itself (a
    baseline's own retention) is exactly 1: the same runs on both sides are no two samples."""
    ids = [
        row.get("condition_id") if hasattr(row, "get") else None for row in (numerator, denominator)
    ]
    if ids[0] is not None and ids[0] == ids[1]:
        n = len(_runs_of(numerator, metric))
        return repstats.Estimate(1.0, 1.0, 1.0, n, "same condition")
    return repstats.ratio_interval(_runs_of(numerator, metric), _runs_of(denominator, metric))


def condition_contrast(terms: Sequence[tuple[Any, int]], metric: str = "rps") -> repstats.Estimate:
    """Product of conditions' metric (summary rows), each to the power +1 or -1, with every condition's
    run-to-run uncertainty: repstats.contrast_interval over their per-run values. Next.js's retention
    over Go's is [(next_L, 1), (next_0, -1), (go_L, -1), (go_0, 1)]."""
    return repstats.contrast_interval([(_runs_of(row, metric), sign) for row, sign in terms])


def ratio_to_published(row: Any, published: float, metric: str = "rps") -> repstats.Estimate:
    """Ratio of a condition's metric (summary row) to a published number without uncertainty
    (repstats.ratio_to_exact over its per-run values)."""
    return repstats.ratio_to_exact(_runs_of(row, metric), float(published))


def _clip(name: str, value: float) -> float:
    if math.isnan(value):
        return value
    return min(max(value, 0.0), 1.0) if name in SHARE_METRICS else max(value, 0.0)


def _within_run(
    condition_id: str, run_file: Any, period_ms: float, resamples: int, base_seed: int
) -> dict[str, tuple[float, float]]:
    """The within-run bootstrap interval of a condition's one run; none when its run file is gone."""
    if not isinstance(run_file, (str, Path)) or not Path(run_file).exists():
        return {}
    samples = read_samples(run_file)
    blocks = run_blocks(samples.ok_response_time_s, samples.ok_offset_s, samples.load_s)
    period = period_ms if math.isfinite(period_ms) else DEFAULT_PERIOD_MS
    found = condition_intervals(
        condition_id,
        [blocks],
        period,
        resamples=resamples,
        base_seed=base_seed,
        percentiles=PERCENTILES,
        slow_periods=SLOW_PERIODS,
    )
    return {name: (found.intervals[name].lo, found.intervals[name].hi) for name in INTERVAL_METRICS}


def _distinct(values: Iterable[Any]) -> str | None:
    """The one value, or the distinct values joined by ";" (None and NaN left out): runs from different
    environments stay visible."""
    distinct = sorted(
        {
            str(v)
            for v in values
            if v is not None and not (isinstance(v, float) and math.isnan(v)) and v is not pd.NA
        }
    )
    return ";".join(distinct) if distinct else None


def _codes(values: Iterable[Any]) -> list[list[str]]:
    return [str(f).split(",") if isinstance(f, str) and f else [] for f in values]


# Per-run columns a condition averages, and those it takes as numbers in other ways.
MEAN_COLUMNS = (
    "wall_s",
    "load_s",
    "cgroup_wall_s",
    "first_third_rps",
    "last_third_rps",
    "steady_rps",
    "steady_p99_ms",
    "time_coverage",
    *CPU_COLUMNS,
)
NUMERIC_COLUMNS = tuple(
    dict.fromkeys(
        (
            *INTERVAL_METRICS,
            *MEAN_COLUMNS,
            *COUNT_COLUMNS,
            "max_ms",
            "mean_ms",
            "restart_count",
            "peak_memory_mb",
            "repeat",
        )
    )
)
TEXT_COLUMNS = tuple(
    dict.fromkeys(
        (
            *IDENTITY_COLUMNS,
            "status",
            "failure",
            "flags",
            "run_file",
            "cgroup_source",
            "cap_reached",
            "oom_killed",
            *ENV_COLUMNS,
            *OPEN_COLUMNS,
        )
    )
)


def _columns(runs: pd.DataFrame) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Per-run rows as plain arrays: the text columns by name, NUMERIC_COLUMNS as one float matrix."""
    numeric = (
        runs[list(NUMERIC_COLUMNS)].apply(pd.to_numeric, errors="coerce").to_numpy(dtype="float64")
    )
    text = {
        c: (
            runs[c].to_numpy(dtype=object)
            if c in runs.columns
            else np.full(len(runs), None, dtype=object)
        )
        for c in TEXT_COLUMNS
    }
    return text, numeric


def _summarise(
    text: dict[str, np.ndarray], numeric: np.ndarray, resamples: int, base_seed: int
) -> dict[str, Any]:
    """One condition's row from its per-run rows (_columns of its runs_summary rows), see the module
    docstring. With 2 or more measured runs it reads nothing else; with one it reads that run's file
    for the within-run interval. Failed repetitions (status failed) are counted (failed_runs) and
    described (failure), never averaged in."""
    status = np.array([MEASURED if v is None else v for v in text["status"]], dtype=object)
    is_failed = status == FAILED
    failed = {c: v[is_failed] for c, v in text.items()}
    if is_failed.all():
        return _failed_condition(failed)
    measured = np.flatnonzero(~is_failed)
    # Repeat order: the per-run values (<metric>_runs) read as repetition 1, 2, 3.
    measured = measured[
        np.argsort(numeric[measured, NUMERIC_COLUMNS.index("repeat")], kind="stable")
    ]
    text = {c: v[measured] for c, v in text.items()}
    numeric = numeric[measured]
    col = {name: numeric[:, i] for i, name in enumerate(NUMERIC_COLUMNS)}
    condition_id = str(text["condition_id"][0])
    for column in ("duration_s", "concurrency", "warmup_s"):
        if len({str(v) for v in text[column]}) > 1:
            raise RunFileError(
                f"{condition_id}: repetitions were measured with different {column} "
                f"({', '.join(f'{f}: {v}' for f, v in zip(text['run_file'], text[column]))}); "
                "rerun them with one load setting"
            )
    n = len(measured)
    row: dict[str, Any] = {c: text[c][0] for c in IDENTITY_COLUMNS}
    row["repeats"] = n
    row["failed_runs"] = int(is_failed.sum())
    row["failure"] = _distinct(failed["failure"]) if is_failed.any() else None

    within = (
        _within_run(
            condition_id,
            text["run_file"][0],
            float(np.nanmean(col["period_ms"]))
            if np.isfinite(col["period_ms"]).any()
            else math.nan,
            resamples,
            base_seed,
        )
        if n == 1
        else {}
    )
    row["interval_method"] = T_OVER_RUNS if n >= 2 else WITHIN_RUN_ONLY if within else NO_INTERVAL
    for name in INTERVAL_METRICS:
        found = repstats.mean_interval(col[name])
        lo, hi = (found.lo, found.hi) if n >= 2 else within.get(name, (math.nan, math.nan))
        row[name], row[f"{name}_lo"], row[f"{name}_hi"] = (
            found.value,
            _clip(name, lo),
            _clip(name, hi),
        )
        row[f"{name}_cv"] = repstats.run_cv(col[name])
    for name in RUN_VALUE_COLUMNS:
        row[f"{name}_runs"] = join_run_values(col[name])
    ok, mean_ms = col["successful"], col["mean_ms"]
    known = np.isfinite(mean_ms) & np.isfinite(ok)
    row["max_ms"] = (
        float(np.nanmax(col["max_ms"])) if np.isfinite(col["max_ms"]).any() else math.nan
    )
    row["mean_ms"] = (
        float((mean_ms[known] * ok[known]).sum() / ok[known].sum()) if ok[known].sum() else math.nan
    )
    for column in MEAN_COLUMNS:
        values = col[column][np.isfinite(col[column])]
        row[column] = repstats.mean_of(values) if len(values) else math.nan
    for column in COUNT_COLUMNS:
        row[column] = int(np.nansum(col[column]))
    row["error_rate"] = _ratio(row["errors"], row["successful"] + row["errors"])
    row["cgroup_source"] = _distinct(text["cgroup_source"])
    for column in ENV_COLUMNS:
        row[column] = _distinct(text[column])
    row["cap_reached"] = any(_true(v) for v in text["cap_reached"])
    row["oom_killed"] = any(_true(v) for v in text["oom_killed"])
    row["restart_count"] = float(np.nansum(col["restart_count"]))
    peak = col["peak_memory_mb"]
    row["peak_memory_mb"] = float(np.nanmax(peak)) if np.isfinite(peak).any() else math.nan
    row.update(_open_loop_condition(text))
    codes = flagmod.condition_flags(
        _codes([*text["flags"], *failed["flags"]]), row, run_p99_ms=col["p99_ms"]
    )
    row["flags"] = flagmod.join(codes)
    for code in flagmod.CODES:
        row[f"flag_{code}"] = code in codes
    return row


def _true(value: Any) -> bool:
    """A boolean cell as written to CSV and read back ("True"/"False") or kept (True/False)."""
    return (
        value is True
        or (isinstance(value, (bool, np.bool_)) and bool(value))
        or str(value).lower() == "true"
    )


def _failed_condition(failed: dict[str, np.ndarray]) -> dict[str, Any]:
    """The row of a condition none of whose repetitions was measured: identity, counts, failure; no number."""
    row: dict[str, Any] = {column: math.nan for column in CONDITION_COLUMNS}
    row.update({c: failed[c][0] for c in IDENTITY_COLUMNS})
    # The load model too: an open-loop condition that failed stays among the open loop's, out of closed tables.
    row.update(_open_loop_condition(failed))
    row.update(
        {
            "repeats": 0,
            "failed_runs": len(failed["condition_id"]),
            "failure": _distinct(failed["failure"]),
            "interval_method": NO_INTERVAL,
            "rps_runs": "",
            "p99_ms_runs": "",
            "cgroup_source": None,
            "cap_reached": False,
            "oom_killed": any(_true(v) for v in failed["oom_killed"]),
        }
    )
    for column in ENV_COLUMNS:
        row[column] = None
    codes = flagmod.condition_flags(_codes(failed["flags"]), row)
    row["flags"] = flagmod.join(codes)
    for code in flagmod.CODES:
        row[f"flag_{code}"] = code in codes
    return row


def summarise_conditions(
    per_run: pd.DataFrame, *, resamples: int = RESAMPLES, base_seed: int = 0
) -> pd.DataFrame:
    """One row per condition from summarise_runs' frame (or a runs_summary.csv): values, 95 % intervals,
    run-to-run CVs, flags.

    Conditions are done one at a time; only a condition with a single measured run reads its run file.
    """
    per_run = per_run.reset_index(drop=True)
    # One conversion for all runs, not one per condition: a coverage simulation summarises thousands.
    text, numeric = _columns(per_run)
    rows = [
        _summarise({c: v[at] for c, v in text.items()}, numeric[at], resamples, base_seed)
        for at in per_run.groupby("condition_id", sort=False).indices.values()
    ]
    frame = pd.DataFrame(rows, columns=CONDITION_COLUMNS)
    return frame.sort_values(SORT_KEYS, kind="stable").reset_index(drop=True)


def environments(summary: pd.DataFrame) -> pd.DataFrame:
    """The distinct measurement environments in a summary (host, CPU, kernel, engine, image...)."""
    keys = [
        c
        for c in (
            "env_hostname",
            "env_cpu_model",
            "env_kernel",
            "env_docker_version",
            "env_engine_id",
            "env_hey_version",
        )
        if c in summary.columns
    ]
    if not keys or summary.empty:
        return pd.DataFrame()
    # A condition whose repetitions all failed has no environment of its own (env_* empty): not another one.
    summary = summary[summary[keys].notna().any(axis=1)]
    return summary[keys].fillna("?").drop_duplicates().reset_index(drop=True)

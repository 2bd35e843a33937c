"""Validity flags: when a run or condition should not be read at face value.

Every flag is computed from measured data with a stated threshold (the
constants below). A condition carries a flag when any of its runs does, except
`noisy` (from the condition's 95 % intervals) and `few_samples_*` (from the
successful responses pooled over its runs).

| code | mark | rule |
|---|---|---|
| host_bound | H | the quota did not limit the task: throttled share < 0.05 while task CPU < 90 % of the quota; or host CPUs >= 90 % busy; or vCPU limit >= the host's CPU count |
| sidecar_under | S | sidecars burned < 80 % of their nominal load (sidecars_cpu_vs_target < 0.8) |
| not_steady | ~ | abs(last-third RPS - first-third RPS) > max(10 % of RPS, 3 x the standard error of that difference from the per-second counts); thirds of the load window's whole seconds, the drain sliver left out |
| few_samples_p99 | † | < 500 successful responses: P99 rests on < 5 tail samples |
| few_samples_p99_9 | ‡ | < 5000 successful responses: P99.9 rests on < 5 tail samples |
| failed_requests | E | errors > 0 (non-2xx responses or failed requests) |
| cap_reached | C | hey stopped recording at its 1,000,000-result cap |
| oom_or_restart | M | the task was OOM-killed or restarted |
| noisy | ± | RPS interval wider than 20 % of RPS, or P99 interval wider than 50 % of P99 |
| low_coverage | L | time coverage (summed response time / (concurrency x span)) < 0.9 |
| run_failed | F | a repetition failed (on_failure: record): a process of the task died; the condition pools only its measured repetitions, and with none its cells read "failed" |
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

HOST_BOUND_THROTTLED_SHARE = 0.05  # below this the quota hardly ever stopped the task
HOST_BOUND_QUOTA_USE = 0.90  # task CPU below 90 % of its quota: something other than the quota limited it
HOST_BUSY_PCT = 90.0  # host CPUs this busy: the host, not the quota, was the limit
SIDECAR_UNDER_RATIO = 0.80  # sidecars burned less than 80 % of their nominal load
NOT_STEADY_RELATIVE = 0.10  # first vs last third RPS differ by more than 10 % of RPS ...
NOT_STEADY_SE = 3.0  # ... and by more than 3 standard errors of the difference
FEW_SAMPLES_P99 = 500  # P99 of < 500 responses rests on < 5 samples above it
FEW_SAMPLES_P99_9 = 5000  # P99.9 of < 5000 responses rests on < 5 samples above it
# Wide intervals. Every cell shows its interval; the mark singles out the ones that are wide for the
# default design (3 x 10 s): its median widths on the repeatability study's six conditions were 13 %
# (RPS) and 16 % (P99). At 10 % / 25 % the mark landed on 54 of the figure preset's 55 cells and
# told the reader nothing; at 20 % / 50 % it marks RPS that could move by a fifth and P99 that could
# move by about one CFS period (P99 between one and two periods), 34 of 55 there, mostly Next.js.
NOISY_RPS_WIDTH = 0.20  # 95 % RPS interval wider than 20 % of RPS
NOISY_P99_WIDTH = 0.50  # 95 % P99 interval wider than 50 % of P99
LOW_COVERAGE = 0.90  # hey's connections were busy less than 90 % of the window


@dataclass(frozen=True)
class Flag:
    code: str
    mark: str  # one short symbol for table cells
    label: str  # a few words
    rule: str  # the threshold, in one sentence


FLAGS: dict[str, Flag] = {f.code: f for f in (
    Flag("host_bound", "H", "host-bound, not quota-bound",
         f"throttled share < {HOST_BOUND_THROTTLED_SHARE} while task CPU < {HOST_BOUND_QUOTA_USE * 100:g} % "
         "of the quota, "
         f"or host CPUs >= {HOST_BUSY_PCT:g} % busy, or the vCPU limit >= the host's CPU count"),
    Flag("sidecar_under", "S", "sidecars under their load",
         f"sidecars burned < {SIDECAR_UNDER_RATIO * 100:g} % of their nominal load"),
    Flag("not_steady", "~", "throughput drifted",
         f"first- and last-third RPS (over the load window's whole seconds) differ by more than "
         f"{NOT_STEADY_RELATIVE * 100:g} % of RPS and by more than {NOT_STEADY_SE:g} standard errors of the difference"),
    Flag("few_samples_p99", "†", "few samples for P99",
         f"fewer than {FEW_SAMPLES_P99} successful responses (P99 from < 5 tail samples)"),
    Flag("few_samples_p99_9", "‡", "few samples for P99.9",
         f"fewer than {FEW_SAMPLES_P99_9} successful responses (P99.9 from < 5 tail samples)"),
    Flag("failed_requests", "E", "failed requests", "errors > 0 (non-2xx responses or failed requests)"),
    Flag("cap_reached", "C", "hey's result cap reached",
         "hey recorded its 1,000,000-result cap; later responses are not in the samples"),
    Flag("oom_or_restart", "M", "OOM kill or restart", "the task was OOM-killed or restarted"),
    Flag("noisy", "±", "wide interval",
         f"95 % RPS interval wider than {NOISY_RPS_WIDTH * 100:g} % of RPS or P99 interval wider than "
         f"{NOISY_P99_WIDTH * 100:g} % of P99"),
    Flag("low_coverage", "L", "load generator idle",
         f"time coverage (summed response time / (concurrency x span)) < {LOW_COVERAGE:g}"),
    Flag("run_failed", "F", "failed repetition",
         "a repetition failed because a process of the task (the app or a sidecar) died, was killed or was "
         "OOM-killed (on_failure: record); the values pool only the measured repetitions, and a cell with none "
         "reads \"failed\""),
)}
CODES = tuple(FLAGS)


def _f(row: Mapping[str, Any], key: str) -> float:
    value = row.get(key)
    try:
        return math.nan if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def host_bound(row: Mapping[str, Any]) -> bool:
    quota_pct = _f(row, "quota_cpu_pct")
    if math.isnan(quota_pct):
        quota_pct = _f(row, "vcpu") * 100.0
    if (_f(row, "throttled_share") < HOST_BOUND_THROTTLED_SHARE
            and _f(row, "task_cpu_pct") < HOST_BOUND_QUOTA_USE * quota_pct):
        return True
    if _f(row, "host_busy_pct") >= HOST_BUSY_PCT:
        return True
    cpus = _f(row, "host_cpus")  # format 2 reads it in the task; format 1 has the engine's count
    if math.isnan(cpus):
        cpus = _f(row, "env_cpu_count")
    return _f(row, "vcpu") >= cpus  # NaN (unknown count) compares False


def not_steady(row: Mapping[str, Any]) -> bool:
    diff = abs(_f(row, "last_third_rps") - _f(row, "first_third_rps"))
    se = _f(row, "thirds_diff_se_rps")
    threshold = max(NOT_STEADY_RELATIVE * _f(row, "rps"), NOT_STEADY_SE * (0.0 if math.isnan(se) else se))
    return diff > threshold


def few_samples(successful: float) -> list[str]:
    out = []
    if successful < FEW_SAMPLES_P99:
        out.append("few_samples_p99")
    if successful < FEW_SAMPLES_P99_9:
        out.append("few_samples_p99_9")
    return out


def run_flags(row: Mapping[str, Any]) -> list[str]:
    """The flag codes of one run (a stats.summarise_run row), in FLAGS order."""
    found = set(few_samples(_f(row, "successful")))
    if host_bound(row):
        found.add("host_bound")
    if _f(row, "sidecars_cpu_vs_target") < SIDECAR_UNDER_RATIO:
        found.add("sidecar_under")
    if not_steady(row):
        found.add("not_steady")
    if _f(row, "errors") > 0:
        found.add("failed_requests")
    if bool(row.get("cap_reached")):
        found.add("cap_reached")
    restarts = _f(row, "restart_count")
    if bool(row.get("oom_killed")) or restarts > 0:
        found.add("oom_or_restart")
    if _f(row, "time_coverage") < LOW_COVERAGE:
        found.add("low_coverage")
    return [code for code in CODES if code in found]


def failed_run_flags(row: Mapping[str, Any]) -> list[str]:
    """The flag codes of a failed repetition (stats.failed_run_row): run_failed, and oom_or_restart if OOM-killed."""
    found = {"run_failed"}
    if bool(row.get("oom_killed")):
        found.add("oom_or_restart")
    return [code for code in CODES if code in found]


def noisy(rps: float, rps_lo: float, rps_hi: float, p99_ms: float, p99_lo: float, p99_hi: float) -> bool:
    return (rps_hi - rps_lo) > NOISY_RPS_WIDTH * rps or (p99_hi - p99_lo) > NOISY_P99_WIDTH * p99_ms


def condition_flags(runs_flags: Iterable[Iterable[str]], pooled: Mapping[str, Any]) -> list[str]:
    """A condition's codes: any run's (few_samples from the pooled count instead), plus noisy from its intervals."""
    found = {code for flags in runs_flags for code in flags if not code.startswith("few_samples")}
    found.update(few_samples(_f(pooled, "successful")))
    if noisy(*(_f(pooled, k) for k in ("rps", "rps_lo", "rps_hi", "p99_ms", "p99_ms_lo", "p99_ms_hi"))):
        found.add("noisy")
    return [code for code in CODES if code in found]


def join(codes: Iterable[str]) -> str:
    """Codes sorted and joined with "," ("" when none): the summaries' `flags` column."""
    return ",".join(sorted(codes))


def legend() -> str:
    """Markdown lines "mark: label (rule)" for table footnotes."""
    return "\n".join(f"- {f.mark} {f.label}: {f.rule}" for f in FLAGS.values())

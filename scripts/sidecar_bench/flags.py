"""Validity flags: when a run or condition should not be read at face value.

Every flag is computed from measured data with a stated threshold (the
constants below). A condition carries a flag when any of its runs does, except
`noisy` (from the condition's 95 % intervals), `bimodal` (from its runs' P99)
and `few_samples_*` (from the successful responses summed over its runs).

A mark is for what a reader should read differently. The sidecars' delivered
CPU (`sidecars_cpu_pct`) is no flag: the article's wall-clock sidecars burn
less than their nominal load whenever the task is throttled, by its method, so
a flag for it (the former `sidecar_under`) sat on 149 of 155 loaded cells; the
tables show the delivered CPU beside the nominal load instead. Summaries
written before carry the retired code in their runs' flags: it is dropped.

| code | mark | rule |
|---|---|---|
| host_bound | H | the quota did not limit the task: throttled share < 0.05 while task CPU < 90 % of the quota; or host CPUs >= 90 % busy; or vCPU limit >= the host's CPU count |
| not_steady | ~ | abs(last-third RPS - first-third RPS) > max(10 % of RPS, 3 x the standard error of that difference from the per-second counts); thirds of the load window's whole seconds, the drain sliver left out |
| few_samples_p99 | † | < 500 successful responses: P99 rests on < 5 tail samples |
| few_samples_p99_9 | ‡ | < 5000 successful responses: P99.9 rests on < 5 tail samples |
| failed_requests | E | errors > 0 (non-2xx responses or failed requests) |
| cap_reached | C | hey stopped recording at its 1,000,000-result cap |
| oom_or_restart | M | the task was OOM-killed or restarted |
| noisy | ± | 95 % RPS interval wider than 50 % of RPS (the value could be a quarter off), or, unless bimodal, the 95 % P99 interval spans a whole CFS period or is wider than P99 itself |
| bimodal | B | the runs' P99 fall on both sides of a boundary between whole CFS periods, (k + 1/2) x period for k = 1, 2, 3 (150, 250, 350 ms at 100 ms): some runs' slowest percent waited k periods, others' k + 1; compare such a cell by its tail shares, not its P99 |
| low_coverage | L | time coverage (summed response time / (concurrency x span)) < 0.9 |
| not_on_time | O | open loop: more than 1 % of the scheduled requests were not sent on time (late or dropped), or the generator sent less than 95 % of the set rate |
| run_failed | F | a repetition failed (on_failure: record): a process of the task died; the condition pools only its measured repetitions, and with none its cells read "failed" |
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

HOST_BOUND_THROTTLED_SHARE = 0.05  # below this the quota hardly ever stopped the task
HOST_BOUND_QUOTA_USE = (
    0.90  # task CPU below 90 % of its quota: something other than the quota limited it
)
HOST_BUSY_PCT = 90.0  # host CPUs this busy: the host, not the quota, was the limit
NOT_STEADY_RELATIVE = 0.10  # first vs last third RPS differ by more than 10 % of RPS ...
NOT_STEADY_SE = 3.0  # ... and by more than 3 standard errors of the difference
FEW_SAMPLES_P99 = 500  # P99 of < 500 responses rests on < 5 samples above it
FEW_SAMPLES_P99_9 = 5000  # P99.9 of < 5000 responses rests on < 5 samples above it
# Wide intervals. Every cell shows its interval (a t interval over the runs: with 3 runs its width is
# about 5 x the run-to-run CV); the mark singles out the cells whose value could be a quarter off
# (RPS width > 50 %, a CV above ~10 % with 3 runs: the noisier third of the article set) or whose P99
# could be a whole CFS period off. A P99 interval relative to P99 alone missed intervals such as
# 185 [106-190] ms; the period rule catches them. Bimodal cells have their own mark for the P99 part.
NOISY_RPS_WIDTH = 0.50  # 95 % RPS interval wider than 50 % of RPS
NOISY_P99_WIDTH = 1.00  # 95 % P99 interval wider than P99 itself
NOISY_P99_PERIODS = 1.0  # ... or as wide as a whole CFS period
# P99 of throttled runs sits near a whole number of periods (measured modes 70-115, 160-215, 270-310 ms
# at 100 ms); runs on both sides of (k + 1/2) periods waited a different number of periods.
BIMODAL_PERIODS = (1, 2, 3)
DEFAULT_PERIOD_MS = 100.0
LOW_COVERAGE = 0.90  # hey's connections were busy less than 90 % of the window
# Open loop: the generator fell behind its schedule (late or dropped) for more than 1 % of the
# requests, or sent under 95 % of the set rate: the cell's latencies miss what it could not send.
NOT_ON_TIME_SHARE = 0.01
SENT_RATE_RATIO = 0.95


@dataclass(frozen=True)
class Flag:
    code: str
    mark: str  # one short symbol for table cells
    label: str  # a few words
    rule: str  # the threshold, in one sentence


FLAGS: dict[str, Flag] = {
    f.code: f
    for f in (
        Flag(
            "host_bound",
            "H",
            "host-bound, not quota-bound",
            f"throttled share < {HOST_BOUND_THROTTLED_SHARE} while task CPU < {HOST_BOUND_QUOTA_USE * 100:g} % "
            "of the quota, "
            f"or host CPUs >= {HOST_BUSY_PCT:g} % busy, or the vCPU limit >= the host's CPU count",
        ),
        Flag(
            "not_steady",
            "~",
            "throughput drifted",
            f"first- and last-third RPS (over the load window's whole seconds) differ by more than "
            f"{NOT_STEADY_RELATIVE * 100:g} % of RPS and by more than {NOT_STEADY_SE:g} standard errors of the difference",
        ),
        Flag(
            "few_samples_p99",
            "†",
            "few samples for P99",
            f"fewer than {FEW_SAMPLES_P99} successful responses (P99 from < 5 tail samples)",
        ),
        Flag(
            "few_samples_p99_9",
            "‡",
            "few samples for P99.9",
            f"fewer than {FEW_SAMPLES_P99_9} successful responses (P99.9 from < 5 tail samples)",
        ),
        Flag(
            "failed_requests",
            "E",
            "failed requests",
            "errors > 0 (non-2xx responses or failed requests)",
        ),
        Flag(
            "cap_reached",
            "C",
            "hey's result cap reached",
            "hey recorded its 1,000,000-result cap; later responses are not in the samples",
        ),
        Flag("oom_or_restart", "M", "OOM kill or restart", "the task was OOM-killed or restarted"),
        Flag(
            "noisy",
            "±",
            "wide interval",
            f"95 % RPS interval wider than {NOISY_RPS_WIDTH * 100:g} % of RPS, or (unless bimodal) a 95 % P99 interval "
            f"that spans a whole CFS period or is wider than P99 itself",
        ),
        Flag(
            "bimodal",
            "B",
            "P99 bimodal across runs",
            "the runs' P99 fall on both sides of a boundary between whole CFS periods ((k + 1/2) x period, k = "
            f"{', '.join(str(k) for k in BIMODAL_PERIODS)}): compare the cell by its tail shares, not its P99",
        ),
        Flag(
            "low_coverage",
            "L",
            "load generator idle",
            f"time coverage (summed response time / (concurrency x span)) < {LOW_COVERAGE:g}",
        ),
        Flag(
            "not_on_time",
            "O",
            "open loop behind schedule",
            f"open loop: more than {NOT_ON_TIME_SHARE * 100:g} % of the scheduled requests not sent on time (late or "
            f"dropped), or under {SENT_RATE_RATIO * 100:g} % of the set rate sent",
        ),
        Flag(
            "run_failed",
            "F",
            "failed repetition",
            "a repetition failed because a process of the task (the app or a sidecar) died, was killed or was "
            "OOM-killed (on_failure: record); the values pool only the measured repetitions, and a cell with none "
            'reads "failed"',
        ),
    )
}
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
    # An open loop below capacity leaves the quota unused by design: only the host's own limits count.
    is_open = row.get("load_model") == "open"
    if (
        not is_open
        and _f(row, "throttled_share") < HOST_BOUND_THROTTLED_SHARE
        and _f(row, "task_cpu_pct") < HOST_BOUND_QUOTA_USE * quota_pct
    ):
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
    threshold = max(
        NOT_STEADY_RELATIVE * _f(row, "rps"), NOT_STEADY_SE * (0.0 if math.isnan(se) else se)
    )
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
    if not_on_time(row):
        found.add("not_on_time")
    return [code for code in CODES if code in found]


def not_on_time(row: Mapping[str, Any]) -> bool:
    """Open loop: the generator fell behind its schedule (NaN for a closed run compares False)."""
    return (
        _f(row, "not_on_time_share") > NOT_ON_TIME_SHARE or _f(row, "rate_ratio") < SENT_RATE_RATIO
    )


def failed_run_flags(row: Mapping[str, Any]) -> list[str]:
    """The flag codes of a failed repetition (stats.failed_run_row): run_failed, and oom_or_restart if OOM-killed."""
    found = {"run_failed"}
    if bool(row.get("oom_killed")):
        found.add("oom_or_restart")
    return [code for code in CODES if code in found]


def bimodal(run_p99_ms: Iterable[float], period_ms: float = DEFAULT_PERIOD_MS) -> bool:
    """Some run's P99 below (k + 1/2) periods and another's at or above it, for a k in BIMODAL_PERIODS."""
    p99 = [float(v) for v in run_p99_ms if v is not None and math.isfinite(float(v))]
    period = period_ms if math.isfinite(period_ms) and period_ms > 0 else DEFAULT_PERIOD_MS
    return (
        any(min(p99) < (k + 0.5) * period <= max(p99) for k in BIMODAL_PERIODS)
        if len(p99) >= 2
        else False
    )


def noisy(
    rps: float,
    rps_lo: float,
    rps_hi: float,
    p99_ms: float,
    p99_lo: float,
    p99_hi: float,
    period_ms: float = DEFAULT_PERIOD_MS,
    is_bimodal: bool = False,
) -> bool:
    if (rps_hi - rps_lo) > NOISY_RPS_WIDTH * rps:
        return True
    if is_bimodal:
        return False  # the P99 part has its own mark
    width = p99_hi - p99_lo
    period = period_ms if math.isfinite(period_ms) and period_ms > 0 else DEFAULT_PERIOD_MS
    return width >= NOISY_P99_PERIODS * period or width > NOISY_P99_WIDTH * p99_ms


def condition_flags(
    runs_flags: Iterable[Iterable[str]], pooled: Mapping[str, Any], run_p99_ms: Iterable[float] = ()
) -> list[str]:
    """A condition's codes: any run's (few_samples from the summed count instead; codes no longer defined
    dropped), plus bimodal from its runs' P99 and noisy from its intervals."""
    found = {
        code
        for flags in runs_flags
        for code in flags
        if code in FLAGS and not code.startswith("few_samples")
    }
    found.update(few_samples(_f(pooled, "successful")))
    period = _f(pooled, "period_ms")
    is_bimodal = bimodal(run_p99_ms, period)
    if is_bimodal:
        found.add("bimodal")
    if noisy(
        *(_f(pooled, k) for k in ("rps", "rps_lo", "rps_hi", "p99_ms", "p99_ms_lo", "p99_ms_hi")),
        period_ms=period,
        is_bimodal=is_bimodal,
    ):
        found.add("noisy")
    return [code for code in CODES if code in found]


def join(codes: Iterable[str]) -> str:
    """Codes sorted and joined with "," ("" when none): the summaries' `flags` column."""
    return ",".join(sorted(codes))


def legend() -> str:
    """Markdown lines "mark: label (rule)" for table footnotes."""
    return "\n".join(f"- {f.mark} {f.label}: {f.rule}" for f in FLAGS.values())

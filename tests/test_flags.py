"""Validity flags: each fires at its stated threshold and not below it."""

import pytest

from sidecar_bench import flags
from sidecar_bench.flags import FLAGS, condition_flags, join, run_flags

CLEAN = {"vcpu": 0.5, "quota_cpu_pct": 50.0, "throttled_share": 0.4, "task_cpu_pct": 49.0, "host_busy_pct": 40.0,
         "env_cpu_count": "2", "sidecars_cpu_vs_target": 0.95, "rps": 1000.0, "first_third_rps": 1000.0,
         "last_third_rps": 1000.0, "thirds_diff_se_rps": 5.0, "successful": 30000, "errors": 0,
         "cap_reached": False, "oom_killed": False, "restart_count": 0, "time_coverage": 0.99}


def with_(**changes):
    return {**CLEAN, **changes}


def test_a_clean_run_has_no_flags():
    assert run_flags(CLEAN) == []


def test_every_code_has_a_mark_label_and_rule():
    assert set(FLAGS) == {"host_bound", "sidecar_under", "not_steady", "few_samples_p99", "few_samples_p99_9",
                          "failed_requests", "cap_reached", "oom_or_restart", "noisy", "low_coverage", "run_failed"}
    marks = [f.mark for f in FLAGS.values()]
    assert len(set(marks)) == len(marks) and all(1 <= len(m) <= 2 for m in marks)
    assert "0.8" in FLAGS["sidecar_under"].rule or "80 %" in FLAGS["sidecar_under"].rule


@pytest.mark.parametrize("changes", [
    {"throttled_share": 0.04, "task_cpu_pct": 44.0},  # not throttled and under 90 % of the 50 % quota
    {"host_busy_pct": 90.0},  # host CPUs busy
    {"vcpu": 2.0, "quota_cpu_pct": 200.0, "task_cpu_pct": 199.0},  # the limit is the whole 2-CPU host
    {"vcpu": 1.0, "quota_cpu_pct": 100.0, "task_cpu_pct": 99.0, "host_cpus": 1},  # host's own count first
])
def test_host_bound(changes):
    assert "host_bound" in run_flags(with_(**changes))


def test_not_host_bound_when_throttled_or_using_the_quota():
    assert "host_bound" not in run_flags(with_(throttled_share=0.04, task_cpu_pct=46.0))  # 92 % of the quota
    assert "host_bound" not in run_flags(with_(throttled_share=0.06, task_cpu_pct=20.0))
    assert "host_bound" not in run_flags(with_(host_busy_pct=float("nan")))  # format 1: unknown


def test_sidecar_under_below_eighty_percent_of_target():
    assert "sidecar_under" in run_flags(with_(sidecars_cpu_vs_target=0.79))
    assert "sidecar_under" not in run_flags(with_(sidecars_cpu_vs_target=0.80))
    assert "sidecar_under" not in run_flags(with_(sidecars_cpu_vs_target=float("nan")))  # no sidecars


def test_not_steady_needs_ten_percent_and_three_standard_errors():
    assert "not_steady" in run_flags(with_(first_third_rps=1060, last_third_rps=950))  # 110 > 100 and > 15
    assert "not_steady" not in run_flags(with_(first_third_rps=1050, last_third_rps=960))  # 90 < 10 % of 1000
    # 110 > 10 % but within 3 x 40 standard errors: noise.
    assert "not_steady" not in run_flags(with_(first_third_rps=1060, last_third_rps=950, thirds_diff_se_rps=40))


def test_sample_counts_errors_cap_oom_and_coverage():
    assert run_flags(with_(successful=499)) == ["few_samples_p99", "few_samples_p99_9"]
    assert run_flags(with_(successful=500)) == ["few_samples_p99_9"]
    assert run_flags(with_(successful=5000)) == []
    assert run_flags(with_(errors=1)) == ["failed_requests"]
    assert run_flags(with_(cap_reached=True)) == ["cap_reached"]
    assert run_flags(with_(restart_count=1)) == ["oom_or_restart"]
    assert run_flags(with_(oom_killed=True)) == ["oom_or_restart"]
    assert run_flags(with_(time_coverage=0.89)) == ["low_coverage"]


def test_condition_flags_combine_runs_pool_counts_and_judge_intervals():
    pooled = {"successful": 6000, "rps": 1000, "rps_lo": 960, "rps_hi": 1050, "p99_ms": 100, "p99_ms_lo": 90,
              "p99_ms_hi": 110}
    # Each run has 2000 responses (few for P99.9), the three together 6000: not few.
    runs = [["few_samples_p99_9"], ["few_samples_p99_9", "failed_requests"], []]
    assert condition_flags(runs, pooled) == ["failed_requests"]
    assert condition_flags([], {**pooled, "rps_hi": 1161}) == ["noisy"]  # 201 > 20 % of 1000
    assert condition_flags([], {**pooled, "p99_ms_hi": 141}) == ["noisy"]  # 51 > 50 % of 100
    assert join(["noisy", "cap_reached"]) == "cap_reached,noisy" and join([]) == ""


def test_thresholds_are_named_constants():
    assert (flags.SIDECAR_UNDER_RATIO, flags.FEW_SAMPLES_P99, flags.FEW_SAMPLES_P99_9) == (0.8, 500, 5000)
    assert (flags.NOISY_RPS_WIDTH, flags.NOISY_P99_WIDTH, flags.LOW_COVERAGE) == (0.2, 0.5, 0.9)

"""Validity flags: each fires at its stated threshold and not below it."""

import pytest

from sidecar_bench import flags
from sidecar_bench.flags import FLAGS, condition_flags, join, run_flags

CLEAN = {
    "vcpu": 0.5,
    "quota_cpu_pct": 50.0,
    "throttled_share": 0.4,
    "task_cpu_pct": 49.0,
    "host_busy_pct": 40.0,
    "env_cpu_count": "2",
    "sidecars_cpu_vs_target": 0.95,
    "rps": 1000.0,
    "first_third_rps": 1000.0,
    "last_third_rps": 1000.0,
    "thirds_diff_se_rps": 5.0,
    "successful": 30000,
    "errors": 0,
    "cap_reached": False,
    "oom_killed": False,
    "restart_count": 0,
    "time_coverage": 0.99,
}


def with_(**changes):
    return {**CLEAN, **changes}


def test_a_clean_run_has_no_flags():
    assert run_flags(CLEAN) == []


def test_every_code_has_a_mark_label_and_rule():
    assert set(FLAGS) == {
        "host_bound",
        "not_steady",
        "few_samples_p99",
        "few_samples_p99_9",
        "failed_requests",
        "cap_reached",
        "oom_or_restart",
        "noisy",
        "bimodal",
        "low_coverage",
        "not_on_time",
        "run_failed",
    }
    marks = [f.mark for f in FLAGS.values()]
    assert len(set(marks)) == len(marks) and all(1 <= len(m) <= 2 for m in marks)
    assert "period" in FLAGS["bimodal"].rule and "tail shares" in FLAGS["bimodal"].rule


@pytest.mark.parametrize(
    "changes",
    [
        {
            "throttled_share": 0.04,
            "task_cpu_pct": 44.0,
        },  # not throttled and under 90 % of the 50 % quota
        {"host_busy_pct": 90.0},  # host CPUs busy
        {
            "vcpu": 2.0,
            "quota_cpu_pct": 200.0,
            "task_cpu_pct": 199.0,
        },  # the limit is the whole 2-CPU host
        {
            "vcpu": 1.0,
            "quota_cpu_pct": 100.0,
            "task_cpu_pct": 99.0,
            "host_cpus": 1,
        },  # host's own count first
    ],
)
def test_host_bound(changes):
    assert "host_bound" in run_flags(with_(**changes))


def test_not_host_bound_when_throttled_or_using_the_quota():
    assert "host_bound" not in run_flags(
        with_(throttled_share=0.04, task_cpu_pct=46.0)
    )  # 92 % of the quota
    assert "host_bound" not in run_flags(with_(throttled_share=0.06, task_cpu_pct=20.0))
    assert "host_bound" not in run_flags(with_(host_busy_pct=float("nan")))  # format 1: unknown


def test_sidecars_under_their_nominal_load_is_a_value_not_a_flag():
    assert run_flags(with_(sidecars_cpu_vs_target=0.3)) == []
    # A summary written before keeps the retired code in its runs' flags: the condition drops it.
    assert condition_flags([["sidecar_under", "failed_requests"]], {"successful": 6000}) == [
        "failed_requests"
    ]


def test_not_steady_needs_ten_percent_and_three_standard_errors():
    assert "not_steady" in run_flags(
        with_(first_third_rps=1060, last_third_rps=950)
    )  # 110 > 100 and > 15
    assert "not_steady" not in run_flags(
        with_(first_third_rps=1050, last_third_rps=960)
    )  # 90 < 10 % of 1000
    # 110 > 10 % but within 3 x 40 standard errors: noise.
    assert "not_steady" not in run_flags(
        with_(first_third_rps=1060, last_third_rps=950, thirds_diff_se_rps=40)
    )


def test_sample_counts_errors_cap_oom_and_coverage():
    assert run_flags(with_(successful=499)) == ["few_samples_p99", "few_samples_p99_9"]
    assert run_flags(with_(successful=500)) == ["few_samples_p99_9"]
    assert run_flags(with_(successful=5000)) == []
    assert run_flags(with_(errors=1)) == ["failed_requests"]
    assert run_flags(with_(cap_reached=True)) == ["cap_reached"]
    assert run_flags(with_(restart_count=1)) == ["oom_or_restart"]
    assert run_flags(with_(oom_killed=True)) == ["oom_or_restart"]
    assert run_flags(with_(time_coverage=0.89)) == ["low_coverage"]


POOLED = {
    "successful": 6000,
    "rps": 1000,
    "rps_lo": 900,
    "rps_hi": 1100,
    "p99_ms": 100,
    "p99_ms_lo": 90,
    "p99_ms_hi": 110,
    "period_ms": 100.0,
}


def test_condition_flags_combine_runs_and_sum_counts():
    # Each run has 2000 responses (few for P99.9), the three together 6000: not few.
    runs = [["few_samples_p99_9"], ["few_samples_p99_9", "failed_requests"], []]
    assert condition_flags(runs, POOLED) == ["failed_requests"]
    assert join(["noisy", "cap_reached"]) == "cap_reached,noisy" and join([]) == ""


def test_noisy_when_the_rps_interval_is_wider_than_half_the_rps():
    assert condition_flags([], {**POOLED, "rps_lo": 750, "rps_hi": 1251}) == [
        "noisy"
    ]  # 501 > 50 % of 1000
    assert condition_flags([], {**POOLED, "rps_lo": 750, "rps_hi": 1250}) == []  # 500: not wider


def test_noisy_when_the_p99_interval_spans_a_whole_period():
    # 185.3 [106.5-189.8] ms: 83 ms wide, under P99 itself, but see a 100 ms period span: 106 -> 206.
    assert condition_flags(
        [], {**POOLED, "p99_ms": 185.3, "p99_ms_lo": 106.0, "p99_ms_hi": 206.0}
    ) == ["noisy"]
    assert (
        condition_flags([], {**POOLED, "p99_ms": 185.3, "p99_ms_lo": 106.0, "p99_ms_hi": 205.9})
        == []
    )
    # At a 50 ms period the same 99.9 ms is two periods.
    assert condition_flags(
        [], {**POOLED, "period_ms": 50.0, "p99_ms": 185.3, "p99_ms_lo": 106.0, "p99_ms_hi": 205.9}
    ) == ["noisy"]


def test_noisy_when_the_p99_interval_is_wider_than_p99_itself():
    assert condition_flags([], {**POOLED, "p99_ms": 20.0, "p99_ms_lo": 0.0, "p99_ms_hi": 20.1}) == [
        "noisy"
    ]
    assert (
        condition_flags([], {**POOLED, "p99_ms": 20.0, "p99_ms_lo": 0.0, "p99_ms_hi": 20.0}) == []
    )


def test_bimodal_when_runs_p99_fall_on_both_sides_of_a_period_boundary():
    # The issue's cell: 107.5, 184.9, 189.8 ms: one run's slowest percent waited one period, the others' two.
    assert flags.bimodal([107.5, 184.9, 189.8], 100.0)
    assert flags.bimodal([149.9, 150.0], 100.0) and not flags.bimodal([140.0, 149.9], 100.0)
    assert flags.bimodal([240.0, 250.0], 100.0) and flags.bimodal([349.0, 351.0], 100.0)
    assert not flags.bimodal(
        [97.3, 99.2, 104.9], 100.0
    )  # all at one period: the knife edge at 100 ms is no mode
    assert not flags.bimodal([185.0, 191.7, 188.8], 100.0)
    assert not flags.bimodal([107.5], 100.0) and not flags.bimodal([107.5, float("nan")], 100.0)
    assert flags.bimodal([60.0, 80.0], 50.0)  # 75 ms = 1.5 periods of 50 ms


def test_a_bimodal_condition_is_marked_bimodal_not_noisy_for_its_p99():
    wide = {**POOLED, "p99_ms": 160.7, "p99_ms_lo": 60.0, "p99_ms_hi": 260.0}
    assert condition_flags([], wide, run_p99_ms=[107.5, 184.9, 189.8]) == ["bimodal"]
    assert condition_flags([], wide, run_p99_ms=[140.0, 145.0, 149.0]) == ["noisy"]
    # Its RPS can still be noisy.
    assert condition_flags(
        [], {**wide, "rps_lo": 700, "rps_hi": 1300}, run_p99_ms=[107.5, 184.9]
    ) == ["noisy", "bimodal"]


def test_thresholds_are_named_constants():
    assert (flags.FEW_SAMPLES_P99, flags.FEW_SAMPLES_P99_9) == (500, 5000)
    assert (
        flags.NOISY_RPS_WIDTH,
        flags.NOISY_P99_WIDTH,
        flags.NOISY_P99_PERIODS,
        flags.LOW_COVERAGE,
    ) == (0.5, 1.0, 1.0, 0.9)
    assert flags.BIMODAL_PERIODS == (1, 2, 3)


# --- each threshold at its boundary: the rule says "<", ">" or ">=", and the value on it decides -------------


def test_host_bound_thresholds_at_their_boundaries():
    # Throttled share exactly 0.05 is not "< 0.05"; task CPU exactly 90 % of the quota is not "< 90 %".
    assert "host_bound" not in run_flags(with_(throttled_share=0.05, task_cpu_pct=20.0))
    assert "host_bound" not in run_flags(
        with_(throttled_share=0.0, task_cpu_pct=45.0)
    )  # 90 % of 50 %
    assert "host_bound" in run_flags(with_(throttled_share=0.0, task_cpu_pct=44.9))
    # Host CPUs: 90 % busy is bound (">="), 89.9 % is not.
    assert "host_bound" not in run_flags(with_(host_busy_pct=89.9))
    # The vCPU limit at the host's count is bound, just under it is not.
    assert "host_bound" not in run_flags(with_(vcpu=1.99, quota_cpu_pct=199.0, task_cpu_pct=198.0))


def test_host_bound_reads_the_quota_from_the_vcpu_limit_when_the_file_has_none():
    # No quota_cpu_pct (older files): 0.5 vCPU is a 50 % quota, 44 % is under 90 % of it, 46 % is not.
    no_quota = {k: v for k, v in CLEAN.items() if k != "quota_cpu_pct"}
    assert "host_bound" in run_flags({**no_quota, "throttled_share": 0.0, "task_cpu_pct": 44.0})
    assert "host_bound" not in run_flags({**no_quota, "throttled_share": 0.0, "task_cpu_pct": 46.0})
    assert "host_bound" not in run_flags({**no_quota, "throttled_share": 0.0, "task_cpu_pct": 45.0})
    # The quota read from the cgroup comes first: a 100 % quota at 60 % use is under 90 % of it.
    assert "host_bound" in run_flags(
        with_(quota_cpu_pct=100.0, throttled_share=0.0, task_cpu_pct=60.0)
    )


def test_an_open_loop_below_capacity_is_not_host_bound_for_leaving_its_quota_unused():
    idle = with_(throttled_share=0.0, task_cpu_pct=10.0)
    assert "host_bound" in run_flags(idle)
    assert "host_bound" not in run_flags({**idle, "load_model": "open"})
    # ... but a busy host still bounds it.
    assert "host_bound" in run_flags({**idle, "load_model": "open", "host_busy_pct": 95.0})


def test_host_bound_prefers_the_hosts_own_cpu_count_to_the_engines():
    # The task saw 4 CPUs, the engine reported 2: a 2-vCPU limit is under the host's count.
    assert "host_bound" not in run_flags(
        with_(vcpu=2.0, quota_cpu_pct=200.0, task_cpu_pct=199.0, host_cpus=4)
    )
    # Neither count known: no flag for it.
    assert "host_bound" not in run_flags(
        with_(vcpu=2.0, quota_cpu_pct=200.0, task_cpu_pct=199.0, env_cpu_count=None)
    )


def test_not_steady_at_its_boundaries():
    # A difference of exactly 10 % of RPS (100 of 1000) is not "more than" it.
    assert "not_steady" not in run_flags(with_(first_third_rps=1060, last_third_rps=960))
    assert "not_steady" in run_flags(with_(first_third_rps=1061, last_third_rps=960))
    # Exactly 3 standard errors (3 x 50 = 150 > 10 %) is noise; one more request a second is not.
    assert "not_steady" not in run_flags(
        with_(first_third_rps=1100, last_third_rps=950, thirds_diff_se_rps=50)
    )
    assert "not_steady" in run_flags(
        with_(first_third_rps=1101, last_third_rps=950, thirds_diff_se_rps=50)
    )
    # A fall counts as a rise does.
    assert "not_steady" in run_flags(with_(first_third_rps=900, last_third_rps=1020))
    # No standard error recorded (older files): the 10 % rule alone.
    assert "not_steady" in run_flags(
        with_(first_third_rps=1060, last_third_rps=950, thirds_diff_se_rps=None)
    )
    assert "not_steady" not in run_flags(
        with_(first_third_rps=1050, last_third_rps=960, thirds_diff_se_rps=None)
    )
    # ... at a low rate too: 2 of 10 RPS is more than 10 %.
    assert "not_steady" in run_flags(
        with_(rps=10.0, first_third_rps=12.0, last_third_rps=10.0, thirds_diff_se_rps=None)
    )


def test_counts_and_coverage_at_their_boundaries():
    assert run_flags(with_(successful=4999)) == ["few_samples_p99_9"]
    assert run_flags(with_(time_coverage=0.9)) == []  # not "< 0.9"
    assert run_flags(with_(errors=0.0, restart_count=0)) == []
    # Cells as a CSV gives them back: text numbers read, text that is no number is unknown (no flag).
    assert run_flags(with_(errors="1")) == ["failed_requests"]
    assert run_flags(with_(time_coverage="n/a", errors="?")) == []
    assert run_flags(with_(successful=None)) == []


def test_not_on_time_at_its_boundaries():
    assert not flags.not_on_time(
        {"not_on_time_share": 0.01, "rate_ratio": 0.95}
    )  # exactly 1 %, exactly 95 %
    assert flags.not_on_time({"not_on_time_share": 0.0101, "rate_ratio": 1.0})
    assert flags.not_on_time({"not_on_time_share": 0.0, "rate_ratio": 0.949})
    assert run_flags(with_(not_on_time_share=0.02, rate_ratio=1.0)) == ["not_on_time"]


def test_noisy_at_its_boundaries_and_with_no_usable_period():
    # RPS width exactly half the RPS is not "wider than" it (POOLED: P99 interval 20 ms wide, P99 100 ms).
    assert not flags.noisy(1000, 750, 1250, 100, 90, 110)
    assert flags.noisy(1000, 749, 1250, 100, 90, 110)
    # A period that is unknown or not positive counts as the default 100 ms.
    for period in (float("nan"), 0.0, -50.0):
        assert flags.noisy(1000, 900, 1100, 185.3, 106.0, 206.0, period_ms=period)
        assert not flags.noisy(1000, 900, 1100, 185.3, 106.0, 205.9, period_ms=period)
    # The bimodal exemption covers the P99 part only.
    assert not flags.noisy(1000, 900, 1100, 100, 0, 300, is_bimodal=True)
    assert flags.noisy(1000, 700, 1300, 100, 99, 101, is_bimodal=True)


def test_bimodal_with_no_usable_period_and_unknown_values():
    for period in (float("nan"), 0.0, -1.0):
        assert flags.bimodal([140.0, 160.0], period)  # 150 ms: the default period's boundary
        assert not flags.bimodal([60.0, 80.0], period)  # 75 ms is no boundary of 100 ms periods
    assert flags.bimodal([None, 140.0, 160.0], 100.0)
    assert not flags.bimodal([None, 140.0], 100.0)
    assert not flags.bimodal([], 100.0)


def test_a_condition_takes_any_runs_codes_and_its_own():
    runs = [["host_bound"], [], ["oom_or_restart", "few_samples_p99"], ["cap_reached"]]
    # few_samples from the condition's own count (6000: none), the others from any run, in FLAGS order.
    assert condition_flags(runs, POOLED) == ["host_bound", "cap_reached", "oom_or_restart"]
    assert condition_flags([[], []], {**POOLED, "successful": 499}) == [
        "few_samples_p99",
        "few_samples_p99_9",
    ]
    assert condition_flags([[]], {**POOLED, "successful": 4999}) == ["few_samples_p99_9"]
    # A pooled period of 50 ms: runs at 60 and 80 ms straddle its 75 ms boundary.
    assert condition_flags([], {**POOLED, "period_ms": 50.0}, run_p99_ms=[60.0, 80.0]) == [
        "bimodal"
    ]


def test_a_failed_repetition_is_marked_failed_and_oom_only_when_killed():
    assert flags.failed_run_flags({"oom_killed": False}) == ["run_failed"]
    assert flags.failed_run_flags({}) == ["run_failed"]
    assert flags.failed_run_flags({"oom_killed": True}) == ["oom_or_restart", "run_failed"]


def test_the_legend_has_one_line_per_flag_with_its_mark_label_and_rule():
    lines = flags.legend().splitlines()
    assert len(lines) == len(FLAGS)
    for line, flag in zip(lines, FLAGS.values()):
        assert line == f"- {flag.mark} {flag.label}: {flag.rule}"
    assert (
        "- L load generator idle: time coverage (summed response time / (concurrency x span)) < 0.9"
        in lines
    )


def test_the_shortest_cfs_period_is_a_period():
    # 1 ms is the kernel's smallest cpu.cfs_period_us: a 2 ms wide P99 interval spans two of them.
    assert flags.noisy(1000, 900, 1100, 100, 99, 101, period_ms=1.0)
    assert flags.bimodal([1.4, 1.6], 1.0)


def test_runs_all_at_or_above_a_boundary_are_on_one_side_of_it():
    assert not flags.bimodal([150.0, 160.0], 100.0) and not flags.bimodal([150.0, 150.0], 100.0)

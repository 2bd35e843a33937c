"""The breaking-point rule: the article's own sweeps, noise within a period, and intervals that overlap."""

import math
from pathlib import Path

import numpy as np
import pytest

from sidecar_bench import reference
from sidecar_bench.breaking import assess, assess_rows, breaking_point, period_level

REFERENCE = Path(__file__).resolve().parents[1] / "workflow" / "reference" / "article-results.csv"


ARTICLE_BREAKS = {
    ("go", 0.25, 3): (15, 18),
    ("next", 0.25, 3): (3, 6),
    ("next", 0.5, 3): (18, 21),
    ("next", 0.25, 1): (6, 7),
}


@pytest.fixture(scope="module")
def ref():
    return reference.load_reference(REFERENCE)


@pytest.mark.parametrize("setup", list(ARTICLE_BREAKS))
def test_rule_finds_the_articles_breaking_points_in_its_published_numbers(ref, setup):
    # Every P99 the article published for the setup: its sweep, P99 grid and change-point rows.
    sweep = reference.sweep(ref, *setup, metric="p99_ms")
    found = breaking_point(sweep.index, sweep.to_numpy())
    assert found is not None
    assert (found.before_load_pct, found.after_load_pct) == ARTICLE_BREAKS[setup]


@pytest.mark.parametrize("setup", list(ARTICLE_BREAKS))
def test_rule_finds_them_from_the_change_point_rows_alone(ref, setup):
    points = reference.change_points(ref)
    row = points[
        (points["app"] == setup[0])
        & np.isclose(points["vcpu"], setup[1])
        & (points["sidecar_count"] == setup[2])
    ].iloc[0]
    found = breaking_point(
        [row.before_load_pct, row.after_load_pct], [row.before_p99_ms, row.after_p99_ms]
    )
    assert (found.before_load_pct, found.after_load_pct) == ARTICLE_BREAKS[setup]


def test_rule_ignores_noise_within_a_period():
    # Go 0.25+3 at 0 -> 15 % (104.6 -> 109.1 ms) and Next 0.25+3 at 0 -> 3 % (288.4 -> 300.2 ms): no break.
    assert breaking_point([0, 15], [104.6, 109.1]) is None
    assert breaking_point([0, 3], [288.4, 300.2]) is None
    assert breaking_point([0, 5, 10], [50, 40, 45]) is None  # falls and small rises
    assert breaking_point([0], [100]) is None
    assert breaking_point([], []) is None


def test_period_crossing_needs_a_rise_of_five_percent_of_the_period():
    # 101.5 -> 102.5 ms passes 100 + 2 ms but rises 1 ms: noise, not a break.
    assert period_level(101.5) == 0 and period_level(102.5) == 1
    assert breaking_point([0, 1], [101.5, 102.5]) is None
    assert breaking_point([0, 1], [100, 104.9]) is None  # 4.9 ms < 5 ms
    assert breaking_point([0, 1], [100, 105]).reason == "period"  # exactly 5 % of T = 100 ms
    assert breaking_point([0, 1], [40, 43], period_ms=40).reason == "period"  # 5 % of 40 ms = 2 ms
    assert breaking_point([0, 1], [41.5, 42.5], period_ms=40) is None


def test_rule_reasons_and_unsorted_input():
    assert (
        breaking_point([20, 0, 10], [30, 10, 12]) is None
    )  # sorted by load: 10 -> 12 -> 30 ms, no break
    found = breaking_point([10, 0, 5], [160, 100.5, 101])
    assert (found.before_load_pct, found.after_load_pct, found.reason) == (5, 10, "jump")
    found = breaking_point([0, 1], [99, 104])
    assert found.reason == "period"
    # Repeated loads are averaged before stepping: (95 + 97) / 2 = 96 -> 150 is a jump of 54 ms.
    found = breaking_point([0, 0, 1], [95, 97, 150])
    assert found.before_p99_ms == pytest.approx(96)


def test_period_level_counts_multiples_passed_by_more_than_the_margin():
    assert period_level(99) == 0
    assert period_level(102) == 0  # within 2 ms of 100
    assert period_level(102.1) == 1
    assert period_level(300.2) == 2
    assert period_level(309) == 3
    assert period_level(2 * 40 + 3, period_ms=40) == 2


def test_a_dip_and_recovery_is_not_a_break():
    # 98 -> 104 ms passes 100 + 2 ms by 6 ms, but 104 is below the 105 ms measured before the dip.
    assert breaking_point([0, 3, 6], [105, 98, 104]) is None
    result = assess([0, 3, 6], [105, 98, 104])
    assert result.verdict == "within noise"
    assert (result.step.before_load_pct, result.step.after_load_pct) == (3, 6)
    assert "104.0 ms <= 105.0 ms" in result.step.evidence


def test_overlapping_intervals_make_a_large_step_within_noise():
    loads, p99 = [0, 5, 10], [100, 190, 195]
    assert breaking_point(loads, p99).reason == "jump"  # point values alone: a break
    # ... but the 5 % run's interval reaches down to 99 ms, below the 0 % run's upper end.
    result = assess(loads, p99, p99_lo=[95, 99, 185], p99_hi=[104, 200, 205])
    assert result.verdict == "within noise"
    assert (result.step.before_load_pct, result.step.after_load_pct, result.step.reason) == (
        0,
        5,
        "jump",
    )
    assert breaking_point(loads, p99, [95, 99, 185], [104, 200, 205]) is None


def test_clear_intervals_confirm_the_break():
    result = assess([0, 5, 10], [100, 190, 195], p99_lo=[97, 185, 188], p99_hi=[103, 196, 201])
    assert result.verdict == "break"
    assert (result.step.before_load_pct, result.step.after_load_pct, result.step.reason) == (
        0,
        5,
        "jump",
    )
    assert "185.0 ms > 103.0 ms" in result.step.evidence


def test_later_dip_back_keeps_an_earlier_step_within_noise():
    # Go alternating between one and two periods run to run: 104 -> 187, then back to 107 at 21 %.
    lo, hi = [96, 99, 180, 105], [100, 106, 192, 110]
    result = assess([0, 15, 18, 21], [98, 104, 187, 107], p99_lo=lo, p99_hi=hi)
    assert result.verdict == "within noise"
    assert (result.step.before_load_pct, result.step.after_load_pct) == (
        0,
        15,
    )  # the first step within noise
    assert breaking_point([0, 15, 18, 21], [98, 104, 187, 107], lo, hi) is None


def test_run_without_a_successful_response_is_the_worst_point():
    result = assess([0, 5, 10], [100, 101, math.nan], successful=[900, 880, 0])
    assert result.verdict == "break"
    assert (result.step.before_load_pct, result.step.after_load_pct) == (5, 10)
    assert math.isinf(result.step.after_p99_ms) and "no response" in result.step.evidence
    # A NaN P99 with responses (a missing value) still drops out.
    assert assess([0, 5, 10], [100, 101, math.nan], successful=[900, 880, 5]).verdict == "none"


def test_tail_share_beyond_its_intervals_breaks_without_a_p99_step():
    # P99 stays at 100 ms but 3 % more responses now wait a full period, intervals apart.
    tails = {1: ([0.002, 0.003, 0.04], [0.001, 0.002, 0.03], [0.004, 0.005, 0.05])}
    result = assess([0, 3, 6], [99, 99.5, 100.5], tails=tails)
    assert result.verdict == "break" and result.step.reason == "tail>1T"
    assert (result.step.before_load_pct, result.step.after_load_pct) == (3, 6)
    overlapping = {1: ([0.002, 0.003, 0.04], [0.001, 0.002, 0.003], [0.004, 0.005, 0.05])}
    assert assess([0, 3, 6], [99, 99.5, 100.5], tails=overlapping).verdict == "within noise"


def test_sweeps_without_a_size_step_say_none_or_too_few_loads():
    assert assess([0, 3, 6], [100, 101, 100.5]).verdict == "none"
    assert assess([0], [100]).verdict == "too few loads"


# --- the rule's boundaries: ">=" for the sizes, ">" for "clear of the noise" ------------------------------


def test_a_jump_of_exactly_half_a_period_breaks():
    # 110 -> 160 ms stays past one period multiple (no crossing): only the jump rule can call it.
    assert breaking_point([0, 1], [110, 160]).reason == "jump"
    assert breaking_point([0, 1], [110, 159.9]) is None
    assert breaking_point([0, 1], [40, 60], period_ms=40).reason == "jump"  # 20 ms is half of 40 ms


def test_intervals_that_touch_are_not_clear_of_the_noise():
    assert assess([0, 1], [100, 160], p99_lo=[95, 110], p99_hi=[110, 170]).verdict == "within noise"
    assert assess([0, 1], [100, 160], p99_lo=[95, 110.1], p99_hi=[110, 170]).verdict == "break"


def test_a_missing_interval_end_is_the_point_value():
    # No interval at 0 %: its P99 (100 ms) is the highest before, and 150 ms clears it.
    nan = math.nan
    assert assess([0, 1], [100, 160], p99_lo=[nan, 150], p99_hi=[nan, 170]).verdict == "break"
    assert assess([0, 1], [100, 160], p99_lo=[95, nan], p99_hi=[104, nan]).verdict == "break"


def test_rows_at_one_load_pool_to_the_lowest_lo_and_the_highest_hi():
    # Two runs at 5 %: one interval reaches down to 100 ms, under the 104 ms before: within noise.
    result = assess([0, 5, 5], [100, 180, 190], p99_lo=[95, 100, 185], p99_hi=[104, 190, 200])
    assert result.verdict == "within noise" and result.step.after_p99_ms == pytest.approx(185)
    # Two runs at 0 %: one interval reaches up to 190 ms, over the 185 ms after: within noise.
    result = assess([0, 0, 5], [100, 100, 190], p99_lo=[95, 95, 185], p99_hi=[104, 190, 200])
    assert result.verdict == "within noise"


def test_a_tail_share_rising_by_exactly_one_point_breaks():
    flat = [99.0, 99.5]
    assert assess([0, 1], flat, tails={1: ([0.0, 0.01], None, None)}).step.reason == "tail>1T"
    assert assess([0, 1], flat, tails={1: ([0.0, 0.0099], None, None)}).verdict == "none"
    # Several periods rising: the first k that breaks is the reason.
    both = {2: ([0.0, 0.05], None, None), 1: ([0.0, 0.1], None, None)}
    assert assess([0, 1], flat, tails=both).step.reason == "tail>1T"
    # A tail step within its noise is reported as such, and a clear one at a higher k still breaks.
    tails = {1: ([0.0, 0.1], [0.0, 0.0], [0.05, 0.2]), 2: ([0.0, 0.05], None, None)}
    result = assess([0, 1], flat, tails=tails)
    assert (result.verdict, result.step.reason) == ("break", "tail>2T")


def test_a_p99_step_within_noise_can_still_break_by_its_tail():
    tails = {1: ([0.0, 0.2], None, None)}
    result = assess([0, 1], [100, 160], p99_lo=[95, 100], p99_hi=[110, 170], tails=tails)
    assert (result.verdict, result.step.reason) == ("break", "tail>1T")


def test_evidence_names_the_numbers_that_decided():
    result = assess([0, 5, 10], [100, 190, 195], p99_lo=[97, 185, 188], p99_hi=[103, 196, 201])
    assert result.step.evidence == (
        "P99 100.0 -> 190.0 ms (jump); from 5% on P99 >= 185.0 ms > 103.0 ms, the highest before"
    )
    tails = {1: ([0.002, 0.003, 0.04], [0.001, 0.002, 0.03], [0.004, 0.005, 0.05])}
    result = assess([0, 3, 6], [99, 99.5, 100.5], tails=tails)
    assert result.step.evidence == (
        "share slower than 1 period 0.3% -> 4.0%; from 6% on >= 3.0% > 0.5%, the highest before"
    )
    result = assess([0, 1], [99, 99.5], tails={2: ([0.0, 0.05], [0.0, 0.0], [0.01, 0.1])})
    assert result.step.evidence == (
        "share slower than 2 periods 0.0% -> 5.0%; from 1% on >= 0.0% <= 1.0%, the highest before"
    )
    assert (result.step.before_p99_ms, result.step.after_p99_ms) == (99.0, 99.5)


def test_two_loads_are_enough_and_one_load_repeated_is_too_few():
    assert assess([0, 1], [100, 100]).verdict == "none"
    assert assess([5, 5], [100, 200]).verdict == "too few loads"
    assert assess([0, math.nan], [100, 200]).verdict == "too few loads"


def test_an_unservable_load_is_above_every_period_multiple():
    assert period_level(math.inf) > period_level(1e9)
    assert period_level(2.0) == 0 and period_level(0.0) == 0 and period_level(-5.0) == 0


def test_a_sweep_from_summary_rows_reads_its_period_and_tail_shares():
    import pandas as pd

    # 49 -> 53 ms: past one 50 ms period by 3 ms, a rise of 4 ms (8 % of 50 ms); within one 100 ms period.
    rows = pd.DataFrame(
        {"total_sidecar_load_pct": [0, 0, 1], "p99_ms": [49, 49, 53], "period_ms": [50, 50, 200]}
    )
    assert assess_rows(rows).step.reason == "period"  # the rows' median period, 50 ms
    assert assess_rows(rows, period_ms=100.0).verdict == "none"
    assert (
        assess_rows(rows.drop(columns="period_ms")).verdict == "none"
    )  # 100 ms when the rows have none
    assert assess_rows(rows.assign(period_ms=math.nan)).verdict == "none"
    tails = rows.assign(
        slow_1p_share=[0.0, 0.0, 0.05],
        slow_1p_share_lo=[0.0, 0.0, 0.02],
        slow_1p_share_hi=[0.01, 0.01, 0.08],
    )
    result = assess_rows(tails, period_ms=100.0)
    assert (result.verdict, result.step.reason) == ("break", "tail>1T")
    overlapping = tails.assign(slow_1p_share_lo=[0.0, 0.0, 0.005])
    assert assess_rows(overlapping, period_ms=100.0).verdict == "within noise"
    served = pd.DataFrame(
        {"total_sidecar_load_pct": [0, 1], "p99_ms": [100, math.nan], "successful": [900, 0]}
    )
    assert assess_rows(served).verdict == "break"


def test_an_assessment_counts_the_distinct_loads_of_its_sweep():
    assert assess([0, 3, 3, 6], [100, 160, 170, 175]).loads == 3  # a break
    assert assess([0, 3, 6], [105, 98, 104]).loads == 3  # within noise
    assert assess([0, 3, math.nan], [100, 101, 102]).loads == 2  # none


def test_summary_rows_bring_their_p99_intervals():
    import pandas as pd

    rows = pd.DataFrame({"total_sidecar_load_pct": [0, 5], "p99_ms": [100, 190]})
    assert assess_rows(rows).verdict == "break"
    apart = rows.assign(p99_ms_lo=[95, 185], p99_ms_hi=[104, 200])
    assert assess_rows(apart).verdict == "break"
    assert (
        assess_rows(apart.assign(p99_ms_lo=[95, 99])).verdict == "within noise"
    )  # 5 % reaches down to 99 ms
    assert (
        assess_rows(apart.assign(p99_ms_hi=[186, 200])).verdict == "within noise"
    )  # 0 % reaches up to 186 ms


def test_a_falling_sweep_has_no_step():
    assert assess([0, 1], [160, 100]).verdict == "none"
    assert assess([0, 5, 10], [300, 200, 100]).verdict == "none"


def test_the_crossing_margin_is_a_rule_parameter():
    # 99 -> 104.5 ms: past 100 + 2 ms by 2.5 ms, but not past 100 + 5 ms.
    assert breaking_point([0, 1], [99, 104.5]).reason == "period"
    assert breaking_point([0, 1], [99, 104.5], margin_ms=5.0) is None
    # 100.5 -> 106 ms: with no margin both are past 100 ms already; with 2 ms only the second.
    assert breaking_point([0, 1], [100.5, 106]).reason == "period"
    assert breaking_point([0, 1], [100.5, 106], margin_ms=0.0) is None


def test_missing_values_given_as_none_or_nan_are_missing():
    # A P99 of None drops its load out; an interval end of None is the point value; a share of None or NaN
    # is no tail step, but the load's P99 still counts.
    assert assess([0, 1, 2], [100, None, 160]).step.after_load_pct == 2
    assert assess([0, 1], [100, 160], p99_lo=[None, 150], p99_hi=[None, 170]).verdict == "break"
    assert assess([0, 1], [100, 160], tails={1: ([0.0, math.nan], None, None)}).verdict == "break"
    assert assess([0, 1], [100, 101], tails={1: ([0.0, None], None, None)}).verdict == "none"


def test_a_load_without_a_response_reads_no_response_in_the_evidence():
    result = assess([0, 10], [101, math.nan], successful=[880, 0])
    assert result.step.evidence == (
        "P99 101.0 -> no response ms (jump); from 10% on P99 >= no response ms > "
        "101.0 ms, the highest before"
    )


def test_steps_lists_every_step_that_meets_a_size_criterion():
    from sidecar_bench.breaking import steps

    found = steps([0, 1, 2], [100, 160, 220])
    assert [(s.after_load_pct, s.reason, s.verdict) for s in found] == [
        (1, "jump", "break"),
        (2, "jump", "break"),
    ]


def test_tail_steps_look_at_each_period_and_need_a_rise_clear_of_the_noise():
    flat = [99.0, 99.5]
    # One period flat, two periods rising: the second breaks.
    result = assess([0, 1], flat, tails={1: ([0.0, 0.0], None, None), 2: ([0.0, 0.05], None, None)})
    assert result.step.reason == "tail>2T"
    # A high share that rises by half a point is no step.
    assert assess([0, 1], flat, tails={1: ([0.05, 0.055], None, None)}).verdict == "none"
    # Tail intervals that touch are within noise.
    touching = {1: ([0.0, 0.05], [0.0, 0.02], [0.02, 0.08])}
    assert assess([0, 1], flat, tails=touching).verdict == "within noise"

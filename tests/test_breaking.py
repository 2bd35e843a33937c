"""The breaking-point rule: the article's own sweeps, noise within a period, and intervals that overlap."""

import math
from pathlib import Path

import numpy as np
import pytest

from sidecar_bench import reference
from sidecar_bench.breaking import assess, breaking_point, period_level

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
    row = points[(points["app"] == setup[0]) & np.isclose(points["vcpu"], setup[1])
                 & (points["sidecar_count"] == setup[2])].iloc[0]
    found = breaking_point([row.before_load_pct, row.after_load_pct], [row.before_p99_ms, row.after_p99_ms])
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
    assert breaking_point([20, 0, 10], [30, 10, 12]) is None  # sorted by load: 10 -> 12 -> 30 ms, no break
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
    assert (result.step.before_load_pct, result.step.after_load_pct, result.step.reason) == (0, 5, "jump")
    assert breaking_point(loads, p99, [95, 99, 185], [104, 200, 205]) is None


def test_clear_intervals_confirm_the_break():
    result = assess([0, 5, 10], [100, 190, 195], p99_lo=[97, 185, 188], p99_hi=[103, 196, 201])
    assert result.verdict == "break"
    assert (result.step.before_load_pct, result.step.after_load_pct, result.step.reason) == (0, 5, "jump")
    assert "185.0 ms > 103.0 ms" in result.step.evidence


def test_later_dip_back_keeps_an_earlier_step_within_noise():
    # Go alternating between one and two periods run to run: 104 -> 187, then back to 107 at 21 %.
    lo, hi = [96, 99, 180, 105], [100, 106, 192, 110]
    result = assess([0, 15, 18, 21], [98, 104, 187, 107], p99_lo=lo, p99_hi=hi)
    assert result.verdict == "within noise"
    assert (result.step.before_load_pct, result.step.after_load_pct) == (0, 15)  # the first step within noise
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

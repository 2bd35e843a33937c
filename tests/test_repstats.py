"""Statistics of repetitions: the 95 % intervals hold 95 % of the time, checked by simulation.

Each simulated condition has a known true rate. A run's value is what a run of
10 s would count: Poisson arrivals at the true rate times a run-to-run factor
(a new container lands differently on the CPUs), so even at 0 % run-to-run CV
the runs differ by their counting noise. 2000 conditions per case keep the
binomial standard error of a coverage near 0.5 %, so 0.93-0.97 is about four
standard errors either side of 0.95; the seeds are fixed, so the test is
deterministic.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats as sps

from sidecar_bench import repstats

CONDITIONS = 2000
WINDOW_S = 10.0
CVS = (0.0, 0.03, 0.07, 0.15)
REPS = (2, 3, 5)


def simulated_runs(
    rng: np.random.Generator,
    true_rps: float,
    cv: float,
    reps: int,
    size: int,
    lognormal: bool = False,
) -> np.ndarray:
    """size x reps per-run RPS values around true_rps (the mean of a run's value is true_rps)."""
    if lognormal:
        # Log-normal run factors with E[log factor] = 0: the log ratio of two such conditions is exact.
        factor = np.exp(rng.normal(0.0, cv, size=(size, reps)))
    else:
        factor = 1.0 + rng.normal(0.0, cv, size=(size, reps))
    counts = rng.poisson(np.clip(true_rps * factor, 0, None) * WINDOW_S)
    return counts / WINDOW_S


@pytest.mark.parametrize("reps", REPS)
@pytest.mark.parametrize("cv", CVS)
def test_the_mean_interval_covers_the_true_rate_95_percent_of_the_time(cv, reps):
    rng = np.random.default_rng([int(cv * 1000), reps, 1])
    truth = 500.0
    values = simulated_runs(rng, truth, cv, reps, CONDITIONS)
    covered = sum(repstats.mean_interval(row).contains(truth) for row in values)
    assert 0.93 <= covered / CONDITIONS <= 0.97


@pytest.mark.parametrize("reps", REPS)
@pytest.mark.parametrize("cv", CVS)
def test_the_ratio_interval_covers_the_true_ratio_95_percent_of_the_time(cv, reps):
    # Retention: a loaded cell at 60 % of its baseline's rate, both measured with noise.
    rng = np.random.default_rng([int(cv * 1000), reps, 2])
    base, loaded = 800.0, 480.0
    num = simulated_runs(rng, loaded, cv, reps, CONDITIONS, lognormal=True)
    den = simulated_runs(rng, base, cv, reps, CONDITIONS, lognormal=True)
    covered = sum(repstats.ratio_interval(n, d).contains(loaded / base) for n, d in zip(num, den))
    # Welch's interval is conservative with 2-3 runs a side (its degrees of freedom fall below the
    # pooled n1 + n2 - 2): 0.97-0.98 here. The pooled t would sit on 0.95 when both sides' CVs are
    # equal but drops to 0.91 when one side is five times noisier (3 % vs 15 %), which the cells here
    # are (a bimodal tail beside a steady baseline): over-covering by two points is the safe side.
    assert 0.93 <= covered / CONDITIONS <= 0.985


@pytest.mark.parametrize("reps", REPS)
@pytest.mark.parametrize("cv", CVS)
def test_the_ratio_of_two_ratios_covers_95_percent_of_the_time(cv, reps):
    # Next.js's retention over Go's: four conditions, each measured with noise, a low-rate one among them.
    rng = np.random.default_rng([int(cv * 1000), reps, 5])
    truths = (50.0, 230.0, 230.0, 370.0)  # Next.js loaded and idle, Go loaded and idle
    signs = (1, -1, -1, 1)
    runs = [simulated_runs(rng, t, cv, reps, CONDITIONS, lognormal=True) for t in truths]
    truth = (50.0 / 230.0) / (230.0 / 370.0)
    covered = sum(
        repstats.contrast_interval(list(zip(rows, signs))).contains(truth) for rows in zip(*runs)
    )
    # Welch's degrees of freedom over four conditions of 2-3 runs: conservative, more than for one ratio
    # (0.949-0.985 over these twelve cases, the most with 2 runs at 15 %).
    assert 0.93 <= covered / CONDITIONS <= 0.99


def test_an_interval_is_held_to_what_the_metric_can_be():
    wide = repstats.mean_interval([5.0, 400.0])  # t(1) x s / sqrt(2) reaches far below 0
    assert wide.lo < 0
    held = repstats.clipped(wide)
    assert (held.value, held.lo, held.hi, held.n, held.method) == (
        wide.value,
        0.0,
        wide.hi,
        wide.n,
        wide.method,
    )
    share = repstats.clipped(repstats.mean_interval([0.05, 0.95]), 0.0, 1.0)
    assert (share.lo, share.hi) == (0.0, 1.0)
    single = repstats.mean_interval([5.0])
    assert repstats.clipped(single) is single  # no interval: nothing to hold


def test_a_contrast_of_two_conditions_is_their_ratio_bit_for_bit():
    rng = np.random.default_rng(6)
    for _ in range(200):
        num, den = rng.uniform(50, 150, size=3), rng.uniform(50, 150, size=int(rng.integers(2, 6)))
        assert repstats.contrast_interval([(num, 1), (den, -1)]) == repstats.ratio_interval(
            num, den
        )


def test_a_contrast_needs_every_condition_measured_twice_and_signs_of_one():
    two, one = [100.0, 110.0], [100.0]
    assert repstats.contrast_interval([(two, 1), (one, -1)]).method == repstats.SINGLE
    assert repstats.contrast_interval([(two, 1), ([], -1)]).method == repstats.NONE
    assert repstats.contrast_interval([(two, 1), ([0.0, 1.0], -1)]).method == repstats.NONE
    assert repstats.contrast_interval([]).method == repstats.NONE
    with pytest.raises(ValueError, match="sign"):
        repstats.contrast_interval([(two, 2)])


@pytest.mark.parametrize("reps", REPS)
def test_the_ratio_to_a_published_number_covers_95_percent_of_the_time(reps):
    rng = np.random.default_rng([reps, 3])
    published = 700.0
    num = simulated_runs(rng, 350.0, 0.07, reps, CONDITIONS, lognormal=True)
    covered = sum(repstats.ratio_to_exact(n, published).contains(0.5) for n in num)
    assert 0.93 <= covered / CONDITIONS <= 0.97


def test_ignoring_the_denominators_noise_covers_far_less():
    # What the ratio interval guards against: the numerator's interval divided by the baseline's mean.
    rng = np.random.default_rng(4)
    num = simulated_runs(rng, 480.0, 0.15, 5, CONDITIONS, lognormal=True)
    den = simulated_runs(rng, 800.0, 0.15, 5, CONDITIONS, lognormal=True)
    naive = 0
    for n, d in zip(num, den):
        e = repstats.mean_interval(n)
        naive += e.lo / d.mean() <= 0.6 <= e.hi / d.mean()
    assert naive / CONDITIONS < 0.90


def test_the_t_interval_of_three_runs_is_the_textbook_one():
    # 3 runs: 100, 110, 120 -> mean 110, s = 10, t(0.975, 2) = 4.303 -> 110 +- 24.84.
    e = repstats.mean_interval([100.0, 110.0, 120.0])
    assert e.value == pytest.approx(110.0)
    assert e.lo == pytest.approx(110.0 - 4.3027 * 10 / math.sqrt(3), abs=1e-3)
    assert e.hi == pytest.approx(110.0 + 4.3027 * 10 / math.sqrt(3), abs=1e-3)
    assert e.method == repstats.T_MEAN and e.n == 3


def test_two_runs_pay_the_small_sample_penalty():
    # t(0.975, 1) = 12.71: two runs 5 % apart give an interval far wider than their range.
    e = repstats.mean_interval([100.0, 105.0])
    assert e.hi - e.lo == pytest.approx(
        2 * 12.706 * np.std([100.0, 105.0], ddof=1) / math.sqrt(2), rel=1e-3
    )
    assert e.hi - e.lo > 5 * 5.0


def test_one_run_has_no_run_to_run_interval():
    e = repstats.mean_interval([123.0])
    assert e.value == 123.0 and e.method == repstats.SINGLE and not e.has_interval
    r = repstats.ratio_interval([1.0], [2.0, 2.1])
    assert r.method == repstats.SINGLE and not r.has_interval


def test_nan_runs_are_left_out_and_none_left_is_said():
    assert repstats.mean_interval([math.nan, 10.0, 12.0]).n == 2
    assert repstats.mean_interval([math.nan]).method == repstats.NONE


def test_a_ratio_of_values_that_can_be_zero_has_no_log_interval():
    r = repstats.ratio_interval([0.0, 0.01, 0.02], [0.02, 0.03, 0.01])
    assert r.method == repstats.NONE and not r.has_interval


def test_run_cv_is_the_sample_standard_deviation_over_the_mean():
    assert repstats.run_cv([90.0, 100.0, 110.0]) == pytest.approx(0.1)
    assert math.isnan(repstats.run_cv([100.0]))


def test_the_ratio_interval_is_welchs_on_the_logs():
    # Against scipy's own Welch test: the ratio's interval excludes 1 exactly when the test rejects at 5 %.
    from scipy import stats

    rng = np.random.default_rng(5)
    for _ in range(200):
        a = np.exp(rng.normal(0.0, 0.1, 3))
        b = np.exp(rng.normal(0.05, 0.2, 4))
        rejects = stats.ttest_ind(np.log(a), np.log(b), equal_var=False).pvalue < 0.05
        r = repstats.ratio_interval(a, b)
        assert (not r.contains(1.0)) == rejects


def test_identical_runs_give_a_zero_width_interval():
    e = repstats.mean_interval([5.0, 5.0, 5.0])
    assert (e.value, e.lo, e.hi, e.n, e.method) == (5.0, 5.0, 5.0, 3, repstats.T_MEAN)
    r = repstats.ratio_interval([2.0, 2.0], [4.0, 4.0, 4.0])
    assert (r.value, r.lo, r.hi) == pytest.approx((0.5, 0.5, 0.5)) and (r.n, r.method) == (
        2,
        repstats.WELCH_LOG,
    )
    x = repstats.ratio_to_exact([3.0, 3.0], 4.0)
    assert (x.value, x.lo, x.hi) == pytest.approx((0.75, 0.75, 0.75))
    assert (x.n, x.method) == (2, repstats.ONE_SAMPLE_LOG)


def test_a_ratio_is_of_geometric_means():
    # Geometric means 2 (of 1 and 4) and 4 (of 1 and 16): 0.5; the arithmetic means would give 2.5 / 8.5.
    r = repstats.ratio_interval([1.0, 4.0], [1.0, 16.0])
    assert r.value == pytest.approx(0.5) and r.lo < 0.5 < r.hi and r.n == 2
    assert repstats.ratio_interval([1.0, 4.0], [4.0]).value == pytest.approx(
        0.5
    )  # one run of the denominator
    assert repstats.ratio_to_exact([1.0, 4.0], 4.0).value == pytest.approx(0.5)
    single = repstats.ratio_to_exact([2.0], 4.0)
    assert single.value == pytest.approx(0.5) and (single.n, single.method) == (1, repstats.SINGLE)
    assert not single.has_interval


def test_the_ratio_to_a_published_number_is_the_t_interval_of_the_logs():
    # Logs 0, 0.1, 0.2: mean 0.1, s = 0.1, t(0.975, 2) = 4.3027; against a published 1.
    x = repstats.ratio_to_exact(np.exp([0.0, 0.1, 0.2]), 1.0)
    half = 4.3027 * 0.1 / math.sqrt(3)
    assert x.value == pytest.approx(math.exp(0.1))
    assert (x.lo, x.hi) == pytest.approx((math.exp(0.1 - half), math.exp(0.1 + half)), rel=1e-4)
    twice = repstats.ratio_to_exact(np.exp([0.0, 0.1, 0.2]), 2.0)
    assert (twice.lo, twice.hi) == pytest.approx((x.lo / 2, x.hi / 2))


def test_ratios_without_a_usable_value_say_so():
    assert repstats.ratio_interval([], [1.0, 2.0]).method == repstats.NONE
    assert repstats.ratio_interval([1.0, 2.0], [math.nan]).method == repstats.NONE
    zero = repstats.ratio_interval([1.0, 2.0], [0.0, 0.0])
    assert zero.method == repstats.NONE and math.isnan(zero.value)
    # A side with a zero run has no log: the ratio of arithmetic means, without an interval.
    r = repstats.ratio_interval([0.0, 2.0], [1.0, 3.0])
    assert (r.value, r.method, r.n) == (0.5, repstats.NONE, 2) and not r.has_interval
    x = repstats.ratio_to_exact([0.0, 1.0], 4.0)
    assert (x.value, x.method) == (0.125, repstats.NONE) and not x.has_interval
    for published in (0.0, -1.0, math.nan, math.inf):
        assert repstats.ratio_to_exact([1.0, 2.0], published).method == repstats.NONE
    assert repstats.ratio_to_exact([], 1.0).method == repstats.NONE


def test_an_interval_contains_its_ends_and_nothing_without_one():
    e = repstats.Estimate(1.0, 0.5, 2.0, 3, repstats.T_MEAN)
    assert e.contains(0.5) and e.contains(2.0) and not e.contains(2.01) and not e.contains(0.49)
    assert not repstats.Estimate(1.0, math.nan, 2.0, 1, repstats.SINGLE).contains(1.0)
    assert not repstats.Estimate(1.0, 0.5, math.nan, 1, repstats.SINGLE).has_interval


def test_run_cv_of_runs_that_average_zero_is_unknown():
    assert math.isnan(repstats.run_cv([-1.0, 1.0]))
    assert repstats.run_cv([-90.0, -100.0, -110.0]) == pytest.approx(
        0.1
    )  # a spread, whatever the sign
    assert repstats.run_cv([math.nan, 90.0, 110.0]) == pytest.approx(
        np.std([90, 110], ddof=1) / 100
    )


def test_a_lower_confidence_gives_a_narrower_interval():
    # t(0.95, 2) = 2.9200: the 90 % interval of 100, 110, 120.
    e = repstats.mean_interval([100.0, 110.0, 120.0], confidence=0.90)
    assert e.hi - e.lo == pytest.approx(2 * 2.9200 * 10 / math.sqrt(3), rel=1e-4)


def no_interval(e) -> bool:
    """lo and hi both NaN (what tables print as no interval), not None nor a number."""
    return math.isnan(e.lo) and math.isnan(e.hi)


def test_estimates_without_a_value_or_an_interval_hold_nan_and_their_run_count():
    nothing = repstats.mean_interval([])
    assert (
        math.isnan(nothing.value)
        and no_interval(nothing)
        and (nothing.n, nothing.method) == (0, repstats.NONE)
    )
    assert no_interval(repstats.mean_interval([3.0])) and repstats.mean_interval([3.0]).n == 1
    for published in (0.0, math.nan):
        x = repstats.ratio_to_exact([1.0, 2.0, 4.0], published)
        assert math.isnan(x.value) and no_interval(x) and x.n == 3
    zero = repstats.ratio_to_exact([0.0, 1.0, 2.0], 4.0)
    assert no_interval(zero) and zero.n == 3
    single = repstats.ratio_to_exact([2.0], 4.0)
    assert no_interval(single) and single.n == 1
    r = repstats.ratio_interval([0.0, 2.0], [1.0, 3.0])
    assert no_interval(r)
    assert repstats.ratio_to_exact(np.exp([0.0, 0.1, 0.2]), 1.0).method == repstats.ONE_SAMPLE_LOG
    for r, n in (
        (repstats.ratio_interval([], [1.0, 2.0]), 0),
        (repstats.ratio_interval([1.0, 2.0], [0.0]), 2),
        (repstats.ratio_interval([1.0, 2.0], [4.0]), 2),
    ):
        assert no_interval(r) and r.n == n


def test_a_missing_run_value_given_as_none_is_left_out():
    assert repstats.mean_interval([None, 10.0, 12.0]).n == 2
    assert repstats.run_cv([None, 90.0, 110.0]) == pytest.approx(repstats.run_cv([90.0, 110.0]))


def test_run_values_may_come_from_any_iterable():
    assert repstats.mean_interval(v for v in (100.0, 110.0, 120.0)).value == pytest.approx(110.0)
    assert repstats.run_cv(iter([90.0, 100.0, 110.0])) == pytest.approx(0.1)


@pytest.mark.parametrize("df", [1, 2, 4, 3.7, 12.25, 200, 2.000001, math.inf])
@pytest.mark.parametrize("confidence", [0.90, 0.95, 0.99])
def test_the_cached_t_interval_is_scipys_bit_for_bit(df, confidence):
    for loc, scale in [(0.0, 1.0), (123.456, 7.89), (-0.3, 1e-6)]:
        expected = sps.t.interval(confidence, df, loc=loc, scale=scale)
        assert repstats.t_interval(confidence, df, loc, scale) == tuple(map(float, expected))


@given(
    st.lists(
        st.floats(min_value=1e-6, max_value=1e7, allow_nan=False, allow_infinity=False),
        min_size=2,
        max_size=40,
    )
)
def test_the_mean_variance_and_deviation_are_numpys_bit_for_bit(values):
    x = np.array(values)
    assert repstats.mean_of(x) == float(x.mean())
    assert repstats.var_of(x) == float(x.var(ddof=1))
    assert repstats.std_of(x) == float(x.std(ddof=1))
    assert repstats.var_of(x, ddof=0) == float(x.var())

"""The two-level block bootstrap on hand-made runs whose intervals can be worked out by hand."""

import numpy as np
import pytest

from sidecar_bench.intervals import (
    condition_intervals,
    draw_weights,
    metric_names,
    percentile_name,
    run_blocks,
    seed_for,
)
from sidecar_bench.stats import latency_stats


def steady_run(latency_ms, per_second, seconds):
    """per_second responses of latency_ms in every second: every block is the same."""
    rt = np.full(per_second * seconds, latency_ms / 1000.0)
    offset = np.repeat(np.arange(seconds), per_second) + 0.5
    return run_blocks(rt, offset, float(seconds))


def test_identical_blocks_give_zero_width_intervals():
    block = np.arange(1, 11) / 1000.0  # 1..10 ms in every second
    runs = [run_blocks(np.tile(block, 5), np.repeat(np.arange(5), 10) + 0.1, 5.0) for _ in range(2)]
    found = condition_intervals("same", runs, 100.0, resamples=200)
    assert found.point["rps"] == pytest.approx(10.0)
    assert found.point["p50_ms"] == pytest.approx(5.0) and found.point["p90_ms"] == pytest.approx(
        9.0
    )
    for name in ("rps", "p50_ms", "p90_ms", "p99_ms", "slow_1p_share"):
        interval = found.intervals[name]
        assert interval.lo == pytest.approx(found.point[name]) and interval.hi == pytest.approx(
            found.point[name]
        )


def test_two_runs_that_differ_span_both():
    # Run A: 10 responses/s at 2 ms; run B: 30/s at 4 ms. Drawing two runs with replacement gives
    # AA (1/4): 10 RPS, P50 2 ms; BB (1/4): 30 RPS, P50 4 ms; AB (1/2): 20 RPS, P50 4 ms.
    runs = [steady_run(2.0, 10, 10), steady_run(4.0, 30, 10)]
    found = condition_intervals("two", runs, 100.0)
    assert found.point["rps"] == pytest.approx(20.0)  # 400 responses / 20 s
    assert found.point["p50_ms"] == pytest.approx(4.0)  # 300 of the 400 took 4 ms
    assert (found.intervals["rps"].lo, found.intervals["rps"].hi) == pytest.approx((10.0, 30.0))
    assert (found.intervals["p50_ms"].lo, found.intervals["p50_ms"].hi) == pytest.approx((2.0, 4.0))
    assert found.repetitions == 2 and found.resamples == 1000


def test_point_values_are_the_pooled_nearest_rank_statistics():
    rng = np.random.default_rng(7)
    runs, times = [], []
    for load_s in (9.5, 10.0, 10.25):
        rt = np.round(rng.lognormal(np.log(0.004), 0.8, 3000), 4)
        runs.append(run_blocks(rt, rng.uniform(0, load_s - 0.5, 3000), load_s))
        times.append(rt)
    found = condition_intervals("pooled", runs, 100.0, resamples=50)
    pooled = np.concatenate(times)
    expected = latency_stats(pooled)
    for name in ("p50_ms", "p90_ms", "p95_ms", "p99_ms", "p99_9_ms"):
        assert found.point[name] == expected[name]
        # Percentiles of resamples are observed latencies, never interpolated.
        assert np.isclose(pooled * 1000, found.intervals[name].lo).any()
        assert found.intervals[name].lo <= found.point[name] <= found.intervals[name].hi
    assert found.point["rps"] == pytest.approx(9000 / (9.5 + 10.0 + 10.25))
    assert found.point["slow_1p_share"] == pytest.approx((pooled > 0.1).mean())


def test_the_last_partial_block_counts_its_real_length():
    blocks = run_blocks(np.full(5, 0.001), [0.1, 1.1, 2.1, 2.2, 2.3], 2.5)
    assert list(blocks.block_s) == pytest.approx([1.0, 1.0, 0.5])
    assert list(blocks.block) == [0, 1, 2, 2, 2]
    found = condition_intervals("partial", [blocks], 100.0, resamples=100)
    assert found.point["rps"] == pytest.approx(5 / 2.5)
    # Resamples of 3 blocks: the RPS extremes are all-empty-ish (1 / 1 s) and three copies of the last (9 / 1.5 s).
    assert 1.0 <= found.intervals["rps"].lo <= found.intervals["rps"].hi <= 6.0


def test_slow_shares_count_responses_beyond_whole_periods():
    rt = np.r_[np.full(90, 0.002), np.full(6, 0.150), np.full(3, 0.250), np.full(1, 0.300)]
    found = condition_intervals(
        "slow", [run_blocks(rt, np.linspace(0, 9.5, 100), 10.0)], 100.0, resamples=50
    )
    assert found.point["slow_1p_share"] == pytest.approx(0.10)
    assert found.point["slow_2p_share"] == pytest.approx(0.04)
    assert found.point["slow_3p_share"] == pytest.approx(0.0)  # 300 ms is not slower than 3 periods


def test_same_condition_same_interval_other_condition_other_draws():
    rng = np.random.default_rng(3)
    runs = [run_blocks(rng.uniform(0.001, 0.2, 500), rng.uniform(0, 5, 500), 5.0) for _ in range(2)]
    a = condition_intervals("go_cpu1", runs, 100.0, resamples=300)
    assert condition_intervals("go_cpu1", runs, 100.0, resamples=300) == a
    assert condition_intervals("go_cpu2", runs, 100.0, resamples=300).intervals != a.intervals


def test_weights_draw_whole_runs_then_their_blocks():
    weights = draw_weights(seed_for("w", 0), [4, 6], 500)
    assert weights.shape == (500, 10)
    # Two runs drawn: (0 or 1 or 2 copies of the first run) x 4 blocks + the rest x 6.
    first = weights[:, :4].sum(axis=1)
    assert set(first) <= {0, 4, 8} and set(first) == {0, 4, 8}
    assert ((first / 4 + weights[:, 4:].sum(axis=1) / 6) == 2).all()


def test_a_window_of_zero_seconds_is_refused():
    with pytest.raises(ValueError, match="load window 0"):
        run_blocks(np.ones(1), np.zeros(1), 0)


def one_run_of_counts(counts, latency_s=0.001):
    """One run whose second i has counts[i] responses of latency_s, started mid-second."""
    counts = np.asarray(counts)
    offsets = np.repeat(np.arange(len(counts)) + 0.5, counts)
    return run_blocks(np.full(len(offsets), latency_s), offsets, float(len(counts)))


def test_the_interval_spans_1_96_bootstrap_standard_errors_either_side():
    # A resample of one run of K blocks draws K blocks with replacement: its RPS is a mean of K draws,
    # whose standard deviation is the blocks' population standard deviation / sqrt(K) (the bootstrap
    # standard error of a mean). A 95 % percentile interval of a near-normal statistic lies 1.96 of
    # them either side; 90 % would be 1.64, 96.7 % 2.13, 99 % 2.58.
    counts = 50 + np.arange(200) % 21
    found = condition_intervals("level", [one_run_of_counts(counts)], 100.0, resamples=10000)
    se = counts.std() / np.sqrt(len(counts))
    rps = found.intervals["rps"]
    assert 1.90 <= (rps.hi - rps.lo) / 2 / se <= 2.02
    assert abs((rps.hi + rps.lo) / 2 - counts.mean()) < 0.1 * se


def test_the_interval_ends_are_the_resampled_rates_at_the_tail_ranks():
    # A percentile interval at confidence c of R resamples: its ends are the resampled statistics of rank
    # R(1-c)/2 and R(1+c)/2 counted from the smallest (the inverted CDF). At c = 0.5 and R = 1000 these are
    # the 250th and the 750th, with no float rounding in between. The resamples are the condition's own
    # draws (seed_for, draw_weights); a resample's RPS is its responses over its seconds.
    counts = 50 + (np.arange(200) * 7919) % 997
    found = condition_intervals(
        "ranks", [one_run_of_counts(counts)], 100.0, resamples=1000, confidence=0.5
    )
    weights = draw_weights(seed_for("ranks", 0), [len(counts)], 1000)
    rates = np.sort(weights @ counts / weights.sum(axis=1))
    assert rates[249] < rates[252] and rates[747] < rates[749]  # a rank off is another value
    assert found.intervals["rps"].lo == pytest.approx(rates[249], rel=1e-12)
    assert found.intervals["rps"].hi == pytest.approx(rates[749], rel=1e-12)


def test_the_within_run_interval_covers_a_runs_true_rate_95_percent_of_the_time():
    # 400 runs of 60 one-second blocks of Poisson(50) responses: the true rate is 50/s. A percentile
    # bootstrap of a mean of 60 blocks covers about 94-95 % of the time (it is a little narrow, as a
    # z interval is beside a t one): 0.9525 here, and the same runs at 90 % or 99 % 0.9075 and 0.99.
    rng = np.random.default_rng(11)
    conditions = 400
    covered = {0.90: 0, 0.95: 0, 0.99: 0}
    for i in range(conditions):
        run = one_run_of_counts(rng.poisson(50, 60))
        for level in covered:
            found = (
                condition_intervals(f"c{i}", [run], 100.0, resamples=500)
                if level == 0.95
                else condition_intervals(f"c{i}", [run], 100.0, resamples=500, confidence=level)
            )
            covered[level] += found.intervals["rps"].lo <= 50.0 <= found.intervals["rps"].hi
    share = {level: n / conditions for level, n in covered.items()}
    assert 0.92 <= share[0.95] <= 0.97
    assert share[0.90] < 0.92 and share[0.99] > 0.97


def test_nearest_rank_of_99_9_percent_of_1000_is_the_999th():
    run = run_blocks(np.arange(1, 1001) / 1000.0, np.full(1000, 0.5), 1.0)
    found = condition_intervals("rank", [run], 2000.0, resamples=20)
    assert found.point["p99_9_ms"] == pytest.approx(999.0)
    assert found.point["p50_ms"] == pytest.approx(500.0) and found.point["p99_ms"] == pytest.approx(
        990.0
    )


def test_every_response_slower_than_a_period_is_a_share_of_one():
    found = condition_intervals(
        "slow", [one_run_of_counts([10] * 5, latency_s=0.150)], 100.0, resamples=50
    )
    assert (found.point["slow_1p_share"], found.point["slow_2p_share"]) == (1.0, 0.0)
    assert (found.intervals["slow_1p_share"].lo, found.intervals["slow_1p_share"].hi) == (1.0, 1.0)


def test_a_run_without_a_successful_response_has_a_rate_of_zero_and_no_latency():
    found = condition_intervals(
        "empty", [run_blocks(np.zeros(0), np.zeros(0), 5.0)], 100.0, resamples=50
    )
    assert found.point["rps"] == 0.0 and (found.intervals["rps"].lo, found.intervals["rps"].hi) == (
        0.0,
        0.0,
    )
    assert np.isnan(found.point["p99_ms"]) and np.isnan(found.intervals["p99_ms"].lo)
    assert np.isnan(found.intervals["slow_1p_share"].hi)
    with pytest.raises(ValueError, match="no runs"):
        condition_intervals("none", [], 100.0)


def test_blocks_cut_at_whole_seconds_with_float_noise_and_strays_kept_at_the_ends():
    assert list(run_blocks(np.ones(1), [0.5], 2.0 + 1e-9).block_s) == [
        1.0,
        1.0,
    ]  # float noise: no third block
    assert len(run_blocks(np.ones(1), [0.5], 2.0 + 1e-5).block_s) == 3
    assert list(run_blocks(np.ones(1), [0.5], 0.4).block_s) == pytest.approx(
        [0.4]
    )  # shorter than a block
    # A start before the window or after it belongs to the first or the last block.
    assert list(run_blocks(np.ones(3), [-0.5, 1.2, 3.2], 2.5).block) == [0, 1, 2]
    with pytest.raises(ValueError, match="2 response times but 1 block indices"):
        run_blocks(np.ones(2), [0.5], 2.0)
    for bad in (-1.0, float("nan"), float("inf"), None):
        with pytest.raises(ValueError, match="load window"):
            run_blocks(np.ones(1), [0.5], bad)


def test_metric_names_are_the_summary_columns():
    assert metric_names() == [
        "rps",
        "p50_ms",
        "p90_ms",
        "p95_ms",
        "p99_ms",
        "p99_9_ms",
        "slow_1p_share",
        "slow_2p_share",
        "slow_3p_share",
    ]
    assert percentile_name(99.9) == "p99_9" and percentile_name(50) == "p50"


def test_the_seed_comes_from_the_condition_and_the_base_seed():
    rng = np.random.default_rng(3)
    runs = [run_blocks(rng.uniform(0.001, 0.2, 500), rng.uniform(0, 5, 500), 5.0)]
    a = condition_intervals("go_cpu1", runs, 100.0, resamples=300)
    assert condition_intervals("go_cpu1", runs, 100.0, resamples=300, base_seed=0) == a
    assert (
        condition_intervals("go_cpu1", runs, 100.0, resamples=300, base_seed=1).intervals
        != a.intervals
    )


def test_nearest_ranks_of_few_and_of_an_odd_count_of_responses():
    one = condition_intervals(
        "one", [run_blocks(np.array([0.003]), [0.5], 1.0)], 100.0, resamples=20
    )
    assert one.point["p50_ms"] == pytest.approx(3.0) and one.intervals[
        "p99_ms"
    ].lo == pytest.approx(3.0)
    assert one.point["slow_1p_share"] == 0.0 and one.intervals["slow_1p_share"].hi == 0.0
    two = condition_intervals(
        "two", [run_blocks(np.array([0.001, 0.002]), [0.5, 0.5], 1.0)], 100.0, resamples=20
    )
    assert two.point["p50_ms"] == pytest.approx(1.0)  # ceil(0.5 x 2) = the 1st
    # 50 % of 1001 is rank 500.5, so the 501st: 501 ms.
    odd = condition_intervals(
        "odd",
        [run_blocks(np.arange(1, 1002) / 1000.0, np.full(1001, 0.5), 1.0)],
        2000.0,
        resamples=20,
    )
    assert odd.point["p50_ms"] == pytest.approx(501.0)


def test_a_resample_of_empty_blocks_has_no_latency_and_leaves_the_interval_alone():
    # Block 0 has 100 responses at 1 ms and one at 9 ms; blocks 1-3 none. About (3/4)^4 = 32 % of the
    # resamples draw only empty blocks: they have no P50, so every P50 of the interval is 1 ms.
    run = run_blocks(np.r_[np.full(100, 0.001), 0.009], np.full(101, 0.5), 4.0)
    found = condition_intervals("sparse", [run], 100.0, resamples=400)
    assert (found.intervals["p50_ms"].lo, found.intervals["p50_ms"].hi) == pytest.approx((1.0, 1.0))
    assert found.intervals["rps"].lo == 0.0  # ... but they are a rate of 0


def test_other_percentiles_and_periods_name_their_own_columns():
    run = run_blocks(np.r_[np.full(8, 0.002), 0.150, 0.450], np.linspace(0.1, 1.9, 10), 2.0)
    found = condition_intervals(
        "other", [run], 100.0, resamples=50, percentiles=(50.0,), slow_periods=(1, 4)
    )
    assert list(found.point) == ["rps", "p50_ms", "slow_1p_share", "slow_4p_share"]
    assert (found.point["slow_1p_share"], found.point["slow_4p_share"]) == pytest.approx((0.2, 0.1))


def test_blocks_of_another_length_and_a_run_of_no_block():
    from sidecar_bench.intervals import RunBlocks

    blocks = run_blocks(np.ones(3), [0.2, 0.7, 1.9], 2.25, block_s=0.5)
    assert list(blocks.block_s) == pytest.approx([0.5, 0.5, 0.5, 0.5, 0.25]) and list(
        blocks.block
    ) == [0, 1, 3]
    with pytest.raises(
        ValueError, match=r"^a run needs at least one block \(load window of 0 s\?\)$"
    ):
        RunBlocks(np.zeros(0), np.zeros(0, dtype="int64"), np.zeros(0))

"""Statistics from raw samples."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

import aggregate_runs
from sidecar_bench import record, reference, stats
from sidecar_bench.conditions import Condition
from sidecar_bench.record import METADATA_KEY as META_KEY
from sidecar_bench.runfile import RunFileError
from sidecar_bench.stats import (
    CONDITION_COLUMNS,
    SUMMARY_COLUMNS,
    latency_stats,
    nearest_rank,
    summarise_conditions,
    summarise_run,
    summarise_runs,
)
from sidecar_bench.synthetic import run_path, write_run

REFERENCE = Path(__file__).resolve().parents[1] / "workflow" / "reference" / "article-results.csv"


def test_nearest_rank_percentiles_of_one_to_ten_ms():
    stats = latency_stats(np.arange(1, 11) / 1000)  # 1..10 ms, given in seconds
    assert stats["p50_ms"] == pytest.approx(5)  # ceil(0.50 * 10) = 5th smallest
    assert stats["p90_ms"] == pytest.approx(9)
    assert stats["p95_ms"] == pytest.approx(10)  # ceil(9.5) = 10th
    assert stats["p99_ms"] == pytest.approx(10)
    assert stats["p99_9_ms"] == pytest.approx(10)
    assert stats["max_ms"] == pytest.approx(10)
    assert stats["mean_ms"] == pytest.approx(5.5)


def test_nearest_rank_does_not_round_up_a_whole_rank():
    values = np.arange(1, 1001, dtype=float)
    # 99.9 % of 1000 is exactly rank 999, not 1000 (floating point would give 999.0000000000001).
    assert nearest_rank(values, 99.9) == 999
    assert nearest_rank(values, 99) == 990
    assert nearest_rank(values, 50) == 500
    assert np.isnan(nearest_rank(np.array([]), 50))


def test_percentiles_are_observed_samples_not_interpolated():
    # Two modes: 90 fast responses and 10 that waited one CFS period.
    samples = np.r_[np.full(90, 0.002), np.full(10, 0.098)]
    stats = latency_stats(samples)
    assert stats["p90_ms"] == pytest.approx(2.0)
    assert stats["p95_ms"] == pytest.approx(98.0)


def test_summary_row_from_hand_made_run(tmp_path):
    condition = Condition("go", 0.25, 2048, 3, 5)
    times = [0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.100, 0.0005, 0.0007]
    codes = [200] * 8 + [500, 503]
    path = write_run(
        tmp_path / f"{condition.id}.parquet",
        condition,
        times,
        codes,
        wall_s=2.0,
        meta_overrides={
            "requests": {"failed": 3},
            "cgroup": {
                "nr_periods": 20,
                "nr_throttled": 5,
                "throttled_s": 0.5,
                "usage_s": 0.4,
                "period_us": 100000,
                "quota_us": 25000,
            },
            "processes": [
                {"role": "app", "target_pct": None, "cpu_s": 0.2},
                {"role": "proxy", "target_pct": 5.0, "cpu_s": 0.1},
                {"role": "agent", "target_pct": 5.0, "cpu_s": 0.12},
                {"role": "log_router", "target_pct": 5.0, "cpu_s": 0.08},
            ],
        },
    )
    row = summarise_run(path)
    assert row["condition_id"] == "go_cpu0.25_mem2048_sc3_load05"
    assert (row["app"], row["vcpu"], row["sidecar_count"], row["total_sidecar_load_pct"]) == (
        "go",
        0.25,
        3,
        15.0,
    )
    assert row["successful"] == 8 and row["non_2xx"] == 2 and row["failed"] == 3
    assert row["rps"] == pytest.approx(8 / 2.0)  # successful responses / window wall time
    assert row["errors"] == 5
    assert row["error_rate"] == pytest.approx(5 / 13)
    # Latency over the 8 successful responses only: 1..7 ms and 100 ms.
    assert row["p50_ms"] == pytest.approx(4)
    assert row["p99_ms"] == pytest.approx(100)
    assert row["max_ms"] == pytest.approx(100)
    assert row["mean_ms"] == pytest.approx((1 + 2 + 3 + 4 + 5 + 6 + 7 + 100) / 8)
    assert row["throttled_share"] == pytest.approx(0.25)
    assert row["throttled_s_per_s"] == pytest.approx(0.25)
    assert row["task_cpu_pct"] == pytest.approx(20)
    assert row["quota_cpu_pct"] == pytest.approx(25)
    assert row["period_ms"] == pytest.approx(100)
    assert row["app_cpu_pct"] == pytest.approx(10)
    assert row["proxy_cpu_pct"] == pytest.approx(5)
    assert row["agent_cpu_vs_target"] == pytest.approx(6 / 5)
    assert row["sidecars_cpu_pct"] == pytest.approx(15)
    assert row["sidecars_cpu_vs_target"] == pytest.approx(1.0)


def _cpu_run(tmp_path, cgroup_wall_s):
    condition = Condition("go", 0.25, 2048, 3, 5)
    return write_run(
        tmp_path / f"{condition.id}.parquet",
        condition,
        [0.001] * 8,
        wall_s=2.0,
        meta_overrides={
            "cgroup": {
                "nr_periods": 25,
                "nr_throttled": 5,
                "throttled_s": 0.5,
                "usage_s": 0.4,
                "period_us": 100000,
                "quota_us": 25000,
                "wall_s": cgroup_wall_s,
            },
            "processes": [
                {"role": "app", "target_pct": None, "cpu_s": 0.2},
                {"role": "proxy", "target_pct": 5.0, "cpu_s": 0.1},
                {"role": "agent", "target_pct": 5.0, "cpu_s": 0.12},
                {"role": "log_router", "target_pct": 5.0, "cpu_s": 0.08},
            ],
        },
    )


def test_cpu_rates_use_the_cgroup_window_and_rps_the_hey_window(tmp_path):
    # The runner's cgroup snapshots bracket hey's window: cgroup.wall_s 2.5 s > window.wall_s 2.0 s.
    row = summarise_run(_cpu_run(tmp_path, 2.5))
    assert row["wall_s"] == pytest.approx(2.0) and row["cgroup_wall_s"] == pytest.approx(2.5)
    assert row["rps"] == pytest.approx(8 / 2.0)  # 2xx responses / window.wall_s
    assert row["throttled_s_per_s"] == pytest.approx(0.5 / 2.5)
    assert row["task_cpu_pct"] == pytest.approx(100 * 0.4 / 2.5)
    assert row["app_cpu_pct"] == pytest.approx(100 * 0.2 / 2.5)
    assert row["proxy_cpu_pct"] == pytest.approx(100 * 0.1 / 2.5)
    assert row["agent_cpu_vs_target"] == pytest.approx((100 * 0.12 / 2.5) / 5)
    assert row["sidecars_cpu_pct"] == pytest.approx(100 * 0.3 / 2.5)
    assert row["sidecars_cpu_vs_target"] == pytest.approx((100 * 0.3 / 2.5) / 15)


def test_cpu_rates_fall_back_to_the_hey_window_without_cgroup_wall_s(tmp_path):
    path = _cpu_run(tmp_path, 2.5)
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[META_KEY])
    del meta["cgroup"]["wall_s"]
    pq.write_table(table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()}), path)
    row = summarise_run(path)
    assert row["cgroup_wall_s"] == pytest.approx(2.0)
    assert row["throttled_s_per_s"] == pytest.approx(0.5 / 2.0)
    assert row["task_cpu_pct"] == pytest.approx(100 * 0.4 / 2.0)


def test_environment_columns_are_the_run_file_formats_keys(tmp_path):
    c = Condition("go", 1, 2048, 0, 0)
    row = summarise_run(write_run(tmp_path / f"{c.id}.parquet", c, [0.01]))
    env_columns = [name for name in SUMMARY_COLUMNS if name.startswith("env_")]
    assert env_columns == [f"env_{key}" for key in record.ENVIRONMENT_KEYS]
    assert row["env_image_variant"] == "go" and row["env_loadgen_image_id"] == "sha256:loadgen"


def test_synthetic_run_files_follow_the_runners_format(tmp_path):
    c = Condition("next", 0.25, 1024, 2, 7)
    path = write_run(tmp_path / f"{c.id}.parquet", c, [0.01, 0.02], [200, 404])
    meta = record.read_run_meta(path)  # the runner's own validation
    rows = pq.read_table(path).replace_schema_metadata(None)
    record.RunRecord(rows, meta)  # schema, row count and ids as the runner writes them
    assert meta["requests"] == {**meta["requests"], "rows": 2, "non_2xx": 1}


def test_summary_has_one_row_per_condition_sorted(tmp_path):
    paths = []
    for load in (15, 5, 0):
        c = Condition("next", 0.5, 2048, 1, load)
        paths.append(write_run(tmp_path / f"{c.id}.parquet", c, [0.01] * 30, wall_s=3.0))
    summary = summarise_runs(paths)
    assert list(summary["total_sidecar_load_pct"]) == [0, 5, 15]
    assert list(summary["rps"]) == pytest.approx([10, 10, 10])


def test_same_condition_twice_is_an_error(tmp_path):
    c = Condition("go", 1, 2048, 0, 0)
    a = write_run(tmp_path / "a" / f"{c.id}.parquet", c, [0.01])
    b = write_run(tmp_path / "b" / f"{c.id}.parquet", c, [0.01])
    with pytest.raises(RunFileError, match="more than one run file") as refused:
        summarise_runs([a, b])
    assert f"[{str(a)!r}, {str(b)!r}]" in str(refused.value)  # each file, the first one too


def test_unknown_format_version_is_refused_with_the_file_named(tmp_path):
    c = Condition("go", 1, 2048, 0, 0)
    path = write_run(tmp_path / f"{c.id}.parquet", c, [0.01], meta_overrides={"format_version": 99})
    with pytest.raises(
        RunFileError, match=r"go_cpu1_mem2048_sc0_load00.parquet: .*format_version (is )?99"
    ):
        summarise_run(path)


def test_file_without_metadata_is_refused(tmp_path):
    c = Condition("go", 1, 2048, 0, 0)
    path = write_run(tmp_path / f"{c.id}.parquet", c, [0.01])
    table = pq.read_table(path).replace_schema_metadata({})
    pq.write_table(table, path)
    with pytest.raises(RunFileError, match="no '?sidecar_bench'? metadata"):
        summarise_run(path)


# --- load window, tail shares, steady state, repetitions ------------------------------------------------


def test_rps_divides_by_heys_load_window_and_cpu_by_the_cgroup_window(tmp_path):
    c = Condition("go", 0.5, 2048, 0, 0)
    path = write_run(
        tmp_path / "run.parquet",
        c,
        [0.001] * 30,
        wall_s=3.4,
        load_s=3.0,
        meta_overrides={"cgroup": {"usage_s": 1.0, "wall_s": 3.2}},
    )
    row = summarise_run(path)
    assert row["load_s"] == pytest.approx(3.0) and row["wall_s"] == pytest.approx(3.4)
    assert row["rps"] == pytest.approx(10.0)  # 30 / window.load_s, not / wall_s
    assert row["task_cpu_pct"] == pytest.approx(100 / 3.2)


def test_format_1_files_take_the_load_window_from_the_samples(tmp_path):
    c = Condition("go", 0.5, 2048, 0, 0)
    path = write_run(
        tmp_path / "run.parquet", c, [0.010, 0.020, 0.500], offset_s=[0.0, 1.0, 1.5], wall_s=2.5
    )
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[META_KEY])
    del meta["window"]["load_s"], meta["repeat"]
    meta["format_version"] = 1
    pq.write_table(table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()}), path)
    row = summarise_run(path)
    assert row["load_s"] == pytest.approx(2.0)  # last response: started at 1.5 s, took 0.5 s
    assert row["rps"] == pytest.approx(3 / 2.0)
    assert row["repeat"] == 1


def test_tail_shares_are_responses_slower_than_whole_periods(tmp_path):
    c = Condition("go", 0.25, 2048, 3, 5)
    times = [0.002] * 6 + [0.1, 0.1001, 0.25, 0.31]  # 100 ms exactly is not slower than one period
    row = summarise_run(write_run(tmp_path / "run.parquet", c, times, wall_s=5.0))
    assert row["slow_1p_share"] == pytest.approx(0.3)
    assert row["slow_2p_share"] == pytest.approx(0.2)
    assert row["slow_3p_share"] == pytest.approx(0.1)
    fifty = write_run(
        tmp_path / "t50.parquet",
        c,
        times,
        wall_s=5.0,
        meta_overrides={"cgroup": {"period_us": 50000}},
    )
    row = summarise_run(fifty)  # periods of 50 ms: > 50 ms and > 150 ms
    assert (row["slow_1p_share"], row["slow_3p_share"]) == pytest.approx((0.4, 0.2))


def test_thirds_and_steady_state_by_request_start(tmp_path):
    c = Condition("go", 1, 2048, 0, 0)
    # 9 s window: 1 s^-1 starts in the first 3 s, 2 s^-1 in the middle 3 s, 4 s^-1 in the last 3 s.
    offsets = np.r_[np.arange(3) + 0.5, np.arange(6) / 2 + 3.1, np.arange(12) / 4 + 6.1]
    times = np.r_[np.full(3, 0.001), np.full(6, 0.002), np.full(12, 0.003)]
    row = summarise_run(write_run(tmp_path / "run.parquet", c, times, offset_s=offsets, wall_s=9.0))
    assert row["first_third_rps"] == pytest.approx(1.0)
    assert row["last_third_rps"] == pytest.approx(4.0)
    # Second half: starts at >= 4.5 s: 3 of the middle third (4.6, 5.1, 5.6) + the last 12.
    assert row["steady_rps"] == pytest.approx(15 / 4.5)
    assert row["steady_p99_ms"] == pytest.approx(3.0)
    assert "not_steady" in row["flags"].split(",")


def test_a_condition_is_the_mean_of_its_runs_with_a_t_interval_over_them(tmp_path):
    c = Condition("next", 0.5, 2048, 1, 5)
    fast = write_run(
        run_path(tmp_path, c.id, 1),
        c,
        [0.002] * 90 + [0.150] * 10,
        wall_s=10.0,
        repeat=1,
        time_coverage=0.95,
    )
    slow = write_run(
        run_path(tmp_path, c.id, 2),
        c,
        [0.004] * 290 + [0.250] * 10,
        wall_s=10.0,
        repeat=2,
        time_coverage=0.95,
        meta_overrides={"requests": {"failed": 2}},
    )
    per_run = summarise_runs([slow, fast])
    assert list(per_run["repeat"]) == [1, 2]
    summary = summarise_conditions(per_run, resamples=200)
    assert list(summary.columns) == CONDITION_COLUMNS
    row = summary.iloc[0]
    assert row["repeats"] == 2 and row["interval_method"] == "t over runs"
    assert row["rps"] == pytest.approx(
        (10.0 + 30.0) / 2
    )  # the runs' RPS: 100 / 10 s and 300 / 10 s
    assert row["p50_ms"] == pytest.approx(3.0)  # mean of 2 and 4 ms
    assert row["p99_ms"] == pytest.approx(200.0)  # mean of 150 and 250 ms
    assert row["slow_1p_share"] == pytest.approx((0.10 + 10 / 300) / 2)
    assert row["mean_ms"] == pytest.approx(
        (0.002 * 90 + 0.15 * 10 + 0.004 * 290 + 0.25 * 10) / 400 * 1000
    )
    assert row["max_ms"] == pytest.approx(250.0)
    assert row["failed"] == 2 and row["successful"] == 400
    # Two runs: mean +- t(0.975, 1) x s / sqrt(2) = 20 +- 12.706 x 14.142 / 1.414, clipped at 0.
    assert row["rps_hi"] == pytest.approx(20 + 12.7062 * 10, rel=1e-4) and row["rps_lo"] == 0.0
    assert row["rps_cv"] == pytest.approx(np.std([10, 30], ddof=1) / 20)
    assert row["rps_runs"] == "10;30" and row["p99_ms_runs"] == "150;250"
    assert row["slow_2p_share_lo"] >= 0.0  # a share's interval stays inside [0, 1]
    assert "noisy" in row["flags"].split(",") and row["flag_noisy"] and not row["flag_cap_reached"]


def test_the_summary_of_three_runs_needs_only_their_rows(tmp_path):
    # Published sets keep runs_summary.csv, not the run files: the summary must come out the same from it.
    c = Condition("go", 0.25, 2048, 3, 5)
    runs = [
        write_run(
            run_path(tmp_path, c.id, r),
            c,
            [0.002] * (900 + 50 * r) + [0.105 + 0.04 * r] * 20,
            wall_s=10.0,
            repeat=r,
        )
        for r in (1, 2, 3)
    ]
    per_run = summarise_runs(runs)
    direct = summarise_conditions(per_run).iloc[0]
    csv = tmp_path / "runs_summary.csv"
    per_run.to_csv(csv, index=False, float_format="%.6g")
    for path in runs:
        path.unlink()
    import pandas as pd

    again = summarise_conditions(pd.read_csv(csv)).iloc[0]
    for column in (
        "rps",
        "rps_lo",
        "rps_hi",
        "rps_cv",
        "p99_ms",
        "p99_ms_lo",
        "p99_ms_hi",
        "slow_1p_share_hi",
        "steady_rps",
        "mean_ms",
        "interval_method",
        "flags",
    ):
        assert (
            again[column] == pytest.approx(direct[column], rel=1e-5)
            if isinstance(direct[column], float)
            else again[column] == direct[column]
        )


def test_one_run_keeps_the_within_run_interval_and_says_so(tmp_path):
    c = Condition("go", 1, 2048, 0, 0)
    rng = np.random.default_rng(3)
    path = write_run(
        run_path(tmp_path, c.id, 1), c, np.round(rng.lognormal(-6, 0.5, 2000), 4), wall_s=10.0
    )
    per_run = summarise_runs([path])
    row = summarise_conditions(per_run, resamples=200).iloc[0]
    assert row["interval_method"] == "within-run only"
    assert row["rps_lo"] < row["rps"] < row["rps_hi"] and np.isnan(row["rps_cv"])
    path.unlink()  # raw run gone: the value stays, the interval cannot be made
    gone = summarise_conditions(per_run, resamples=200).iloc[0]
    assert (
        gone["interval_method"] == "none" and gone["rps"] == row["rps"] and np.isnan(gone["rps_lo"])
    )


def test_the_same_repetition_twice_is_an_error(tmp_path):
    c = Condition("go", 1, 2048, 0, 0)
    a = write_run(run_path(tmp_path / "a", c.id, 2), c, [0.01], repeat=2)
    b = write_run(run_path(tmp_path / "b", c.id, 2), c, [0.01], repeat=2)
    with pytest.raises(RunFileError, match=r"\('go_cpu1_mem2048_sc0_load00', 2\)"):
        summarise_runs([a, b])


def test_aggregation_writes_one_row_per_run_and_one_per_condition(tmp_path):
    c, d = Condition("go", 1, 2048, 0, 0), Condition("go", 2, 2048, 0, 0)
    runs = [
        write_run(run_path(tmp_path / "runs", x.id, r), x, [0.001 * r] * 50, wall_s=5.0, repeat=r)
        for x in (c, d)
        for r in (1, 2, 3)
    ]
    out = {name: tmp_path / name for name in ("s.parquet", "s.csv", "r.parquet", "r.csv")}
    aggregate_runs.main(
        runs=runs,
        summary_parquet=out["s.parquet"],
        summary_csv=out["s.csv"],
        runs_parquet=out["r.parquet"],
        runs_csv=out["r.csv"],
    )
    import pandas as pd

    per_run, summary = (
        pd.read_parquet(out["r.parquet"]),
        pd.read_csv(out["s.csv"], keep_default_na=False),
    )
    assert len(per_run) == 6 and list(per_run["repeat"]) == [1, 2, 3, 1, 2, 3]
    assert list(summary["condition_id"]) == [c.id, d.id] and list(summary["repeats"]) == [3, 3]
    assert list(summary["p50_ms"]) == pytest.approx([2.0, 2.0])  # 1, 2, 3 ms pooled
    assert "host_bound" in summary["flags"][1].split(",")  # 2 vCPU on the 2-CPU synthetic host


def test_host_and_load_generator_cpu(tmp_path):
    c = Condition("go", 0.5, 2048, 0, 0)
    row = summarise_run(
        write_run(
            tmp_path / "a.parquet",
            c,
            [0.001] * 10,
            wall_s=4.0,
            meta_overrides={
                "cgroup": {"wall_s": 4.0},
                "host": {"cpus": 2, "busy_s": 6.0, "total_s": 8.0},
                "loadgen": {"cpu_s": 1.0},
            },
        )
    )
    assert row["host_busy_pct"] == pytest.approx(75.0) and row["loadgen_cpu_pct"] == pytest.approx(
        25.0
    )
    # An engine that hides the counters records null: unknown, not zero.
    hidden = summarise_run(
        write_run(
            tmp_path / "b.parquet", c, [0.001] * 10, meta_overrides={"host": None, "loadgen": None}
        )
    )
    assert np.isnan(hidden["host_busy_pct"]) and np.isnan(hidden["loadgen_cpu_pct"])


def test_repetitions_under_different_load_settings_are_not_pooled(tmp_path):
    c = Condition("go", 1, 2048, 0, 0)
    runs = [
        write_run(run_path(tmp_path, c.id, r), c, [0.001] * 10, wall_s=wall, repeat=r)
        for r, wall in ((1, 10.0), (2, 20.0))
    ]
    with pytest.raises(RunFileError, match="go_cpu1_mem2048_sc0_load00: .*different duration_s"):
        summarise_conditions(summarise_runs(runs))


def _drift_run(tmp_path, name, ramp, sliver_s, seed):
    """10 s of Poisson starts at 500/s (steady) or rising linearly so that the last third is 20 % faster
    than the first (ramp), then a drain sliver in which hey starts nothing."""
    rng = np.random.default_rng(seed)
    # Rate a + b t with (a + 8.5 b) / (a + 1.5 b) = 1.2: the thirds' mean rates differ by a fifth.
    a, b = 500.0, (0.2 * 500.0 / 6.7 if ramp else 0.0)
    per_second = rng.poisson(a + b * (np.arange(10) + 0.5))
    offsets = np.concatenate([s + np.sort(rng.uniform(0, 1, n)) for s, n in enumerate(per_second)])
    times = np.full(len(offsets), 0.004)
    c = Condition("next", 0.5, 2048, 0, 0)
    return summarise_run(
        write_run(
            tmp_path / f"{name}.parquet",
            c,
            times,
            offset_s=offsets,
            wall_s=10.0 + sliver_s,
            load_s=10.0 + sliver_s,
        )
    )


@pytest.mark.parametrize("sliver_s", [0.002, 0.05, 0.3, 0.9])
def test_the_drift_flag_fires_on_a_ramp_and_not_on_a_steady_run_whatever_the_drain(
    tmp_path, sliver_s
):
    steady = _drift_run(tmp_path, "steady", False, sliver_s, seed=1)
    ramp = _drift_run(tmp_path, "ramp", True, sliver_s, seed=2)
    assert "not_steady" in ramp["flags"].split(",")
    assert "not_steady" not in steady["flags"].split(",")
    # Rates over whole seconds only: the drain sliver neither empties nor inflates a third or the steady rate.
    assert steady["last_third_rps"] == pytest.approx(500, rel=0.1)
    assert steady["steady_rps"] == pytest.approx(500, rel=0.05)
    assert (
        steady["thirds_diff_se_rps"] < 40
    )  # per-second Poisson noise at 500/s over 3 s a third: about 18
    assert ramp["last_third_rps"] / ramp["first_third_rps"] == pytest.approx(1.2, abs=0.06)


def test_a_baseline_over_itself_is_exactly_one():
    from sidecar_bench.stats import condition_ratio

    base = {
        "condition_id": "go_cpu0.25_mem2048_sc3_load00",
        "rps": 1000.0,
        "rps_runs": "900;1000;1100",
    }
    same = condition_ratio(base, dict(base))
    assert (same.value, same.lo, same.hi) == (1.0, 1.0, 1.0)
    other = condition_ratio({**base, "condition_id": "go_cpu0.25_mem2048_sc3_load05"}, base)
    assert (
        other.lo < 1.0 < other.hi
    )  # two conditions with the same runs still differ by their noise


def _starts_per_second(tmp_path, name, counts, load_s):
    """A run whose second i has counts[i] requests started in it (1 ms each)."""
    offsets = np.concatenate([s + np.linspace(0.1, 0.9, n) for s, n in enumerate(counts)])
    c = Condition("go", 1, 2048, 0, 0)
    return summarise_run(
        write_run(
            tmp_path / f"{name}.parquet",
            c,
            np.full(len(offsets), 0.001),
            offset_s=offsets,
            wall_s=load_s,
            load_s=load_s,
        )
    )


def test_the_thirds_standard_error_is_that_of_two_means_of_per_second_counts(tmp_path):
    # 6 s: thirds of 2 s. First 8 and 12 starts (sample variance 8, its mean's 8 / 2), last 20 and 20 (0):
    # the difference's standard error is sqrt(4 + 0) = 2.
    row = _starts_per_second(tmp_path, "six", [8, 12, 5, 5, 20, 20], 6.0)
    assert (row["first_third_rps"], row["last_third_rps"]) == (10.0, 20.0)
    assert row["thirds_diff_se_rps"] == pytest.approx(2.0)
    # Second half, 3 s to 6 s: 5 + 20 + 20 starts.
    assert row["steady_rps"] == pytest.approx(45 / 3)
    # 3 s: thirds of one second, Poisson: the counts are their own variances, sqrt(4 + 9).
    row = _starts_per_second(tmp_path, "three", [4, 6, 9], 3.0)
    assert (row["first_third_rps"], row["last_third_rps"]) == (4.0, 9.0)
    assert row["thirds_diff_se_rps"] == pytest.approx(np.sqrt(13))


def test_a_window_under_three_seconds_has_no_thirds_and_under_one_a_steady_half_of_itself(tmp_path):
    row = _starts_per_second(tmp_path, "two", [4, 6], 2.0)
    assert np.isnan(row["first_third_rps"]) and np.isnan(row["thirds_diff_se_rps"])
    assert row["steady_rps"] == pytest.approx(6 / 1.0)
    c = Condition("go", 1, 2048, 0, 0)
    short = summarise_run(
        write_run(
            tmp_path / "short.parquet",
            c,
            np.full(5, 0.001),
            offset_s=[0.1, 0.2, 0.5, 0.6, 0.7],
            wall_s=0.8,
            load_s=0.8,
        )
    )
    assert short["steady_rps"] == pytest.approx(3 / 0.4)  # starts in 0.4-0.8 s
    assert "not_steady" not in short["flags"].split(",")


def test_a_condition_pools_its_runs_marks_peaks_and_counts(tmp_path):
    c = Condition("go", 0.5, 2048, 0, 0)
    # repeat, responses (1 ms apart in latency by run), cap reached, OOM-killed, restarts, peak MiB, host
    specs = [
        (1, 100, 0.002, False, False, 0, 100, "a"),
        (2, 300, 0.004, True, False, 1, 300, "b"),
        (3, 200, 0.003, False, True, 2, 200, "a"),
    ]
    paths = [
        write_run(
            run_path(tmp_path, c.id, r),
            c,
            [latency] * n,
            wall_s=10.0,
            repeat=r,
            meta_overrides={
                "requests": {"cap_reached": cap},
                "container": {
                    "oom_killed": oom,
                    "restart_count": restarts,
                    "peak_memory_bytes": peak * 2**20,
                },
                "environment": {"hostname": host},
            },
        )
        for r, n, latency, cap, oom, restarts, peak, host in specs
    ]
    per_run = summarise_runs(paths)
    row = summarise_conditions(per_run).iloc[0]
    assert row["cap_reached"] and row["oom_killed"]  # any run's
    assert {"cap_reached", "oom_or_restart"} <= set(row["flags"].split(","))
    assert row["restart_count"] == 3 and row["peak_memory_mb"] == pytest.approx(
        300
    )  # summed; the highest
    assert row["max_ms"] == pytest.approx(4.0)
    assert row["mean_ms"] == pytest.approx(
        (100 * 2 + 300 * 4 + 200 * 3) / 600
    )  # over all responses
    assert (row["successful"], row["responses"], row["errors"]) == (600, 600, 0)
    assert row["rps"] == pytest.approx(20.0) and row["rps_runs"] == "10;30;20"
    for column in ("steady_rps", "first_third_rps", "time_coverage", "task_cpu_pct"):
        assert row[column] == pytest.approx(per_run[column].mean())  # the runs' mean
    assert row["env_hostname"] == "a;b"
    # None of the runs capped or killed: neither is marked.
    calm = summarise_conditions(
        per_run.assign(cap_reached=False, oom_killed=False, restart_count=0, flags="")
    ).iloc[0]
    assert (
        not calm["cap_reached"] and not calm["oom_killed"] and "oom_or_restart" not in calm["flags"]
    )
    # As a CSV reads them back: "True" / "False".
    text = summarise_conditions(per_run.assign(cap_reached=["False", "True", "False"])).iloc[0]
    assert text["cap_reached"]


# --- the helpers behind the summaries: documented values, edge by edge -------------------------------------


def test_a_successful_response_has_a_2xx_status(tmp_path):
    c = Condition("go", 1, 2048, 0, 0)
    row = summarise_run(
        write_run(
            tmp_path / "codes.parquet", c, [0.001] * 6, [199, 200, 250, 299, 300, 404], wall_s=1.0
        )
    )
    assert (row["successful"], row["non_2xx"], row["errors"]) == (3, 3, 3)
    assert row["error_rate"] == pytest.approx(0.5) and row["rps"] == pytest.approx(3.0)


def test_the_repeat_comes_from_the_file_then_its_name():
    from sidecar_bench.stats import repeat_of

    assert repeat_of("runs/x/rep3.parquet", {}) == 3
    assert repeat_of("runs/x/rep12.parquet", {"repeat": None}) == 12
    assert repeat_of("runs/x/rep3.parquet", {"repeat": 2}) == 2
    assert repeat_of("runs/x/run.parquet", {}) == 1 and repeat_of("runs/x/prep3.parquet", {}) == 1


def test_whole_seconds_of_a_window():
    from sidecar_bench.stats import whole_seconds

    assert whole_seconds(9.9999999) == 10 and whole_seconds(9.99) == 9 and whole_seconds(1.0) == 1
    assert [whole_seconds(v) for v in (0.5, 0.0, -3.0, float("nan"), float("inf"))] == [
        0,
        0,
        0,
        0,
        0,
    ]


def test_per_run_values_are_written_and_read_back():
    from sidecar_bench.stats import join_run_values, run_values

    assert join_run_values([512.34567, float("nan"), 1e7, 30.0]) == "512.346;nan;1e+07;30"
    assert list(run_values("10;nan;30")[[0, 2]]) == [10.0, 30.0] and np.isnan(
        run_values("10;nan;30")[1]
    )
    for empty in (None, float("nan"), "", "  "):
        assert len(run_values(empty)) == 0
    with pytest.raises(ValueError, match=r"per-run values '1;x': not numbers joined by ';'"):
        run_values("1;x")


def test_ratios_of_summary_rows_use_their_runs_or_their_one_value():
    from sidecar_bench.stats import condition_ratio, ratio_to_published

    # Summaries from before the per-run columns: the value alone, no interval.
    old = condition_ratio({"condition_id": "a", "rps": 10.0}, {"condition_id": "b", "rps": 20.0})
    assert old.value == pytest.approx(0.5) and old.method == "single"
    p99 = condition_ratio(
        {"condition_id": "a", "p99_ms": 300.0, "p99_ms_runs": "200;450"},
        {"condition_id": "b", "p99_ms": 100.0, "p99_ms_runs": "100;100"},
        metric="p99_ms",
    )
    assert (
        p99.value == pytest.approx(3.0) and p99.method == "welch-log"
    )  # geometric mean 300 over 100
    same = condition_ratio(
        {"condition_id": "a", "rps_runs": "1;2;3"}, {"condition_id": "a", "rps_runs": "1;2;3"}
    )
    assert same.n == 3
    published = ratio_to_published({"rps": 10.0, "rps_runs": "10;40"}, 10)
    assert published.value == pytest.approx(2.0) and published.n == 2  # geometric mean 20 over 10


def test_a_share_interval_stays_within_0_and_1(tmp_path):
    c = Condition("go", 1, 2048, 0, 0)
    runs = summarise_runs(
        [
            write_run(run_path(tmp_path, c.id, r), c, [0.001] * 10, wall_s=1.0, repeat=r)
            for r in (1, 2)
        ]
    )
    row = summarise_conditions(runs.assign(slow_1p_share=[0.9, 1.0], p99_ms=[1.0, 100.0])).iloc[0]
    assert row["slow_1p_share_hi"] == 1.0 and 0.0 < row["slow_1p_share_lo"] < 0.95
    assert row["p99_ms_lo"] == 0.0 and row["p99_ms_hi"] > 100.0


def test_run_columns_from_the_files_limits_and_counters(tmp_path):
    c = Condition("go", 0.5, 1024, 3, 5)
    plain = summarise_run(write_run(tmp_path / "a.parquet", c, [0.001] * 10, wall_s=2.0))
    assert (plain["memory_limit_mb"], plain["swap_limit_mb"], plain["limit_vcpu"]) == (
        1024.0,
        0.0,
        0.5,
    )
    assert (plain["host_cpus"], plain["exit_code"], plain["cgroup_source"]) == (2.0, 0, "cgroup-v1")
    assert plain["peak_memory_mb"] == pytest.approx(150.0) and plain["window_start"].startswith(
        "2025-01-01"
    )
    assert np.isnan(plain["nr_bursts"]) and plain["load_model"] == "closed"
    row = summarise_run(
        write_run(
            tmp_path / "b.parquet",
            c,
            [0.001] * 10,
            wall_s=2.0,
            meta_overrides={
                "cgroup": {"period_us": None, "nr_bursts": 3, "burst_s": 0.25},
                "container": {"peak_memory_bytes": None},
                "processes": [
                    {"role": "app", "target_pct": None, "cpu_s": 0.2},
                    {"role": "proxy", "target_pct": 5.0, "cpu_s": 0.1},
                    {"role": "agent", "target_pct": None, "cpu_s": 0.1},
                ],
            },
        )
    )
    assert row["period_ms"] == 100.0 and np.isnan(
        row["quota_cpu_pct"]
    )  # no period: 100 ms, quota unknown
    assert (row["nr_bursts"], row["burst_s"]) == (3.0, 0.25) and np.isnan(row["peak_memory_mb"])
    # Sidecars: used CPU of both that ran, target of the one that has one; no log router, no value.
    assert row["sidecars_cpu_pct"] == pytest.approx(10.0) and row[
        "sidecars_target_pct"
    ] == pytest.approx(5.0)
    assert np.isnan(row["log_router_cpu_pct"]) and np.isnan(row["agent_cpu_vs_target"])


def test_the_open_loop_columns_of_a_run_count_what_was_never_answered_as_slow():
    from sidecar_bench.stats import open_loop_columns

    meta = {
        "condition": {"load_model": "open"},
        "open_loop": {
            "rate_per_s": 100.0,
            "rate_share": 0.5,
            "arrivals": "poisson",
            "capacity": {"rps_mean": 200.0},
            "summary": {"scheduled": 1000, "late": 5, "dropped": 5, "sent_rate_per_s": 95.0},
        },
    }
    ok = np.r_[np.full(8, 0.05), np.full(2, 0.15)]
    out = open_loop_columns(meta, ok, 100.0, failed=3)
    assert (out["load_model"], out["arrivals"]) == ("open", "poisson")
    assert (out["rate_share"], out["capacity_rps"]) == (0.5, 200.0)
    assert out["not_on_time_share"] == pytest.approx(0.01) and out["rate_ratio"] == pytest.approx(
        0.95
    )
    # 10 responses, 5 dropped, 3 failed: 2 slower than one period + 8 never answered, of 18.
    assert out["slow_1p_share"] == pytest.approx(10 / 18) and out["slow_2p_share"] == pytest.approx(
        8 / 18
    )
    assert (out["late"], out["dropped"], out["sent_rate_per_s"], out["rate_per_s"]) == (
        5.0,
        5.0,
        95.0,
        100.0,
    )
    no_drops = {"open_loop": {"summary": {"scheduled": 100, "late": 0}}}
    out = open_loop_columns(no_drops, ok, 100.0, failed=0)
    assert out["load_model"] == "open" and out["slow_1p_share"] == pytest.approx(0.2)
    assert np.isnan(open_loop_columns(no_drops, np.zeros(0), 100.0, failed=0)["slow_1p_share"])
    closed = open_loop_columns({"load": {"load_model": None}}, ok, 100.0, failed=0)
    assert (
        closed["load_model"] == "closed" and closed["arrivals"] is None and np.isnan(closed["late"])
    )
    assert "slow_1p_share" not in closed


def test_a_condition_sums_and_averages_its_open_loop_columns(tmp_path):
    c = Condition("go", 1, 2048, 0, 0)
    runs = summarise_runs(
        [
            write_run(run_path(tmp_path, c.id, r), c, [0.001] * 10, wall_s=1.0, repeat=r)
            for r in (1, 2)
        ]
    )
    row = summarise_conditions(
        runs.assign(
            load_model="open",
            arrivals="poisson",
            late=[1.0, 2.0],
            dropped=[0.0, 4.0],
            rate_ratio=[0.9, 1.0],
        )
    ).iloc[0]
    assert (row["load_model"], row["arrivals"], row["late"], row["dropped"]) == (
        "open",
        "poisson",
        3.0,
        4.0,
    )
    assert row["rate_ratio"] == pytest.approx(0.95) and np.isnan(row["capacity_rps"])
    closed = summarise_conditions(runs.assign(load_model=None)).iloc[0]
    assert closed["load_model"] == "closed" and np.isnan(closed["late"])


def test_environments_lists_each_distinct_one_once():
    import pandas as pd
    from sidecar_bench.stats import environments

    summary = pd.DataFrame(
        {
            "env_hostname": ["a", "a", "b", None, "c"],
            "env_kernel": ["6.1", "6.1", "6.1", None, None],
            "rps": [1, 2, 3, 4, 5],
        }
    )
    assert environments(summary).values.tolist() == [["a", "6.1"], ["b", "6.1"], ["c", "?"]]
    assert environments(summary.iloc[:0]).empty and environments(summary[["rps"]]).empty


def test_open_loop_columns_read_numbers_as_pandas_does():
    cases = [[None, 1.0, 2], ["1.5", "x", None], [], ["", "3"], [True, 1.0], ["1_000", " 2 "]]
    for values in cases:
        array = np.array(values, dtype=object)
        expected = pd.to_numeric(pd.Series(array, dtype=object), errors="coerce").to_numpy(
            "float64"
        )
        assert np.array_equal(stats._numbers(array), expected, equal_nan=True), values


# --- a condition's row, column by column: what each pooled value is made of ---------------------------


def _two_runs(tmp_path, **columns):
    c = Condition("go", 1, 2048, 0, 0)
    paths = [
        write_run(run_path(tmp_path, c.id, r), c, [0.001] * 10, wall_s=1.0, repeat=r)
        for r in (1, 2)
    ]
    return paths, summarise_runs(paths).assign(**columns)


def test_a_conditions_error_rate_is_its_errors_over_all_its_requests(tmp_path):
    _, runs = _two_runs(tmp_path, successful=[90, 60], errors=[10, 40])
    row = summarise_conditions(runs).iloc[0]
    assert (row["successful"], row["errors"]) == (150, 50)
    assert row["error_rate"] == pytest.approx(50 / 200)


def test_a_conditions_cgroup_source_names_each_of_its_runs_sources(tmp_path):
    _, runs = _two_runs(tmp_path, cgroup_source=["cgroup-v2", "cgroup-v1"])
    assert summarise_conditions(runs).iloc[0]["cgroup_source"] == "cgroup-v1;cgroup-v2"


def test_a_run_without_successful_responses_weighs_nothing_in_the_mean_latency(tmp_path):
    _, runs = _two_runs(tmp_path, mean_ms=[10.0, np.nan], successful=[100, 0])
    assert summarise_conditions(runs).iloc[0]["mean_ms"] == pytest.approx(10.0)


def test_two_or_more_runs_read_no_run_file(tmp_path):
    # The docstring's promise: with 2 or more runs the condition is made of its rows alone.
    paths, runs = _two_runs(tmp_path)
    for path in paths:
        Path(path).write_text("not a parquet file")
    row = summarise_conditions(runs).iloc[0]
    assert row["interval_method"] == stats.T_OVER_RUNS and row["repeats"] == 2


def test_runs_under_different_load_settings_are_refused_naming_each_file_and_its_value(tmp_path):
    paths, runs = _two_runs(tmp_path, concurrency=[50, 100])
    with pytest.raises(RunFileError) as refused:
        summarise_conditions(runs)
    assert (
        f"different concurrency ({paths[0]}: 50, {paths[1]}: 100); "
        "rerun them with one load setting" in str(refused.value)
    )


def test_the_runs_p99s_reach_the_bimodal_flag(tmp_path):
    # One run's P99 under 1.5 periods, the other's above: the P99 lives in two modes.
    _, runs = _two_runs(tmp_path, p99_ms=[120.0, 180.0], period_ms=100.0)
    assert "bimodal" in summarise_conditions(runs).iloc[0]["flags"].split(",")
    _, runs = _two_runs(tmp_path / "one-mode", p99_ms=[120.0, 140.0], period_ms=100.0)
    assert "bimodal" not in summarise_conditions(runs).iloc[0]["flags"].split(",")


def test_a_per_run_frame_without_optional_columns_or_with_text_numbers_summarises(tmp_path):
    # An older runs_summary.csv: no open-loop or environment columns, a number that is not one.
    _, runs = _two_runs(tmp_path)
    optional = [c for c in (*stats.ENV_COLUMNS, *stats.OPEN_COLUMNS) if c != "load_model"]
    older = runs.drop(columns=optional).astype({"max_ms": object})
    older.loc[1, "max_ms"] = "n/a"
    row = summarise_conditions(older).iloc[0]
    assert row["env_hostname"] is None and row["max_ms"] == pytest.approx(runs.loc[0, "max_ms"])


def test_the_per_run_frame_has_the_documented_columns_in_order(tmp_path):
    _, runs = _two_runs(tmp_path)
    assert list(runs.columns) == list(stats.SUMMARY_COLUMNS)
    assert runs.index.tolist() == [0, 1] and runs["repeat"].tolist() == [1, 2]


def test_environments_tell_apart_every_recorded_key():
    base = dict(
        env_hostname="h",
        env_cpu_model="EPYC",
        env_kernel="6.1",
        env_docker_version="20.10",
        env_engine_id="E1",
        env_hey_version="0.1.4",
    )
    for key in base:
        summary = pd.DataFrame([base, {**base, key: "other"}])
        assert len(stats.environments(summary)) == 2, key


def test_the_thirds_count_only_starts_inside_the_windows_whole_seconds():
    # 9 whole seconds: starts before 0, at 9.0 s and later are no second of the window; a window whose
    # last seconds saw no start still has them, as zeros.
    inside = [0.1, 0.2, 1.5, 2.5, 3.5]
    outside = [-0.5, 9.0, 9.4, 12.0]
    found = stats._thirds(np.array(inside + outside), 9.4)
    assert found["first_third_rps"] == pytest.approx(4 / 3)
    assert found["last_third_rps"] == 0.0
    assert set(stats.thirds_of_counts([5, 5])) == {
        "first_third_rps",
        "last_third_rps",
        "thirds_diff_se_rps",
    }
    assert all(math.isnan(v) for v in stats.thirds_of_counts([5, 5]).values())


def test_the_steady_half_is_the_second_half_of_the_whole_seconds_start_inclusive():
    offsets = np.array([0.49, 0.5, 0.99, 1.0, 1.2])
    rt = np.arange(len(offsets), dtype=float)
    # 1.5 s of load: one whole second, its second half is [0.5, 1.0).
    inside, half = stats._steady(rt, offsets, 1.5)
    assert half == 0.5 and inside.tolist() == [1.0, 2.0]
    # 2 whole seconds: [1.0, 2.0).
    inside, half = stats._steady(rt, offsets, 2.0)
    assert half == 1.0 and inside.tolist() == [3.0, 4.0]


def test_a_failed_open_loop_run_keeps_its_load_model(tmp_path):
    c = Condition("go", 1, 2048, 0, 0)
    failure = {
        "condition": {**c.as_dict(), "load_model": "open"},
        "repeat": 1,
        "failure": "app exited",
        "load": {},
    }
    assert stats.failed_run_row(tmp_path / "rep1.parquet", failure)["load_model"] == "open"
    closed = {**failure, "condition": c.as_dict()}
    assert stats.failed_run_row(tmp_path / "rep1.parquet", closed)["load_model"] == "closed"


def test_ratios_of_rows_without_ids_values_or_mapping_are_still_ratios():
    # Two rows with no condition_id are two conditions, not one over itself.
    a, b = {"rps": 20.0, "rps_runs": "18;22"}, {"rps": 10.0, "rps_runs": "9;11"}
    assert stats.condition_ratio(a, b).value == pytest.approx(2.0, rel=0.01)
    same = stats.condition_ratio({**a, "condition_id": "x"}, {**a, "condition_id": "x"})
    assert same.method == "same condition" and same.n == 2
    # A row without the metric, or that is not a row at all: no number, no error.
    assert math.isnan(stats.ratio_to_published({"rps_runs": ""}, 10).value)
    assert math.isnan(stats.ratio_to_published(object(), 10).value)
    assert math.isnan(stats.condition_ratio(object(), b).value)


def _one_run(tmp_path, latencies_s, wall_s=2.0):
    c = Condition("go", 1, 2048, 0, 0)
    path = write_run(run_path(tmp_path, c.id, 1), c, latencies_s, wall_s=wall_s, repeat=1)
    return summarise_runs([path])


def test_one_runs_interval_uses_the_conditions_period_or_the_default(tmp_path):
    runs = _one_run(tmp_path, [0.06] * 200)  # every response 60 ms
    half = summarise_conditions(runs.assign(period_ms=50.0)).iloc[0]
    assert (half["slow_1p_share_lo"], half["slow_1p_share_hi"]) == (1.0, 1.0)
    unknown = summarise_conditions(runs.assign(period_ms=math.nan)).iloc[0]
    assert (unknown["slow_1p_share_lo"], unknown["slow_1p_share_hi"]) == (0.0, 0.0)


def test_one_runs_interval_follows_the_resamples_and_the_seed_asked_for(tmp_path):
    rng = np.random.default_rng(7)
    runs = _one_run(tmp_path, list(rng.lognormal(-6, 0.5, 4000)), wall_s=30.0)  # 30 blocks

    def p99_interval(**kwargs):
        row = summarise_conditions(runs, **kwargs).iloc[0]
        return row["p99_ms_lo"], row["p99_ms_hi"]

    assert p99_interval() == p99_interval(base_seed=0)  # the default seed is 0: reproducible
    assert p99_interval(resamples=20) != p99_interval()
    assert p99_interval(base_seed=1) != p99_interval()


# --- a run's row, field by field from its file -----------------------------------------------------------


def _rewrite_meta(path, edit):
    """The run file at path with its metadata changed by edit(meta) in place."""
    table = pq.read_table(path)
    meta = json.loads(table.schema.metadata[META_KEY])
    edit(meta)
    pq.write_table(table.replace_schema_metadata({META_KEY: json.dumps(meta)}), path)
    return path


def test_a_runs_row_carries_its_files_limits_throttling_targets_and_load(tmp_path):
    c = Condition("go", 0.5, 1024, 2, 10)
    latencies = list(np.linspace(0.001, 0.2, 400))  # the slowest last, in the steady half
    path = write_run(
        tmp_path / "a.parquet",
        c,
        latencies,
        wall_s=4.0,
        meta_overrides={
            "limits": {"swap_limit_bytes": 256 * 2**20},
            "cgroup": {"nr_periods": 123, "nr_throttled": 45, "throttled_s": 6.5},
            "load": {"concurrency": 7, "warmup_s": 3},
            "environment": {"kernel": None},
        },
    )
    row = summarise_run(path)
    assert row["swap_limit_mb"] == 256.0
    assert (row["nr_periods"], row["nr_throttled"], row["throttled_s"]) == (123, 45, 6.5)
    assert (row["concurrency"], row["warmup_s"]) == (7, 3.0)
    assert row["proxy_target_pct"] == 10 and row["sidecars_target_pct"] == 20
    assert row["env_kernel"] is None and row["failure"] is None and row["status"] == "measured"
    assert row["steady_p99_ms"] < row["max_ms"]  # the 99th percentile, not the slowest


def test_a_file_without_the_optional_keys_reads_with_their_documented_defaults(tmp_path):
    # A format 1 file (before window.load_s and requests.cap_reached were required) with only what it
    # must hold: the rest reads as documented, not as an error or a guess.
    c = Condition("go", 1, 2048, 0, 0)

    def strip(meta):
        meta["format_version"] = 1
        del meta["window"]["load_s"], meta["repeat"], meta["requests"]["cap_reached"]
        meta["window"]["wall_s"] = None
        for section in ("limits", "host", "loadgen"):
            meta[section] = None
        meta["load"]["duration_s"] = 2.0

    path = _rewrite_meta(write_run(tmp_path / "rep1.parquet", c, [0.001] * 10, wall_s=2.0), strip)
    row = summarise_run(path)
    assert row["cap_reached"] is False
    assert row["wall_s"] == 2.0  # the load's duration without a window
    assert math.isnan(row["swap_limit_mb"]) and math.isnan(row["host_cpus"])

    def no_duration(meta):
        meta["load"] = None

    _rewrite_meta(path, no_duration)
    with pytest.raises(RunFileError, match="neither window.wall_s nor load.duration_s is set"):
        summarise_run(path)


def test_a_runs_knobs_label_names_each_knob_set_and_a_bad_one_names_the_condition():
    plain = Condition("go", 1, 2048, 0, 0).as_dict()
    assert stats.knobs_label(plain) == "" and stats.knobs_label({"id": "x"}) == ""
    tuned = Condition("go", 1, 2048, 0, 0, cpu_period_ms=5).as_dict()
    assert stats.knobs_label(tuned) == "period 5 ms"
    with pytest.raises(RunFileError, match="run condition 'bad': its knobs do not read back"):
        stats.knobs_label({**tuned, "id": "bad", "cpu_period_ms": "five"})


def test_the_load_model_comes_from_the_condition_or_the_load_section():
    for meta in ({"condition": {"load_model": "open"}}, {"load": {"load_model": "open"}}):
        assert stats.open_loop_columns(meta, np.array([]), 100.0, 0)["load_model"] == "open"
    assert stats.open_loop_columns({}, np.array([]), 100.0, 0)["load_model"] == "closed"


def test_an_open_runs_response_of_exactly_one_period_is_not_slower_than_it():
    meta = {"open_loop": {"rate_per_s": 10, "summary": {"scheduled": 3, "late": 0, "dropped": 0}}}
    found = stats.open_loop_columns(meta, np.array([0.05, 0.1, 0.1001]), 100.0, 0)
    assert found["slow_1p_share"] == pytest.approx(1 / 3)


def test_p0_is_the_smallest_observed_value():
    assert stats.nearest_rank(np.array([1.0, 2.0, 3.0]), 0.0) == 1.0


def test_a_runs_row_names_its_knobs_prefers_the_window_and_reads_an_open_loop_section(tmp_path):
    c = Condition("go", 1, 2048, 0, 0, cpu_period_ms=5)
    path = write_run(
        tmp_path / "a.parquet",
        c,
        [0.001] * 8 + [0.2] * 2,
        wall_s=2.0,
        meta_overrides={
            "load": {"duration_s": 10},  # the window's own length (2 s) is what was measured
            "open_loop": {
                "arrivals": "poisson",
                "rate_per_s": 10,
                "summary": {"scheduled": 20, "late": 0, "dropped": 10, "sent_rate_per_s": 10},
            },
            "processes": [],  # no process read back: no CPU figure, no error
        },
    )
    row = summarise_run(path)
    assert row["knobs"] == "period 5 ms" and row["wall_s"] == 2.0
    # 10 answered (2 slower than 5 ms periods) and 10 never answered, each slower than any threshold.
    assert row["load_model"] == "open" and row["slow_1p_share"] == pytest.approx(12 / 20)
    assert math.isnan(row["app_cpu_pct"])

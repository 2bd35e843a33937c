"""Per-second series of one run, by completion second."""

import math

import pytest

from sidecar_bench.conditions import Condition
from sidecar_bench.synthetic import write_run
from sidecar_bench.timeseries import COLUMNS, per_second


def test_seconds_count_responses_by_completion_time(tmp_path):
    c = Condition("go", 0.25, 2048, 3, 5)
    # Starts and latencies: 0.2 + 0.9 ends at 1.1 s (second 1), not second 0.
    offsets = [0.1, 0.2, 0.3, 1.5, 2.0]
    times = [0.001, 0.900, 0.002, 0.150, 0.400]
    path = write_run(
        tmp_path / "run.parquet",
        c,
        times,
        [200, 200, 200, 200, 500],
        offset_s=offsets,
        wall_s=2.6,
        load_s=2.5,
    )
    series = per_second(path)
    assert list(series.columns) == COLUMNS
    assert list(series["second"]) == [0, 1]  # whole seconds only: 2.0-2.5 s is the drain
    assert list(series["responses"]) == [2, 2]  # the 500 (ends 2.4 s) is not a successful response
    assert list(series["rps"]) == pytest.approx([2.0, 2.0])
    assert series["p50_ms"][0] == pytest.approx(1.0) and series["p99_ms"][0] == pytest.approx(2.0)
    assert series["p99_ms"][1] == pytest.approx(900.0)
    assert series["slow_1p_share"][1] == pytest.approx(1.0)  # 150 and 900 ms > 100 ms


def test_the_drain_after_the_last_whole_second_is_no_spike(tmp_path):
    # Ten requests in flight when the load stops end within 5 ms: over that sliver they
    # would read as 2000 responses/s.
    c = Condition("next", 0.5, 2048, 0, 0)
    offsets = [0.1, 0.5, 1.2, 1.9] + [1.99] * 10
    times = [0.3] * 4 + [0.015] * 10
    path = write_run(
        tmp_path / "run.parquet", c, times, offset_s=offsets, wall_s=2.01, load_s=2.005
    )
    series = per_second(path)
    assert list(series["rps"]) == pytest.approx([2.0, 1.0])
    assert series["rps"].max() < 10


def test_an_empty_second_has_no_latency(tmp_path):
    c = Condition("go", 1, 2048, 0, 0)
    path = write_run(
        tmp_path / "run.parquet", c, [0.001] * 2, offset_s=[0.1, 2.5], wall_s=3.0, load_s=3.0
    )
    series = per_second(path)
    assert list(series["responses"]) == [1, 0, 1]
    assert math.isnan(series["p50_ms"][1])

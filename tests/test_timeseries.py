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
    path = write_run(tmp_path / "run.parquet", c, times, [200, 200, 200, 200, 500], offset_s=offsets,
                     wall_s=2.6, load_s=2.5)
    series = per_second(path)
    assert list(series.columns) == COLUMNS
    assert list(series["second"]) == [0, 1, 2]
    assert list(series["responses"]) == [2, 2, 0]  # the 500 (ends 2.4 s) is not a successful response
    assert list(series["rps"][:2]) == pytest.approx([2.0, 2.0])
    assert series["rps"][2] == pytest.approx(0.0)  # the last second is 0.5 s long and empty
    assert series["p50_ms"][0] == pytest.approx(1.0) and series["p99_ms"][0] == pytest.approx(2.0)
    assert series["p99_ms"][1] == pytest.approx(900.0)
    assert series["slow_1p_share"][1] == pytest.approx(1.0)  # 150 and 900 ms > 100 ms
    assert math.isnan(series["p50_ms"][2])


def test_partial_last_second_divides_by_its_length(tmp_path):
    c = Condition("go", 1, 2048, 0, 0)
    path = write_run(tmp_path / "run.parquet", c, [0.001] * 4, offset_s=[0.1, 0.5, 1.1, 1.2], wall_s=1.5, load_s=1.5)
    series = per_second(path)
    assert list(series["rps"]) == pytest.approx([2.0, 2 / 0.5])

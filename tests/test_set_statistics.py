"""scripts/dev/set_statistics.py: the held-out check holds 95 % of runs from one normal condition, and the
report reads a set's files."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

import set_statistics


def runs_frame(values: np.ndarray, app: str = "go") -> pd.DataFrame:
    rows = []
    for c, runs in enumerate(values):
        for r, v in enumerate(runs, 1):
            rows.append(
                {
                    "condition_id": f"{app}_c{c}",
                    "repeat": r,
                    "app": app,
                    "rps": v,
                    "p99_ms": 100 + v / 100,
                    "slow_1p_share": 0.01,
                    "status": "measured",
                    "flags": "not_steady" if c % 10 == 0 and r == 1 else "",
                }
            )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("reps", (3, 5))
def test_a_held_out_run_lies_inside_its_prediction_interval_95_percent_of_the_time(reps):
    rng = np.random.default_rng([reps, 7])
    runs = runs_frame(rng.normal(500, 35, size=(1000, reps)))
    inside, tried = set_statistics.held_out(runs, "rps")
    assert tried == 1000 * reps
    assert 0.93 <= inside / tried <= 0.97


def test_conditions_with_fewer_than_three_runs_are_not_tried():
    runs = runs_frame(np.array([[500.0, 510.0]]))
    assert set_statistics.held_out(runs, "rps") == (0, 0)


def test_the_report_reads_a_sets_files(tmp_path, capsys):
    rng = np.random.default_rng(9)
    runs = runs_frame(rng.normal(500, 20, size=(20, 3)))
    runs.to_csv(tmp_path / "runs_summary.csv", index=False)
    pd.DataFrame(
        {
            "condition_id": [f"go_c{c}" for c in range(20)],
            "app": "go",
            "rps_cv": 0.05,
            "flags": ["host_bound,noisy" if c < 4 else "" for c in range(20)],
        }
    ).to_csv(tmp_path / "summary.csv", index=False)
    assert set_statistics.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "- RPS: " in out and "of 60" in out
    assert "- go: 2 of 60 (3.3 %)" in out  # the drift flag on runs
    assert "- go: 5.0 % [IQR 5.0-5.0]" in out
    assert re.search(r"\|\s*go\s*\|\s*20\s*\|\s*4\s*\|", out), out  # cells, any mark


def test_a_folder_that_is_no_set_is_refused(tmp_path):
    with pytest.raises(SystemExit):
        set_statistics.main([str(tmp_path)])

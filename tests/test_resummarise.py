"""A published set's statistics recomputed from its runs_summary.csv, its run files gone."""

import json

import numpy as np
import pandas as pd
import pytest

import resummarise
from sidecar_bench.conditions import Condition
from sidecar_bench.stats import summarise_conditions, summarise_runs
from sidecar_bench.synthetic import run_path, write_run


def published_set(tmp_path, reps=3):
    """A set dir as publish.py leaves it: per-run rows written while the run files existed, then deleted."""
    rng = np.random.default_rng(7)
    runs = []
    for condition in (Condition("go", 0.25, 2048, 3, 0), Condition("go", 0.25, 2048, 3, 5)):
        for r in range(1, reps + 1):
            slow = 0.105 if r == 1 else 0.188  # run 1's P99 waited one period, the others' two
            times = np.r_[np.round(rng.lognormal(-6, 0.4, 3000), 4), np.full(40, slow)]
            runs.append(
                write_run(
                    run_path(tmp_path / "runs", condition.id, r),
                    condition,
                    times,
                    wall_s=10.0,
                    repeat=r,
                )
            )
    per_run = summarise_runs(runs)
    expected = summarise_conditions(per_run)
    per_run.loc[0, "flags"] = "sidecar_under"  # a code an older publication carried
    set_dir = tmp_path / "set"
    set_dir.mkdir()
    per_run.to_csv(set_dir / "runs_summary.csv", index=False, float_format="%.6g")
    (set_dir / "provenance.json").write_text(json.dumps({"preset": "x", "flagged_conditions": 2}))
    (set_dir / "PROVENANCE.md").write_text(
        "# How `x` was measured\n\n- flagged conditions: 2 of 2 (sidecar_under 2)\n"
    )
    for path in runs:
        path.unlink()
    return set_dir, expected


def test_a_set_is_summarised_again_from_its_per_run_rows(tmp_path):
    set_dir, expected = published_set(tmp_path)
    found = resummarise.resummarise(set_dir)
    summary = pd.read_csv(set_dir / "summary.csv").set_index("condition_id")
    expected = expected.set_index("condition_id")
    for column in ("rps", "rps_lo", "rps_hi", "rps_cv", "p99_ms", "p99_ms_hi", "slow_1p_share_lo"):
        assert summary[column].to_numpy() == pytest.approx(expected[column].to_numpy(), rel=1e-4)
    assert (summary["interval_method"] == "t over runs").all() and "app_cost_ms" in summary.columns
    assert all("bimodal" in f for f in summary["flags"])  # 105 ms against 188 ms across the runs
    assert not summary["flags"].str.contains("sidecar_under").any()
    assert found["by_flag"]["bimodal"] == 2
    assert (
        "sidecar_under"
        not in pd.read_csv(set_dir / "runs_summary.csv")["flags"].fillna("").str.cat()
    )
    assert (set_dir / "tables" / "load_sweep_go.md").exists() and (
        set_dir / "charts" / "rps_retained.svg"
    ).exists()
    info = json.loads((set_dir / "provenance.json").read_text())
    assert (
        info["flagged_by_flag"]["bimodal"] == 2
        and info["statistics"]["recomputed_from"] == "runs_summary.csv"
    )
    provenance = (set_dir / "PROVENANCE.md").read_text()
    assert (
        "sidecar_under" not in provenance
        and "statistics recomputed from runs_summary.csv" in provenance
    )
    assert (set_dir / "report.html").exists()


def test_a_set_with_single_runs_is_refused_with_the_conditions_named(tmp_path, capsys):
    set_dir, _ = published_set(tmp_path, reps=1)
    assert resummarise.main([str(set_dir)]) == 2
    err = capsys.readouterr().err
    assert "go_cpu0.25_mem2048_sc3_load00" in err and "one measured run" in err
    assert resummarise.main([str(tmp_path / "nowhere")]) == 2
    assert "runs_summary.csv: no such file" in capsys.readouterr().err

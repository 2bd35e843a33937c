"""The calibration and the model through the real Snakefile: a small real run on the real engine, then
`snakemake -n` shows that the calibration reruns when the app changes and not when the sidecar does."""

import contextlib
import os

import pandas as pd
import pytest
import yaml

from workflow_helpers import ROOT, copy_project, dry_run, snakemake, write_config

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ALONE = "go_cpu0.5_mem512_sc0_load00"
SIDECAR = "go_cpu0.5_mem512_sc1_load10"
NO_LIMIT_VCPU = os.cpu_count() or 1
NO_LIMIT = f"go_cpu{NO_LIMIT_VCPU:g}_mem512_sc0_load00"


def small_config():
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["sets"]["cal_go"] = dict(
        app=["go"], vcpu=[0.5], memory_mb=[512], sidecar_count=[0, 1], sidecar_load_pct=[10]
    )
    config["presets"]["cal"] = {
        "sets": ["cal_go"],
        "repeats": 1,
        "load": {"duration_s": 2, "warmup_s": 0},
    }
    config["preset"] = "cal"
    config["calibration"] = {"no_limit_vcpu": NO_LIMIT_VCPU}
    return config


# The model and what it reads (the runs, their summary, the calibration); the article's tables and charts, which
# no test here reads, are test_e2e.py's.
TARGET = "model"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The small preset with its calibration and model, run for real once."""
    project = copy_project(tmp_path_factory.mktemp("calibration") / "project")
    write_config(project, **small_config())
    done = snakemake(project, TARGET, timeout=1200)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return project


@contextlib.contextmanager
def edited(path, text):
    before = path.read_text()
    path.write_text(before + text)
    try:
        yield
    finally:
        path.write_text(before)


def test_calibration_measures_only_the_no_limit_level_and_reuses_the_matrix(finished):
    results = finished / "results" / "cal"
    assert sorted(
        p.parent.name for p in (results / "calibration" / "runs").glob("*/rep*.parquet")
    ) == [NO_LIMIT]
    table = pd.read_csv(results / "calibration" / "calibration.csv")
    assert list(table["condition_id"]) == [ALONE, NO_LIMIT]
    assert list(table["source"]) == ["matrix", "calibration run"]
    assert list(table["no_limit"]) == [False, True]
    assert (table["app_cost_ms"] > 0).all()
    assert "cost per request" in (results / "calibration" / "calibration.md").read_text()
    summary = pd.read_parquet(results / "summary.parquet")
    for column in ("app_cost_ms", "app_cost_ms_lo", "app_cost_ms_hi", "other_cpu_pct"):
        assert column in summary.columns
    assert "app_cost_ms" in pd.read_parquet(results / "runs_summary.parquet").columns
    assert "app_cost_ms" in pd.read_csv(results / "calibration" / "runs_summary.csv").columns


def test_model_tables_and_charts_are_made_from_the_real_run(finished):
    model_dir = finished / "results" / "cal" / "model"
    for name in (
        "decomposition",
        "decomposition_share",
        "decomposition_misses",
        "forward",
        "forward_share",
        "forward_misses",
        "article_costs",
    ):
        assert (model_dir / "tables" / f"{name}.md").exists()
        assert (model_dir / "tables" / f"{name}.csv").exists()
    for name in (
        "decomposition_vs_measured",
        "forward_ratio_vs_load",
        "sweeps_vs_delivered_load",
        "retained_vs_sidecar_share",
    ):
        for ext in ("png", "svg", "html"):
            assert (model_dir / "charts" / f"{name}.{ext}").stat().st_size > 0
    model = pd.read_csv(model_dir / "tables" / "decomposition.csv").set_index("condition_id")
    assert set(model.index) == {ALONE, SIDECAR}
    assert model.loc[SIDECAR, "predicted_rps"] > 0
    assert model.loc[SIDECAR, "sidecars_cpu_pct"] > 0
    assert model.loc[SIDECAR, "available_cpu_pct"] < 50


def test_unchanged_project_has_nothing_to_do(finished):
    assert dry_run(finished, TARGET).nothing_to_do


def test_editing_the_sidecar_does_not_rerun_the_calibration(finished):
    with edited(finished / "task-image" / "sidecar" / "sidecar.py", "\n# edited\n"):
        plan = dry_run(finished, TARGET)
    assert plan.returncode == 0, plan.output
    assert plan.jobs["run_calibration"] == 0
    assert plan.jobs["run_condition"] == 1 and plan.conditions == {SIDECAR}
    assert plan.jobs["model_report"] == 1


def test_editing_the_app_reruns_the_calibration(finished):
    with edited(finished / "task-image" / "app-go" / "main.go", "\n// edited\n"):
        plan = dry_run(finished, TARGET)
    assert plan.returncode == 0, plan.output
    assert plan.jobs["run_calibration"] == 1
    assert plan.jobs["run_condition"] == 2
    assert plan.conditions == {ALONE, SIDECAR, NO_LIMIT}
    assert plan.jobs["calibrate"] == 1

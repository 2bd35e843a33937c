"""End to end on the real engine: a tiny open-loop preset measured by the real Snakefile
(closed loop for the capacity, then the open loop at a share of it), what its run files
record, and which changes rerun which runs (dry-run plans after the real run)."""

import json

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from workflow_helpers import ROOT, copy_project, dry_run, snakemake, write_config

pytestmark = [pytest.mark.docker, pytest.mark.slow]

CAPACITY = "go_cpu0.5_mem512_sc1_load00"
CLOSED = {CAPACITY, "go_cpu0.5_mem512_sc1_load10"}
OPEN = {"go_cpu0.5_mem512_sc1_load00_open50", "go_cpu0.5_mem512_sc1_load10_open50"}
REPEATS = 2
DURATION_S = 2


def open_config(share=0.5):
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["sets"]["tiny_open"] = dict(
        app=["go"],
        vcpu=[0.5],
        memory_mb=[512],
        sidecar_count=[1],
        sidecar_load_pct=[0, 10],
        load_model=["closed", "open"],
        rate_share=[share],
    )
    config["presets"]["tiny-open"] = {
        "sets": ["tiny_open"],
        "repeats": REPEATS,
        "load": {"duration_s": DURATION_S, "warmup_s": 1},
    }
    config["preset"] = "tiny-open"
    return config


# What the tests read (the open-loop comparison, the article's tables, through them the runs, their capacity and the
# summary) and the calibration, which no change of a capacity may rerun; not the article's charts nor the model.
TARGETS = ("results/tiny-open/tables", "results/tiny-open/openloop", "calibration")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    project = copy_project(tmp_path_factory.mktemp("openloop") / "project")
    write_config(project, **open_config())
    done = snakemake(project, *TARGETS, timeout=1500)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return project


def results(project):
    return project / "results" / "tiny-open"


def metas(project):
    found = {}
    for path in sorted((results(project) / "runs").glob("*/rep*.parquet")):
        found[(path.parent.name, path.stem)] = json.loads(
            pq.read_schema(path).metadata[b"sidecar_bench"]
        )
    return found


def capacity_record(project):
    return json.loads((results(project) / "capacity" / f"{CAPACITY}.json").read_text())


def test_the_capacity_is_the_mean_rps_of_the_closed_runs_with_idle_sidecars(finished):
    record = capacity_record(finished)
    runs = pd.read_parquet(results(finished) / "runs_summary.parquet")
    closed = runs[runs["condition_id"] == CAPACITY]
    assert record["repeats"] == REPEATS
    assert record["rps_mean"] == pytest.approx(closed["rps"].mean())
    assert sorted(record["run_files"]) == sorted(closed["run_file"])


def test_open_runs_record_their_load_model_rate_and_its_source(finished):
    record = capacity_record(finished)
    found = metas(finished)
    assert {cid for cid, _ in found} == CLOSED | OPEN
    for (cid, rep), meta in found.items():
        if cid in CLOSED:
            assert meta["load"]["load_model"] == "closed" and "open_loop" not in meta
            assert meta["window"]["time_coverage"] > 0
            continue
        section = meta["open_loop"]
        assert meta["load"]["load_model"] == "open" == meta["condition"]["load_model"]
        assert section["rate_share"] == 0.5 and section["arrivals"] == "poisson"
        assert section["rate_per_s"] == round(0.5 * record["rps_mean"])
        assert section["capacity"] == record
        summary = section["summary"]
        assert summary["seed"] == int(rep.removeprefix("rep"))
        # Poisson arrivals over the window: within 5 standard deviations of rate x duration.
        expected = section["rate_per_s"] * DURATION_S
        assert abs(summary["scheduled"] - expected) < 5 * expected**0.5
        assert summary["responses"] == meta["requests"]["rows"]
        assert meta["window"]["time_coverage"] is None
        assert meta["loadgen"]["cpu_s"] > 0


def test_the_summary_and_the_comparison_set_open_cells_beside_closed_ones(finished):
    summary = pd.read_parquet(results(finished) / "summary.parquet")
    rows = summary.set_index("condition_id")
    assert set(rows.index) == CLOSED | OPEN
    assert set(rows.loc[sorted(OPEN), "load_model"]) == {"open"}
    assert set(rows.loc[sorted(CLOSED), "load_model"]) == {"closed"}
    assert (rows.loc[sorted(OPEN), "rate_ratio"] > 0.8).all()
    assert rows.loc[sorted(OPEN), "not_on_time_share"].notna().all()
    table = pd.read_csv(results(finished) / "openloop" / "open_vs_closed.csv")
    assert set(table["condition_id"]) == OPEN
    assert set(table["closed_condition_id"]) == CLOSED
    assert (
        table[["open_p99_ms", "closed_p99_ms", "open_p99_ms_lo", "closed_p99_ms_hi"]]
        .notna()
        .all()
        .all()
    )
    # The article's tables are the closed loop's: no open cell stands in for a closed one.
    assert "open50" not in " ".join(
        p.read_text() for p in (results(finished) / "tables").glob("*.csv")
    )


def test_unchanged_project_has_nothing_to_do(finished):
    plan = dry_run(finished, *TARGETS)
    assert plan.returncode == 0, plan.output
    assert plan.nothing_to_do, plan.output


def test_a_rewritten_capacity_with_the_same_rate_reruns_nothing(finished):
    path = results(finished) / "capacity" / f"{CAPACITY}.json"
    before = path.read_text()
    record = json.loads(before)
    # Another capacity that rounds to the same rate at 50 %, and another run list.
    rate = round(0.5 * record["rps_mean"])
    record.update(rps_mean=(rate + 0.2) / 0.5, window_starts=[], run_files=[])
    try:
        path.write_text(json.dumps(record))
        plan = dry_run(finished, *TARGETS)
    finally:
        path.write_text(before)
    assert plan.returncode == 0, plan.output
    assert plan.jobs["run_condition"] == 0, plan.output


def test_a_changed_capacity_reruns_only_the_open_runs(finished):
    path = results(finished) / "capacity" / f"{CAPACITY}.json"
    before = path.read_text()
    record = json.loads(before)
    record["rps_mean"] *= 1.5
    try:
        path.write_text(json.dumps(record))
        plan = dry_run(finished, *TARGETS)
    finally:
        path.write_text(before)
    assert plan.returncode == 0, plan.output
    assert plan.conditions == OPEN, plan.output
    assert plan.jobs["run_condition"] == len(OPEN) * REPEATS
    assert plan.jobs["build_image"] == 0 and plan.jobs["run_calibration"] == 0
    assert "Params have changed" in plan.output


def test_a_new_share_runs_only_its_own_conditions(finished):
    write_config(finished, **open_config(share=0.6))
    try:
        plan = dry_run(finished, *TARGETS)
    finally:
        write_config(finished, **open_config())
    assert plan.returncode == 0, plan.output
    assert plan.conditions == {c.replace("open50", "open60") for c in OPEN}, plan.output
    assert plan.jobs["run_condition"] == len(OPEN) * REPEATS

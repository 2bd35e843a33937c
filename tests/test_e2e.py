"""End to end: the real Snakefile builds the real images and measures a small matrix
twice (repeats: 2) on the real Docker engine, then `snakemake -n` shows which
conditions and repetitions each kind of change reruns."""

import contextlib
import json
import os
import shutil
from pathlib import Path

import docker
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from workflow_helpers import ROOT, copy_project, dry_run, snakemake, write_config

pytestmark = [pytest.mark.docker, pytest.mark.slow]

GO_ALONE = "go_cpu0.5_mem512_sc0_load00"
GO_SIDECAR = "go_cpu0.5_mem512_sc1_load10"
NEXT_SIDECAR = "next_cpu1_mem512_sc1_load10"
ALL = {GO_ALONE, GO_SIDECAR, NEXT_SIDECAR}
REPEATS = 2
# The CPU-budget model's calibration (calibration.py): each app alone at its vCPU levels and with no limit
# (config calibration.no_limit_vcpu, null: this machine's CPU count); GO_ALONE is the matrix's own.
NO_LIMIT = f"{os.cpu_count() or 1:g}"
GO_CALIBRATION = {f"go_cpu{NO_LIMIT}_mem512_sc0_load00"}
NEXT_CALIBRATION = {"next_cpu1_mem512_sc0_load00", f"next_cpu{NO_LIMIT}_mem512_sc0_load00"}
CALIBRATION = GO_CALIBRATION | NEXT_CALIBRATION


def e2e_config(**load):
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["sets"]["e2e_go"] = dict(
        app=["go"], vcpu=[0.5], memory_mb=[512], sidecar_count=[0, 1], sidecar_load_pct=[10]
    )
    config["sets"]["e2e_next"] = dict(
        app=["next"], vcpu=[1], memory_mb=[512], sidecar_count=[1], sidecar_load_pct=[10]
    )
    # No warm-up: no test here reads it, and the default 5 s were a minute of the 12 runs (the calibration's too).
    # The workflow's runs warm up in test_proxy_docker.py and test_openloop_workflow.py.
    config["presets"]["e2e"] = {
        "sets": ["e2e_go", "e2e_next"],
        "repeats": REPEATS,
        "load": {"duration_s": 2, "warmup_s": 0, **load},
    }
    config["preset"] = "e2e"
    return config


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The e2e preset, run for real once; tests below only read or dry-run it."""
    project = copy_project(tmp_path_factory.mktemp("e2e") / "project")
    write_config(project, **e2e_config())
    before = {c.id for c in project_containers()}
    done = snakemake(project, timeout=1500)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return project, done.stdout + done.stderr, before


def project_containers():
    client = docker.from_env()
    return client.containers.list(
        all=True, filters={"label": "org.sidecar-bench.project=sidecar-bench"}
    )


def run_metas(project):
    """{(condition id, repetition): run file metadata} of every run file of the e2e preset."""
    metas = {}
    for path in sorted((project / "results" / "e2e" / "runs").glob("*/rep*.parquet")):
        metas[(path.parent.name, int(path.stem.removeprefix("rep")))] = json.loads(
            pq.read_schema(path).metadata[b"sidecar_bench"]
        )
    return metas


def test_every_repetition_of_every_condition_has_a_run_file_with_raw_requests(finished):
    project, _, _ = finished
    runs = sorted((project / "results" / "e2e" / "runs").glob("*/rep*.parquet"))
    assert {(p.parent.name, p.stem) for p in runs} == {(c, f"rep{r}") for c in ALL for r in (1, 2)}
    for path in runs:
        table = pq.read_table(path)
        assert table.num_rows > 0
        meta = json.loads(table.schema.metadata[b"sidecar_bench"])
        assert meta["condition"]["id"] == path.parent.name
        assert meta["repeat"] == int(path.stem.removeprefix("rep"))
        assert meta["load"]["duration_s"] == 2
        assert meta["cgroup"]["nr_periods"] > 0
        assert len(meta["processes"]) == 1 + meta["condition"]["sidecar_count"]
    # All runs read as one dataset.
    frame = pd.read_parquet(project / "results" / "e2e" / "runs")
    assert set(frame["condition_id"]) == ALL


def test_repetitions_are_interleaved(finished):
    # Every condition's first repetition is measured before any second one.
    project, _, _ = finished
    starts = {key: meta["window"]["start"] for key, meta in run_metas(project).items()}
    first = max(start for (_, rep), start in starts.items() if rep == 1)
    second = min(start for (_, rep), start in starts.items() if rep == 2)
    assert first < second, starts


def test_no_container_is_left_behind(finished):
    # Only this run's: a run killed outright elsewhere (kill -9) can leave its own, and other workflows on
    # the engine start theirs meanwhile.
    _, _, before = finished
    ours = ALL | CALIBRATION
    assert [
        c.name
        for c in project_containers()
        if c.id not in before and c.labels.get("org.sidecar-bench.condition") in ours
    ] == []


def test_summary_tables_and_charts_are_made(finished):
    project, _, _ = finished
    results = project / "results" / "e2e"
    summary = pd.read_parquet(results / "summary.parquet")
    assert sorted(summary["condition_id"]) == sorted(ALL)
    assert (summary["repeats"] == REPEATS).all()
    assert (summary["rps"] > 0).all()
    for metric in ("rps", "p50_ms", "p99_ms", "slow_1p_share"):
        assert (summary[f"{metric}_lo"] <= summary[metric]).all(), metric
        assert (summary[metric] <= summary[f"{metric}_hi"]).all(), metric
    assert "flags" in summary.columns
    runs = pd.read_parquet(results / "runs_summary.parquet")
    assert len(runs) == len(ALL) * REPEATS
    assert (results / "summary.csv").exists()
    tables = list((results / "tables").glob("*.md"))
    assert tables, "no Markdown tables"
    charts = {p.suffix for p in (results / "charts").iterdir()}
    assert {".png", ".svg", ".html"} <= charts


def test_progress_is_shown_while_the_matrix_runs(finished):
    _, output, _ = finished
    assert "sidecar-bench: start" in output
    assert "[6/6 done, ETA 0m]" in output


def run_logs(project):
    """Every run's log of the e2e preset (one per condition and repetition)."""
    logs = sorted((project / "results" / "e2e" / "logs" / "run_condition").glob("*/rep*.log"))
    assert len(logs) == len(ALL) * REPEATS
    return logs


def test_the_runs_work_under_the_workflows_lease(finished):
    """Snakemake's onstart takes the engine's lease once (engine_hold.py); no run takes one of its own."""
    project, output, _ = finished
    assert "sidecar-bench: holding engine local's lease for this workflow's jobs" in output
    for log in run_logs(project):
        assert "engine local: under the workflow's lease" in log.read_text(), log


def test_the_runs_are_forked_from_the_workflows_job_server(finished):
    """Snakemake's onstart starts the job server (jobserver.py): each run's process is forked from it, with
    the library imported once."""
    project, output, _ = finished
    assert "sidecar-bench: run and analysis jobs start from the job server" in output
    for log in run_logs(project):
        assert "forked by the workflow's job server" in log.read_text(), log
    # The analysis jobs too (jobserver.delegate_script): the server had their imports done as well.
    logs = project / "results" / "e2e" / "logs"
    for name in ("aggregate_runs", "make_tables", "plot_charts", "calibrate", "model_report"):
        first = (logs / f"{name}.log").read_text().splitlines()[0]
        assert first.endswith("forked by the workflow's job server (jobserver.py)"), (name, first)


def test_a_runs_log_holds_what_every_library_module_says(finished):
    """The run's log takes the library's own logger: the containers' starts (measurement.py) are in it too."""
    project, _, _ = finished
    for log in run_logs(project):
        text = log.read_text()
        assert "started task container" in text and "started load generator" in text, log


def test_the_report_is_one_self_contained_file(finished):
    project, _, _ = finished
    report = project / "results" / "e2e" / "report.html"
    done = snakemake(project, "--report", str(report))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    text = report.read_text()
    for name in ("latency_rps_vs_load", "rps_grid_go", "summary.csv"):
        assert name in text, name


def test_unchanged_project_has_nothing_to_do(finished):
    project, _, _ = finished
    plan = dry_run(project)
    assert plan.returncode == 0, plan.output
    assert plan.nothing_to_do, plan.output


@contextlib.contextmanager
def edited(path, text):
    """Append text to a file for the duration of a with-block."""
    before = path.read_text()
    path.write_text(before + text)
    try:
        yield
    finally:
        path.write_text(before)


def test_editing_the_sidecar_reruns_only_sidecar_conditions(finished):
    project, _, _ = finished
    with edited(project / "task-image" / "sidecar" / "sidecar.py", "\n# edited\n"):
        plan = dry_run(project)
    assert plan.conditions == {GO_SIDECAR, NEXT_SIDECAR}
    assert plan.jobs["run_condition"] == 2 * REPEATS
    assert plan.variants == {"go-sidecar", "next-sidecar"}
    assert plan.jobs["aggregate_runs"] == 1


def test_touching_a_file_without_changing_it_reruns_nothing(finished):
    project, _, _ = finished
    sidecar = project / "task-image" / "sidecar" / "sidecar.py"
    sidecar.write_text(sidecar.read_text())
    assert dry_run(project).nothing_to_do


def test_a_new_version_of_the_runner_script_remeasures_nothing(finished):
    # The code rerun trigger is off (profiles/default): upgrading the tool must not
    # re-measure hours of runs; what changes a run's result are its params and images.
    project, _, _ = finished
    with edited(project / "workflow" / "scripts" / "run_condition.py", "\n# edited\n"):
        plan = dry_run(project)
    assert plan.returncode == 0, plan.output
    assert plan.conditions == set(), plan.output


def test_editing_the_go_app_reruns_only_go_conditions(finished):
    project, _, _ = finished
    with edited(project / "task-image" / "app-go" / "main.go", "\n// edited\n"):
        plan = dry_run(project)
    assert plan.conditions == {GO_ALONE, GO_SIDECAR} | GO_CALIBRATION
    assert plan.jobs["run_calibration"] == len(GO_CALIBRATION) * REPEATS
    assert plan.variants == {"go", "go-sidecar"}


def test_changing_the_duration_reruns_every_condition(finished):
    project, _, _ = finished
    write_config(project, **e2e_config(duration_s=3))
    try:
        plan = dry_run(project)
    finally:
        write_config(project, **e2e_config())
    assert plan.conditions == ALL | CALIBRATION
    assert plan.jobs["build_image"] == 0
    assert "Params have changed" in plan.output


def test_raising_repeats_runs_only_the_new_repetitions(finished):
    project, _, _ = finished
    plan = dry_run(project, "--config", "repeats=3")
    assert plan.returncode == 0, plan.output
    assert plan.conditions == ALL | CALIBRATION
    assert plan.repeats == {3}
    assert plan.jobs["run_condition"] == len(ALL)
    assert plan.jobs["run_calibration"] == len(CALIBRATION)
    assert plan.jobs["build_image"] == 0


def test_lowering_repeats_only_reaggregates_and_keeps_the_files(finished):
    project, _, _ = finished
    plan = dry_run(project, "--config", "repeats=1")
    assert plan.jobs["run_condition"] == 0
    assert plan.jobs["aggregate_runs"] == 1
    assert len(list((project / "results" / "e2e" / "runs").glob("*/rep2.parquet"))) == len(ALL)


def test_adding_a_condition_runs_only_that_one(finished):
    project, _, _ = finished
    config = e2e_config()
    config["sets"]["e2e_go"]["sidecar_load_pct"] = [10, 20]
    write_config(project, **config)
    try:
        plan = dry_run(project)
    finally:
        write_config(project, **e2e_config())
    assert plan.conditions == {"go_cpu0.5_mem512_sc1_load20"}
    assert plan.jobs["run_condition"] == REPEATS
    assert plan.jobs["build_image"] == 0


def test_removing_a_condition_reruns_only_the_aggregates(finished):
    project, _, _ = finished
    config = e2e_config()
    config["presets"]["e2e"]["sets"] = ["e2e_go"]
    write_config(project, **config)
    try:
        plan = dry_run(project)
    finally:
        write_config(project, **e2e_config())
    assert plan.jobs["run_condition"] == 0
    assert plan.jobs["aggregate_runs"] == 1


def test_a_deleted_run_file_is_measured_again_and_only_it(finished, tmp_path):
    # The README's way to re-measure one run: delete its file. The summary and what follows are remade.
    project, _, _ = finished
    run = project / "results" / "e2e" / "runs" / GO_SIDECAR / "rep2.parquet"
    kept = tmp_path / "rep2.parquet"
    run.rename(kept)
    try:
        plan = dry_run(project)
    finally:
        kept.rename(run)
    assert plan.returncode == 0, plan.output
    assert plan.conditions == {GO_SIDECAR} and plan.repeats == {2}
    assert (
        plan.jobs["run_condition"] == 1
        and plan.jobs["run_calibration"] == 0
        and plan.jobs["build_image"] == 0
    )
    for rule in ("aggregate_runs", "make_tables", "plot_charts", "model_report"):
        assert plan.jobs[rule] == 1, rule


def test_an_analysis_rerun_starts_a_job_server_it_does_not_wait_for(finished, tmp_path):
    """No run to make and two analysis jobs (an edit of the charts' code): the workflow starts its job server
    without waiting for its imports (jobserver.worth_starting, start(wait=False)); the jobs run, forked once it
    listens or in their own processes before, and its stop reports nothing."""
    project, _, _ = finished
    copy = Path(shutil.copytree(project, tmp_path / "project", symlinks=True))
    with open(copy / "scripts" / "sidecar_bench" / "charts.py", "a") as charts:
        charts.write("\n# edited\n")
    done = snakemake(copy)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert "analysis jobs start from the job server once it has imported the library" in output
    assert "ended early" not in output and "run_condition" not in output, output[-6000:]
    for name in ("plot_charts", "model_report"):
        assert "Finished jobid" in output and f"rule {name}:" in output, output[-6000:]


def test_editing_the_charts_module_remakes_the_charts_and_measures_nothing(finished):
    project, _, _ = finished
    with edited(project / "scripts" / "sidecar_bench" / "charts.py", "\n# edited\n"):
        plan = dry_run(project)
    assert plan.returncode == 0, plan.output
    assert plan.conditions == set(), plan.output
    assert {rule for rule, n in plan.jobs.items() if n} == {"plot_charts", "model_report", "all"}, (
        plan.output
    )

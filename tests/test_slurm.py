"""The SLURM profile end to end, on a one-node SLURM cluster this module starts on this
machine (tests/slurm_cluster.py: munged, slurmctld, slurmd, all under a temporary directory,
stopped at the end also when a test fails).

The real Snakefile runs through `--workflow-profile slurm` (profiles/slurm) with the real
Docker engine. SLURM's own records show what happened: its job completion log (state,
node, CPUs allocated, start and end of every job) and the log SLURM wrote for each job
(`sbatch --output`), which names the rule and the file the job made.

The cluster has no accounting database, so the tests add the one setting the profile
names for that case (`--slurm-status-command squeue`), and check job states every 2 s
rather than after the executor's default 40 s and its back-off of 10 s more a check
(tests/slurm_snakemake.py). Skipped only where SLURM is missing and apt-get
cannot install it (not root, or not Debian/Ubuntu); `scripts/bench.sh test` installs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import docker
import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import as_from_a_terminal
from slurm_cluster import SlurmCluster, install_reason
from workflow_helpers import ROOT, SNAKEMAKE, copy_project, write_config

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PRESET = "slurm"
# A memory limit no other test uses: the conditions' ids (and their containers' labels)
# are this module's own, whoever else measures on the engine meanwhile.
MEMORY_MB = 640
CONDITIONS = {f"go_cpu0.5_mem{MEMORY_MB}_sc0_load00", f"go_cpu0.5_mem{MEMORY_MB}_sc1_load10"}
# Long enough that a measurement seen running is still running when the test presses Ctrl-C.
DURATION_S = 8
PROJECT_LABEL = "org.sidecar-bench.project=sidecar-bench"
# snakemake with the executor's status checks every 2 s, without its back-off (slurm_snakemake.py).
SLURM_SNAKEMAKE = (sys.executable, str(Path(__file__).with_name("slurm_snakemake.py")))
SUBMITTED = re.compile(
    r"Job \d+ has been submitted with SLURM jobid (\d+) \(log: (\S+?)\)\.?$", re.M
)


@pytest.fixture(scope="module")
def cluster():
    reason = install_reason()
    if reason:
        pytest.skip(reason)
    slurm = SlurmCluster().start()
    yield slurm
    slurm.stop()
    slurm.remove()


def slurm_config() -> dict:
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["sets"]["slurm_go"] = dict(
        app=["go"], vcpu=[0.5], memory_mb=[MEMORY_MB], sidecar_count=[0, 1], sidecar_load_pct=[10]
    )
    config["presets"][PRESET] = {
        "sets": ["slurm_go"],
        "repeats": 1,
        "load": {"duration_s": DURATION_S, "warmup_s": 0},
    }
    return dict(preset=PRESET, presets=config["presets"], sets=config["sets"])


def start_snakemake(
    project: Path, cluster: SlurmCluster, output: Path, *args: str
) -> subprocess.Popen:
    """snakemake with the SLURM profile, from the project directory (where jobs start too),
    in a process group of its own, so that a SIGINT to the group is a terminal's Ctrl-C."""
    with open(output, "w") as out:
        return subprocess.Popen(
            [
                *SLURM_SNAKEMAKE,
                "--workflow-profile",
                "slurm",
                "--slurm-status-command",
                "squeue",
                "--slurm-init-seconds-before-status-checks",
                "2",
                *args,
            ],
            cwd=project,
            env=cluster.env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=as_from_a_terminal,
        )


def run_snakemake(
    project: Path, cluster: SlurmCluster, output: Path, *args: str, timeout: float = 1500
) -> str:
    proc = start_snakemake(project, cluster, output, *args)
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=120)
    text = output.read_text()
    assert proc.returncode == 0, text[-6000:]
    return text


def submissions(project: Path, output: str) -> dict[str, dict]:
    """{SLURM job id: {rule, output}} of every job this snakemake output says it submitted,
    the rule and output read from the log SLURM wrote for the job."""
    jobs = {}
    for job_id, log in SUBMITTED.findall(output):
        # A job cancelled before it started has no log.
        text = Path(log).read_text() if Path(log).exists() else ""
        rule = re.search(r"^(?:local)?rule (\w+):", text, re.M)
        out = re.search(r"^\s+output: (\S+)", text, re.M)
        jobs[job_id] = {"rule": rule and rule.group(1), "output": out and out.group(1), "log": log}
    return jobs


def measured_files(project: Path, repeat: int | None = None) -> set[str]:
    """Run files of the matrix and of the calibration, relative to the project."""
    pattern = f"rep{repeat}.parquet" if repeat else "rep*.parquet"
    results = project / "results" / PRESET
    return {
        str(p.relative_to(project))
        for p in [
            *results.glob(f"runs/*/{pattern}"),
            *results.glob(f"calibration/runs/*/{pattern}"),
        ]
    }


def run_meta(path: Path) -> dict:
    return json.loads(pq.read_schema(path).metadata[b"sidecar_bench"])


def epoch(iso: str) -> float:
    return datetime.fromisoformat(iso).timestamp()


def our_containers(before: set[str]) -> list[dict]:
    """Containers of this module's conditions (and their calibrations) not there before, as
    the engine lists them ({Id, Names, Labels, State, ...}; listing only, as they come and go)."""
    listed = docker.from_env().api.containers(all=True, filters={"label": PROJECT_LABEL})
    return [
        c
        for c in listed
        if f"_mem{MEMORY_MB}_" in (c.get("Labels") or {}).get("org.sidecar-bench.condition", "")
        and c["Id"] not in before
    ]


@pytest.fixture(scope="module")
def finished(cluster, tmp_path_factory):
    """The preset measured once through the SLURM profile."""
    base = tmp_path_factory.mktemp("slurm")
    project = copy_project(base / "project")
    write_config(project, **slurm_config())
    return project, run_snakemake(project, cluster, base / "snakemake-1.out")


def test_every_measurement_ran_as_a_slurm_job_on_a_whole_node_one_at_a_time(cluster, finished):
    project, output = finished
    jobs = submissions(project, output)
    records = cluster.finished_jobs()
    measured = measured_files(project)
    assert {
        Path(f).parent.name for f in measured if "/runs/" in f and "calibration" not in f
    } == CONDITIONS

    # Every run file, of the matrix and of the calibration, was made by one SLURM job.
    made_by = {job["output"]: job_id for job_id, job in jobs.items()}
    assert measured <= set(made_by), (measured - set(made_by), output[-4000:])
    assert {jobs[made_by[f]]["rule"] for f in measured} <= {"run_condition", "run_calibration"}
    # The analysis ran where snakemake runs: no SLURM job for it.
    assert not {job["rule"] for job in jobs.values()} & {
        "aggregate_runs",
        "make_tables",
        "plot_charts",
    }
    assert "localrule aggregate_runs" in output

    # SLURM's records: each job completed on this node with the whole node allocated
    # (all its CPUs, though each asked for one).
    for job_id in jobs:
        record = records[job_id]
        assert record.state == "COMPLETED", record.fields
        assert record.node_list == cluster.node
        assert record.cpus == cluster.cpus, record.fields

    # No two jobs (measurements and image builds) overlapped on the node.
    spans = sorted((records[j].start_s, records[j].end_s, j) for j in jobs)
    for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
        assert start >= end, f"SLURM jobs {first} and {second} overlapped: {spans}"

    # Each run was measured inside its own job's span (SLURM's times are whole seconds).
    for path in measured:
        meta = run_meta(project / path)
        record = records[made_by[path]]
        env = meta["environment"]
        assert (
            record.start_s <= epoch(env["run_start"]) < epoch(env["run_end"]) <= record.end_s + 1
        ), (path, record)


def test_run_files_summary_and_charts_are_complete(finished):
    project, _ = finished
    results = project / "results" / PRESET
    for path in sorted(measured_files(project, repeat=1)):
        table = pq.read_table(project / path)
        meta = json.loads(table.schema.metadata[b"sidecar_bench"])
        assert table.num_rows > 0, path
        assert meta["load"]["duration_s"] == DURATION_S
        assert meta["cgroup"]["nr_periods"] > 0
    summary = pd.read_parquet(results / "summary.parquet")
    assert set(summary["condition_id"]) == CONDITIONS
    assert (summary["rps"] > 0).all()
    assert len(pd.read_parquet(results / "runs_summary.parquet")) == len(CONDITIONS)
    assert list((results / "tables").glob("*.md"))
    assert {".png", ".svg", ".html"} <= {p.suffix for p in (results / "charts").iterdir()}


def test_ctrl_c_cancels_the_running_slurm_job_and_a_rerun_measures_only_what_is_missing(
    cluster, finished, tmp_path
):
    project, _ = finished
    first = measured_files(project, repeat=1)
    wanted = {f.replace("rep1.parquet", "rep2.parquet") for f in first}
    before = {c["Id"] for c in our_containers(set())}
    proc = start_snakemake(project, cluster, tmp_path / "snakemake-2.out", "--config", "repeats=2")
    try:
        # Wait until one second repetition has landed and another is being measured.
        # (Long: on a shared machine a job may wait for the engine while others measure.)
        # Ctrl-C follows the check at once: a measurement seen starting then still has most of its
        # DURATION_S to go (the job cannot have ended in between, which would leave nothing to cancel).
        deadline = time.monotonic() + 1500
        running, slurm_running = [], []
        while time.monotonic() < deadline and proc.poll() is None:
            landed = measured_files(project, repeat=2)
            running = [
                c
                for c in our_containers(before)
                if c["Labels"].get("org.sidecar-bench.part") == "task"
                and c["State"] == "running"
                and not any(f"/{c['Labels']['org.sidecar-bench.condition']}/" in f for f in landed)
            ]
            if landed and running:
                slurm_running = [
                    j for j, state in cluster.job_states().items() if state == "RUNNING"
                ]
                if slurm_running:
                    break
            time.sleep(0.2)
        assert landed and running, (tmp_path / "snakemake-2.out").read_text()[-4000:]
        os.killpg(proc.pid, signal.SIGINT)
        interrupted = running[0]["Labels"]["org.sidecar-bench.condition"]
        assert len(slurm_running) == 1, cluster.job_states()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    output = (tmp_path / "snakemake-2.out").read_text()
    assert proc.returncode != 0, output[-3000:]

    # SLURM cancelled the job that was measuring (the executor's scancel), and the jobs
    # still queued behind it.
    job_id = slurm_running[0]
    deadline = time.monotonic() + 90
    while job_id not in cluster.finished_jobs() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert cluster.finished_jobs()[job_id].state == "CANCELLED", cluster.finished_jobs().get(job_id)
    # A cancelled job is logged as ended while slurmd still ends its processes (the runner
    # removes its containers then), so it may stay COMPLETING for a few seconds; nothing may
    # stay queued or running.
    deadline = time.monotonic() + 60
    while cluster.queued_job_ids(active_only=True) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not cluster.queued_job_ids(active_only=True), cluster.job_states()
    # SLURM signalled the job's processes (its own log says so); the runner removed its
    # containers and wrote no file.
    slurm_log = Path(submissions(project, output)[job_id]["log"]).read_text()
    assert f"*** JOB {job_id} ON {cluster.node} CANCELLED AT" in slurm_log, slurm_log[-3000:]
    assert "interrupted by SIGTERM" in slurm_log, slurm_log[-3000:]
    run_log = next(
        (project / "results" / PRESET / "logs").glob(f"*/{interrupted}/rep2.log")
    ).read_text()
    assert re.search(
        rf"removed container sidecar-bench-{re.escape(interrupted)}-\w+-task", run_log
    ), run_log[-3000:]
    assert [c["Names"] for c in our_containers(before)] == []
    assert not list((project / "results").rglob(f"{interrupted}/rep2.parquet*"))

    # A new invocation plans, and then measures, exactly the repetitions that are missing. It asks for the run files:
    # the summary, tables and charts made after them where snakemake runs are the first test's.
    targets = sorted(first | wanted)
    landed = measured_files(project, repeat=2)
    missing = wanted - landed
    assert missing and landed
    kept = {f: (project / f).stat().st_mtime_ns for f in measured_files(project)}
    plan = subprocess.run(
        [SNAKEMAKE, "--workflow-profile", "slurm", "--dry-run", *targets, "--config", "repeats=2"],
        cwd=project,
        env=cluster.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    planned = set(re.findall(r"^\s+output: (\S+/rep\d+\.parquet)$", plan.stdout, re.M))
    assert planned == missing, plan.stdout[-4000:]
    rerun = run_snakemake(
        project, cluster, tmp_path / "snakemake-3.out", *targets, "--config", "repeats=2"
    )
    jobs = submissions(project, rerun)
    assert {job["output"] for job in jobs.values()} == missing
    assert {f: (project / f).stat().st_mtime_ns for f in kept} == kept
    assert measured_files(project, repeat=2) == wanted
    records = cluster.finished_jobs()
    assert all(records[j].state == "COMPLETED" for j in jobs)
    assert [c["Names"] for c in our_containers(before)] == []


FAILING_RUN_SCRIPT = (
    "import sys\n"
    "print('sidecar-bench test: this run job fails on purpose', file=sys.stderr, flush=True)\n"
    "sys.exit(3)\n"
)


def test_a_failed_slurm_job_is_reported_with_its_state_and_its_log_is_kept(
    cluster, finished, tmp_path
):
    """A run job that fails on its node: snakemake says which SLURM job failed, in which state, and
    where its log is; the log, under results/logs/slurm/, holds what the job wrote; no run file."""
    # A copy of the measured project: its images are built, so the one job is the failing run.
    project = tmp_path / "project"
    shutil.copytree(finished[0], project, symlinks=True)
    (project / "workflow" / "scripts" / "run_condition.py").write_text(FAILING_RUN_SCRIPT)
    target = f"results/{PRESET}/runs/{sorted(CONDITIONS)[0]}/rep3.parquet"
    proc = start_snakemake(
        project, cluster, tmp_path / "snakemake.out", target, "--config", "repeats=3"
    )
    try:
        proc.wait(timeout=900)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=120)
    output = (tmp_path / "snakemake.out").read_text()
    assert proc.returncode != 0, output[-4000:]

    failed = re.search(r"SLURM-job '(\d+)' failed, SLURM status is: '(\w+)'", output)
    assert failed, output[-4000:]
    job_id, state = failed.groups()
    assert state == "FAILED", output[-4000:]
    assert cluster.finished_jobs()[job_id].state == "FAILED"
    assert list(submissions(project, output)) == [job_id], output[-4000:]  # the run, no build
    job = submissions(project, output)[job_id]
    assert job["rule"] == "run_condition" and job["output"] == target, job
    log = Path(job["log"])
    assert log.is_relative_to(project / "results" / "logs" / "slurm"), log
    assert str(log) in output.split(failed.group(0), 1)[1], output[
        -4000:
    ]  # the report names the log
    assert "this run job fails on purpose" in log.read_text(), log.read_text()[-3000:]
    assert not (project / target).exists()

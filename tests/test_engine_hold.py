"""A workflow's hold on its engines (scripts/sidecar_bench/engine_hold.py): one lease for all its jobs.

The jobs here are host_lock calls of this process (the environment variable is all a Snakemake job
inherits); the workflow is this process too, or a process of its own where its death is tested.
test_e2e.py checks that the real workflow's runs work under its lease.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap

import docker
import pytest

from conftest import wait_until
from sidecar_bench import engine_hold, hosts, job, lease
from sidecar_bench.labels import PROJECT, PROJECT_LABEL

LOCAL = [{"name": "local", "url": None}]


def test_only_workflows_with_jobs_on_an_engine_hold_it():
    assert engine_hold.needs_engine(["aggregate_runs", "run_condition"], checkpoints=False)
    assert engine_hold.needs_engine(["build_image"], checkpoints=False)
    assert engine_hold.needs_engine(["run_calibration"], checkpoints=False)
    # A checkpoint (adaptive repetitions, the open loop's capacity) may add runs after the start.
    assert engine_hold.needs_engine(["decide_repeat"], checkpoints=True)
    assert not engine_hold.needs_engine(["aggregate_runs", "make_tables"], checkpoints=False)
    assert not engine_hold.needs_engine([], checkpoints=False)


@pytest.mark.parametrize(
    "value, expected",
    [
        (None, {}),
        ("", {}),
        ("not json", {}),
        ('["a list"]', {}),
        ('{"engine": "lease"}', {"engine": "lease"}),
    ],
)
def test_the_workflows_leases_are_read_from_the_environment(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv(lease.WORKFLOW_ENV, raising=False)
    else:
        monkeypatch.setenv(lease.WORKFLOW_ENV, value)
    assert lease.workflow_leases() == expected


def test_a_job_without_a_workflow_lease_borrows_nothing(monkeypatch):
    monkeypatch.delenv(lease.WORKFLOW_ENV, raising=False)

    class NoEngine:  # borrow must not even ask the engine
        def __getattr__(self, name):
            raise AssertionError(f"asked the engine for {name}")

    assert lease.borrow(NoEngine(), "some engine id") is None


@pytest.fixture
def client():
    client = docker.from_env()
    yield client
    client.close()


def wait_gone(client, held, what):
    """Until the engine's lease is no longer that container (gone, or another holder's by now). The lease is
    read once a try: it may go between two reads."""
    wait_until(lambda: (now := lease.current(client)) is None or now.id != held.id, 10, what)


@pytest.fixture
def workflow(monkeypatch):
    """This process as a workflow holding the local engine (as Snakemake's onstart does)."""
    monkeypatch.delenv(lease.WORKFLOW_ENV, raising=False)
    lines = engine_hold.hold(LOCAL, "test workflow")
    try:
        yield lines
    finally:
        engine_hold.release()


@pytest.mark.docker
def test_the_jobs_of_a_workflow_work_under_its_lease_and_leave_it(client, workflow, tmp_path):
    assert workflow == ["holding engine local's lease for this workflow's jobs"]
    (engine_id, lease_id), *_ = lease.workflow_leases().items()
    assert engine_id == client.info()["ID"]
    held = lease.current(client)
    assert held.labels[lease.LEASE_LABEL] == lease_id and held.status == "running"
    assert "(test workflow)" in lease.describe_labels(held.labels)
    for number in (1, 2):
        with hosts.host_lock(LOCAL, tmp_path / "locks", 60, f"job {number}") as (_, engine):
            # The job made no lease of its own: the engine's lease is the workflow's container.
            assert lease.current(engine).id == held.id
        # Leaving the job gave nothing back: the workflow's lease is still there for the next job.
        assert lease.current(client).id == held.id and lease.current(client).status == "running"
    # Another workflow (no lease id of ours) is refused while this one holds the engine, told who holds it.
    ours = os.environ.pop(lease.WORKFLOW_ENV)
    try:
        with pytest.raises(hosts.HostError, match=r"engine local is busy: .*\(test workflow\)"):
            with hosts.host_lock(LOCAL, tmp_path / "other", 60, "other", wait=False):
                pass
    finally:
        os.environ[lease.WORKFLOW_ENV] = ours
    engine_hold.release()
    assert lease.WORKFLOW_ENV not in os.environ
    wait_gone(client, held, "release() left the workflow's lease")


@pytest.mark.docker
def test_a_job_whose_workflow_lease_is_gone_takes_its_own(client, monkeypatch, tmp_path):
    """A lease id that names no live lease (the workflow gave it back, or it ran past its deadline)."""
    monkeypatch.setenv(lease.WORKFLOW_ENV, json.dumps({client.info()["ID"]: "f" * 32}))
    with hosts.host_lock(LOCAL, tmp_path / "locks", 60, "job") as (_, engine):
        mine = lease.current(engine)
        assert mine.labels[lease.LABEL_PREFIX + "pid"] == str(os.getpid())
        assert mine.labels[lease.LEASE_LABEL] != "f" * 32
    wait_gone(client, mine, "the job's own lease outlived the job")


@pytest.mark.docker
def test_the_stale_sweep_runs_under_the_workflows_lease(client, workflow, tmp_path):
    """A job under its workflow's lease removes what a dead run left, as under its own."""
    left = client.containers.create(
        lease.lease_image(client),
        command=["true"],
        labels={PROJECT_LABEL: PROJECT},
        name="sidecar-bench-test-leftover",
    )
    try:
        with hosts.host_lock(LOCAL, tmp_path / "locks", 60, "job") as (_, engine):
            assert "sidecar-bench-test-leftover" in job.remove_stale_containers(engine)
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(left.id)
    finally:
        try:
            left.remove(force=True)
        except docker.errors.NotFound:
            pass


WORKFLOW = textwrap.dedent("""
    import time
    from sidecar_bench import engine_hold
    print(engine_hold.hold([{"name": "local", "url": None}], "killed workflow"), flush=True)
    time.sleep(120)
""")


@pytest.mark.docker
def test_kill_9_of_the_workflow_ends_its_lease_within_seconds(client):
    process = subprocess.Popen([sys.executable, "-c", WORKFLOW], stdout=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert "holding engine local's lease" in line, line
        held = lease.current(client)
        assert held.labels[lease.LABEL_PREFIX + "pid"] == str(process.pid)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10)
        wait_gone(client, held, "the killed workflow's lease outlived it")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.docker
def test_a_workflow_that_finds_its_engine_busy_holds_nothing_and_says_so(
    client, monkeypatch, tmp_path
):
    """Another workflow measures when this one starts: this one's jobs wait and take their own, as before."""
    from test_lease import start_holder

    monkeypatch.delenv(lease.WORKFLOW_ENV, raising=False)
    holder = start_holder(tmp_path, "other matrix")
    try:
        lines = engine_hold.hold(LOCAL, "late workflow")
        try:
            assert len(lines) == 1 and lines[0].startswith("engine local is busy (held by ")
            assert f"pid {holder.pid}" in lines[0] and "(other matrix)" in lines[0]
            assert lease.workflow_leases() == {}
        finally:
            engine_hold.release()
        assert lease.current(client).labels[lease.LABEL_PREFIX + "pid"] == str(holder.pid)
    finally:
        holder.kill()
        holder.wait()

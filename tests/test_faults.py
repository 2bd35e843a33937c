"""Faults on the real engine: Snakemake killed mid-run (SIGKILL, SIGINT, SIGTERM), an engine that
stops mid-run, and two engines of one machine that must not measure at once.

Each test runs the real Snakefile in a copy of the project on a tiny matrix (Go, 4 s windows).
Condition ids use memory values no other test uses, so that the containers found by label are
this test's own even while other workflows use the engine.
"""

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker
import pytest
import yaml

from conftest import as_from_a_terminal, wait_until
from workflow_helpers import ROOT, SNAKEMAKE, copy_project, dry_run, snakemake, write_config
from sidecar_bench import lease, record, runner

pytestmark = [pytest.mark.docker, pytest.mark.slow]

DURATION_S = 4


VCPUS = (0.5, 1)


def tiny_config(memory_mb: int, hosts=None, vcpus=VCPUS) -> dict:
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["sets"]["faults"] = dict(
        app=["go"], vcpu=list(vcpus), memory_mb=[memory_mb], sidecar_count=[0], sidecar_load_pct=[0]
    )
    config["presets"]["faults"] = {
        "sets": ["faults"],
        "repeats": 1,
        "load": {"duration_s": DURATION_S, "warmup_s": 0},
    }
    config["preset"] = "faults"
    if hosts is not None:
        config["hosts"] = hosts
    return config


def conditions(memory_mb: int, vcpus=VCPUS) -> set:
    return {f"go_cpu{vcpu:g}_mem{memory_mb}_sc0_load00" for vcpu in vcpus}


def run_files(project: Path) -> dict:
    return {
        p.parent.name: p for p in (project / "results" / "faults" / "runs").glob("*/rep*.parquet")
    }


def containers_of(client, condition_ids, status=None):
    """This test's containers by label, as the engine lists them (no inspect: they may be going away)."""
    found = []
    for condition in condition_ids:
        found += client.api.containers(
            all=True, filters={"label": f"{runner.CONDITION_LABEL}={condition}"}
        )
    return [c for c in found if status is None or c["State"] == status]


def deaths(client, condition_id: str, since: float, timeout: float = 15) -> dict:
    """{part: (seconds after since, exit code)} of each container of the condition as it died, from the engine's
    events: stopped by itself, not killed (docker kill, or the forced removal of another job's sweep of a
    dead job's containers, which would hide a container that lived on). Fails after timeout seconds."""
    found, killed = {}, set()
    events = client.events(
        since=int(since) - 1,
        until=int(since + timeout) + 1,
        decode=True,
        filters={"type": "container", "label": f"{runner.CONDITION_LABEL}={condition_id}"},
    )
    try:
        for event in events:
            attributes = event.get("Actor", {}).get("Attributes", {})
            part = attributes.get(runner.PART_LABEL)
            if event.get("Action") == "kill":
                killed.add(part)
            elif event.get("Action") == "die" and event["timeNano"] / 1e9 >= since:
                assert part not in killed, (
                    f"the {part} was killed from outside, it did not stop by itself"
                )
                found[part] = (event["timeNano"] / 1e9 - since, int(attributes.get("exitCode", -1)))
                if set(found) >= {"task", "loadgen"}:
                    break
    finally:
        events.close()
    assert set(found) >= {"task", "loadgen"}, f"still running {timeout:g} s after the kill: {found}"
    return found


def targets(memory_mb: int, vcpus=VCPUS) -> list[str]:
    """Only the run files: the aggregates, tables and charts are other tests' business."""
    return [f"results/faults/runs/{c}/rep1.parquet" for c in sorted(conditions(memory_mb, vcpus))]


def start_workflow(project: Path, memory_mb: int, vcpus=VCPUS) -> subprocess.Popen:
    log = open(project / "snakemake.out", "w")
    return subprocess.Popen(
        [
            SNAKEMAKE,
            "--cores",
            "1",
            "--directory",
            str(project),
            "--snakefile",
            str(project / "Snakefile"),
            *targets(memory_mb, vcpus),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=as_from_a_terminal,
    )


def wait_mid_run(process, project, client, memory_mb, timeout=240, vcpus=VCPUS):
    """Block until one condition has its run file and another's task is in its measured window; -> that id."""
    wanted = conditions(memory_mb, vcpus)
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, (project / "snakemake.out").read_text()[-4000:]
        assert time.monotonic() < deadline, "the workflow never reached its second run"
        done = run_files(project)
        if len(done) == 1:
            running = containers_of(client, wanted - set(done), "running")
            if len(running) == 2:  # the task and its load generator: hey starts right after
                time.sleep(1.5)
                return running[0]["Labels"][runner.CONDITION_LABEL]
        time.sleep(0.2)


def lease_of_pids(client, pids) -> bool:
    current = lease.current(client)
    return current is not None and current.labels.get(lease.LABEL_PREFIX + "pid") in {
        str(p) for p in pids
    }


def job_pids(process) -> list[int]:
    """Snakemake and every process of its session (the jobs)."""
    out = subprocess.run(
        ["ps", "-o", "pid=", "-s", str(process.pid)], capture_output=True, text=True
    ).stdout
    return [int(p) for p in out.split()]


def no_partial_files(project: Path):
    runs = project / "results" / "faults" / "runs"
    return [p for p in runs.rglob("*") if p.is_file() and p.suffix != ".parquet"]


@pytest.fixture
def client():
    client = docker.from_env()
    yield client
    client.close()


def test_sigkill_keeps_finished_runs_and_the_next_invocation_runs_only_what_is_missing(
    tmp_path, client
):
    memory = 521
    project = copy_project(tmp_path / "project")
    write_config(project, **tiny_config(memory))
    process = start_workflow(project, memory)
    try:
        interrupted = wait_mid_run(process, project, client, memory)
        pids = job_pids(process)
        assert {
            c["Labels"][runner.PART_LABEL] for c in containers_of(client, {interrupted}, "running")
        } == {"task", "loadgen"}
        # kill -9 of Snakemake and its job (a closed terminal's session, the OOM killer): nothing cleans up.
        killed = time.time()
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    # The task (app and sidecars) and the load generator stop with the job that attached them, not at their
    # deadline minutes later (within a second here; the bound is generous for a loaded machine).
    died = deaths(client, interrupted, killed)
    assert {part: code for part, (_, code) in died.items()} == {"task": 137, "loadgen": 137}
    logging.getLogger(__name__).warning(
        "the killed job's containers stopped %s s after the kill",
        {part: round(after, 2) for part, (after, _) in died.items()},
    )
    finished = set(run_files(project))
    assert finished == conditions(memory) - {interrupted}
    assert no_partial_files(project) == []
    # Left behind stopped, found by label; the lease went with its holder.
    assert {c["Labels"][runner.PART_LABEL] for c in containers_of(client, {interrupted})} == {
        "task",
        "loadgen",
    }
    wait_until(lambda: not lease_of_pids(client, pids), 10, "the dead job's lease was not released")

    # The documented cleanup command removes them, under the lease like a run.
    cleanup = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "cleanup.py")],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cleanup.returncode == 0, cleanup.stdout + cleanup.stderr
    # (Other leftovers on the engine may go too: under the lease, whatever carries the label is stale.)
    assert "local: removed " in cleanup.stdout, cleanup.stdout
    assert containers_of(client, {interrupted}) == []

    # Snakemake's own lock outlives a SIGKILL: `--unlock` clears it (nothing else is needed).
    unlock = snakemake(project, "--unlock", timeout=120)
    assert unlock.returncode == 0, unlock.stdout + unlock.stderr
    plan = dry_run(project, *targets(memory))
    assert plan.jobs["run_condition"] == 1 and plan.conditions == {interrupted}, plan.output
    done = snakemake(project, *targets(memory), timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert set(run_files(project)) == conditions(memory)


@pytest.mark.parametrize("how", ["SIGINT to the session (Ctrl-C)", "SIGTERM to Snakemake"])
def test_sigint_and_sigterm_to_snakemake_clean_up_and_keep_finished_runs(tmp_path, client, how):
    memory = 522 if how.startswith("SIGINT") else 523
    # Three conditions: the signal arrives in the second run, so that a third is there to be held back.
    vcpus = (0.5, 0.75, 1)
    project = copy_project(tmp_path / "project")
    write_config(project, **tiny_config(memory, vcpus=vcpus))
    process = start_workflow(project, memory, vcpus)
    try:
        interrupted = wait_mid_run(process, project, client, memory, vcpus=vcpus)
        first = set(run_files(project))
        pids = job_pids(process)
        if how.startswith("SIGINT"):
            os.killpg(process.pid, signal.SIGINT)
        else:
            process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    output = (project / "snakemake.out").read_text()
    assert process.returncode != 0, output[-3000:]
    finished = set(run_files(project))
    (held_back,) = conditions(memory, vcpus) - first - {interrupted}
    if how.startswith("SIGINT"):
        # Ctrl-C reaches the job too: it stops, removes its containers, writes nothing.
        assert finished == first, output[-3000:]
        assert f"FAILED {interrupted} rep 1 on local: interrupted by SIGINT" in output
    else:
        # Snakemake lets the running job finish, then starts no other.
        assert "Will exit after finishing currently running jobs" in output
        assert finished == first | {interrupted}, output[-3000:]
    assert f"start {held_back} " not in output, output[-3000:]
    assert containers_of(client, {held_back}) == []
    for path in run_files(project).values():
        assert record.read_run_meta(path)["condition"]["id"] == path.parent.name
    assert no_partial_files(project) == []
    wait_until(
        lambda: containers_of(client, {interrupted}) == [],
        30,
        f"containers left after {how}: {output[-3000:]}",
    )
    wait_until(
        lambda: not lease_of_pids(client, pids), 10, "the lease outlived the interrupted job"
    )
    plan = dry_run(project, *targets(memory, vcpus))
    if plan.returncode != 0 and "cannot be locked" in plan.output:
        assert snakemake(project, "--unlock", timeout=120).returncode == 0
        plan = dry_run(project, *targets(memory, vcpus))
    missing = conditions(memory, vcpus) - finished
    assert plan.jobs["run_condition"] == len(missing) and plan.conditions == missing, plan.output


class SecondEngine:
    """A dockerd of the test's own (own data root, socket, engine id and bridge) that it can stop and
    start again; it gets the images it needs from the machine's engine (docker save | docker load)."""

    def __init__(self) -> None:
        # A short path: unix socket paths are limited to 108 bytes.
        self.base = Path(tempfile.mkdtemp(prefix="sb-fault-", dir="/tmp"))
        (self.base / "daemon.json").write_text(
            json.dumps({"deprecated-key-path": str(self.base / "key.json"), "shutdown-timeout": 1})
        )
        self.url = f"unix://{self.base / 'docker.sock'}"
        self.bridge = f"sbfl{os.getpid() % 100000}"
        subprocess.run(["ip", "link", "add", self.bridge, "type", "bridge"], check=True)
        subprocess.run(["ip", "link", "set", self.bridge, "up"], check=True)
        self.process = None

    def start(self) -> None:
        log = open(self.base / "dockerd.log", "a")
        self.process = subprocess.Popen(
            [
                "dockerd",
                "--config-file",
                str(self.base / "daemon.json"),
                "--data-root",
                str(self.base / "data"),
                "--exec-root",
                str(self.base / "exec"),
                "--pidfile",
                str(self.base / "docker.pid"),
                "-H",
                self.url,
                f"--bridge={self.bridge}",
                "--iptables=false",
                "--ip-masq=false",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                docker.DockerClient(base_url=self.url).ping()
                return
            except docker.errors.DockerException:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    pytest.fail(
                        f"the second dockerd did not start:\n{(self.base / 'dockerd.log').read_text()[-3000:]}"
                    )
                time.sleep(0.3)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)

    def load_images(self, tags) -> None:
        save = subprocess.Popen(["docker", "save", *tags], stdout=subprocess.PIPE)
        subprocess.run(
            ["docker", "-H", self.url, "load", "-q"],
            stdin=save.stdout,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        assert save.wait() == 0

    def close(self) -> None:
        self.stop()
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
        for mount in sorted((m for m in mounts if m.startswith(str(self.base))), reverse=True):
            subprocess.run(["umount", "-l", mount], check=False)
        shutil.rmtree(self.base, ignore_errors=True)
        subprocess.run(["ip", "link", "delete", self.bridge], check=False)


def test_a_new_engine_without_images_pulls_nothing_and_warns_that_only_the_local_lock_guards_it(
    tmp_path, caplog
):
    """Before the first image exists on an engine the lease has no image to run in: nothing is pulled, and the
    job (the first base-image build) goes on under the local lock with a warning that says so."""
    from sidecar_bench import hosts

    engine = SecondEngine()
    try:
        engine.start()
        fresh = docker.DockerClient(base_url=engine.url)
        with pytest.raises(lease.LeaseUnavailable, match="is on the engine"):
            lease.lease_image(fresh)
        with caplog.at_level(logging.WARNING, logger=hosts.log.name):
            with hosts.host_lock(
                [{"name": "fresh", "url": engine.url}], tmp_path / "locks", 60, "build base"
            ) as (host, _):
                assert host["name"] == "fresh" and lease.current(fresh) is None
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert any(
            "no engine lease" in w
            and "only the local lock guards this engine until an image exists" in w
            for w in warnings
        ), warnings
        assert fresh.images.list(all=True) == []  # nothing was pulled
        fresh.close()
    finally:
        engine.close()


@pytest.fixture(scope="module")
def second_engine():
    engine = SecondEngine()
    try:
        engine.start()
        engine.load_images(
            [
                "sidecar-bench/debian-minbase:bookworm",
                "sidecar-bench/loadgen:latest",
                "sidecar-bench/task:go",
            ]
        )
        yield engine
    finally:
        engine.close()


def test_two_engines_of_one_machine_never_hold_it_at_once(second_engine, tmp_path):
    first = docker.from_env()
    second = docker.DockerClient(base_url=second_engine.url)
    assert first.info()["ID"] != second.info()["ID"]
    from sidecar_bench import hosts

    with hosts.host_lock(
        [{"name": "first", "url": None}], tmp_path / "a", 60, "measuring on first"
    ):
        with pytest.raises(
            lease.LeaseBusy,
            match=r"another engine of this machine \(boot id [0-9a-f-]+\): "
            r".*pid %d .*\(measuring on first\)" % os.getpid(),
        ):
            lease.try_acquire(second, "second")
    # Free again: the second engine's lease is taken (and given back) at once.
    with hosts.host_lock(
        [{"name": "second", "url": second_engine.url}], tmp_path / "b", 60, "on second", wait=False
    ):
        assert lease.current(second) is not None


def test_engine_stopping_mid_run_fails_naming_the_host_and_a_rerun_completes_what_is_missing(
    second_engine, tmp_path
):
    memory = 524
    project = copy_project(tmp_path / "project")
    write_config(
        project, **tiny_config(memory, hosts=[{"name": "second", "url": second_engine.url}])
    )
    client = docker.DockerClient(base_url=second_engine.url)
    process = start_workflow(project, memory)
    try:
        interrupted = wait_mid_run(process, project, client, memory)
        second_engine.stop()
        process.wait(timeout=180)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    logs = "\n".join(
        p.read_text(errors="replace")
        for p in (project / "results" / "faults" / "logs").rglob("*.log")
    )
    output = (project / "snakemake.out").read_text() + logs
    assert process.returncode != 0
    assert (
        f"Docker host second ({second_engine.url}): the engine went away in the middle of the job"
        in output
    ), output[-5000:]
    assert f"FAILED {interrupted} rep 1 on second" in output
    assert set(run_files(project)) == conditions(memory) - {interrupted}
    assert no_partial_files(project) == []

    second_engine.start()
    done = snakemake(project, *targets(memory), timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert (
        done.stdout.count("sidecar-bench: start") + done.stderr.count("sidecar-bench: start") == 1
    )
    assert set(run_files(project)) == conditions(memory)
    client = docker.DockerClient(base_url=second_engine.url)
    # The containers the stopped engine kept were swept by the rerun's job; the stale lease broken.
    assert containers_of(client, conditions(memory)) == []


TASK_RUN = """
from sidecar_bench.hosts import host_lock
from sidecar_bench import runner
from sidecar_bench.conditions import Condition, LoadSettings
condition = Condition.from_dict({condition!r})
with host_lock([{{"name": "second", "url": {url!r}}}], {locks!r}, 3600, "task topology engine-stop test") as (_, client):
    runner.run_condition(client, condition, LoadSettings(duration_s=60, ready_timeout_s=60),
                         "sidecar-bench/task:go-sidecar", "sidecar-bench/loadgen:latest", {out!r}, "second")
"""


def test_an_engine_stopping_mid_task_run_leaves_what_the_next_sweep_removes(
    second_engine, tmp_path
):
    """The task topology's containers and task cgroup after its engine stops mid-run: the run fails, writes no
    file, and once the engine is back the sweep every run makes under the lease removes the containers (the
    reader naming the cgroup among them, stopped) and then the task cgroup."""
    from sidecar_bench import job
    from sidecar_bench.conditions import Condition
    from sidecar_bench.hosts import host_lock
    from test_task_topology import task_cgroups

    assert task_cgroups() == [], "a task cgroup of another run is still there"
    second_engine.load_images(["sidecar-bench/task:go-sidecar"])
    condition = Condition("go", 0.25, 2041, 1, 10, topology="task")
    label = [f"{runner.PROJECT_LABEL}={runner.PROJECT}", f"{runner.CONDITION_LABEL}={condition.id}"]
    out = tmp_path / "run.parquet"
    script = TASK_RUN.format(
        condition=condition.as_dict(),
        url=second_engine.url,
        locks=str(tmp_path / "locks"),
        out=str(out),
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    client = docker.DockerClient(base_url=second_engine.url)
    try:

        def mid():
            assert process.poll() is None, process.stdout.read().decode(errors="replace")[-3000:]
            parts = {
                c.labels.get(runner.PART_LABEL)
                for c in client.containers.list(filters={"label": label}, ignore_removed=True)
            }
            return {"reader", "task", "loadgen"} <= parts and task_cgroups() != []

        wait_until(mid, 120, "the task run did not get under way on the second engine")
        time.sleep(2)
        second_engine.stop()
        process.wait(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    output = process.stdout.read().decode(errors="replace")
    assert process.returncode != 0, output[-3000:]
    assert not out.exists() and not list(tmp_path.glob("run.parquet*")), list(tmp_path.iterdir())
    assert task_cgroups() != [], "the task cgroup went away with the engine: nothing left to test"

    second_engine.start()
    client = docker.DockerClient(base_url=second_engine.url)
    left = client.containers.list(all=True, filters={"label": label})
    assert "reader" in {c.labels[runner.PART_LABEL] for c in left}, [c.name for c in left]
    with host_lock(
        [{"name": "second", "url": second_engine.url}], tmp_path / "locks", 60, "sweep"
    ) as (_, held):
        job.remove_stale_containers(held)
    assert client.containers.list(all=True, filters={"label": label}) == []
    assert task_cgroups() == []

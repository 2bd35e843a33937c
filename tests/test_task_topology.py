"""The task topology (ECS's layout): validation, the helpers' shell scripts against a cgroup-like tree (v1 and v2
layouts), and real task cgroups on the real engine: layout and read-back, per-role CPU, and clean-up after a
normal end, SIGTERM, SIGINT and SIGKILL."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import hold_engine, wait_until
from sidecar_bench import job, knobs, record, runner, taskcgroup
from sidecar_bench.conditions import Condition, ConfigError, LoadSettings

# Memory sizes no experiment uses, so that runs of a real matrix are not mistaken for these tests' leftovers.
TASK = Condition("go", 0.25, 2046, 2, 10, topology="task", app_cpu_units=1024)


def test_topology_and_weights_have_their_own_id_parts_and_ecs_defaults():
    assert TASK.id == "go_cpu0.25_mem2046_sc2_load10_task_appcpu1024"
    assert (TASK.role_shares("app"), TASK.role_shares("proxy")) == (1024, 2)
    # As ECS: 0, 1 and 2 units all mean a container without cpu, 2 shares (one condition, one id).
    same = {
        Condition("go", 0.25, 2048, 3, 5, topology="task", sidecar_cpu_units=u).id
        for u in (None, 0, 1, 2)
    }
    assert same == {"go_cpu0.25_mem2048_sc3_load05_task"}
    assert (
        Condition("go", 0.25, 2048, 3, 5, topology="process").id == "go_cpu0.25_mem2048_sc3_load05"
    )


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"topology": "pod"}, "topology: 'pod' is not one of process, task"),
        ({"app_cpu_units": 1024}, "app_cpu_units: 1024 needs topology task"),
        (
            {"topology": "task", "sidecar_cpu_units": 300000},
            "sidecar_cpu_units: 300000 is not a whole number from 0 to 262144",
        ),
        ({"topology": "task", "cpuset": "1"}, "cpuset: '1' is not supported with topology task"),
    ],
)
def test_bad_task_settings_name_the_key_and_the_value(changes, message):
    with pytest.raises(ConfigError, match=message):
        Condition("go", 0.25, 2048, 3, 5, **changes)


def test_where_the_task_cgroup_cannot_be_made_is_refused_before_anything_runs():
    info = {"NCPU": 2, "CgroupDriver": "cgroupfs", "CgroupVersion": "1", "SecurityOptions": []}
    taskcgroup.check_supported(info, TASK, "local")
    with pytest.raises(
        knobs.KnobError, match="needs the cgroupfs cgroup driver; host 'h' uses systemd"
    ):
        taskcgroup.check_supported({**info, "CgroupDriver": "systemd"}, TASK, "h")
    with pytest.raises(knobs.KnobError, match="its engine runs rootless"):
        taskcgroup.check_supported({**info, "SecurityOptions": ["name=rootless"]}, TASK, "h")
    # The process topology needs none of it.
    taskcgroup.check_supported(
        {**info, "CgroupDriver": "systemd"}, Condition("go", 0.25, 2048, 3, 5), "h"
    )


def _fake_hierarchy(root: Path, version: int, name: str, containers: dict) -> None:
    """A directory tree shaped like the host's cgroup file system as the kernel fills it (regular files)."""
    if version == 2:
        for cid in containers.values():
            d = root / name / cid
            d.mkdir(parents=True)
            (d / "cpu.stat").write_text("usage_usec 1500\nuser_usec 1000\n")
            (d / "cpu.weight").write_text("39\n")
        (root / name / "cpu.stat").write_text(
            "usage_usec 3000\nnr_periods 10\nnr_throttled 4\nthrottled_usec 90\n"
            "nr_bursts 1\nburst_usec 5\n"
        )
        (root / name / "cpu.max.burst").write_text("0\n")
        (root / name / "memory.swap.max").write_text("max\n")
        (root / name / "memory.events").write_text("low 0\nhigh 0\nmax 2\noom 1\noom_kill 3\n")
    else:
        for cid in containers.values():
            (root / "cpu" / name / cid).mkdir(parents=True)
            (root / "cpu" / name / cid / "cpu.shares").write_text("2\n")
            (root / "cpuacct" / name / cid).mkdir(parents=True)
            (root / "cpuacct" / name / cid / "cpuacct.usage").write_text("1500000\n")
        (root / "memory" / name).mkdir(parents=True)
        (root / "cpu" / name / "cpu.stat").write_text(
            "nr_periods 10\nnr_throttled 4\nthrottled_time 90000\n"
        )
        (root / "cpuacct" / name / "cpuacct.usage").write_text("3000000\n")
        for f in ("cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.cfs_burst_us"):
            (root / "cpu" / name / f).write_text("0\n")
        (root / "memory" / name / "memory.limit_in_bytes").write_text("0\n")
        (root / "memory" / name / "memory.oom_control").write_text(
            "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
        )


@pytest.mark.parametrize("version", [1, 2])
def test_the_helpers_scripts_write_and_read_the_layout_of_either_cgroup_version(tmp_path, version):
    """The setup and reader scripts as the helpers run them (sh), against a tree laid out as cgroup v1 or v2 (a
    dry path: the kernel's files are regular files here; the real v1 engine is tested below)."""
    name = taskcgroup.cgroup_name("0123456789abcdef")
    containers = {"app": "a" * 64, "proxy": "b" * 64}
    _fake_hierarchy(tmp_path, version, name, containers)
    condition = Condition("go", 0.25, 2046, 1, 10, topology="task", cpu_burst_pct=50)
    info = {"CgroupVersion": str(version)}
    setup = taskcgroup.setup_command(info, name, condition)
    setup[2] = str(tmp_path)  # the mount
    done = subprocess.run(["sh", *setup], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    found = taskcgroup.parse_setup(done.stdout)
    taskcgroup.check_setup(condition, version, found)
    if version == 2:
        assert found["cpu.max"] == "25000 100000" and found["cpu.max.burst"] == "12500"
        assert found["memory.max"] == str(2046 * 2**20) and found["memory.swap.max"] == "0"
    else:
        assert (
            found["cpu.cfs_quota_us"],
            found["cpu.cfs_period_us"],
            found["cpu.cfs_burst_us"],
        ) == ("25000", "100000", "12500")
        assert (
            found["memory.limit_in_bytes"] == str(2046 * 2**20)
            and "memory.memsw.limit_in_bytes" not in found
        )
    read = taskcgroup.read_command(info, name, containers)
    read[3] = str(tmp_path)
    done = subprocess.run(read, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    snap = runner.cgroup.parse_snapshot(done.stdout)
    roles = taskcgroup.parse_roles("\n".join(snap.extra))
    weight = 39 if version == 2 else 2
    assert roles == {"app": (1_500_000, weight), "proxy": (1_500_000, weight)}
    assert (snap.counters.nr_periods, snap.counters.nr_throttled, snap.counters.usage_ns) == (
        10,
        4,
        3_000_000,
    )
    assert snap.limits.vcpu == 0.25 and snap.limits.cpu_burst_us == 12500
    # The task cgroup's OOM-kill counter rides on the same read: the run's OOM check compares two of them.
    assert snap.oom_kills == 3
    # A container whose cgroup is elsewhere has no line the parser accepts: the run fails on its layout.
    read[-1] = "c" * 64
    done = subprocess.run(read, capture_output=True, text=True, timeout=30)
    with pytest.raises(knobs.KnobError, match="not under the task cgroup"):
        taskcgroup.parse_roles("\n".join(runner.cgroup.parse_snapshot(done.stdout).extra))


# ---- on the real engine -------------------------------------------------------------------------


@pytest.fixture()
def engine():
    yield from hold_engine("tests/test_task_topology.py")


def left_of(client, condition):
    """The run's containers. Polled while a run makes and removes them: one removed between the engine's list and
    the SDK's inspect of it is left out (ignore_removed), not an error (it once failed the SIGINT case)."""
    return client.containers.list(
        all=True,
        ignore_removed=True,
        filters={
            "label": [
                f"{runner.PROJECT_LABEL}={runner.PROJECT}",
                f"{runner.CONDITION_LABEL}={condition.id}",
            ]
        },
    )


def task_cgroups() -> list[str]:
    """This machine's task cgroups (the local engine's host), in every v1 hierarchy or the v2 one."""
    base = Path("/sys/fs/cgroup")
    return sorted(
        str(p) for p in base.glob(f"*/{taskcgroup.PARENT}/{taskcgroup.NAME_PREFIX}*")
    ) + sorted(str(p) for p in base.glob(f"{taskcgroup.PARENT}/{taskcgroup.NAME_PREFIX}*"))


@pytest.mark.docker
def test_a_task_run_lays_out_reads_back_and_removes_its_task_cgroup(client, engine, tmp_path):
    from test_runner import image_for

    image_for(client, "sidecar-bench/task:go-sidecar")
    loadgen = image_for(client, "sidecar-bench/loadgen:latest")
    out = tmp_path / "task.parquet"
    runner.run_condition(
        client,
        TASK,
        LoadSettings(duration_s=2, ready_timeout_s=60),
        "sidecar-bench/task:go-sidecar",
        loadgen,
        out,
        "local",
    )
    frame, meta = record.read_run(out)
    assert len(frame) > 0
    layout = meta["knobs"]["layout"]
    assert layout["topology"] == "task" and layout["task_cgroup"].startswith(
        "/docker/sidecar-bench-task-"
    )
    assert {role: c["weight"] for role, c in layout["containers"].items()} == {
        "app": 1024,
        "proxy": 2,
        "agent": 2,
    }
    # The task cgroup holds the quota and the memory limit; throttling is the task cgroup's.
    assert (meta["limits"]["cpu_quota_us"], meta["limits"]["cpu_period_us"]) == (25000, 100000)
    assert meta["limits"]["memory_limit_bytes"] == 2046 * 2**20
    cpu = meta["cgroup"]
    assert cpu["nr_throttled"] > 0 and cpu["usage_s"] <= 0.25 * (cpu["wall_s"] + 0.2)
    # Per-role CPU from each container's own cgroup: together they are the task cgroup's usage.
    by_role = {p["role"]: p["cpu_s"] for p in meta["processes"]}
    assert set(by_role) == {"app", "proxy", "agent"}
    assert sum(by_role.values()) == pytest.approx(cpu["usage_s"], abs=0.02)
    assert left_of(client, TASK) == [] and task_cgroups() == []


@pytest.mark.docker
@pytest.mark.parametrize("proxy", ["haproxy", "haproxy-nolog"])
def test_a_real_proxy_runs_in_a_container_of_its_own_under_the_task_cgroup(
    client, engine, tmp_path, proxy
):
    from test_runner import image_for

    condition = Condition("go", 0.5, 2046, 2, 5, proxy, topology="task")
    image_for(client, "sidecar-bench/task:go-proxy")
    loadgen = image_for(client, "sidecar-bench/loadgen:latest")
    out = tmp_path / "proxy.parquet"
    runner.run_condition(
        client,
        condition,
        LoadSettings(duration_s=2, ready_timeout_s=60),
        "sidecar-bench/task:go-proxy",
        loadgen,
        out,
        "local",
    )
    frame, meta = record.read_run(out)
    assert meta["load"]["url"] == "http://127.0.0.1:8000/work"
    layout = meta["knobs"]["layout"]
    assert set(layout["containers"]) == {"app", "proxy", "agent"}
    # Every request hey recorded went through HAProxy, whose container keeps its access log (or none).
    assert meta["proxy"]["requests"] == meta["requests"]["rows"] == len(frame) > 0
    assert meta["proxy"]["access_log_lines"] == (
        meta["proxy"]["received"] if proxy == "haproxy" else None
    )
    by_role = {p["role"]: p["cpu_s"] for p in meta["processes"]}
    assert by_role["proxy"] > 0 and sum(by_role.values()) == pytest.approx(
        meta["cgroup"]["usage_s"], abs=0.02
    )
    assert left_of(client, condition) == [] and task_cgroups() == []


@pytest.mark.docker
def test_without_a_task_quota_the_task_cgroup_has_shares_only(client, engine, tmp_path):
    condition = Condition("go", 0.5, 2046, 1, 10, topology="task", cpu_quota=False)
    runner.run_condition(
        client,
        condition,
        LoadSettings(duration_s=2, ready_timeout_s=60),
        "sidecar-bench/task:go-sidecar",
        "sidecar-bench/loadgen:latest",
        tmp_path / "x.parquet",
        "local",
    )
    _, meta = record.read_run(tmp_path / "x.parquet")
    assert (meta["limits"]["cpu_quota_us"], meta["limits"]["cpu_shares"]) == (-1, 512)
    assert meta["cgroup"]["nr_throttled"] == 0
    assert left_of(client, condition) == [] and task_cgroups() == []


RUN_SCRIPT = """
import sys
from sidecar_bench.hosts import host_lock, lock_dir
from sidecar_bench import runner
from sidecar_bench.conditions import Condition, LoadSettings
condition = Condition.from_dict({condition!r})
with host_lock([{{"name": "local", "url": None}}], lock_dir(), 3600, "task topology fault test") as (_, client):
    runner.run_condition(client, condition, LoadSettings(duration_s=60, ready_timeout_s=60),
                         "sidecar-bench/task:go-sidecar", "sidecar-bench/loadgen:latest", {out!r}, "local")
"""


def start_run(tmp_path, condition):
    script = RUN_SCRIPT.format(condition=condition.as_dict(), out=str(tmp_path / "run.parquet"))
    return subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def wait_mid_run(client, condition, process):
    """Until the load generator of the run is up and the task cgroup exists (the window has begun)."""

    def mid():
        assert process.poll() is None, process.stdout.read().decode(errors="replace")[-3000:]
        parts = {
            c.labels.get(runner.PART_LABEL)
            for c in left_of(client, condition)
            if c.status == "running"
        }
        return {"reader", "task", "proxy", "loadgen"} <= parts and task_cgroups() != []

    wait_until(mid, 120, "the task run did not get under way")
    time.sleep(3)


@pytest.mark.docker
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_sigterm_sigint_and_sighup_remove_every_container_and_the_task_cgroup(
    client, tmp_path, sig
):
    condition = Condition("go", 0.25, 2045, 1, 10, topology="task")
    process = start_run(tmp_path, condition)
    try:
        wait_mid_run(client, condition, process)
        os.kill(process.pid, sig)
        # Within seconds, not at the end of the 60 s window (~1 s here; the runner once waited for hey's exec).
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert left_of(client, condition) == [] and task_cgroups() == []
    assert not (tmp_path / "run.parquet").exists()


@pytest.mark.docker
def test_after_sigkill_the_sweep_removes_the_containers_and_the_task_cgroup(client, tmp_path):
    condition = Condition("go", 0.25, 2045, 1, 10, topology="task", sidecar_cpu_units=512)
    process = start_run(tmp_path, condition)
    try:
        wait_mid_run(client, condition, process)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    # Nothing cleaned up: the reader still names the task cgroup.
    left = left_of(client, condition)
    assert "reader" in {c.labels[runner.PART_LABEL] for c in left} and task_cgroups() != []
    # The sweep every run (and scripts/cleanup.py) makes under the lease removes them all.
    for held in hold_engine("tests/test_task_topology.py sweep"):
        job.remove_stale_containers(held)
    assert left_of(client, condition) == [] and task_cgroups() == []

"""A local task's snapshot read from the engine's host (hostreads.py): the same text SNAPSHOT_SCRIPT prints inside
the task, pids as the task numbers them; used only where it can be shown to be the task's, else the exec."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import docker.errors
import pytest

from conftest import hold_engine
from sidecar_bench import cgroup, hostreads, runner
from sidecar_bench.conditions import Condition, LoadSettings
from sidecar_bench.containers import exec_in
from test_runner import image_for

ID = "ab" * 32
STAT = "{pid} ({comm}) S {ppid} 1 1 0 -1 4194560 100 0 0 0 {utime} {stime} {cutime} 0 20 0 1 0 {start} 1000 10"
V1_MOUNTS = """\
22 1 0:20 / /sys rw - sysfs sysfs rw
31 22 0:28 / {root}/sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / {root}/sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / {root}/sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / {root}/sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / {root}/sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / {root}/sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
V2_MOUNTS = "31 22 0:28 / {root}/sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def process(
    proc: Path, host_pid: int, ns_pid: int, ppid: int, comm: str, ticks: int, start: int
) -> None:
    write(
        proc / str(host_pid) / "stat",
        STAT.format(pid=host_pid, comm=comm, ppid=ppid, utime=ticks, stime=1, cutime=2, start=start)
        + "\n",
    )
    write(proc / str(host_pid) / "status", f"Name:\t{comm}\nNSpid:\t{host_pid}\t{ns_pid}\n")


def task_tree(tmp_path: Path, version: int = 1) -> tuple[Path, Path]:
    """A fake host: a task whose PID 1 is host pid 500 (1 inside), its app 501 (7) and a sidecar 502 (8), an exec's
    shell 503 (20) whose parent is outside the task; its cgroup files under tmp_path/sys. -> (proc, cgroup dir)."""
    proc = tmp_path / "proc"
    mounts = (V1_MOUNTS if version == 1 else V2_MOUNTS).format(root=tmp_path)
    write(proc / "self" / "mountinfo", mounts)
    if version == 1:
        lines = [f"{n}:{c}:/docker/{ID}" for n, c in ((1, "cpu"), (2, "cpuacct"), (4, "memory"))]
        lines += [f"9:name=systemd:/docker/{ID}", f"0::/docker/{ID}"]
        cpu = tmp_path / "sys/fs/cgroup/cpu/docker" / ID
        write(cpu / "cpu.stat", "nr_periods 40\nnr_throttled 30\nthrottled_time 900000000\n")
        write(cpu / "cpu.cfs_quota_us", "25000\n")
        write(cpu / "cpu.cfs_period_us", "100000\n")
        write(cpu / "cpu.shares", "1024\n")
        write(cpu / "cgroup.procs", "500\n501\n502\n503\n")
        acct = tmp_path / "sys/fs/cgroup/cpuacct/docker" / ID
        write(acct / "cpuacct.usage", "1234567890\n")
        memory = tmp_path / "sys/fs/cgroup/memory/docker" / ID
        write(memory / "memory.limit_in_bytes", f"{512 * 2**20}\n")
        write(memory / "memory.memsw.limit_in_bytes", f"{512 * 2**20}\n")
        write(memory / "memory.max_usage_in_bytes", "4075520\n")
        write(memory / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
        directory = cpu
    else:
        lines = [f"0::/system.slice/docker-{ID}.scope"]
        directory = tmp_path / "sys/fs/cgroup/system.slice" / f"docker-{ID}.scope"
        write(
            directory / "cpu.stat",
            "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\nnr_periods 40\nnr_throttled 30\n"
            "throttled_usec 900000\n",
        )
        write(directory / "cpu.max", "25000 100000\n")
        write(directory / "memory.max", f"{512 * 2**20}\n")
        write(directory / "memory.swap.max", "0\n")
        write(directory / "memory.events", "low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\n")
        write(directory / "cpu.weight", "100\n")
        write(directory / "cgroup.procs", "500\n501\n502\n503\n")
    write(proc / "500" / "cgroup", "\n".join(lines) + "\n")
    process(proc, 500, 1, 480, "sh", 3, 7000)
    process(proc, 501, 7, 500, "app-go", 250, 7010)
    process(proc, 502, 8, 500, "python3", 40, 7011)
    process(proc, 503, 20, 490, "sh", 1, 7100)
    write(proc / "500" / "root" / cgroup.ROLES_FILE.lstrip("/"), "app 7\nproxy 8\n")
    write(proc / "uptime", "78.50 120.00\n")
    write(proc / "stat", "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0 0 0\nintr 1 2\n")
    return proc, directory


@pytest.mark.parametrize("version", [1, 2])
def test_the_host_read_is_what_the_snapshot_script_prints_inside_the_task(tmp_path, version):
    proc, _ = task_tree(tmp_path, version)
    reads = hostreads.HostReads.at(500, ID, str(proc))
    assert reads is not None
    snap = cgroup.parse_snapshot(reads.snapshot_text())
    # The processes as the task numbers them: its PID 1's parent and the exec's are outside it (0, as inside).
    assert {(p.pid, p.comm, p.ppid, p.starttime) for p in snap.processes} == {
        (1, "sh", 0, 7000),
        (7, "app-go", 1, 7010),
        (8, "python3", 1, 7011),
        (20, "sh", 0, 7100),
    }
    assert snap.roles == {"app": 7, "proxy": 8} and snap.clk_tck > 0 and snap.uptime_s == 78.5
    assert snap.host.cpus == 1 and snap.host.total_ticks == 100
    if version == 1:
        assert snap.counters == cgroup.CgroupCounters(
            source="cgroup-v1",
            nr_periods=40,
            nr_throttled=30,
            throttled_ns=900000000,
            usage_ns=1234567890,
            period_us=100000,
            quota_us=25000,
            peak_memory_bytes=4075520,
        )
        assert snap.oom_kills == 2
        assert (snap.limits.memory_limit_bytes, snap.limits.swap_limit_bytes) == (512 * 2**20, 0)
        # Named as the task sees them; the files the host lacks (cpuset here) are left out, as `[ -r ]` does.
        assert (
            "/sys/fs/cgroup/cpu/cpu.stat" in snap.files
            and "/sys/fs/cgroup/cpuset/cpuset.cpus" not in snap.files
        )
    else:
        assert (snap.counters.source, snap.counters.usage_ns, snap.counters.throttled_ns) == (
            "cgroup-v2",
            1234567000,
            900000000,
        )
        assert snap.oom_kills == 1 and snap.limits.cpu_quota_us == 25000
        assert "/sys/fs/cgroup/cpu.max" in snap.files
    # Every role's CPU comes from the same process trees as inside the task.
    later = cgroup.parse_snapshot(reads.snapshot_text())
    assert cgroup.role_cpu_seconds(snap, later) == {"app": 0.0, "proxy": 0.0}


def test_a_task_that_cannot_be_shown_to_be_the_containers_is_not_read_here(tmp_path):
    proc, directory = task_tree(tmp_path)
    # Another container's id: this PID 1 is not the task's (a runner inside a container sees its own /proc).
    assert hostreads.HostReads.at(500, "cd" * 32, str(proc)) is None
    # The engine gives no PID for a stopped container.
    assert hostreads.HostReads.at(0, ID, str(proc)) is None
    assert hostreads.HostReads.at(999, ID, str(proc)) is None  # no such process here
    # Its file system closed to this process (/proc/PID/root needs ptrace's read access: a runner that is not
    # root, in the docker group, may not look in): the roles file could not be read, so nothing is.
    root = proc / "500" / "root"
    root.rename(proc / "500" / "root.saved")
    root.write_text("")
    assert hostreads.HostReads.at(500, ID, str(proc)) is None
    root.unlink()
    (proc / "500" / "root.saved").rename(root)
    assert hostreads.HostReads.at(500, ID, str(proc)) is not None
    # Hierarchies mounted from below their roots: this process sees only part of the tree.
    mountinfo = proc / "self" / "mountinfo"
    mountinfo.write_text(mountinfo.read_text().replace(" / ", " /docker/x "))
    assert hostreads.HostReads.at(500, ID, str(proc)) is None


def test_a_read_that_cannot_vouch_for_itself_gives_way_to_the_exec(tmp_path):
    proc, directory = task_tree(tmp_path)
    reads = hostreads.HostReads.at(500, ID, str(proc))
    assert reads.snapshot_text() is not None
    # PID 1 replaced (another start time): whatever is read is not the task's.
    stat = proc / "500" / "stat"
    saved = stat.read_text()
    stat.write_text(saved.replace(" 7000 ", " 7999 "))
    assert reads.snapshot_text() is None and not reads.alive()
    stat.write_text(saved)
    # Its CPU counters unreadable: no snapshot (the exec's would fail or fall back to the engine's stats).
    (directory / "cpu.stat").rename(directory / "cpu.stat.gone")
    assert reads.snapshot_text() is None
    (directory / "cpu.stat.gone").rename(directory / "cpu.stat")
    # Its cgroup gone (the container removed).
    (directory / "cgroup.procs").unlink()
    assert reads.snapshot_text() is None and not reads.alive()


def test_the_roles_file_is_waited_for_as_inside_the_task(tmp_path):
    proc, _ = task_tree(tmp_path)
    reads = hostreads.HostReads.at(500, ID, str(proc))
    assert reads.wait_roles(3, 0.001) is True
    roles = proc / "500" / "root" / cgroup.ROLES_FILE.lstrip("/")
    roles.write_text("")  # `[ -s ]`: written but empty is not yet written
    started = time.monotonic()
    assert reads.wait_roles(3, 0.05) is False
    assert 0.1 <= time.monotonic() - started < 1  # polls - 1 sleeps, none after the last poll
    (proc / "500" / "stat").unlink()
    assert reads.wait_roles(3, 0.001) is None  # PID 1 gone: the caller's exec reports it


def test_only_the_local_socket_and_no_opt_out_read_here(tmp_path):
    proc, _ = task_tree(tmp_path)

    def client(base_url):
        api = SimpleNamespace(
            base_url=base_url, inspect_container=lambda _: {"State": {"Pid": 500}}
        )
        return SimpleNamespace(api=api)

    local = client(hostreads.LOCAL_BASE_URL)
    assert hostreads.HostReads.locate(local, ID, str(proc), environ={}) is not None
    # ssh:// (the SDK's and ours mount http+docker://ssh) and tcp:// engines are on other hosts.
    for remote in ("http+docker://ssh", "https://10.0.0.2:2376", "http://127.0.0.1:2375"):
        assert hostreads.HostReads.locate(client(remote), ID, str(proc), environ={}) is None
    assert hostreads.HostReads.locate(local, ID, str(proc), environ={hostreads.ENV: "exec"}) is None

    def gone(_):
        raise docker.errors.NotFound("no such container")

    local.api.inspect_container = gone
    assert hostreads.HostReads.locate(local, ID, str(proc), environ={}) is None


# ---- on the real engine -------------------------------------------------------------------------------------


@pytest.fixture()
def engine():
    yield from hold_engine("tests/test_hostreads.py")


def identity(snap: cgroup.TaskSnapshot) -> set[tuple[int, str, int, int]]:
    return {(p.pid, p.comm, p.ppid, p.starttime) for p in snap.processes}


@pytest.mark.docker
def test_a_real_tasks_host_read_matches_its_exec_and_ends_with_it(client, engine):
    measurement = runner.Measurement(
        client,
        Condition("go", 0.5, 2032, 2, 10),
        LoadSettings(duration_s=1, ready_timeout_s=60),
        image_for(client, "sidecar-bench/task:go-sidecar"),
        image_for(client, "sidecar-bench/loadgen:latest"),
        uuid.uuid4().hex,
    )
    try:
        measurement.start()
        measurement.wait_ready()
        first, _ = measurement.snapshot(wait_roles=True)
        inside = exec_in(client, measurement.task.id, ["sh", "-c", cgroup.SNAPSHOT_SCRIPT])
        assert inside.exit_code == 0, inside.stderr
        exec_snap = cgroup.parse_snapshot(inside.stdout)
        last, _ = measurement.snapshot()
        assert measurement.task_reads == ["host", "host"]
        # The same files, limits read back, roles and processes; the exec's only extra is its own shell, whose
        # parent is outside the task.
        assert set(first.files) == set(exec_snap.files) == set(last.files)
        assert (
            first.limits == exec_snap.limits == last.limits and first.limits.cpu_quota_us == 50000
        )
        assert first.roles == exec_snap.roles == last.roles
        assert set(first.roles) == {"app", "proxy", "agent"}
        extra = identity(exec_snap) - identity(first)
        assert identity(first) == identity(last) and len(extra) == 1, extra
        assert next(iter(extra))[1:3] == ("sh", 0)
        # The counters in the order they were read.
        for field in ("usage_ns", "nr_periods", "throttled_ns"):
            values = [getattr(s.counters, field) for s in (first, exec_snap, last)]
            assert values == sorted(values), (field, values)
        assert first.counters.source == last.counters.source == exec_snap.counters.source
        assert all(seconds >= 0 for seconds in cgroup.role_cpu_seconds(first, last).values())
        reads = measurement.host_reads
        assert reads is not None and reads.alive()
    finally:
        measurement.remove()
    # Its task removed, the host read cannot vouch for itself, and the exec reports the end as it did (the
    # engine's answer: no such container).
    assert reads.snapshot_text() is None and not reads.alive()
    with pytest.raises(docker.errors.NotFound):
        measurement.snapshot()

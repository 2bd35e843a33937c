"""A local task's snapshot read from the engine's host (hostreads.py): the same text SNAPSHOT_SCRIPT prints inside
the task, pids as the task numbers them; used only where it can be shown to be the task's, else the exec."""

from __future__ import annotations

import os
import shutil
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
STAT = "{pid} ({comm}) S {ppid} 1 1 0 -1 4194560 100 0 0 0 {utime} 1 2 0 20 0 1 0 {start} 1000 10"


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def task_tree(tmp_path: Path, version: int = 1) -> tuple[Path, Path]:
    """A fake host: a task whose PID 1 is host pid 500, its file system under /proc/500/root as the task sees it
    (its cgroup files, its roles file, its own /proc: PID 1, the app 7, a sidecar 8, an exec's shell 20 whose
    parent is outside the task, a zombie 9). -> (the host's /proc, the task's root)."""
    proc = tmp_path / "proc"
    root = proc / "500" / "root"
    write(
        proc / "500" / "cgroup",
        f"4:memory:/docker/{ID}\n1:cpu,cpuacct:/docker/{ID}\n0::/docker/{ID}\n",
    )
    write(
        proc / "500" / "stat", STAT.format(pid=500, comm="sh", ppid=480, utime=3, start=7000) + "\n"
    )
    fs = root / "sys" / "fs" / "cgroup"
    if version == 1:
        # Co-mounted controllers, as runc lays them out: cpu and cpuacct are links to cpu,cpuacct.
        cpu = fs / "cpu,cpuacct"
        write(cpu / "cpu.stat", "nr_periods 40\nnr_throttled 30\nthrottled_time 900000000\n")
        write(cpu / "cpuacct.usage", "1234567890\n")
        write(cpu / "cpu.cfs_quota_us", "25000\n")
        write(cpu / "cpu.cfs_period_us", "100000\n")
        write(cpu / "cpu.shares", "1024\n")
        (fs / "cpu").symlink_to("cpu,cpuacct")
        (fs / "cpuacct").symlink_to("cpu,cpuacct")
        memory = fs / "memory"
        write(memory / "memory.limit_in_bytes", f"{512 * 2**20}\n")
        write(memory / "memory.memsw.limit_in_bytes", f"{512 * 2**20}\n")
        write(memory / "memory.max_usage_in_bytes", "4075520\n")
        write(memory / "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    else:
        write(
            fs / "cpu.stat",
            "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\nnr_periods 40\nnr_throttled 30\n"
            "throttled_usec 900000\n",
        )
        write(fs / "cpu.max", "25000 100000\n")
        write(fs / "memory.max", f"{512 * 2**20}\n")
        write(fs / "memory.swap.max", "0\n")
        write(fs / "memory.events", "low 0\nhigh 0\nmax 0\noom 1\noom_kill 1\n")
        write(fs / "cpu.weight", "100\n")
    for pid, comm, ppid, ticks, start in (
        (1, "sh", 0, 3, 7000),
        (7, "app-go", 1, 250, 7010),
        (8, "python3", 1, 40, 7011),
        (
            9,
            "python3",
            8,
            5,
            7050,
        ),  # a zombie: /proc lists it until it is reaped, and so does the exec's
        (20, "sh", 0, 1, 7100),
    ):
        write(
            root / "proc" / str(pid) / "stat",
            STAT.format(pid=pid, comm=comm, ppid=ppid, utime=ticks, start=start) + "\n",
        )
    write(root / "proc" / "self" / "stat", "not a process of the task")
    write(root / "run" / "sidecar-bench" / "roles", "app 7\nproxy 8\n")
    write(root / "proc" / "uptime", "78.50 120.00\n")
    write(
        root / "proc" / "stat", "cpu  10 0 10 80 0 0 0 0 0 0\ncpu0 5 0 5 40 0 0 0 0 0 0\nintr 1 2\n"
    )
    return proc, root


@pytest.mark.parametrize("version", [1, 2])
def test_the_host_read_is_what_the_snapshot_script_prints_inside_the_task(tmp_path, version):
    proc, _ = task_tree(tmp_path, version)
    reads = hostreads.HostReads.at(500, ID, str(proc))
    assert reads is not None
    snap = cgroup.parse_snapshot(reads.snapshot_text())
    # The task's own /proc: pids and ppids as it numbers them (0 for a parent outside it), zombies included.
    assert {(p.pid, p.comm, p.ppid, p.starttime) for p in snap.processes} == {
        (1, "sh", 0, 7000),
        (7, "app-go", 1, 7010),
        (8, "python3", 1, 7011),
        (9, "python3", 8, 7050),
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
        # Named as the task sees them, through its links; files it lacks (cpuset here) are left out (`[ -r ]`).
        assert "/sys/fs/cgroup/cpuacct/cpuacct.usage" in snap.files
        assert "/sys/fs/cgroup/cpuset/cpuset.cpus" not in snap.files
    else:
        assert (snap.counters.source, snap.counters.usage_ns, snap.counters.throttled_ns) == (
            "cgroup-v2",
            1234567000,
            900000000,
        )
        assert snap.oom_kills == 1 and snap.limits.cpu_quota_us == 25000
        assert "/sys/fs/cgroup/cpu.max" in snap.files
    # A role's CPU is its whole process tree's, the zombie's ticks among the sidecar's, as inside the task.
    later = cgroup.parse_snapshot(
        reads.snapshot_text().replace(
            "python3) S 8 1 1 0 -1 4194560 100 0 0 0 5 ",
            "python3) S 8 1 1 0 -1 4194560 100 0 0 0 105 ",
        )
    )
    assert cgroup.role_cpu_seconds(snap, later) == {"app": 0.0, "proxy": 1.0}


def test_a_task_that_cannot_be_shown_to_be_the_containers_is_not_read_here(tmp_path):
    proc, root = task_tree(tmp_path)
    # Another container's id: this PID 1 is not the task's (a runner in its own PID namespace sees its own /proc).
    assert hostreads.HostReads.at(500, "cd" * 32, str(proc)) is None
    # The engine gives no PID for a stopped container.
    assert hostreads.HostReads.at(0, ID, str(proc)) is None
    assert hostreads.HostReads.at(999, ID, str(proc)) is None  # no such process here
    # Its file system closed to this process (/proc/PID/root needs ptrace's read access: a runner that is not
    # root, in the docker group, may not look in): nothing is read here.
    root.rename(proc / "500" / "root.saved")
    root.write_text("")
    assert hostreads.HostReads.at(500, ID, str(proc)) is None
    root.unlink()
    (proc / "500" / "root.saved").rename(root)
    assert hostreads.HostReads.at(500, ID, str(proc)) is not None


def test_a_read_that_cannot_vouch_for_itself_gives_way_to_the_exec(tmp_path):
    proc, root = task_tree(tmp_path)
    reads = hostreads.HostReads.at(500, ID, str(proc))
    assert reads.snapshot_text() is not None
    # PID 1 replaced (another start time): whatever is read is not the task's.
    stat = proc / "500" / "stat"
    saved = stat.read_text()
    stat.write_text(saved.replace(" 7000 ", " 7999 "))
    assert reads.snapshot_text() is None and not reads.alive()
    stat.write_text(saved)
    # Its CPU counters unreadable: no snapshot here (the exec's finds the same, and the engine's stats count).
    counters = root / "sys/fs/cgroup/cpu,cpuacct/cpu.stat"
    counters.rename(counters.with_suffix(".gone"))
    assert reads.snapshot_text() is None
    counters.with_suffix(".gone").rename(counters)
    # v1's counters are cpu.stat and cpuacct.usage together, as parse_snapshot reads them: one alone is none.
    usage = root / "sys/fs/cgroup/cpu,cpuacct/cpuacct.usage"
    usage.rename(usage.with_suffix(".gone"))
    assert reads.snapshot_text() is None
    usage.with_suffix(".gone").rename(usage)
    # A file that is not a regular one where one is read (a directory here) is never read as one.
    uptime = root / "proc" / "uptime"
    uptime.unlink()
    uptime.mkdir()
    assert reads.snapshot_text() is None
    uptime.rmdir()
    uptime.write_text("78.50 120.00\n")
    assert reads.snapshot_text() is not None
    # PID 1 gone (the container stopped or removed).
    stat.unlink()
    assert reads.snapshot_text() is None and not reads.alive()


@pytest.mark.parametrize(
    "path, target",
    [
        ("run", "/etc"),  # absolute: it would resolve against this host's root, not the task's
        ("run/sidecar-bench/roles", "../../../../../../etc/shadow"),
        ("sys/fs/cgroup/memory", "../../../../etc"),
        ("proc/uptime", "/proc/uptime"),
    ],
)
def test_the_tasks_links_out_of_their_directory_are_not_followed_from_here(tmp_path, path, target):
    # The task's file system is the task's to shape, and the runner may be root: a link that leaves its
    # directory refuses the whole read (the exec then reads it inside the task, as the task resolves it).
    proc, root = task_tree(tmp_path)
    reads = hostreads.HostReads.at(500, ID, str(proc))
    link = root / path
    if link.is_dir():
        shutil.rmtree(link)
    else:
        link.unlink()
    link.symlink_to(target)
    assert reads.snapshot_text() is None
    if path.startswith("run"):
        assert reads.wait_roles(2, 0.001) is None


def test_only_regular_files_are_read_and_never_waited_on(tmp_path):
    proc, root = task_tree(tmp_path)
    reads = hostreads.HostReads.at(500, ID, str(proc))
    roles = root / "run" / "sidecar-bench" / "roles"
    roles.unlink()
    os.mkfifo(roles)  # a FIFO nobody writes would block a plain open
    started = time.monotonic()
    assert reads.snapshot_text() is None and reads.wait_roles(2, 0.001) is None
    assert time.monotonic() - started < 1
    roles.unlink()
    roles.write_bytes(b"x" * (hostreads.MAX_FILE_BYTES + 1))
    assert reads.snapshot_text() is None


def test_the_roles_file_is_waited_for_as_inside_the_task(tmp_path):
    proc, root = task_tree(tmp_path)
    reads = hostreads.HostReads.at(500, ID, str(proc))
    assert reads.wait_roles(3, 0.001) is True
    roles = root / "run" / "sidecar-bench" / "roles"
    roles.write_text("")  # `[ -s ]`: written but empty is not yet written
    started = time.monotonic()
    assert reads.wait_roles(3, 0.05) is False
    assert 0.1 <= time.monotonic() - started < 1  # polls - 1 sleeps, none after the last poll
    roles.unlink()
    assert reads.wait_roles(2, 0.001) is False  # not there at all
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


class FakeReads:
    """A HostReads whose answers the test sets: wait_roles' and snapshot_text's."""

    def __init__(self, written, text):
        self.written, self.text, self.polls = written, text, []

    def wait_roles(self, polls, interval_s):
        self.polls.append(polls)
        return self.written

    def snapshot_text(self):
        return self.text


SNAPSHOT = "@@file /sys/fs/cgroup/cpu.stat\nusage_usec 5\n@@clk_tck 100\n@@end\n"


@pytest.mark.parametrize(
    "written, text, wait_roles, used, exec_polls",
    [
        (True, SNAPSHOT, True, "host", None),  # read here: no exec
        (True, SNAPSHOT, False, "host", None),
        (None, None, True, "exec", "100"),  # cannot tell here: the exec waits as it always did
        (True, None, True, "exec", "100"),  # the read could not vouch for itself
        (True, None, False, "exec", ""),  # the plain snapshot script
        (
            False,
            None,
            True,
            "exec",
            "1",
        ),  # not written as seen from here: the task's own view, once
    ],
)
def test_a_snapshot_is_read_here_else_by_the_exec(
    monkeypatch, written, text, wait_roles, used, exec_polls
):
    from sidecar_bench import measurement as measurement_module
    from sidecar_bench.containers import ExecResult

    m = runner.Measurement(None, Condition("go", 1, 2048, 0, 0), LoadSettings(), None, None, "run")
    m.task = SimpleNamespace(id="task")
    m.host_reads = FakeReads(written, text)
    execs = []

    def exec_in(client, container_id, cmd):
        execs.append(cmd)
        return ExecResult(0, SNAPSHOT.replace("usage_usec 5", "usage_usec 7"), "")

    monkeypatch.setattr(measurement_module, "exec_in", exec_in)
    snap, _ = m.snapshot(wait_roles=wait_roles)
    assert m.task_reads == [used]
    assert snap.counters.usage_ns == (5000 if used == "host" else 7000)
    assert m.host_reads.polls == ([100] if wait_roles else [])
    if exec_polls is None:
        assert execs == []
    elif exec_polls:
        assert execs[0][2] == measurement_module.ROLES_THEN_SNAPSHOT and execs[0][5] == exec_polls
    else:
        assert execs == [["sh", "-c", cgroup.SNAPSHOT_SCRIPT]]


# ---- on the real engine -------------------------------------------------------------------------------------


@pytest.fixture()
def engine():
    yield from hold_engine("tests/test_hostreads.py")


def identity(snap: cgroup.TaskSnapshot) -> set[tuple[int, str, int, int]]:
    return {(p.pid, p.comm, p.ppid, p.starttime) for p in snap.processes}


@pytest.mark.docker
def test_a_real_tasks_host_read_matches_its_exec_and_ends_with_it(client, engine):
    if os.geteuid() != 0:
        pytest.skip(
            "reading the task from this host needs root here (or a rootless engine's own user)"
        )
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

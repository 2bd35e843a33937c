"""A local task's snapshot read from the engine's host, without a docker exec.

When the runner talks to the engine through its local socket, the task's cgroup directories
and its processes' /proc entries are files the runner can read itself. `HostReads` makes from
them the text cgroup.SNAPSHOT_SCRIPT prints inside the task, line for line in its form, so that
cgroup.parse_snapshot and every check after it are unchanged:

    @@file /sys/fs/cgroup/...   the same files, named as the task sees them (v1 or v2), read from
                                the task's own cgroup directories on the host
    the roles file              through /proc/PID/root (the task's mount namespace)
    /proc/uptime, /proc/stat    the host's, which the task sees too
    @@stat                      every process of the task's cgroup, its pid and ppid as the task
                                sees them (the last NSpid of /proc/PID/status; 0 for a parent
                                outside the task, as inside it)

It costs about a millisecond where an exec costs 45-50 ms on this machine, twice a run, and it
charges nothing to the task's cgroup (an exec's shell ran inside it, at the window's edges).

It is used only where it can be checked to see that task: the SDK's local socket (never ssh://
or tcp://, whose engines are on other hosts), the task's PID 1 visible in this /proc with the
container's id in its cgroup path, its file system open to this process (root, or the engine's
own user with rootless Docker), and the cgroup hierarchies mounted at their roots here (not the
case inside another container). Anything else, or SIDECAR_BENCH_TASK_READS=exec, keeps the
exec. A read that cannot vouch for itself (PID 1 gone or replaced, its cgroup gone, the CPU
counters unreadable) returns None and the caller takes the exec, which fails as it always did.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Mapping

from . import cgroup

ENV = "SIDECAR_BENCH_TASK_READS"  # "exec": always read the task through an exec
LOCAL_BASE_URL = "http+docker://localhost"  # the SDK's base URL for a local unix socket
CGROUP_ROOT = "/sys/fs/cgroup"  # where the task sees its cgroup files


def _read(path: str) -> str | None:
    """A file's text, or None if it is missing or unreadable (as SNAPSHOT_SCRIPT's `[ -r "$f" ]`)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def cgroup_mounts(mountinfo: str) -> dict[str, str]:
    """/proc/self/mountinfo -> {controller: mount point} of the cgroup hierarchies mounted at their
    roots ("" for the unified v2 one; "name=systemd" for a named one). One mounted from below its
    root (this process is inside a container, which sees only its own part of the tree) is left out."""
    mounts: dict[str, str] = {}
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        if not sep:
            continue
        fields, after = head.split(), tail.split()
        if len(fields) < 5 or len(after) < 3 or after[0] not in ("cgroup", "cgroup2"):
            continue
        if fields[3] != "/":
            continue
        point = fields[4].replace("\\040", " ")
        if after[0] == "cgroup2":
            mounts.setdefault("", point)
            continue
        for option in after[2].split(","):
            if option not in ("rw", "ro") and not option.startswith(
                ("xattr", "release_agent", "clone")
            ):
                mounts.setdefault(option, point)
    return mounts


def task_cgroups(proc_cgroup: str) -> dict[str, str]:
    """/proc/PID/cgroup -> {controller: path} ("" for the unified hierarchy's line "0::PATH")."""
    paths: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[1] == "":
            paths[""] = parts[2]
        for controller in parts[1].split(","):
            if controller:
                paths[controller] = parts[2]
    return paths


@dataclass(frozen=True)
class HostReads:
    """Where one local task's snapshot files are on this host."""

    pid: int  # the task's PID 1, as this host numbers it
    starttime: int  # its start (clock ticks after boot): a replaced PID 1 is not the task's
    files: tuple[tuple[str, str], ...]  # (name as the task sees it, path here)
    procs: str  # cgroup.procs of the task's cgroup: its processes
    proc: str = "/proc"

    @classmethod
    def locate(
        cls,
        client: Any,
        container_id: str,
        proc: str = "/proc",
        environ: Mapping[str, str] = os.environ,
    ) -> HostReads | None:
        """The task's files on this host, or None where they cannot be shown to be its (module docstring)."""
        if environ.get(ENV, "").strip().lower() == "exec":
            return None
        if getattr(getattr(client, "api", None), "base_url", None) != LOCAL_BASE_URL:
            return None
        try:
            pid = int(client.api.inspect_container(container_id)["State"]["Pid"] or 0)
        except Exception:  # any failure to answer keeps the exec, which reports it
            return None
        return cls.at(pid, container_id, proc)

    @classmethod
    def at(cls, pid: int, container_id: str, proc: str = "/proc") -> HostReads | None:
        """The files of the container whose PID 1 is pid here (see locate)."""
        if pid <= 0:
            return None
        mountinfo = _read(f"{proc}/self/mountinfo")
        own = _read(f"{proc}/{pid}/cgroup")
        start = _starttime(_read(f"{proc}/{pid}/stat"))
        if mountinfo is None or own is None or start is None or not _enters(f"{proc}/{pid}/root"):
            return None
        mounts = cgroup_mounts(mountinfo)
        paths = task_cgroups(own)
        if not mounts or not paths:
            return None
        v1 = any(controller in paths for controller in ("cpu", "cpuacct", "memory"))
        files = []
        names = (
            cgroup.V1_FILES + cgroup.OOM_FILES[1:] if v1 else cgroup.V2_FILES + cgroup.OOM_FILES[:1]
        )
        for name in names:
            relative = name.removeprefix(CGROUP_ROOT + "/")
            controller, _, base = relative.rpartition("/") if v1 else ("", "", relative)
            if controller not in mounts or container_id not in paths.get(controller, ""):
                continue
            files.append((name, f"{mounts[controller]}{paths[controller]}/{base}"))
        procs_controller = next(
            (
                c
                for c in ("cpu", "memory", "pids", "")
                if c in mounts and container_id in paths.get(c, "")
            ),
            None,
        )
        if procs_controller is None or not files:
            return None
        procs = f"{mounts[procs_controller]}{paths[procs_controller]}/cgroup.procs"
        reads = cls(pid, start, tuple(files), procs, proc)
        return reads if reads.alive() else None

    def alive(self) -> bool:
        """The task's PID 1 is still the one located, and still in its cgroup."""
        if _starttime(_read(f"{self.proc}/{self.pid}/stat")) != self.starttime:
            return False
        members = _read(self.procs)
        return members is not None and str(self.pid) in members.split()

    def roles_written(self) -> bool:
        """The entrypoint's roles file exists and is not empty (SNAPSHOT's `[ -s ROLES_FILE ]`)."""
        try:
            return os.path.getsize(f"{self.proc}/{self.pid}/root{cgroup.ROLES_FILE}") > 0
        except OSError:
            return False

    def wait_roles(self, polls: int, interval_s: float) -> bool | None:
        """Poll for the roles file as ROLES_THEN_SNAPSHOT does: True when written, False if it never came,
        None if the task's PID 1 went meanwhile (the caller takes the exec)."""
        for poll in range(polls):
            if self.roles_written():
                return True
            if not self.alive():
                return None
            if poll < polls - 1:
                time.sleep(interval_s)
        return False

    def snapshot_text(self) -> str | None:
        """SNAPSHOT_SCRIPT's output for the task, read here; None if the read cannot vouch for itself."""
        lines: list[str] = []
        counters = False
        for name, path in self.files:
            text = _read(path)
            if text is None:
                continue
            counters = counters or name in (cgroup.V1_FILES[0], cgroup.V2_FILES[0])
            lines.append(f"@@file {name}")
            lines.extend(text.splitlines())
        for name, path in (
            (cgroup.ROLES_FILE, f"{self.proc}/{self.pid}/root{cgroup.ROLES_FILE}"),
            ("/proc/uptime", f"{self.proc}/uptime"),
        ):
            text = _read(path)
            if text is not None:
                lines.append(f"@@file {name}")
                lines.extend(text.splitlines())
        lines.append(f"@@clk_tck {os.sysconf('SC_CLK_TCK')}")
        for line in (_read(f"{self.proc}/stat") or "").splitlines():
            if not line.startswith("cpu"):
                break
            lines.append(f"@@cpu {line}")
        members = _read(self.procs)
        if members is None or not counters:
            return None
        stats = {}
        for text in members.split():
            host_pid = int(text)
            stat = _read(f"{self.proc}/{host_pid}/stat")
            ns_pid = _ns_pid(_read(f"{self.proc}/{host_pid}/status"))
            if stat and ns_pid is not None:
                stats[host_pid] = (ns_pid, stat.strip())
        in_task = {host: ns for host, (ns, _) in stats.items()}
        for ns_pid, stat in sorted(stats.values()):
            translated = _translate(stat, ns_pid, in_task)
            if translated is not None:
                lines.append(f"@@stat {translated}")
        if not self.alive():
            return None
        lines.append("@@end")
        return "\n".join(lines) + "\n"


def _enters(root: str) -> bool:
    """Whether this process may look into the task's file system (the roles file): /proc/PID/root asks for
    ptrace's read access, which a runner that is not root (a member of the docker group) lacks."""
    try:
        os.stat(f"{root}/.")
    except OSError:
        return False
    return True


def _starttime(stat: str | None) -> int | None:
    """Field 22 of a /proc/PID/stat line (its start, in clock ticks after boot)."""
    if not stat:
        return None
    rest = stat.rpartition(")")[2].split()
    return int(rest[19]) if len(rest) > 19 and rest[19].isdigit() else None


def _ns_pid(status: str | None) -> int | None:
    """The innermost of /proc/PID/status's NSpid (the process's pid as its own namespace numbers it)."""
    for line in (status or "").splitlines():
        if line.startswith("NSpid:"):
            values = line.split()[1:]
            return int(values[-1]) if values and values[-1].isdigit() else None
    return None


def _translate(stat: str, ns_pid: int, in_task: Mapping[int, int]) -> str | None:
    """A /proc/PID/stat line as the task sees it: its pid and its ppid in the task's numbering (0 outside)."""
    head, paren, tail = stat.rpartition(")")
    comm = head.partition(" (")[2]
    rest = tail.split()
    if not paren or len(rest) < 20 or not rest[1].isdigit():
        return None
    rest[1] = str(in_task.get(int(rest[1]), 0))
    return f"{ns_pid} ({comm}) {' '.join(rest)}"

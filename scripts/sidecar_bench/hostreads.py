"""A local task's snapshot read from the engine's host, without a docker exec.

When the runner talks to the engine through its local socket, the task's PID 1 is a process of
this host, and /proc/PID/root is the task's own file system as the task sees it: its mounts, its
/proc (a procfs of the task's PID namespace, which numbers pids and ppids as the task does and
lists what it lists, zombies included) and its /sys/fs/cgroup (its own cgroup, v1 or v2).
`HostReads` reads cgroup.SNAPSHOT_SCRIPT's files there and makes the text the script prints inside
the task, so that cgroup.parse_snapshot and every check after it are unchanged. A read costs
about a millisecond where an exec costs 45-50 ms on this machine, twice a run, and it charges
nothing to the task's cgroup (an exec's shell ran inside it, at the window's edges).

The task's file system is the task's to shape, and the runner reading it may be root, so paths
are walked there one name at a time: a symlink is followed only to a name in the same directory
(runc's /sys/fs/cgroup/cpuacct -> cpu,cpuacct); any other (absolute, or with a slash: it would
resolve against this host's root, not the task's) refuses the whole read; only regular files are
opened for reading (a device's open could act), without blocking, and at most MAX_FILE_BYTES of
each; any error but "missing" or "not readable" refuses it too, so that a file never goes missing.

It is used only where it can be checked to be that task: the SDK's local socket (never ssh://
or tcp://, whose engines are on other hosts), the task's PID 1 visible in this /proc with the
container's id in its cgroup path, and its file system open to this process (/proc/PID/root asks
for ptrace's read access: root, or the engine's own user with rootless Docker; not a member of
the docker group). Anything else, or SIDECAR_BENCH_TASK_READS=exec, keeps the exec. A read that
cannot vouch for itself (PID 1 gone or replaced, a path refused, the CPU counters unreadable)
returns None and the caller takes the exec, which reads the task as it always did.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass
from typing import Any, Mapping

from . import cgroup

ENV = "SIDECAR_BENCH_TASK_READS"  # "exec": always read the task through an exec
LOCAL_BASE_URL = "http+docker://localhost"  # the SDK's base URL for a local unix socket
MAX_FILE_BYTES = 4 * 2**20  # a snapshot file larger than this is no cgroup or procfs file
MAX_LINKS = 8  # symlinks followed within one path


class Refused(Exception):
    """A path in the task's file system that this host will not follow."""


def _open_dir(parent: int, name: str, flags: int = os.O_PATH) -> int:
    return os.open(name, flags | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)


def _step(parent: int, name: str) -> str:
    """name in the directory parent, a symlink to a name beside it followed (at most MAX_LINKS times); raises
    Refused for any other symlink, OSError if there is no such entry."""
    for _ in range(MAX_LINKS):
        if not stat.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode):
            return name
        target = os.readlink(name, dir_fd=parent)
        if "/" in target or target in ("", ".", ".."):
            raise Refused(f"{name} -> {target}")
        name = target
    raise Refused(f"{name}: more than {MAX_LINKS} symlinks")


def _parent(root: int, path: str) -> tuple[int, str]:
    """(an fd of the directory holding path's last name, that name), walked from root."""
    *dirs, last = [part for part in path.split("/") if part]
    fd = os.dup(root)
    try:
        for name in dirs:
            if name == "..":
                raise Refused(path)
            following = _open_dir(fd, _step(fd, name))
            os.close(fd)
            fd = following
        return fd, _step(fd, last)
    except BaseException:
        os.close(fd)
        raise


# What `[ -r "$f" ]` would find false: no such entry, or not readable; and a process that ended meanwhile
# (ESRCH reading its /proc entry: the script's `2>/dev/null` leaves it out too). Any other error reading a file
# that is there refuses the read (the exec then reads it), so that a present file never goes missing.
MISSING = (errno.ENOENT, errno.EACCES, errno.ENOTDIR, errno.ESRCH)


def _missing(path: str, err: OSError) -> None:
    """None for an error that leaves the file out (MISSING); any other refuses the read."""
    if err.errno in MISSING:
        return None
    raise Refused(f"{path}: {err}") from None


def read_under(root: int, path: str) -> str | None:
    """A regular file's text at path in the file system whose root is the fd root; None where it is missing or
    unreadable (as SNAPSHOT_SCRIPT's `[ -r "$f" ]`). Raises Refused (module docstring): a link out of its
    directory, a file that is not a regular one (never opened for reading: a device's open can act), one larger
    than MAX_FILE_BYTES, or any other error."""
    try:
        parent, name = _parent(root, path)
        try:
            handle = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        finally:
            os.close(parent)
    except OSError as err:
        return _missing(path, err)
    try:
        if not stat.S_ISREG(os.fstat(handle).st_mode):
            raise Refused(f"{path} is not a regular file")
        # Reopened through the fd, not the name: what was checked is what is read.
        fd = os.open(
            f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        )
    except OSError as err:
        return _missing(path, err)
    finally:
        os.close(handle)
    try:
        data = b""
        while len(data) <= MAX_FILE_BYTES:
            more = os.read(fd, MAX_FILE_BYTES + 1 - len(data))
            if not more:
                break
            data += more
    except OSError as err:
        return _missing(path, err)
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise Refused(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    return data.decode("utf-8", errors="replace")


def list_pids(root: int) -> list[str]:
    """The numeric entries of the task's /proc (its processes, as /proc/[0-9]* globs them)."""
    parent, name = _parent(root, "/proc")
    try:
        fd = _open_dir(parent, name, os.O_RDONLY)
    finally:
        os.close(parent)
    try:
        return sorted(entry for entry in os.listdir(fd) if entry.isdigit())
    finally:
        os.close(fd)


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _starttime(stat_line: str | None) -> int | None:
    """A /proc/PID/stat line's start (clock ticks after boot); None without a readable one."""
    try:
        return cgroup.parse_proc_stat(stat_line).starttime if stat_line else None
    except (ValueError, IndexError):
        return None


@dataclass(frozen=True)
class HostReads:
    """One local task, seen from this host: its PID 1 here and that process's start."""

    pid: int  # the task's PID 1, as this host numbers it
    starttime: int  # its start (clock ticks after boot): a replaced PID 1 is not the task's
    proc: str = "/proc"

    @classmethod
    def locate(
        cls,
        client: Any,
        container_id: str,
        proc: str = "/proc",
        environ: Mapping[str, str] = os.environ,
    ) -> HostReads | None:
        """The task as this host sees it, or None where it cannot be shown to be the container (module docstring)."""
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
        """The container whose PID 1 is pid here, if this host's pid is that container's (see locate)."""
        if pid <= 0 or not container_id:
            return None
        # Its start first: a pid replaced after this is caught by alive() below.
        start = _starttime(_read(f"{proc}/{pid}/stat"))
        own = _read(f"{proc}/{pid}/cgroup")
        if own is None or start is None or container_id not in own:
            return None
        reads = cls(pid, start, proc)
        try:
            os.close(reads._root())
        except OSError:
            return None
        return reads if reads.alive() else None

    def _root(self) -> int:
        """An fd of the task's root directory (its mounts below it); OSError if this process may not open it."""
        return os.open(f"{self.proc}/{self.pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)

    def alive(self) -> bool:
        """The task's PID 1 is still the one located."""
        return _starttime(_read(f"{self.proc}/{self.pid}/stat")) == self.starttime

    def wait_roles(self, polls: int, interval_s: float) -> bool | None:
        """Poll for the roles file as ROLES_THEN_SNAPSHOT does (`[ -s ROLES_FILE ]`): True when written, False if
        it never came, None if it cannot be told here (PID 1 gone, a path refused): the caller takes the exec."""
        for poll in range(polls):
            try:
                root = self._root()
            except OSError:
                return None
            try:
                if read_under(root, cgroup.ROLES_FILE):
                    return True
            except Refused:
                return None
            finally:
                os.close(root)
            if not self.alive():
                return None
            if poll < polls - 1:
                time.sleep(interval_s)
        return False

    def snapshot_text(self) -> str | None:
        """SNAPSHOT_SCRIPT's output for the task, read from here; None if the read cannot vouch for itself."""
        try:
            root = self._root()
        except OSError:
            return None
        try:
            text = self._snapshot(root)
        except (Refused, OSError):
            return None
        finally:
            os.close(root)
        return text if text is not None and self.alive() else None

    def _snapshot(self, root: int) -> str | None:
        lines: list[str] = []
        found = set()
        for name in cgroup.SNAPSHOT_FILES:
            text = read_under(root, name)
            if text is None:
                continue
            found.add(name)
            lines.append(f"@@file {name}")
            lines.extend(text.splitlines())
        if cgroup.counter_source(found) is None:
            return None  # the exec reads them, or finds them missing too (then the engine's stats API counts)
        lines.append(f"@@clk_tck {os.sysconf('SC_CLK_TCK')}")
        for line in (read_under(root, "/proc/stat") or "").splitlines():
            if not line.startswith("cpu"):
                break
            lines.append(f"@@cpu {line}")
        for pid in list_pids(root):
            # A process that ends meanwhile is left out, as the script's `2>/dev/null` leaves it.
            line = read_under(root, f"/proc/{pid}/stat")
            if line:
                lines.append(f"@@stat {line.splitlines()[0]}")
        lines.append("@@end")
        return "\n".join(lines) + "\n"

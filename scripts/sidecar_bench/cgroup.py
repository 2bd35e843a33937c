"""The task cgroup's CPU accounting and its processes' CPU time, as the container sees them.

A snapshot is the output of SNAPSHOT_SCRIPT run by `docker exec` inside the task:
the cgroup files of whichever hierarchy the engine uses (v1 or v2), the roles
file the entrypoint writes, and /proc/PID/stat of every process. Reading them
through exec works on remote engines too; on a local engine hostreads.py makes
the same text from this host's files, without an exec. Parsing here is pure
(text -> dataclass); the runner takes one snapshot right before hey and one
right after, and stores the deltas.

Units: cgroup v1 counts throttled_time and cpuacct.usage in ns, v2 counts
throttled_usec and usage_usec in µs; both are held here in ns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Mapping

V1_FILES = (
    "/sys/fs/cgroup/cpu/cpu.stat",
    "/sys/fs/cgroup/cpuacct/cpuacct.usage",
    "/sys/fs/cgroup/cpu/cpu.cfs_quota_us",
    "/sys/fs/cgroup/cpu/cpu.cfs_period_us",
    "/sys/fs/cgroup/memory/memory.max_usage_in_bytes",
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes",
    # The knobs' settings (conditions.KNOBS), read back: burst (Linux 5.14), shares, cpuset.
    "/sys/fs/cgroup/cpu/cpu.cfs_burst_us",
    "/sys/fs/cgroup/cpu/cpu.shares",
    "/sys/fs/cgroup/cpuset/cpuset.cpus",
)
V2_FILES = (
    "/sys/fs/cgroup/cpu.stat",
    "/sys/fs/cgroup/cpu.max",
    "/sys/fs/cgroup/memory.peak",
    "/sys/fs/cgroup/memory.max",
    "/sys/fs/cgroup/memory.swap.max",
    "/sys/fs/cgroup/cpu.max.burst",
    "/sys/fs/cgroup/cpu.weight",
    "/sys/fs/cgroup/cpuset.cpus.effective",
)
ROLES_FILE = "/run/sidecar-bench/roles"
# The task cgroup's OOM-kill counter (v2 memory.events, v1 memory.oom_control: "oom_kill N"), read with every
# snapshot, so that the two snapshots around the window say whether the OOM killer acted inside it. The
# engine's OOMKilled is not enough: on cgroup v1 it stays false when the OOM killer takes a process and the
# task lives on.
OOM_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")

# Every file a snapshot reads, in its order (SNAPSHOT_SCRIPT; hostreads.py reads the same from the host).
SNAPSHOT_FILES = V1_FILES + V2_FILES + (ROLES_FILE, "/proc/uptime") + OOM_FILES

# POSIX sh with builtins only: every fork would run in the task's cgroup and be
# charged to the measured window. `read` drops a file's last line if it lacks a
# newline, hence `|| [ -n "$l" ]`.
SNAPSHOT_SCRIPT = r"""
for f in {files}; do
  [ -r "$f" ] || continue
  echo "@@file $f"
  while IFS= read -r l || [ -n "$l" ]; do echo "$l"; done < "$f"
done
echo "@@clk_tck $(getconf CLK_TCK 2>/dev/null || echo 100)"
while IFS= read -r l; do
  case "$l" in cpu*) echo "@@cpu $l";; *) break;; esac
done < /proc/stat
for d in /proc/[0-9]*; do
  IFS= read -r s 2>/dev/null < "$d/stat" && echo "@@stat $s"
done
echo "@@end"
""".format(files=" ".join(SNAPSHOT_FILES))


class SnapshotError(ValueError):
    """A snapshot lacks what the measurement needs."""


@dataclass(frozen=True)
class CgroupCounters:
    """Cumulative CPU counters of one cgroup at one instant."""

    source: str  # "cgroup-v1" | "cgroup-v2" | "docker-api"
    nr_periods: int
    nr_throttled: int
    throttled_ns: int
    usage_ns: int
    period_us: int | None = None
    quota_us: int | None = None  # -1 = no limit
    peak_memory_bytes: int | None = None
    # Periods in which the group used burst, and the burst time; None where the kernel has no CFS burst.
    nr_bursts: int | None = None
    burst_ns: int | None = None

    def __post_init__(self) -> None:
        if self.source not in ("cgroup-v1", "cgroup-v2", "docker-api"):
            raise SnapshotError(f"unknown counter source {self.source!r}")
        for name in ("nr_periods", "nr_throttled", "throttled_ns", "usage_ns"):
            if getattr(self, name) < 0:
                raise SnapshotError(f"{name} is negative: {getattr(self, name)}")


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/PID/stat the runner uses."""

    pid: int
    comm: str
    ppid: int
    utime: int  # clock ticks
    stime: int
    cutime: int  # of waited-for children
    cstime: int
    starttime: int  # clock ticks after boot: (pid, starttime) names one process

    @property
    def ticks(self) -> int:
        return self.utime + self.stime + self.cutime + self.cstime


@dataclass(frozen=True)
class Limits:
    """The task cgroup's limits as the kernel applies them. -1 = no limit (quota, memory, swap); swap 0 = no swap."""

    cpu_quota_us: int | None
    cpu_period_us: int | None
    memory_limit_bytes: int | None
    # v1: memory.memsw.limit_in_bytes - memory; v2: memory.swap.max; None if swap is not accounted.
    swap_limit_bytes: int | None
    cpu_burst_us: int | None = None  # None: no CFS burst file (kernel before 5.14)
    cpu_shares: int | None = None  # v1 cpu.shares
    cpu_weight: int | None = None  # v2 cpu.weight
    cpuset_cpus: str | None = None  # v1 cpuset.cpus, v2 cpuset.cpus.effective

    @property
    def vcpu(self) -> float | None:
        if self.cpu_quota_us is None or self.cpu_period_us is None or self.cpu_quota_us < 0:
            return None
        return self.cpu_quota_us / self.cpu_period_us

    def as_dict(self) -> dict[str, Any]:
        return {
            "cpu_quota_us": self.cpu_quota_us,
            "cpu_period_us": self.cpu_period_us,
            "vcpu": self.vcpu,
            "memory_limit_bytes": self.memory_limit_bytes,
            "swap_limit_bytes": self.swap_limit_bytes,
            "cpu_burst_us": self.cpu_burst_us,
            "cpu_shares": self.cpu_shares,
            "cpu_weight": self.cpu_weight,
            "cpuset_cpus": self.cpuset_cpus,
        }


@dataclass(frozen=True)
class HostCpu:
    """Host-wide CPU time from /proc/stat's cpu line, all CPUs summed, in clock ticks."""

    cpus: int
    busy_ticks: int  # user + nice + system + irq + softirq + steal (guest is inside user)
    total_ticks: int  # busy + idle + iowait


@dataclass(frozen=True)
class TaskSnapshot:
    counters: CgroupCounters | None
    roles: Mapping[str, int]
    processes: tuple[ProcStat, ...]
    clk_tck: int
    uptime_s: float | None = None
    files: Mapping[str, str] = field(default_factory=dict, repr=False)
    limits: Limits | None = None
    host: HostCpu | None = None
    # "@@..." lines of other readers (the task topology's @@role lines), in order.
    extra: tuple[str, ...] = ()

    @property
    def oom_kills(self) -> int | None:
        """The task cgroup's oom_kill counter; None when neither OOM_FILES file was read."""
        for path in OOM_FILES:
            if path in self.files:
                return parse_key_values(self.files[path]).get("oom_kill")
        return None


def parse_key_values(text: str) -> dict[str, int]:
    """'nr_periods 12\\nnr_throttled 3' -> {'nr_periods': 12, 'nr_throttled': 3}."""
    values = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            values[parts[0]] = int(parts[1])
    return values


def parse_v1(files: Mapping[str, str]) -> CgroupCounters:
    """cgroup v1 files (path -> text) -> counters."""
    stat = parse_key_values(_need(files, V1_FILES[0]))
    peak = files.get(V1_FILES[4])
    return CgroupCounters(
        source="cgroup-v1",
        nr_periods=stat["nr_periods"],
        nr_throttled=stat["nr_throttled"],
        throttled_ns=stat["throttled_time"],
        usage_ns=int(_need(files, V1_FILES[1]).strip()),
        quota_us=_int_or_none(files.get(V1_FILES[2])),
        period_us=_int_or_none(files.get(V1_FILES[3])),
        peak_memory_bytes=_int_or_none(peak),
        nr_bursts=stat.get("nr_bursts"),
        burst_ns=stat.get("burst_time"),
    )


def parse_cpu_max(text: str) -> tuple[int, int]:
    """cgroup v2 cpu.max '25000 100000' or 'max 100000' -> (quota_us, period_us); no limit = -1."""
    quota, period = text.split()
    return (-1 if quota == "max" else int(quota)), int(period)


def parse_v2(files: Mapping[str, str]) -> CgroupCounters:
    """cgroup v2 files (path -> text) -> counters."""
    stat = parse_key_values(_need(files, V2_FILES[0]))
    quota = period = None
    if V2_FILES[1] in files:
        quota, period = parse_cpu_max(files[V2_FILES[1]])
    return CgroupCounters(
        source="cgroup-v2",
        # nr_periods etc. are missing from v2 cpu.stat when the cpu controller
        # is not enabled for the cgroup; then there is no quota either.
        nr_periods=stat.get("nr_periods", 0),
        nr_throttled=stat.get("nr_throttled", 0),
        throttled_ns=stat.get("throttled_usec", 0) * 1000,
        usage_ns=stat["usage_usec"] * 1000,
        quota_us=quota,
        period_us=period,
        peak_memory_bytes=_int_or_none(files.get(V2_FILES[2])),
        nr_bursts=stat.get("nr_bursts"),
        burst_ns=None if "burst_usec" not in stat else stat["burst_usec"] * 1000,
    )


def parse_docker_stats(stats: Mapping[str, Any]) -> CgroupCounters:
    """One Docker stats API sample (`container.stats(stream=False)`) -> counters (no quota, no peak)."""
    cpu = stats["cpu_stats"]
    throttling = cpu.get("throttling_data") or {}
    return CgroupCounters(
        source="docker-api",
        nr_periods=int(throttling.get("periods", 0)),
        nr_throttled=int(throttling.get("throttled_periods", 0)),
        throttled_ns=int(throttling.get("throttled_time", 0)),
        usage_ns=int(cpu["cpu_usage"]["total_usage"]),
        peak_memory_bytes=_int_or_none(
            str((stats.get("memory_stats") or {}).get("max_usage", "")) or None
        ),
    )


def parse_limits(files: Mapping[str, str]) -> Limits | None:
    """The limits in a snapshot's cgroup files (v1 or v2); None if neither hierarchy's are there."""
    if V1_FILES[2] in files or V1_FILES[5] in files:
        memory = _v1_limit(files.get(V1_FILES[5]))
        memsw = _v1_limit(files.get(V1_FILES[6]))
        if memory is None or memsw is None:
            swap = None
        else:
            # memsw limits memory + swap together (the kernel keeps it >= the memory limit).
            swap = -1 if memsw == -1 else memsw - memory
        return Limits(
            cpu_quota_us=_int_or_none(files.get(V1_FILES[2])),
            cpu_period_us=_int_or_none(files.get(V1_FILES[3])),
            memory_limit_bytes=memory,
            swap_limit_bytes=swap,
            cpu_burst_us=_int_or_none(files.get(V1_FILES[7])),
            cpu_shares=_int_or_none(files.get(V1_FILES[8])),
            cpuset_cpus=_text_or_none(files.get(V1_FILES[9])),
        )
    if V2_FILES[1] in files or V2_FILES[3] in files:
        quota = period = None
        if V2_FILES[1] in files:
            quota, period = parse_cpu_max(files[V2_FILES[1]])
        return Limits(
            cpu_quota_us=quota,
            cpu_period_us=period,
            memory_limit_bytes=_max_or_int(files.get(V2_FILES[3])),
            swap_limit_bytes=_max_or_int(files.get(V2_FILES[4])),
            cpu_burst_us=_int_or_none(files.get(V2_FILES[5])),
            cpu_weight=_int_or_none(files.get(V2_FILES[6])),
            cpuset_cpus=_text_or_none(files.get(V2_FILES[7])),
        )
    return None


def limits_from_host_config(host_config: Mapping[str, Any]) -> Limits:
    """The limits the engine reports it applied (container attrs HostConfig), when no cgroup file is readable."""
    period = int(host_config.get("CpuPeriod") or 100_000)
    nano = int(host_config.get("NanoCpus") or 0)
    quota = int(host_config.get("CpuQuota") or 0) or (round(nano * period / 1e9) if nano else -1)
    memory = int(host_config.get("Memory") or 0) or None
    # MemorySwap is memory + swap; -1 is unlimited swap, also what the engine stores when the kernel cannot
    # limit swap ("Memory limited without swap"); with a memory limit, the engine stores 0 (unset) as 2 x memory.
    memsw = int(host_config.get("MemorySwap") or 0)
    if memory is None:
        swap = None
    elif memsw < 0:
        swap = -1
    else:
        swap = (memsw or 2 * memory) - memory
    return Limits(
        cpu_quota_us=quota, cpu_period_us=period, memory_limit_bytes=memory, swap_limit_bytes=swap
    )


def parse_host_cpu(lines: list[str]) -> HostCpu | None:
    """/proc/stat's cpu lines ('cpu  user nice system idle iowait irq softirq steal ...', then cpuN) -> HostCpu."""
    total_line = next((line for line in lines if line.split()[:1] == ["cpu"]), None)
    if total_line is None:
        return None
    values = [int(v) for v in total_line.split()[1:]] + [0] * 8
    user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
    busy = user + nice + system + irq + softirq + steal
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    return HostCpu(cpus=cpus, busy_ticks=busy, total_ticks=busy + idle + iowait)


def host_cpu_delta(before: TaskSnapshot, after: TaskSnapshot) -> dict[str, Any] | None:
    """The run file's "host" object: host-wide busy and total CPU seconds between two snapshots."""
    if before.host is None or after.host is None:
        return None
    busy = after.host.busy_ticks - before.host.busy_ticks
    total = after.host.total_ticks - before.host.total_ticks
    if busy < 0 or total < 0:
        raise SnapshotError(f"/proc/stat went backwards (busy {busy}, total {total} ticks)")
    return {
        "cpus": after.host.cpus,
        "busy_s": busy / after.clk_tck,
        "total_s": total / after.clk_tck,
    }


def parse_proc_stat(line: str) -> ProcStat:
    """One /proc/PID/stat line -> ProcStat. comm may hold spaces and parentheses: split at the last ')'."""
    head, _, tail = line.rpartition(")")
    pid_text, _, comm = head.partition(" (")
    rest = tail.split()
    # rest[0] is field 3 (state); field n is rest[n - 3].
    return ProcStat(
        pid=int(pid_text),
        comm=comm,
        ppid=int(rest[1]),
        utime=int(rest[11]),
        stime=int(rest[12]),
        cutime=int(rest[13]),
        cstime=int(rest[14]),
        starttime=int(rest[19]),
    )


def parse_roles(text: str) -> dict[str, int]:
    """The entrypoint's roles file ('ROLE PID' per line) -> {role: pid}."""
    roles = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            raise SnapshotError(f"{ROLES_FILE} line {number}: {line!r} is not 'ROLE PID'")
        roles[parts[0]] = int(parts[1])
    return roles


def counter_source(files: Collection[str]) -> str | None:
    """Which hierarchy's CPU counters a snapshot's files hold: v1's cpu.stat and cpuacct.usage together, else
    v2's cpu.stat; None without either."""
    if V1_FILES[0] in files and V1_FILES[1] in files:
        return "cgroup-v1"
    return "cgroup-v2" if V2_FILES[0] in files else None


def parse_snapshot(text: str) -> TaskSnapshot:
    """SNAPSHOT_SCRIPT's output -> TaskSnapshot. Counters are None if no cgroup file was readable."""
    files: dict[str, list[str]] = {}
    processes = []
    cpu_lines: list[str] = []
    extra: list[str] = []
    clk_tck = 100
    current: list[str] | None = None
    ended = False
    for line in text.splitlines():
        if line.startswith("@@file "):
            current = files.setdefault(line[len("@@file ") :], [])
        elif line.startswith("@@stat "):
            current = None
            processes.append(parse_proc_stat(line[len("@@stat ") :]))
        elif line.startswith("@@cpu "):
            current = None
            cpu_lines.append(line[len("@@cpu ") :])
        elif line.startswith("@@clk_tck "):
            current = None
            clk_tck = int(line.split()[1])
        elif line == "@@end":
            ended = True
            current = None
        elif line.startswith("@@"):
            current = None
            extra.append(line)
        elif current is not None:
            current.append(line)
    if not ended:
        raise SnapshotError(f"snapshot output is cut short (no @@end): {text[-300:]!r}")
    texts = {path: "\n".join(lines) + "\n" for path, lines in files.items()}
    source = counter_source(texts)
    counters = (
        parse_v1(texts)
        if source == "cgroup-v1"
        else parse_v2(texts)
        if source == "cgroup-v2"
        else None
    )
    uptime = float(texts["/proc/uptime"].split()[0]) if "/proc/uptime" in texts else None
    roles = parse_roles(texts.get(ROLES_FILE, ""))
    return TaskSnapshot(
        counters=counters,
        roles=roles,
        processes=tuple(processes),
        clk_tck=clk_tck,
        uptime_s=uptime,
        files=texts,
        limits=parse_limits(texts),
        host=parse_host_cpu(cpu_lines),
        extra=tuple(extra),
    )


def counters_delta(before: CgroupCounters, after: CgroupCounters) -> dict[str, Any]:
    """The run file's "cgroup" object: counter deltas over the window, limits as set."""
    if before.source != after.source:
        raise SnapshotError(f"counter sources differ: {before.source} then {after.source}")
    delta = {
        "source": after.source,
        "nr_periods": after.nr_periods - before.nr_periods,
        "nr_throttled": after.nr_throttled - before.nr_throttled,
        "throttled_s": (after.throttled_ns - before.throttled_ns) / 1e9,
        "usage_s": (after.usage_ns - before.usage_ns) / 1e9,
        "period_us": after.period_us,
        "quota_us": after.quota_us,
    }
    if before.nr_bursts is not None and after.nr_bursts is not None:
        delta["nr_bursts"] = after.nr_bursts - before.nr_bursts
    if before.burst_ns is not None and after.burst_ns is not None:
        delta["burst_s"] = (after.burst_ns - before.burst_ns) / 1e9
    negative = [
        key
        for key in ("nr_periods", "nr_throttled", "throttled_s", "usage_s", "nr_bursts", "burst_s")
        if delta.get(key, 0) < 0
    ]
    if negative:
        raise SnapshotError(
            f"cgroup counters went backwards ({', '.join(negative)}): was the container restarted?"
        )
    return delta


def _tree_ticks(processes: tuple[ProcStat, ...], root: int) -> int:
    """CPU ticks of root and all its descendants (reaped children are in their parent's cutime/cstime)."""
    children: dict[int, list[ProcStat]] = {}
    by_pid = {}
    for proc in processes:
        children.setdefault(proc.ppid, []).append(proc)
        by_pid[proc.pid] = proc
    if root not in by_pid:
        return 0
    total, stack = 0, [by_pid[root]]
    while stack:
        proc = stack.pop()
        total += proc.ticks
        stack.extend(children.get(proc.pid, ()))
    return total


def role_cpu_seconds(before: TaskSnapshot, after: TaskSnapshot) -> dict[str, float]:
    """CPU seconds each role's process tree used between two snapshots.

    Raises SnapshotError if a role's process is gone or was replaced (restart):
    its CPU time would be wrong, and so would the run.
    """
    if not before.roles:
        raise SnapshotError(
            f"{ROLES_FILE} is missing or empty: cannot tell the app from the sidecars"
        )
    starts_before = {p.pid: p.starttime for p in before.processes}
    starts_after = {p.pid: p.starttime for p in after.processes}
    seconds = {}
    for role, pid in before.roles.items():
        if pid not in starts_before:
            raise SnapshotError(f"role {role}: process {pid} from {ROLES_FILE} is not running")
        if starts_after.get(pid) != starts_before[pid]:
            raise SnapshotError(f"role {role}: process {pid} exited during the measured window")
        ticks = _tree_ticks(after.processes, pid) - _tree_ticks(before.processes, pid)
        seconds[role] = ticks / after.clk_tck
    return seconds


def _need(files: Mapping[str, str], path: str) -> str:
    if path not in files:
        raise SnapshotError(f"{path} is missing from the snapshot")
    return files[path]


def _max_or_int(text: str | None) -> int | None:
    """A v2 limit file: 'max' (no limit) -> -1, a number -> int, missing -> None."""
    if text is not None and text.strip() == "max":
        return -1
    return _int_or_none(text)


def _text_or_none(text: str | None) -> str | None:
    return None if text is None or not text.strip() else text.strip()


# cgroup v1 writes "no limit" as the largest page-aligned counter (9223372036854771712 with 4 KiB pages);
# no machine has 4 EiB, so any value from here up is no limit.
V1_NO_LIMIT = 2**62


def _v1_limit(text: str | None) -> int | None:
    """A v1 limit file: no limit -> -1 (as v2's 'max'), a number -> int, missing -> None."""
    value = _int_or_none(text)
    return -1 if value is not None and value >= V1_NO_LIMIT else value


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    return int(text) if text.lstrip("-").isdigit() else None

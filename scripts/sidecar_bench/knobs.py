"""The knobs against CFS throttling on the engine: what Docker flags set, what the burst helper sets, and what
must be refused before anything runs.

Docker sets the period (cpu_period + cpu_quota, instead of nano_cpus: the two cannot be combined), no quota
(cpu_shares only), the cpuset (cpuset_cpus), and the runtimes' settings (environment). Docker has no flag for
the CFS burst (cgroup v1 cpu.cfs_burst_us, v2 cpu.max.burst, Linux 5.14): a short-lived helper container
writes it into the task container's cgroup once the task has started (the cgroup exists only from then on),
before the app answers and long before the measured window; the run reads it back from inside the task.

What the helper needs on the engine's machine, and why (docs/operations.md, "CFS burst"):
- a bind mount of the host's cgroup file system (v1: the cpu hierarchy, v2: the unified one), read-write,
  because the value lives there and nowhere else;
- to be root on the host as the engine sees it: cgroup files are owned by root, mode 0644, so uid 0 writes
  them through its ownership with no capability at all. The helper drops every capability, cannot gain one
  (no-new-privileges), has a read-only root file system and no network, and lives only for the write.
A rootless engine or one with user-namespace remapping maps the helper's uid 0 to an unprivileged host uid
that owns no cgroup file: refused before anything runs, as is a kernel older than 5.14 (no burst).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from .conditions import Condition, cpuset_cpus

# Linux added CFS burst in 5.14.
BURST_KERNEL = (5, 14)
HELPER_MOUNT = "/host-cgroup"
# $1: the container id, $2: the file's name, $3: the value. Finds the container's cgroup directory under
# the mount whatever the driver names it (cgroupfs: docker/<id>; systemd: system.slice/docker-<id>.scope),
# writes the value and prints what the kernel then holds.
BURST_SCRIPT = r"""
d=$(find "$0" -maxdepth 4 -type d -name "*$1*" 2>/dev/null | head -n 1)
[ -n "$d" ] || { echo "no cgroup directory named after container $1 under the host's cgroup mount" >&2; exit 2; }
[ -e "$d/$2" ] || { echo "$d has no $2: the kernel has no CFS burst" >&2; exit 3; }
echo "$3" > "$d/$2" || exit 4
cat "$d/$2"
"""


class KnobError(RuntimeError):
    """A knob the engine cannot apply; the message names the knob, the engine and why."""


def cgroup_version(info: Mapping[str, Any]) -> int:
    return 2 if str(info.get("CgroupVersion") or "1") == "2" else 1


def kernel_version(text: str) -> tuple[int, int] | None:
    match = re.match(r"(\d+)\.(\d+)", text or "")
    return (int(match[1]), int(match[2])) if match else None


def unprivileged_engine(info: Mapping[str, Any]) -> str | None:
    """'rootless' or 'userns' when the engine's root is not the host's root; None otherwise."""
    options = " ".join(str(option) for option in info.get("SecurityOptions") or [])
    for name in ("rootless", "userns"):
        if f"name={name}" in options:
            return name
    return None


def check_supported(info: Mapping[str, Any], condition: Condition, host: str) -> None:
    """Refuse, before anything is created, a knob the engine behind info (client.info()) cannot apply."""
    cpus = info.get("NCPU")
    if condition.cpuset is not None and cpus:
        missing = [cpu for cpu in cpuset_cpus(condition.cpuset) if cpu >= cpus]
        if missing:
            raise KnobError(
                f"{condition.id}: cpuset {condition.cpuset!r} names CPU {missing[0]}, host {host!r} "
                f"has CPUs 0-{cpus - 1}"
            )
    if condition.cpu_burst_pct is None:
        return
    kernel = kernel_version(str(info.get("KernelVersion") or ""))
    if kernel is not None and kernel < BURST_KERNEL:
        raise KnobError(
            f"{condition.id}: cpu_burst_pct needs Linux 5.14 or later (CFS burst); host {host!r} runs "
            f"{info.get('KernelVersion')}"
        )
    engine = unprivileged_engine(info)
    if engine is not None:
        raise KnobError(
            f"{condition.id}: cpu_burst_pct cannot be set on host {host!r}: its engine runs "
            f"{'rootless' if engine == 'rootless' else 'with user-namespace remapping'}, so no container "
            'it starts can write the host\'s cgroup files (docs/operations.md, "CFS burst"); measure '
            "burst on an engine that runs as root"
        )


def burst_file(info: Mapping[str, Any]) -> tuple[str, str]:
    """(host directory to mount, file name) of the CFS burst on this engine's cgroup version."""
    if cgroup_version(info) == 2:
        return "/sys/fs/cgroup", "cpu.max.burst"
    return "/sys/fs/cgroup/cpu", "cpu.cfs_burst_us"


def helper_options(info: Mapping[str, Any]) -> dict[str, Any]:
    """containers.run() keyword arguments of the burst helper: the host's cgroup mount and nothing else."""
    source, _ = burst_file(info)
    return {
        "volumes": {source: {"bind": HELPER_MOUNT, "mode": "rw"}},
        "network_mode": "none",
        "privileged": False,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "read_only": True,
    }


def helper_command(info: Mapping[str, Any], container_id: str, burst_us: int) -> list[str]:
    """The helper's arguments to sh (its entrypoint)."""
    _, name = burst_file(info)
    return ["-c", BURST_SCRIPT, HELPER_MOUNT, container_id, name, str(burst_us)]


def task_cpu_options(condition: Condition) -> dict[str, Any]:
    """containers.run() keyword arguments for the task's CPU: the article's --cpus, or the knobs' flags."""
    options: dict[str, Any] = {}
    if not condition.cpu_quota:
        options["cpu_shares"] = condition.cpu_shares
    elif condition.cpu_period_ms is None:
        options["nano_cpus"] = round(condition.vcpu * 1e9)
    else:
        # --cpu-period/--cpu-quota: Docker refuses them together with --cpus.
        options["cpu_period"] = condition.period_us
        options["cpu_quota"] = condition.quota_us
    if condition.cpuset is not None:
        options["cpuset_cpus"] = condition.cpuset
    return options


def runtime_environment(condition: Condition) -> dict[str, str]:
    """The app runtimes' settings the condition asks for, as environment variables of the task."""
    env = {}
    if condition.gomaxprocs is not None:
        env["GOMAXPROCS"] = str(condition.gomaxprocs)
    if condition.uv_threadpool_size is not None:
        env["UV_THREADPOOL_SIZE"] = str(condition.uv_threadpool_size)
    if condition.node_semi_space_mb is not None:
        env["NODE_OPTIONS"] = f"--max-semi-space-size={condition.node_semi_space_mb}"
    return env


# Read in the task once its roles file is there: the app process's own environment, as the kernel holds it.
APP_ENV_SCRIPT = r"""
while read -r role pid; do
  [ "$role" = app ] || continue
  tr '\0' '\n' < "/proc/$pid/environ" | grep -E '^(GOMAXPROCS|UV_THREADPOOL_SIZE|NODE_OPTIONS)=' || true
done < "$1"
"""


def parse_app_env(text: str) -> dict[str, str]:
    env = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep:
            env[name] = value
    return env

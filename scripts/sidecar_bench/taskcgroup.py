"""The task topology: a task cgroup with the quota and the memory limit, one container per role under it.

ECS (its agent's task_linux.go) makes a cgroup per task with the task's CPU quota (or shares without a task
cpu) and memory limit, and creates every container of the task under it (Docker CgroupParent) with CPUShares
= the container's cpu units (2 when unset) and no limit of its own. This module builds the same on a Docker
engine, through the engine only, so that a remote engine works as the local one:

1. a *reader* container starts first, outside the task cgroup, with the host's cgroup file system mounted
   read-only. It carries the task cgroup's name as a label: whatever happens from then on (SIGKILL of the
   workflow, an engine restart), the sweep finds the name on it and removes the cgroup (sweep()). The runner
   reads every cgroup file of the run through it, outside the task's own CPU;
2. a short-lived *setup* helper mounts the host's cgroup file system read-write, creates the task cgroup
   (cgroup v1: in the cpu, cpuacct and memory hierarchies; v2: one directory) and writes the quota and period
   (or no quota and shares of vcpu x 1024), the burst, and the memory limit without swap, then prints what the
   kernel holds;
3. the app container (the image's entrypoint with no sidecar; it holds the network namespace, "none": loopback
   only) and one container per sidecar (the sidecar script, in the app's network namespace, as an awsvpc
   task's containers share one), each created with CgroupParent = the task cgroup and its role's CPU shares;
4. at the end every container is removed, then a *remove* helper removes the task cgroup's directories.

What the helpers need on the engine's machine is what the CFS burst's helper needs (docs/operations.md,
"CFS burst"): the host's cgroup file system mounted read-write and uid 0 that is the host's root, no
capability. Refused before anything runs: a rootless engine or one with user-namespace remapping (no write to
the host's cgroups), and the systemd cgroup driver (its CgroupParent must be a systemd slice, which only
systemd may create; not built here).
"""

from __future__ import annotations

import logging
from typing import Any, Iterable, Mapping

from .conditions import Condition
from .knobs import HELPER_MOUNT, KnobError, cgroup_version, unprivileged_engine
from .labels import PART_LABEL, PROJECT, PROJECT_LABEL

log = logging.getLogger(__name__)

NAME_PREFIX = "sidecar-bench-task-"
V1_CONTROLLERS = ("cpu", "cpuacct", "memory")


# Under Docker's own parent cgroup (the cgroupfs driver's /docker): its directories are root's with mode 0755,
# so uid 0 creates a child without a capability; the hierarchy's root is mode 0555 and would need
# CAP_DAC_OVERRIDE. dockerd creates /docker with its first container; the reader starts before the setup.
PARENT = "docker"


def cgroup_name(run_id: str) -> str:
    """The task cgroup's path under each hierarchy's root, e.g. docker/sidecar-bench-task-0123456789ab."""
    return f"{PARENT}/{NAME_PREFIX}{run_id[:12]}"


def check_supported(info: Mapping[str, Any], condition: Condition, host: str) -> None:
    """Refuse the task topology, before anything is created, where its mechanism cannot work."""
    if condition.topology != "task":
        return
    engine = unprivileged_engine(info)
    if engine is not None:
        raise KnobError(
            f"{condition.id}: topology task cannot be built on host {host!r}: its engine runs "
            f"{'rootless' if engine == 'rootless' else 'with user-namespace remapping'}, so no container "
            'it starts can create the task cgroup (docs/operations.md, "The task topology")'
        )
    driver = str(info.get("CgroupDriver") or "cgroupfs")
    if driver != "cgroupfs":
        raise KnobError(
            f"{condition.id}: topology task needs the cgroupfs cgroup driver; host {host!r} uses {driver} "
            "(its task cgroup would have to be a systemd slice, which is not built here: "
            'docs/operations.md, "The task topology")'
        )


def mount_options(read_only: bool) -> dict[str, Any]:
    """containers.run() keyword arguments of a container that sees the host's whole cgroup file system."""
    return {
        "volumes": {"/sys/fs/cgroup": {"bind": HELPER_MOUNT, "mode": "ro" if read_only else "rw"}},
        "network_mode": "none",
        "privileged": False,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "read_only": True,
    }


def settings(condition: Condition) -> list[tuple[str, str, str]]:
    """(controller, file, value) to write into the task cgroup, in order, for cgroup v1; the controller is
    the v1 hierarchy (v2 has one, see settings_v2)."""
    memory = str(condition.memory_mb * 2**20)
    rows = [
        ("cpu", "cpu.cfs_quota_us", "-1"),
        ("cpu", "cpu.cfs_period_us", str(condition.period_us)),
    ]
    if condition.cpu_quota:
        rows.append(("cpu", "cpu.cfs_quota_us", str(condition.quota_us)))
        if condition.cpu_burst_pct is not None:
            rows.append(("cpu", "cpu.cfs_burst_us", str(condition.burst_us)))
    else:
        rows.append(("cpu", "cpu.shares", str(condition.cpu_shares)))
    rows += [
        ("memory", "memory.limit_in_bytes", memory),
        ("memory", "memory.memsw.limit_in_bytes?", memory),
    ]
    return rows


def settings_v2(condition: Condition) -> list[tuple[str, str, str]]:
    memory = str(condition.memory_mb * 2**20)
    if condition.cpu_quota:
        rows = [("-", "cpu.max", f"{condition.quota_us} {condition.period_us}")]
        if condition.cpu_burst_pct is not None:
            rows.append(("-", "cpu.max.burst", str(condition.burst_us)))
    else:
        # cpu.weight from shares as the kernel's own conversion (1 + (shares - 2) * 9999 / 262142).
        weight = 1 + ((condition.cpu_shares - 2) * 9999) // 262142
        rows = [("-", "cpu.max", f"max {condition.period_us}"), ("-", "cpu.weight", str(weight))]
    return rows + [("-", "memory.max", memory), ("-", "memory.swap.max?", "0")]


# $0 the mount, $1 the task cgroup's name, $2 the cgroup version, then "controller file value" triples.
# A file ending in "?" is written only if the kernel has it (swap accounting may be off). Every value is read
# back and printed as "controller file value".
SETUP_SCRIPT = r"""
set -e
mount=$0 name=$1 version=$2; shift 2
if [ "$version" = 2 ]; then
  mkdir -p "$mount/$name"
  for c in cpu memory; do echo "+$c" > "$mount/$name/cgroup.subtree_control" 2>/dev/null || true; done
else
  for c in cpu cpuacct memory; do mkdir -p "$mount/$c/$name"; done
fi
while [ $# -ge 3 ]; do
  c=$1 f=$2 v=$3; shift 3
  if [ "$version" = 2 ]; then d="$mount/$name"; else d="$mount/$c/$name"; fi
  case "$f" in *\?) f=${f%\?}; [ -e "$d/$f" ] || continue;; esac
  echo "$v" > "$d/$f"
  echo "$c $f $(cat "$d/$f")"
done
"""

# $0 the mount, then names: remove each task cgroup's directories in every hierarchy, children first (a
# container's own cgroup that runc left behind). A cgroup that still has processes cannot be removed: said
# on stderr, exit 1.
REMOVE_SCRIPT = r"""
mount=$0; status=0
for name in "$@"; do
  for d in "$mount/$name" "$mount"/*/"$name"; do
    [ -d "$d" ] || continue
    for c in "$d"/*/; do [ -d "$c" ] && { rmdir "$c" || status=1; }; done
    rmdir "$d" || status=1
  done
done
exit $status
"""

# $0 the mount, $1 the task cgroup's name, $2 the version, then "role container-id" pairs. The task cgroup's
# files under the names the task's own snapshot uses (cgroup.SNAPSHOT_SCRIPT), so that cgroup.parse_snapshot
# reads them; then each role's container: where its cgroup is, its usage (ns) and its shares or weight.
READ_SCRIPT = r"""
mount=$0 name=$1 version=$2; shift 2
show() { [ -r "$2" ] || return 0; echo "@@file $1"; while IFS= read -r l || [ -n "$l" ]; do echo "$l"; done < "$2"; }
if [ "$version" = 2 ]; then
  t="$mount/$name"
  for f in cpu.stat cpu.max memory.peak memory.max memory.swap.max cpu.max.burst cpu.weight memory.events; do
    show "/sys/fs/cgroup/$f" "$t/$f"
  done
else
  show /sys/fs/cgroup/cpu/cpu.stat "$mount/cpu/$name/cpu.stat"
  show /sys/fs/cgroup/cpuacct/cpuacct.usage "$mount/cpuacct/$name/cpuacct.usage"
  for f in cpu.cfs_quota_us cpu.cfs_period_us cpu.cfs_burst_us cpu.shares; do
    show "/sys/fs/cgroup/cpu/$f" "$mount/cpu/$name/$f"
  done
  for f in memory.max_usage_in_bytes memory.limit_in_bytes memory.memsw.limit_in_bytes memory.oom_control; do
    show "/sys/fs/cgroup/memory/$f" "$mount/memory/$name/$f"
  done
fi
while [ $# -ge 2 ]; do
  role=$1 id=$2; shift 2
  usage= weight=
  if [ "$version" = 2 ]; then
    d="$mount/$name/$id"
    usage=; while read -r k v; do [ "$k" = usage_usec ] && usage=${v}000; done < "$d/cpu.stat"
    read -r weight < "$d/cpu.weight"
  else
    d="$mount/cpu/$name/$id"
    read -r usage < "$mount/cpuacct/$name/$id/cpuacct.usage"
    read -r weight < "$d/cpu.shares"
  fi
  echo "@@role $role $usage $weight"
done
echo "@@clk_tck $(getconf CLK_TCK 2>/dev/null || echo 100)"
while IFS= read -r l; do
  case "$l" in cpu*) echo "@@cpu $l";; *) break;; esac
done < /proc/stat
show /proc/uptime /proc/uptime
echo "@@end"
"""


def setup_command(info: Mapping[str, Any], name: str, condition: Condition) -> list[str]:
    """The setup helper's arguments to sh."""
    version = cgroup_version(info)
    rows = settings_v2(condition) if version == 2 else settings(condition)
    return ["-c", SETUP_SCRIPT, HELPER_MOUNT, name, str(version)] + [
        part for row in rows for part in row
    ]


def parse_setup(text: str) -> dict[str, str]:
    """The setup helper's output -> {file: value as the kernel holds it}."""
    found = {}
    for line in text.splitlines():
        parts = line.split(None, 2)
        if len(parts) == 3:
            found[parts[1]] = parts[2]
    return found


def check_setup(condition: Condition, version: int, found: Mapping[str, str]) -> None:
    """Fail unless the kernel holds every value the setup wrote (the last write of a file wins)."""
    expected: dict[str, str] = {}
    for _, name, value in settings_v2(condition) if version == 2 else settings(condition):
        expected[name.rstrip("?")] = value
    for name, value in expected.items():
        if name not in found and name in ("memory.memsw.limit_in_bytes", "memory.swap.max"):
            continue  # no swap accounting in this kernel: nothing to limit
        if found.get(name, "").split() != value.split():
            raise KnobError(
                f"{condition.id}: the task cgroup's {name} is {found.get(name)!r} after writing "
                f"{value!r}"
            )


def read_command(info: Mapping[str, Any], name: str, containers: Mapping[str, str]) -> list[str]:
    args = [HELPER_MOUNT, name, str(cgroup_version(info))]
    for role, container_id in containers.items():
        args += [role, container_id]
    return ["sh", "-c", READ_SCRIPT, *args]


def parse_roles(text: str) -> dict[str, tuple[int, int]]:
    """READ_SCRIPT's @@role lines -> {role: (usage ns, shares or weight)}."""
    roles = {}
    for line in text.splitlines():
        if line.startswith("@@role "):
            parts = line.split()
            if len(parts) != 4 or not parts[2].isdigit() or not parts[3].isdigit():
                raise KnobError(
                    f"the task cgroup reader's line {line!r} is not '@@role ROLE USAGE WEIGHT': a "
                    "container's cgroup is not under the task cgroup"
                )
            roles[parts[1]] = (int(parts[2]), int(parts[3]))
    return roles


def expected_weight(condition: Condition, role: str, version: int) -> int:
    shares = condition.role_shares(role)
    return shares if version == 1 else 1 + ((shares - 2) * 9999) // 262142


def remove_cgroups(client: Any, image: str, names: Iterable[str]) -> bool:
    """Remove task cgroups (after their containers) with a short-lived helper; True when they are gone.

    On failure it logs and returns False: the caller keeps the reader container that names the cgroup, so
    that the next sweep tries again."""
    import docker.errors
    import requests.exceptions

    names = sorted(set(names))
    if not names:
        return True
    try:
        client.containers.run(
            image,
            entrypoint=["sh"],
            command=["-c", REMOVE_SCRIPT, HELPER_MOUNT, *names],
            remove=True,
            stdout=True,
            stderr=True,
            labels={PROJECT_LABEL: PROJECT, PART_LABEL: "cgroup-remove"},
            **mount_options(read_only=False),
        )
    except docker.errors.ContainerError as err:
        log.error(
            "could not remove task cgroup(s) %s: %s; the next sweep on this engine tries again",
            ", ".join(names),
            (err.stderr or b"").decode(errors="replace").strip()[:300],
        )
        return False
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as err:
        log.error(
            "could not remove task cgroup(s) %s (%s: %s); the next sweep on this engine tries again",
            ", ".join(names),
            type(err).__name__,
            err,
        )
        return False
    log.info("removed task cgroup(s) %s", ", ".join(names))
    return True

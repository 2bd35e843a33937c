"""The containers of a run: their labels and names, how they are confined, the watcher that ends them
with the runner, the execs the runner runs in them, and their removal.

The measurement itself (runner.py) starts them and reads through them; job.py and scripts/cleanup.py
find a run's leftovers by these labels.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Mapping

import docker
import docker.errors
import requests.exceptions

from .conditions import Condition

# Every container of a run carries these labels (their keys in labels.py): a run's leftovers, and every
# sidecar-bench container on an engine, are found by them (job.remove_stale_containers, scripts/cleanup.py).
from .labels import CONDITION_LABEL, PART_LABEL, PROJECT, PROJECT_LABEL, RUN_LABEL

log = logging.getLogger(__name__)

# PID 1 of the task (and of the task topology's containers), around the image's own entrypoint ("$@"); the load
# generator's PID 1 is channel.SERVER, which ends the same way and also runs the runner's steps. It ends the
# container when that command ends (with its status), when stdin ends, or at the deadline $1 (status 137),
# whichever comes first. The runner attaches to the container's stdin before starting it (StdinOnce) and
# holds the connection for the run; when the runner ends, even by kill -9, the connection closes, the
# engine closes stdin, PID 1 exits and the kernel kills every other process of the container's PID
# namespace: the app, its sidecars, hey. The image is not changed (its digest decides reruns); signals
# (docker stop, docker kill -s INT) are passed on to the command; the watcher waits in read(2) and wait(2)
# and costs the task's cgroup no CPU until its stdin ends or the deadline passes.
WATCH_SCRIPT = r"""
deadline=$1; shift
stop=
trap 'stop=1' USR1
exec 3<&0 </dev/null
# Without job control bash starts a background command with SIGINT and SIGQUIT ignored, and a
# signal ignored at exec cannot be caught: they are set back first, so that INT reaches the app.
( trap - INT QUIT; exec "$@" 3<&- ) &
main=$!
(
  end=$((SECONDS + deadline))
  while left=$((end - SECONDS)); [ "$left" -gt 0 ] && read -r -t "$left" _; do :; done
  # stdin ended or the deadline passed. A signal that comes just before the watcher's wait begins
  # does not interrupt it, so the signal is sent again every second until the watcher has gone.
  while kill -USR1 "$$" 2>/dev/null; do sleep 1; done
) <&3 3<&- &
exec 3<&-
trap 'kill -TERM "$main" 2>/dev/null' TERM
trap 'kill -INT "$main" 2>/dev/null' INT
trap 'kill -HUP "$main" 2>/dev/null' HUP
# A plain wait on a pid returns its status even when it ended before the wait began (wait -n can
# then miss it: "no such job"), and returns early, with status > 128, when a trapped signal comes.
ended() { ! kill -0 "$main" 2>/dev/null; }
while :; do
  ended && { wait "$main"; exit; }
  [ -n "$stop" ] && exit 137
  wait "$main"
done
"""
WATCH_NAME = "sidecar-bench-watch"


def watched(deadline_s: int, command: list[str]) -> list[str]:
    """An entrypoint that runs command under WATCH_SCRIPT: it ends at the deadline or with the runner."""
    return ["bash", "-c", WATCH_SCRIPT, WATCH_NAME, str(deadline_s), *command]


# What talking to an engine can raise besides the SDK's own errors: requests' errors for a
# local or tcp:// engine (connection refused, reset, timed out), paramiko's for ssh:// (its
# SSHException), OSError for sockets and pipes. The clean-up catches them all, so that a
# failure to remove one container never skips the next one.
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    docker.errors.DockerException,
    requests.exceptions.RequestException,
    OSError,
)
try:
    import paramiko

    TRANSPORT_ERRORS += (paramiko.SSHException,)
except ImportError:  # no ssh:// support installed: nothing of paramiko's can be raised
    pass


# How the task and the load generator are confined (docs/operations.md, "Security"). Set at container
# creation only: the images stay as built, so stored runs keep their meaning.
# - No capability at all: the processes run as root inside the container, but root without
#   capabilities is an ordinary user towards the kernel. Nothing here needs one: the apps bind
#   port 8080 (above 1023), the entrypoint signals only its own children (same user), and the
#   snapshots read /proc, /sys/fs/cgroup and their own files, all readable without privilege.
# - no-new-privileges: no setuid binary or file capability can raise them again.
# - Read-only root file system; tmpfs only where something writes (found with `docker diff`
#   after real runs of every variant): the entrypoint's roles file under /run, hey's CSV under
#   the load generator's /tmp, and a small /tmp in the task for anything an app might spill.
#   A tmpfs is memory: in the task it counts against the condition's memory limit, so it is
#   kept small; the load generator has no memory limit and hey's CSV reaches ~70 MB at its
#   1,000,000-row cap.
# - Not privileged, no published port, no network but loopback ("none" for the task, the
#   task's namespace for the load generator).
CAP_ADD: tuple[str, ...] = ()
SECURITY_OPT = ("no-new-privileges:true",)
TASK_TMPFS = {"/run": "rw,nosuid,nodev,noexec,size=1m", "/tmp": "rw,nosuid,nodev,noexec,size=16m"}
LOADGEN_TMPFS = {"/tmp": "rw,nosuid,nodev,noexec,size=256m"}


def hardening(tmpfs: Mapping[str, str]) -> dict[str, Any]:
    """containers.run() keyword arguments that confine a run's container (see the comment above)."""
    return {
        "privileged": False,
        "cap_drop": ["ALL"],
        "cap_add": list(CAP_ADD),
        "security_opt": list(SECURITY_OPT),
        "read_only": True,
        "tmpfs": dict(tmpfs),
        "publish_all_ports": False,
        "ports": {},
    }


@dataclass(frozen=True)
class ExecResult:
    exit_code: int
    stdout: str
    stderr: str


def exec_in(client: docker.DockerClient, container_id: str, cmd: list[str]) -> ExecResult:
    """Run cmd in a running container, wait, and return its exit code and output."""
    created = client.api.exec_create(container_id, cmd, stdout=True, stderr=True)
    stdout, stderr = client.api.exec_start(created["Id"], demux=True)
    code = client.api.exec_inspect(created["Id"])["ExitCode"]
    return ExecResult(
        code if code is not None else -1,
        (stdout or b"").decode(errors="replace"),
        (stderr or b"").decode(errors="replace"),
    )


def container_name(condition: Condition, run_id: str, part: str) -> str:
    return f"sidecar-bench-{condition.id}-{run_id[:12]}-{part}"


def labels(condition: Condition, run_id: str, part: str) -> dict[str, str]:
    return {
        PROJECT_LABEL: PROJECT,
        CONDITION_LABEL: condition.id,
        RUN_LABEL: run_id,
        PART_LABEL: part,
    }


def remove_container(container: Any) -> bool:
    """Force-remove one container; log, never raise, so that one failure cannot keep the others. True when it
    is gone (removed now or already)."""
    name = getattr(container, "name", None) or getattr(container, "id", "?")
    try:
        container.remove(force=True)
        log.info("removed container %s", name)
    except docker.errors.NotFound:
        pass
    except TRANSPORT_ERRORS as err:
        log.error(
            "could not remove container %s (%s: %s); it carries the label %s and is removed by the next "
            "run on this engine",
            name,
            type(err).__name__,
            err,
            RUN_LABEL,
        )
        return False
    return True


def engine_address(client: docker.DockerClient) -> str:
    """The engine's address as a user would write DOCKER_HOST (the SDK shows a local socket as http+docker://)."""
    base = client.api.base_url
    if base.startswith("http+docker://"):
        return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    return base

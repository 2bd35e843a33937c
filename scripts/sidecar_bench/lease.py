"""The measurement lease: held on the Docker engine itself, and on the machine behind it.

A lease is a container named ``sidecar-bench-lease`` (container names are unique per
engine, so creating it is atomic: of two clients, one gets a name conflict). Its labels
say who holds it (client host, pid, user, checkout, what it does) and since when. Its
lifetime is tied to the holder:

- the holder attaches to the container's stdin (``stdin_once``) before starting it; when
  the holder process ends, even by ``kill -9``, the connection closes, stdin ends, the
  container exits and the engine removes it (``auto_remove``);
- the holder writes a heartbeat line every HEARTBEAT_S seconds; a holder that stops
  (a frozen process, a half-open connection) loses the lease after IDLE_S seconds;
- ``timeout`` ends it after max_hold_s whatever happens.

Two engines on one machine (or in one VM) share a kernel and a file system: the lease
container bind-mounts the host directory HOST_DIR and holds ``flock`` on a file there for
its whole life, so only one engine of a machine measures at a time. The lease also reads
the machine's boot id (/proc/sys/kernel/random/boot_id is the host kernel's) and writes
its holder into HOST_DIR/holder, so a waiter on the other engine can say who holds it.

A lease container that is not running (created by a holder that died before starting it,
or exited but not removed because the engine stopped) is stale: it is removed, by id, so
a fresh lease another client created meanwhile is never touched.

A workflow may hold its engines' leases for all its jobs (engine_hold.py): it names them in
the environment its jobs inherit (WORKFLOW_ENV), and a job whose engine's lease carries one of
those ids works under it (borrow) instead of taking one of its own.
"""

from __future__ import annotations

import getpass
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping

import docker
import docker.errors
from docker.utils import socket as docker_socket

from .labels import LEASE_LABEL
from .labels import LEASE_PREFIX as LABEL_PREFIX

log = logging.getLogger(__name__)

LEASE_NAME = "sidecar-bench-lease"
# The host directory shared by every engine of one machine (tmpfs: gone with a reboot).
HOST_DIR = "/run/sidecar-bench"
HEARTBEAT_S = 5.0
IDLE_S = 60
DEFAULT_MAX_HOLD_S = 2 * 3600
# {engine id: lease id} of the leases the workflow holds for its jobs (engine_hold.py), as JSON.
WORKFLOW_ENV = "SIDECAR_BENCH_WORKFLOW_LEASES"
# A lease container still "created" this long after its creation was left by a holder that died
# between create and start.
CREATED_GRACE_S = 30.0
# Debian images with bash, flock and timeout, in order of preference; the load generator's is
# built on every engine before any run. Nothing is pulled.
LEASE_IMAGES = (
    "sidecar-bench/loadgen:latest",
    "sidecar-bench/debian-minbase:bookworm",
    "debian:bookworm-slim",
    "debian:bookworm",
)

# Inside the lease container: take the machine lock or say who has it, then live as long as
# stdin brings heartbeats. $1: idle seconds.
SCRIPT = r"""
exec 9>>/lease/machine.lock
boot=$(cat /proc/sys/kernel/random/boot_id)
if ! flock -n 9; then
  echo "busy $boot $(cat /lease/holder 2>/dev/null)"
  exit 3
fi
printf '%s\n' "$HOLDER" > /lease/holder.tmp && mv -f /lease/holder.tmp /lease/holder
echo "held $boot"
while read -r -t "$1" _; do :; done
"""


class LeaseBusy(Exception):
    """Someone else holds the lease; str() says who and since when."""

    def __init__(self, holder: str, since: str | None = None, key: str | None = None) -> None:
        self.holder = holder
        self.since = since
        # The same holder and start: one waiting message, not one per poll.
        self.key = key or holder
        super().__init__(f"held by {holder}" + (f" since {since}" if since else ""))


class LeaseUnavailable(Exception):
    """The engine has no image to run a lease container in."""


def holder_labels(what: str, lease_id: str, max_hold_s: float) -> dict[str, str]:
    try:
        user = getpass.getuser()
    except Exception:  # any failure: no user name in a container without a passwd entry
        user = str(os.getuid())
    return {
        LEASE_LABEL: lease_id,
        LABEL_PREFIX + "host": socket.gethostname(),
        LABEL_PREFIX + "pid": str(os.getpid()),
        LABEL_PREFIX + "user": user,
        LABEL_PREFIX + "checkout": os.getcwd(),
        LABEL_PREFIX + "what": what,
        LABEL_PREFIX + "started": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        LABEL_PREFIX + "max-s": str(int(max_hold_s)),
    }


def describe_labels(labels: Mapping[str, str]) -> str:
    """`root@lab1 pid 4242 in /home/x/sidecar-bench (go_cpu0.5_... rep 1)`."""

    def get(key: str) -> str:
        return labels.get(LABEL_PREFIX + key, "?")

    return f"{get('user')}@{get('host')} pid {get('pid')} in {get('checkout')} ({get('what')})"


def since_labels(labels: Mapping[str, str]) -> str | None:
    started = labels.get(LABEL_PREFIX + "started")
    if not started:
        return None
    try:
        age = (
            time.time()
            - datetime.strptime(started, "%Y-%m-%dT%H:%M:%SZ")
            .replace(tzinfo=timezone.utc)
            .timestamp()
        )
    except ValueError:
        return started
    return f"{started} ({_age(age)} ago)"


def _age(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def lease_image(client: docker.DockerClient) -> str:
    for ref in LEASE_IMAGES:
        try:
            return client.images.get(ref).id
        except docker.errors.ImageNotFound:
            continue
    raise LeaseUnavailable(f"none of {', '.join(LEASE_IMAGES)} is on the engine")


def _created_age(container: Any) -> float:
    created = container.attrs.get("Created", "")
    try:
        # 2026-12-01T03:04:05.123456789Z: keep seconds.
        stamp = datetime.strptime(created[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=timezone.utc)
    except ValueError:
        return 0.0
    return time.time() - stamp.timestamp()


def stale_reason(container: Any) -> str | None:
    """Why an existing lease container is stale, or None while it is alive."""
    state = container.attrs.get("State", {})
    status = state.get("Status") or container.status
    if status in ("exited", "dead"):
        return f"its container {status} (exit code {state.get('ExitCode')}) without being removed"
    if status == "created" and _created_age(container) > CREATED_GRACE_S:
        return f"created {_age(_created_age(container))} ago and never started: its holder died before starting it"
    if status == "running":
        labels = container.labels or {}
        max_s = float(labels.get(LABEL_PREFIX + "max-s", DEFAULT_MAX_HOLD_S))
        if _created_age(container) > max_s + 2 * IDLE_S:
            return f"running past its deadline of {max_s:g} s"
    return None


def current(client: docker.DockerClient) -> Any | None:
    """The engine's lease container, or None."""
    try:
        return client.containers.get(LEASE_NAME)
    except docker.errors.NotFound:
        return None


def break_if_stale(client: docker.DockerClient, container: Any) -> str | None:
    """Remove the lease container if it is stale (by id: never a newer lease); the reason, or None."""
    reason = stale_reason(container)
    if reason is None:
        return None
    log.warning(
        "breaking the stale lease of %s on this engine: %s",
        describe_labels(container.labels or {}),
        reason,
    )
    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as err:
        if err.status_code != 409:  # removal already in progress
            raise
    return reason


@dataclass
class Lease:
    """A lease this process holds; release() (or the process's end) gives it back."""

    client: docker.DockerClient
    container: Any
    sock: Any
    lease_id: str
    boot_id: str
    labels: dict[str, str]
    interval_s: float = HEARTBEAT_S
    owns_client: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _heartbeat(self) -> None:
        raw = getattr(self.sock, "_sock", self.sock)
        while not self._stop.wait(self.interval_s):
            try:
                raw.sendall(b".\n")
            except OSError as err:
                log.warning("lease heartbeat failed: %s", err)
                return

    def alive(self) -> bool:
        try:
            self.container.reload()
        except docker.errors.NotFound:
            return False
        return self.container.status == "running"

    def release(self) -> None:
        self._stop.set()
        try:
            self.container.remove(force=True)
        except docker.errors.NotFound:
            pass
        except (
            Exception
        ) as err:  # any failure: the engine may be gone; stdin closing ends the lease anyway
            log.warning("removing lease container %s failed: %s", LEASE_NAME, err)
        try:
            self.sock.close()
        except Exception:  # any failure: the socket is of no use any more
            pass
        if self.owns_client:
            self.client.close()


@dataclass
class Borrowed:
    """A job's use of the lease its workflow holds: the workflow gives it back, not the job."""

    container: Any
    lease_id: str

    def release(self) -> None:
        """Nothing to give back: the lease lives as long as the workflow's process."""


def workflow_leases() -> dict[str, str]:
    """{engine id: lease id} of the leases this process's workflow holds for it (WORKFLOW_ENV), or {}."""
    try:
        value = json.loads(os.environ.get(WORKFLOW_ENV) or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def borrow(client: docker.DockerClient, engine_id: str) -> Borrowed | None:
    """The workflow's lease on this engine, if it holds one and it is alive (one API request); else None."""
    lease_id = workflow_leases().get(engine_id)
    if not lease_id:
        return None
    container = current(client)
    if container is None or (container.labels or {}).get(LEASE_LABEL) != lease_id:
        log.info("the workflow's lease on this engine is gone: this job takes one of its own")
        return None
    if container.status != "running" or stale_reason(container) is not None:
        return None
    return Borrowed(container, lease_id)


def _read_line(sock: Any, timeout: float) -> str:
    """The first line the lease container writes (stdout or stderr frames), within timeout."""
    raw = getattr(sock, "_sock", sock)
    if hasattr(raw, "settimeout"):
        raw.settimeout(timeout)
    data = b""
    try:
        while b"\n" not in data:
            stream, size = docker_socket.next_frame_header(sock)
            if size < 0:
                break
            data += docker_socket.read_exactly(sock, size)
    finally:
        if hasattr(raw, "settimeout"):
            raw.settimeout(None)
    return data.decode(errors="replace").split("\n", 1)[0]


def try_acquire(
    client: docker.DockerClient,
    what: str,
    max_hold_s: float = DEFAULT_MAX_HOLD_S,
    image: str | None = None,
) -> Lease:
    """Take the engine's lease now, or raise LeaseBusy naming the holder (LeaseUnavailable: no image)."""
    image = image or lease_image(client)
    lease_id = uuid.uuid4().hex
    labels = holder_labels(what, lease_id, max_hold_s)
    for attempt in (1, 2):
        try:
            host_config = client.api.create_host_config(
                auto_remove=True,
                network_mode="none",
                binds={HOST_DIR: {"bind": "/lease", "mode": "rw"}},
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                mem_limit="32m",
                nano_cpus=100_000_000,
            )
            created = client.api.create_container(
                image,
                name=LEASE_NAME,
                labels=labels,
                entrypoint=[
                    "timeout",
                    "-s",
                    "KILL",
                    str(int(max_hold_s)),
                    "bash",
                    "-c",
                    SCRIPT,
                    "lease",
                    str(IDLE_S),
                ],
                environment={
                    "HOLDER": f"{describe_labels(labels)} since {labels[LABEL_PREFIX + 'started']}"
                },
                stdin_open=True,
                detach=False,
                host_config=host_config,
            )  # not detached + stdin_open: StdinOnce
            container = client.containers.get(created["Id"])
            break
        except docker.errors.APIError as err:
            if err.status_code != 409:
                raise
            existing = current(client)
            if existing is None:
                continue  # removed meanwhile: try once more
            if attempt == 1 and break_if_stale(client, existing):
                continue
            labels_there = existing.labels or {}
            raise LeaseBusy(
                describe_labels(labels_there),
                since_labels(labels_there),
                labels_there.get(LEASE_LABEL),
            ) from None
    else:
        raise LeaseBusy("another client (the lease container appeared and went during the attempt)")
    sock = None
    try:
        sock = client.api.attach_socket(
            container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
        )
        container.start()
        line = _read_line(sock, 30)
    except BaseException:
        _discard(container, sock)
        raise
    if line.startswith("held "):
        lease = Lease(
            client,
            container,
            sock,
            lease_id,
            line.split()[1],
            labels,
            interval_s=min(HEARTBEAT_S, IDLE_S / 3),
        )
        lease._thread = threading.Thread(
            target=lease._heartbeat, name="sidecar-bench-lease", daemon=True
        )
        lease._thread.start()
        return lease
    _discard(container, sock)
    if line.startswith("busy "):
        _, boot, *holder = line.split(" ", 2)
        text = holder[0] if holder and holder[0] else "unknown"
        raise LeaseBusy(f"another engine of this machine (boot id {boot}): {text}")
    raise RuntimeError(f"the lease container said {line!r} instead of taking the lease")


def _discard(container: Any, sock: Any) -> None:
    try:
        container.remove(force=True)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as err:
        if err.status_code == 409 and "already in progress" in str(err):
            return  # the engine is removing it already (auto-remove on exit)
        log.warning("removing lease container failed: %s", err)
    except Exception as err:  # any other failure (the engine may be gone): logged, never raised
        log.warning("removing lease container failed: %s", err)
    if sock is not None:
        try:
            sock.close()
        except Exception:  # any failure: the socket is of no use any more
            pass


def status(client: docker.DockerClient) -> str:
    """One line: who holds the engine's lease, or that nobody does."""
    container = current(client)
    if container is None:
        return "free"
    labels = container.labels or {}
    reason = stale_reason(container)
    text = f"held by {describe_labels(labels)} since {since_labels(labels)}"
    return f"stale ({reason}): {text}" if reason else text

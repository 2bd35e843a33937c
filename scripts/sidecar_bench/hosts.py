"""Docker clients for the hosts of config.yaml: the local engine, ssh:// or tcp:// with TLS."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import stat
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

import docker
import docker.errors
import docker.tls
import requests

from . import lease

log = logging.getLogger(__name__)


def client_for(host: Mapping[str, Any] | None, timeout: float | None = None) -> docker.DockerClient:
    """A client for one `hosts` entry; url None means DOCKER_HOST or the local socket.

    ssh:// goes through paramiko, as the SDK's own transport does (it reads ~/.ssh/config,
    known_hosts, the ssh agent and the default keys), but over one SSH connection per
    process and address that every client shares (sshconn.py).
    """
    host = host or {}
    url = host.get("url")
    kwargs: dict[str, Any] = {}
    if timeout is not None:
        kwargs["timeout"] = int(timeout)
    if url is None and not os.environ.get("DOCKER_HOST", "").startswith("ssh://"):
        return docker.from_env(**kwargs)
    url = url or os.environ["DOCKER_HOST"]
    if url.startswith("ssh://"):
        from . import sshconn

        return sshconn.client(url, kwargs.get("timeout"))
    tls = host.get("tls")
    if tls:
        kwargs["tls"] = docker.tls.TLSConfig(
            client_cert=(tls["client_cert"], tls["client_key"]), ca_cert=tls["ca_cert"], verify=True
        )
    return docker.DockerClient(base_url=url, **kwargs)


def lock_dir() -> Path:
    """Where the per-engine local locks live: one place per machine and user, whatever the
    working directory, so that a test in a copy of the project and a matrix in the
    checkout never measure on one engine at once (the engine's lease covers other users
    and other machines)."""
    return Path(
        os.environ.get("SIDECAR_BENCH_LOCK_DIR")
        or Path(tempfile.gettempdir()) / f"sidecar-bench-locks-{os.getuid()}"
    )


class HostError(RuntimeError):
    """No configured Docker engine could be used; the message says which and why."""


def sanitize(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def _safe_lock_dir(path: Path) -> Path:
    """Create the lock directory (0700) and check it is ours: a real directory, not a symlink,
    owned by this user, writable by nobody else."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError as err:
        raise HostError(f"lock directory {path}: {err}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise HostError(
            f"lock directory {path} is not a directory (a symlink?): remove it or set SIDECAR_BENCH_LOCK_DIR"
        )
    if st.st_uid != os.getuid():
        raise HostError(
            f"lock directory {path} belongs to uid {st.st_uid}, not to you ({os.getuid()}): "
            "remove it or set SIDECAR_BENCH_LOCK_DIR"
        )
    if st.st_mode & 0o022:
        raise HostError(
            f"lock directory {path} is writable by others (mode {stat.S_IMODE(st.st_mode):o}): "
            "chmod go-w it or set SIDECAR_BENCH_LOCK_DIR"
        )
    return path


def _open_lock(path: Path) -> int:
    """The lock file, created 0600 if missing, never through a symlink, never truncated."""
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def _try_flock(path: Path) -> int | None:
    fd = _open_lock(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        os.close(fd)
        return None


def _write_holder(fd: int, text: str) -> None:
    """Under the lock: our description, for a waiter's message."""
    data = text.encode()
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))


class EngineGone(HostError):
    """The engine stopped answering while a job held it."""


@contextlib.contextmanager
def host_lock(
    hosts: list[Mapping[str, Any]],
    lock_dir: str | Path,
    timeout: float,
    describe: str,
    max_hold_s: float = lease.DEFAULT_MAX_HOLD_S,
    poll_s: float = 1.0,
    wait: bool = True,
) -> Iterator[tuple[Mapping[str, Any], docker.DockerClient]]:
    """Hold one engine exclusively: the first free one in order, else wait until one is free.

    Measurements and image builds take it, so nothing of ours runs on an engine (or on
    another engine of the same machine) while it measures, whatever Snakemake's --cores,
    the checkout or the machine Snakemake runs on. Two locks, in this order:

    - a local flock on <lock dir>/<engine id>.lock (cheap; orders the jobs of this machine);
    - the engine's lease (lease.py): a container on the engine whose life is tied to this
      process, holding a lock on the machine behind the engine; or the lease this process's
      workflow holds for its jobs (engine_hold.py), when it carries the id the workflow gave.

    While waiting it says who holds the engine and since when (wait=False: raises HostError
    with that instead of waiting). If the engine stops
    answering while the caller works, the caller's error becomes EngineGone, naming the host.
    """
    lock_dir = _safe_lock_dir(Path(lock_dir))
    candidates = []
    for host in hosts:
        try:
            client = client_for(host, timeout)
            engine_id = client.info()["ID"]
        except UNREACHABLE as err:
            log.warning(
                "Docker host %s (%s) is not reachable, skipping it: %s",
                host["name"],
                host.get("url"),
                err,
            )
            continue
        candidates.append((host, client, engine_id, lock_dir / f"{sanitize(engine_id)}.lock"))
    if not candidates:
        raise HostError(
            f"no Docker host is reachable: {', '.join(str(h['name']) for h in hosts)}; "
            "check hosts in config.yaml and that the engines run"
        )
    chosen = None
    told: set[str] = set()
    waited_since = None
    try:
        while chosen is None:
            busy = []
            for host, client, engine_id, path in candidates:
                fd = _try_flock(path)
                if fd is None:
                    text = f"{_holder(path)} (on this machine)"
                    busy.append((host, text, text))
                    continue
                try:
                    # The workflow's lease when it holds one for its jobs (engine_hold.py), else the job's own.
                    held = lease.borrow(client, engine_id) or _take_lease(
                        host, timeout, describe, max_hold_s
                    )
                except lease.LeaseBusy as err:
                    os.close(fd)
                    busy.append((host, str(err), err.key))
                    continue
                except BaseException:
                    os.close(fd)
                    raise
                chosen = (host, client, fd, held)
                break
            if chosen is None and not wait:
                raise HostError(
                    "; ".join(f"engine {h['name']} is busy: {why}" for h, why, _ in busy)
                )
            if chosen is None:
                waited_since = waited_since or time.monotonic()
                host, why, key = busy[0]
                if key not in told:
                    told.add(key)
                    message = (
                        f"waiting for engine {host['name']}: another measurement or build holds it: {why}"
                        + ("" if len(busy) == 1 else f" (and {len(busy) - 1} other engine(s))")
                    )
                    log.info("%s", message)
                    _tell(f"sidecar-bench: {message}")
                time.sleep(poll_s)
    except BaseException:
        for _, other, _, _ in candidates:
            other.close()
        raise
    host, client, fd, held = chosen
    log.info(
        "engine %s: %s",
        host["name"],
        "under the workflow's lease"
        if isinstance(held, lease.Borrowed)
        else "under this process's own lease"
        if held is not None
        else "under the local lock only (no lease image yet)",
    )
    if waited_since is not None:
        log.info(
            "got engine %s after waiting %.0f s", host["name"], time.monotonic() - waited_since
        )
    _write_holder(fd, describe)
    try:
        yield host, client
    except Exception as err:
        if not isinstance(err, HostError) and not _answers(client):
            raise EngineGone(
                f"Docker host {host['name']} ({host.get('url') or engine_label(client)}): the engine went "
                f"away in the middle of the job (it no longer answers): "
                f"{(str(err).splitlines() or [type(err).__name__])[0]}"
            ) from err
        raise
    finally:
        if held is not None:
            held.release()
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
        for _, other, _, _ in candidates:
            other.close()


# What an engine that cannot be reached raises: the SDK's errors, and the transports' own
# (requests, paramiko over ssh, plain sockets).
UNREACHABLE: tuple[type[BaseException], ...] = (
    docker.errors.DockerException,
    requests.exceptions.RequestException,
    OSError,
)
try:  # paramiko is only there with ssh support
    import paramiko

    UNREACHABLE = UNREACHABLE + (paramiko.SSHException,)
except ImportError:  # pragma: no cover
    pass


def _take_lease(
    host: Mapping[str, Any], timeout: float, describe: str, max_hold_s: float
) -> lease.Lease | None:
    """The engine's lease, through a client of its own: its attach holds an HTTP connection for the whole
    job, outside the job's own pool (over ssh:// a channel of the process's one SSH connection, which
    closes with the process, and with it the lease)."""
    client = client_for(host, timeout)
    try:
        held = lease.try_acquire(client, describe, max_hold_s)
    except lease.LeaseUnavailable as err:
        client.close()
        # Only before the first image exists on a new engine (the first base image build).
        log.warning(
            "no engine lease (%s): only the local lock guards this engine until an image exists",
            err,
        )
        return None
    except BaseException:
        client.close()
        raise
    held.owns_client = True
    return held


def _answers(client: docker.DockerClient, checks: int = 6, interval_s: float = 0.5) -> bool:
    """Whether the engine still answers a few pings over ~3 s: an engine being stopped first stops
    its containers (the job's error) and only then closes its socket."""
    client.api.timeout = 10
    for check in range(checks):
        try:
            client.ping()
        except Exception:  # any failure to answer is an answer
            return False
        if check < checks - 1:
            time.sleep(interval_s)
    return True


def engine_label(client: docker.DockerClient) -> str:
    base = client.api.base_url
    return (
        (os.environ.get("DOCKER_HOST") or "local socket")
        if base.startswith("http+docker://")
        else base
    )


def _tell(line: str) -> None:
    """A line on the terminal (the job's stderr is its log file)."""
    terminal = sys.__stderr__
    if terminal is not None:
        try:
            print(line, file=terminal, flush=True)
        except (OSError, ValueError):
            pass


def _holder(path: Path) -> str:
    """The local lock's holder as it wrote itself, and since when (the file's time: written on taking it)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return "holder unknown"
    try:
        text = os.read(fd, 4096).decode(errors="replace").strip() or "holder unknown"
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.fstat(fd).st_mtime))
        return f"{text} since {since}"
    finally:
        os.close(fd)

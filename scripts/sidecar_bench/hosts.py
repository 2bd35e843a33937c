"""Docker clients for the hosts of config.yaml: the local engine, ssh:// or tcp:// with TLS."""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

import docker
import docker.errors
import docker.tls

log = logging.getLogger("sidecar_bench.hosts")


def client_for(host: Mapping[str, Any] | None, timeout: float | None = None) -> docker.DockerClient:
    """A client for one `hosts` entry; url None means DOCKER_HOST or the local socket.

    ssh:// goes through the SDK's paramiko transport, which reads ~/.ssh/config,
    known_hosts, the ssh agent and the default keys.
    """
    host = host or {}
    url = host.get("url")
    kwargs: dict[str, Any] = {}
    if timeout is not None:
        kwargs["timeout"] = int(timeout)
    if url is None:
        return docker.from_env(**kwargs)
    tls = host.get("tls")
    if tls:
        kwargs["tls"] = docker.tls.TLSConfig(
            client_cert=(tls["client_cert"], tls["client_key"]), ca_cert=tls["ca_cert"], verify=True
        )
    return docker.DockerClient(base_url=url, **kwargs)


def lock_dir() -> Path:
    """Where the per-engine measurement locks live: one place per machine, whatever the
    working directory, so that a test in a copy of the project and a matrix in the
    checkout never measure on one engine at once."""
    return Path(os.environ.get("SIDECAR_BENCH_LOCK_DIR") or Path(tempfile.gettempdir()) / "sidecar-bench-locks")


class HostError(RuntimeError):
    """No configured Docker engine could be used; the message says which and why."""


def sanitize(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


@contextlib.contextmanager
def host_lock(hosts: list[Mapping[str, Any]], lock_dir: str | Path, timeout: float,
              describe: str) -> Iterator[tuple[Mapping[str, Any], docker.DockerClient]]:
    """Hold the exclusive lock of one engine: the first free one in order, else wait for the first.

    Measurements and image builds take it, so nothing of ours runs on an engine
    while it measures, whatever Snakemake's --cores. One lock file per engine
    ID, so two names or addresses of one engine share a lock.
    """
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    candidates = []
    for host in hosts:
        try:
            client = client_for(host, timeout)
            engine_id = client.info()["ID"]
        except docker.errors.DockerException as err:
            log.warning("Docker host %s (%s) is not reachable, skipping it: %s", host["name"], host.get("url"), err)
            continue
        candidates.append((host, client, lock_dir / f"{sanitize(engine_id)}.lock"))
    if not candidates:
        raise HostError(f"no Docker host is reachable: {', '.join(str(h['name']) for h in hosts)}; "
                        "check hosts in config.yaml and that the engines run")
    chosen = None
    handle = None
    for host, client, path in candidates:
        handle = open(path, "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            chosen = (host, client, path)
            break
        except BlockingIOError:
            handle.close()
    if chosen is None:
        host, client, path = candidates[0]
        log.info("waiting for %s: another measurement or build holds engine %s (%s)", path, host["name"],
                 _holder(path))
        handle = open(path, "a+")
        fcntl.flock(handle, fcntl.LOCK_EX)
        chosen = (host, client, path)
    host, client, path = chosen
    handle.seek(0)
    handle.truncate()
    handle.write(describe)
    handle.flush()
    try:
        yield host, client
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()
        for _, other, _ in candidates:
            other.close()


def _holder(path: Path) -> str:
    try:
        return path.read_text().strip() or "holder unknown"
    except OSError:
        return "holder unknown"

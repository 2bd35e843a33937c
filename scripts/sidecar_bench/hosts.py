"""Docker clients for the hosts of config.yaml: the local engine, ssh:// or tcp:// with TLS."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Mapping

import docker
import docker.tls


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

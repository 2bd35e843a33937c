"""Which of the Docker SDK's transports a run job needs, decided before the SDK is imported.

Importing the SDK imports paramiko, its ssh:// transport, whether or not an engine is reached over SSH:
0.14 s of the SDK's 0.28 s here, in every run job's process. A job whose engines are all reached without
SSH (the local socket, unix://, tcp://) never uses it, so skip_ssh_transport() makes `import paramiko` fail
in that process (None in sys.modules: Python's own way to block an import), which the SDK takes for ssh://
support not installed. Standard library only: it must run before anything imports docker.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Iterable, Mapping


def needs_ssh(
    hosts: Iterable[Mapping[str, Any] | None], environ: Mapping[str, str] = os.environ
) -> bool:
    """Whether any of the hosts (config.yaml `hosts`; url null: DOCKER_HOST or the local socket) is ssh://."""
    for host in list(hosts) or [None]:
        url = (host or {}).get("url") or environ.get("DOCKER_HOST") or ""
        if str(url).startswith("ssh://"):
            return True
    return False


def skip_ssh_transport(
    hosts: Iterable[Mapping[str, Any] | None], environ: Mapping[str, str] = os.environ
) -> bool:
    """Block paramiko's import in this process when no host needs it; True if it did."""
    if needs_ssh(hosts, environ) or "paramiko" in sys.modules:
        return False
    sys.modules["paramiko"] = None  # type: ignore[assignment]
    return True

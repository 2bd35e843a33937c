"""What a run was measured on: host, engine, kernel, images, tools (the run file's "environment")."""

from __future__ import annotations

import platform
import socket
import subprocess
from pathlib import Path
from typing import Any, Mapping

from .labels import INPUTS_DIGEST_LABEL, VARIANT_LABEL
from .labels import PREFIX as LABEL_PREFIX

PROJECT_ROOT = Path(__file__).resolve().parents[2]

# Run inside the load generator, which shares the task's host: its /proc/cpuinfo
# is the engine host's, also on a remote engine.
PROBE_SCRIPT = (
    "grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2-; "
    "dpkg-query -W -f='${Version}\\n' hey 2>/dev/null || echo unknown"
)


def parse_probe(text: str) -> tuple[str, str]:
    """PROBE_SCRIPT output -> (cpu model, hey version)."""
    lines = [line.strip() for line in text.splitlines()]
    lines += ["unknown"] * (2 - len(lines))
    return lines[0] or "unknown", lines[1] or "unknown"


def project_commit(root: Path = PROJECT_ROOT) -> str:
    """The checkout's commit, with "-dirty" when tracked files differ from it; "unknown" outside git."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def describe(
    info: Mapping[str, Any],
    docker_host: str,
    task_image: Mapping[str, Any],
    loadgen_image: Mapping[str, Any],
    probe_text: str,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The run file's environment object.

    info: the engine's `client.info()`; task_image / loadgen_image: `image.attrs`;
    extra: values known to the caller (host name in config, image inputs digest).
    """
    cpu_model, hey_version = parse_probe(probe_text)
    labels = (task_image.get("Config") or {}).get("Labels") or {}
    versions = {
        key.removeprefix(LABEL_PREFIX): value
        for key, value in labels.items()
        if key.endswith("-version")
    }
    environment = {
        "hostname": info.get("Name"),
        "cpu_model": cpu_model,
        "cpu_count": info.get("NCPU"),
        "mem_total_bytes": info.get("MemTotal"),
        "kernel": info.get("KernelVersion"),
        "operating_system": info.get("OperatingSystem"),
        "cgroup_version": str(info.get("CgroupVersion") or "1"),
        "cgroup_driver": info.get("CgroupDriver"),
        "docker_version": info.get("ServerVersion"),
        "docker_host": docker_host,
        "engine_id": info.get("ID"),
        "image_id": task_image.get("Id"),
        "image_variant": labels.get(VARIANT_LABEL),
        "image_inputs_digest": labels.get(INPUTS_DIGEST_LABEL),
        "image_versions": versions,
        "loadgen_image_id": loadgen_image.get("Id"),
        "hey_version": hey_version,
        "runner_hostname": socket.gethostname(),
        "runner_python": platform.python_version(),
        "project_commit": project_commit(),  # optional in the format: older run files lack it
    }
    environment.update(extra or {})
    return environment

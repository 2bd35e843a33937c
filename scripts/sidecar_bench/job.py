"""The run_condition job around one measurement: pick a Docker engine, lock it, report progress.

Measurements on one engine never overlap, whatever Snakemake's --cores: each
run holds an exclusive fcntl lock on <lock dir>/<engine ID>.lock for its
whole life (the engine's ID, so two names or addresses of one engine share a
lock). With several engines the first free one is taken; if all are busy the
job waits for the first. Progress goes to the terminal (the original stderr)
in one line per start and end, the rest to the job's log.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import re
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

import docker
import docker.errors

from .conditions import LoadSettings
from .hosts import client_for
from .runner import HEY_GRACE_S, RunError, as_condition, as_load, engine_address, run_condition, signals_raise

log = logging.getLogger("sidecar_bench.runner")

def sanitize(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def open_client(host: Mapping[str, Any], timeout: float) -> docker.DockerClient:
    return client_for(host, timeout)


@contextlib.contextmanager
def host_lock(hosts: list[Mapping[str, Any]], lock_dir: str | Path, timeout: float,
              describe: str) -> Iterator[tuple[Mapping[str, Any], docker.DockerClient]]:
    """Hold the exclusive lock of one engine: the first free one in order, else wait for the first.

    One lock file per engine ID, so two names for one engine share a lock.
    """
    lock_dir = Path(lock_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    candidates = []
    for host in hosts:
        try:
            client = open_client(host, timeout)
            engine_id = client.info()["ID"]
        except docker.errors.DockerException as err:
            log.warning("Docker host %s (%s) is not reachable, skipping it: %s", host["name"], host.get("url"), err)
            continue
        candidates.append((host, client, lock_dir / f"{sanitize(engine_id)}.lock"))
    if not candidates:
        raise RunError(f"no Docker host is reachable: {', '.join(str(h['name']) for h in hosts)}; "
                       "check config.yaml docker hosts and that the engines run")
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
        log.info("waiting for %s: another measurement holds engine %s (%s)", path, host["name"], _read(path))
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


def _read(path: Path) -> str:
    try:
        return path.read_text().strip() or "holder unknown"
    except OSError:
        return "holder unknown"


def _images_on(host: Mapping[str, Any], refs: dict[str, dict]) -> bool:
    """Whether the host has both images, building them there if the image rule did not.

    The image rule builds on the hosts configured when it ran; a host added later (or a
    cluster node) gets its images here, from the same sources, so adding a host never
    reruns the conditions already measured.
    """
    if all(host["name"] in ref.get("hosts", {}) for ref in refs.values()):
        return True
    from . import image  # only this path builds

    try:
        client = client_for(host)
    except docker.errors.DockerException as err:
        log.warning("Docker host %s (%s) is not reachable, skipping it: %s", host["name"], host.get("url"), err)
        return False
    try:
        for ref in refs.values():
            log.info("host %s has no %s image yet: building it there", host["name"], ref["variant"])
            base = image.ensure_base(client, ref["base_image"], "debootstrap")
            image_id = image.ensure_variant(client, ref["variant"], base)
            ref.setdefault("hosts", {})[host["name"]] = image_id
    except (image.ImageError, docker.errors.DockerException) as err:
        log.warning("could not build the images on host %s, skipping it: %s", host["name"], err)
        return False
    finally:
        client.close()
    return True


# Typical time a run takes beyond its measured window (start, readiness, snapshots, removal).
DEFAULT_OVERHEAD_S = 4.0


def progress_line(event: str, condition_id: str, host: str, load: LoadSettings,
                  progress: Mapping[str, Any] | None) -> str:
    """One terminal line: `sidecar-bench: start go_cpu0.25_... on local [12/228 done, ETA 19m]`."""
    line = f"sidecar-bench: {event} {condition_id} on {host}"
    if not progress:
        return line
    total = progress.get("total")
    files = progress.get("run_files")
    done = sum(Path(f).exists() for f in files) if files is not None else progress.get("done")
    if total is None or done is None:
        return line
    remaining = max(total - done, 0)
    per_run = load.warmup_s + load.duration_s + float(progress.get("overhead_s", DEFAULT_OVERHEAD_S))
    return f"{line} [{done}/{total} done, ETA {_duration(remaining * per_run)}]"


def _duration(seconds: float) -> str:
    minutes = math.ceil(seconds / 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"


def main(condition: Mapping[str, Any], load: Mapping[str, Any], hosts: list[Mapping[str, Any]],
         image_refs: Mapping[str, str], out: str, lock_dir: str, progress: Mapping[str, Any] | None = None) -> Path:
    """The run_condition Snakemake job (scripts/run_condition.py): lock an engine, measure, write `out`.

    condition: Condition.as_dict(); load: LoadSettings fields; hosts: [{"name", "url"}] (url None =
    docker.from_env()); image_refs: {"task": path, "loadgen": path} of the image rule's JSON
    ({"variant", "tag", "inputs_digest", "hosts": {name: image_id}}); out: the run file;
    lock_dir: where the per-engine lock files live; progress: None or {"total": N, "run_files":
    [every run file of the matrix]} (or "done": n instead of run_files; optional "overhead_s").
    """
    terminal = sys.__stderr__
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    cond = as_condition(condition)
    settings = as_load(load)
    refs = {part: json.loads(Path(path).read_text()) for part, path in image_refs.items()}
    usable = [h for h in hosts if _images_on(h, refs)]
    if not usable:
        raise RunError(f"{cond.id}: no Docker host has both images (hosts: {[h['name'] for h in hosts]}, "
                       f"image refs: {dict(image_refs)}); see the log above")
    timeout = settings.duration_s + settings.warmup_s + HEY_GRACE_S + 60
    with signals_raise():
        started = time.monotonic()
        with host_lock(usable, lock_dir, timeout, f"{cond.id} pid {os.getpid()}") as (host, client):
            print(progress_line("start", cond.id, host["name"], settings, progress), file=terminal, flush=True)
            task_ref = refs["task"]
            if task_ref.get("variant") not in (None, cond.variant):
                raise RunError(f"{image_refs['task']}: variant {task_ref.get('variant')!r}, "
                               f"{cond.id} needs {cond.variant!r}")
            try:
                path = run_condition(client, cond, settings, task_ref["hosts"][host["name"]],
                                     refs["loadgen"]["hosts"][host["name"]], out, host["name"],
                                     {"image_inputs_digest_ref": task_ref.get("inputs_digest"),
                                      # The address as configured: the SDK hides ssh:// and the socket.
                                      "docker_host": host.get("url") or engine_address(client)})
            except BaseException as err:
                reason = (str(err).splitlines() or [type(err).__name__])[0]
                print(f"sidecar-bench: FAILED {cond.id} on {host['name']}: {reason}", file=terminal, flush=True)
                raise
        wall = time.monotonic() - started
    log.info("%s: job wall time %.1f s, measured %g s, overhead %.1f s", cond.id, wall, settings.duration_s,
             wall - settings.duration_s - settings.warmup_s)
    print(progress_line("done", cond.id, host["name"], settings, progress) + f" ({wall:.0f} s)", file=terminal,
          flush=True)
    return path

"""The run_condition job around one measurement: pick a Docker engine, lock it, report progress.

Measurements on one engine never overlap, whatever Snakemake's --cores: each
run holds an exclusive fcntl lock on <lock dir>/<engine ID>.lock for its
whole life (the engine's ID, so two names or addresses of one engine share a
lock). With several engines the first free one is taken; if all are busy the
job waits for the first. Progress goes to the terminal (the original stderr)
in one line per start and end, the rest to the job's log.
"""

from __future__ import annotations

import gc
import json
import logging
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Mapping

import docker
import docker.errors

from . import jobserver, preload, record
from .conditions import APPS, LoadSettings
from .hosts import HostError, host_lock
from .checks import check_host_capacity
from .containers import engine_address, remove_container
from .failures import AppStopped, RunError
from .labels import (
    CONDITION_LABEL,
    LEASE_LABEL,
    LEASE_PREFIX,
    PROJECT,
    PROJECT_LABEL,
    TASK_CGROUP_LABEL,
)
from .runner import HEY_GRACE_S, OpenLoad, as_condition, as_load, run_condition, utc_now
from .runjob import ON_FAILURE
from .signals import signals_raise

log = logging.getLogger(__name__)
# The run's log (the job's stderr: its Snakemake log file) has what the job, the measurement, its
# containers and the engine's lock (which lease the run was under) say: the library's own logger, which every
# module's logger (job, runner, measurement, containers, hosts, lease, ...) passes its records to.
RUN_LOGGERS = (__name__.partition(".")[0],)


def remove_stale_containers(client: docker.DockerClient) -> list[str]:
    """Remove containers of runs that died without cleaning up (kill -9, a lost machine).

    Called under the engine's lease (hosts.host_lock): while this process (or its workflow) holds
    it, no other workflow can be measuring on this engine, so every container with the project label is
    stale, and a stale task's sidecars would otherwise keep burning CPU beside the next
    measurement. If another live holder has the lease (a call outside the lock), nothing is
    removed: those containers may be its live ones.
    """
    from . import lease

    held = lease.current(client)
    if held is not None:
        labels = held.labels or {}
        mine = (
            labels.get(LEASE_PREFIX + "pid") == str(os.getpid())
            and labels.get(LEASE_PREFIX + "host") == lease.socket.gethostname()
        ) or labels.get(LEASE_LABEL) in lease.workflow_leases().values()  # our workflow's
        if not mine and lease.stale_reason(held) is None:
            log.warning(
                "not sweeping containers: engine leased by %s", lease.describe_labels(labels)
            )
            return []
    from . import taskcgroup

    removed = []
    # The task topology's readers name a task cgroup: removed last, once their cgroups are gone.
    readers = []
    for container in client.containers.list(
        all=True, filters={"label": f"{PROJECT_LABEL}={PROJECT}"}
    ):
        if LEASE_LABEL in (container.labels or {}):
            continue  # a lease: broken only by the lease's own staleness rules
        if TASK_CGROUP_LABEL in (container.labels or {}):
            readers.append(container)
            continue
        log.warning(
            "removing container %s left by a run that did not finish (%s)",
            container.name,
            container.labels.get(CONDITION_LABEL, "?"),
        )
        if remove_container(container):
            removed.append(container.name)
    if readers:
        names = [reader.labels[TASK_CGROUP_LABEL] for reader in readers]
        log.warning(
            "removing task cgroup(s) %s left by runs that did not finish", ", ".join(sorted(names))
        )
        if taskcgroup.remove_cgroups(
            client, readers[0].attrs.get("Image") or readers[0].image.id, names
        ):
            removed += [reader.name for reader in readers if remove_container(reader)]
    return removed


def _image_on(
    client: docker.DockerClient,
    host: Mapping[str, Any],
    ref: Mapping[str, Any],
    image_settings: Mapping[str, Any],
    root: str | None = None,
) -> str:
    """The id of the ref's image on this engine, building it there if the image rule did not.

    The image rule builds on the hosts configured when it ran; a host added later, or a
    cluster node (every node's engine is "local"), gets the image here, from the same
    sources and under the engine lock, so adding a host never reruns measured conditions.
    """
    image_id = ref.get("hosts", {}).get(host["name"])
    if image_id:
        try:
            client.images.get(image_id)
            return image_id
        except docker.errors.ImageNotFound:
            pass
    from . import image  # only this path builds

    log.info(
        "host %s has no %s image %s: building it there",
        host["name"],
        ref["variant"],
        image_id or "",
    )
    base = image.ensure_base(
        client,
        ref["base_image"],
        image_settings.get("base_fallback", "debootstrap"),
        mirror=image_settings.get("debian_mirror", image.DEBIAN_MIRROR),
    )
    return image.ensure_variant(client, ref["variant"], base, root=Path(root) if root else None)


# Typical time a run takes beyond its measured window and warm-up: the job's own start (a new
# Python, imports), the containers' start and the app's readiness, snapshots, removal, and
# Snakemake's scheduling between jobs. Measured on this 2-core host: the figure preset's 165 runs
# of 5 + 10 s took 54 min, 19.6 s a run (Go jobs 1.4 s beyond warm-up + window, Next.js 3.8 s,
# most of it readiness, and about 2 s between jobs).
DEFAULT_OVERHEAD_S = 4.5


def progress_line(
    event: str,
    condition_id: str,
    host: str,
    load: LoadSettings,
    progress: Mapping[str, Any] | None,
    repeat: int = 1,
) -> str:
    """One terminal line: `sidecar-bench: start go_cpu0.25_... rep 2 on local [12/228 done, ETA 19m]`.

    load: the experiment's settings (with load.app_warmup_s): each remaining run is estimated at its own
    app's warm-up (its file's condition id starts with the app), a run of another app at this one's."""
    line = f"sidecar-bench: {event} {condition_id} rep {repeat} on {host}"
    if not progress:
        return line
    total = progress.get("total")
    files = progress.get("run_files")
    if files is not None:
        remaining_files = [f for f in files if not Path(f).exists()]
        done = len(files) - len(remaining_files)
    else:
        done = progress.get("done")
    if total is None or done is None:
        return line
    overhead = float(progress.get("overhead_s", DEFAULT_OVERHEAD_S))
    this_app = condition_id.split("_", 1)[0]
    per_app: dict[str, float] = {}

    def per_run(app: str) -> float:
        if app not in per_app:
            settings = load.for_app(app if app in APPS else this_app)
            warm = settings.warmup.min_s if settings.warmup.until_steady else settings.warmup_s
            per_app[app] = warm + settings.duration_s + overhead
        return per_app[app]

    remaining = max(total - done, 0)
    if files is not None and remaining == len(remaining_files):
        seconds = sum(per_run(Path(f).parent.name.split("_", 1)[0]) for f in remaining_files)
    else:
        seconds = remaining * per_run(this_app)
    return f"{line} [{done}/{total} done, ETA {_duration(seconds)}]"


def _duration(seconds: float) -> str:
    minutes = math.ceil(seconds / 60)
    return f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"


def main(
    condition: Mapping[str, Any],
    load: Mapping[str, Any],
    hosts: list[Mapping[str, Any]],
    image_refs: Mapping[str, str],
    out: str,
    lock_dir: str,
    progress: Mapping[str, Any] | None = None,
    image_settings: Mapping[str, Any] | None = None,
    repeat: int = 1,
    on_failure: str = "stop",
    capacity_file: str | None = None,
    task_image_dir: str | None = None,
) -> Path:
    """The run_condition Snakemake job (workflow/scripts/run_condition.py): lock an engine, measure, write `out`.

    condition: Condition.as_dict(); load: LoadSettings fields; hosts: [{"name", "url"}] (url None =
    docker.from_env()); image_refs: {"task": path, "loadgen": path} of the image rule's JSON
    ({"variant", "tag", "inputs_digest", "hosts": {name: image_id}}); out: the run file;
    lock_dir: where the per-engine lock files live; progress: None or {"total": N, "run_files":
    [every run file of the matrix]} (or "done": n instead of run_files; optional "overhead_s");
    image_settings: config.yaml's image section, for building on a host that lacks the images;
    repeat: the repetition index (1, 2, ...) of this run of the condition (the run file's "repeat");
    on_failure: "stop" (a process of the task that dies fails the job: RunError, no file) or "record"
    (it writes a failure record at `out` instead and returns its path; see ON_FAILURE);
    open loop (condition load_model open): condition["rate_per_s"] is the rate, image_refs["loadgen_open"]
    the generator's image, capacity_file the capacity record the rate came from (kept in the run file).
    task_image_dir: the task-image folder to build from on a host that lacks an image (default: the one
    beside the installed package).
    """
    if on_failure not in ON_FAILURE:
        raise RunError(f"on_failure is {on_failure!r}, not one of {', '.join(ON_FAILURE)}")
    # pandas and pyarrow, needed after the load, imported while the job waits on the engine.
    preload.start()
    terminal = sys.__stderr__
    for logger in map(logging.getLogger, RUN_LOGGERS):
        if not logger.handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
    if jobserver.forked():
        log.info("process %d, forked by the workflow's job server (jobserver.py)", os.getpid())
    cond = as_condition(condition)
    # The app's own warm-up (load.app_warmup_s), as its rerun trigger (get_load) says.
    base = as_load(load)
    settings = base.for_app(cond.app)
    refs = {part: json.loads(Path(path).read_text()) for part, path in image_refs.items()}
    task_ref = refs["task"]
    if task_ref.get("variant") not in (None, cond.variant):
        raise RunError(
            f"{image_refs['task']}: variant {task_ref.get('variant')!r}, {cond.id} needs {cond.variant!r}"
        )
    timeout = settings.duration_s + settings.warmup_limit_s() + HEY_GRACE_S + 60
    with signals_raise():
        started = time.monotonic()
        try:
            with host_lock(hosts, lock_dir, timeout, f"{cond.id} pid {os.getpid()}") as (
                host,
                client,
            ):
                print(
                    progress_line("start", cond.id, host["name"], base, progress, repeat),
                    file=terminal,
                    flush=True,
                )
                try:
                    # Before anything is created or removed on the engine.
                    info = client.info()
                    check_host_capacity(
                        info, cond, host["name"], host.get("url") or engine_address(client)
                    )
                    remove_stale_containers(client)
                    task_id = _image_on(
                        client, host, task_ref, image_settings or {}, task_image_dir
                    )
                    loadgen_id = _image_on(
                        client, host, refs["loadgen"], image_settings or {}, task_image_dir
                    )
                    open_load = _open_load(
                        cond,
                        condition,
                        client,
                        host,
                        refs,
                        image_settings,
                        capacity_file,
                        task_image_dir,
                    )
                    path = run_condition(
                        client,
                        cond,
                        settings,
                        task_id,
                        loadgen_id,
                        out,
                        host["name"],
                        {
                            "image_inputs_digest_ref": task_ref.get("inputs_digest"),
                            # The address as configured: the SDK hides ssh:// and the socket.
                            "docker_host": host.get("url") or engine_address(client),
                        },
                        repeat=repeat,
                        open_load=open_load,
                        info=info,
                    )
                except AppStopped as err:
                    reason = (str(err).splitlines() or [type(err).__name__])[0]
                    if on_failure != "record":
                        print(
                            f"sidecar-bench: FAILED {cond.id} rep {repeat} on {host['name']}: {reason}",
                            file=terminal,
                            flush=True,
                        )
                        raise
                    failure = record.failure_record(
                        cond.as_dict(),
                        repeat,
                        settings.as_dict(),
                        str(err),
                        err.failure,
                        host["name"],
                        utc_now(),
                    )
                    path = record.write_failure(out, failure)
                    log.error("%s", err)
                    print(
                        f"sidecar-bench: FAILED {cond.id} rep {repeat} on {host['name']}, recorded as failed in "
                        f"{out} (on_failure: record): {reason}",
                        file=terminal,
                        flush=True,
                    )
                    return path
                except BaseException as err:
                    reason = (str(err).splitlines() or [type(err).__name__])[0]
                    print(
                        f"sidecar-bench: FAILED {cond.id} rep {repeat} on {host['name']}: {reason}",
                        file=terminal,
                        flush=True,
                    )
                    raise
        except HostError as err:
            raise RunError(f"{cond.id}: {err}") from None
        wall = time.monotonic() - started
    log.info(
        "%s rep %d: job wall time %.1f s, measured %g s, overhead %.1f s",
        cond.id,
        repeat,
        wall,
        settings.duration_s,
        wall - settings.duration_s - settings.warmup_s,
    )
    print(
        progress_line("done", cond.id, host["name"], base, progress, repeat) + f" ({wall:.0f} s)",
        file=terminal,
        flush=True,
    )
    return path


# --- load model (open loop) ---------------------------------------------------------------------
def _open_load(
    cond: Any,
    condition: Mapping[str, Any],
    client: docker.DockerClient,
    host: Mapping[str, Any],
    refs: Mapping[str, Any],
    image_settings: Mapping[str, Any] | None,
    capacity_file: str | None,
    task_image_dir: str | None = None,
) -> OpenLoad | None:
    """An open condition's rate, generator image and capacity record; None for a closed one."""
    if not cond.is_open:
        return None
    from . import capacity

    if "loadgen_open" not in refs or condition.get("rate_per_s") is None:
        raise RunError(
            f"{cond.id}: an open-loop condition needs rate_per_s and the loadgen-open image ref"
        )
    record = capacity.read(capacity_file) if capacity_file else None
    rate = condition["rate_per_s"]
    if record is not None and capacity.rate_per_s(cond.rate_share, record["rps_mean"]) != rate:
        # The capacity file changed after the workflow planned this run: its params are stale.
        raise RunError(
            f"{cond.id}: rate {rate} requests/s was planned from a capacity that {capacity_file} no "
            f"longer holds ({record['rps_mean']:.1f} RPS); run snakemake again"
        )
    image_id = _image_on(client, host, refs["loadgen_open"], image_settings or {}, task_image_dir)
    return OpenLoad(rate, image_id, record)


def leave_quickly() -> None:
    """End of a run job's process: its run file is written (or its failure raised) by now.

    The interpreter's shutdown collects every object pandas, pyarrow and the Docker SDK made on import,
    about 0.25 s a run on a 2-core VM. Frozen, the collector leaves them: modules and files are still
    torn down and flushed as always (they are freed by reference counts, not by the collector).
    Only for a process that ends next: in a long-lived one (the tests) nothing frozen is ever collected."""
    gc.freeze()

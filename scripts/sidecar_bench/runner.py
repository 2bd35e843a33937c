"""Measure one condition on one Docker engine and write its run file.

Sequence (every step through the Docker SDK, so a remote engine works the same):

1. Start the task container (app + sidecars in one cgroup): nano_cpus, memory
   without swap, the entrypoint's environment, project/condition/run labels.
   Its network is "none": a network namespace with loopback only, so load
   cannot leave loopback even by mistake, and no port is published.
2. Start the load generator (`sleep <deadline>`) in the task's network namespace
   (network_mode="container:<task>"). Readiness checks, /stats reads and hey
   are execs in it: they run in the load generator's cgroup, not the task's.
3. Wait until GET /work answers 200 (a polling loop inside one exec, which then
   reads the environment probe, /stats and /proc/net/snmp); fail with the
   container's last log lines if it exits or times out.
4. Optional warm-up (warmup_s: 5 s in config.yaml; the article used none, its
   hey run starting on a freshly started app), then those reads again (in the
   warm-up's own exec, right after its hey).
5. The measured window, innermost last:
     /stats served + /proc/net/snmp (load generator, with the environment probe)
       [wait for the entrypoint's roles file,] cgroup files and limits,
       every /proc/PID/stat, host /proc/stat (task)
         hey -z D -c C -o csv > file, the load generator's CPU counter around it
       cgroup files and limits, every /proc/PID/stat, host /proc/stat (task),
       at D + LOAD_END_MARGIN_S after hey started, while hey still writes its CSV
     /stats served + /proc/net/snmp, then hey's CSV file (load generator)
   hey spends ~15 µs a row writing its CSV after the load stops, and streaming it
   through the exec took as long again (0.5 s for 32,579 rows in all): the CPU
   window closes when the load stops, not when hey exits, and the CSV is fetched
   from a file afterwards.
6. Check the limits read back, the samples, count failures, write the run file atomically.
Every container started is removed in `finally`, also on SIGINT/SIGTERM. Neither outlives the
runner: each runs under WATCH_SCRIPT with its stdin attached to the runner, and stops within a
second of the runner's end, even by kill -9, on a local or a remote engine.

A process of the task that dies fails the run with AppStopped, never a run file; failed requests
are counted from outside hey (failures.py says how).

What each step does on the engine is Measurement's (measurement.py; the task topology's in
task_measurement.py); the plumbing lives beside them: containers.py (labels, names, confinement, the
watcher, execs, removal), signals.py (SIGINT, SIGTERM, SIGHUP and the clean-up), failures.py (RunError,
AppStopped, the failed-request count) and checks.py (the limits and settings read back).
"""

from __future__ import annotations

import datetime as dt
import logging
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Mapping

import docker
import docker.errors

from . import cgroup, environment, hey, knobs, openloop, preload, record, taskcgroup, warmup
from . import proxy as proxymod
from .checks import check_app_environment, check_host_capacity, check_limits
from .conditions import Condition, LoadSettings
from .containers import engine_address
from .failures import FAILED_SOURCE, AppStopped, RunError, count_failed
from .labels import VARIANT_LABEL
from .measurement import (
    DYING_WAIT_S,
    HEY_GRACE_S,
    LOAD_END_MARGIN_S,
    OPEN_MAX_CONNS,
    OPEN_SLACK_S,
    Measurement,
    OpenLoad,
)
from .signals import Interrupted, signals_deferred, signals_raise
from .task_measurement import TaskMeasurement

# Names that moved to the modules above, still read here by the tests and tools that use `runner.<name>`.
from .containers import TASK_TMPFS as TASK_TMPFS
from .containers import WATCH_NAME as WATCH_NAME
from .containers import WATCH_SCRIPT as WATCH_SCRIPT
from .containers import exec_in as exec_in
from .containers import hardening as hardening
from .containers import labels as labels
from .failures import describe_exit as describe_exit
from .failures import parse_netns_probe as parse_netns_probe
from .failures import parse_tcp_counters as parse_tcp_counters
from .failures import process_exit as process_exit
from .labels import CONDITION_LABEL as CONDITION_LABEL
from .labels import PART_LABEL as PART_LABEL
from .labels import PROJECT as PROJECT
from .labels import PROJECT_LABEL as PROJECT_LABEL
from .labels import RUN_LABEL as RUN_LABEL
from .measurement import WORK_URL as WORK_URL
from .measurement import task_environment as task_environment
from .signals import STOP_SIGNALS as STOP_SIGNALS

log = logging.getLogger(__name__)


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def as_condition(condition: Condition | Mapping[str, Any]) -> Condition:
    return condition if isinstance(condition, Condition) else Condition.from_dict(condition)


def as_load(load: LoadSettings | Mapping[str, Any]) -> LoadSettings:
    return load if isinstance(load, LoadSettings) else LoadSettings(**load)


def _image(client: docker.DockerClient, ref: Any, what: str) -> Any:
    if not isinstance(ref, str):
        return ref
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        raise RunError(
            f"{what} image {ref!r} is not on the Docker engine {client.api.base_url}: build it first "
            "(snakemake builds it with rule build_image)"
        ) from None


def run_condition(
    client: docker.DockerClient,
    condition: Condition | Mapping[str, Any],
    load: LoadSettings | Mapping[str, Any],
    task_image: Any,
    loadgen_image: Any,
    out_path: str | Path,
    host_name: str = "local",
    extra_environment: Mapping[str, Any] | None = None,
    repeat: int = 1,
    open_load: OpenLoad | None = None,
    info: Mapping[str, Any] | None = None,
) -> Path:
    """Measure one condition on the engine behind client and write out_path (a run file).

    task_image / loadgen_image: an image id or tag, or a docker Image object.
    repeat: which repetition of the condition this run is (1, 2, ...), stored as meta["repeat"].
    open_load: for an open-loop condition (load_model open), its rate and generator image (required).
    info: the engine's client.info() if the caller has just read it (one API request fewer); read here if None.
    Raises RunError with what went wrong; Interrupted on SIGINT/SIGTERM. No
    container of this run survives the call, and out_path exists only if the
    run succeeded.
    """
    condition = as_condition(condition)
    load = as_load(load).for_app(
        condition.app
    )  # the app's own warm-up (load.app_warmup_s), if it has one
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise RunError(f"{condition.id}: repeat {repeat!r} is not a whole number >= 1")
    info = client.info() if info is None else info
    check_host_capacity(info, condition, host_name, engine_address(client))
    try:
        knobs.check_supported(info, condition, host_name)
        taskcgroup.check_supported(info, condition, host_name)
    except knobs.KnobError as err:
        raise RunError(str(err)) from None
    task_image = _image(client, task_image, "task")
    loadgen_image = _image(client, loadgen_image, "load generator")
    if condition.is_open:
        if open_load is None:
            raise RunError(
                f"{condition.id}: an open-loop condition needs its rate and the loadgen-open image"
            )
        open_load = OpenLoad(
            open_load.rate_per_s,
            _image(client, open_load.image, "open-loop generator"),
            open_load.capacity,
        )
    else:
        open_load = None
    variant = (task_image.labels or {}).get(VARIANT_LABEL)
    if variant is not None and variant != condition.variant:
        raise RunError(
            f"{condition.id}: needs the {condition.variant!r} task image, got {variant!r} ({task_image.id})"
        )
    run_id = uuid.uuid4().hex
    run_started = utc_now()
    warmed = None  # the until_steady warm-up's record, if that mode ran
    kind = TaskMeasurement if condition.topology == "task" else Measurement
    measurement = kind(
        client, condition, load, task_image, loadgen_image, run_id, open_load, repeat
    )
    saved_timeout = client.api.timeout
    # API calls block for the whole hey run: the SDK's 60 s default would cut long windows. The 60 s beyond hey's
    # own limit also hold a readiness exec's polls before its warm-up (at most 20 x curl's 2 s) and its reads.
    client.api.timeout = max(
        saved_timeout or 60, max(load.duration_s, load.warmup_s, warmup.BURST_S) + HEY_GRACE_S + 60
    )
    try:
        with signals_raise():
            try:
                measurement.start()
                # A closed loop's fixed warm-up runs in the readiness exec, as soon as the app answers.
                fused = (
                    load.warmup_s > 0
                    and not load.warmup.until_steady
                    and measurement.open_load is None
                )
                # The job's imports for after the load end before any load begins (preload.py): before the
                # readiness exec when the warm-up is in it (the app's readiness is then timed from their end).
                if fused:
                    preload.wait()
                    log.info(
                        "%s: waiting for the app, then a warm-up of %g s of the same load, not recorded",
                        condition.id,
                        load.warmup_s,
                    )
                ready_s = measurement.wait_ready(load.warmup_s if fused else 0)
                log.info("%s: app ready after %.1f s", condition.id, ready_s)
                if not fused:
                    preload.wait()
                if load.warmup.until_steady:
                    # Warm-up until steady (warmup.py): bursts until the rate stops rising.
                    warmed = warm_until_steady(measurement)
                    measurement.before_window()
                elif load.warmup_s > 0 and not fused:
                    log.info("warm-up: %g s of the same load, not recorded", load.warmup_s)
                    measurement.warm_up(load.warmup_s)
                measurement.in_window = True
                meta_parts = _measure(measurement)
            except AppStopped:
                raise
            except (docker.errors.APIError, RunError) as err:
                # An exec into a task that died mid-run fails with 409, a read of it comes back
                # short: when the task has exited, its state and log say why, not the failed call.
                if measurement.task is not None and measurement.task_exits_within(DYING_WAIT_S):
                    failed_call = (str(err).strip().splitlines() or [type(err).__name__])[0]
                    where = "the measured window" if measurement.in_window else "the run"
                    raise measurement.start_error(
                        f"stopped during {where}",
                        "window" if measurement.in_window else "start",
                        f"The step that found it gone: {failed_call}",
                    ) from err
                raise
            finally:
                with signals_deferred() as received:
                    measurement.remove()
                if received:
                    raise Interrupted(f"interrupted by {signal.Signals(received[0]).name}")
    finally:
        client.api.timeout = saved_timeout
    samples, parts = meta_parts
    probe = parts.pop("probe")
    # The engine's info from before the run: what describe() reads of it (kernel, versions, CPUs, ids) is fixed.
    meta = {
        "format_version": record.FORMAT_VERSION,
        "repeat": repeat,
        "condition": condition.as_dict(),
        "load": {**load.as_dict(), "url": measurement.work_url, "load_model": condition.load_model},
        **({"warmup": warmed} if warmed is not None else {}),
        **parts,
        "environment": environment.describe(
            info,
            engine_address(client),
            task_image.attrs,
            loadgen_image.attrs,
            probe,
            {
                "host_name": host_name,
                "run_id": run_id,
                "run_start": run_started,
                "run_end": utc_now(),
                "ready_s": round(ready_s, 3),
                # How the task's snapshots were read: "host" (hostreads.py) or "exec", each in turn.
                "task_reads": "+".join(dict.fromkeys(measurement.task_reads)),
                "docker_sdk_version": docker.__version__,
                **(extra_environment or {}),
            },
        ),
    }
    if open_load is not None:
        meta["open_loop"] = {
            **parts_open_loop(condition, open_load, measurement.open_summary),
            "image_id": open_load.image.id,
        }
    path = record.write_run(out_path, samples, meta)
    log.info("%s rep %d: wrote %s (%d requests)", condition.id, repeat, path, len(samples))
    return path


def _role_gone(before: cgroup.TaskSnapshot, after: cgroup.TaskSnapshot) -> dict[str, Any]:
    """The first role whose process is gone between two snapshots, as process_exit() describes one (no status)."""
    alive = {(p.pid, p.starttime) for p in after.processes}
    started = {p.pid: p.starttime for p in before.processes}
    for role, pid in before.roles.items():
        if (pid, started.get(pid)) not in alive:
            return {"role": role, "pid": pid, "exit_status": None, "signal": None}
    return {"role": None, "pid": None, "exit_status": None, "signal": None}


def _measure(m: Measurement) -> tuple[Any, dict[str, Any]]:
    """The measured window and the checks on it -> (hey samples, run metadata parts)."""
    condition, load = m.condition, m.load
    probe, tcp_before, served_before = m.before
    proxy_before = m.proxy_counts()
    # Innermost: nothing but the hey exec between the two task snapshots.
    snap_before, t_before = m.snapshot(wait_roles=True)
    # No readable cgroup files: the Docker stats API brackets the window instead (wider, coarser).
    stats_before = None if snap_before.counters else m.docker_counters()
    start = utc_now()
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        running = pool.submit(m.window, load.duration_s)
        # Returns early only if hey failed; then the run fails below anyway.
        wait([running], timeout=load.duration_s + LOAD_END_MARGIN_S)
        stats_after = None if snap_before.counters else m.docker_counters()
        snap_after, t_after = m.snapshot()
        end = utc_now()
        result, hey_wall = running.result()
    finally:
        # Never wait here for the load generator's exec: on Ctrl-C or SIGTERM that would hold the clean-up until
        # the window's end. The caller removes the containers, which ends the exec and its thread.
        pool.shutdown(wait=False, cancel_futures=True)
    tcp_after, served_after, csv_text = m.after_window()
    proxy_after = m.proxy_counts()
    # The OOM counter comes with each snapshot: a kill between them happened inside the window.
    oom_before, oom_after = snap_before.oom_kills, snap_after.oom_kills
    m.task.reload()
    state = m.task.attrs["State"]
    if (
        oom_before is not None
        and oom_after is not None
        and oom_after > oom_before
        and state.get("Status") == "running"
    ):
        # The OOM killer took a process inside the window and the task lives on: which role, if one.
        raise m.start_error(
            f"had a process OOM-killed during the measured window (the task cgroup's oom_kill "
            f"counter rose from {oom_before} to {oom_after})",
            "window",
            died=_role_gone(snap_before, snap_after),
            oom_killed=True,
        )

    if result.exit_code != 0:
        if state.get("Status") != "running":
            raise m.start_error("stopped during the measured window", "window")
        raise RunError(
            f"{condition.id}: hey exited with {result.exit_code}: {result.stderr.strip()[:500]}"
        )
    if state.get("Status") == "running" and state.get("OOMKilled"):
        # The OOM killer took a process while the task still runs: the roles gone say which, if one was.
        raise m.start_error(
            "had a process OOM-killed during the measured window",
            "window",
            died=_role_gone(snap_before, snap_after),
        )
    if state.get("Status") != "running":
        raise m.start_error("stopped during the measured window", "window")
    m.check_roles_alive()
    try:
        samples = hey.parse_csv(csv_text)
        check = hey.check_samples(samples, load.duration_s, load.concurrency)
        loadgen_cpu_s = hey.parse_loadgen_usage(result.stdout)
        if m.open_load is not None:
            m.open_summary = m.read_open_summary(samples)
    except ValueError as err:
        raise RunError(f"{condition.id}: consistency check failed: {err}") from err
    if check.cap_reached:
        log.warning(
            "%s: hey recorded its maximum of %d responses; later ones were served but not recorded",
            condition.id,
            hey.MAX_ROWS,
        )
    failed, evidence = count_failed(
        check.rows,
        served_before,
        served_after,
        tcp_before,
        tcp_after,
        cap_reached=check.cap_reached,
    )
    if condition.real_proxy:
        failed, evidence = proxymod.count_failed(
            check.rows,
            served_after - served_before,
            proxy_after[1] - proxy_before[1],
            evidence,
            check.cap_reached,
        )
    if m.open_summary is not None:
        # The open-loop generator sees every request it sent fail: its own count is exact.
        evidence["openloop_errors"] = m.open_summary.errors
        failed = max(failed, m.open_summary.errors)
    if failed:
        log.warning("%s: %d failed requests (%s)", condition.id, failed, evidence)
    if m.open_summary is not None:
        if m.open_summary.not_on_time_share > 0.01:
            log.warning(
                "%s: %.1f %% of the requests were not sent on time (late %d, dropped %d)",
                condition.id,
                100 * m.open_summary.not_on_time_share,
                m.open_summary.late,
                m.open_summary.dropped,
            )
    elif check.time_coverage < 0.9:
        # Workers run back to back, so response times should fill ~99 % of C x window.
        log.warning(
            "%s: recorded response times cover only %.0f %% of concurrency x window: time went to "
            "requests hey did not record, or hey itself was starved of CPU",
            condition.id,
            100 * check.time_coverage,
        )

    if snap_before.counters and snap_after.counters:
        cpu = cgroup.counters_delta(snap_before.counters, snap_after.counters)
        peak = snap_after.counters.peak_memory_bytes
    else:
        cpu = cgroup.counters_delta(stats_before, stats_after)
        cpu.update(period_us=100_000, quota_us=round(condition.vcpu * 100_000))
        peak = stats_after.peak_memory_bytes
    cpu["wall_s"] = round(t_after - t_before, 6)
    hey_start = hey.parse_start_uptime(result.stdout)
    if (
        hey_start is not None
        and snap_before.uptime_s is not None
        and snap_after.uptime_s is not None
    ):
        # On the host's uptime clock (10 ms ticks): how far the CPU window starts before hey and ends after its load.
        cpu["start_lead_s"] = round(hey_start - snap_before.uptime_s, 2)
        cpu["end_lag_s"] = round(snap_after.uptime_s - (hey_start + check.span_s), 2)
    limits = snap_after.limits or cgroup.limits_from_host_config(
        m.task.attrs.get("HostConfig") or {}
    )
    check_limits(condition, limits, cpu["nr_periods"])
    layout = m.check_layout(snap_after)
    runtime = None
    if knobs.runtime_environment(condition):
        runtime = m.app_environment()
        check_app_environment(condition, runtime)

    expected_roles = {"app", *condition.roles}
    if set(snap_before.roles) != expected_roles:
        raise RunError(
            f"{condition.id}: the task's roles file lists {sorted(snap_before.roles)}, "
            f"the condition needs {sorted(expected_roles)}"
        )
    try:
        cpu_by_role = m.role_cpu(snap_before, snap_after)
    except cgroup.SnapshotError as err:
        # A role's process ended inside the window while the task was still stopping the rest: a
        # RunError, so that run_condition waits for the task's exit and reports the process's death.
        raise RunError(f"{condition.id}: {err}") from err
    processes = [{"role": "app", "target_pct": None, "cpu_s": cpu_by_role["app"]}]
    processes += [
        {"role": role, "target_pct": condition.sidecar_load_pct, "cpu_s": cpu_by_role[role]}
        for role in condition.roles
    ]
    proxy_section = {}
    if condition.real_proxy:
        # A real proxy burns what its traffic costs, no set share; the run keeps what it counted.
        processes[1]["target_pct"] = None
        try:
            proxy_section["proxy"] = proxymod.record(
                condition, m.task_image.labels or {}, proxy_before, proxy_after, check.rows
            )
        except proxymod.ProxyCountError as err:
            raise RunError(str(err)) from err

    host = cgroup.host_cpu_delta(snap_before, snap_after)
    parts = {
        "window": {
            "start": start,
            "end": end,
            "wall_s": round(hey_wall, 6),
            "load_s": round(check.span_s, 6),
            "hey_span_s": round(check.span_s, 6),
            # Closed loop only: an open loop's connections idle between arrivals by design.
            "time_coverage": None if m.open_summary is not None else round(check.time_coverage, 4),
        },
        "requests": {
            "rows": check.rows,
            "non_2xx": check.non_2xx,
            "failed": failed,
            "failed_source": proxymod.FAILED_SOURCE if condition.real_proxy else FAILED_SOURCE,
            "error_distribution": evidence,
            "served_delta": served_after - served_before,
            "cap_reached": check.cap_reached,
        },
        "cgroup": cpu,
        "limits": limits.as_dict(),
        "knobs": {
            **condition.knobs,
            **({"app_environment": runtime} if runtime is not None else {}),
            **({"layout": layout} if layout is not None else {}),
        },
        "host": None
        if host is None
        else {
            "cpus": host["cpus"],
            "busy_s": round(host["busy_s"], 3),
            "total_s": round(host["total_s"], 3),
        },
        "loadgen": {"cpu_s": None if loadgen_cpu_s is None else round(loadgen_cpu_s, 6)},
        "processes": processes,
        "container": {
            # Measured at the end of the window, while the task still runs: no exit code yet.
            "status": state.get("Status"),
            "exit_code": None if state.get("Status") == "running" else state.get("ExitCode"),
            "oom_killed": bool(state.get("OOMKilled")),
            "restart_count": int(m.task.attrs.get("RestartCount", 0)),
            "peak_memory_bytes": peak,
        },
        "probe": probe,
        **proxy_section,
    }
    return samples, parts


# --- load model (open loop) ---------------------------------------------------------------------
def parts_open_loop(
    condition: Condition, open_load: OpenLoad, summary: openloop.Summary | None
) -> dict[str, Any]:
    """The run file's open_loop section: the rate, where it came from, and the generator's summary."""
    if summary is None:
        raise RunError(f"{condition.id}: the open-loop generator's summary was not read")
    return {
        "load_model": condition.load_model,
        "rate_per_s": open_load.rate_per_s,
        "rate_share": condition.rate_share,
        "arrivals": condition.arrivals,
        "max_conns": OPEN_MAX_CONNS,
        "slack_s": OPEN_SLACK_S,
        "seed": summary.seed,
        "capacity": dict(open_load.capacity) if open_load.capacity is not None else None,
        "summary": summary.as_record(),
    }


# Warm-up until steady (load.warmup mode until_steady; warmup.py has the rule).
WARMUP_CSV = "/tmp/warmup.csv"


def warm_until_steady(m: Measurement) -> dict[str, Any]:
    """1 s hey bursts until the rate stops rising or max_s; returns the run file's `warmup` record."""
    settings = m.load.warmup
    bursts: list[dict[str, float]] = []
    started = time.monotonic()
    while True:
        command = hey.command(m.work_url, warmup.BURST_S, m.load.concurrency)
        limit = f"{warmup.BURST_S + HEY_GRACE_S:g}"
        result = m.loadgen_exec(
            [
                "sh",
                "-c",
                warmup.BURST_SCRIPT,
                "warmup",
                WARMUP_CSV,
                "timeout",
                "-s",
                "KILL",
                limit,
                *command,
            ]
        )
        if result.exit_code != 0:
            raise RunError(
                f"{m.condition.id}: a warm-up burst failed (hey exit {result.exit_code}): "
                f"{result.stderr.strip()[:300]}"
            )
        responses, span = warmup.parse_burst(result.stdout)
        elapsed = time.monotonic() - started
        bursts.append(
            {
                "at_s": round(elapsed, 3),
                "responses": responses,
                "span_s": span,
                "rps": round(responses / span, 2) if span > 0 else 0.0,
            }
        )
        stop, why = warmup.steady_check(bursts, sum(b["span_s"] for b in bursts), settings)
        if stop:
            break
    log.info("warm-up until steady: %.1f s, %d bursts; %s", elapsed, len(bursts), why)
    return {
        **settings.as_dict(),
        "seconds": round(elapsed, 3),
        "load_s": round(sum(b["span_s"] for b in bursts), 3),
        "steady": why.startswith("steady"),
        "reason": why,
        "bursts": bursts,
    }

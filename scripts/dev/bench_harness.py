"""Harness time per run, by phase: what a run costs beyond its load, on a given engine address.

Runs short Go conditions (0.5 vCPU, 0 and 1 sidecar at 10 %) one after another, each in a
new Python process that imports what the run_condition job imports and calls job.main, as
the rule does (engine lock and lease, stale sweep, image lookup, containers, readiness,
snapshots, removal, run file). The time from one run's end of load to the next run's start
of load is the job's wall time from its process start to its exit, less its load (warm-up
and window), plus the gap between two processes. Each run's time is split by phase:

    start+imports   the process start and its imports, up to job.main (with the job server, the
                    default as in a workflow: the job's process start, its hand-over and the fork)
    connect         Docker clients made (over ssh://: the SSH connection and its log-in)
    lease           taking and giving back the engine's lease (its container and attach), or
                    finding the workflow's (--lease workflow, the default: one request)
    checks          engine info, capacity check, stale-container sweep, image lookup
    task start      creating and starting the task and the load generator
    readiness       polling until the app answers (the time wait_ready returns)
    loadgen         hey's steps beyond their load (commands over the load generator's channel, channel.py):
                    hey's start, exit and CSV write; the warm-up's step (the readiness step, for a fixed
                    warm-up) also takes the reads before the window, and the window's the reads after it
                    and copying hey's CSV back
    reads           the task's snapshots around the window (read from this host on a local engine,
                    hostreads.py; else an exec each), and other reads in a step of their own
    parsing         parsing and checking hey's CSV
    writing         the run file
    clean-up        removing the run's containers
    other           the rest of job.main (logging, the progress lines, ...)
    exit            job.main's return to the process's exit (the interpreter's shutdown)
    lock wait       waiting for another holder of the engine (not counted in the total)

It prints one JSON object: per run the harness time, its phases, how many SSH connections
and channels (sessions: a remote command each) and API requests it made; then the median per
run, the median of each phase and the slowest phase.

    .venv/bin/python scripts/dev/bench_harness.py                        # local engine, 3 x 2 runs
    .venv/bin/python scripts/dev/bench_harness.py --host ssh://root@127.0.0.1:2222 --reps 5

Snakemake's own scheduling between jobs (and the shell that starts the job's process) is
not part of it: it is the same for every engine address. The images must exist on the engine
(rule build_image, or the runner tests, build them), or --build makes them. Other processes on
the machine (a test suite, a build) change the figures: measure on an idle machine, alternate
the addresses, repeat, and take the medians.

Measured on the development machine (2 cores, Docker 20.10, cgroup v1, other test suites
running), 6 runs each, the two addresses reaching the same engine (ssh:// through an sshd on
loopback), two sittings in a row: the local socket 2.12 and 2.06 s per run; ssh:// before one
shared connection 7.20 and 6.87 s (2 SSH log-ins and 45 sessions running docker system
dial-stdio per run), after it 2.38 and 2.33 s against the local socket's 2.17 and 1.86 s
(1 log-in, 1 remote command, 13 socket channels). The slowest phase is the process start and
its imports (0.4-0.6 s) for both.
"""

from __future__ import annotations

import time

STARTED = time.monotonic()  # before any import: the child's own start

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Memory sizes no experiment uses, so a harness container is never taken for a matrix run's.
HARNESS_MEMORY_MB = 2044
SIDECAR_LOAD_PCT = 10
PHASES = (
    "start+imports",
    "connect",
    "lease",
    "checks",
    "task start",
    "readiness",
    "loadgen",
    "reads",
    "parsing",
    "writing",
    "clean-up",
    "other",
    "exit",
)


def conditions(sidecars: list[int]) -> list[Any]:
    from sidecar_bench.conditions import Condition

    return [
        Condition("go", 0.5, HARNESS_MEMORY_MB, n, SIDECAR_LOAD_PCT if n else 0) for n in sidecars
    ]


# ---------------------------------------------------------------- the child: one run job, timed


class Recorder:
    """Intervals (phase, start, end) on the machine's monotonic clock, and counters."""

    def __init__(self) -> None:
        self.events: list[tuple[str, float, float, bool]] = []
        self.counts: dict[str, int] = {}

    def wrap(
        self, owner: Any, name: str, phase: str, count: str | None = None, none_fails: bool = False
    ) -> None:
        """Record every call of owner.name as phase (failed: it raised, or returned None with none_fails)."""
        original = getattr(owner, name)
        recorder = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            if count:
                recorder.counts[count] = recorder.counts.get(count, 0) + 1
            started = time.monotonic()
            ok = False
            try:
                result = original(*args, **kwargs)
                ok = not (none_fails and result is None)
                return result
            finally:
                recorder.events.append((phase, started, time.monotonic(), ok))

        setattr(owner, name, timed)


def wrap_readiness(recorder: Recorder) -> None:
    """Time Measurement.wait_ready: the app's readiness it returns, and the rest of its exec (a fused warm-up
    and its reads, wait_ready(warmup_s)) as load."""
    from sidecar_bench import runner

    original = runner.Measurement.wait_ready

    def timed(self: Any, warmup_s: float = 0) -> float:
        started = time.monotonic()
        ok = False
        ready_s = 0.0
        try:
            ready_s = original(self, warmup_s)
            ok = True
            return ready_s
        finally:
            ended = time.monotonic()
            if ok and warmup_s > 0:
                recorder.events.append(("readiness", started, started + ready_s, ok))
                recorder.events.append(("load", started + ready_s, ended, ok))
            else:
                recorder.events.append(("readiness", started, ended, ok))

    runner.Measurement.wait_ready = timed


def instrument(recorder: Recorder) -> None:
    """Time the job's steps where they are looked up (module attributes), without changing them."""
    import docker.client
    import requests
    from sidecar_bench import hey, hosts, job, lease, record, runner

    wrap = recorder.wrap
    wrap(hosts, "client_for", "connect", "clients")
    wrap(hosts, "_take_lease", "lease")
    wrap(lease, "borrow", "lease")
    wrap(hosts, "_try_flock", "flock", none_fails=True)
    wrap(lease.Lease, "release", "lease")
    wrap(docker.client.DockerClient, "info", "checks")
    wrap(job, "remove_stale_containers", "checks")
    wrap(job, "_image_on", "checks")
    wrap(runner, "_image", "checks")
    wrap(runner.Measurement, "start", "task start")
    wrap_readiness(recorder)
    # The window's hey and the reads after it: one exec.
    wrap(runner.Measurement, "window", "load")
    # A warm-up's hey and the reads after it, when not in the readiness exec: one exec.
    wrap(runner.Measurement, "warm_up", "load")
    for name in ("snapshot", "before_window", "after_window", "docker_counters"):
        wrap(runner.Measurement, name, "reads")
    wrap(runner.Measurement, "remove", "clean-up")
    for name in ("parse_csv", "check_samples", "parse_loadgen_usage"):
        wrap(hey, name, "parsing")
    wrap(record, "write_run", "writing")
    wrap(requests.Session, "send", "api", "api_requests")
    try:
        import paramiko

        wrap(paramiko.SSHClient, "connect", "ssh connect", "ssh_connections")
        wrap(paramiko.Transport, "open_session", "ssh channel", "ssh_sessions")
        from sidecar_bench import sshconn

        wrap(sshconn, "open_socket_channel", "ssh channel", "ssh_socket_channels")
    except ImportError:  # pragma: no cover - no ssh support installed
        pass


def child(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    # What workflow/scripts/run_condition.py imports, after what it decides before it.
    from sidecar_bench.runjob import RunJobError, log_path, parse  # noqa: F401
    from sidecar_bench.transports import skip_ssh_transport

    skip_ssh_transport(spec["hosts"])
    from sidecar_bench import job
    from sidecar_bench.hosts import lock_dir  # noqa: F401

    recorder = Recorder()
    instrument(recorder)
    entered = time.monotonic()
    timings: dict[str, Any] = {"started": STARTED, "entered": entered}
    try:
        job.main(
            spec["condition"],
            spec["load"],
            spec["hosts"],
            spec["refs"],
            spec["out"],
            spec["lock_dir"],
            repeat=spec["repeat"],
        )
    finally:
        timings["returned"] = time.monotonic()
        timings["events"] = recorder.events
        timings["counts"] = recorder.counts
        Path(spec["timings"]).write_text(json.dumps(timings))
    job.leave_quickly()  # as the rule script ends


# ---------------------------------------------------------------- the parent: runs and analysis

# When two timed steps overlap in time, the time goes to the first in this order (the hey call
# that is the load above all: a snapshot taken while hey runs costs no harness time).
PRIORITY = (
    "load",
    "lease",
    "connect",
    "task start",
    "readiness",
    "reads",
    "clean-up",
    "parsing",
    "writing",
    "checks",
)


def breakdown(
    timings: dict[str, Any], spawned: float, exited: float, load_s: float
) -> dict[str, Any]:
    """One run's harness time and its phases, from its child's timed steps."""
    events = [(phase, start, end, ok) for phase, start, end, ok in timings["events"]]
    entered, returned = timings["entered"], timings["returned"]
    # Waiting for another holder: from the first refused attempt to the attempt that succeeded.
    refused = [
        start
        for phase, start, _, ok in events
        if (phase == "flock" and not ok) or (phase == "lease" and not ok)
    ]
    waited = (0.0, 0.0)
    if refused:
        taken = [
            start
            for phase, start, _, ok in events
            if phase == "lease" and ok and start > min(refused)
        ]
        waited = (min(refused), taken[0] if taken else returned)
    wait = waited[1] - waited[0]
    timed = [(phase, start, end) for phase, start, end, _ in events if phase in PRIORITY]
    points = sorted(
        {
            entered,
            returned,
            *[t for _, s, e in timed for t in (s, e) if entered <= t <= returned],
            *[t for t in waited if entered <= t <= returned],
        }
    )
    phases = dict.fromkeys(PHASES, 0.0)
    for left, right in itertools.pairwise(points):
        middle = (left + right) / 2
        if waited[0] <= middle < waited[1]:
            continue  # waiting for the engine, refused attempts included: not the harness's time
        active = {phase for phase, start, end in timed if start <= middle < end}
        phase = next((p for p in PRIORITY if p in active), "other")
        phases["loadgen" if phase == "load" else phase] += right - left
    # The load itself is not harness time; what the hey execs took beyond it is.
    phases["loadgen"] -= load_s
    phases["start+imports"] = entered - spawned
    phases["exit"] = exited - returned
    total = exited - spawned - load_s - wait
    counts = timings.get("counts", {})
    spent = {
        phase: round(sum(end - start for p, start, end, _ in events if p == phase), 3)
        for phase in ("ssh connect", "ssh channel")
    }
    return {
        "harness_s": round(total, 3),
        "lock_wait_s": round(wait, 3),
        "phases_s": {name: round(value, 3) for name, value in phases.items()},
        "ssh_connections": counts.get("ssh_connections", 0),
        "ssh_channels": counts.get("ssh_sessions", 0) + counts.get("ssh_socket_channels", 0),
        "ssh_sessions": counts.get("ssh_sessions", 0),
        "api_requests": counts.get("api_requests", 0),
        "clients": counts.get("clients", 0),
        "ssh_connect_s": spent["ssh connect"],
        "ssh_channel_s": spent["ssh channel"],
        "process_start_s": round(timings["started"] - spawned, 3),
    }


def image_refs(
    host: dict[str, Any], variants: list[str], directory: Path, build: bool
) -> dict[str, str]:
    """The image rule's JSON file for each variant's image on the engine, by variant (built first with build)."""
    import docker
    from sidecar_bench import hosts, image

    client = hosts.client_for(host, 600)
    refs = {}
    try:
        for variant in variants:
            tag = image.image_tag(variant)
            try:
                image_id = client.images.get(tag).id
            except docker.errors.ImageNotFound:
                if not build:
                    sys.exit(
                        f"bench_harness: image {tag} is not on the engine {host['url'] or 'local'}: build it "
                        "first (rule build_image) or pass --build"
                    )
                with hosts.host_lock(
                    [host], hosts.lock_dir(), 3600, "bench_harness image build"
                ) as (_, locked):
                    base = image.ensure_base(locked, "debian:bookworm-slim", "debootstrap")
                    image_id = image.ensure_variant(locked, variant, base)
            path = directory / f"{variant}.json"
            path.write_text(
                json.dumps(
                    {
                        "variant": variant,
                        "tag": tag,
                        "inputs_digest": "harness",
                        "hosts": {host["name"]: image_id},
                    }
                )
            )
            refs[variant] = str(path)
    finally:
        client.close()
    return refs


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def measure(
    url: str | None,
    reps: int,
    sidecars: list[int],
    duration_s: float,
    warmup_s: float,
    concurrency: int,
    build: bool = False,
    env: dict[str, str] | None = None,
    say: Callable[[str], None] = lambda line: None,
    hold: str = "workflow",
    job_server: bool = True,
) -> dict[str, Any]:
    from sidecar_bench import engine_hold, hosts, jobserver
    from sidecar_bench.conditions import LoadSettings

    host = {"name": "bench", "url": url}
    load = LoadSettings(
        duration_s=duration_s, warmup_s=warmup_s, concurrency=concurrency, ready_timeout_s=60
    )
    runs = []
    with tempfile.TemporaryDirectory(prefix="sidecar-bench-harness-") as tmp:
        directory = Path(tmp)
        matrix = conditions(sidecars)
        refs = image_refs(host, sorted({c.variant for c in matrix} | {"loadgen"}), directory, build)
        if hold == "workflow":  # as Snakemake's onstart does: the runs borrow this process's lease
            for line in engine_hold.hold([host], "bench_harness"):
                say(line)
        child_env = {**os.environ, **(env or {})}
        child_env.pop(jobserver.ENV, None)
        try:
            # As Snakemake's onstart does: each run forked from a process with the imports made.
            path = jobserver.start(str(Path(jobserver.__file__).parents[1])) if job_server else None
            if path:  # None: SIDECAR_BENCH_JOB_SERVER=off in this environment
                child_env[jobserver.ENV] = path
            for repeat in range(1, reps + 1):
                for condition in matrix:
                    number = len(runs) + 1
                    spec = {
                        "condition": condition.as_dict(),
                        "load": load.as_dict(),
                        "hosts": [host],
                        "refs": {"task": refs[condition.variant], "loadgen": refs["loadgen"]},
                        "out": str(directory / f"run{number}.parquet"),
                        "lock_dir": str(hosts.lock_dir()),
                        "repeat": repeat,
                        "timings": str(directory / f"timings{number}.json"),
                    }
                    spec_path = directory / f"spec{number}.json"
                    spec_path.write_text(json.dumps(spec))
                    spawned = time.monotonic()
                    done = subprocess.run(
                        [sys.executable, str(Path(__file__).resolve()), "--child", str(spec_path)],
                        env=child_env,
                        capture_output=True,
                        text=True,
                        check=False,
                    )
                    exited = time.monotonic()
                    if done.returncode != 0:
                        sys.exit(
                            f"bench_harness: run {number} ({condition.id}) failed:\n{done.stderr[-4000:]}"
                        )
                    timings = json.loads(Path(spec["timings"]).read_text())
                    run = {
                        "run": number,
                        "sidecars": condition.sidecar_count,
                        "repeat": repeat,
                        **breakdown(timings, spawned, exited, duration_s + warmup_s),
                    }
                    runs.append(run)
                    say(
                        f"run {number}: harness {run['harness_s']:.2f} s (lock wait {run['lock_wait_s']:.1f} s, "
                        f"{run['ssh_connections']} ssh connections, {run['ssh_channels']} channels of which "
                        f"{run['ssh_sessions']} sessions)"
                    )
        finally:
            jobserver.stop()
            engine_hold.release()
    phase_medians = {
        name: round(statistics.median(r["phases_s"][name] for r in runs), 3) for name in PHASES
    }
    slowest = max(phase_medians, key=phase_medians.__getitem__)
    return {
        "engine": url or "local socket",
        "lease": hold,
        "job_server": job_server,
        "runs": len(runs),
        "duration_s": duration_s,
        "warmup_s": warmup_s,
        "concurrency": concurrency,
        "sidecars": sidecars,
        "harness_s": summary([r["harness_s"] for r in runs]),
        "phases_median_s": phase_medians,
        "slowest_phase": slowest,
        "ssh_connections_median": statistics.median(r["ssh_connections"] for r in runs),
        "ssh_channels_median": statistics.median(r["ssh_channels"] for r in runs),
        "ssh_sessions_median": statistics.median(r["ssh_sessions"] for r in runs),
        "api_requests_median": statistics.median(r["api_requests"] for r in runs),
        "lock_wait_s": summary([r["lock_wait_s"] for r in runs]),
        "samples": runs,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--host",
        default=None,
        help="engine address (ssh://user@host[:port], unix://..., tcp://...); default: DOCKER_HOST "
        "or the local socket",
    )
    parser.add_argument(
        "--reps", type=int, default=3, help="repetitions of each condition (default 3)"
    )
    parser.add_argument(
        "--sidecars", default="0,1", help="sidecar counts, one condition each (default 0,1)"
    )
    parser.add_argument(
        "--duration", type=float, default=3.0, help="measured window per run, s (default 3)"
    )
    parser.add_argument("--warmup", type=float, default=1.0, help="warm-up per run, s (default 1)")
    parser.add_argument("--concurrency", type=int, default=10, help="hey -c (default 10)")
    parser.add_argument(
        "--build", action="store_true", help="build the images on the engine if it lacks them"
    )
    parser.add_argument(
        "--lease",
        choices=("workflow", "job"),
        default="workflow",
        help="who takes the engine's lease: this process for every run, as a workflow does "
        "(engine_hold.py; default), or each run its own",
    )
    parser.add_argument(
        "--job-server",
        choices=("on", "off"),
        default="on",
        help="each run forked from the job server, as a workflow's are (jobserver.py; default), or each "
        "run a process of its own that makes its imports",
    )
    parser.add_argument("--samples", action="store_true", help="print every run's phases too")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        from sidecar_bench.jobserver import delegate

        # In the job server's forked process, if one runs.
        status = delegate(__file__, ["--child", args.child])
        if status is not None:
            sys.exit(status)
        child(args.child)
        return
    try:
        sidecars = [int(n) for n in args.sidecars.split(",")]
    except ValueError:
        parser.error(f"--sidecars {args.sidecars!r} is not a comma-separated list of whole numbers")
    if args.reps < 1 or args.duration <= 0 or args.warmup < 0 or any(n < 0 for n in sidecars):
        parser.error(
            f"--reps {args.reps} must be >= 1, --duration {args.duration:g} > 0, --warmup "
            f"{args.warmup:g} >= 0 and --sidecars {args.sidecars} >= 0"
        )
    result = measure(
        args.host,
        args.reps,
        sidecars,
        args.duration,
        args.warmup,
        args.concurrency,
        args.build,
        say=lambda line: print(f"bench_harness: {line}", file=sys.stderr, flush=True),
        hold=args.lease,
        job_server=args.job_server == "on",
    )
    if not args.samples:
        result.pop("samples")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()

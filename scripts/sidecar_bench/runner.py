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
   hey run starting on a freshly started app), then those reads again.
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

Its plumbing lives beside it: containers.py (labels, names, confinement, the watcher, execs,
removal), signals.py (SIGINT, SIGTERM, SIGHUP and the clean-up), failures.py (RunError,
AppStopped, the failed-request count) and checks.py (the limits and settings read back).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import docker
import docker.errors

from . import cgroup, environment, hey, knobs, openloop, record, taskcgroup, warmup
from . import proxy as proxymod
from .checks import check_app_environment, check_host_capacity, check_limits
from .conditions import Condition, LoadSettings
from .containers import (LOADGEN_TMPFS, TASK_TMPFS, TRANSPORT_ERRORS, ExecResult, container_name, engine_address,
                         exec_in, hardening, labels, remove_container, watched)
from .failures import (FAILED_SOURCE, OOM_SCRIPT, AppStopped, RunError, count_failed, describe_exit,
                       parse_netns_probe, parse_oom_kills, process_exit, signal_name)
from .labels import PART_LABEL, RUN_LABEL, TASK_CGROUP_LABEL, VARIANT_LABEL
from .signals import Interrupted, signals_deferred, signals_raise

# Names that moved to the modules above, still read here by the tests and tools that use `runner.<name>`.
from .containers import WATCH_NAME as WATCH_NAME
from .containers import WATCH_SCRIPT as WATCH_SCRIPT
from .failures import parse_tcp_counters as parse_tcp_counters
from .labels import CONDITION_LABEL as CONDITION_LABEL
from .labels import PROJECT as PROJECT
from .labels import PROJECT_LABEL as PROJECT_LABEL
from .signals import STOP_SIGNALS as STOP_SIGNALS

log = logging.getLogger(__name__)

APP_URL = "http://127.0.0.1:8080"
WORK_URL = f"{APP_URL}/work"
STATS_URL = f"{APP_URL}/stats"
READY_POLL_S = 0.05
# One readiness exec polls this long; between two, the task's state is checked.
READY_EXEC_S = 1.0
# The entrypoint writes the roles file right after starting the processes, before the app
# answers: waiting this long for it once the app answers is ample.
ROLES_WAIT_S = 5.0
LOG_TAIL_LINES = 30
# How far back the log is searched for the entrypoint's line on the process that ended first.
LOG_SEARCH_LINES = 500
# When a read fails before the window, how long the task may take to exit before the read's own
# error is reported instead of the app's death.
DYING_WAIT_S = 2.0
# hey is killed if it runs this much longer than asked; it never should.
HEY_GRACE_S = 60
# The load generator's sleep outlives every step of a run by this much, then it exits.
LOADGEN_GRACE_S = 60
# The task outlives the load generator by this much (its last snapshots), then it is killed.
TASK_GRACE_S = 30
# hey writes its CSV here, inside the load generator (its own file system: one run only).
LOADGEN_CSV = "/tmp/hey.csv"
# The sidecar program in the task images (task-image/sidecar): the task topology runs it as a container's command.
SIDECAR_SCRIPT = "/sidecar/sidecar.py"
# hey formats its CSV with text/template after the load stops, ~15 µs a row (15 s at its
# 1,000,000-row cap), so its exit is not the load's end: the after-snapshot is taken this long
# after hey's duration instead, one CFS period for the requests still in flight.
LOAD_END_MARGIN_S = 0.1
NETNS_PROBE = "cat /proc/net/snmp && echo @@stats && curl -sS --max-time 10 " + STATS_URL
# Before the window: the environment probe and the network namespace counters in one exec.
BEFORE_SCRIPT = f"{environment.PROBE_SCRIPT}; echo @@netns; {NETNS_PROBE}"
# After the window: the counters, then hey's CSV file ($1).
AFTER_SCRIPT = f'{NETNS_PROBE} && echo && echo @@csv && cat "$1"'
# Poll GET $1 every $3 s, at most $2 times; once it answers 200, print @@ready and go on with
# BEFORE_SCRIPT (one exec instead of two); else print the last answer and exit 99.
READY_SCRIPT = r"""
i=0
until code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1"); [ "$code" = 200 ]; do
  i=$((i + 1)); [ "$i" -ge "$2" ] && { echo "@@last $code"; exit 99; }
  sleep "$3"
done
echo @@ready
""" + BEFORE_SCRIPT
# In the task, before the window: wait for the roles file ($1, every $3 s, at most $2 times; exit 99 if it never
# comes), then the snapshot. The sleeps fall before the snapshot's reads, outside the measured window.
ROLES_THEN_SNAPSHOT = r"""
i=0
until [ -s "$1" ]; do
  i=$((i + 1)); [ "$i" -ge "$2" ] && exit 99
  sleep "$3"
done
""" + cgroup.SNAPSHOT_SCRIPT
NOT_READY = 99


# --- load model (open loop: docs/open-loop.md) ---------------------------------------------
# An open run keeps the hey container for readiness and the before/after reads, and sends its
# load from a third container, the open-loop generator's (image loadgen-open), in the same
# network namespace; its CPU counter is the generator's alone.
OPEN_CSV = "/tmp/openloop.csv"
OPEN_SUMMARY = "/tmp/openloop-summary.json"
# Enough connections that the pool never makes the generator a closed loop at the rates here
# (a 75 ms stall at 3,000 requests/s holds ~225); arrivals finding all busy are dropped, counted.
OPEN_MAX_CONNS = 1000
# Sent later than this after its intended time, a request counts as late (its lag is in its latency).
OPEN_SLACK_S = 0.001
# The warm-up's arrivals come from another seed than the window's (seed = repetition).
OPEN_WARMUP_SEED = 1_000_000


@dataclass(frozen=True)
class OpenLoad:
    """How an open condition is loaded: its rate (requests/s), the generator's image, and the capacity
    record the rate was taken from (capacity.py), kept in the run file."""

    rate_per_s: float
    image: Any
    capacity: Mapping[str, Any] | None = None


# --- end load model ------------------------------------------------------------------------


def utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="milliseconds")


def task_environment(condition: Condition, sidecar_burn: str = "wall") -> dict[str, str]:
    return {
        "APP_TYPE": condition.app,
        "SIDECAR_COUNT": str(condition.sidecar_count),
        "SIDECAR_LOAD": f"{condition.sidecar_load_pct:g}",
        "SIDECAR_BURN": sidecar_burn,
        **proxymod.environment(condition),
        **knobs.runtime_environment(condition),
    }


class Measurement:
    """The containers of one run and the steps on them; remove() undoes everything start() did."""

    def __init__(self, client: docker.DockerClient, condition: Condition, load: LoadSettings,
                 task_image: Any, loadgen_image: Any, run_id: str, open_load: OpenLoad | None = None,
                 repeat: int = 1) -> None:
        self.client = client
        self.condition = condition
        self.load = load
        self.task_image = task_image
        self.loadgen_image = loadgen_image
        self.run_id = run_id
        self.task: Any = None
        self.loadgen: Any = None
        # The attached stdin of each container (WATCH_SCRIPT): held open until remove().
        self.stdins: list[Any] = []
        # The before-window reads of the load generator (probe, Tcp counters, served), taken by wait_ready.
        self.before: tuple[str, dict[str, int], int] | None = None
        # Set once the measured window's steps begin: a death from then on is a death inside the window.
        self.in_window = False
        # Open loop: the rate and generator, its container, and the measured window's summary.
        self.open_load = open_load
        self.repeat = repeat
        self.openloop: Any = None
        self.open_summary: openloop.Summary | None = None

    def loadgen_deadline_s(self) -> int:
        """How long the load generator lives at most: readiness, warm-up and window, each with its grace."""
        load = self.load
        return math.ceil(load.ready_timeout_s + load.warmup_limit_s() + load.duration_s + 2 * HEY_GRACE_S
                         + LOADGEN_GRACE_S)

    def task_deadline_s(self) -> int:
        """How long the task lives at most: the load generator's deadline and time for the last snapshots."""
        return self.loadgen_deadline_s() + TASK_GRACE_S

    def task_entrypoint(self) -> list[str]:
        """The image's own entrypoint under WATCH_SCRIPT: the app and its sidecars stop with the runner, and
        at the latest when the run could no longer be going on (the image is not changed)."""
        config = self.task_image.attrs.get("Config") or {}
        entrypoint = list(config.get("Entrypoint") or []) + list(config.get("Cmd") or [])
        if not entrypoint:
            raise RunError(f"{self.task_image.id[:19]}: the task image has no entrypoint")
        return watched(self.task_deadline_s(), entrypoint)

    def loadgen_entrypoint(self) -> list[str]:
        """The load generator does nothing but host execs: it sleeps, and stops like the task."""
        return watched(self.loadgen_deadline_s(), ["sleep", str(self.loadgen_deadline_s())])

    def _start_attached(self, image: Any, **kwargs: Any) -> Any:
        """Create a container with stdin open for one client (StdinOnce), attach its stdin, then start it."""
        container = self.client.containers.create(image, detach=False, stdin_open=True, **kwargs)
        # Only stdin: an attached stdout nobody reads could hold up the container's writes.
        self.stdins.append(self.client.api.attach_socket(container.id, params={"stdin": 1, "stream": 1}))
        container.start()
        return container

    def start(self) -> None:
        condition = self.condition
        memory = f"{condition.memory_mb}m"
        self.task = self._start_attached(
            self.task_image.id,
            entrypoint=self.task_entrypoint(),  # an entrypoint given clears the image's Cmd, now part of it
            name=container_name(condition, self.run_id, "task"),
            environment=task_environment(condition, self.load.sidecar_burn),
            labels=labels(condition, self.run_id, "task"),
            **knobs.task_cpu_options(condition),
            mem_limit=memory,
            memswap_limit=memory,  # equal to the memory limit: no swap
            network_mode="none",
            **hardening(proxymod.task_tmpfs(condition, TASK_TMPFS)),
        )
        log.info("started task container %s (%s)", self.task.name, self.task.short_id)
        if condition.cpu_burst_pct is not None:
            self.set_burst()
        try:
            self.loadgen = self._start_attached(
                self.loadgen_image.id,
                entrypoint=self.loadgen_entrypoint(),
                name=container_name(condition, self.run_id, "loadgen"),
                labels=labels(condition, self.run_id, "loadgen"),
                network_mode=f"container:{self.task.id}",
                **hardening(LOADGEN_TMPFS),
            )
        except docker.errors.APIError as err:
            self.task.reload()
            if self.task.status != "running":
                raise self.start_error("exited before the load generator could join it") from err
            raise
        log.info("started load generator %s in the task's network namespace", self.loadgen.name)
        if self.open_load is not None:
            self.start_open_generator()

    # --- load model (open loop) ---------------------------------------------------------------
    def start_open_generator(self) -> None:
        """The open-loop generator's container, idle (sleep) in the task's network namespace."""
        self.openloop = self.client.containers.run(
            self.open_load.image.id,
            entrypoint=["sleep"],
            command=[str(self.loadgen_deadline_s())],
            detach=True,
            name=container_name(self.condition, self.run_id, "openloop"),
            labels=labels(self.condition, self.run_id, "openloop"),
            network_mode=f"container:{self.task.id}",
            **hardening(LOADGEN_TMPFS),
        )
        log.info("started open-loop generator %s in the task's network namespace", self.openloop.name)

    def generate(self, duration_s: float, csv_path: str, warmup: bool = False) -> ExecResult:
        """The load of a warm-up or of the measured window: hey's closed loop, or the open loop at the rate."""
        if self.open_load is None:
            return self.hey(duration_s, csv_path)
        cond = self.condition
        args = openloop.command(self.work_url, self.open_load.rate_per_s, duration_s, arrivals=cond.arrivals,
                                max_conns=OPEN_MAX_CONNS, slack_s=OPEN_SLACK_S,
                                seed=self.repeat + (OPEN_WARMUP_SEED if warmup else 0), csv_path="-",
                                summary_path="/dev/null" if warmup else OPEN_SUMMARY)
        limit = f"{duration_s + HEY_GRACE_S:g}"
        out = "/dev/null" if warmup else OPEN_CSV
        return exec_in(self.client, self.openloop.id,
                       ["sh", "-c", hey.TO_FILE_SCRIPT, "openloop-to-file", out, "timeout", "-s", "KILL", limit,
                        *args])

    def read_open_csv(self) -> str:
        result = exec_in(self.client, self.openloop.id, ["cat", OPEN_CSV])
        if result.exit_code != 0:
            raise RunError(f"{self.condition.id}: reading the open-loop generator's CSV {OPEN_CSV} failed: "
                           f"{result.stderr[:300]}")
        return result.stdout

    def read_open_summary(self, samples: Any) -> openloop.Summary:
        """The window's generator summary, checked against its rows (one row per response)."""
        result = exec_in(self.client, self.openloop.id, ["cat", OPEN_SUMMARY])
        if result.exit_code != 0:
            raise RunError(f"{self.condition.id}: reading the open-loop summary {OPEN_SUMMARY} failed: "
                           f"{result.stderr[:300]}")
        summary = openloop.parse_summary(result.stdout)
        if summary.responses != len(samples):
            raise openloop.OpenLoopError(f"open-loop summary counts {summary.responses} responses, its CSV has "
                                         f"{len(samples)} rows")
        return summary

    # --- end load model -------------------------------------------------------------------------

    def check_roles_alive(self) -> None:
        """The process topology's roles live in the task container, checked with it: nothing more here."""

    def check_layout(self, snapshot: cgroup.TaskSnapshot) -> dict[str, Any] | None:
        """The task topology's cgroup layout, checked and described; the process topology has none."""
        return None

    def role_cpu(self, before: cgroup.TaskSnapshot, after: cgroup.TaskSnapshot) -> dict[str, float]:
        """CPU seconds of each role over the window: each role's process tree in the task container."""
        return cgroup.role_cpu_seconds(before, after)

    def set_burst(self) -> None:
        """Write the CFS burst into the task's cgroup with the helper container (knobs.py says why one)."""
        info = self.client.info()
        burst = self.condition.burst_us
        try:
            output = self.client.containers.run(
                self.loadgen_image.id,
                entrypoint=["sh"],
                command=knobs.helper_command(info, self.task.id, burst),
                name=container_name(self.condition, self.run_id, "burst"),
                labels=labels(self.condition, self.run_id, "burst"),
                remove=True,
                stdout=True,
                stderr=True,
                **knobs.helper_options(info),
            )
        except docker.errors.ContainerError as err:
            raise RunError(f"{self.condition.id}: setting the CFS burst to {burst} us failed: "
                           f"{(err.stderr or b'').decode(errors='replace').strip()[:300]}") from err
        written = output.decode(errors="replace").strip()
        if written != str(burst):
            raise RunError(f"{self.condition.id}: wrote a CFS burst of {burst} us, the cgroup holds {written!r}")
        log.info("set the task's CFS burst to %d us", burst)

    def app_environment(self) -> dict[str, str]:
        """The runtime settings in the app process's own environment (/proc/PID/environ)."""
        result = exec_in(self.client, self.task.id, ["sh", "-c", knobs.APP_ENV_SCRIPT, "env", cgroup.ROLES_FILE])
        if result.exit_code != 0:
            raise RunError(f"{self.condition.id}: reading the app's environment failed: {result.stderr[:300]}")
        return knobs.parse_app_env(result.stdout)

    def start_error(self, what: str, phase: str = "start", detail: str = "",
                    died: Mapping[str, Any] | None = None, oom_killed: bool = False) -> AppStopped:
        """The app's (or a sidecar's) death as an AppStopped: which process, how, OOM, the last log lines.

        phase: "start" (before the measured window) or "window" (inside it), kept in .failure;
        detail: a line after the first (e.g. the call that failed because the task had died);
        died: which process ended, when known otherwise than from the entrypoint's log (process_exit);
        oom_killed: the task cgroup's own counter saw an OOM kill (the engine's OOMKilled may not).
        """
        state = self.task.attrs.get("State", {})
        try:
            full = self.task.logs(tail=LOG_SEARCH_LINES).decode(errors="replace")
        except TRANSPORT_ERRORS:
            full = ""
        tail = "\n".join(full.rstrip().splitlines()[-LOG_TAIL_LINES:]) if full else "(logs unavailable)"
        died = dict(died) if died is not None else process_exit(full)
        running = state.get("Status") == "running"
        oom_killed = oom_killed or bool(state.get("OOMKilled"))
        failure = {
            **died,
            "phase": phase,
            "oom_killed": oom_killed,
            "container_status": state.get("Status"),
            "container_exit_code": None if running else state.get("ExitCode"),
        }
        oom = " It was OOM-killed: raise memory_mb." if oom_killed else ""
        if died["role"] is not None or not running:
            how = f"; {describe_exit(died)}"
        elif oom_killed:
            how = "; no process of the app or its sidecars ended: the OOM killer took another process of the task"
        else:
            how = ""
        return AppStopped(
            f"{self.condition.id}: the app {what}{how} (container status {state.get('Status')}, "
            f"exit code {state.get('ExitCode')}, OOM-killed {oom_killed}).{oom}\n"
            + (f"{detail}\n" if detail else "")
            + f"Last {LOG_TAIL_LINES} log lines of {self.task.name}:\n{tail or '(empty)'}",
            failure,
        )

    def task_exits_within(self, seconds: float) -> bool:
        """Whether the task has exited or does so within seconds (its entrypoint stops the rest first)."""
        try:
            self.task.wait(timeout=seconds)
        except TRANSPORT_ERRORS:
            pass  # still running when the time was up, or the engine does not answer (below)
        try:
            self.task.reload()
        except TRANSPORT_ERRORS:
            return False  # the engine itself went away: the caller's own error says more
        return self.task.status != "running"

    def task_exec(self, script: str) -> ExecResult:
        return exec_in(self.client, self.task.id, ["sh", "-c", script])

    def loadgen_exec(self, cmd: list[str]) -> ExecResult:
        return exec_in(self.client, self.loadgen.id, cmd)

    def proxy_exec(self, script: str) -> ExecResult:
        """A shell script in the container a real proxy runs in (here: the task's)."""
        return self.task_exec(script)

    def wait_ready(self) -> float:
        """Block until /work answers 200; return the seconds it took. Also takes the before-window reads.

        Polling runs inside one exec (READY_EXEC_S long at most), and the same exec goes on
        to the environment probe and the network namespace counters: an API round trip
        costs more than a poll interval.
        """
        started = time.monotonic()
        deadline = started + self.load.ready_timeout_s
        polls = str(max(1, round(READY_EXEC_S / READY_POLL_S)))
        while True:
            try:
                result = self.loadgen_exec(["sh", "-c", READY_SCRIPT, "ready", self.work_url, polls,
                                            f"{READY_POLL_S:g}"])
                head, ready, rest = result.stdout.partition("@@ready\n")
                if ready:
                    self.before = self._before_window(result, rest)
                    return time.monotonic() - started
            except (docker.errors.APIError, RunError):
                # An exec into a container that has just died (409), or reads cut off by the app's
                # death (too little memory, say): the task's state says why, once it has exited.
                if self.task_exits_within(DYING_WAIT_S):
                    raise self.start_error("exited before it answered /work") from None
                raise
            self.task.reload()
            if self.task.status != "running":
                raise self.start_error("exited before it answered /work")
            if time.monotonic() > deadline:
                last = head.strip().removeprefix("@@last").strip() or result.stderr.strip()
                raise self.start_error(
                    f"did not answer GET /work with 200 within ready_timeout_s={self.load.ready_timeout_s:g} "
                    f"(last answer: {last!r})"
                )

    def snapshot(self, wait_roles: bool = False) -> tuple[cgroup.TaskSnapshot, float]:
        """The task's cgroup and processes (first waiting for the roles file if wait_roles), and when it returned."""
        if wait_roles:
            polls = str(max(1, round(ROLES_WAIT_S / READY_POLL_S)))
            result = exec_in(self.client, self.task.id, ["sh", "-c", ROLES_THEN_SNAPSHOT, "snapshot",
                                                         cgroup.ROLES_FILE, polls, f"{READY_POLL_S:g}"])
        else:
            result = self.task_exec(cgroup.SNAPSHOT_SCRIPT)
        taken = time.monotonic()
        if result.exit_code == NOT_READY and wait_roles:
            raise self.start_error(f"answered /work but did not write {cgroup.ROLES_FILE} within {ROLES_WAIT_S:g} s")
        if result.exit_code != 0:
            raise RunError(f"{self.condition.id}: reading the cgroup inside the task failed: {result.stderr[:300]}")
        return cgroup.parse_snapshot(result.stdout), taken

    def oom_kills(self) -> int | None:
        """The task cgroup's oom_kill counter (None if unreadable)."""
        result = self.task_exec(OOM_SCRIPT)
        return parse_oom_kills(result.stdout) if result.exit_code == 0 else None

    def docker_counters(self) -> cgroup.CgroupCounters:
        return cgroup.parse_docker_stats(self.task.stats(stream=False, one_shot=True))

    def before_window(self) -> None:
        """Read the environment probe and the network namespace counters again (after a warm-up)."""
        result = self.loadgen_exec(["sh", "-c", BEFORE_SCRIPT])
        self.before = self._before_window(result, result.stdout)

    def _before_window(self, result: ExecResult, text: str) -> tuple[str, dict[str, int], int]:
        """BEFORE_SCRIPT's output -> (probe text, Tcp counters, served)."""
        if result.exit_code != 0:
            raise RunError(f"{self.condition.id}: reading /stats and /proc/net/snmp failed: {result.stderr[:300]}")
        probe, _, netns = text.partition("@@netns\n")
        return (probe, *parse_netns_probe(netns))

    def after_window(self) -> tuple[dict[str, int], int, str]:
        """The network namespace counters, then hey's CSV file -> (Tcp counters, served, CSV text).

        Open loop: the CSV is the open-loop generator's, from its own container."""
        csv_file = "/dev/null" if self.open_load is not None else LOADGEN_CSV
        result = self.loadgen_exec(["sh", "-c", AFTER_SCRIPT, "after", csv_file])
        if result.exit_code != 0:
            raise RunError(f"{self.condition.id}: reading /stats, /proc/net/snmp and hey's CSV {LOADGEN_CSV} "
                           f"failed: {result.stderr[:300]}")
        netns, _, csv = result.stdout.partition("\n@@csv\n")
        if self.open_load is not None:
            csv = self.read_open_csv()
        return (*parse_netns_probe(netns), csv)

    def hey(self, duration_s: float, csv_path: str) -> ExecResult:
        """hey with its CSV written to csv_path in the load generator; stdout holds its CPU counter lines."""
        limit = f"{duration_s + HEY_GRACE_S:g}"
        return self.loadgen_exec(hey.command_to_file(self.work_url, duration_s, self.load.concurrency, csv_path,
                                                     ("timeout", "-s", "KILL", limit)))

    @property
    def work_url(self) -> str:
        """What hey loads: /work on the proxy's port when a real proxy is in the path, else on the app's."""
        return f"{proxymod.base_url(self.condition)}/work"

    def proxy_counts(self) -> tuple[int, int, int | None] | None:
        """A real proxy's requests received and forwarded, and access log lines (outside the window); None
        without one."""
        if not self.condition.real_proxy:
            return None
        stats = self.loadgen_exec(["curl", "-sS", "--max-time", "10", proxymod.STATS_CSV_URL])
        lines = self.proxy_exec(proxymod.COUNT_LOG_SCRIPT)
        if stats.exit_code != 0 or lines.exit_code != 0:
            raise RunError(f"{self.condition.id}: reading the proxy's counters failed: "
                           f"{(stats.stderr + lines.stderr).strip()[:300]}")
        try:
            return (*proxymod.parse_requests(stats.stdout), proxymod.parse_log_lines(lines.stdout))
        except proxymod.ProxyCountError as err:
            raise RunError(f"{self.condition.id}: {err}") from err

    def remove(self) -> None:
        """Remove this run's containers, found by their run label too (covers a create that raced a signal)."""
        found = {c.id: c for c in (self.openloop, self.loadgen, self.task) if c is not None}
        try:
            for container in self.client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={self.run_id}"}):
                found.setdefault(container.id, container)
        except TRANSPORT_ERRORS as err:
            # Remove what this object knows of all the same: the task above all.
            log.warning("listing containers of run %s failed: %s", self.run_id, err)
        # Both at once: each force removal is a kill, a wait and a delete on the engine.
        with ThreadPoolExecutor(max_workers=max(1, len(found))) as pool:
            list(pool.map(remove_container, found.values()))
        # After the removal: a closed stdin would end the containers too, but with status 137.
        self._close_stdins()

    def _close_stdins(self) -> None:
        """Close the stdins attached to the run's containers (their watchers then end them, if still up)."""
        for sock in self.stdins:
            try:
                sock.close()
            except Exception as err:  # any failure: the engine may be gone; the containers are removed
                log.debug("closing an attached stdin failed: %s", err)
        self.stdins.clear()


def _timed(function: Any, *args: Any) -> tuple[Any, float]:
    started = time.monotonic()
    return function(*args), time.monotonic() - started


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
        raise RunError(f"{what} image {ref!r} is not on the Docker engine {client.api.base_url}: build it first "
                       "(snakemake builds it with rule build_image)") from None


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
) -> Path:
    """Measure one condition on the engine behind client and write out_path (a run file).

    task_image / loadgen_image: an image id or tag, or a docker Image object.
    repeat: which repetition of the condition this run is (1, 2, ...), stored as meta["repeat"].
    open_load: for an open-loop condition (load_model open), its rate and generator image (required).
    Raises RunError with what went wrong; Interrupted on SIGINT/SIGTERM. No
    container of this run survives the call, and out_path exists only if the
    run succeeded.
    """
    condition = as_condition(condition)
    load = as_load(load).for_app(condition.app)  # the app's own warm-up (load.app_warmup_s), if it has one
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise RunError(f"{condition.id}: repeat {repeat!r} is not a whole number >= 1")
    info = client.info()
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
            raise RunError(f"{condition.id}: an open-loop condition needs its rate and the loadgen-open image")
        open_load = OpenLoad(open_load.rate_per_s, _image(client, open_load.image, "open-loop generator"),
                             open_load.capacity)
    else:
        open_load = None
    variant = (task_image.labels or {}).get(VARIANT_LABEL)
    if variant is not None and variant != condition.variant:
        raise RunError(f"{condition.id}: needs the {condition.variant!r} task image, got {variant!r} ({task_image.id})")
    run_id = uuid.uuid4().hex
    run_started = utc_now()
    warmed = None  # the until_steady warm-up's record, if that mode ran
    kind = TaskMeasurement if condition.topology == "task" else Measurement
    measurement = kind(client, condition, load, task_image, loadgen_image, run_id, open_load, repeat)
    saved_timeout = client.api.timeout
    # API calls block for the whole hey run: the SDK's 60 s default would cut long windows.
    client.api.timeout = max(saved_timeout or 60, max(load.duration_s, load.warmup_s, warmup.BURST_S) + HEY_GRACE_S + 60)
    try:
        with signals_raise():
            try:
                measurement.start()
                ready_s = measurement.wait_ready()
                log.info("%s: app ready after %.1f s", condition.id, ready_s)
                if load.warmup.until_steady:
                    # Warm-up until steady (warmup.py): bursts until the rate stops rising.
                    warmed = warm_until_steady(measurement)
                    measurement.before_window()
                elif load.warmup_s > 0:
                    log.info("warm-up: %g s of the same load, not recorded", load.warmup_s)
                    measurement.generate(load.warmup_s, "/dev/null", warmup=True)
                    measurement.before_window()
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
                    raise measurement.start_error(f"stopped during {where}",
                                                  "window" if measurement.in_window else "start",
                                                  f"The step that found it gone: {failed_call}") from err
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
    info = client.info()
    meta = {
        "format_version": record.FORMAT_VERSION,
        "repeat": repeat,
        "condition": condition.as_dict(),
        "load": {**load.as_dict(), "url": measurement.work_url, "load_model": condition.load_model},
        **({"warmup": warmed} if warmed is not None else {}),
        **parts,
        "environment": environment.describe(
            info, engine_address(client), task_image.attrs, loadgen_image.attrs, probe,
            {"host_name": host_name, "run_id": run_id, "run_start": run_started, "run_end": utc_now(),
             "ready_s": round(ready_s, 3), "docker_sdk_version": docker.__version__,
             **(extra_environment or {})},
        ),
    }
    if open_load is not None:
        meta["open_loop"] = {**parts_open_loop(condition, open_load, measurement.open_summary),
                             "image_id": open_load.image.id}
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
    oom_before = m.oom_kills()
    proxy_before = m.proxy_counts()
    # Innermost: nothing but the hey exec between the two task snapshots.
    snap_before, t_before = m.snapshot(wait_roles=True)
    # No readable cgroup files: the Docker stats API brackets the window instead (wider, coarser).
    stats_before = None if snap_before.counters else m.docker_counters()
    start = utc_now()
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        running = pool.submit(_timed, m.generate, load.duration_s, LOADGEN_CSV)
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
    oom_after = m.oom_kills()
    m.task.reload()
    state = m.task.attrs["State"]
    if oom_before is not None and oom_after is not None and oom_after > oom_before \
            and state.get("Status") == "running":
        # The OOM killer took a process inside the window and the task lives on: which role, if one.
        raise m.start_error(f"had a process OOM-killed during the measured window (the task cgroup's oom_kill "
                            f"counter rose from {oom_before} to {oom_after})", "window",
                            died=_role_gone(snap_before, snap_after), oom_killed=True)

    if result.exit_code != 0:
        if state.get("Status") != "running":
            raise m.start_error("stopped during the measured window", "window")
        raise RunError(f"{condition.id}: hey exited with {result.exit_code}: {result.stderr.strip()[:500]}")
    if state.get("Status") == "running" and state.get("OOMKilled"):
        # The OOM killer took a process while the task still runs: the roles gone say which, if one was.
        raise m.start_error("had a process OOM-killed during the measured window", "window",
                            died=_role_gone(snap_before, snap_after))
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
        log.warning("%s: hey recorded its maximum of %d responses; later ones were served but not recorded",
                    condition.id, hey.MAX_ROWS)
    failed, evidence = count_failed(check.rows, served_before, served_after, tcp_before, tcp_after,
                                    cap_reached=check.cap_reached)
    if condition.real_proxy:
        failed, evidence = proxymod.count_failed(check.rows, served_after - served_before,
                                                 proxy_after[1] - proxy_before[1], evidence, check.cap_reached)
    if m.open_summary is not None:
        # The open-loop generator sees every request it sent fail: its own count is exact.
        evidence["openloop_errors"] = m.open_summary.errors
        failed = max(failed, m.open_summary.errors)
    if failed:
        log.warning("%s: %d failed requests (%s)", condition.id, failed, evidence)
    if m.open_summary is not None:
        if m.open_summary.not_on_time_share > 0.01:
            log.warning("%s: %.1f %% of the requests were not sent on time (late %d, dropped %d)", condition.id,
                        100 * m.open_summary.not_on_time_share, m.open_summary.late, m.open_summary.dropped)
    elif check.time_coverage < 0.9:
        # Workers run back to back, so response times should fill ~99 % of C x window.
        log.warning("%s: recorded response times cover only %.0f %% of concurrency x window: time went to "
                    "requests hey did not record, or hey itself was starved of CPU", condition.id,
                    100 * check.time_coverage)

    if snap_before.counters and snap_after.counters:
        cpu = cgroup.counters_delta(snap_before.counters, snap_after.counters)
        peak = snap_after.counters.peak_memory_bytes
    else:
        cpu = cgroup.counters_delta(stats_before, stats_after)
        cpu.update(period_us=100_000, quota_us=round(condition.vcpu * 100_000))
        peak = stats_after.peak_memory_bytes
    cpu["wall_s"] = round(t_after - t_before, 6)
    hey_start = hey.parse_start_uptime(result.stdout)
    if hey_start is not None and snap_before.uptime_s is not None and snap_after.uptime_s is not None:
        # On the host's uptime clock (10 ms ticks): how far the CPU window starts before hey and ends after its load.
        cpu["start_lead_s"] = round(hey_start - snap_before.uptime_s, 2)
        cpu["end_lag_s"] = round(snap_after.uptime_s - (hey_start + check.span_s), 2)
    limits = snap_after.limits or cgroup.limits_from_host_config(m.task.attrs.get("HostConfig") or {})
    check_limits(condition, limits, cpu["nr_periods"])
    layout = m.check_layout(snap_after)
    runtime = None
    if knobs.runtime_environment(condition):
        runtime = m.app_environment()
        check_app_environment(condition, runtime)

    expected_roles = {"app", *condition.roles}
    if set(snap_before.roles) != expected_roles:
        raise RunError(f"{condition.id}: the task's roles file lists {sorted(snap_before.roles)}, "
                       f"the condition needs {sorted(expected_roles)}")
    try:
        cpu_by_role = m.role_cpu(snap_before, snap_after)
    except cgroup.SnapshotError as err:
        # A role's process ended inside the window while the task was still stopping the rest: a
        # RunError, so that run_condition waits for the task's exit and reports the process's death.
        raise RunError(f"{condition.id}: {err}") from err
    processes = [{"role": "app", "target_pct": None, "cpu_s": cpu_by_role["app"]}]
    processes += [{"role": role, "target_pct": condition.sidecar_load_pct, "cpu_s": cpu_by_role[role]}
                  for role in condition.roles]
    proxy_section = {}
    if condition.real_proxy:
        # A real proxy burns what its traffic costs, no set share; the run keeps what it counted.
        processes[1]["target_pct"] = None
        try:
            proxy_section["proxy"] = proxymod.record(condition, m.task_image.labels or {}, proxy_before,
                                                     proxy_after, check.rows)
        except proxymod.ProxyCountError as err:
            raise RunError(str(err)) from err

    host = cgroup.host_cpu_delta(snap_before, snap_after)
    parts = {
        "window": {"start": start, "end": end, "wall_s": round(hey_wall, 6), "load_s": round(check.span_s, 6),
                   "hey_span_s": round(check.span_s, 6),
                   # Closed loop only: an open loop's connections idle between arrivals by design.
                   "time_coverage": None if m.open_summary is not None else round(check.time_coverage, 4)},
        "requests": {"rows": check.rows, "non_2xx": check.non_2xx, "failed": failed,
                     "failed_source": proxymod.FAILED_SOURCE if condition.real_proxy else FAILED_SOURCE,
                     "error_distribution": evidence, "served_delta": served_after - served_before,
                     "cap_reached": check.cap_reached},
        "cgroup": cpu,
        "limits": limits.as_dict(),
        "knobs": {**condition.knobs, **({"app_environment": runtime} if runtime is not None else {}),
                  **({"layout": layout} if layout is not None else {})},
        "host": None if host is None else {"cpus": host["cpus"], "busy_s": round(host["busy_s"], 3),
                                           "total_s": round(host["total_s"], 3)},
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
def parts_open_loop(condition: Condition, open_load: OpenLoad, summary: openloop.Summary | None) -> dict[str, Any]:
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
        result = m.loadgen_exec(["sh", "-c", warmup.BURST_SCRIPT, "warmup", WARMUP_CSV,
                                 "timeout", "-s", "KILL", limit, *command])
        if result.exit_code != 0:
            raise RunError(f"{m.condition.id}: a warm-up burst failed (hey exit {result.exit_code}): "
                           f"{result.stderr.strip()[:300]}")
        responses, span = warmup.parse_burst(result.stdout)
        elapsed = time.monotonic() - started
        bursts.append({"at_s": round(elapsed, 3), "responses": responses, "span_s": span,
                       "rps": round(responses / span, 2) if span > 0 else 0.0})
        stop, why = warmup.steady_check(bursts, sum(b["span_s"] for b in bursts), settings)
        if stop:
            break
    log.info("warm-up until steady: %.1f s, %d bursts; %s", elapsed, len(bursts), why)
    return {**settings.as_dict(), "seconds": round(elapsed, 3), "load_s": round(sum(b["span_s"] for b in bursts), 3),
            "steady": why.startswith("steady"), "reason": why, "bursts": bursts}


class TaskMeasurement(Measurement):
    """The task topology (taskcgroup.py): a task cgroup with the quota and memory limit made by a helper, the app
    and each sidecar in its own container under it with its role's CPU shares, and a reader container that reads
    every cgroup file of the run from outside the task's CPU."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.info = self.client.info()
        self.version = knobs.cgroup_version(self.info)
        self.cgroup_name = taskcgroup.cgroup_name(self.run_id)
        self.reader: Any = None
        self.sidecars: dict[str, Any] = {}
        self.cgroup_made = False

    def _helper(self, part: str, command: list[str], read_only: bool) -> str:
        condition = self.condition
        try:
            output = self.client.containers.run(
                self.loadgen_image.id, entrypoint=["sh"], command=command,
                name=container_name(condition, self.run_id, part), labels=labels(condition, self.run_id, part),
                remove=True, stdout=True, stderr=True, **taskcgroup.mount_options(read_only))
        except docker.errors.ContainerError as err:
            raise RunError(f"{condition.id}: the task cgroup's {part} helper failed: "
                           f"{(err.stderr or b'').decode(errors='replace').strip()[:300]}") from err
        return output.decode(errors="replace")

    def start(self) -> None:
        condition, run_id = self.condition, self.run_id
        # The reader first: it carries the task cgroup's name, so the sweep finds the cgroup whatever happens next.
        self.reader = self._start_attached(
            self.loadgen_image.id, entrypoint=watched(self.task_deadline_s(), ["sleep", str(self.task_deadline_s())]),
            name=container_name(condition, run_id, "reader"),
            labels={**labels(condition, run_id, "reader"), TASK_CGROUP_LABEL: self.cgroup_name},
            **taskcgroup.mount_options(read_only=True))
        self.cgroup_made = True
        found = taskcgroup.parse_setup(self._helper("setup", taskcgroup.setup_command(
            self.info, self.cgroup_name, condition), read_only=False))
        try:
            taskcgroup.check_setup(condition, self.version, found)
        except knobs.KnobError as err:
            raise RunError(str(err)) from None
        log.info("made task cgroup %s: %s", self.cgroup_name, found)
        parent = {"cgroup_parent": "/" + self.cgroup_name}
        # The app's container starts no sidecar, so no proxy either (its entrypoint refuses one without them).
        app_env = {key: value for key, value in task_environment(condition, self.load.sidecar_burn).items()
                   if key != "PROXY"}
        app_env["SIDECAR_COUNT"] = "0"
        self.task = self._start_attached(
            self.task_image.id, entrypoint=self.task_entrypoint(),
            name=container_name(condition, run_id, "task"), environment=app_env,
            labels=labels(condition, run_id, "task"), cpu_shares=condition.role_shares("app"),
            network_mode="none", **parent, **hardening(TASK_TMPFS))
        log.info("started app container %s under %s", self.task.name, self.cgroup_name)
        for role in condition.roles:
            command = ["python3", SIDECAR_SCRIPT, "--role", role, "--load", f"{condition.sidecar_load_pct:g}",
                       "--burn", self.load.sidecar_burn]
            tmpfs = TASK_TMPFS
            if role == "proxy" and condition.real_proxy:
                # A real proxy is its own container, in the app's network namespace, as Envoy is in ECS.
                command, tmpfs = proxymod.container_command(condition), proxymod.task_tmpfs(condition, TASK_TMPFS)
            self.sidecars[role] = self._start_attached(
                self.task_image.id, entrypoint=watched(self.task_deadline_s(), command),
                name=container_name(condition, run_id, role), labels=labels(condition, run_id, role),
                cpu_shares=condition.role_shares(role), network_mode=f"container:{self.task.id}", **parent,
                **hardening(tmpfs))
        try:
            self.loadgen = self._start_attached(
                self.loadgen_image.id, entrypoint=self.loadgen_entrypoint(),
                name=container_name(condition, run_id, "loadgen"), labels=labels(condition, run_id, "loadgen"),
                network_mode=f"container:{self.task.id}", **hardening(LOADGEN_TMPFS))
        except docker.errors.APIError as err:
            self.task.reload()
            if self.task.status != "running":
                raise self.start_error("exited before the load generator could join it") from err
            raise
        log.info("started %d sidecar container(s) and the load generator in the app's network namespace",
                 len(self.sidecars))

    def proxy_exec(self, script: str) -> ExecResult:
        return exec_in(self.client, self.sidecars["proxy"].id, ["sh", "-c", script])

    def containers_by_role(self) -> dict[str, str]:
        return {"app": self.task.id, **{role: c.id for role, c in self.sidecars.items()}}

    def snapshot(self, wait_roles: bool = False) -> tuple[cgroup.TaskSnapshot, float]:
        result = exec_in(self.client, self.reader.id, taskcgroup.read_command(self.info, self.cgroup_name,
                                                                              self.containers_by_role()))
        taken = time.monotonic()
        if result.exit_code != 0:
            raise RunError(f"{self.condition.id}: reading the task cgroup failed: {result.stderr[:300]}")
        snap = cgroup.parse_snapshot(result.stdout)
        try:
            roles = taskcgroup.parse_roles("\n".join(snap.extra))
        except knobs.KnobError as err:
            raise RunError(f"{self.condition.id}: {err}; {result.stderr.strip()[:300]}") from None
        return dataclasses.replace(snap, roles={role: 0 for role in roles}), taken

    def oom_kills(self) -> int | None:
        snap, _ = self.snapshot()
        text = snap.files.get("/sys/fs/cgroup/memory/memory.oom_control") or snap.files.get(
            "/sys/fs/cgroup/memory.events")
        return None if text is None else parse_oom_kills(text)

    def role_cpu(self, before: cgroup.TaskSnapshot, after: cgroup.TaskSnapshot) -> dict[str, float]:
        """CPU seconds of each role over the window: each role's own container cgroup."""
        first = taskcgroup.parse_roles("\n".join(before.extra))
        last = taskcgroup.parse_roles("\n".join(after.extra))
        seconds = {}
        for role, (usage, _) in first.items():
            if role not in last or last[role][0] < usage:
                raise cgroup.SnapshotError(f"role {role}: its container's CPU counter is gone or went backwards")
            seconds[role] = (last[role][0] - usage) / 1e9
        return seconds

    def check_roles_alive(self) -> None:
        for role, container in self.sidecars.items():
            container.reload()
            if container.status != "running":
                state = container.attrs.get("State", {})
                status = state.get("ExitCode")
                died = {"role": role, "pid": None, "exit_status": status,
                        "signal": signal_name(status - 128) if status and status > 128 else None}
                raise self.start_error(f"had its sidecar container {container.name} stop", "window", died=died,
                                       oom_killed=bool(state.get("OOMKilled")))

    def check_layout(self, snapshot: cgroup.TaskSnapshot) -> dict[str, Any]:
        """Fail unless every container is under the task cgroup with its role's weight; describe the layout."""
        condition = self.condition
        roles = taskcgroup.parse_roles("\n".join(snapshot.extra))
        containers = {"app": self.task, **self.sidecars}
        layout: dict[str, Any] = {"topology": "task", "task_cgroup": "/" + self.cgroup_name, "containers": {}}
        for role, container in containers.items():
            parent = (container.attrs.get("HostConfig") or {}).get("CgroupParent")
            if role not in roles or parent != "/" + self.cgroup_name:
                raise RunError(f"{condition.id}: the {role} container's cgroup is not under the task cgroup "
                               f"/{self.cgroup_name} (its CgroupParent: {parent!r})")
            expected = taskcgroup.expected_weight(condition, role, self.version)
            if roles[role][1] != expected:
                raise RunError(f"{condition.id}: expected the {role} container's CPU "
                               f"{'shares' if self.version == 1 else 'weight'} {expected}, its cgroup has "
                               f"{roles[role][1]}")
            layout["containers"][role] = {"id": container.id, "weight": roles[role][1]}
        return layout

    def remove(self) -> None:
        """Every container of the run, then the task cgroup; the reader (the sweep's mark of the cgroup) last,
        and only once the cgroup is gone."""
        found = {c.id: c for c in (self.loadgen, self.task, *self.sidecars.values()) if c is not None}
        try:
            for container in self.client.containers.list(all=True, filters={"label": f"{RUN_LABEL}={self.run_id}"}):
                found.setdefault(container.id, container)
        except TRANSPORT_ERRORS as err:
            log.warning("listing containers of run %s failed: %s", self.run_id, err)
        readers = [c for c in found.values() if (getattr(c, "labels", None) or {}).get(PART_LABEL) == "reader"]
        if self.reader is not None and self.reader.id not in {c.id for c in readers}:
            readers.append(self.reader)
        others = [c for c in found.values() if c not in readers]
        with ThreadPoolExecutor(max_workers=max(1, len(others))) as pool:
            list(pool.map(remove_container, others))
        if not self.cgroup_made or taskcgroup.remove_cgroups(self.client, self.loadgen_image.id, [self.cgroup_name]):
            for reader in readers:
                remove_container(reader)
        # After the removal (a closed stdin ends a container too; a reader kept for the sweep just stops).
        self._close_stdins()


"""The containers of one run and the steps on them: Measurement (the process topology, the article's design).

runner.py runs the sequence (start, readiness, warm-up, the measured window, the run file); this module holds
what each step does on the engine: the task container and the load generator (and, for an open loop, the
open-loop generator) with their entrypoints under the watcher, the readiness poll, the reads before and after
the window, hey, the CFS burst's helper, the app's environment, the removal. The task topology's subclass is in
task_measurement.py.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Mapping

import docker
import docker.errors

from . import cgroup, channel, environment, hey, hostreads, knobs, openloop
from . import proxy as proxymod
from .conditions import Condition, LoadSettings
from .containers import (
    LOADGEN_TMPFS,
    TASK_TMPFS,
    TRANSPORT_ERRORS,
    ExecResult,
    container_name,
    exec_in,
    hardening,
    labels,
    remove_container,
    watched,
)
from .failures import (
    AppStopped,
    RunError,
    describe_exit,
    parse_netns_probe,
    process_exit,
)
from .labels import RUN_LABEL

log = logging.getLogger(__name__)

APP_URL = "http://127.0.0.1:8080"
WORK_URL = f"{APP_URL}/work"
STATS_URL = f"{APP_URL}/stats"
READY_POLL_S = 0.05
# One readiness step polls this long; between two, the task's state is checked.
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
# hey formats its CSV with text/template after the load stops, ~15 µs a row (15 s at its
# 1,000,000-row cap), so its exit is not the load's end: the after-snapshot is taken this long
# after hey's duration instead, one CFS period for the requests still in flight.
LOAD_END_MARGIN_S = 0.1
NETNS_PROBE = "cat /proc/net/snmp && echo @@stats && curl -sS --max-time 10 " + STATS_URL
# Before the window: the environment probe and the network namespace counters in one step.
BEFORE_SCRIPT = f"{environment.PROBE_SCRIPT}; echo @@netns; {NETNS_PROBE}"
# After the window: the counters, then hey's CSV file ($1).
AFTER_SCRIPT = f'{NETNS_PROBE} && echo && echo @@csv && cat "$1"'
# The end of a step that reads the engine's clock: the step's status (its reads'), its output's last line
# @@end and `date +%s.%N` (split off again by _clock_end).
CLOCK_END = '\nstatus=$?; echo; echo "@@end $(date +%s.%N)"; exit $status\n'
# The measured window's hey ("$@" after the CSV's path $1), then AFTER_SCRIPT in the same step (one step fewer):
# the reads follow hey's exit at once, as they did as a step of their own. @@hey carries hey's exit status and
# @@hey and @@end the engine's clock (the reads' time is not hey's); the step's own status is the reads'.
WINDOW_THEN_AFTER = (
    'csv=$1; shift; "$@"; echo "@@hey $? $(date +%s.%N)"; echo @@hey >&2; set -- "$csv"; '
    + AFTER_SCRIPT
    + CLOCK_END
)
# Poll GET $1 every $3 s, at most $2 times; once it answers 200 go on, else print the last answer and exit 99.
READY_POLL = r"""
i=0
until code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$1"); [ "$code" = 200 ]; do
  i=$((i + 1)); [ "$i" -ge "$2" ] && { echo "@@last $code"; exit 99; }
  sleep "$3"
done
"""
# @@ready and @@end carry the engine's clock (`date +%s.%N`) when the app answered and when the step's reads
# ended: the runner takes what came between them (a warm-up, the reads) from the step's time, and what is left
# is the app's readiness. The step's status is the reads'.
READY_AT = 'echo "@@ready $(date +%s.%N)"\n'
# Readiness (READY_POLL), then BEFORE_SCRIPT in the same step (one step instead of two).
READY_SCRIPT = READY_POLL + READY_AT + BEFORE_SCRIPT + CLOCK_END
# A warm-up's hey ("$@", its output discarded), then BEFORE_SCRIPT in the same step (one step fewer): the reads
# follow the warm-up's load at once, as they did as a step of their own. @@before carries hey's exit status.
WARMUP_THEN_BEFORE = '"$@" > /dev/null 2>&1; echo "@@before $?"; ' + BEFORE_SCRIPT
# Readiness, the warm-up and the reads after it, in one step: the warm-up ("$@" after the poll's three
# arguments) begins as soon as the app answers, without a step's set-up between them.
READY_THEN_WARMUP = READY_POLL + READY_AT + "shift 3\n" + WARMUP_THEN_BEFORE + CLOCK_END
# In the task, before the window: wait for the roles file ($1, every $3 s, at most $2 times; exit 99 if it never
# comes), then the snapshot. The sleeps fall before the snapshot's reads, outside the measured window.
ROLES_THEN_SNAPSHOT = (
    r"""
i=0
until [ -s "$1" ]; do
  i=$((i + 1)); [ "$i" -ge "$2" ] && exit 99
  sleep "$3"
done
"""
    + cgroup.SNAPSHOT_SCRIPT
)
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


def _clock_end(text: str) -> tuple[str, str | None]:
    """A step's output ending in CLOCK_END -> (the output before it, the clock's reading; None without one)."""
    body, marker, reading = text.rpartition("\n@@end ")
    return (body, reading) if marker else (text, None)


def _between(start: str, end: str | None) -> float:
    """Seconds from start to end, two readings of `date +%s.%N`; 0 if either is missing or not a number."""
    try:
        return max(0.0, float(end) - float(start)) if end is not None else 0.0
    except ValueError:
        return 0.0


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

    def __init__(
        self,
        client: docker.DockerClient,
        condition: Condition,
        load: LoadSettings,
        task_image: Any,
        loadgen_image: Any,
        run_id: str,
        open_load: OpenLoad | None = None,
        repeat: int = 1,
    ) -> None:
        self.client = client
        self.condition = condition
        self.load = load
        self.task_image = task_image
        self.loadgen_image = loadgen_image
        self.run_id = run_id
        self.task: Any = None
        self.loadgen: Any = None
        # The load generator's command channel (channel.py), made with it.
        self.channel: channel.Channel | None = None
        # The attached stdin of each container (WATCH_SCRIPT, channel.SERVER): held open until remove().
        self.stdins: list[Any] = []
        # The before-window reads of the load generator (probe, Tcp counters, served), taken by wait_ready.
        self.before: tuple[str, dict[str, int], int] | None = None
        # The after-window reads, when the window's step took them (window).
        self.after: ExecResult | None = None
        # How each snapshot of the task was read ("host", hostreads.py, or "exec"), for the run file.
        self.task_reads: list[str] = []
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
        return math.ceil(
            load.ready_timeout_s
            + load.warmup_limit_s()
            + load.duration_s
            + 2 * HEY_GRACE_S
            + LOADGEN_GRACE_S
        )

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
        """The load generator does nothing but run the runner's steps (channel.SERVER), and stops like the task."""
        return channel.entrypoint(self.loadgen_deadline_s())

    def _start_attached(self, image: Any, **kwargs: Any) -> Any:
        """Create a container with stdin open for one client (StdinOnce), attach its stdin, then start it."""
        container = self._create_attached(image, **kwargs)
        container.start()
        return container

    def _create_attached(self, image: Any, output: bool = False, **kwargs: Any) -> Any:
        """Create a container with stdin open for one client (StdinOnce) and attach its stdin (with output, its
        stdout and stderr too: the last of self.stdins is then the load generator's command channel)."""
        container = self.client.containers.create(image, detach=False, stdin_open=True, **kwargs)
        # Only stdin unless asked: an attached stdout nobody reads could hold up the container's writes.
        params = {"stdin": 1, "stream": 1, **({"stdout": 1, "stderr": 1} if output else {})}
        self.stdins.append(self.client.api.attach_socket(container.id, params=params))
        return container

    def start(self) -> None:
        condition = self.condition
        memory = f"{condition.memory_mb}m"
        self.task = self._create_attached(
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
        # The load generator is made while the task starts (it joins the task's network namespace only once
        # the task runs). Leaving the block waits for it, even on an error or a signal: remove() then finds it.
        with ThreadPoolExecutor(max_workers=1) as pool:
            made = pool.submit(self.create_loadgen)
            self.task.start()
            log.info("started task container %s (%s)", self.task.name, self.task.short_id)
            made.result()
        if condition.cpu_burst_pct is not None:
            self.set_burst()
        self.start_loadgen()
        log.info("started load generator %s in the task's network namespace", self.loadgen.name)
        if self.open_load is not None:
            self.start_open_generator()

    def create_loadgen(self) -> None:
        """hey's container, to run in the task's network namespace, so that the load stays on its loopback. Its
        steps come over its command channel (channel.py), its stdin, stdout and stderr attached."""
        self.loadgen = self._create_attached(
            self.loadgen_image.id,
            output=True,
            entrypoint=self.loadgen_entrypoint(),
            name=container_name(self.condition, self.run_id, "loadgen"),
            labels=labels(self.condition, self.run_id, "loadgen"),
            network_mode=f"container:{self.task.id}",
            # Its stdout is the channel's: hey's CSV passes through it, not into the engine's log files.
            log_config={"type": "none"},
            **hardening(LOADGEN_TMPFS),
        )
        self.channel = channel.Channel(self.stdins[-1])

    def start_loadgen(self) -> None:
        """Start hey's container (made by create_loadgen if not yet) in the task's network namespace."""
        try:
            if self.loadgen is None:
                self.create_loadgen()
            self.loadgen.start()
        except docker.errors.APIError as err:
            self.task.reload()
            if self.task.status != "running":
                raise self.start_error("exited before the load generator could join it") from err
            raise

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
        log.info(
            "started open-loop generator %s in the task's network namespace", self.openloop.name
        )

    def generate(self, duration_s: float, csv_path: str, warmup: bool = False) -> ExecResult:
        """The load of a warm-up or of the measured window: hey's closed loop, or the open loop at the rate."""
        if self.open_load is None:
            return self.hey(duration_s, csv_path)
        cond = self.condition
        args = openloop.command(
            self.work_url,
            self.open_load.rate_per_s,
            duration_s,
            arrivals=cond.arrivals,
            max_conns=OPEN_MAX_CONNS,
            slack_s=OPEN_SLACK_S,
            seed=self.repeat + (OPEN_WARMUP_SEED if warmup else 0),
            csv_path="-",
            summary_path="/dev/null" if warmup else OPEN_SUMMARY,
        )
        limit = f"{duration_s + HEY_GRACE_S:g}"
        out = "/dev/null" if warmup else OPEN_CSV
        return exec_in(
            self.client,
            self.openloop.id,
            [
                "sh",
                "-c",
                hey.TO_FILE_SCRIPT,
                "openloop-to-file",
                out,
                "timeout",
                "-s",
                "KILL",
                limit,
                *args,
            ],
        )

    def read_open_csv(self) -> str:
        result = exec_in(self.client, self.openloop.id, ["cat", OPEN_CSV])
        if result.exit_code != 0:
            raise RunError(
                f"{self.condition.id}: reading the open-loop generator's CSV {OPEN_CSV} failed: "
                f"{result.stderr[:300]}"
            )
        return result.stdout

    def read_open_summary(self, samples: Any) -> openloop.Summary:
        """The window's generator summary, checked against its rows (one row per response)."""
        result = exec_in(self.client, self.openloop.id, ["cat", OPEN_SUMMARY])
        if result.exit_code != 0:
            raise RunError(
                f"{self.condition.id}: reading the open-loop summary {OPEN_SUMMARY} failed: "
                f"{result.stderr[:300]}"
            )
        summary = openloop.parse_summary(result.stdout)
        if summary.responses != len(samples):
            raise openloop.OpenLoopError(
                f"open-loop summary counts {summary.responses} responses, its CSV has "
                f"{len(samples)} rows"
            )
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
            raise RunError(
                f"{self.condition.id}: setting the CFS burst to {burst} us failed: "
                f"{(err.stderr or b'').decode(errors='replace').strip()[:300]}"
            ) from err
        written = output.decode(errors="replace").strip()
        if written != str(burst):
            raise RunError(
                f"{self.condition.id}: wrote a CFS burst of {burst} us, the cgroup holds {written!r}"
            )
        log.info("set the task's CFS burst to %d us", burst)

    def app_environment(self) -> dict[str, str]:
        """The runtime settings in the app process's own environment (/proc/PID/environ)."""
        result = exec_in(
            self.client, self.task.id, ["sh", "-c", knobs.APP_ENV_SCRIPT, "env", cgroup.ROLES_FILE]
        )
        if result.exit_code != 0:
            raise RunError(
                f"{self.condition.id}: reading the app's environment failed: {result.stderr[:300]}"
            )
        return knobs.parse_app_env(result.stdout)

    def start_error(
        self,
        what: str,
        phase: str = "start",
        detail: str = "",
        died: Mapping[str, Any] | None = None,
        oom_killed: bool = False,
    ) -> AppStopped:
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
        tail = (
            "\n".join(full.rstrip().splitlines()[-LOG_TAIL_LINES:])
            if full
            else "(logs unavailable)"
        )
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
        """A step in the load generator, over its command channel (the API call's timeout is the channel's)."""
        return self.channel.run(cmd, self.client.api.timeout)

    def proxy_exec(self, script: str) -> ExecResult:
        """A shell script in the container a real proxy runs in (here: the task's)."""
        return self.task_exec(script)

    def wait_ready(self, warmup_s: float = 0) -> float:
        """Block until /work answers 200; return the seconds it took. Also takes the before-window reads.

        Polling runs inside one step over the load generator's channel (READY_EXEC_S long at most), and the
        same step goes on to the environment probe and the network namespace counters: a round trip
        costs more than a poll interval. With warmup_s (a closed loop's fixed warm-up), the same step
        also runs the warm-up between the two (READY_THEN_WARMUP): the caller makes no load of its own
        after this returns but the measured window's.
        """
        fused = warmup_s > 0 and self.open_load is None
        if fused:
            script = [READY_THEN_WARMUP, "ready+warm-up"]
            after = self.hey_command(warmup_s, "/dev/null", csv=False)
        else:
            script, after = [READY_SCRIPT, "ready"], []
        started = time.monotonic()
        deadline = started + self.load.ready_timeout_s
        polls = str(max(1, round(READY_EXEC_S / READY_POLL_S)))
        while True:
            try:
                result = self.loadgen_exec(
                    ["sh", "-c", *script, self.work_url, polls, f"{READY_POLL_S:g}", *after]
                )
                returned = time.monotonic()
                head, ready, rest = result.stdout.partition("@@ready")
                ready_at, _, text = rest.partition("\n")
                reads, end_at = _clock_end(text)
                # What came after the app's answer (a warm-up, the reads), on the engine's clock, is not its
                # readiness (without both clock readings, the step's whole time: an upper bound).
                ready_s = returned - started - _between(ready_at, end_at)
                if ready and not fused:
                    self.before = self._before_window(result, reads)
                    return ready_s
            except (docker.errors.APIError, RunError):
                # A step whose channel ended (its container gone), or reads cut off by the app's death (too
                # little memory, say): the task's state says why, once it has exited.
                if self.task_exits_within(DYING_WAIT_S):
                    during = " or during its warm-up" if fused else ""
                    raise self.start_error(f"exited before it answered /work{during}") from None
                raise
            if ready:
                # The app answered: a failure from here on is the warm-up's or its reads', as in warm_up.
                self.before = self._after_warm_up(result, reads)
                return ready_s
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
        """The task's cgroup and processes (first waiting for the roles file if wait_roles), and when it returned.

        On a local engine they are read from this host (hostreads.py), else by an exec in the task."""
        polls = max(1, round(ROLES_WAIT_S / READY_POLL_S)) if wait_roles else 0
        reads = self.host_reads
        if reads is not None:
            written = reads.wait_roles(polls, READY_POLL_S) if polls else True
            text = reads.snapshot_text() if written else None
            if text is not None:
                taken = time.monotonic()
                self.task_reads.append("host")
                return cgroup.parse_snapshot(text), taken
            if written is False:
                # Not written as seen from here: the task's own view decides, with one look.
                polls = 1
        if polls:
            result = exec_in(
                self.client,
                self.task.id,
                [
                    "sh",
                    "-c",
                    ROLES_THEN_SNAPSHOT,
                    "snapshot",
                    cgroup.ROLES_FILE,
                    str(polls),
                    f"{READY_POLL_S:g}",
                ],
            )
        else:
            result = self.task_exec(cgroup.SNAPSHOT_SCRIPT)
        taken = time.monotonic()
        self.task_reads.append("exec")
        if result.exit_code == NOT_READY and wait_roles:
            raise self.start_error(
                f"answered /work but did not write {cgroup.ROLES_FILE} within {ROLES_WAIT_S:g} s"
            )
        if result.exit_code != 0:
            raise RunError(
                f"{self.condition.id}: reading the cgroup inside the task failed: {result.stderr[:300]}"
            )
        return cgroup.parse_snapshot(result.stdout), taken

    @functools.cached_property
    def host_reads(self) -> hostreads.HostReads | None:
        """The task as this host sees it (hostreads.py), looked for by the first snapshot; None where the exec
        must read it."""
        return hostreads.HostReads.locate(self.client, self.task.id)

    def docker_counters(self) -> cgroup.CgroupCounters:
        return cgroup.parse_docker_stats(self.task.stats(stream=False, one_shot=True))

    def before_window(self) -> None:
        """Read the environment probe and the network namespace counters again (after a warm-up)."""
        result = self.loadgen_exec(["sh", "-c", BEFORE_SCRIPT])
        self.before = self._before_window(result, result.stdout)

    def warm_up(self, duration_s: float) -> None:
        """A warm-up's load, not recorded, then the before-window reads (before_window), a step of their own.

        The runner calls it for an open loop, which warms up from its own generator's container; a closed loop's
        fixed warm-up runs in the readiness step instead (wait_ready, READY_THEN_WARMUP)."""
        self.generate(duration_s, "/dev/null", warmup=True)
        self.before_window()

    def _after_warm_up(self, result: ExecResult, text: str) -> tuple[str, dict[str, int], int]:
        """WARMUP_THEN_BEFORE's output -> the before-window reads; a failed warm-up's hey is logged."""
        head, marker, rest = text.partition("@@before ")
        status, _, reads = rest.partition("\n")
        if marker and status.strip() != "0":
            # As before the merge, a failed warm-up fails the run only where the reads or the window fail.
            log.warning("%s: the warm-up's hey exited with %s", self.condition.id, status.strip())
        return self._before_window(result, reads if marker else head)

    def _before_window(self, result: ExecResult, text: str) -> tuple[str, dict[str, int], int]:
        """BEFORE_SCRIPT's output -> (probe text, Tcp counters, served)."""
        if result.exit_code != 0:
            raise RunError(
                f"{self.condition.id}: reading /stats and /proc/net/snmp failed: {result.stderr[:300]}"
            )
        probe, _, netns = text.partition("@@netns\n")
        return (probe, *parse_netns_probe(netns))

    def window(self, duration_s: float) -> tuple[ExecResult, float]:
        """The measured window's load -> (its result: hey's status and output, its wall time in seconds).

        A closed loop's hey is followed by the after-window reads in the same step (WINDOW_THEN_AFTER), kept for
        after_window; their time is not the load's."""
        started = time.monotonic()
        if self.open_load is not None:
            result = self.generate(duration_s, LOADGEN_CSV)
            return result, time.monotonic() - started
        result = self.loadgen_exec(
            [
                "sh",
                "-c",
                WINDOW_THEN_AFTER,
                "window",
                LOADGEN_CSV,
                *self.hey_command(duration_s, LOADGEN_CSV),
            ]
        )
        wall = time.monotonic() - started
        head, marker, rest = result.stdout.partition("@@hey ")
        line, _, text = rest.partition("\n")
        status, _, hey_end = line.partition(" ")
        if not marker or not status.isdigit():
            # The step ended before hey did: hey failed, and after_window reads on its own (and fails, if it must).
            return ExecResult(result.exit_code or -1, head, result.stderr), wall
        reads, end = _clock_end(text)
        # stderr: hey's, then the reads' (curl's) after the marker.
        hey_errors, _, read_errors = result.stderr.partition("@@hey\n")
        self.after = ExecResult(result.exit_code, reads, read_errors)
        return ExecResult(int(status), head, hey_errors), wall - _between(hey_end, end)

    def after_window(self) -> tuple[dict[str, int], int, str]:
        """The network namespace counters, then hey's CSV file -> (Tcp counters, served, CSV text): from the
        window's own step (window), else a step of their own.

        Open loop: the CSV is the open-loop generator's, from its own container."""
        csv_file = "/dev/null" if self.open_load is not None else LOADGEN_CSV
        result = self.after or self.loadgen_exec(["sh", "-c", AFTER_SCRIPT, "after", csv_file])
        if result.exit_code != 0:
            raise RunError(
                f"{self.condition.id}: reading /stats, /proc/net/snmp and hey's CSV {LOADGEN_CSV} "
                f"failed: {result.stderr[:300]}"
            )
        netns, _, csv = result.stdout.partition("\n@@csv\n")
        if self.open_load is not None:
            csv = self.read_open_csv()
        return (*parse_netns_probe(netns), csv)

    def hey(self, duration_s: float, csv_path: str) -> ExecResult:
        """hey with its CSV written to csv_path in the load generator; stdout holds its CPU counter lines."""
        return self.loadgen_exec(self.hey_command(duration_s, csv_path))

    def hey_command(self, duration_s: float, csv_path: str, csv: bool = True) -> list[str]:
        """hey's command (hey.command_to_file), killed if it outlives its duration by HEY_GRACE_S. Without csv
        (a warm-up's, whose output nobody reads) hey prints its summary instead: the same load, without the
        CSV's formatting after it (about 15 µs a response)."""
        limit = f"{duration_s + HEY_GRACE_S:g}"
        return hey.command_to_file(
            self.work_url,
            duration_s,
            self.load.concurrency,
            csv_path,
            ("timeout", "-s", "KILL", limit),
            csv=csv,
        )

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
            raise RunError(
                f"{self.condition.id}: reading the proxy's counters failed: "
                f"{(stats.stderr + lines.stderr).strip()[:300]}"
            )
        try:
            return (*proxymod.parse_requests(stats.stdout), proxymod.parse_log_lines(lines.stdout))
        except proxymod.ProxyCountError as err:
            raise RunError(f"{self.condition.id}: {err}") from err

    def remove(self) -> None:
        """Remove this run's containers, found by their run label too (covers a create that raced a signal)."""
        found = {c.id: c for c in (self.openloop, self.loadgen, self.task) if c is not None}
        try:
            for container in self.client.containers.list(
                all=True, filters={"label": f"{RUN_LABEL}={self.run_id}"}
            ):
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
            except (
                Exception
            ) as err:  # any failure: the engine may be gone; the containers are removed
                log.debug("closing an attached stdin failed: %s", err)
        self.stdins.clear()

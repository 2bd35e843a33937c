"""How a run fails, and how its failed requests are counted.

A run that cannot be measured raises RunError. A process of the task that dies (the app or a sidecar:
crash, kill, OOM kill) fails the run with AppStopped, never a run file: before the window (the app
never answers) and inside it (the task has exited, a role's process is gone at the end of the window,
or the task cgroup's oom_kill counter, read with the cgroup snapshots that bracket the window, rose). The error
names the process (role and pid, from the entrypoint's log line: process_exit), its exit status or
signal, and OOM-killed; AppStopped.failure holds the same for a failure record (job.py, on_failure:
record).

Failed requests: hey's CSV holds only requests that got a response, so the
runner counts failures from outside (count_failed): the app's own count of
/work responses over the window minus hey's rows (requests the app answered
but hey did not record: client timeouts, cut connections), and the TCP
counters of the shared network namespace (AttemptFails: connection refused,
EstabResets: connections reset), which catch requests the app never saw.
Past hey's 1,000,000-row cap the first source counts nothing (rows are missing
by design), only the TCP counters do.
"""

from __future__ import annotations

import json
import math
import re
import signal
from typing import Any, Mapping


class RunError(RuntimeError):
    """The condition could not be measured; the message says why and names the condition."""


class AppStopped(RunError):
    """The task's app exited or was killed; the message has its state and its last log lines.

    failure: what died and why, for a failure record (record.write_failure): the process
    (role, pid; None when the entrypoint logged no exit), its exit status, the signal that
    killed it, whether the task was OOM-killed, and the container's status and exit code.
    """

    def __init__(self, message: str, failure: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.failure = dict(failure or {})


# The entrypoint's line when one of its processes ends (task-image/entrypoint.sh, "supervise"):
#   entrypoint: app (pid 7) exited with status 137; stopping the sidecars
#   entrypoint: sidecar proxy (pid 9) exited with status 1; stopping the task
# The status is bash's: 128 + N when signal N killed the process.
PROCESS_EXIT = re.compile(
    r"entrypoint: (?:sidecar )?(?P<role>[a-z_]+) \(pid (?P<pid>\d+)\) exited with status "
    r"(?P<status>\d+)"
)


def process_exit(log_text: str) -> dict[str, Any]:
    """The first process exit the entrypoint logged -> {role, pid, exit_status, signal}; Nones if none was."""
    match = PROCESS_EXIT.search(log_text)
    if match is None:
        return {"role": None, "pid": None, "exit_status": None, "signal": None}
    status = int(match["status"])
    return {
        "role": match["role"],
        "pid": int(match["pid"]),
        "exit_status": status,
        "signal": signal_name(status - 128) if status > 128 else None,
    }


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def describe_exit(died: Mapping[str, Any]) -> str:
    """ "app (pid 7) was killed by SIGKILL (status 137)" / "sidecar proxy (pid 9) exited with status 1"."""
    role = died.get("role")
    if role is None:
        return "the entrypoint logged no process exit (the whole task was killed)"
    who = f"app (pid {died['pid']})" if role == "app" else f"sidecar {role} (pid {died['pid']})"
    if died.get("signal"):
        return f"{who} was killed by {died['signal']} (status {died['exit_status']})"
    if died.get("exit_status") is None:
        return f"{who} is gone"
    return f"{who} exited with status {died['exit_status']}"


# The run file's requests.failed_source: how `failed` was counted (count_failed).
FAILED_SOURCE = (
    "max(app /stats served delta - hey rows (0 when hey's row cap was reached), Tcp AttemptFails + "
    "ceil(EstabResets / 2) delta from /proc/net/snmp of the task's network namespace), both over the hey window"
)


def parse_tcp_counters(snmp: str) -> dict[str, int]:
    """/proc/net/snmp -> the Tcp: counters by name (header line, then values line)."""
    tcp = [line.split()[1:] for line in snmp.splitlines() if line.startswith("Tcp:")]
    if len(tcp) < 2:
        raise RunError(f"/proc/net/snmp has no Tcp: lines: {snmp[:200]!r}")
    return {name: int(value) for name, value in zip(tcp[0], tcp[1])}


def parse_netns_probe(text: str) -> tuple[dict[str, int], int]:
    """NETNS_PROBE output -> (Tcp counters, the app's served count)."""
    snmp, _, stats = text.partition("@@stats")
    try:
        served = int(json.loads(stats)["served"])
    except (ValueError, KeyError, TypeError) as err:
        raise RunError(
            f'the app\'s /stats did not answer {{"served": N}}: {stats.strip()[:200]!r}'
        ) from err
    return parse_tcp_counters(snmp), served


def count_failed(
    rows: int,
    served_before: int,
    served_after: int,
    tcp_before: Mapping[str, int],
    tcp_after: Mapping[str, int],
    cap_reached: bool = False,
) -> tuple[int, dict[str, int]]:
    """Failed requests over the window, and the evidence by kind (the run file's error_distribution).

    - served delta - rows: requests the app completed that hey has no row for
      (hey's client timeout, connection cut after the app answered). Once hey's
      row cap is reached (cap_reached) the app keeps serving answers hey no
      longer records: they are not failures, and this source is left out.
    - AttemptFails (connection refused): connection attempts that failed.
    - EstabResets (connection reset), halved and rounded up: the client and the
      server socket live in the same network namespace, so one reset connection
      moves the namespace's counter once per end that was established when it
      closed, once or twice. ceil(resets / 2) is the fewest reset connections
      that explain the count, and a reset connection fails at most the one
      request in flight on it (hey sends one at a time per connection).
    A timed-out request can show up in both sources (the app later writes to a
    closed socket and is reset), so the two are combined with max, not summed:
    the count is a lower bound that is zero only if neither source saw a failure.
    """
    served = served_after - served_before
    if served < rows:
        raise RunError(
            f"the app's /stats served count rose by {served} but hey recorded {rows} responses: "
            "the app restarted or /stats does not count /work responses"
        )
    unrecorded = served - rows
    refused = tcp_after["AttemptFails"] - tcp_before["AttemptFails"]
    reset = tcp_after["EstabResets"] - tcp_before["EstabResets"]
    reset_connections = math.ceil(reset / 2)
    evidence = {
        "served_not_recorded": unrecorded,
        "tcp_attempt_fails": refused,
        "tcp_estab_resets": reset,
        "tcp_reset_connections": reset_connections,
        "tcp_active_opens": tcp_after["ActiveOpens"] - tcp_before["ActiveOpens"],
    }
    return max(0 if cap_reached else unrecorded, refused + reset_connections), evidence

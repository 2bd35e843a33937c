"""openloop: the open-loop load generator's command line and the reader of its summary.

The generator (task-image/loadgen-open/main.go, image variant ``loadgen-open``) sends
requests at a fixed rate, constant or Poisson, whether or not earlier ones were answered,
and measures each request's latency from its intended send time. Its per-request CSV has
hey's ``-o csv`` layout (hey.parse_csv reads it), with two differences of meaning:

- response-time runs from the request's intended send time, so it includes the time the
  generator could not send it on time (its send lag);
- offset is the intended send time since the start, not the actual one.

Requests the generator could not send on time are counted in its summary, never hidden:
``late`` were sent more than ``slack_s`` after their intended time (their rows are in the
CSV, their lag inside response-time), ``dropped`` found every connection of the pool
(``max_conns``) busy and were not sent at all (no row). Transport errors get no row either,
as in hey; the summary counts them by message.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields

SUMMARY_FORMAT = 1
ARRIVALS = ("constant", "poisson")
BINARY = "openloop"


class OpenLoopError(ValueError):
    """openloop's summary is missing, not its format, or inconsistent; the message says how."""


def command(
    url: str,
    rate_per_s: float,
    duration_s: float,
    *,
    arrivals: str = "constant",
    max_conns: int = 1000,
    slack_s: float = 0.001,
    seed: int = 1,
    timeout_s: float = 20,
    csv_path: str = "-",
    summary_path: str = "/dev/stderr",
    wait_ready_s: float = 0,
    warmup_s: float = 0,
) -> list[str]:
    """The argument list of one open-loop run: RATE requests/s for DURATION at URL.

    warmup_s: that long at the same rate first, on the same connections, not recorded.
    """
    if not rate_per_s > 0:
        raise ValueError(f"open-loop rate {rate_per_s!r} is not > 0 requests/s")
    if not duration_s > 0:
        raise ValueError(f"open-loop duration {duration_s!r} is not > 0 s")
    if arrivals not in ARRIVALS:
        raise ValueError(f"open-loop arrivals {arrivals!r} is not one of: {', '.join(ARRIVALS)}")
    if int(max_conns) != max_conns or max_conns < 1:
        raise ValueError(f"open-loop max_conns {max_conns!r} is not an integer >= 1")
    if slack_s < 0:
        raise ValueError(f"open-loop slack {slack_s!r} s is negative")
    if warmup_s < 0:
        raise ValueError(f"open-loop warm-up {warmup_s!r} s is negative")
    args = [
        BINARY,
        "-rate",
        f"{rate_per_s:g}",
        "-duration",
        _go_duration(duration_s),
        "-arrivals",
        arrivals,
        "-seed",
        str(int(seed)),
        "-max-conns",
        str(int(max_conns)),
        "-slack",
        _go_duration(slack_s),
        "-timeout",
        _go_duration(timeout_s),
        "-o",
        csv_path,
        "-summary",
        summary_path,
    ]
    if wait_ready_s > 0:
        args += ["-wait-ready", _go_duration(wait_ready_s)]
    if warmup_s > 0:
        args += ["-warmup", _go_duration(warmup_s)]
    return [*args, url]


def _go_duration(seconds: float) -> str:
    """Seconds as a Go time.ParseDuration string, in microseconds so that 0.0005 s stays exact."""
    return f"{round(seconds * 1e6)}us"


@dataclass(frozen=True)
class Summary:
    """One open-loop run's summary, as the generator wrote it (checked on creation)."""

    format: int
    url: str
    arrivals: str
    seed: int
    rate_per_s: float
    duration_s: float
    slack_s: float
    max_conns: int
    timeout_s: float
    scheduled: int
    sent: int
    late: int
    dropped: int
    responses: int
    non_2xx: int
    errors: int
    lag_p50_s: float
    lag_p90_s: float
    lag_p99_s: float
    lag_p999_s: float
    lag_max_s: float
    sent_rate_per_s: float
    workers: int
    connections_opened: int
    wall_s: float
    cpu_user_s: float
    cpu_system_s: float
    gomaxprocs: int
    go_version: str
    warmup_s: float
    warmup_scheduled: int
    warmup_not_on_time: int  # late or dropped during the warm-up
    error_kinds: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        problems = []
        if self.format != SUMMARY_FORMAT:
            problems.append(
                f"format {self.format} is not {SUMMARY_FORMAT} (a newer or older openloop)"
            )
        if self.scheduled != self.sent + self.dropped:
            problems.append(
                f"scheduled {self.scheduled} != sent {self.sent} + dropped {self.dropped}"
            )
        if self.sent != self.responses + self.errors:
            problems.append(
                f"sent {self.sent} != responses {self.responses} + errors {self.errors}"
            )
        if not 0 <= self.late <= self.sent:
            problems.append(f"late {self.late} is not within 0..sent {self.sent}")
        if sum(self.error_kinds.values()) != self.errors:
            problems.append(
                f"error kinds add up to {sum(self.error_kinds.values())}, not errors {self.errors}"
            )
        if self.workers > self.max_conns:
            problems.append(f"workers {self.workers} exceed max_conns {self.max_conns}")
        if problems:
            raise OpenLoopError("openloop summary: " + "; ".join(problems))

    @property
    def late_share(self) -> float:
        """Share of the scheduled requests sent later than the slack."""
        return self.late / self.scheduled if self.scheduled else 0.0

    @property
    def dropped_share(self) -> float:
        """Share of the scheduled requests never sent (the pool at its cap)."""
        return self.dropped / self.scheduled if self.scheduled else 0.0

    @property
    def not_on_time_share(self) -> float:
        """Share of the scheduled requests not sent on time: late or dropped."""
        return (self.late + self.dropped) / self.scheduled if self.scheduled else 0.0

    @property
    def cpu_s(self) -> float:
        """The generator's own CPU time over the window (user + system)."""
        return self.cpu_user_s + self.cpu_system_s

    @property
    def cpu_per_request_s(self) -> float:
        return self.cpu_s / self.sent if self.sent else 0.0

    def as_record(self) -> dict:
        """A plain dict for a run file's metadata (JSON-safe)."""
        return {
            f.name: (
                dict(getattr(self, f.name)) if f.name == "error_kinds" else getattr(self, f.name)
            )
            for f in fields(self)
        }


def parse_summary(text: str) -> Summary:
    """The generator's summary JSON (the last JSON line of ``text``) -> Summary.

    ``text`` may be the generator's whole stderr: earlier lines are ignored.
    """
    line = next(
        (ln for ln in reversed(text.strip().splitlines()) if ln.lstrip().startswith("{")), None
    )
    if line is None:
        raise OpenLoopError(f"openloop wrote no summary JSON; its output ends with {text[-300:]!r}")
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as err:
        raise OpenLoopError(f"openloop summary is not JSON ({err}): {line[:200]!r}") from None
    if raw.get("tool") != "openloop":
        raise OpenLoopError(f"summary names tool {raw.get('tool')!r}, not 'openloop'")
    names = {f.name for f in fields(Summary)}
    missing = sorted(names - set(raw) - {"error_kinds"})
    if missing:
        raise OpenLoopError(
            f"openloop summary lacks {', '.join(missing)} (format {raw.get('format')!r})"
        )
    return Summary(**{name: raw[name] for name in names if name in raw})

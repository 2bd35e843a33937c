"""hey: the command line that loads the app, and the parser of its CSV output.

What hey 0.1.4 records (requester/requester.go, report.go, print.go):

- `-o csv` prints one row per request that got an HTTP response (any status):
  response-time, DNS+dialup, DNS, Request-write, Response-delay, Response-read
  (seconds), status-code, offset (request start, seconds since hey started),
  formatted "%4.4f", i.e. 0.1 ms resolution. At most 1,000,000 rows are kept
  (MAX_ROWS); responses beyond that are served but not recorded.
- Requests that failed at transport level (refused, reset, timeout) only go to
  the text summary's error distribution, which `-o csv` does not print: the CSV
  alone cannot tell an error-free run from one with errors. The runner counts
  failures from outside (see failures.count_failed).
- `-z D` sends each of the C workers a stop signal after D; a worker checks it
  before starting its next request, so requests in flight complete and are
  recorded. Offsets therefore stay within D (plus scheduling jitter), and the
  last responses may end up to one response time after D.
- Workers run requests back to back; the time between two requests of one
  worker is a channel send. So the recorded response times of a healthy run
  add up to nearly concurrency x window ("time coverage", ~0.99 here).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

# pandas is imported where hey's CSV is parsed, after the load (see record.py and preload.py).
if TYPE_CHECKING:
    import pandas as pd

# hey's CSV header -> run file column, in hey's order.
CSV_COLUMNS = {
    "response-time": "response_time_s",
    "DNS+dialup": "dns_dialup_s",
    "DNS": "dns_s",
    "Request-write": "request_write_s",
    "Response-delay": "response_delay_s",
    "Response-read": "response_read_s",
    "status-code": "status_code",
    "offset": "offset_s",
}
SAMPLE_COLUMNS = tuple(CSV_COLUMNS.values())
# hey's report.go keeps at most maxRes = 1,000,000 results for its CSV; later
# responses are served and counted by the app but get no row.
MAX_ROWS = 1_000_000
# Runs hey with its CSV going to a file ($1) instead of the exec stream, and prints
# the load generator cgroup's CPU counter right before and after it and the host's
# uptime clock at hey's start (the task's snapshots read the same clock). No value is
# interpolated into the script; the path and hey's arguments are positional parameters.
TO_FILE_SCRIPT = r"""
out=$1; shift
usage() {
  for f in /sys/fs/cgroup/cpuacct/cpuacct.usage /sys/fs/cgroup/cpu.stat; do
    [ -r "$f" ] || continue
    while IFS= read -r l || [ -n "$l" ]; do
      case "$l" in usage_usec*) echo "@@usage_us ${l#usage_usec }"; return;; [0-9]*) echo "@@usage_ns $l"; return;; esac
    done < "$f"
  done
  echo "@@usage_none"
}
usage
read -r up _ < /proc/uptime
echo "@@start_uptime $up"
"$@" > "$out"
rc=$?
usage
exit $rc
"""


class HeyOutputError(ValueError):
    """hey's output is not the CSV this parser knows."""


def command(url: str, duration_s: float, concurrency: int, csv: bool = True) -> list[str]:
    """The argument list of one measured hey run (the article's `hey -z 30s -c 10 URL`, plus CSV; without csv,
    hey's text summary)."""
    output = ["-o", "csv"] if csv else []
    return ["hey", "-z", f"{_duration_text(duration_s)}s", "-c", str(concurrency), *output, url]


def command_to_file(
    url: str,
    duration_s: float,
    concurrency: int,
    csv_path: str,
    wrapper: Sequence[str] = (),
    csv: bool = True,
) -> list[str]:
    """The argument list running `wrapper + command(...)` with hey's CSV (or summary, without csv) written to
    csv_path.

    Its stdout is two counter lines (see parse_loadgen_usage); hey's errors stay on stderr.
    """
    return [
        "sh",
        "-c",
        TO_FILE_SCRIPT,
        "hey-to-file",
        csv_path,
        *wrapper,
        *command(url, duration_s, concurrency, csv),
    ]


def parse_loadgen_usage(text: str) -> float | None:
    """TO_FILE_SCRIPT's stdout -> CPU seconds the load generator's cgroup used around hey (None if unreadable)."""
    values = []
    for line in text.splitlines():
        kind, _, number = line.partition(" ")
        if kind == "@@usage_ns":
            values.append(int(number) / 1e9)
        elif kind == "@@usage_us":
            values.append(int(number) / 1e6)
    if len(values) != 2:
        return None
    if values[1] < values[0]:
        raise HeyOutputError(
            f"the load generator's CPU counter went backwards: {values[0]} then {values[1]} s"
        )
    return values[1] - values[0]


def parse_start_uptime(text: str) -> float | None:
    """TO_FILE_SCRIPT's stdout -> the host's /proc/uptime right before hey started (10 ms resolution)."""
    for line in text.splitlines():
        if line.startswith("@@start_uptime "):
            return float(line.split()[1])
    return None


def _duration_text(seconds: float) -> str:
    """hey parses -z with Go's time.ParseDuration: '30s', '2.5s'."""
    return f"{seconds:g}"


def parse_csv(text: str) -> pd.DataFrame:
    """hey -o csv text -> one row per recorded request, columns SAMPLE_COLUMNS."""
    lines = text.strip().splitlines()
    header_at = next((i for i, line in enumerate(lines) if line.startswith("response-time,")), None)
    if header_at is None:
        raise HeyOutputError(
            f"hey output has no CSV header 'response-time,...'; it starts with {text[:200]!r}"
        )
    header = lines[header_at].split(",")
    if header != list(CSV_COLUMNS):
        raise HeyOutputError(
            f"hey CSV header is {header}, expected {list(CSV_COLUMNS)} (hey 0.1.4 with status-code and offset)"
        )
    body = "\n".join(lines[header_at:])
    import pandas as pd

    frame = pd.read_csv(io.StringIO(body), dtype="float64")
    frame = frame.rename(columns=CSV_COLUMNS)
    if frame.isna().any().any():
        raise HeyOutputError("hey CSV has empty or non-numeric cells")
    codes = frame["status_code"]
    if not (codes == codes.round()).all():
        raise HeyOutputError("hey CSV has non-integer status codes")
    frame["status_code"] = codes.astype("int64")
    return frame[list(SAMPLE_COLUMNS)]


@dataclass(frozen=True)
class SampleCheck:
    """Cheap consistency facts about one run's samples (not statistics)."""

    rows: int
    non_2xx: int
    max_offset_s: float
    span_s: float  # from hey's start to the end of the last recorded response: the load window
    time_coverage: float  # sum of response times / (concurrency x span)
    cap_reached: bool = False  # MAX_ROWS rows: hey stopped recording, the app kept serving


def check_samples(samples: pd.DataFrame, duration_s: float, concurrency: int) -> SampleCheck:
    """Fail loudly if the samples cannot be a hey -z run of this duration.

    Raises ValueError naming what is wrong: no rows, offsets outside the window,
    missing status codes.
    """
    rows = len(samples)
    if rows == 0:
        raise ValueError("hey recorded no requests: the app answered nothing in the window")
    codes = samples["status_code"]
    if (codes < 100).any() or (codes > 599).any():
        raise ValueError(
            f"hey recorded status codes outside 100..599: {sorted(set(codes[(codes < 100) | (codes > 599)]))}"
        )
    offsets = samples["offset_s"]
    # A worker checks the stop signal before each request, so no request starts
    # after the window; 1 s covers scheduling jitter on a busy host.
    if (offsets < 0).any() or offsets.max() > duration_s + 1.0:
        raise ValueError(
            f"hey offsets span {offsets.min():.4f}..{offsets.max():.4f} s, outside the {duration_s:g} s window"
        )
    span = float((offsets + samples["response_time_s"]).max())
    coverage = float(samples["response_time_s"].sum() / (concurrency * span)) if span > 0 else 0.0
    non_2xx = int(((codes < 200) | (codes > 299)).sum())
    return SampleCheck(
        rows=rows,
        non_2xx=non_2xx,
        max_offset_s=float(offsets.max()),
        span_s=span,
        time_coverage=coverage,
        cap_reached=rows >= MAX_ROWS,
    )

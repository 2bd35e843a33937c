"""A real proxy in the request path (docs/proxy.md): where hey sends its load, and what the run keeps of the proxy.

In a condition with proxy haproxy or haproxy-nolog, the proxy role is HAProxy
(task-image/proxy/haproxy.cfg) listening on the task's loopback at port 8000 and forwarding to
the app on 8080. hey loads the proxy's port, never the app's. The runner reads HAProxy's own
request counter (its stats page, CSV) and, with an access log, the log's line count, just
outside the measured window on both sides; their deltas must equal hey's rows, the proof that
every measured request went through the proxy. Nothing here talks to Docker: the runner runs the
commands below and hands their output in.
"""

from __future__ import annotations

import csv
import io
from typing import Any, Mapping

from .conditions import Condition

APP_URL = "http://127.0.0.1:8080"
PROXY_URL = "http://127.0.0.1:8000"
# HAProxy's stats page as CSV (haproxy.cfg, frontend stats); its frontend "ingress" counts hey's requests.
STATS_CSV_URL = "http://127.0.0.1:8404/stats;csv"
FRONTEND = "ingress"
# Where HAProxy's access log goes (task-image/proxy/entrypoint.sh): a tmpfs of its own, charged to the
# task's memory like any tmpfs; 128 MB holds ~1,000,000 lines of ~120 bytes.
ACCESS_LOG_DIR = "/var/log/proxy"
ACCESS_LOG = f"{ACCESS_LOG_DIR}/access.log"
ACCESS_LOG_TMPFS = {ACCESS_LOG_DIR: "rw,nosuid,nodev,noexec,size=128m"}
# Image labels (from /etc/sidecar-bench/versions at build time, image.build_variant).
VERSION_LABEL = "org.sidecar-bench.haproxy-version"
CONFIG_DIGEST_LABEL = "org.sidecar-bench.haproxy-config-sha256"
# In the task: the access log's line count, or "none" when there is no log file (haproxy-nolog).
COUNT_LOG_SCRIPT = f'if [ -f {ACCESS_LOG} ]; then wc -l < {ACCESS_LOG}; else echo none; fi'


def base_url(condition: Condition) -> str:
    """Where the load goes: the proxy's port when a real proxy is in the path, else the app's."""
    return PROXY_URL if condition.real_proxy else APP_URL


def has_access_log(condition: Condition) -> bool:
    return condition.proxy == "haproxy"


def task_tmpfs(condition: Condition, tmpfs: Mapping[str, str]) -> dict[str, str]:
    """The task's tmpfs mounts: the runner's, plus the access log's directory when the proxy writes one."""
    return {**tmpfs, **(ACCESS_LOG_TMPFS if has_access_log(condition) else {})}


def environment(condition: Condition) -> dict[str, str]:
    """The entrypoint's PROXY variable: set only for a real proxy, so other tasks start as before."""
    return {"PROXY": condition.proxy} if condition.real_proxy else {}


FAILED_SOURCE = (
    "max(max(app /stats served delta, proxy req_tot delta) - hey rows (0 when hey's row cap was reached), Tcp "
    "AttemptFails delta from /proc/net/snmp of the task's network namespace), over the hey window (resets are "
    "the proxy closing idle connections, not failures)"
)


class ProxyCountError(ValueError):
    """The proxy's counters could not be read, or do not match hey's: the message says which."""


def parse_requests(stats_csv: str) -> int:
    """HAProxy's stats CSV -> HTTP requests its ingress frontend received (req_tot)."""
    text = stats_csv.lstrip("# ")
    rows = list(csv.DictReader(io.StringIO(text)))
    for row in rows:
        if row.get("pxname") == FRONTEND and row.get("svname") == "FRONTEND":
            try:
                return int(row["req_tot"])
            except (KeyError, TypeError, ValueError):
                break
    raise ProxyCountError(f"HAProxy's stats CSV has no req_tot for frontend {FRONTEND!r}: {stats_csv[:200]!r}")


def parse_log_lines(text: str) -> int | None:
    """COUNT_LOG_SCRIPT's output -> the access log's line count, None without a log file."""
    text = text.strip()
    if text == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise ProxyCountError(f"counting {ACCESS_LOG}'s lines gave {text!r}") from None


def count_failed(rows: int, served: int, proxy_requests: int, evidence: Mapping[str, int],
                 cap_reached: bool = False) -> tuple[int, dict[str, int]]:
    """Failed requests over the window behind a real proxy, and the evidence (runner.count_failed's, plus the
    proxy's own count).

    HAProxy closes idle connections to the app with a reset (so that the proxy keeps no TIME_WAIT), which
    moves the namespace's EstabResets with no request on the connection: resets are kept as evidence but
    counted as no failure here. A request hey did not record shows instead as one the proxy (or the app)
    counted: max(proxy requests, app served) - hey rows, plus connections refused.
    """
    unrecorded = max(served, proxy_requests) - rows
    evidence = {**evidence, "proxy_requests_not_recorded": proxy_requests - rows}
    return max(0 if cap_reached else unrecorded, evidence["tcp_attempt_fails"]), evidence


def record(condition: Condition, image_labels: Mapping[str, str], before: tuple[int, int | None],
           after: tuple[int, int | None], hey_rows: int) -> dict[str, Any]:
    """The run file's "proxy" section; ProxyCountError if the proxy counted fewer requests than hey recorded
    (some load went around it) or, with an access log, logged a different number than it counted.

    before / after: (HAProxy's request count, access log lines or None), read outside the window. More
    requests than hey's rows are kept, not refused: a request cut off as hey stops is counted by the proxy
    (and by the app's /stats) but has no row in hey's CSV; the runner's failed-request count covers it.
    """
    requests = after[0] - before[0]
    log_lines = None if after[1] is None or before[1] is None else after[1] - before[1]
    if requests < hey_rows:
        raise ProxyCountError(f"{condition.id}: the proxy received {requests} requests over the window, hey "
                              f"recorded {hey_rows}: the load did not all go through the proxy")
    if has_access_log(condition) and log_lines != requests:
        raise ProxyCountError(f"{condition.id}: the proxy's access log grew by {log_lines} lines over the window, "
                              f"it received {requests} requests")
    return {
        "kind": condition.proxy,
        "url": base_url(condition),
        "version": image_labels.get(VERSION_LABEL),
        "config_sha256": image_labels.get(CONFIG_DIGEST_LABEL),
        "requests": requests,
        "access_log": ACCESS_LOG if has_access_log(condition) else None,
        "access_log_lines": log_lines,
    }

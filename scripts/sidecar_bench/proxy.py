"""A real proxy in the request path (docs/proxy.md): where hey sends its load, and what the run keeps of the proxy.

In a condition with proxy haproxy or haproxy-nolog, the proxy role is HAProxy
(task-image/proxy/haproxy.cfg) listening on the task's loopback at port 8000 and forwarding to
the app on 8080. hey loads the proxy's port, never the app's. The runner reads HAProxy's own
request counters (its stats page, CSV: received by the frontend, forwarded by the backend) and,
with an access log, the log's line count, just outside the measured window on both sides: the
requests forwarded must cover hey's rows (the proof that every measured request went through the
proxy), and the log must hold one line per request received. Nothing here talks to Docker: the runner runs the
commands below and hands their output in.
"""

from __future__ import annotations

import csv
import io
from typing import Any, Mapping

from .conditions import Condition

# Image labels (from /etc/sidecar-bench/versions at build time, image.build_variant).
from .labels import HAPROXY_CONFIG_DIGEST_LABEL as CONFIG_DIGEST_LABEL
from .labels import HAPROXY_VERSION_LABEL as VERSION_LABEL

APP_URL = "http://127.0.0.1:8080"
PROXY_URL = "http://127.0.0.1:8000"
# HAProxy's stats page as CSV (haproxy.cfg, frontend stats); its frontend "ingress" counts hey's requests.
STATS_CSV_URL = "http://127.0.0.1:8404/stats;csv"
FRONTEND = "ingress"
BACKEND = "app"
# Where HAProxy's access log goes (task-image/proxy/entrypoint.sh): a tmpfs of its own, charged to the
# task's memory like any tmpfs; 128 MB holds ~1,000,000 lines of ~120 bytes.
ACCESS_LOG_DIR = "/var/log/proxy"
ACCESS_LOG = f"{ACCESS_LOG_DIR}/access.log"
ACCESS_LOG_TMPFS = {ACCESS_LOG_DIR: "rw,nosuid,nodev,noexec,size=128m"}
# HAProxy's configuration in the -proxy images (task-image/proxy/haproxy.cfg).
HAPROXY_CONFIG = "/etc/haproxy/sidecar.cfg"
# In the task: the access log's line count, or "none" when there is no log file (haproxy-nolog).
COUNT_LOG_SCRIPT = f"if [ -f {ACCESS_LOG} ]; then wc -l < {ACCESS_LOG}; else echo none; fi"


def base_url(condition: Condition) -> str:
    """Where the load goes: the proxy's port when a real proxy is in the path, else the app's."""
    return PROXY_URL if condition.real_proxy else APP_URL


def has_access_log(condition: Condition) -> bool:
    return condition.proxy == "haproxy"


def task_tmpfs(condition: Condition, tmpfs: Mapping[str, str]) -> dict[str, str]:
    """The task's tmpfs mounts: the runner's, plus the access log's directory when the proxy writes one."""
    return {**tmpfs, **(ACCESS_LOG_TMPFS if has_access_log(condition) else {})}


def container_command(condition: Condition) -> list[str]:
    """The task topology's proxy container: HAProxy in the foreground, as task-image/proxy/entrypoint.sh starts
    it in the process topology (with an access log, its stdout kept in ACCESS_LOG)."""
    if has_access_log(condition):
        return [
            "sh",
            "-c",
            f"PROXY_ACCESS_LOG=file exec haproxy -db -f {HAPROXY_CONFIG} > {ACCESS_LOG}",
        ]
    return ["haproxy", "-db", "-f", HAPROXY_CONFIG]


def environment(condition: Condition) -> dict[str, str]:
    """The entrypoint's PROXY variable: set only for a real proxy, so other tasks start as before."""
    return {"PROXY": condition.proxy} if condition.real_proxy else {}


FAILED_SOURCE = (
    "max(max(app /stats served delta, proxy backend req_tot delta) - hey rows (0 when hey's row cap was reached), Tcp "
    "AttemptFails delta from /proc/net/snmp of the task's network namespace), over the hey window (resets are "
    "the proxy closing connections as hey closes its own, not failures)"
)


class ProxyCountError(ValueError):
    """The proxy's counters could not be read, or do not match hey's: the message says which."""


def parse_requests(stats_csv: str) -> tuple[int, int]:
    """HAProxy's stats CSV -> (requests its ingress frontend received, requests its app backend forwarded).

    Received (the frontend's req_tot) also counts a client connection closed while HAProxy waited for its
    next request, when the close is abortive (hey exiting closes its kept-alive connections so): HAProxy
    logs it as "<BADREQ>" with termination state CR and status 400, and it never reaches the app.
    Forwarded (the backend's req_tot) counts only requests sent on to the app: the one hey's rows match.
    """
    text = stats_csv.lstrip("# ")
    found: dict[str, int] = {}
    for row in csv.DictReader(io.StringIO(text)):
        key = (row.get("pxname"), row.get("svname"))
        if key in ((FRONTEND, "FRONTEND"), (BACKEND, "BACKEND")):
            try:
                found[key[1]] = int(row["req_tot"])
            except (KeyError, TypeError, ValueError):
                pass
    if set(found) != {"FRONTEND", "BACKEND"}:
        raise ProxyCountError(
            f"HAProxy's stats CSV has no req_tot for frontend {FRONTEND!r} and backend {BACKEND!r}: "
            f"{stats_csv[:200]!r}"
        )
    return found["FRONTEND"], found["BACKEND"]


def parse_log_lines(text: str) -> int | None:
    """COUNT_LOG_SCRIPT's output -> the access log's line count, None without a log file."""
    text = text.strip()
    if text == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise ProxyCountError(f"counting {ACCESS_LOG}'s lines gave {text!r}") from None


def count_failed(
    rows: int, served: int, forwarded: int, evidence: Mapping[str, int], cap_reached: bool = False
) -> tuple[int, dict[str, int]]:
    """Failed requests over the window behind a real proxy, and the evidence (runner.count_failed's, plus the
    proxy's own count).

    As hey closes its connections at the end of a load, HAProxy closes connections with a reset (about one
    per client connection, with no request on them: forwarded, served and hey's rows agree), which moves the
    namespace's EstabResets: resets are kept as evidence but counted as no failure here. A request hey did not record shows instead as one the proxy forwarded (or
    the app served): max(forwarded, served) - hey rows, plus connections refused.
    """
    unrecorded = max(served, forwarded) - rows
    evidence = {**evidence, "proxy_forwarded_not_recorded": forwarded - rows}
    return max(0 if cap_reached else unrecorded, evidence["tcp_attempt_fails"]), evidence


def record(
    condition: Condition,
    image_labels: Mapping[str, str],
    before: tuple[int, int, int | None],
    after: tuple[int, int, int | None],
    hey_rows: int,
) -> dict[str, Any]:
    """The run file's "proxy" section; ProxyCountError if the proxy forwarded fewer requests than hey recorded
    (some load went around it) or, with an access log, logged a different number than it received.

    before / after: (requests received, requests forwarded, access log lines or None), read outside the
    window. More forwarded than hey's rows is kept, not refused: the runner's failed count covers it.
    """
    received = after[0] - before[0]
    forwarded = after[1] - before[1]
    log_lines = None if after[2] is None or before[2] is None else after[2] - before[2]
    if forwarded < hey_rows:
        raise ProxyCountError(
            f"{condition.id}: the proxy forwarded {forwarded} requests over the window, hey "
            f"recorded {hey_rows}: the load did not all go through the proxy"
        )
    if has_access_log(condition) and log_lines != received:
        raise ProxyCountError(
            f"{condition.id}: the proxy's access log grew by {log_lines} lines over the window, "
            f"it received {received} requests"
        )
    return {
        "kind": condition.proxy,
        "url": base_url(condition),
        "version": image_labels.get(VERSION_LABEL),
        "config_sha256": image_labels.get(CONFIG_DIGEST_LABEL),
        "requests": forwarded,
        "received": received,
        "access_log": ACCESS_LOG if has_access_log(condition) else None,
        "access_log_lines": log_lines,
    }

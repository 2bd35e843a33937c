"""Measure the open-loop generator's limits on this Docker engine (a study, not a workflow step).

Starts the Go app with no CPU limit (its own network namespace, loopback only), then runs
openloop beside it at a ladder of rates and prints, per rate: the share of requests not
sent on time (late beyond the slack, dropped at the connection cap), the send lag, the
latency quantiles, and the generator's own CPU per request, from its container's cgroup
(cpuacct.usage or cpu.stat usage_usec, read right before and after it) and from its own
getrusage. The host's load average is printed beside each rate: on a shared host the
limit is as much the neighbours' as the generator's.

    .venv/bin/python scripts/dev/openloop_limits.py --path /work --rates 500,1000,2000,3000
    .venv/bin/python scripts/dev/openloop_limits.py --path /stats --rates 2000,5000,10000,20000
    .venv/bin/python scripts/dev/openloop_limits.py --path /work --hey 10   # hey's CPU per request, to compare

Holds the engine's measurement lock for the whole ladder.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sidecar_bench import hey, image, openloop
from sidecar_bench.hosts import host_lock, lock_dir
from sidecar_bench.labels import STUDY_LABEL

LABELS = {STUDY_LABEL: "openloop-limits"}
CSV_IN_CONTAINER = "/dev/stderr"  # rows, then the summary line, on the container's stderr


def _loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def run_rate(
    client, app, url: str, rate: float, duration_s: float, max_conns: int, slack_s: float
) -> dict:
    args = openloop.command(
        url, rate, duration_s, max_conns=max_conns, slack_s=slack_s, wait_ready_s=20
    )
    # The CSV goes to stdout, which the wrapper sends to stderr ahead of the summary.
    command = ["sh", "-c", hey.TO_FILE_SCRIPT, "openloop-to-file", CSV_IN_CONTAINER, *args]
    load_before = _loadavg()
    gen = client.containers.run(
        image.image_tag("loadgen-open"),
        command=command,
        detach=True,
        labels=LABELS,
        network_mode=f"container:{app.id}",
    )
    try:
        status = gen.wait(timeout=duration_s + 120)["StatusCode"]
        out = gen.logs(stdout=True, stderr=False).decode()
        err = gen.logs(stdout=False, stderr=True).decode()
    finally:
        gen.remove(force=True)
    if status != 0:
        raise RuntimeError(f"openloop at {rate:g}/s exited {status}: {err[-2000:]}")
    summary = openloop.parse_summary(err)
    csv_text = err[: err.rstrip().rfind("\n{")] if "\n{" in err else err
    samples = hey.parse_csv(csv_text)
    cgroup_cpu_s = hey.parse_loadgen_usage(out)
    latency = samples["response_time_s"]
    return {
        "rate": rate,
        "sent_rate": round(summary.sent_rate_per_s, 1),
        "late_share": round(summary.late_share, 4),
        "dropped_share": round(summary.dropped_share, 4),
        "errors": summary.errors,
        "workers": summary.workers,
        "lag_p50_ms": round(summary.lag_p50_s * 1e3, 3),
        "lag_p90_ms": round(summary.lag_p90_s * 1e3, 3),
        "lag_p99_ms": round(summary.lag_p99_s * 1e3, 2),
        "lag_p999_ms": round(summary.lag_p999_s * 1e3, 2),
        "p50_ms": round(float(latency.median()) * 1e3, 2),
        "p99_ms": round(float(latency.quantile(0.99)) * 1e3, 2),
        "cpu_us_per_request_rusage": round(summary.cpu_per_request_s * 1e6, 1),
        "cpu_us_per_request_cgroup": None
        if cgroup_cpu_s is None
        else round(cgroup_cpu_s / summary.sent * 1e6, 1),
        "generator_cpu_cores": None
        if cgroup_cpu_s is None
        else round(cgroup_cpu_s / summary.wall_s, 3),
        "loadavg_before": load_before,
        "loadavg_after": _loadavg(),
    }


def run_hey(client, app, url: str, duration_s: float, concurrency: int) -> dict:
    """hey's closed loop beside the app, for its CPU per request (the same cgroup reading)."""
    wait = f"until curl -sf -o /dev/null {url}; do sleep 0.1; done"
    script = f'{wait}; exec "$@"'
    command = [
        "sh",
        "-c",
        script,
        "wait-then-hey",
        *hey.command_to_file(url, duration_s, concurrency, "/dev/stderr"),
    ]
    gen = client.containers.run(
        image.image_tag("loadgen"),
        command=command,
        detach=True,
        labels=LABELS,
        network_mode=f"container:{app.id}",
    )
    try:
        status = gen.wait(timeout=duration_s + 120)["StatusCode"]
        out = gen.logs(stdout=True, stderr=False).decode()
        err = gen.logs(stdout=False, stderr=True).decode()
    finally:
        gen.remove(force=True)
    if status != 0:
        raise RuntimeError(f"hey exited {status}: {err[-2000:]}")
    samples = hey.parse_csv(err)
    cpu_s = hey.parse_loadgen_usage(out)
    latency = samples["response_time_s"]
    return {
        "hey_concurrency": concurrency,
        "rate": round(len(samples) / duration_s, 1),
        "p50_ms": round(float(latency.median()) * 1e3, 2),
        "p99_ms": round(float(latency.quantile(0.99)) * 1e3, 2),
        "cpu_us_per_request_cgroup": None
        if cpu_s is None
        else round(cpu_s / len(samples) * 1e6, 1),
        "generator_cpu_cores": None if cpu_s is None else round(cpu_s / duration_s, 3),
        "loadavg_after": _loadavg(),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--path",
        default="/work",
        help="the Go app's path to load (/work: the article's; /stats: cheap)",
    )
    parser.add_argument(
        "--rates", default="500,1000,1500,2000,3000", help="comma-separated requests/s"
    )
    parser.add_argument("--duration", type=float, default=5.0, help="seconds per rate")
    parser.add_argument("--max-conns", type=int, default=1000)
    parser.add_argument(
        "--slack",
        type=float,
        default=0.001,
        help="seconds after the intended time that count as late",
    )
    parser.add_argument(
        "--hey",
        type=int,
        metavar="CONCURRENCY",
        help="run hey -c CONCURRENCY instead of the ladder",
    )
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    with host_lock([{"name": "local", "url": None}], lock_dir(), 3600, "openloop limits study") as (
        _,
        client,
    ):
        app = client.containers.run(
            image.image_tag("go"), detach=True, labels=LABELS, network_mode="none"
        )
        try:
            if args.hey:
                row = run_hey(
                    client, app, f"http://127.0.0.1:8080{args.path}", args.duration, args.hey
                )
                print(json.dumps({"path": args.path, **row}), flush=True)
                rates = []
            for rate in rates:
                row = run_rate(
                    client,
                    app,
                    f"http://127.0.0.1:8080{args.path}",
                    rate,
                    args.duration,
                    args.max_conns,
                    args.slack,
                )
                print(json.dumps({"path": args.path, **row}), flush=True)
        finally:
            app.remove(force=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

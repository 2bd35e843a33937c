"""Harness overhead: how long a run job takes beyond its measured window, on the local engine.

Runs N short Go conditions (0.5 vCPU, no sidecar) through job.main, exactly as the
run_condition rule does (engine lock, stale sweep, image lookup, containers, readiness,
snapshots, removal, run file), and prints one JSON object:

    {"runs": N, "duration_s": D, "overhead_s": {"median": ..., "min": ..., "max": ...},
     "lock_wait_s": {...}, "samples": [...]}

overhead = job wall time - duration_s - warmup_s. lock_wait_s is the time spent getting the
engine lock (another measurement or a Docker test holding it): a sample with a long wait says
the engine was busy, so measure on an idle machine, repeat, and take the median.

    .venv/bin/python scripts/bench_harness.py            # 5 runs of 2 s
    .venv/bin/python scripts/bench_harness.py --runs 9 --duration 2

The images must exist on the engine (rule build_image, or the runner tests, build them).

Measured on the development machine (2 cores, Docker 20.10, cgroup v1, other jobs running), 5 runs
of 2 s each, batches alternated: before the runner polled readiness in one exec, merged its execs
and removed its containers concurrently, the median overhead was 1.03-1.24 s (four batches); after,
0.76-0.91 s (four batches). What remains: starting the task (~0.2 s) and the load generator
(~0.08 s), five execs (~0.05-0.08 s each), hey's exit and CSV, the two removals side by side
(~0.07 s), parsing and writing the run file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import docker

from sidecar_bench import hosts, image, job
from sidecar_bench.conditions import Condition, LoadSettings

# A memory size no experiment uses, so a harness container is never taken for a matrix run's.
HARNESS_CONDITION = Condition("go", 0.5, 2044, 0, 0)


def image_refs(client: docker.DockerClient, directory: Path) -> dict[str, str]:
    """The image rule's JSON files for the go and loadgen images already on the engine."""
    refs = {}
    for part, variant in (("task", HARNESS_CONDITION.variant), ("loadgen", "loadgen")):
        tag = image.image_tag(variant)
        try:
            image_id = client.images.get(tag).id
        except docker.errors.ImageNotFound:
            sys.exit(f"bench_harness: image {tag} is not on the local engine: build it first (rule build_image)")
        path = directory / f"{part}.json"
        path.write_text(json.dumps({"variant": variant, "tag": tag, "inputs_digest": "harness",
                                    "hosts": {"local": image_id}}))
        refs[part] = str(path)
    return refs


def summary(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3)}


def measure(runs: int, duration_s: float, concurrency: int) -> dict[str, Any]:
    load = LoadSettings(duration_s=duration_s, concurrency=concurrency, ready_timeout_s=60)
    waits: list[float] = []
    original_lock = job.host_lock

    @contextlib.contextmanager
    def timed_lock(*args: Any, **kwargs: Any) -> Iterator[Any]:
        asked = time.monotonic()
        with original_lock(*args, **kwargs) as held:
            waits.append(time.monotonic() - asked)
            yield held

    job.host_lock = timed_lock  # only to report lock waits; the job itself is unchanged
    samples = []
    with tempfile.TemporaryDirectory(prefix="sidecar-bench-harness-") as tmp:
        directory = Path(tmp)
        refs = image_refs(docker.from_env(), directory)
        for number in range(1, runs + 1):
            out = directory / f"rep{number}.parquet"
            started = time.monotonic()
            job.main(HARNESS_CONDITION.as_dict(), load.as_dict(), [{"name": "local", "url": None}], refs,
                     str(out), str(hosts.lock_dir()))
            wall = time.monotonic() - started
            samples.append({"wall_s": round(wall, 3), "lock_wait_s": round(waits[-1], 3),
                            "overhead_s": round(wall - load.duration_s - load.warmup_s, 3)})
    job.host_lock = original_lock
    return {"runs": runs, "duration_s": duration_s, "concurrency": concurrency,
            "condition": HARNESS_CONDITION.id,
            "overhead_s": summary([s["overhead_s"] for s in samples]),
            "lock_wait_s": summary([s["lock_wait_s"] for s in samples]), "samples": samples}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="how many runs (default 5)")
    parser.add_argument("--duration", type=float, default=2.0, help="measured window per run, s (default 2)")
    parser.add_argument("--concurrency", type=int, default=10, help="hey -c (default 10)")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.duration <= 0:
        parser.error(f"--runs {args.runs} must be >= 1 and --duration {args.duration:g} > 0")
    print(json.dumps(measure(args.runs, args.duration, args.concurrency), indent=1))


if __name__ == "__main__":
    main()

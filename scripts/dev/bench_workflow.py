"""Harness time per run as the workflow spends it: the gap from one run's end of load to the next run's start
of load, with Snakemake's scheduling, the job's process and everything bench_harness.py times.

    .venv/bin/python scripts/dev/bench_workflow.py                          # the quick preset, every run
    .venv/bin/python scripts/dev/bench_workflow.py --preset figure --runs 20
    .venv/bin/python scripts/dev/bench_workflow.py --snakemake-arg=--scheduler --snakemake-arg=greedy

Runs the real Snakefile (`snakemake --cores 1`) on the local engine in a temporary working directory (the
checkout's own results are not touched), asking for the preset's first N run files in the workflow's order
(every condition's first repetition, then the second ones, ...), with the preset's load settings unless
--duration/--warmup are given. Then reads each run file's measured window (its start and end, milliseconds,
on the runner's clock) and its warm-up: a run's load starts at its window's start less its warm-up. Prints one
JSON object: per gap between consecutive runs the harness seconds, their median, least and most; the same
less the next app's own start under its limits (its readiness, from the run's log: at 0.25 vCPU Next.js takes
seconds to answer); the workflow's wall time and the share of it the runs' load took. Images the engine lacks
are built first (outside every gap). Measure on an idle machine: a test suite or a build beside it changes
the figures.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from sidecar_bench.experiment import check_config, resolve_experiment
from sidecar_bench.harness_gaps import load_span
from sidecar_bench.record import read_run_meta

ROOT = Path(__file__).resolve().parents[2]


def run_files(config: dict, runs: int | None) -> list[str]:
    """The preset's run files in the workflow's order (first repetitions first), the first `runs` of them."""
    experiment = resolve_experiment(check_config(config))
    files = [
        f"results/{experiment.preset}/runs/{condition.id}/rep{repeat}.parquet"
        for repeat in range(1, experiment.repeats + 1)
        for condition in experiment.conditions
    ]
    return files[:runs] if runs else files


def ready_s(log: Path) -> float | None:
    """The app's start to its first answer, from the run job's log ("app ready after 6.8 s")."""
    found = re.search(r"app ready after ([0-9.]+) s", log.read_text()) if log.exists() else None
    return float(found.group(1)) if found else None


def main(
    preset: str,
    runs: int | None,
    duration: float | None,
    warmup: float | None,
    snakemake_args: list[str] | None = None,
) -> dict:
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["preset"] = preset
    load = config["presets"][preset].setdefault("load", {})
    if duration is not None:
        load["duration_s"] = duration
    if warmup is not None:
        load["warmup_s"] = warmup
    targets = run_files(config, runs)
    with tempfile.TemporaryDirectory(prefix="sidecar-bench-workflow-") as tmp:
        work = Path(tmp)
        (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        command = [
            str(Path(sys.executable).with_name("snakemake")),
            "--snakefile",
            str(ROOT / "Snakefile"),
            "--directory",
            str(work),
            "--cores",
            "1",
            *(snakemake_args or []),
            *targets,
        ]
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True)
        wall = time.monotonic() - started
        if done.returncode:
            raise SystemExit(f"snakemake failed:\n{(done.stdout + done.stderr)[-4000:]}")
        metas = [read_run_meta(work / target) for target in targets]
        logs = [
            work / target.replace("/runs/", "/logs/run_condition/").replace(".parquet", ".log")
            for target in targets
        ]
        # (A run warmed up until steady has no fixed warm-up, hence no load span: left out.)
        runs_in_order = sorted(
            (span, meta["condition"]["id"], ready_s(log))
            for meta, log in zip(metas, logs)
            if (span := load_span(meta)) is not None
        )
    spans = [span for span, _, _ in runs_in_order]
    gaps = [round(nxt[0] - prev[1], 3) for prev, nxt in zip(spans, spans[1:])]
    # The next app's own start under its limits (its readiness) is part of a gap, but not the harness's.
    beside_start = [
        round(gap - ready, 3)
        for gap, (_, _, ready) in zip(gaps, runs_in_order[1:])
        if ready is not None
    ]
    load_s = sum(end - start for start, end in spans)
    return {
        "preset": preset,
        "snakemake_args": snakemake_args or [],
        "runs": len(spans),
        "duration_s": metas[0]["load"]["duration_s"],
        "warmup_s": sorted({meta["load"]["warmup_s"] for meta in metas}),
        "harness_s": {
            "median": round(statistics.median(gaps), 3) if gaps else None,
            "min": min(gaps, default=None),
            "max": max(gaps, default=None),
        },
        "without_the_apps_start_s": {
            "median": round(statistics.median(beside_start), 3) if beside_start else None,
            "min": min(beside_start, default=None),
            "max": max(beside_start, default=None),
        },
        "gaps": [
            {"next": condition, "gap_s": gap, "next_app_ready_s": ready}
            for gap, (_, condition, ready) in zip(gaps, runs_in_order[1:])
        ],
        "workflow_wall_s": round(wall, 1),
        "from_first_load_to_last_s": round(spans[-1][1] - spans[0][0], 1),
        "load_share": round(load_s / (spans[-1][1] - spans[0][0]), 3),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--preset", default="quick", help="a preset of config.yaml (default quick)")
    parser.add_argument("--runs", type=int, help="only the first N run files (default: all)")
    parser.add_argument("--duration", type=float, help="the window, s (default: the preset's)")
    parser.add_argument("--warmup", type=float, help="the warm-up, s (default: the preset's)")
    parser.add_argument(
        "--snakemake-arg",
        action="append",
        default=[],
        help="an argument for snakemake, before the targets (repeat it: --snakemake-arg=--scheduler "
        "--snakemake-arg=greedy)",
    )
    args = parser.parse_args()
    print(
        json.dumps(
            main(args.preset, args.runs, args.duration, args.warmup, args.snakemake_arg), indent=1
        )
    )

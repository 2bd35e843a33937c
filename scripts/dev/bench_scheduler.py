"""Snakemake's own step between run jobs at a preset's full scale: every run file of the preset made by a stub
(a process that writes its file), so that what is timed is Snakemake (its start, the DAG, choosing the next job
among all the ready ones, its records of each job) and a job's process start, not a measurement.

    .venv/bin/python scripts/dev/bench_scheduler.py                    # article: greedy, then ilp, twice
    .venv/bin/python scripts/dev/bench_scheduler.py --preset figure --schedulers greedy --passes 3

bench_workflow.py times the real gap between two loads, but asks only for the first N run files: with a few
ready jobs, Snakemake's choice of the next one is cheap. A full matrix has all its runs ready at once (561 in
`article`), and Snakemake's default scheduler solves an integer program over them (PuLP's CBC) each time a job
ends; profiles/default sets the greedy one. This copies the project into a temporary directory, replaces the
image and run jobs' scripts with stubs, and runs `snakemake --cores 1 --scheduler S` for the preset's run files,
each scheduler in turn, --passes times. It prints one JSON object: per pass the wall time and the wall time per
run job (the stub image jobs and Snakemake's start included), and the median per scheduler. The workflow's
onstart still starts the job server and the engines' hold (a local engine must answer); nothing else touches
the engine. Measure on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from bench_workflow import ROOT, run_files

# The stubs: the image rule's script (Snakemake's script directive: a `snakemake` object) and the run job's
# (a plain process with --out FILE among its arguments) write their outputs and nothing else.
IMAGE_STUB = "from pathlib import Path\nfor out in snakemake.output:  # noqa: F821\n    Path(out).write_text('{}')\n"
RUN_STUB = (
    "import sys\nfrom pathlib import Path\n"
    "out = Path(sys.argv[sys.argv.index('--out') + 1])\n"
    "out.parent.mkdir(parents=True, exist_ok=True)\nout.write_text('{}')\n"
)
COPIED = ("profiles", "workflow", "scripts", "task-image")
LEFT_OUT = shutil.ignore_patterns("node_modules", "__pycache__", ".snakemake", "results", ".next")


def stub_project(dest: Path, preset: str) -> list[str]:
    """A copy of the project whose image and run jobs are stubs -> the preset's run files, in the workflow's order."""
    shutil.copy2(ROOT / "Snakefile", dest / "Snakefile")
    for name in COPIED:
        shutil.copytree(ROOT / name, dest / name, ignore=LEFT_OUT)
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["preset"] = preset
    (dest / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (dest / "workflow" / "scripts" / "build_image.py").write_text(IMAGE_STUB)
    (dest / "workflow" / "scripts" / "run_condition.py").write_text(RUN_STUB)
    return run_files(config, None)


def one_pass(project: Path, targets: list[str], scheduler: str) -> float:
    """The wall time of `snakemake --cores 1 --scheduler S` making the targets from nothing."""
    for made in ("results", ".snakemake"):
        shutil.rmtree(project / made, ignore_errors=True)
    command = [str(Path(sys.executable).with_name("snakemake")), "--cores", "1"]
    started = time.monotonic()
    done = subprocess.run(
        [*command, "--scheduler", scheduler, "--", *targets],
        cwd=project,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    if done.returncode:
        raise SystemExit(f"snakemake failed:\n{(done.stdout + done.stderr)[-4000:]}")
    return wall


def main(preset: str, schedulers: list[str], passes: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="sidecar-bench-scheduler-") as tmp:
        project = Path(tmp)
        targets = stub_project(project, preset)
        runs = []
        for _ in range(passes):
            for scheduler in schedulers:
                wall = one_pass(project, targets, scheduler)
                runs.append(
                    {
                        "scheduler": scheduler,
                        "wall_s": round(wall, 2),
                        "s_per_run_job": round(wall / len(targets), 4),
                    }
                )
    return {
        "preset": preset,
        "run_jobs": len(targets),
        "passes": runs,
        "s_per_run_job_median": {
            scheduler: round(
                statistics.median(r["s_per_run_job"] for r in runs if r["scheduler"] == scheduler),
                4,
            )
            for scheduler in schedulers
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--preset", default="article", help="a preset of config.yaml (default article)"
    )
    parser.add_argument(
        "--schedulers",
        nargs="+",
        default=["greedy", "ilp"],
        choices=["greedy", "ilp"],
        help="Snakemake's schedulers to time, in turn (default: greedy ilp)",
    )
    parser.add_argument(
        "--passes", type=int, default=2, help="rounds of all schedulers (default 2)"
    )
    args = parser.parse_args()
    if args.passes < 1:
        parser.error(f"--passes: {args.passes} is not a whole number >= 1")
    print(json.dumps(main(args.preset, args.schedulers, args.passes), indent=1))

"""How a run job gets what it measures: its own arguments on its command line, the workflow's in its environment.

Rules run_condition and run_calibration start workflow/scripts/run_condition.py as a plain Python process
(a shell command), not through Snakemake's script directive, whose preamble imports Snakemake in every job:
0.1 s of each run's harness on a 2-core VM, for an object the job reads five values of. What is the job's
own comes on its command line (its condition, repetition, files and log); what is the workflow's (its
engines, the load settings, on_failure, the image settings and the task-image folder) comes from
SIDECAR_BENCH_RUN_JOB, set by the workflow for every job it starts (workflow/rules/common.smk), as
SIDECAR_BENCH_PROGRESS is. Neither is a param: params are rerun triggers, and adding an engine or switching
on_failure must not rerun a measured condition. The params stay what they were (the condition and the load),
so a set measured by the script directive is not measured again.

Only the standard library here (and failures, which is too): the job parses its arguments and opens its log before it imports the rest.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any, Mapping

from .failures import RunError

ENV = "SIDECAR_BENCH_RUN_JOB"

# What a run does when a process of the task dies (the app or a sidecar: crashed, killed,
# OOM-killed), before or inside the measured window (config.yaml on_failure):
# stop - the job fails with the error and no file: Snakemake stops (today's behaviour);
# record - the job writes a failure record at the run file's path and succeeds, so the workflow
#          goes on and the summaries and tables show the condition as failed.
# Every other error (an engine that goes away, a bad image, a failed consistency check) stops.
ON_FAILURE = ("stop", "record")


def on_failure_setting(config: Mapping[str, Any]) -> str:
    """config.yaml's on_failure: the top-level key (--config on_failure=record), else the preset's, else stop."""
    value = config.get("on_failure")
    if value is None:
        preset = (config.get("presets") or {}).get(config.get("preset")) or {}
        value = preset.get("on_failure")
    value = value or "stop"
    if value not in ON_FAILURE:
        raise RunError(f"on_failure is {value!r}, not one of {', '.join(ON_FAILURE)}")
    return value


class RunJobError(ValueError):
    """The job's command line or environment is not what the workflow passes."""


def workflow_settings(
    hosts: list[Mapping[str, Any]],
    load: Mapping[str, Any],
    on_failure: str,
    image: Mapping[str, Any],
    task_image_dir: str | Path,
) -> str:
    """The workflow's part of every run job, as SIDECAR_BENCH_RUN_JOB's value (JSON)."""
    return json.dumps(
        {
            "hosts": list(hosts),
            "load": dict(load),
            "on_failure": on_failure,
            "image": dict(image),
            "task_image_dir": str(task_image_dir),
        }
    )


def command(script: str | Path, python: str = sys.executable) -> str:
    """The start of the rules' shell command: this interpreter and the job's script, quoted."""
    return f"{shlex.quote(python)} {shlex.quote(str(script))}"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="run_condition.py",
        description="One run of a condition (started by the workflow's run_condition and run_calibration rules).",
    )
    parser.add_argument("--condition", required=True, help="the condition's params (a dict's repr)")
    parser.add_argument("--repeat", required=True, type=int, help="the repetition (1, 2, ...)")
    parser.add_argument("--out", required=True, help="the run file to write")
    parser.add_argument("--log", required=True, help="the job's log file")
    parser.add_argument("--task-image", required=True, help="the task image rule's JSON file")
    parser.add_argument(
        "--loadgen-image", required=True, help="the load generator image rule's JSON file"
    )
    parser.add_argument(
        "--open-loadgen-image", default="", help="open loop: the generator image's JSON file"
    )
    parser.add_argument(
        "--capacity", default="", help="open loop: the capacity file the rate came from"
    )
    return parser


def log_path(argv: list[str]) -> str | None:
    """The --log argument, read before anything else can fail (None if there is none)."""
    for index, arg in enumerate(argv):
        if arg == "--log" and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--log="):
            return arg.split("=", 1)[1]
    return None


def parse(argv: list[str], environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """The keyword arguments of job.main for this job (without lock_dir and progress), from its argv and environment."""
    try:
        args = _parser().parse_args(argv)
    except SystemExit as err:  # argparse has printed why
        raise RunJobError(f"run_condition.py: bad arguments {argv!r}") from err
    try:
        condition = ast.literal_eval(args.condition)
    except (ValueError, SyntaxError) as err:
        raise RunJobError(
            f"run_condition.py: --condition {args.condition!r} is not a condition's dict ({err})"
        ) from None
    if not isinstance(condition, dict):
        raise RunJobError(
            f"run_condition.py: --condition {args.condition!r} is not a condition's dict"
        )
    if args.repeat < 1:
        raise RunJobError(f"run_condition.py: --repeat {args.repeat} is not a whole number >= 1")
    raw = environ.get(ENV)
    if not raw:
        raise RunJobError(
            f"run_condition.py: {ENV} is not set: this script is a job of the workflow "
            "(snakemake sets it), not a command to run by hand"
        )
    try:
        settings = json.loads(raw)
        hosts, load = settings["hosts"], settings["load"]
        on_failure, image, task_image_dir = (
            settings["on_failure"],
            settings["image"],
            settings["task_image_dir"],
        )
    except (ValueError, KeyError, TypeError) as err:
        raise RunJobError(
            f"run_condition.py: {ENV} is not the workflow's settings ({err!r})"
        ) from None
    image_refs = {"task": args.task_image, "loadgen": args.loadgen_image}
    if args.open_loadgen_image:
        image_refs["loadgen_open"] = args.open_loadgen_image
    return {
        "condition": condition,
        "load": load,
        "hosts": hosts,
        "image_refs": image_refs,
        "out": args.out,
        "image_settings": image,
        "repeat": args.repeat,
        "on_failure": on_failure,
        "capacity_file": args.capacity or None,
        "task_image_dir": task_image_dir,
    }

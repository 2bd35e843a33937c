"""Rows of the Reruns table (docs/workflow.md) on the real Snakefile: after the quick preset's images and runs
have been made once, one thing changes and `snakemake -n` shows what would run. Also the order the scheduler is
given: image builds above every run, every first repetition above every second one."""

import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from workflow_helpers import copy_project, dry_run, snakemake

QUICK = ("--config", "preset=quick")
MATRIX = {
    "go_cpu0.25_mem2048_sc3_load00",
    "go_cpu0.25_mem2048_sc3_load05",
    "next_cpu0.25_mem2048_sc3_load00",
    "next_cpu0.25_mem2048_sc3_load05",
}
# The model's calibration: each app alone at the preset's vCPU and with no limit (all the CPUs).
NO_LIMIT = f"{os.cpu_count() or 1:g}"
CALIBRATION = {
    f"{app}_cpu{vcpu}_mem2048_sc0_load00" for app in ("go", "next") for vcpu in ("0.25", NO_LIMIT)
}
REPEATS = 2  # the quick preset's
RUNS = [
    f"results/quick/runs/{c}/rep{r}.parquet" for c in sorted(MATRIX) for r in range(1, REPEATS + 1)
] + [
    f"results/quick/calibration/runs/{c}/rep{r}.parquet"
    for c in sorted(CALIBRATION)
    for r in range(1, REPEATS + 1)
]
# What the image and run jobs do here: write their outputs, nothing else. Snakemake runs the jobs and records
# their params and inputs as it does for real builds and measurements, and decides reruns from those records.
# Stands in for a rule's script: build_image.py (the script directive's `snakemake` object) and run_condition.py
# (a plain process: --out FILE among its arguments).
STUB = (
    "import sys\n"
    "from pathlib import Path\n"
    "try:\n"
    "    outs = list(snakemake.output)  # noqa: F821\n"
    "except NameError:\n"
    "    outs = [sys.argv[sys.argv.index('--out') + 1]]\n"
    "for out in outs:\n"
    "    Path(out).parent.mkdir(parents=True, exist_ok=True)\n"
    "    Path(out).write_text('{}')\n"
)


def plan_runs(project: Path, *config: str):
    """snakemake -n for the preset's run files (of the matrix and of the calibration), with more --config items."""
    return dry_run(project, *QUICK, *config, "--", *RUNS)


@pytest.fixture(scope="module")
def finished_once(tmp_path_factory):
    project = copy_project(tmp_path_factory.mktemp("reruns") / "project")
    for script in ("build_image.py", "run_condition.py"):
        (project / "workflow" / "scripts" / script).write_text(STUB)
    done = snakemake(project, *QUICK, "--", *RUNS)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    plan = plan_runs(project)
    assert plan.nothing_to_do and "missing provenance" not in plan.output, plan.output
    return project


@pytest.fixture()
def finished(finished_once, tmp_path):
    """A copy of the finished project for one test to change (file times and Snakemake's records kept)."""
    return Path(shutil.copytree(finished_once, tmp_path / "finished", symlinks=True))


def change_config(project: Path, keys: tuple, value) -> None:
    config = yaml.safe_load((project / "config.yaml").read_text())
    where = config
    for key in keys[:-1]:
        where = where.setdefault(key, {})
    where[keys[-1]] = value
    (project / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


@pytest.mark.parametrize(
    "keys, value",
    [
        (
            ("presets", "quick", "load", "duration_s"),
            6,
        ),  # the quick preset's own duration and warm-up win
        (("load", "concurrency"), 5),
        (("presets", "quick", "load", "warmup_s"), 2),
        (("load", "sidecar_burn"), "cpu"),
        (("load", "warmup", "mode"), "until_steady"),
    ],
    ids=lambda part: ".".join(part) if isinstance(part, tuple) else None,
)
@pytest.mark.workflow
def test_a_load_setting_that_changes_a_measurement_reruns_every_run(finished, keys, value):
    change_config(finished, keys, value)
    plan = plan_runs(finished)
    assert plan.returncode == 0, plan.output
    assert plan.conditions == MATRIX | CALIBRATION, plan.output
    assert plan.jobs["run_condition"] == len(MATRIX) * REPEATS
    assert plan.jobs["run_calibration"] == len(CALIBRATION) * REPEATS
    assert plan.jobs["build_image"] == 0
    assert "Params have changed" in plan.output


@pytest.mark.workflow
def test_a_warmup_for_one_app_reruns_that_apps_runs_only(finished):
    # The quick preset sets its own warmup_s, so the default's per-app warm-ups are not its own (below).
    change_config(finished, ("presets", "quick", "load", "app_warmup_s"), {"next": 30})
    plan = plan_runs(finished)
    assert plan.returncode == 0, plan.output
    assert plan.conditions == {c for c in MATRIX | CALIBRATION if c.startswith("next_")}, (
        plan.output
    )
    assert plan.jobs["build_image"] == 0
    assert "Params have changed" in plan.output


@pytest.mark.parametrize(
    "keys, value",
    [
        (("load", "ready_timeout_s"), 300),
        (
            ("hosts",),
            [{"name": "local", "url": None}, {"name": "lab", "url": "ssh://root@lab.example"}],
        ),
        (("image", "base_fallback"), "none"),
        (("on_failure",), "record"),
        (("presets", "quick", "on_failure"), "record"),
        (("load", "warmup", "max_s"), 40),  # a key of until_steady while the mode stays fixed
        # A preset that sets its own warmup_s (quick: 0) sets every app's: the default's per-app warm-ups
        # are not its own.
        (("load", "app_warmup_s"), {"next": 45, "go": 10}),
    ],
    ids=lambda part: ".".join(part) if isinstance(part, tuple) else None,
)
@pytest.mark.workflow
def test_a_setting_that_changes_no_measurement_reruns_nothing(finished, keys, value):
    change_config(finished, keys, value)
    plan = plan_runs(finished)
    assert plan.returncode == 0, plan.output
    assert plan.nothing_to_do, plan.output


@pytest.mark.workflow
def test_on_failure_given_on_the_command_line_reruns_nothing(finished):
    plan = plan_runs(finished, "on_failure=record")
    assert plan.returncode == 0, plan.output
    assert plan.nothing_to_do, plan.output


@pytest.mark.workflow
def test_editing_the_next_app_reruns_its_images_conditions_and_calibration(finished):
    work = finished / "task-image" / "app-next" / "lib" / "work.js"
    work.write_text(work.read_text() + "\n// edited\n")
    plan = plan_runs(finished)
    assert plan.returncode == 0, plan.output
    assert plan.variants == {"next", "next-sidecar"}, plan.output
    assert plan.conditions == {c for c in MATRIX | CALIBRATION if c.startswith("next_")}, (
        plan.output
    )
    assert plan.jobs["run_condition"] == 2 * REPEATS and plan.jobs["run_calibration"] == 2 * REPEATS


JOB = re.compile(r"^(?:local)?(?:rule|checkpoint) (\w+):$")


def planned_jobs(output: str) -> list[dict]:
    """Each job of a dry run's listing: its rule, wildcards and priority (0 when none is shown)."""
    jobs, job = [], None
    for line in output.splitlines():
        started = JOB.match(line.strip())
        if started:
            job = {"rule": started.group(1), "wildcards": {}, "priority": 0}
            jobs.append(job)
        elif job is not None and ":" in line:
            key, _, value = line.strip().partition(": ")
            if key == "wildcards":
                job["wildcards"] = dict(part.split("=", 1) for part in value.split(", "))
            elif key == "priority":
                job["priority"] = int(value)
    return jobs


def test_image_builds_rank_above_every_run_and_first_repetitions_above_second_ones(quick_plan):
    # A build that waits behind a later repetition would let that repetition overtake a first one waiting for it.
    plan = quick_plan  # snakemake -n --config preset=quick in an unchanged copy
    assert plan.returncode == 0, plan.output
    jobs = planned_jobs(plan.output)
    builds = [job["priority"] for job in jobs if job["rule"] == "build_image"]
    runs = [job for job in jobs if job["rule"] in ("run_condition", "run_calibration")]
    assert (
        len(builds) == plan.jobs["build_image"] > 0
        and len(runs) == (len(MATRIX) + len(CALIBRATION)) * REPEATS
    )
    assert min(builds) > max(job["priority"] for job in runs), plan.output
    by_repeat = {
        n: [job["priority"] for job in runs if job["wildcards"]["repeat"] == str(n)] for n in (1, 2)
    }
    assert min(by_repeat[1]) > max(by_repeat[2]), by_repeat


@pytest.mark.workflow
def test_the_workflow_makes_every_first_repetition_before_any_second_one(finished_once):
    # What the priorities promise, as the default profile's scheduler (greedy) ran the jobs: one at a time
    # (--cores 1), each stub job writing its run file, so the files' times give the order.
    made = {run: (finished_once / run).stat().st_mtime_ns for run in RUNS}
    by_repeat = {
        n: [t for run, t in made.items() if run.endswith(f"rep{n}.parquet")] for n in (1, 2)
    }
    assert len(by_repeat[1]) == len(by_repeat[2]) == len(MATRIX) + len(CALIBRATION)
    assert max(by_repeat[1]) < min(by_repeat[2]), sorted(made, key=made.get)


# The run rules' script directive before they started run_condition.py as a plain process (sidecar_bench.runjob).
SCRIPT_DIRECTIVE = '    script:\n        "../scripts/run_condition.py"\n'
SHELL_BLOCK = re.compile(r"    (?:# .*\n    )?shell:\n(?:        .*\n)+")


@pytest.mark.workflow
def test_runs_measured_when_the_run_rules_were_script_directives_are_not_measured_again(tmp_path):
    project = copy_project(tmp_path / "project")
    for script in ("build_image.py", "run_condition.py"):
        (project / "workflow" / "scripts" / script).write_text(STUB)
    rules = {name: project / "workflow" / "rules" / name for name in ("run.smk", "model.smk")}
    now = {name: path.read_text() for name, path in rules.items()}
    for name, path in rules.items():
        before, count = SHELL_BLOCK.subn(SCRIPT_DIRECTIVE, now[name])
        assert count == 1, name
        path.write_text(before)
    done = snakemake(project, *QUICK, "--", *RUNS)
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    for name, path in rules.items():
        path.write_text(now[name])
    plan = plan_runs(project)
    # The params (the condition, the load) are what they were; the code trigger, which would see a new rule
    # body, is off (profiles/default).
    assert plan.nothing_to_do, plan.output

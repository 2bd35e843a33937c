"""The run job's command line and environment (sidecar_bench.runjob): what the workflow passes is what job.main gets."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sidecar_bench import runjob
from sidecar_bench.experiment import load_experiment

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())
SCRIPT = ROOT / "workflow" / "scripts" / "run_condition.py"
HOSTS = [{"name": "local", "docker_host": ""}]
LOAD = {"concurrency": 50, "duration_s": 10, "warmup_s": 5, "ready_timeout_s": 120}
IMAGE = {"on_missing": "build"}


def settings(**changes):
    values = {
        "hosts": HOSTS,
        "load": LOAD,
        "on_failure": "record",
        "image": IMAGE,
        "task_image_dir": "/project/task-image",
    }
    return {runjob.ENV: runjob.workflow_settings(**(values | changes))}


def shell_argv(condition, *extra):
    """The arguments a shell gives the job when Snakemake formats the rule's command ({params.condition:q})."""
    line = (
        f"--condition {shlex.quote(str(condition))} --repeat 2 --out 'results/q/runs/a b/rep2.parquet'"
        " --log results/q/logs/rep2.log --task-image results/images/go.json"
        " --loadgen-image results/images/loadgen.json" + "".join(f" {arg}" for arg in extra)
    )
    return shlex.split(line)


def test_the_job_gets_its_own_arguments_from_its_command_line_and_the_workflows_from_its_environment():
    condition = {
        "id": "go_cpu0.25_mem2048_sc3_load05",
        "app": "go",
        "vcpu": 0.25,
        "sidecar_count": 3,
    }
    args = runjob.parse(shell_argv(condition, "--open-loadgen-image=", "--capacity="), settings())
    assert args == {
        "condition": condition,
        "load": LOAD,
        "hosts": HOSTS,
        "image_refs": {"task": "results/images/go.json", "loadgen": "results/images/loadgen.json"},
        "out": "results/q/runs/a b/rep2.parquet",
        "image_settings": IMAGE,
        "repeat": 2,
        "on_failure": "record",
        "capacity_file": None,
        "task_image_dir": "/project/task-image",
    }


def test_an_open_run_gets_its_generator_image_and_its_capacity_file():
    condition = {"id": "go_open", "app": "go", "rate_per_s": 412, "rate_share": 0.8}
    args = runjob.parse(
        shell_argv(
            condition,
            "--open-loadgen-image=results/images/loadgen-open.json",
            "--capacity=results/q/capacity/go.json",
        ),
        settings(),
    )
    assert args["image_refs"]["loadgen_open"] == "results/images/loadgen-open.json"
    assert args["capacity_file"] == "results/q/capacity/go.json"
    assert args["condition"] == condition


@pytest.mark.parametrize("preset", sorted(CONFIG["presets"]))
def test_every_presets_conditions_survive_the_shell_and_come_back_equal(preset):
    # str(dict) through shlex.quote and back through ast.literal_eval: ids, floats (0.1 + 0.2), None, nested values.
    experiment = load_experiment(CONFIG | {"preset": preset})
    for condition in experiment.conditions:
        params = condition.as_dict()
        if condition.is_open:
            params = {**params, "rate_per_s": 1234}
        assert runjob.parse(shell_argv(params), settings())["condition"] == params, condition.id


def test_the_log_is_found_before_anything_else_is_parsed():
    assert runjob.log_path(["--condition", "{", "--log", "x.log"]) == "x.log"
    assert runjob.log_path(["--log=y.log"]) == "y.log"
    assert runjob.log_path(["--condition", "{}"]) is None


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--condition", "{'id': 'x'", "--repeat", "1"], "--condition"),
        (["--condition", "['go']"], "is not a condition's dict"),
        (["--condition", "__import__('os')"], "is not a condition's dict"),
        (["--repeat", "0"], "--repeat 0"),
        (["--repeat", "two"], "bad arguments"),
    ],
)
def test_a_bad_argument_is_named(argv, message):
    base = shell_argv({"id": "x"})
    for flag, value in zip(argv[::2], argv[1::2]):
        base[base.index(flag) + 1] = value
    with pytest.raises(runjob.RunJobError, match=re.escape(message)):
        runjob.parse(base, settings())


def test_without_the_workflows_settings_the_job_says_it_is_a_job_of_the_workflow():
    with pytest.raises(runjob.RunJobError, match="SIDECAR_BENCH_RUN_JOB is not set"):
        runjob.parse(shell_argv({"id": "x"}), {})
    with pytest.raises(runjob.RunJobError, match="not the workflow's settings"):
        runjob.parse(shell_argv({"id": "x"}), {runjob.ENV: json.dumps({"hosts": []})})
    incomplete = json.loads(settings()[runjob.ENV])
    del incomplete["on_failure"]
    with pytest.raises(runjob.RunJobError, match="'on_failure'"):
        runjob.parse(shell_argv({"id": "x"}), {runjob.ENV: json.dumps(incomplete)})


def test_the_script_run_by_hand_fails_with_that_message_in_its_log_and_writes_no_run_file(tmp_path):
    log, out = tmp_path / "run.log", tmp_path / "rep1.parquet"
    argv = shell_argv({"id": "x"})
    argv[argv.index("--log") + 1], argv[argv.index("--out") + 1] = str(log), str(out)
    env = {"PYTHONPATH": str(ROOT / "scripts"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *argv], env=env, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert "SIDECAR_BENCH_RUN_JOB is not set" in log.read_text()
    assert not out.exists()


def test_the_command_is_this_interpreter_and_the_script_quoted():
    assert shlex.split(runjob.command("/a b/run_condition.py", python="/venv/bin/python")) == [
        "/venv/bin/python",
        "/a b/run_condition.py",
    ]

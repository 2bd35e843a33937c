# Config validation, the condition matrix, and the small helpers rules use. Every import
# of the workflow and every value computed from the config live here; the other files
# hold their rules (and adaptive.smk the helpers of its checkpoint, beside the state
# they keep).
import json
import re
import os
import sys
from pathlib import Path

# This workflow's own library first, in this process and in every job it starts (PYTHONPATH), whatever the
# environment's install of it points at: a clone run with another checkout's virtual environment would
# otherwise measure and analyse with that checkout's code, and record that checkout's commit.
LIBRARY_DIR = str(Path(workflow.basedir) / "scripts")
sys.path[:] = [LIBRARY_DIR, *(p for p in sys.path if p != LIBRARY_DIR)]

from sidecar_bench.codedeps import library_first_for_jobs

library_first_for_jobs(LIBRARY_DIR)

from sidecar_bench.adaptive import read_decisions
from sidecar_bench.calibration import (
    burn_peers,
    calibration_cells,
    cell_condition,
    memory_of,
    no_limit_vcpu,
    run_path,
)
from sidecar_bench.codedeps import project_code
from sidecar_bench.conditions import ConfigError
from sidecar_bench.experiment import check_config, resolve_experiment
from sidecar_bench.image import inputs_digest
from sidecar_bench.runjob import command as run_job_command
from sidecar_bench.runjob import on_failure_setting, workflow_settings
from snakemake.exceptions import IncompleteCheckpointException
from snakemake.logging import logger

# The library (scripts/sidecar_bench) is this workflow's own (above); the files it
# reads are too, named from here (a copy of the project reads its copy).
PROJECT_DIR = Path(workflow.basedir)
CONFIG_SCHEMA = PROJECT_DIR / "workflow" / "schemas" / "config.schema.yaml"
TASK_IMAGE_DIR = PROJECT_DIR / "task-image"

try:
    # The config's one validation against the schema: names the key and the value of
    # the first problem, before any job starts; fills in the schema's defaults and
    # turns numbers given as text into numbers. Then what the schema cannot say (a
    # preset that exists, a set listed twice, host names and TLS files, ...).
    config.update(check_config(config, CONFIG_SCHEMA))
    EXPERIMENT = resolve_experiment(config)
except ConfigError as err:
    raise WorkflowError(str(err)) from None

PRESET = EXPERIMENT.preset
CONDITIONS = {condition.id: condition for condition in EXPERIMENT.conditions}
REPEATS = EXPERIMENT.repeats
RUNS_DIR = f"results/{PRESET}/runs"


def run_file(preset, condition_id, repeat):
    """results/<preset>/runs/<condition id>/rep<N>.parquet: one repetition of one condition."""
    return f"results/{preset}/runs/{condition_id}/rep{repeat}.parquet"


RUN_FILES = [
    run_file(PRESET, cid, repeat)
    for repeat in range(1, REPEATS + 1)
    for cid in sorted(CONDITIONS)
]

# Lets each run print how far the matrix has come and the time left. An
# environment variable, not a param: params are rerun triggers, and adding a
# condition must not rerun the others.
os.environ.update(
    SIDECAR_BENCH_PROGRESS=json.dumps(
        {
            "total": len(RUN_FILES),
            "run_files": RUN_FILES,
        }
    )
)

# What every run job of this workflow is given beside its own arguments (its engines, the
# load settings, on_failure, the image settings): an environment variable too, for the same
# reason. The run rules start their script as a plain Python process with RUN_JOB
# (scripts/sidecar_bench/runjob.py: Snakemake's script directive imports Snakemake in each job).
os.environ.update(
    SIDECAR_BENCH_RUN_JOB=workflow_settings(
        config["hosts"],
        EXPERIMENT.load.as_dict(),
        on_failure_setting(config),
        config["image"],
        TASK_IMAGE_DIR,
    )
)
RUN_JOB = run_job_command(PROJECT_DIR / "workflow" / "scripts" / "run_condition.py")

# The CPU-budget model's calibration (model.smk): each app of the preset with no sidecar
# at each of its vCPU levels and with no CPU limit (scripts/sidecar_bench/calibration.py).
# Cells the matrix already has are read from its run files; the others are measured into
# results/<preset>/calibration/runs/.
CALIBRATION_NO_LIMIT_VCPU = no_limit_vcpu(config.get("calibration"))
CALIBRATION_CELLS = calibration_cells(EXPERIMENT.conditions, CALIBRATION_NO_LIMIT_VCPU)
CALIBRATION_RUN_FILES = [
    run_path(PRESET, cell, repeat)
    for repeat in range(1, REPEATS + 1)
    for cell in CALIBRATION_CELLS
]

# Sidecars that burn what they claim (model.smk, burn_comparison): where another preset
# whose sidecars burn the other way (load.sidecar_burn wall / cpu) has been measured, the
# same conditions side by side. Its summary is read as it is; this workflow never measures it.
BURN_PEERS = burn_peers(config, PRESET)
BURN_OUTPUTS = [f"results/{PRESET}/model/burn"] if BURN_PEERS else []

# A real proxy in the request path (proxy.smk): its report for a preset that has one.
HAS_REAL_PROXY = any(condition.real_proxy for condition in EXPERIMENT.conditions)
PROXY_OUTPUTS = [f"results/{PRESET}/proxy"] if HAS_REAL_PROXY else []

# Adaptive repetitions (adaptive.smk): off unless adaptive.max_repeats is set.
ADAPTIVE = EXPERIMENT.adaptive
ADAPTIVE_ON = ADAPTIVE.enabled(REPEATS)


# The engines' leases, taken once for every job when the jobs run on this machine
# (scripts/sidecar_bench/engine_hold.py): a run then spends no time on a lease of its own; and the job server
# (start_job_server below). The hooks run in Snakemake's own process, never in a dry run or a cluster job;
# --touch measures nothing.
def hold_engines():
    from sidecar_bench import engine_hold, jobserver

    pending = list(workflow.dag.needrun_jobs())
    if workflow.touch or not workflow.local_exec:
        jobserver.forget_inherited()
        return
    rules = [job.rule.name for job in pending]
    engine = engine_hold.needs_engine(rules, any(job.is_checkpoint for job in pending))
    if engine:
        what = f"workflow {PRESET} pid {os.getpid()}"
        for line in engine_hold.hold(config["hosts"], what):
            logger.info(f"sidecar-bench: {line}")
    if jobserver.worth_starting(rules, engine):
        start_job_server(wait=engine)
    else:
        jobserver.forget_inherited()


# The run and analysis jobs' processes forked from one that has the library imported
# (scripts/sidecar_bench/jobserver.py), started with the engines' hold or for two analysis jobs or more:
# a job then spends no time on its imports. Runs wait for it (nothing may run beside a measurement); analysis
# jobs do not (the first may run in its own process while the server imports).
def start_job_server(wait):
    from sidecar_bench import jobserver

    try:
        if jobserver.start(LIBRARY_DIR, wait=wait):
            logger.info(
                "sidecar-bench: run and analysis jobs start from the job server (library imported once)"
                if wait
                else "sidecar-bench: analysis jobs start from the job server once it has imported the library"
            )
    except jobserver.JobServerError as err:
        logger.warning(f"sidecar-bench: {err}; each job imports the library itself")


def release_engines():
    from sidecar_bench import engine_hold, jobserver

    said = jobserver.stop()
    if said:
        logger.warning(
            f"sidecar-bench: the job server ended early ({said}); the jobs after that imported the "
            "library themselves"
        )
    engine_hold.release()


onstart:
    hold_engines()


onsuccess:
    release_engines()


onerror:
    release_engines()


wildcard_constraints:
    preset=re.escape(PRESET),
    # Optional parts after the load name the real proxy, the knobs, the topology and the open loop (e.g.
    # _px-haproxy, _period5ms, _task, _open50, _open50c).
    condition="(go|next)_cpu[0-9.]+_mem[0-9]+_sc[0-3]_load[0-9.]+(_[a-z]+[0-9a-z.-]*)*",
    # A setup is a closed condition (its capacity's): the same parts, without an open-loop suffix.
    setup="(go|next)_cpu[0-9.]+_mem[0-9]+_sc[0-3]_load[0-9.]+(_(?!open[0-9])[a-z]+[0-9a-z.-]*)*",
    variant="go|go-sidecar|go-proxy|next|next-sidecar|next-proxy|loadgen|loadgen-open",
    repeat="[1-9][0-9]*",


def get_condition(wildcards):
    if wildcards.condition not in CONDITIONS:
        raise WorkflowError(
            f"condition {wildcards.condition!r} is not in preset {PRESET!r}; "
            f"`snakemake -n` lists the matrix"
        )
    condition = CONDITIONS[wildcards.condition]
    if condition.is_open:
        return get_open_condition(condition)
    return condition.as_dict()


def get_task_image_ref(wildcards):
    condition = CONDITIONS[wildcards.condition]
    return f"results/images/{condition.variant}.json"


def get_calibration_condition(wildcards):
    """A calibration run's condition (its app alone: no sidecar)."""
    return cell_condition(CALIBRATION_CELLS, wildcards.condition).as_dict()


def get_load(wildcards):
    """A run's load settings: the experiment's, with its app's own warm-up (load.app_warmup_s)."""
    return EXPERIMENT.load.for_app(get_condition(wildcards)["app"]).measured()


def get_calibration_load(wildcards):
    """A calibration run's load settings, as get_load."""
    return EXPERIMENT.load.for_app(
        get_calibration_condition(wildcards)["app"]
    ).measured()


def get_calibration_image_ref(wildcards):
    """A calibration run's image: its app-only variant, which a changed sidecar leaves as it is."""
    condition = cell_condition(CALIBRATION_CELLS, wildcards.condition)
    return f"results/images/{condition.variant}.json"


def get_image_digest(wildcards):
    """Content digest of exactly what the variant's image holds: its only rerun trigger."""
    return inputs_digest(wildcards.variant, EXPERIMENT.image["base"], TASK_IMAGE_DIR)


def get_run_files(wildcards):
    """Repetitions 1..repeats of every condition: extra files of a lowered repeats stay on disk, unread.
    With adaptive repetitions on, also those the decisions add (workflow/rules/adaptive.smk).
    """
    if ADAPTIVE_ON:
        return adaptive_run_files(wildcards.preset)
    return RUN_FILES


# The most repetitions a condition can get: repeats, or adaptive.max_repeats when that is on.
MAX_REPEATS = EXPERIMENT.adaptive.cap(REPEATS)
# Above every repetition's priority (0 .. MAX_REPEATS - 1).
BUILD_PRIORITY = MAX_REPEATS


def get_repeat_priority(wildcards):
    """Every condition's first repetition before any second one: slow drift of the host then
    spreads over all conditions instead of posing as a difference between them. Adaptive
    repetitions (beyond repeats) rank below every planned one."""
    return max(MAX_REPEATS - int(wildcards.repeat), 0)


def get_analysis_code(script):
    """The analysis script workflow/scripts/<script>.py and every library module it imports: inputs of its
    rule, so that an edit of either remakes the rule's outputs. Run rules never list them (see profiles/default).
    """
    return [
        os.path.relpath(path)
        for path in project_code(
            PROJECT_DIR / "workflow" / "scripts" / f"{script}.py",
            PROJECT_DIR / "scripts",
        )
    ]


def get_final_outputs():
    """The analysis outputs, and every run file they read as a target of its own: Snakemake remakes a missing
    input only of a job that has to run anyway, so a deleted run file of an up-to-date summary would stay
    missing unless a target names it."""
    outputs = [
        f"results/{PRESET}/summary.parquet",
        f"results/{PRESET}/tables",
        f"results/{PRESET}/charts",
        f"results/{PRESET}/calibration/calibration.csv",
        f"results/{PRESET}/model/tables",
        f"results/{PRESET}/model/charts",
    ] + sorted(set(RUN_FILES) | set(CALIBRATION_RUN_FILES))
    if has_open_conditions():
        outputs.append(f"results/{PRESET}/openloop")
    return outputs


# --- load model (open loop: docs/open-loop.md) ---------------------------------------------
# An open condition's rate is a share of its setup's capacity, read from the capacity file
# of a checkpoint (rule compute_capacity). The rate is in the run's params, so only a
# changed rate reruns an open run; the capacity file is an ancient() input: rewritten when
# a closed run is added, it reruns nothing by its time alone.


def capacity_file(preset, setup):
    """results/<preset>/capacity/<capacity condition id>.json: that closed-loop condition's mean RPS."""
    return f"results/{preset}/capacity/{setup}.json"


def get_capacity_runs(wildcards):
    """Every repetition of the capacity condition (the setup with idle sidecars)."""
    return [
        run_file(PRESET, wildcards.setup, repeat) for repeat in range(1, REPEATS + 1)
    ]


def _capacity_output(condition):
    setup = condition.capacity_condition.id
    return checkpoints.compute_capacity.get(preset=PRESET, setup=setup).output.capacity


def get_capacity_input(wildcards):
    """An open run's capacity file (ancient: its time is no rerun trigger); nothing for a closed run."""
    condition = CONDITIONS[wildcards.condition]
    if not condition.is_open:
        return []
    return ancient(_capacity_output(condition))


def get_open_condition(condition):
    """An open condition's params: its dict and its rate (round(rate_share x capacity) requests/s)."""
    from sidecar_bench import capacity

    record = capacity.read(_capacity_output(condition))
    rate = capacity.rate_per_s(condition.rate_share, record["rps_mean"])
    return {**condition.as_dict(), "rate_per_s": rate}


def get_open_loadgen_image(wildcards):
    """The open-loop generator's image for an open run; nothing for a closed run (its inputs stay as they were)."""
    if CONDITIONS[wildcards.condition].is_open:
        return "results/images/loadgen-open.json"
    return []


def has_open_conditions():
    return any(condition.is_open for condition in CONDITIONS.values())

# --- end load model -------------------------------------------------------------------------

# Config validation, the condition matrix, and the small helpers rules use.
import json
import re
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))

from sidecar_bench.codedeps import project_code
from sidecar_bench.conditions import ConfigError
from sidecar_bench.experiment import check_config, load_experiment
from sidecar_bench.image import inputs_digest
from snakemake.utils import validate

try:
    # Names the key and the value of the first problem, before any job starts;
    # fills in the schema's defaults and turns numbers given as text into numbers.
    config.update(check_config(config))
    EXPERIMENT = load_experiment(config)
except ConfigError as err:
    raise WorkflowError(str(err)) from None
validate(config, schema="../schemas/config.schema.yaml")

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


wildcard_constraints:
    preset=re.escape(PRESET),
    condition="(go|next)_cpu[0-9.]+_mem[0-9]+_sc[0-3]_load[0-9.]+(_px-[a-z-]+)?",
    variant="go|go-sidecar|go-proxy|next|next-sidecar|next-proxy|loadgen",
    repeat="[1-9][0-9]*",


def get_condition(wildcards):
    if wildcards.condition not in CONDITIONS:
        raise WorkflowError(
            f"condition {wildcards.condition!r} is not in preset {PRESET!r}; "
            f"`snakemake -n` lists the matrix"
        )
    return CONDITIONS[wildcards.condition].as_dict()


def get_task_image_ref(wildcards):
    condition = CONDITIONS[wildcards.condition]
    return f"results/images/{condition.variant}.json"


def get_image_digest(wildcards):
    """Content digest of exactly what the variant's image holds: its only rerun trigger."""
    return inputs_digest(wildcards.variant, EXPERIMENT.image["base"])


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
    """The analysis script scripts/<script>.py and every project module it imports: inputs of its rule, so that
    an edit of either remakes the rule's outputs. Run rules never list them (see profiles/default).
    """
    scripts = Path(workflow.basedir) / "scripts"
    return [
        os.path.relpath(path)
        for path in project_code(scripts / f"{script}.py", scripts)
    ]


def get_final_outputs():
    """The analysis outputs, and every run file they read as a target of its own: Snakemake remakes a missing
    input only of a job that has to run anyway, so a deleted run file of an up-to-date summary would stay
    missing unless a target names it."""
    return [
        f"results/{PRESET}/summary.parquet",
        f"results/{PRESET}/tables",
        f"results/{PRESET}/charts",
        f"results/{PRESET}/calibration/calibration.csv",
        f"results/{PRESET}/model/tables",
        f"results/{PRESET}/model/charts",
    ] + sorted(set(RUN_FILES) | set(CALIBRATION_RUN_FILES))

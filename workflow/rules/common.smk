# Config validation, the condition matrix, and the small helpers rules use.
import json
import re
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(workflow.basedir) / "scripts"))

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
    condition="(go|next)_cpu[0-9.]+_mem[0-9]+_sc[0-3]_load[0-9.]+(_[a-z]+[0-9a-z.]*)*",
    variant="go|go-sidecar|next|next-sidecar|loadgen",
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
    """Repetitions 1..repeats of every condition: extra files of a lowered repeats stay on disk, unread."""
    return RUN_FILES


# Above every repetition's priority (0 .. REPEATS - 1).
BUILD_PRIORITY = REPEATS


def get_repeat_priority(wildcards):
    """Every condition's first repetition before any second one: slow drift of the host then
    spreads over all conditions instead of posing as a difference between them."""
    return max(REPEATS - int(wildcards.repeat), 0)


def get_final_outputs():
    return [
        f"results/{PRESET}/summary.parquet",
        f"results/{PRESET}/tables",
        f"results/{PRESET}/charts",
        f"results/{PRESET}/calibration/calibration.csv",
        f"results/{PRESET}/model/tables",
        f"results/{PRESET}/model/charts",
    ]

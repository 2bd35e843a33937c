"""Snakemake script of rule run_condition: measure one condition, write its run file."""

import json
import os
import sys
from pathlib import Path

# Before the library's imports, so that an import error lands in the job's log too.
sys.stderr = open(snakemake.log[0], "w")

from sidecar_bench.transports import skip_ssh_transport

# Engines all reached without SSH: the Docker SDK's SSH transport is not imported (0.14 s of each run's start).
skip_ssh_transport(snakemake.config["hosts"])

from sidecar_bench.experiment import resolve_experiment
from sidecar_bench.hosts import lock_dir
from sidecar_bench.job import leave_quickly, main, on_failure_setting

main(
    condition=snakemake.params.condition,
    # The measured settings are params (rerun triggers); the readiness timeout is not. The config is the
    # workflow's, validated once when the workflow loaded it (common.smk).
    load=resolve_experiment(snakemake.config).load.as_dict(),
    # Hosts come from the config, not params: adding a host must not rerun every condition.
    hosts=snakemake.config["hosts"],
    image_refs={
        "task": snakemake.input.task_image,
        "loadgen": snakemake.input.loadgen_image,
        # Open loop: the open-loop generator's image (empty for a closed run).
        **(
            {"loadgen_open": str(snakemake.input.open_loadgen_image)}
            if getattr(snakemake.input, "open_loadgen_image", None)
            else {}
        ),
    },
    out=snakemake.output.run,
    lock_dir=lock_dir(),
    # {"total", "run_files"} from the workflow's environment: as a param it would rerun every run when the
    # matrix grows.
    progress=json.loads(os.environ.get("SIDECAR_BENCH_PROGRESS", "null")),
    image_settings=snakemake.config["image"],
    # results/{preset}/runs/{condition}/rep{repeat}.parquet: the wildcard is the digits.
    repeat=int(snakemake.wildcards.repeat),
    # Not a param: switching between stop and record must not rerun measured conditions.
    on_failure=on_failure_setting(snakemake.config),
    # Open loop: the capacity file the rate came from, recorded in the run file (None for a closed run).
    capacity_file=str(snakemake.input.capacity)
    if getattr(snakemake.input, "capacity", None)
    else None,
    # A host that lacks an image builds it from this workflow's task-image folder.
    task_image_dir=str(Path(snakemake.scriptdir).resolve().parents[1] / "task-image"),
)
leave_quickly()

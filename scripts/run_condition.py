"""Snakemake script of rule run_condition: measure one condition, write its run file."""

import json
import os
import sys
from pathlib import Path

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821 (snakemake is injected)

from sidecar_bench.experiment import load_experiment  # noqa: E402
from sidecar_bench.hosts import lock_dir  # noqa: E402
from sidecar_bench.job import main, on_failure_setting  # noqa: E402

main(
    condition=snakemake.params.condition,  # noqa: F821
    # The measured settings are params (rerun triggers); the readiness timeout is not.
    load=load_experiment(snakemake.config).load.as_dict(),  # noqa: F821
    # Hosts come from the config, not params: adding a host must not rerun every condition.
    hosts=snakemake.config["hosts"],  # noqa: F821
    image_refs={"task": snakemake.input.task_image, "loadgen": snakemake.input.loadgen_image,  # noqa: F821
                # Open loop: the open-loop generator's image (empty for a closed run).
                **({"loadgen_open": str(snakemake.input.open_loadgen_image)}  # noqa: F821
                   if getattr(snakemake.input, "open_loadgen_image", None) else {})},  # noqa: F821
    out=snakemake.output.run,  # noqa: F821
    lock_dir=lock_dir(),
    # {"total", "run_files"} from the workflow's environment: as a param it would rerun every run when the
    # matrix grows.
    progress=json.loads(os.environ.get("SIDECAR_BENCH_PROGRESS", "null")),
    image_settings=snakemake.config["image"],  # noqa: F821
    # results/{preset}/runs/{condition}/rep{repeat}.parquet: the wildcard is the digits.
    repeat=int(snakemake.wildcards.repeat),  # noqa: F821
    # Not a param: switching between stop and record must not rerun measured conditions.
    on_failure=on_failure_setting(snakemake.config),  # noqa: F821
    # Open loop: the capacity file the rate came from, recorded in the run file (None for a closed run).
    capacity_file=str(snakemake.input.capacity) if getattr(snakemake.input, "capacity", None) else None,  # noqa: F821
    # A host that lacks an image builds it from this workflow's task-image folder.
    task_image_dir=str(Path(snakemake.scriptdir).parent / "task-image"),  # noqa: F821
)

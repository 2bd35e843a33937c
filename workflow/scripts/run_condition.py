"""Run job of rules run_condition and run_calibration: measure one condition, write its run file.

A plain script the rules start with a shell command (sidecar_bench.runjob says why and what it is given):
    run_condition.py --condition DICT --repeat N --out RUN_FILE --log LOG --task-image JSON --loadgen-image JSON
                     [--open-loadgen-image JSON] [--capacity FILE]
with the workflow's settings in SIDECAR_BENCH_RUN_JOB. Run in a process forked from the workflow's job server
when there is one (SIDECAR_BENCH_JOB_SERVER), else in this one.
"""

import json
import os
import sys

from sidecar_bench.jobserver import delegate

# The workflow's job server, if it runs, forks a process that has the library imported and runs this script
# in it, with this process's arguments, environment and standard streams (sidecar_bench.jobserver).
STATUS = delegate(__file__, sys.argv[1:])
if STATUS is not None:
    sys.exit(STATUS)

from sidecar_bench.runjob import RunJobError, log_path, parse

# Before the library's other imports, so that an import error lands in the job's log too.
LOG = log_path(sys.argv[1:])
if LOG:
    sys.stderr = open(LOG, "w")
try:
    ARGS = parse(sys.argv[1:])
except RunJobError as err:
    sys.exit(str(err))

from sidecar_bench.transports import skip_ssh_transport

# Engines all reached without SSH: the Docker SDK's SSH transport is not imported (0.14 s of each run's start).
skip_ssh_transport(ARGS["hosts"])

from sidecar_bench.hosts import lock_dir
from sidecar_bench.job import leave_quickly, main

main(
    **ARGS,
    lock_dir=lock_dir(),
    # {"total", "run_files"} from the workflow's environment: as a param it would rerun every run when the
    # matrix grows.
    progress=json.loads(os.environ.get("SIDECAR_BENCH_PROGRESS", "null")),
)
leave_quickly()

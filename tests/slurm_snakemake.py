"""snakemake, with the SLURM executor checking its jobs' states at a fixed interval.

The executor plugin (snakemake-executor-plugin-slurm 2.x) waits 10 s longer after every check that
finds no job ended, up to 3 minutes, with no setting to turn that off. A measurement job here lasts
about 10-20 s, so most of a test's wall time went to that back-off: a job that ended was seen up to
20 s later. This keeps the interval at --slurm-init-seconds-before-status-checks (the tests give 2 s)
and changes nothing else: the same command line, the same profile, the same executor.

    python tests/slurm_snakemake.py --workflow-profile slurm ...
"""

import sys

import snakemake_executor_plugin_slurm as slurm
from snakemake.cli import main


def _interval(executor) -> float:
    return executor.workflow.executor_settings.init_seconds_before_status_checks


# Read by the executor's sleep between checks; what the plugin writes (its back-off) is ignored.
slurm.Executor.next_seconds_between_status_checks = property(
    _interval, lambda executor, value: None
)

if __name__ == "__main__":
    sys.exit(main())

"""Snakemake script: a closed-loop condition's run files -> its capacity file (sidecar_bench.capacity)."""

# Where the workflow's job server runs, its forked process (the library imported) runs this job instead.
from sidecar_bench.jobserver import delegate_script, open_job_log

delegate_script(globals())

import sys

from sidecar_bench import capacity


def main(condition_id, runs, out):
    record = capacity.measure(condition_id, runs)
    capacity.write(out, record)
    print(
        f"compute_capacity: {condition_id}: {record['rps_mean']:.1f} RPS over {record['repeats']} runs -> {out}",
        file=sys.stderr,
    )
    return record


if __name__ == "__main__" and "snakemake" in globals():
    sys.stderr = open_job_log(snakemake.log[0])
    main(snakemake.wildcards.setup, list(snakemake.input.runs), snakemake.output.capacity)

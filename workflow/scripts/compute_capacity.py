"""Snakemake script: a closed-loop condition's run files -> its capacity file (sidecar_bench.capacity)."""

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
    sys.stderr = open(snakemake.log[0], "w")
    main(snakemake.wildcards.setup, list(snakemake.input.runs), snakemake.output.capacity)

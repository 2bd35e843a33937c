"""Snakemake script of checkpoint decide_repeat: which conditions get one more repetition?"""

import sys

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821 (snakemake is injected)

from sidecar_bench.adaptive import AdaptiveSettings, decide_files  # noqa: E402

decisions = decide_files(snakemake.input.runs, AdaptiveSettings(**snakemake.params.adaptive),  # noqa: F821
                         snakemake.params.planned, snakemake.output.decision)  # noqa: F821
for decision in decisions:
    print(decision["reason"], file=sys.stderr)
    print(f"sidecar-bench: adaptive: {decision['reason']}", file=sys.__stderr__, flush=True)

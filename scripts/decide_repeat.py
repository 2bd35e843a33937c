"""Snakemake script of checkpoint decide_repeat: does a condition get one more repetition?"""

import sys

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821 (snakemake is injected)

from sidecar_bench.adaptive import AdaptiveSettings, decide_files  # noqa: E402

decision = decide_files(snakemake.wildcards.condition, snakemake.input.runs,  # noqa: F821
                        AdaptiveSettings(**snakemake.params.adaptive), snakemake.params.planned,  # noqa: F821
                        snakemake.output.decision)  # noqa: F821
print(decision["reason"], file=sys.stderr)
print(f"sidecar-bench: adaptive: {decision['reason']}", file=sys.__stderr__, flush=True)

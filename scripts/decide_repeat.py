"""Snakemake script of checkpoint decide_repeat: does a condition get one more repetition?"""

import sys

sys.stderr = open(snakemake.log[0], "w")  # noqa: F821 (snakemake is injected)

from sidecar_bench.adaptive import AdaptiveSettings, decide, write_decision  # noqa: E402
from sidecar_bench.stats import summarise_run  # noqa: E402

rows = [summarise_run(path) for path in snakemake.input.runs]  # noqa: F821
decision = decide(snakemake.wildcards.condition, rows, AdaptiveSettings(**snakemake.params.adaptive),  # noqa: F821
                  snakemake.params.planned)  # noqa: F821
write_decision(snakemake.output.decision, decision)  # noqa: F821
print(decision["reason"], file=sys.stderr)
print(f"sidecar-bench: adaptive: {decision['reason']}", file=sys.__stderr__, flush=True)

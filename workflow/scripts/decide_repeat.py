"""Snakemake script of checkpoint decide_repeat: which conditions get one more repetition?"""

# Where the workflow's job server runs, its forked process (the library imported) runs this job instead.
from sidecar_bench.jobserver import delegate_script, open_job_log

delegate_script(globals())

import sys

# Before the library's other imports, so that an import error lands in the job's log too.
sys.stderr = open_job_log(snakemake.log[0])

from sidecar_bench.adaptive import AdaptiveSettings, decide_files

decisions = decide_files(
    snakemake.input.runs,
    AdaptiveSettings(**snakemake.params.adaptive),
    snakemake.params.planned,
    snakemake.output.decision,
)
for decision in decisions:
    print(decision["reason"], file=sys.stderr)
    print(f"sidecar-bench: adaptive: {decision['reason']}", file=sys.__stderr__, flush=True)

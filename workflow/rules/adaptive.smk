# Adaptive repetitions (config.yaml adaptive, off by default; scripts/sidecar_bench/adaptive.py).
# After a condition's planned repetitions, checkpoint decide_repeat judges its runs'
# intervals against the targets and writes results/<preset>/adaptive/<id>/after<N>.json;
# the aggregates' input function reads it and asks for repetition N + 1 only if it says
# so, then for the decision after N + 1, up to adaptive.max_repeats. A decision measures
# nothing: changing a target or the cap re-decides, and a run file, once written, is never
# measured again (its rule and rerun triggers are run_condition's). Every decision read is
# logged with its reason, so `snakemake -n` and the run's log say why a repetition was added.
from snakemake.exceptions import IncompleteCheckpointException
from snakemake.logging import logger
from sidecar_bench.adaptive import read_decision

ADAPTIVE = EXPERIMENT.adaptive
ADAPTIVE_ON = ADAPTIVE.enabled(REPEATS)
# Reasons already logged: the input function runs again after every decision.
ADAPTIVE_SAID = set()


checkpoint decide_repeat:
    input:
        runs=lambda wc: [
            run_file(wc.preset, wc.condition, repeat)
            for repeat in range(1, int(wc.repeat) + 1)
        ],
    output:
        decision="results/{preset}/adaptive/{condition}/after{repeat}.json",
    log:
        "results/{preset}/logs/decide_repeat/{condition}/after{repeat}.log",
    priority: BUILD_PRIORITY
    params:
        planned=REPEATS,
        adaptive=ADAPTIVE.as_dict(),
    script:
        "../../scripts/decide_repeat.py"


localrules:
    decide_repeat,


def adaptive_run_files(preset):
    """Every condition's planned run files, then one more per decision that adds one; a decision
    not made yet stands in as a checkpoint target, so that all conditions are decided at once.
    """
    files = []
    for cid in sorted(CONDITIONS):
        files += [run_file(preset, cid, repeat) for repeat in range(1, REPEATS + 1)]
        repeat = REPEATS
        while True:
            try:
                decided = checkpoints.decide_repeat.get(
                    preset=preset, condition=cid, repeat=str(repeat)
                )
            except IncompleteCheckpointException as pending:
                files.append(pending.targetfile)
                break
            decision = read_decision(decided.output.decision)
            if decision["reason"] not in ADAPTIVE_SAID:
                ADAPTIVE_SAID.add(decision["reason"])
                logger.info(f"adaptive repetitions: {decision['reason']}")
            if not decision["add"]:
                break
            repeat += 1
            files.append(run_file(preset, cid, repeat))
    return files

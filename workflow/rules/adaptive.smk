# Adaptive repetitions (config.yaml adaptive, off by default; scripts/sidecar_bench/adaptive.py).
# After round N of repetitions (N = repeats first), checkpoint decide_repeat judges the runs
# 1..N of every condition still in play against the targets and writes
# results/<preset>/adaptive/after<N>.json (one decision per condition); the aggregates' input
# function reads it and asks for repetition N + 1 of the conditions it adds, then for the
# decision after round N + 1, up to adaptive.max_repeats. One decision job per round, not per
# condition: each is a job start. A decision measures nothing: changing a target or the cap
# re-decides, and a run file, once written, is never measured again (its rule and rerun
# triggers are run_condition's). Every decision read is logged with its reason, so
# `snakemake -n` and the run's log say why a repetition was added.
# The helpers stay here, beside the reasons they have logged; ADAPTIVE and ADAPTIVE_ON are
# computed in common.smk.

# Reasons already logged: the input function runs again after every decision.
ADAPTIVE_SAID = set()


def adaptive_in_play(preset, repeat):
    """The conditions that have repetition `repeat`: all at the planned round, then those the
    decision after the round before added (raises IncompleteCheckpointException until it is made).
    """
    if repeat <= REPEATS:
        return sorted(CONDITIONS)
    decided = checkpoints.decide_repeat.get(preset=preset, repeat=str(repeat - 1))
    decisions = read_decisions(decided.output.decision)
    for decision in decisions:
        if decision["reason"] not in ADAPTIVE_SAID:
            ADAPTIVE_SAID.add(decision["reason"])
            logger.info(f"adaptive repetitions: {decision['reason']}")
    return [
        d["condition"] for d in decisions if d["add"] and d["condition"] in CONDITIONS
    ]


def get_decision_runs(wildcards):
    """The runs the decision after round N judges: 1..N of every condition still in play."""
    rounds = int(wildcards.repeat)
    return [
        run_file(wildcards.preset, cid, repeat)
        for cid in adaptive_in_play(wildcards.preset, rounds)
        for repeat in range(1, rounds + 1)
    ]


checkpoint decide_repeat:
    input:
        runs=get_decision_runs,
    output:
        decision="results/{preset}/adaptive/after{repeat}.json",
    log:
        "results/{preset}/logs/decide_repeat/after{repeat}.log",
    priority: BUILD_PRIORITY
    params:
        planned=REPEATS,
        adaptive=ADAPTIVE.as_dict(),
    script:
        "../scripts/decide_repeat.py"


localrules:
    decide_repeat,


def adaptive_run_files(preset):
    """The planned run files, then each round's added ones; a decision not made yet stands in
    as a checkpoint target."""
    files = list(RUN_FILES)
    repeat = REPEATS + 1
    while True:
        try:
            added = adaptive_in_play(preset, repeat)
        except IncompleteCheckpointException as pending:
            files.append(pending.targetfile)
            break
        if not added:
            break
        files += [run_file(preset, cid, repeat) for cid in added]
        repeat += 1
    return files

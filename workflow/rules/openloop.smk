# Open-loop load (docs/open-loop.md): each setup's capacity, measured by its own closed-loop
# runs with idle sidecars, is the base of its open-loop rates; the open-loop cells are set
# beside the closed-loop ones.


checkpoint compute_capacity:
    input:
        runs=get_capacity_runs,
        # An edit of the capacity's code remakes the file; open runs rerun only if their rate moves.
        code=get_analysis_code("compute_capacity"),
    output:
        capacity="results/{preset}/capacity/{setup}.json",
    log:
        "results/{preset}/logs/compute_capacity/{setup}.log",
    script:
        "../scripts/compute_capacity.py"


rule compare_open_closed:
    input:
        summary=rules.aggregate_runs.output.parquet,
        code=get_analysis_code("compare_open_closed"),
    output:
        tables=report(
            directory("results/{preset}/openloop"),
            patterns=["{name}.csv"],
            caption="../report/openloop.rst",
            category="Open loop",
        ),
    log:
        "results/{preset}/logs/compare_open_closed.log",
    script:
        "../scripts/compare_open_closed.py"


localrules:
    compute_capacity,
    compare_open_closed,

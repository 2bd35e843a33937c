# From raw runs to the article's tables and charts, with its numbers beside ours.


rule aggregate_runs:
    input:
        runs=get_run_files,
        code=get_analysis_code("aggregate_runs"),
    output:
        parquet="results/{preset}/summary.parquet",
        csv=report(
            "results/{preset}/summary.csv",
            caption="../report/summary.rst",
            category="Summary",
        ),
        runs_parquet="results/{preset}/runs_summary.parquet",
        runs_csv=report(
            "results/{preset}/runs_summary.csv",
            caption="../report/runs_summary.rst",
            category="Summary",
        ),
    log:
        "results/{preset}/logs/aggregate_runs.log",
    script:
        "../scripts/aggregate_runs.py"


rule make_tables:
    input:
        summary=rules.aggregate_runs.output.parquet,
        reference="workflow/reference/article-results.csv",
        code=get_analysis_code("make_tables"),
    output:
        tables=report(
            directory("results/{preset}/tables"),
            patterns=["{name}.csv"],
            caption="../report/tables.rst",
            category="Tables",
        ),
    log:
        "results/{preset}/logs/make_tables.log",
    script:
        "../scripts/make_tables.py"


rule plot_charts:
    input:
        summary=rules.aggregate_runs.output.parquet,
        reference="workflow/reference/article-results.csv",
        runs=get_run_files,
        code=get_analysis_code("plot_charts"),
    output:
        charts=report(
            directory("results/{preset}/charts"),
            patterns=["{name}.png"],
            caption="../report/charts.rst",
            category="Charts",
        ),
    log:
        "results/{preset}/logs/plot_charts.log",
    script:
        "../scripts/plot_charts.py"


# With a cluster executor these run where snakemake runs: they measure nothing.
localrules:
    aggregate_runs,
    make_tables,
    plot_charts,

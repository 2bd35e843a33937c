"""Snakemake script of rule proxy_report: a real proxy against the busy-loop stand-in (docs/proxy.md).

results/<preset>/proxy/proxy_cost.{csv,md}: the proxy's CPU per request per condition, with its t interval;
results/<preset>/proxy/comparison.{csv,md}: alone / behind the real proxy / behind the busy-loop stand-in;
results/<preset>/proxy/standin_gap.{csv,md}: the stand-in against the real proxy, as ratios with intervals;
results/<preset>/proxy/budget.{csv,md}: RPS against quota / (app cost + proxy cost);
results/<preset>/proxy/standin.yaml: step two's config, the stand-ins at the real proxy's measured share.
"""

# Where the workflow's job server runs, its forked process (the library imported) runs this job instead.
from sidecar_bench.jobserver import delegate_script, open_job_log

delegate_script(globals())

import sys
from pathlib import Path

import pandas as pd
import yaml

from sidecar_bench import proxy_tables as pt


def main(runs_summary, out_dir, preset, preset_sets, memory_mb, no_limit_vcpu=None):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = pt.with_setups(pd.read_parquet(runs_summary))
    cost, comparison, budget = pt.proxy_cost(runs), pt.comparison(runs), pt.budget(runs)
    means = [pt.INTERVAL_NOTE]
    for name, table, title, columns, notes in (
        (
            "proxy_cost",
            cost,
            "The proxy's CPU per request",
            pt.COST_COLUMNS,
            means + ["CPU per request = the process's CPU share over the window / RPS."],
        ),
        (
            "comparison",
            comparison,
            "The app alone, behind a real proxy, and behind a busy-loop stand-in",
            pt.COMPARISON_COLUMNS,
            means
            + [
                "The stand-in is a busy-loop proxy (one sidecar) at the real proxy's measured "
                "CPU share (standin.yaml, step two of docs/proxy.md)."
            ],
        ),
        (
            "standin_gap",
            pt.standin_gap(runs),
            "The busy-loop stand-in against the real proxy at the same CPU",
            pt.GAP_COLUMNS,
            [
                "Ratios of the runs' geometric means; brackets: 95 % Welch t interval of their logs "
                "(repstats.ratio_interval). 1 inside the brackets: no difference shown at 95 %.",
                "The stand-in is set to the proxy with access log's measured share; '-': no stand-in "
                "(no limit) or no interval.",
            ],
        ),
        (
            "budget",
            budget,
            "The CPU-budget reading",
            pt.BUDGET_COLUMNS,
            means
            + [
                "budget RPS = quota / (app cost alone + proxy cost) for a real proxy; (quota - the stand-in's measured "
                "CPU) / app cost alone for the stand-in."
            ],
        ),
    ):
        table.to_csv(out / f"{name}.csv", index=False, float_format="%.6g")
        (out / f"{name}.md").write_text(pt.markdown(title, table, columns, notes), encoding="utf-8")
    standin = pt.standin_sets(
        cost, memory_mb, preset, list(preset_sets), no_limit_vcpu=no_limit_vcpu
    )
    header = (
        "# Step two of the proxy preset (docs/proxy.md): busy-loop stand-ins at the real proxy's measured CPU\n"
        f"# share. snakemake --cores 1 --config preset={preset} --configfile {out / 'standin.yaml'}\n"
    )
    (out / "standin.yaml").write_text(
        header + yaml.safe_dump(standin, sort_keys=False), encoding="utf-8"
    )
    print(
        f"proxy_report: {len(runs)} runs, {len(cost)} real-proxy conditions -> {out}",
        file=sys.stderr,
    )


if __name__ == "__main__" and "snakemake" in globals():
    sys.stderr = open_job_log(snakemake.log[0])
    main(
        runs_summary=snakemake.input.runs_summary,
        out_dir=snakemake.output.tables,
        preset=snakemake.wildcards.preset,
        preset_sets=snakemake.params.preset_sets,
        memory_mb=snakemake.params.memory_mb,
        no_limit_vcpu=snakemake.params.no_limit_vcpu,
    )

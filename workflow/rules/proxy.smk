# A real proxy in the request path (docs/proxy.md): for a preset with real-proxy conditions, the proxy's
# CPU per request, the comparison with the app alone and with a busy-loop stand-in, the CPU-budget
# reading, and the config of step two (the stand-ins at the real proxy's measured share). PROXY_OUTPUTS
# (common.smk) names it for a preset that has one.


rule proxy_report:
    input:
        runs_summary=rules.aggregate_runs.output.runs_parquet,
        code=get_analysis_code("proxy_report"),
    output:
        tables=report(
            directory("results/{preset}/proxy"),
            patterns=["{name}.csv"],
            caption="../report/proxy.rst",
            category="Proxy",
        ),
    log:
        "results/{preset}/logs/proxy_report.log",
    params:
        preset_sets=config["presets"][PRESET]["sets"],
        memory_mb=memory_of(EXPERIMENT.conditions),
        no_limit_vcpu=CALIBRATION_NO_LIMIT_VCPU,
    script:
        "../scripts/proxy_report.py"


localrules:
    proxy_report,

# A real proxy in the request path (docs/proxy.md): for a preset with real-proxy conditions, the proxy's
# CPU per request, the comparison with the app alone and with a busy-loop stand-in, the CPU-budget
# reading, and the config of step two (the stand-ins at the real proxy's measured share).
from sidecar_bench.calibration import memory_of

HAS_REAL_PROXY = any(condition.real_proxy for condition in EXPERIMENT.conditions)
PROXY_OUTPUTS = [f"results/{PRESET}/proxy"] if HAS_REAL_PROXY else []


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
        "../../scripts/proxy_report.py"


localrules:
    proxy_report,

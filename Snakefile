# sidecar-bench: how much do sidecars slow an app that shares their CPU budget?
# The experiment is config.yaml; the rules live in workflow/rules/.
from snakemake.utils import min_version

min_version("9.19")


configfile: "config.yaml"


report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/image.smk"
include: "workflow/rules/run.smk"
include: "workflow/rules/adaptive.smk"
include: "workflow/rules/report.smk"
include: "workflow/rules/model.smk"
include: "workflow/rules/proxy.smk"


rule all:
    default_target: True
    input:
        get_final_outputs(),
        PROXY_OUTPUTS,

"""The real Snakefile, planned with `snakemake --dry-run` in a copy of the project."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import hold_engine
from workflow_helpers import (
    ROOT,
    SNAKEMAKE,
    copy_project,
    dry_run,
    pretend_finished,
    snakemake,
    write_config,
)


@pytest.fixture()
def project(tmp_path):
    return copy_project(tmp_path / "project")


@pytest.mark.workflow
def test_article_matrix_plans_one_job_per_condition(project):
    plan = dry_run(project)
    assert plan.returncode == 0, plan.output
    assert plan.jobs["run_condition"] == 187 * 3  # the preset repeats every condition 3 times
    assert plan.jobs["build_image"] == 5  # go, go-sidecar, next, next-sidecar, loadgen
    assert plan.variants == {"go", "go-sidecar", "next", "next-sidecar", "loadgen"}
    for rule in ("aggregate_runs", "make_tables", "plot_charts", "all"):
        assert plan.jobs[rule] == 1, rule
    assert "go_cpu0.25_mem2048_sc3_load05" in plan.conditions
    assert "next_cpu1_mem4096_sc3_load15" in plan.conditions


def test_quick_preset_is_selected_from_the_command_line(quick_plan):
    plan = quick_plan
    assert plan.returncode == 0, plan.output
    matrix = {
        "go_cpu0.25_mem2048_sc3_load00",
        "go_cpu0.25_mem2048_sc3_load05",
        "next_cpu0.25_mem2048_sc3_load00",
        "next_cpu0.25_mem2048_sc3_load05",
    }
    # The model's calibration: each app alone at the preset's vCPU and with no limit (all the CPUs).
    no_limit = f"{os.cpu_count() or 1:g}"
    calibration = {
        f"{app}_cpu{vcpu}_mem2048_sc0_load00"
        for app in ("go", "next")
        for vcpu in ("0.25", no_limit)
    }
    assert plan.conditions == matrix | calibration
    assert plan.jobs["run_condition"] == 2 * len(matrix) and plan.jobs[
        "run_calibration"
    ] == 2 * len(calibration)
    assert "results/quick/summary.parquet" in plan.output


def test_dry_run_says_why_each_job_runs(quick_plan):
    assert "Missing output files" in quick_plan.output


@pytest.mark.docker
def test_bad_config_fails_before_any_container_starts(project):
    config = write_config(project)
    config["sets"]["quick"]["vcpu"] = [0]
    import yaml

    (project / "config.yaml").write_text(yaml.safe_dump(config))
    # Under the engine's lease, so that no other test's containers come or go meanwhile; a workflow that got as far
    # as a run would wait for the lease and fail by the timeout.
    for client in hold_engine("tests/test_workflow.py bad config"):
        before = {c.id for c in client.containers.list(all=True)}
        done = snakemake(project, "--config", "preset=quick", timeout=300)
        assert done.returncode != 0
        output = done.stdout + done.stderr
        assert (
            "config.yaml: sets.quick.vcpu[0]: 0 is less than or equal to the minimum of 0" in output
        )
        assert {c.id for c in client.containers.list(all=True)} == before
    assert not (project / "results").exists()


@pytest.mark.workflow
def test_unknown_preset_names_the_value(project):
    done = snakemake(project, "--dry-run", "--config", "preset=huge")
    assert done.returncode != 0
    assert (
        "preset: 'huge' is not one of the presets (article, article-cpu, article-method, article-sample, figure, figure-cpu, mitigations, openloop, proxy, quick, study-10s, study-10s-warm, study-30s, task)"
        in done.stdout + done.stderr
    )


@pytest.mark.workflow
def test_slurm_profile_plans_the_same_jobs(project):
    plan = dry_run(
        project,
        "--workflow-profile",
        str(project / "profiles" / "slurm"),
        "--config",
        "preset=quick",
    )
    assert plan.returncode == 0, plan.output
    assert plan.jobs["run_condition"] == 8  # 4 conditions x 2 repetitions


@pytest.mark.workflow
def test_snakemake_lint_finds_only_the_missing_conda_envs():
    # The rules drive Docker themselves and run in the pinned virtual environment
    # (workflow/envs/requirements.lock); a conda environment would add nothing.
    done = subprocess.run(
        [SNAKEMAKE, "--lint", "--snakefile", str(ROOT / "Snakefile"), "--directory", str(ROOT)],
        capture_output=True,
        text=True,
    )
    output = done.stdout + done.stderr
    lints = [line.strip() for line in output.splitlines() if line.strip().startswith("* ")]
    assert lints, output
    # And the run rules' RUN_JOB (this interpreter and run_condition.py, sidecar_bench.runjob): as a param it
    # would be a rerun trigger, and a new checkout or virtual environment must not re-measure a run.
    run_job = "* Shell command directly uses variable RUN_JOB from outside of the rule:"
    assert set(lints) == {"* Specify a conda environment or container for each rule.:", run_job}, (
        output
    )
    blocks = output.split("Lints for rule ")[1:]
    using = {block.split()[0] for block in blocks if run_job in block}
    assert using == {"run_condition", "run_calibration"}, output


@pytest.mark.workflow
def test_repeats_plan_one_job_per_repetition(project):
    plan = dry_run(project, "--config", "preset=quick", "repeats=3")
    assert plan.returncode == 0, plan.output
    assert plan.jobs["run_condition"] == 12
    assert plan.repeats == {1, 2, 3}
    assert "results/quick/runs/go_cpu0.25_mem2048_sc3_load05/rep3.parquet" in plan.output


@pytest.mark.workflow
def test_a_presets_repeats_is_its_default_and_the_command_line_overrides_it(project):
    config = write_config(project)
    config["presets"]["quick"]["repeats"] = 2
    import yaml

    (project / "config.yaml").write_text(yaml.safe_dump(config))
    assert dry_run(project, "--config", "preset=quick").jobs["run_condition"] == 8
    assert dry_run(project, "--config", "preset=quick", "repeats=1").jobs["run_condition"] == 4


@pytest.mark.workflow
def test_repeats_zero_names_the_key_and_the_value(project):
    done = snakemake(project, "--dry-run", "--config", "preset=quick", "repeats=0")
    assert done.returncode != 0
    assert "config.yaml: repeats: 0 is less than the minimum of 1" in done.stdout + done.stderr


# ---- the knobs against throttling: the rerun rule ---------------------------------------------------

KNOB_SETS = {
    "kt_article": {
        "app": ["go"],
        "vcpu": [0.25],
        "memory_mb": [2048],
        "sidecar_count": [3],
        "sidecar_load_pct": [5],
    },
}
ARTICLE_ID = "go_cpu0.25_mem2048_sc3_load05"
# Stands in for run_condition.py, a plain process given --out FILE.
STUB_RUN = (
    "import sys\n"
    "from pathlib import Path\n"
    "out = Path(sys.argv[sys.argv.index('--out') + 1])\n"
    "out.parent.mkdir(parents=True, exist_ok=True)\n"
    "out.write_text('stub')\n"
)


def _knob_config(project, knob_set):
    config = write_config(project)
    config["sets"].update(KNOB_SETS)
    config["sets"]["kt_knob"] = {**KNOB_SETS["kt_article"], **knob_set}
    config["presets"]["kt"] = {"sets": ["kt_article", "kt_knob"], "repeats": 1}
    import yaml

    (project / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def _run_files(ids):
    return [f"results/kt/runs/{cid}/rep1.parquet" for cid in ids]


@pytest.fixture(scope="module")
def stubbed_once(tmp_path_factory):
    """The project with the runs of an article condition and a period-knob condition 'measured' by a stub
    (Snakemake records their params as it would for real runs)."""
    project = copy_project(tmp_path_factory.mktemp("stubbed") / "project")
    (project / "results" / "images").mkdir(parents=True)
    for variant in ("go-sidecar", "loadgen"):
        (project / "results" / "images" / f"{variant}.json").write_text("{}")
    (project / "workflow" / "scripts" / "run_condition.py").write_text(STUB_RUN)
    _knob_config(project, {"cpu_period_ms": [20]})
    done = snakemake(
        project,
        "--config",
        "preset=kt",
        "--allowed-rules",
        "run_condition",
        "--",
        *_run_files([ARTICLE_ID, ARTICLE_ID + "_period20ms"]),
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return project


@pytest.fixture()
def stubbed(stubbed_once, tmp_path):
    """A copy of it for one test to change (file times and Snakemake's records kept)."""
    return Path(shutil.copytree(stubbed_once, tmp_path / "stubbed", symlinks=True))


@pytest.mark.parametrize(
    "knob_set, new_ids",
    [
        ({"cpu_period_ms": [20]}, set()),
        ({"cpu_period_ms": [20, 5]}, {ARTICLE_ID + "_period5ms"}),
        ({"cpu_period_ms": [20], "cpu_burst_pct": [50]}, {ARTICLE_ID + "_period20ms_burst50"}),
        (
            {"cpu_period_ms": [100, 20]},
            set(),
        ),  # 100 ms is the article's period: the article condition itself
        ({"cpu_quota": [False], "cpuset": ["1"]}, {ARTICLE_ID + "_noquota_cpuset1"}),
        ({"gomaxprocs": [1]}, {ARTICLE_ID + "_gomaxprocs1"}),
        # The topology and the weights: only the conditions they change; the process topology's runs stay valid.
        ({"topology": ["process", "task"]}, {ARTICLE_ID + "_task"}),
        (
            {"topology": ["task"], "app_cpu_units": [1024, 2]},
            {ARTICLE_ID + "_task_appcpu1024", ARTICLE_ID + "_task"},
        ),
    ],
)
@pytest.mark.workflow
def test_changing_a_knob_runs_only_the_conditions_it_changes(stubbed, knob_set, new_ids):
    _knob_config(stubbed, knob_set)
    import yaml

    config = yaml.safe_load((stubbed / "config.yaml").read_text())
    from sidecar_bench.experiment import load_experiment

    ids = [c.id for c in load_experiment({**config, "preset": "kt"}).conditions]
    plan = dry_run(
        stubbed, "--config", "preset=kt", "--allowed-rules", "run_condition", "--", *_run_files(ids)
    )
    assert plan.returncode == 0, plan.output
    assert plan.conditions == new_ids, plan.output
    # The article's condition, measured before, is never among them.
    assert ARTICLE_ID not in plan.conditions


@pytest.mark.workflow
def test_the_mitigations_preset_plans_each_knob_beside_the_article_settings(project):
    plan = dry_run(project, "--config", "preset=mitigations")
    assert plan.returncode == 0, plan.output
    assert plan.jobs["run_condition"] == 54 * 3
    for cid in (
        "go_cpu0.25_mem2048_sc3_load10",
        "go_cpu0.25_mem2048_sc3_load10_period5ms",
        "go_cpu0.25_mem2048_sc3_load10_burst100",
        "go_cpu0.25_mem2048_sc3_load10_noquota_cpuset1",
        "go_cpu0.25_mem2048_sc3_load10_gomaxprocs1",
        "next_cpu0.25_mem2048_sc3_load05_uvpool1",
        "next_cpu0.25_mem2048_sc3_load02_semispace16",
        "next_cpu0.5_mem2048_sc3_load15_period5ms",
        "go_cpu0.25_mem2048_sc3_load15_period5ms_burst100",
    ):
        assert cid in plan.conditions, cid


@pytest.mark.workflow
def test_the_task_preset_plans_both_layouts(project):
    plan = dry_run(project, "--config", "preset=task")
    assert plan.returncode == 0, plan.output
    assert plan.jobs["run_condition"] == 51 * 3
    for cid in (
        "go_cpu0.25_mem2048_sc3_load05",
        "go_cpu0.25_mem2048_sc3_load05_task",
        "next_cpu0.5_mem2048_sc3_load07_task_appcpu1024",
        "go_cpu0.25_mem2048_sc3_load10_gomaxprocs1_task",
    ):
        assert cid in plan.conditions, cid


# ---- after a complete run: a missing run file, the analysis code -------------------------------------

QUICK = ("--config", "preset=quick")
QUICK_MATRIX = {
    "go_cpu0.25_mem2048_sc3_load00",
    "go_cpu0.25_mem2048_sc3_load05",
    "next_cpu0.25_mem2048_sc3_load00",
    "next_cpu0.25_mem2048_sc3_load05",
}
ANALYSIS = ("aggregate_runs", "make_tables", "plot_charts", "calibrate", "model_report")


@pytest.fixture(scope="module")
def finished_once(tmp_path_factory):
    """The quick preset as after a complete run (every output made, none measured)."""
    project = copy_project(tmp_path_factory.mktemp("finished") / "project")
    pretend_finished(project, *QUICK)
    plan = dry_run(project, *QUICK)
    assert plan.nothing_to_do, plan.output
    return project


@pytest.fixture()
def finished(finished_once, tmp_path):
    """A copy of it for one test to change (file times and Snakemake's records kept)."""
    return Path(shutil.copytree(finished_once, tmp_path / "finished", symlinks=True))


def planned(plan):
    """{rule: count} of the jobs that would run, without the target rules (all, calibration, model)."""
    assert plan.returncode == 0, plan.output
    return {
        rule: n
        for rule, n in plan.jobs.items()
        if rule not in ("all", "calibration", "model") and n
    }


@pytest.mark.workflow
def test_a_deleted_run_file_is_measured_again_and_only_it(finished):
    (finished / "results/quick/runs/go_cpu0.25_mem2048_sc3_load05/rep1.parquet").unlink()
    plan = dry_run(finished, *QUICK)
    # The summary and what is made from it follow; the calibration reads no matrix run of this preset.
    assert planned(plan) == {
        "run_condition": 1,
        "aggregate_runs": 1,
        "make_tables": 1,
        "plot_charts": 1,
        "model_report": 1,
    }, plan.output
    assert plan.conditions == {"go_cpu0.25_mem2048_sc3_load05"} and plan.repeats == {1}
    assert (
        "Missing output files: results/quick/runs/go_cpu0.25_mem2048_sc3_load05/rep1.parquet"
        in plan.output
    )


@pytest.mark.workflow
def test_a_deleted_runs_folder_is_measured_again_and_nothing_else(finished):
    shutil.rmtree(finished / "results/quick/runs")
    plan = dry_run(finished, *QUICK)
    assert planned(plan) == {
        "run_condition": 8,
        "aggregate_runs": 1,
        "make_tables": 1,
        "plot_charts": 1,
        "model_report": 1,
    }, plan.output
    assert plan.conditions == QUICK_MATRIX and plan.repeats == {1, 2}


@pytest.mark.workflow
def test_a_deleted_calibration_run_is_measured_again_and_only_it(finished):
    run = min((finished / "results/quick/calibration/runs").glob("*/rep2.parquet"))
    run.unlink()
    for target in ((), ("calibration",), ("model",)):  # the default target and the named ones
        plan = dry_run(finished, *target, *QUICK)
        assert planned(plan) == {
            "run_calibration": 1,
            "calibrate": 1,
            **({} if target == ("calibration",) else {"model_report": 1}),
        }, plan.output
        assert plan.conditions == {run.parent.name} and plan.repeats == {2}


def append(path, text="\n# edited\n"):
    path.write_text(path.read_text() + text)


@pytest.mark.workflow
def test_editing_the_charts_module_remakes_the_charts_and_measures_nothing(finished):
    append(finished / "scripts/sidecar_bench/charts.py")
    plan = dry_run(finished, *QUICK)
    assert planned(plan) == {"plot_charts": 1, "model_report": 1}, plan.output
    assert "Updated input files: scripts/sidecar_bench/charts.py" in plan.output


@pytest.mark.workflow
def test_editing_the_statistics_remakes_every_analysis_step_and_measures_nothing(finished):
    append(finished / "scripts/sidecar_bench/stats.py")
    plan = dry_run(finished, *QUICK)
    assert planned(plan) == {rule: 1 for rule in ANALYSIS}, plan.output


@pytest.mark.workflow
def test_editing_an_analysis_script_remakes_its_outputs(finished):
    # The code rerun trigger is off (profiles/default): the script is an input of its own rule.
    append(finished / "workflow/scripts/make_tables.py")
    assert planned(dry_run(finished, *QUICK)) == {"make_tables": 1}


@pytest.mark.workflow
def test_a_module_both_sides_import_remakes_the_analysis_and_no_run(finished):
    # record.py reads and writes run files: the runner and the analysis both import it.
    append(finished / "scripts/sidecar_bench/record.py")
    plan = dry_run(finished, *QUICK)
    assert planned(plan) == {rule: 1 for rule in ANALYSIS}, plan.output


@pytest.mark.workflow
def test_editing_the_runners_code_reruns_nothing(finished):
    for path in (
        "scripts/sidecar_bench/runner.py",
        "scripts/sidecar_bench/measurement.py",
        "scripts/sidecar_bench/job.py",
        "workflow/scripts/run_condition.py",
    ):
        append(finished / path)
    plan = dry_run(finished, *QUICK)
    assert plan.nothing_to_do, plan.output


@pytest.mark.workflow
def test_checking_out_an_unchanged_analysis_module_reruns_nothing(finished):
    # Newer but with the checksum recorded when the outputs were made: not an update.
    charts = finished / "scripts/sidecar_bench/charts.py"
    charts.write_text(charts.read_text())
    plan = dry_run(finished, *QUICK)
    assert plan.nothing_to_do, plan.output


@pytest.mark.workflow
def test_a_copy_of_the_project_runs_its_own_library_not_the_one_the_environment_installed(tmp_path):
    # The environment's install of the library points at this checkout; a copy run with it must still
    # measure and analyse with the copy's code (and record the copy's commit).
    from workflow_helpers import copy_project, snakemake

    project = copy_project(tmp_path / "project")
    (project / "scripts" / "sidecar_bench" / "copy_marker.py").write_text("WHOSE = 'the copy'\n")
    with open(project / "Snakefile", "a") as snakefile:
        snakefile.write(
            "\n\nrule which_library:\n"
            '    output: "which.txt"\n'
            "    shell:\n"
            "        \"python -c 'import sidecar_bench.copy_marker as m, sidecar_bench as s;"
            ' print(m.WHOSE + \\"|\\" + s.__file__)\' > {output}"\n'
        )
    done = snakemake(project, "--cores", "1", "which_library", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    whose, library = (project / "which.txt").read_text().strip().split("|")
    assert whose == "the copy"
    assert Path(library).resolve().is_relative_to((project / "scripts").resolve())

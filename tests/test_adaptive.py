"""Adaptive repetitions: the rule on per-run values, its config, and the real Snakefile's plans."""

import json
import os

import numpy as np
import pytest
import yaml

from sidecar_bench.adaptive import AdaptiveSettings, decide
from sidecar_bench.conditions import Condition, ConfigError
from sidecar_bench.experiment import load_experiment
from sidecar_bench.synthetic import write_run
from workflow_helpers import ROOT, copy_project, dry_run, snakemake

ON = AdaptiveSettings(max_repeats=4)


def rows(rps, p99=(50.0,), tail=(0.0,)):
    n = len(rps)
    p99 = list(p99) * n if len(p99) == 1 else list(p99)
    tail = list(tail) * n if len(tail) == 1 else list(tail)
    return [
        {
            "repeat": i + 1,
            "status": "measured",
            "rps": r,
            "p99_ms": p,
            "slow_1p_share": t,
            "period_ms": 100.0,
        }
        for i, (r, p, t) in enumerate(zip(rps, p99, tail))
    ]


def test_a_wide_rps_interval_adds_a_repetition_and_names_metric_width_and_target():
    decision = decide("c", rows([100, 140, 120]), ON, planned=3)
    assert decision["add"]
    assert decision["reason"].startswith("c: repetition 4 added: rps +-")
    assert "> target +-10 %" in decision["reason"] and "(3 runs, at most 4)" in decision["reason"]


def test_narrow_intervals_add_nothing():
    decision = decide("c", rows([100, 101, 100.5], p99=[50, 51, 50.5]), ON, planned=3)
    assert not decision["add"] and "3 repetitions are enough" in decision["reason"]


def test_the_cap_holds():
    decision = decide("c", rows([100, 140, 120, 90]), ON, planned=3)
    assert (
        not decision["add"] and "the cap (adaptive.max_repeats 4) is reached" in decision["reason"]
    )


def test_a_wide_p99_adds_a_repetition_and_a_bimodal_one_is_judged_by_its_tail_share():
    wide_p99 = decide("c", rows([100, 100, 100], p99=[40, 80, 60]), ON, planned=3)
    assert wide_p99["add"] and "p99 +-" in wide_p99["reason"]
    # P99 105 or 188 ms (both sides of 150 ms): the tail share decides, here narrow.
    bimodal = decide(
        "c", rows([100, 100, 100], p99=[105, 188, 105], tail=[0.010, 0.011, 0.010]), ON, planned=3
    )
    assert not bimodal["add"] and "tail_share (bimodal P99)" in bimodal["reason"]
    spread = decide(
        "c", rows([100, 100, 100], p99=[105, 188, 105], tail=[0.01, 0.08, 0.02]), ON, planned=3
    )
    assert spread["add"] and "percentage points > target +-2 points" in spread["reason"]


def test_one_run_has_no_interval_and_a_failed_run_stops_the_condition():
    assert decide("c", rows([100]), ON, planned=1)["add"]
    failed = rows([100, 150]) + [{"repeat": 3, "status": "failed"}]
    decision = decide("c", failed, ON, planned=3)
    assert not decision["add"] and "repetition 3 failed" in decision["reason"]


def config(**adaptive):
    data = yaml.safe_load((ROOT / "config.yaml").read_text())
    data["preset"] = "quick"
    data["adaptive"] = adaptive
    return data


def test_off_by_default_and_the_targets_have_defaults():
    experiment = load_experiment(config())
    assert experiment.adaptive == AdaptiveSettings() and not experiment.adaptive.enabled(
        experiment.repeats
    )
    assert load_experiment(config(max_repeats=5)).adaptive.targets() == {
        "rps": 0.1,
        "p99": 0.25,
        "tail_share": 0.02,
    }


@pytest.mark.parametrize(
    "adaptive, message",
    [
        ({"rps": 0}, "config.yaml: adaptive.rps: 0 is less than or equal to the minimum of 0"),
        ({"p99": "wide"}, "config.yaml: adaptive.p99: 'wide' is not of type 'number', 'null'"),
        ({"max_repeats": 0}, "config.yaml: adaptive.max_repeats: 0 is less than the minimum of 1"),
        ({"max_repeats": 1}, "config.yaml: adaptive.max_repeats: 1 is below the 2 planned repeats"),
        (
            {"max_repeats": 4, "rps": None, "p99": None, "tail_share": None},
            "every target (rps, p99, tail_share) null",
        ),
        ({"tails": 0.1}, "Additional properties are not allowed ('tails' was unexpected)"),
    ],
)
def test_bad_adaptive_settings_name_the_key_and_the_value(adaptive, message):
    with pytest.raises(ConfigError) as raised:
        load_experiment(config(**adaptive))
    assert message in str(raised.value)


# The real Snakefile on fake finished runs: quick preset (4 conditions, 2 planned repeats), cap 3.
WIDE = Condition("next", 0.25, 2048, 3, 0)
NARROW = Condition("go", 0.25, 2048, 3, 0)
QUICK = [NARROW, Condition("go", 0.25, 2048, 3, 5), WIDE, Condition("next", 0.25, 2048, 3, 5)]


def fake_run(project, condition, repeat, rps):
    """A finished 10 s run of `rps` requests/s, every response 5 ms (P99 identical in every run)."""
    path = project / "results" / "quick" / "runs" / condition.id / f"rep{repeat}.parquet"
    n = int(rps * 10)
    write_run(
        path,
        condition,
        np.full(n, 0.005),
        wall_s=10.0,
        repeat=repeat,
        offset_s=np.linspace(0, 9.99, n),
    )
    return path


@pytest.fixture()
def project(tmp_path):
    project = copy_project(tmp_path / "project")
    data = yaml.safe_load((project / "config.yaml").read_text())
    data["adaptive"] = {"max_repeats": 3}
    (project / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    images = project / "results" / "images"
    images.mkdir(parents=True)
    for variant in ("go-sidecar", "next-sidecar", "loadgen", "go", "next"):
        record = images / f"{variant}.json"
        record.write_text(json.dumps({"variant": variant, "hosts": {"local": "sha256:synthetic"}}))
        os.utime(record, (1, 1))  # built before the runs
    for condition in QUICK:
        for repeat, rps in ((1, 100), (2, 150 if condition == WIDE else 100.5)):
            fake_run(project, condition, repeat, rps)
    return project


def decisions(project, repeat):
    """The decision after round `repeat` (one file for every condition in play)."""
    return [f"results/quick/adaptive/after{repeat}.json"]


def extra_runs(plan, repeat):
    return {
        line.split("/")[3]
        for line in plan.output.split()
        if line.endswith(f"/rep{repeat}.parquet") and line.startswith("results/quick/runs/")
    }


@pytest.mark.workflow
def test_a_wide_condition_gets_a_repetition_a_narrow_one_none_and_the_cap_holds(project):
    plan = dry_run(project, "--config", "preset=quick")
    assert plan.returncode == 0, plan.output
    # Before the decision: it is planned (one job for the round), nothing beyond the planned repeats,
    # nothing measured again.
    assert plan.jobs["decide_repeat"] == 1 and "run_condition" not in plan.jobs, plan.output
    done = snakemake(project, *decisions(project, 2), "--config", "preset=quick")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"adaptive: {WIDE.id}: repetition 3 added: rps" in done.stderr

    plan = dry_run(project, "--config", "preset=quick")
    assert plan.returncode == 0, plan.output
    assert plan.jobs["run_condition"] == 1 and extra_runs(plan, 3) == {WIDE.id}, plan.output
    assert f"adaptive repetitions: {WIDE.id}: repetition 3 added: rps +-" in plan.output
    assert "> target +-10 %" in plan.output
    assert f"adaptive repetitions: {NARROW.id}: 2 repetitions are enough" in plan.output
    assert (
        plan.jobs["decide_repeat"] == 1
    )  # the decision after the third round (the wide condition only)

    # Its third run is still wide; the cap (3) holds: no fourth repetition.
    fake_run(project, WIDE, 3, 60)
    done = snakemake(project, *decisions(project, 3), "--config", "preset=quick")
    assert done.returncode == 0, done.stdout + done.stderr
    plan = dry_run(project, "--config", "preset=quick")
    assert "run_condition" not in plan.jobs and "decide_repeat" not in plan.jobs, plan.output
    assert (
        f"{WIDE.id}: no repetition beyond 3: the cap (adaptive.max_repeats 3) is reached"
        in plan.output
    )

    # A deleted run file is measured again, and only it: no other run, no finished adaptive one.
    (project / "results" / "quick" / "runs" / NARROW.id / "rep1.parquet").unlink()
    plan = dry_run(project, "--config", "preset=quick")
    assert plan.jobs["run_condition"] == 1 and f"runs/{NARROW.id}/rep1.parquet" in plan.output, (
        plan.output
    )
    assert not extra_runs(plan, 3)


@pytest.mark.workflow
def test_a_stricter_target_re_decides_without_measuring_anything_again(project):
    done = snakemake(project, *decisions(project, 2), "--config", "preset=quick")
    assert done.returncode == 0, done.stdout + done.stderr
    fake_run(project, WIDE, 3, 125)
    plan = dry_run(project, "--config", "preset=quick", "adaptive={max_repeats: 3, rps: 0.001}")
    assert plan.returncode == 0, plan.output
    # The decision is made again (its params changed); no run file is planned.
    assert plan.jobs["decide_repeat"] == 1 and "run_condition" not in plan.jobs, plan.output


@pytest.mark.workflow
def test_adaptive_off_plans_exactly_the_planned_repetitions(quick_plan, tmp_path):
    assert "decide_repeat" not in quick_plan.jobs and quick_plan.jobs["run_condition"] == 8
    on = dry_run(
        copy_project(tmp_path / "plain"), "--config", "preset=quick", "adaptive={max_repeats: 4}"
    )
    assert on.jobs["run_condition"] == 8 and on.jobs["decide_repeat"] == 1
    # Priorities: planned repetitions above every adaptive one (rep1: 3, rep2: 2 with a cap of 4).
    assert "priority: 3" in on.output and "priority: 2" in on.output


@pytest.mark.docker
@pytest.mark.slow
def test_a_real_run_adds_the_decided_repetitions_after_every_planned_one(tmp_path):
    """The real Snakefile on the real engine: 2 conditions x 2 planned runs, a target no run can meet, cap 3."""
    import pyarrow.parquet as pq

    project = copy_project(tmp_path / "project")
    data = yaml.safe_load((project / "config.yaml").read_text())
    data["sets"]["adaptive_go"] = dict(
        app=["go"], vcpu=[0.5], memory_mb=[520], sidecar_count=[0, 1], sidecar_load_pct=[10]
    )
    data["presets"]["adaptive"] = {
        "sets": ["adaptive_go"],
        "repeats": 2,
        "load": {"duration_s": 2, "warmup_s": 0},
        "adaptive": {"max_repeats": 3, "rps": 1e-9, "p99": None, "tail_share": None},
    }
    data["preset"] = "adaptive"
    (project / "config.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    # The summary and the runs it reads: the calibration, the tables and the charts add nothing to the rounds.
    target = "results/adaptive/summary.csv"
    done = snakemake(project, target, timeout=1500)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    ids = ["go_cpu0.5_mem520_sc0_load00", "go_cpu0.5_mem520_sc1_load10"]
    for cid in ids:
        assert f"adaptive: {cid}: repetition 3 added: rps" in output
        assert (
            f"{cid}: no repetition beyond 3: the cap (adaptive.max_repeats 3) is reached" in output
        )
    runs = project / "results" / "adaptive" / "runs"
    starts = {}
    for cid in ids:
        for repeat in (1, 2, 3):
            meta = json.loads(
                pq.read_schema(runs / cid / f"rep{repeat}.parquet").metadata[b"sidecar_bench"]
            )
            starts[(cid, repeat)] = meta["window"]["start"]
    # Every planned repetition before any added one, every first before any second.
    assert max(starts[(c, 1)] for c in ids) < min(starts[(c, 2)] for c in ids)
    assert max(starts[(c, 2)] for c in ids) < min(starts[(c, 3)] for c in ids)
    summary = __import__("pandas").read_csv(project / "results" / "adaptive" / "summary.csv")
    assert set(summary["repeats"]) == {3}
    # Nothing left to do, and nothing measured again.
    plan = dry_run(project, target)
    assert plan.nothing_to_do, plan.output

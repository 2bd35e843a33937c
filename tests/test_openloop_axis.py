"""The load model axis: ids, validation, the capacity a rate comes from, the statistics of open
runs, the comparison with the closed loop, and the workflow's plan (dry runs, no engine)."""

from __future__ import annotations

import copy
import json
import math
import re

import pandas as pd
import pytest
import yaml

from sidecar_bench import capacity, flags, openloop_report, record
from sidecar_bench.conditions import Condition, ConfigError
from sidecar_bench.experiment import load_experiment
from sidecar_bench.stats import summarise_conditions, summarise_run, summarise_runs
from sidecar_bench.synthetic import run_path, write_run
from workflow_helpers import ROOT, copy_project, dry_run, write_config

BASE = yaml.safe_load((ROOT / "config.yaml").read_text())


def config_with_set(**axes) -> dict:
    config = copy.deepcopy(BASE)
    config["preset"] = "quick"
    config["sets"]["quick"] = (
        dict(app=["go"], vcpu=[0.25], memory_mb=[2048], sidecar_count=[3], sidecar_load_pct=[5])
        | axes
    )
    return config


def refused(config: dict) -> str:
    with pytest.raises(ConfigError) as err:
        load_experiment(config)
    return str(err.value)


def test_a_closed_condition_keeps_its_id_and_params_from_before_the_axis():
    # Its dict is the run's params (a rerun trigger): any new key would rerun every measured run.
    condition = Condition("go", 0.25, 2048, 3, 5)
    assert condition.id == "go_cpu0.25_mem2048_sc3_load05"
    assert condition.as_dict() == {
        "id": "go_cpu0.25_mem2048_sc3_load05",
        "app": "go",
        "vcpu": 0.25,
        "memory_mb": 2048,
        "sidecar_count": 3,
        "sidecar_load_pct": 5.0,
        "total_sidecar_load_pct": 15.0,
    }


def test_every_preset_of_the_config_keeps_its_conditions():
    # The axis defaults to closed: the config's presets without open sets have the ids they had.
    for preset in ("article", "figure", "quick"):
        conditions = load_experiment({**BASE, "preset": preset}).conditions
        assert all(c.load_model == "closed" and "open" not in c.id for c in conditions)


def test_open_conditions_are_named_by_share_and_arrivals_and_bring_their_capacity_condition():
    config = config_with_set(
        load_model=["closed", "open"], rate_share=[0.5, 0.75], arrivals=["poisson", "constant"]
    )
    ids = {c.id for c in load_experiment(config).conditions}
    assert ids == {
        "go_cpu0.25_mem2048_sc3_load05",
        "go_cpu0.25_mem2048_sc3_load05_open50",
        "go_cpu0.25_mem2048_sc3_load05_open75",
        "go_cpu0.25_mem2048_sc3_load05_open50c",
        "go_cpu0.25_mem2048_sc3_load05_open75c",
        # the capacity: the same setup with idle sidecars, closed loop
        "go_cpu0.25_mem2048_sc3_load00",
    }
    opened = Condition("go", 0.25, 2048, 3, 5, load_model="open", rate_share=0.5)
    assert opened.as_dict()["rate_share"] == 0.5 and opened.as_dict()["load_model"] == "open"
    assert Condition.from_dict(opened.as_dict()) == opened


@pytest.mark.parametrize(
    "axes, message",
    [
        (
            dict(load_model=["half-open"]),
            r"sets\.quick\.load_model\[0\]: 'half-open' is not one of \['closed', 'open'\]",
        ),
        (
            dict(load_model=["open"], rate_share=[0]),
            r"sets\.quick\.rate_share\[0\]: 0 is less than or equal to the minimum",
        ),
        (
            dict(load_model=["open"], rate_share=[1.5]),
            r"sets\.quick\.rate_share\[0\]: 1\.5 is greater than the maximum of 1",
        ),
        (
            dict(load_model=["open"], rate_share=["half"]),
            r"sets\.quick\.rate_share\[0\]: 'half' is not of type 'number'",
        ),
        (
            dict(load_model=["open"], rate_share=[0.5], arrivals=["bursty"]),
            r"sets\.quick\.arrivals\[0\]: 'bursty' is not one of \['poisson', 'constant'\]",
        ),
        (dict(load_model=["open"]), r"sets\.quick: load_model open needs rate_share"),
        (
            dict(rate_share=[0.5]),
            r"sets\.quick\.rate_share: \[0\.5\] is set, but load_model is \['closed'\]",
        ),
    ],
)
def test_bad_load_model_values_are_refused_naming_the_key_and_the_value(axes, message):
    text = refused(config_with_set(**axes))
    assert re.search(message, text), text


def test_the_open_loop_with_the_task_topology_is_refused_at_config_load_naming_both():
    text = refused(config_with_set(load_model=["open"], rate_share=[0.5], topology=["task"]))
    assert (
        "sets.quick.load_model: 'open' runs only in the process topology, not with topology 'task'"
        in text
    )


def test_an_open_id_ends_after_the_proxy_and_the_knobs_and_its_capacity_keeps_them():
    config = config_with_set(
        load_model=["open"], rate_share=[0.5], proxy=["haproxy"], cpu_period_ms=[5]
    )
    ids = {c.id for c in load_experiment(config).conditions}
    assert ids == {
        "go_cpu0.25_mem2048_sc3_load05_px-haproxy_period5ms_open50",
        # the capacity: the same setup (proxy, period) with idle sidecars, closed loop
        "go_cpu0.25_mem2048_sc3_load00_px-haproxy_period5ms",
    }


def test_the_condition_itself_refuses_a_share_outside_0_1():
    with pytest.raises(ConfigError, match=r"rate_share: 0 is not within \(0, 1\]"):
        Condition("go", 0.25, 2048, 3, 5, load_model="open", rate_share=0)


def test_the_rate_is_the_share_of_capacity_in_whole_requests():
    assert capacity.rate_per_s(0.5, 701.3) == 351
    assert capacity.rate_per_s(0.75, 701.3) == 526
    assert capacity.rate_per_s(0.001, 10) == 1
    with pytest.raises(capacity.CapacityError, match="capacity nan RPS"):
        capacity.rate_per_s(0.5, math.nan)


def test_the_capacity_is_the_mean_rps_of_the_measured_runs(tmp_path):
    condition = Condition("go", 0.25, 2048, 3, 0)
    files = [
        write_run(
            run_path(tmp_path, condition.id, rep),
            condition,
            [0.01] * n,
            wall_s=2.0,
            load_s=2.0,
            repeat=rep,
        )
        for rep, n in ((1, 1000), (2, 1200))
    ]
    record = capacity.measure(condition.id, files)
    assert record["rps_mean"] == pytest.approx((500 + 600) / 2)
    assert record["repeats"] == 2 and record["rps_runs"] == pytest.approx([500, 600])
    assert capacity.read(capacity.write(tmp_path / "c.json", record)) == json.loads(
        json.dumps(record)
    )
    with pytest.raises(
        capacity.CapacityError, match="run files of go_cpu0.25_mem2048_sc3_load00 given"
    ):
        capacity.measure("go_cpu0.25_mem2048_sc3_load05", files)


def open_meta(scheduled, late, dropped, rate=500, sent_rate=None):
    return {
        "open_loop": {
            "load_model": "open",
            "rate_per_s": rate,
            "rate_share": 0.5,
            "arrivals": "poisson",
            "capacity": {"rps_mean": 1000.0},
            "summary": {
                "scheduled": scheduled,
                "late": late,
                "dropped": dropped,
                "sent_rate_per_s": sent_rate if sent_rate is not None else rate,
            },
        },
        "load": {"load_model": "open"},
        "time_coverage": None,
    }


def test_dropped_requests_count_as_slower_than_every_threshold(tmp_path):
    condition = Condition("go", 0.25, 2048, 3, 5, load_model="open", rate_share=0.5)
    # 90 answered fast, 5 answered after 150 ms, 5 dropped: 10 % slower than one period, 5 % than two.
    times = [0.002] * 90 + [0.150] * 5
    row = summarise_run(
        write_run(
            tmp_path / "run.parquet",
            condition,
            times,
            wall_s=2.0,
            meta_overrides=open_meta(100, 0, 5),
        )
    )
    assert row["load_model"] == "open"
    assert row["slow_1p_share"] == pytest.approx(10 / 100)
    assert row["slow_2p_share"] == pytest.approx(5 / 100)
    assert row["not_on_time_share"] == pytest.approx(0.05)
    assert "not_on_time" in row["flags"].split(",")
    # Percentiles stay over the answered requests.
    assert row["p50_ms"] == pytest.approx(2.0)


def test_an_open_run_on_time_is_not_flagged_and_a_closed_run_has_no_open_columns(tmp_path):
    opened = Condition("go", 0.25, 2048, 3, 5, load_model="open", rate_share=0.5)
    on_time = summarise_run(
        write_run(
            tmp_path / "o.parquet",
            opened,
            [0.002] * 100,
            wall_s=2.0,
            throttled_share=0.0,
            meta_overrides=open_meta(100, 1, 0),
        )
    )
    assert "not_on_time" not in on_time["flags"]
    # Below capacity the quota is left unused by design: not host-bound for that alone.
    assert "host_bound" not in on_time["flags"]
    behind = summarise_run(
        write_run(
            tmp_path / "b.parquet",
            opened,
            [0.002] * 100,
            wall_s=2.0,
            meta_overrides=open_meta(100, 0, 0, sent_rate=400),
        )
    )
    assert behind["rate_ratio"] == pytest.approx(0.8) and "not_on_time" in behind["flags"]
    closed = summarise_run(
        write_run(
            tmp_path / "c.parquet", Condition("go", 0.25, 2048, 3, 5), [0.002] * 100, wall_s=2.0
        )
    )
    assert closed["load_model"] == "closed" and math.isnan(closed["rate_per_s"])
    assert not flags.not_on_time(closed)


def test_the_comparison_sets_each_open_cell_beside_its_closed_cell_with_intervals(tmp_path):
    closed, opened = (
        Condition("go", 0.25, 2048, 3, 5),
        Condition("go", 0.25, 2048, 3, 5, load_model="open", rate_share=0.5),
    )
    files = []
    for rep, (closed_tail, open_tail) in enumerate(
        ((0.10, 0.20), (0.11, 0.22), (0.09, 0.19)), start=1
    ):
        files.append(
            write_run(
                run_path(tmp_path, closed.id, rep),
                closed,
                [0.002] * 980 + [closed_tail] * 20,
                wall_s=2.0,
                repeat=rep,
            )
        )
        files.append(
            write_run(
                run_path(tmp_path, opened.id, rep),
                opened,
                [0.002] * 980 + [open_tail] * 20,
                wall_s=2.0,
                repeat=rep,
                meta_overrides=open_meta(1000, 0, 0),
            )
        )
    summary = summarise_conditions(summarise_runs(files))
    table = openloop_report.comparison(summary)
    assert list(table["condition_id"]) == [opened.id] and list(table["closed_condition_id"]) == [
        closed.id
    ]
    row = table.iloc[0]
    assert row["open_p99_ms"] == pytest.approx(1000 * (0.20 + 0.22 + 0.19) / 3)
    assert row["closed_p99_ms"] == pytest.approx(1000 * (0.10 + 0.11 + 0.09) / 3)
    assert row["open_p99_ms_lo"] < row["open_p99_ms"] < row["open_p99_ms_hi"]
    assert row["p99_open_vs_closed_lo"] < row["p99_open_vs_closed"] < row["p99_open_vs_closed_hi"]
    assert row["p99_open_vs_closed"] == pytest.approx(2.0, rel=0.05)
    text = openloop_report.markdown(table)
    assert "go 0.25 vCPU, 3 sidecars" in text and "500/s (50 % of 1000)" in text
    assert list(openloop_report.closed_loop(summary)["condition_id"]) == [closed.id]
    # The chart: P99 on a log scale (milliseconds below capacity, seconds above), an interval reaching below
    # the floor drawn from it, each setup's loads on its own axis.
    summary.loc[summary["condition_id"] == opened.id, "p99_ms_lo"] = -40.0
    spec = openloop_report.chart(summary).to_dict()
    assert spec["spec"]["layer"][0]["encoding"]["y"]["scale"] == {"type": "log"}
    assert spec["resolve"]["scale"]["x"] == "independent"
    drawn = pd.DataFrame(next(iter(spec["datasets"].values())))
    assert drawn["p99_lo_drawn"].min() == openloop_report.P99_FLOOR_MS


def test_an_open_condition_whose_every_run_failed_stays_open_and_out_of_the_closed_tables(tmp_path):
    closed, opened = (
        Condition("go", 0.25, 2048, 3, 5),
        Condition("go", 0.25, 2048, 3, 5, load_model="open", rate_share=0.5),
    )
    files = [
        write_run(run_path(tmp_path, closed.id, rep), closed, [0.002] * 100, wall_s=2.0, repeat=rep)
        for rep in (1, 2)
    ]
    for rep in (1, 2):
        failure = record.failure_record(
            opened.as_dict(),
            rep,
            {"duration_s": 2.0},
            "the app stopped",
            {"phase": "start"},
            None,
            "t",
        )
        files.append(record.write_failure(run_path(tmp_path, opened.id, rep), failure))
    runs = summarise_runs(files)
    assert list(runs.loc[runs["status"] == "failed", "rate_share"]) == [0.5, 0.5]
    summary = summarise_conditions(runs)
    failed = summary.set_index("condition_id").loc[opened.id]
    assert (failed["load_model"], failed["rate_share"], failed["repeats"]) == ("open", 0.5, 0)
    # The flag fires on the failed condition, and (below) not on its closed cell.
    assert "run_failed" in failed["flags"]
    # The closed tables and charts see only the closed cell, which no failure marks.
    assert list(openloop_report.closed_loop(summary)["condition_id"]) == [closed.id]
    assert "run_failed" not in summary.set_index("condition_id").loc[closed.id, "flags"]
    # The comparison shows the open condition as failed, beside its closed cell.
    table = openloop_report.comparison(summary)
    assert list(table["condition_id"]) == [opened.id]
    assert "50 % of capacity: every run failed" in openloop_report.markdown(table)


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return copy_project(tmp_path_factory.mktemp("openplan") / "project")


@pytest.mark.workflow
def test_the_openloop_preset_plans_the_capacity_before_the_open_runs(project):
    write_config(project, preset="openloop")
    plan = dry_run(project)
    assert plan.returncode == 0, plan.output
    assert plan.jobs["compute_capacity"] == 4
    assert plan.jobs["run_condition"] == 36 * 3
    assert plan.jobs["compare_open_closed"] == 1
    assert "variant=loadgen-open" in plan.output
    assert {c for c in plan.conditions if c.endswith("_open50")} == {
        "go_cpu0.25_mem2048_sc3_load00_open50",
        "go_cpu0.25_mem2048_sc3_load05_open50",
        "go_cpu0.25_mem2048_sc3_load06_open50",
        "next_cpu0.25_mem2048_sc3_load00_open50",
        "next_cpu0.25_mem2048_sc3_load01_open50",
        "next_cpu0.25_mem2048_sc3_load02_open50",
        "next_cpu0.5_mem2048_sc3_load00_open50",
        "next_cpu0.5_mem2048_sc3_load06_open50",
        "next_cpu0.5_mem2048_sc3_load07_open50",
        "next_cpu0.25_mem2048_sc1_load00_open50",
        "next_cpu0.25_mem2048_sc1_load06_open50",
        "next_cpu0.25_mem2048_sc1_load07_open50",
    }


def test_a_closed_preset_plans_no_open_loop_job_nor_its_image(quick_plan):
    plan = quick_plan
    assert plan.returncode == 0, plan.output
    assert plan.jobs["compute_capacity"] == 0 and plan.jobs["compare_open_closed"] == 0
    assert "loadgen-open" not in plan.variants

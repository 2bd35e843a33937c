"""The CPU-budget model: cost per request, the decomposition, reasons, the article's implied costs; tables and charts.

Hand-made runs (synthetic run files with chosen CPU seconds and responses) go through the real
statistics, and every number is checked against the hand computation written next to it.
"""

import json
import math

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from sidecar_bench import forward as fw
from sidecar_bench import model as m
from sidecar_bench import burn_tables, model_tables, table_format
from sidecar_bench.burn_charts import burn_comparison_chart
from sidecar_bench.calibration import (
    burn_peers,
    calibration_cells,
    calibration_table,
    cell_condition,
    memory_of,
    run_path,
)
from sidecar_bench.chart_files import save_chart
from sidecar_bench.model_charts import decomposition_chart, delivered_data, write_model_charts
from sidecar_bench.conditions import Condition
from sidecar_bench.reference import load_reference
from sidecar_bench.stats import summarise_conditions, summarise_runs
from sidecar_bench.synthetic import make_meta, write_run

from workflow_helpers import ROOT

REFERENCE = ROOT / "workflow" / "reference" / "article-results.csv"


def hand_made_run(
    path, condition, *, responses, load_s, app_cpu_s, sidecar_cpu_s=None, usage_s=None, repeat=1
):
    """A run of `responses` 2xx answers over load_s seconds; the CPU window is load_s too."""
    meta = {"cgroup": {"usage_s": usage_s}} if usage_s is not None else {}
    path = write_run(
        path,
        condition,
        np.full(responses, 0.005),
        wall_s=load_s,
        load_s=load_s,
        app_cpu_s=app_cpu_s,
        repeat=repeat,
        meta_overrides=meta,
    )
    if sidecar_cpu_s is not None:
        # Rewrite the sidecars' CPU seconds in the metadata (write_run fills them from the nominal load).
        table = pq.read_table(path)
        found = json.loads(table.schema.metadata[b"sidecar_bench"])
        for proc in found["processes"]:
            if proc["role"] != "app":
                proc["cpu_s"] = sidecar_cpu_s
        pq.write_table(
            table.replace_schema_metadata({b"sidecar_bench": json.dumps(found).encode()}), path
        )
    return path


def test_cost_of_a_hand_made_run_is_its_cpu_seconds_over_its_responses(tmp_path):
    go = Condition("go", 0.5, 2048, 0, 0)
    # 2.4 s of app CPU over 10 s, 8000 responses in 10 s: 2.4 / 8000 = 0.3 ms a request.
    path = hand_made_run(
        tmp_path / "a" / "rep1.parquet", go, responses=8000, load_s=10.0, app_cpu_s=2.4
    )
    runs = summarise_runs([path])
    runs, summary = m.add_cost_columns(runs, summarise_conditions(runs, resamples=50))
    assert runs.loc[0, "app_cost_ms"] == pytest.approx(0.3)
    assert runs.loc[0, "app_cpu_s"] == pytest.approx(2.4)
    assert summary.loc[0, "app_cost_ms"] == pytest.approx(0.3)
    # One repetition: no run-to-run variation to measure, so no interval (not a zero-width one).
    assert math.isnan(summary.loc[0, "app_cost_ms_lo"]) and math.isnan(
        summary.loc[0, "app_cost_ms_hi"]
    )


def test_pooled_cost_and_its_interval_over_repetitions(tmp_path):
    go = Condition("go", 0.5, 2048, 0, 0)
    paths = [
        hand_made_run(
            tmp_path / "c" / "rep1.parquet", go, responses=8000, load_s=10.0, app_cpu_s=2.4
        ),
        hand_made_run(
            tmp_path / "c" / "rep2.parquet",
            go,
            responses=4000,
            load_s=10.0,
            app_cpu_s=2.0,
            repeat=2,
        ),
    ]
    runs = summarise_runs(paths)
    runs, summary = m.add_cost_columns(runs, summarise_conditions(runs, resamples=50))
    assert sorted(runs["app_cost_ms"]) == pytest.approx([0.3, 0.5])
    # Pooled: (2.4 + 2.0) / 20 s of CPU per s, over (8000 + 4000) / 20 s responses per s = 4.4 / 12000 s.
    assert summary.loc[0, "app_cost_ms"] == pytest.approx(4.4 / 12000 * 1000)
    # Interval: t over the two runs' costs, mean 0.4, s = 0.1414, se = 0.1, t(0.975, 1) = 12.706:
    # far wider than the runs' range, as two runs deserve (drawing them with replacement gave the range).
    # Its lower end, 0.4 - 1.27 ms, is held at 0: no cost is negative (repstats.clipped).
    lo, hi = summary.loc[0, "app_cost_ms_lo"], summary.loc[0, "app_cost_ms_hi"]
    assert lo == 0.0
    assert hi == pytest.approx(0.4 + 12.7062 * 0.1, abs=1e-4)


def test_decomposition_of_a_hand_made_run_is_the_cpu_left_over_the_calibrated_cost(tmp_path):
    with_sidecars = Condition("go", 0.5, 2048, 2, 10)
    # Quota 50 % of a core; the sidecars used 2 x 0.6 s / 10 s = 12 %; the task 4.95 s, the app 3.7 s:
    # other = 49.5 - 37 - 12 = 0.5 %. CPU left for the app = 50 - 12 - 0.5 = 37.5 % of a core.
    path = hand_made_run(
        tmp_path / "s" / "rep1.parquet",
        with_sidecars,
        responses=11000,
        load_s=10.0,
        app_cpu_s=3.7,
        sidecar_cpu_s=0.6,
        usage_s=4.95,
    )
    runs = summarise_runs([path])
    runs, summary = m.add_cost_columns(runs, summarise_conditions(runs, resamples=50))
    assert summary.loc[0, "other_cpu_pct"] == pytest.approx(0.5)
    calibration = pd.DataFrame(
        {
            "app": ["go"],
            "vcpu": [0.5],
            "app_cost_ms": [0.3],
            "app_cost_ms_lo": [0.25],
            "app_cost_ms_hi": [0.4],
        }
    )
    row = m.decompose(summary, calibration, "wall").iloc[0]
    assert row["sidecars_cpu_pct"] == pytest.approx(12.0)
    assert row["available_cpu_pct"] == pytest.approx(37.5)
    # 0.375 core-s/s / 0.0003 s a request = 1250 RPS; at the interval ends 0.375 / 0.0004 and / 0.00025.
    assert row["predicted_rps"] == pytest.approx(1250.0)
    assert row["predicted_rps_lo"] == pytest.approx(937.5)
    assert row["predicted_rps_hi"] == pytest.approx(1500.0)
    # Measured 1100 RPS: 0.88 of the prediction, outside 10 %.
    assert row["rps"] == pytest.approx(1100.0)
    assert row["ratio"] == pytest.approx(0.88)
    assert not row["within"]
    # The ratio is the product of its two factors: app CPU 37 / 37.5, and cost 0.3 / (0.37 / 1100 x 1000).
    assert row["cpu_use"] == pytest.approx(37.0 / 37.5)
    assert row["cost_factor"] == pytest.approx(0.3 / (0.37 / 1100 * 1000))
    assert row["ratio"] == pytest.approx(row["cpu_use"] * row["cost_factor"])
    assert row["reason"].startswith("cost per request rose to 0.336 ms from 0.3 ms")


def model_row(**values):
    base = {
        "ratio": 0.7,
        "cpu_use": 1.0,
        "cost_factor": 0.7,
        "app_cost_ms": 0.43,
        "calibrated_cost_ms": 0.3,
        "flags": "",
        "throttled_share": 0.99,
        "app_cpu_pct": 20.0,
        "available_cpu_pct": 20.0,
        "task_cpu_pct": 25.0,
        "vcpu": 0.25,
        "host_busy_pct": 40.0,
    }
    base.update(values)
    return base


def test_reasons_name_the_factor_further_from_one_and_the_flags():
    assert m.miss_reason(model_row(ratio=1.05)) == ""
    assert m.miss_reason(model_row()).startswith("cost per request rose")
    spread = m.miss_reason(model_row(calibrated_cost_ms_lo=0.25, calibrated_cost_ms_hi=0.5))
    assert "inside the calibrated cost's own 95 % interval (0.25-0.5 ms)" in spread
    idle = m.miss_reason(
        model_row(cpu_use=0.6, cost_factor=0.95, ratio=0.57, app_cpu_pct=12.0, task_cpu_pct=15.0)
    )
    assert idle.startswith(
        "the app used 12.0 % of a core of the 20.0 % left to it (the task left quota unused)"
    )
    host = m.miss_reason(model_row(flags="host_bound,not_steady", vcpu=2.0, host_busy_pct=97.0))
    assert host.startswith("host-bound")
    assert "throughput drifted" in host
    assert (
        m.miss_reason(model_row(ratio=math.nan, calibrated_cost_ms=math.nan))
        == "no calibration of this app at this quota"
    )


def test_an_app_that_used_no_cpu_leads_the_reason_instead_of_failing_the_report():
    # cpu_use 0 (the app's counter read nothing): as far from 1 as a factor goes, so it leads the cost's 0.7.
    idle = m.miss_reason(
        model_row(cpu_use=0.0, cost_factor=0.7, ratio=0.0, app_cpu_pct=0.0, task_cpu_pct=4.0)
    )
    assert idle.startswith(
        "the app used 0.0 % of a core of the 20.0 % left to it (the task left quota unused); "
        "cost per request rose"
    )
    assert m.miss_reason(model_row(cost_factor=0.0, cpu_use=0.5)).startswith("cost per request")
    assert m.miss_reason(model_row(cpu_use=math.nan)).startswith("cost per request rose")


def test_synthetic_runs_give_an_app_under_sidecars_above_its_quota_no_cpu_not_less():
    # 3 x 35 % beside 0.25 vCPU: the nominal loads exceed the quota; a process never has negative CPU.
    meta = make_meta(Condition("go", 0.25, 2048, 3, 35), rows=10)
    assert [p["cpu_s"] for p in meta["processes"] if p["role"] == "app"] == [0.0]


def test_share_within_and_largest_misses():
    frame = pd.DataFrame(
        {
            "condition_id": ["a", "b", "c", "d"],
            "app": ["go", "go", "next", "next"],
            "ratio": [1.0, 1.2, 0.5, 0.95],
            "within": [True, False, False, True],
        }
    )
    share = m.share_within(frame).set_index("app")
    assert share.loc["go", "share_within"] == 0.5 and share.loc["next", "within"] == 1
    assert list(m.largest_misses(frame)["condition_id"]) == ["c", "b"]


def test_the_articles_app_only_cells_against_its_stated_costs():
    ref = load_reference(REFERENCE)
    calibration = pd.DataFrame(
        {
            "app": ["go"],
            "vcpu": [0.25],
            "app_cost_ms": [0.31],
            "app_cost_ms_lo": [0.30],
            "app_cost_ms_hi": [0.32],
        }
    )
    costs = m.article_costs(ref, calibration).set_index(["app", "vcpu"])
    # Go at 0.25 vCPU served 377 RPS: at most 0.25 / 377 s = 0.663 ms a request, its stated 0.6 ms fits.
    assert costs.loc[("go", 0.25), "article_implied_cost_ms"] == pytest.approx(0.25 / 377 * 1000)
    assert costs.loc[("go", 0.25), "verdict"].startswith("consistent")
    assert costs.loc[("go", 0.25), "ours_cost_ms"] == pytest.approx(0.31)
    # Next.js at 1 vCPU: 4537 RPS is at most 0.22 ms a request, not its stated 2.0 ms.
    assert costs.loc[("next", 1.0), "article_implied_cost_ms"] == pytest.approx(1 / 4537 * 1000)
    assert costs.loc[("next", 1.0), "verdict"].startswith("cannot be CPU-limited")
    assert math.isnan(costs.loc[("next", 1.0), "ours_cost_ms"])


def test_article_delivered_estimate():
    # 0.25 vCPU, 369 RPS alone, 235 with sidecars: the sidecars took 25 x (1 - 235/369) = 9.1 % of a core.
    assert m.article_delivered_estimate(235, 369, 0.25) == pytest.approx(25 * (1 - 235 / 369))


def test_calibration_cells_of_a_matrix():
    conditions = [
        Condition("go", 0.25, 2048, 3, 5),
        Condition("go", 0.5, 2048, 0, 0),
        Condition("next", 0.25, 2048, 1, 5),
        Condition("next", 0.25, 512, 1, 5),
    ]
    cells = calibration_cells(conditions, 2.0)
    assert memory_of(conditions) == 2048
    assert [(c.condition.id, c.no_limit, c.in_matrix) for c in cells] == [
        ("go_cpu0.25_mem2048_sc0_load00", False, False),
        ("go_cpu0.5_mem2048_sc0_load00", False, True),
        ("go_cpu2_mem2048_sc0_load00", True, False),
        ("next_cpu0.25_mem2048_sc0_load00", False, False),
        ("next_cpu2_mem2048_sc0_load00", True, False),
    ]
    assert run_path("p", cells[1], 2) == "results/p/runs/go_cpu0.5_mem2048_sc0_load00/rep2.parquet"
    assert (
        run_path("p", cells[2], 1)
        == "results/p/calibration/runs/go_cpu2_mem2048_sc0_load00/rep1.parquet"
    )
    assert cell_condition(cells, "go_cpu2_mem2048_sc0_load00") == Condition("go", 2, 2048, 0, 0)
    with pytest.raises(
        ValueError, match="go_cpu1_mem2048_sc0_load00.*is not a calibration condition"
    ):
        cell_condition(cells, "go_cpu1_mem2048_sc0_load00")
    # A matrix that has the host's vCPU level already: one cell, both a level and the no-limit one.
    both = calibration_cells([Condition("go", 2, 2048, 0, 0)], 2.0)
    assert [(c.condition.id, c.no_limit, c.in_matrix) for c in both] == [
        ("go_cpu2_mem2048_sc0_load00", True, True)
    ]


def small_model(tmp_path):
    """Summaries of a few hand-made runs: Go alone at 0.25 and 2 vCPU, Go 0.25 + 3 sidecars at two loads."""
    conditions = {
        "alone": Condition("go", 0.25, 2048, 0, 0),
        "free": Condition("go", 2, 2048, 0, 0),
        "s0": Condition("go", 0.25, 2048, 3, 0),
        "s5": Condition("go", 0.25, 2048, 3, 5),
    }
    cpu = {
        "alone": (0.24 * 10, 8000),
        "free": (1.2 * 10, 40000),
        "s0": (0.24 * 10, 7900),
        "s5": (0.16 * 10, 5000),
    }
    paths = []
    for key, cond in conditions.items():
        for rep in (1, 2):
            app_s, n = cpu[key]
            paths.append(
                hand_made_run(
                    tmp_path / cond.id / f"rep{rep}.parquet",
                    cond,
                    responses=n + 100 * rep,
                    load_s=10.0,
                    app_cpu_s=app_s,
                    repeat=rep,
                )
            )
    runs = summarise_runs(paths)
    runs, summary = m.add_cost_columns(runs, summarise_conditions(runs, resamples=50))
    cal_rows = summary[summary["sidecar_count"] == 0]
    calibration = calibration_table(cal_rows, no_limit=2.0)
    matrix = summary[summary["sidecar_count"] > 0]
    return runs, matrix, calibration, m.decompose(matrix, calibration, "wall")


def test_model_tables_and_charts_are_written(tmp_path):
    runs, matrix, calibration, model = small_model(tmp_path)
    assert list(calibration["level"]) == ["0.25 vCPU", "no limit (2 vCPU = the host's CPUs)"]
    ref = load_reference(REFERENCE)
    forward = fw.forward_predict(matrix, runs)
    built = [
        model_tables.calibration_table(calibration),
        model_tables.decomposition_table(model),
        model_tables.decomposition_share_table(m.share_within(model)),
        model_tables.decomposition_misses_table(m.largest_misses(model)),
        *model_tables.forward_tables(forward),
        model_tables.article_costs_table(m.article_costs(ref, calibration)),
    ]
    written = table_format.write_table_files(built, tmp_path / "tables")
    names = {p.name for p in written}
    for name in (
        "calibration",
        "decomposition",
        "decomposition_share",
        "decomposition_misses",
        "forward",
        "forward_share",
        "forward_misses",
        "article_costs",
    ):
        assert {f"{name}.md", f"{name}.csv"} <= names
    text = (tmp_path / "tables" / "decomposition.md").read_text()
    assert "go_cpu0.25_mem2048_sc3_load05" in text and "load.sidecar_burn: wall" in text
    assert "A decomposition, not a prediction" in text and "measured / decomposed" in text
    calibration_text = (tmp_path / "tables" / "calibration.md").read_text()
    assert "t interval of the mean of the repetitions' own costs" in calibration_text
    charts = write_model_charts(
        model, forward, matrix, runs, ref, tmp_path / "charts", "wall", formats=("svg",)
    )
    assert {p.name for p in charts} == {
        "decomposition_vs_measured.svg",
        "forward_ratio_vs_load.svg",
        "sweeps_vs_delivered_load.svg",
        "retained_vs_sidecar_share.svg",
    }
    data = delivered_data(matrix, runs, ref, model)
    ours = data[(data["source"] == "ours")].set_index("nominal")
    # Ours sit at the sidecars' measured CPU (the synthetic runs burn 98 % of their nominal 3 x 5 %).
    assert ours.loc[15.0, "delivered"] == pytest.approx(14.7)
    # The article's Go sweep is placed at its estimated delivered load, from its own RPS.
    article = data[(data["source"] == "article") & data["setup"].str.startswith("Go")].set_index(
        "nominal"
    )
    assert article.loc[15.0, "delivered"] == pytest.approx(
        25 * (1 - article.loc[15.0, "rps"] / article.loc[0.0, "rps"])
    )


def test_cpu_burn_preset_is_named_in_the_model_outputs(tmp_path):
    runs, matrix, calibration, _ = small_model(tmp_path)
    model = m.decompose(matrix, calibration, "cpu")
    assert "load.sidecar_burn: cpu" in table_format.render(model_tables.decomposition_table(model))
    assert set(model["sidecar_burn"]) == {"cpu"}


def test_burn_peers_are_the_measured_presets_whose_sidecars_burn_the_other_way():
    config = {
        "load": {"sidecar_burn": "wall"},
        "presets": {
            "figure": {"sets": ["a"]},
            "article-cpu": {"sets": ["a"], "load": {"sidecar_burn": "cpu"}},
            "other-cpu": {"sets": ["a"], "load": {"sidecar_burn": "cpu"}},
        },
    }
    measured = {"results/article-cpu/summary.parquet", "results/figure/summary.parquet"}
    assert burn_peers(config, "figure", measured.__contains__) == {"article-cpu": "cpu"}
    assert burn_peers(config, "article-cpu", measured.__contains__) == {"figure": "wall"}
    assert burn_peers(config, "figure", lambda path: False) == {}


def test_wall_and_cpu_sidecars_side_by_side(tmp_path):
    _, wall, _, _ = small_model(tmp_path)
    cpu = wall.copy()
    cpu["sidecars_cpu_pct"] = cpu["total_sidecar_load_pct"]
    cpu["rps"] = cpu["rps"] * [1.0 if load == 0 else 0.5 for load in cpu["total_sidecar_load_pct"]]
    long = m.burn_comparison({("wall", "figure"): wall, ("cpu", "article-cpu"): cpu})
    assert set(long["burn"]) == {"wall", "cpu"}
    loaded = long[long["total_sidecar_load_pct"] == 15].set_index("burn")
    assert loaded.loc["cpu", "retained"] == pytest.approx(0.5 * loaded.loc["wall", "retained"])
    table = burn_tables.burn_comparison_table(long)
    assert {"sidecars' CPU % (wall)", "sidecars' CPU % (cpu)", "RPS retained (cpu)"} <= set(
        table.display.columns
    )
    ref = load_reference(REFERENCE)
    points = burn_tables.burn_breaking_points_table({"wall": wall, "cpu": cpu}, ref)
    assert set(points.data["burn"]) == {"wall", "cpu"}
    save_chart(burn_comparison_chart(long), tmp_path, "burn_comparison", ("svg",))
    assert (tmp_path / "burn_comparison.svg").stat().st_size > 0


def _values_of(spec, field):
    """Every value of field in a Vega-Lite spec's inline data, at any depth."""
    if isinstance(spec, dict):
        found = [spec[field]] if field in spec and not isinstance(spec[field], (dict, list)) else []
        return found + [v for value in spec.values() for v in _values_of(value, field)]
    if isinstance(spec, list):
        return [v for value in spec for v in _values_of(value, field)]
    return []


def test_a_p99_interval_down_to_zero_ends_at_heys_resolution_on_the_log_axes(tmp_path):
    # A t interval over three runs can reach 0 ms; on a log axis that one bar would leave the whole panel
    # without a scale (seen in a published chart). Such a bar ends at 0.1 ms, the point stays where it is.
    runs, wall, _, _ = small_model(tmp_path)
    wall["p99_ms_lo"] = 0.0
    data = delivered_data(wall, runs, load_reference(REFERENCE))
    ours = data[data["source"] == "ours"]
    assert len(ours) and (ours["p99_lo"] == 0.1).all() and (ours["p99"] > 0.1).all()
    cpu = wall.copy()
    long = m.burn_comparison({("wall", "figure"): wall, ("cpu", "figure-cpu"): cpu})
    spec = burn_comparison_chart(long).to_dict()
    lows = _values_of(spec, "p99_ms_lo")
    assert lows and min(lows) == 0.1
    assert set(_values_of(spec, "p99_ms")) == set(wall["p99_ms"])


def test_an_rps_interval_down_to_zero_leaves_the_decomposition_chart_its_log_scale(tmp_path):
    # Seen in three published sets: one cell's RPS interval reached 0, the domain started at 0 and the
    # log axes drew nothing but one point in a corner. The bar now runs to the axis's low end.
    _, _, _, model = small_model(tmp_path)
    model = model.copy()
    model["rps_lo"] = [0.0, *model["rps_lo"].iloc[1:]]
    model["predicted_rps_lo"] = [-5.0, *model["predicted_rps_lo"].iloc[1:]]
    spec = decomposition_chart(model).to_dict()
    domains = _domains(spec)
    assert domains and all(low > 0 for low, _ in domains)
    low = domains[0][0]
    assert min(_values_of(spec, "rps_lo")) == pytest.approx(low)
    assert min(_values_of(spec, "predicted_rps_lo")) == pytest.approx(low)
    assert set(_values_of(spec, "rps")) == set(model["rps"])


def test_the_decomposition_charts_three_guides_each_join_their_two_ends(tmp_path):
    # The guides were keyed by y / x computed back from their ends, which can differ in the last digit
    # between a line's two ends: the 10 % below line was not drawn in the published charts.
    _, _, _, model = small_model(tmp_path)
    spec = decomposition_chart(model).to_dict()
    ratios = _values_of(spec, "guide_ratio")
    assert sorted(ratios) == [0.9, 0.9, 1.0, 1.0, 1.1, 1.1]
    assert "'field': 'guide_ratio'" in str(spec)


def _domains(spec) -> list:
    """Every numeric scale domain [low, high] in a Vega-Lite spec."""
    if isinstance(spec, dict):
        domain = spec.get("domain")
        numeric = isinstance(domain, list) and all(isinstance(v, (int, float)) for v in domain)
        found = [domain] if numeric else []
        return found + [d for value in spec.values() for d in _domains(value)]
    if isinstance(spec, list):
        return [d for value in spec for d in _domains(value)]
    return []


@pytest.mark.workflow
def test_the_workflow_compares_with_a_measured_cpu_burn_preset(tmp_path):
    from workflow_helpers import copy_project, dry_run

    project = copy_project(tmp_path / "project")
    peer = project / "results" / "article-cpu" / "summary.parquet"
    peer.parent.mkdir(parents=True)
    peer.write_bytes(b"")
    plan = dry_run(project, "model", "--config", "preset=quick")
    assert plan.returncode == 0, plan.output
    assert plan.jobs["burn_comparison"] == 1
    assert "results/article-cpu/summary.parquet" in plan.output
    peer.unlink()
    assert dry_run(project, "model", "--config", "preset=quick").jobs["burn_comparison"] == 0


def test_a_published_set_gets_its_model_made_again_from_its_summaries(tmp_path):
    import model_report

    runs, matrix, calibration, _ = small_model(tmp_path / "runs")
    folder = tmp_path / "published"
    (folder / "calibration").mkdir(parents=True)
    cal_runs = runs[runs["sidecar_count"] == 0]
    matrix.to_csv(folder / "summary.csv", index=False)
    runs[runs["sidecar_count"] > 0].to_csv(folder / "runs_summary.csv", index=False)
    cal_runs.to_csv(folder / "calibration" / "runs_summary.csv", index=False)
    calibration.to_csv(folder / "calibration" / "calibration.csv", index=False)
    (folder / "provenance.json").write_text(json.dumps({"settings": [{"sidecar_burn": "wall"}]}))
    old = folder / "model" / "tables" / "model.md"
    old.parent.mkdir(parents=True)
    old.write_text("# the old name\n")
    (folder / "PROVENANCE.md").write_text("# The `demo` set\n\n- preset `demo`\n")
    model_report.republish(folder, REFERENCE)
    assert not old.exists()
    # The page is made again with the new charts, under the provenance's title.
    page = (folder / "report.html").read_text()
    assert "<title>The demo set</title>" in page and "forward_ratio_vs_load" in page
    assert "drawn again" not in (folder / "PROVENANCE.md").read_text()
    made = {p.name for p in (folder / "model" / "tables").iterdir()}
    assert {"decomposition.md", "forward.csv", "forward_share.md", "forward_misses.csv"} <= made
    assert (folder / "model" / "charts" / "forward_ratio_vs_load.svg").stat().st_size > 0
    forward = pd.read_csv(folder / "model" / "tables" / "forward.csv").set_index("condition_id")
    # The cost comes from every 0 % load run at 0.25 vCPU: the calibration's own (the app alone, 2.4 s of CPU over
    # 8100 and 8200 responses) and the matrix's idle-sidecar cell's (over 8000 and 8100).
    expected = np.mean([2.4 / n * 1000 for n in (8100, 8200, 8000, 8100)])
    assert forward.loc["go_cpu0.25_mem2048_sc3_load05", "cost_ms"] == pytest.approx(
        expected, rel=1e-4
    )
    assert forward.loc["go_cpu0.25_mem2048_sc3_load05", "cost_runs"] == 4
    assert forward.loc["go_cpu0.25_mem2048_sc3_load00", "role"] == "fit"
    # Its only loaded cell has no other loaded cell to learn the sidecars' delivery from: not scored.
    assert forward.loc["go_cpu0.25_mem2048_sc3_load05", "role"] == "no fit"


def test_a_set_published_without_its_calibration_runs_keeps_its_model_and_gets_its_charts_drawn_again(
    tmp_path,
):
    import model_report

    runs, matrix, calibration, _ = small_model(tmp_path / "runs")
    folder = tmp_path / "published"
    (folder / "calibration").mkdir(parents=True)
    matrix.to_csv(folder / "summary.csv", index=False)
    runs[runs["sidecar_count"] > 0].to_csv(folder / "runs_summary.csv", index=False)
    calibration.to_csv(folder / "calibration" / "calibration.csv", index=False)
    (folder / "provenance.json").write_text(json.dumps({"settings": [{"sidecar_burn": "wall"}]}))
    (folder / "PROVENANCE.md").write_text("# The `demo` set\n\n- preset `demo`\n")
    # Its model as published: made with its calibration's runs, which were not published with it.
    cal_runs = folder / "calibration" / "runs_summary.csv"
    runs[runs["sidecar_count"] == 0].to_csv(cal_runs, index=False)
    model_report.republish(folder, REFERENCE)
    cal_runs.unlink()
    tables = folder / "model" / "tables"
    published = {p.name: p.read_bytes() for p in tables.iterdir()}
    stale = folder / "model" / "charts" / "old_name.svg"
    stale.write_text("<svg/>")
    for _ in range(2):
        model_report.republish(folder, REFERENCE)
    # The tables are those it was published with (without the calibration's runs the forward costs would differ).
    assert {p.name: p.read_bytes() for p in tables.iterdir()} == published
    charts = {p.name for p in (folder / "model" / "charts").iterdir()}
    assert charts == {
        f"{name}.{ext}" for name in model_report_chart_names() for ext in ("png", "svg")
    }
    text = (folder / "PROVENANCE.md").read_text()
    assert text.count("- model charts drawn again from the published model tables at commit") == 1
    assert text.startswith("# The `demo` set\n\n- preset `demo`\n")
    assert "sweeps_vs_delivered_load" in (folder / "report.html").read_text()
    # Without a model to draw, it says which files are missing and leaves the set alone.
    (tables / "forward.csv").unlink()
    with pytest.raises(SystemExit, match="missing .*forward.csv"):
        model_report.republish(folder, REFERENCE)
    assert len(list((folder / "model" / "charts").iterdir())) == len(charts)


def model_report_chart_names():
    from sidecar_bench.model_charts import MODEL_CHART_NAMES

    return MODEL_CHART_NAMES

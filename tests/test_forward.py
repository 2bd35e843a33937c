"""The forward prediction: from a cell's settings and other cells only, scored only on cells it was not fit on.

Frames are built by hand (a summary and its runs) so every number can be checked against the hand computation
next to it.
"""

import math

import numpy as np
import pandas as pd
import pytest
from sidecar_bench import forward as fw

COST_RUNS = [0.24, 0.25, 0.26]  # ms a request in the 0 % load runs: mean 0.25, s 0.01


def cell(app, vcpu, count, load, *, rps, sidecars, app_cpu, other=0.0, memory=2048):
    cid = f"{app}_cpu{vcpu:g}_mem{memory}_sc{count}_load{load:02d}"
    return {
        "condition_id": cid,
        "app": app,
        "vcpu": vcpu,
        "memory_mb": memory,
        "sidecar_count": count,
        "sidecar_load_pct": load,
        "total_sidecar_load_pct": count * load,
        "rps": rps,
        "rps_lo": rps * 0.98,
        "rps_hi": rps * 1.02,
        "sidecars_cpu_pct": sidecars,
        "other_cpu_pct": other,
        "app_cpu_pct": app_cpu,
    }


def synthetic():
    """Go at 0.25 vCPU: alone, and 3 sidecars that deliver exactly a quarter of a nominal 5, 10, 15 and 20 %."""
    rows = [cell("go", 0.25, 0, 0, rps=1000.0, sidecars=0.0, app_cpu=25.0)]
    for load in (5, 10, 15, 20):
        delivered = 3 * load / 4
        app_cpu = 25.0 - delivered
        rows.append(
            cell(
                "go",
                0.25,
                3,
                load,
                rps=app_cpu / 100 / 0.25 * 1000,
                sidecars=delivered,
                app_cpu=app_cpu,
            )
        )
    summary = pd.DataFrame(rows)
    runs = pd.DataFrame(
        [
            {
                "condition_id": rows[0]["condition_id"],
                "repeat": i + 1,
                "app": "go",
                "vcpu": 0.25,
                "memory_mb": 2048,
                "total_sidecar_load_pct": 0.0,
                "app_cost_ms": cost,
                "other_cpu_pct": 0.0,
                "throttled_share": 0.99,
            }
            for i, cost in enumerate(COST_RUNS)
        ]
    )
    return summary, runs


def test_a_known_synthetic_case_is_predicted_exactly():
    summary, runs = synthetic()
    out = fw.forward_predict(summary, runs).set_index("condition_id")
    row = out.loc["go_cpu0.25_mem2048_sc3_load10"]
    # Cost: mean of 0.24, 0.25, 0.26 = 0.25 ms; t interval 0.25 +- 4.303 x 0.01 / sqrt(3).
    assert row["cost_ms"] == pytest.approx(0.25)
    half = 4.3027 * 0.01 / math.sqrt(3)
    assert (row["cost_ms_lo"], row["cost_ms_hi"]) == pytest.approx(
        (0.25 - half, 0.25 + half), abs=1e-5
    )
    # Delivery at 10 % from the other loads (5, 15, 20 %: 1.25, 3.75, 5 per sidecar): 2.5 per sidecar.
    assert row["delivered_per_sidecar_pct"] == pytest.approx(2.5)
    assert row["sidecars_pred_pct"] == pytest.approx(7.5)
    # (25 - 7.5 - 0) % of a core / 0.25 ms = 0.175 / 0.00025 = 700 RPS, as measured.
    assert row["predicted_rps"] == pytest.approx(700.0)
    assert row["predicted_rps_lo"] == pytest.approx(0.175 / ((0.25 + half) / 1000))
    assert row["ratio"] == pytest.approx(1.0)
    assert row["verdict"] == "within" and row["within"]
    # The top load is extrapolated from 10 and 15 %: slope 0.25 per %, inside the bounds: 5 per sidecar, exact.
    top = out.loc["go_cpu0.25_mem2048_sc3_load20"]
    assert top["sidecars_pred_pct"] == pytest.approx(15.0)
    assert top["predicted_rps"] == pytest.approx(400.0) and top["ratio"] == pytest.approx(1.0)


def test_the_prediction_never_reads_the_cells_own_cpu_or_rps():
    summary, runs = synthetic()
    target = "go_cpu0.25_mem2048_sc3_load10"
    before = fw.forward_predict(summary, runs).set_index("condition_id").loc[target]
    changed = summary.copy()
    own = changed["condition_id"] == target
    changed.loc[own, ["sidecars_cpu_pct", "app_cpu_pct", "other_cpu_pct", "rps"]] = [
        2.0,
        3.0,
        4.0,
        5.0,
    ]
    # Its own runs too, were there any in the runs frame: a loaded cell's runs are not read either.
    own_runs = pd.DataFrame(
        [
            {
                "condition_id": target,
                "repeat": 1,
                "app": "go",
                "vcpu": 0.25,
                "memory_mb": 2048,
                "total_sidecar_load_pct": 30.0,
                "app_cost_ms": 9.0,
                "other_cpu_pct": 7.0,
                "throttled_share": 1.0,
            }
        ]
    )
    after = (
        fw.forward_predict(changed, pd.concat([runs, own_runs]))
        .set_index("condition_id")
        .loc[target]
    )
    for column in (
        "sidecars_pred_pct",
        "other_pred_pct",
        "cost_ms",
        "cost_ms_lo",
        "cost_ms_hi",
        "predicted_rps",
        "predicted_rps_lo",
        "predicted_rps_hi",
    ):
        assert after[column] == pytest.approx(before[column]), column
    # What moved is the measured side and so the score: 5 RPS measured against 700 predicted.
    assert after["ratio"] == pytest.approx(5.0 / 700.0)
    assert after["verdict"] == "miss"
    # Another cell's measured delivery does move it: the fit is made of other cells.
    neighbour = summary.copy()
    neighbour.loc[
        neighbour["condition_id"] == "go_cpu0.25_mem2048_sc3_load15", "sidecars_cpu_pct"
    ] = 30.0
    moved = fw.forward_predict(neighbour, runs).set_index("condition_id").loc[target]
    assert moved["sidecars_pred_pct"] != pytest.approx(before["sidecars_pred_pct"])


def test_scoring_excludes_the_fit_cells_and_unbound_levels():
    summary, runs = synthetic()
    free = cell("go", 2.0, 0, 0, rps=6000.0, sidecars=0.0, app_cpu=145.0)
    loaded = cell("go", 2.0, 3, 10, rps=5500.0, sidecars=15.0, app_cpu=130.0)
    loaded2 = cell("go", 2.0, 3, 20, rps=5000.0, sidecars=25.0, app_cpu=120.0)
    summary = pd.concat([summary, pd.DataFrame([free, loaded, loaded2])], ignore_index=True)
    runs = pd.concat(
        [
            runs,
            pd.DataFrame(
                [
                    {
                        "condition_id": free["condition_id"],
                        "repeat": i,
                        "app": "go",
                        "vcpu": 2.0,
                        "memory_mb": 2048,
                        "total_sidecar_load_pct": 0.0,
                        "app_cost_ms": 0.24,
                        "other_cpu_pct": 0.1,
                        "throttled_share": 0.0,
                    }
                    for i in (1, 2)
                ]
            ),
        ],
        ignore_index=True,
    )
    out = fw.forward_predict(summary, runs).set_index("condition_id")
    assert out.loc["go_cpu0.25_mem2048_sc0_load00", "role"] == "fit"
    assert out.loc["go_cpu0.25_mem2048_sc0_load00", "verdict"] == ""
    assert out.loc[loaded["condition_id"], "role"] == "host-bound"
    assert set(out[out["role"] == "scored"].index) == {
        f"go_cpu0.25_mem2048_sc3_load{x:02d}" for x in (5, 10, 15, 20)
    }
    failed = summary.copy()
    failed.loc[failed["condition_id"] == "go_cpu0.25_mem2048_sc3_load05", "rps"] = math.nan
    assert (
        fw.forward_predict(failed, runs)
        .set_index("condition_id")
        .loc["go_cpu0.25_mem2048_sc3_load05", "role"]
        == "not measured"
    )
    share = fw.share_within(out.reset_index()).set_index("app")
    assert share.loc["go", "cells"] == 4
    assert share.loc["go", "fit_cells"] == 2 and share.loc["go", "host_bound_cells"] == 2


def test_delivery_points_leave_the_predicted_cell_out():
    summary, _ = synthetic()
    points = fw.delivery_points(summary, "go", 0.25, 3, leave_out="go_cpu0.25_mem2048_sc3_load10")
    assert points == [(5.0, 1.25), (15.0, 3.75), (20.0, 5.0)]


def test_delivery_interpolation_and_its_bounded_extrapolation():
    points = [(5.0, 3.0), (15.0, 4.5)]
    assert fw.delivered_per_sidecar(points, 2.5) == pytest.approx(1.5)  # through (0, 0)
    assert fw.delivered_per_sidecar(points, 10.0) == pytest.approx(3.75)
    # Above 15 %: the last slope (0.15 per %) carried on, 4.5 + 0.15 x 20 = 7.5 at 35 %, under the fraction bound
    # (4.5 / 15 x 35 = 10.5) and over the value bound (4.5).
    assert fw.delivered_per_sidecar(points, 35.0) == pytest.approx(7.5)
    # A falling last segment holds the last value; a steep one holds the last fraction.
    assert fw.delivered_per_sidecar([(5.0, 3.0), (15.0, 2.0)], 35.0) == pytest.approx(2.0)
    assert fw.delivered_per_sidecar([(5.0, 1.0), (15.0, 9.0)], 30.0) == pytest.approx(18.0)
    assert math.isnan(fw.delivered_per_sidecar([], 10.0))


@pytest.mark.parametrize(
    "lo, hi, expected",
    [
        (0.95, 1.05, "within"),
        (0.9, 1.1, "within"),
        (0.85, 1.02, "undecided"),
        (1.05, 1.2, "undecided"),
        (0.7, 0.89, "miss"),
        (1.11, 1.3, "miss"),
    ],
)
def test_within_ten_percent_needs_the_whole_ratio_interval(lo, hi, expected):
    assert fw.verdict(lo, hi) == expected


def test_one_outlier_run_does_not_set_the_cost_alone():
    _, runs = synthetic()
    # Four 0 % load cells of three runs each, one run an outlier at twice the cost.
    extra = [
        {
            "condition_id": f"go_cpu0.25_mem2048_sc{n}_load00",
            "repeat": r,
            "app": "go",
            "vcpu": 0.25,
            "memory_mb": 2048,
            "total_sidecar_load_pct": 0.0,
            "app_cost_ms": c,
            "other_cpu_pct": 0.0,
            "throttled_share": 0.99,
        }
        for n in (1, 2, 3)
        for r, c in zip((1, 2, 3), COST_RUNS)
    ]
    runs = pd.concat([runs, pd.DataFrame(extra)], ignore_index=True)
    runs.loc[0, "app_cost_ms"] = 0.48
    fit = fw.fit_cost(runs, "go", 0.25)
    assert fit.runs == 12
    # The mean moves by (0.48 - 0.24) / 12 = 0.02 ms, and the interval says how sure it is.
    assert fit.value == pytest.approx(0.27)
    assert fit.lo < 0.25 < fit.hi
    assert np.isfinite([fit.lo, fit.hi]).all()


def test_a_run_whose_app_counter_read_no_cpu_gives_no_cost_to_the_fit():
    summary, runs = synthetic()
    runs["app_cost_ms"] = [0.0, 0.25, 0.26]  # the first run's app CPU read 0
    fit = fw.fit_cost(runs, "go", 0.25)
    assert (fit.runs, fit.value) == (2, pytest.approx(0.255))
    # Every run without: no fit, so no prediction (not an infinite one).
    runs["app_cost_ms"] = 0.0
    assert fw.fit_cost(runs, "go", 0.25) is None
    row = (
        fw.forward_predict(summary, runs)
        .set_index("condition_id")
        .loc["go_cpu0.25_mem2048_sc3_load10"]
    )
    assert math.isnan(row["predicted_rps"])


def test_a_cost_interval_reaching_below_zero_leaves_the_prediction_unbounded_above():
    summary, runs = synthetic()
    runs["app_cost_ms"] = [
        0.05,
        0.25,
        0.9,
    ]  # three runs far apart: mean 0.4, t interval from below zero
    row = (
        fw.forward_predict(summary, runs)
        .set_index("condition_id")
        .loc["go_cpu0.25_mem2048_sc3_load10"]
    )
    assert (
        row["cost_ms_lo"] == 0.0
    )  # the t interval reaches below zero; no cost can (repstats.clipped)
    assert math.isinf(row["predicted_rps_hi"]) and row["ratio_lo"] == 0.0
    assert row["verdict"] == "undecided"

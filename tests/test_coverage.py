"""The condition summary's 95 % intervals cover the truth 95 % of the time, checked through its own code.

Each simulated condition has a known truth: the value a run gives on average.
Its runs are per-run rows (a runs_summary as summarise_runs writes it, from one
synthetic run file) whose RPS, P99 and share slower than one CFS period are
drawn around that truth: a run-to-run factor (a new container lands
differently on the CPUs; CV 0, 3, 7 or 15 %) times counting noise (Poisson
responses in a 10 s window, binomial slow responses, a P99 read off ~5000
responses). They go through stats.summarise_conditions, the function the
workflow's aggregate_runs calls, and the ratio of two conditions through
stats.condition_ratio, what the tables and charts call.

400 conditions per case (CV x repetitions) and three metrics each: 1200 interval
checks per case, a binomial standard error near 0.6 %, so 0.93-0.97 is over
three standard errors either side of 0.95; per metric over all cases, 4800
checks. Seeds are fixed: the test is deterministic.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sidecar_bench import stats
from sidecar_bench.conditions import Condition
from sidecar_bench.synthetic import run_path, write_run

CONDITIONS = 400
CVS = (0.0, 0.03, 0.07, 0.15)
REPS = (2, 3, 5)
WINDOW_S = 10.0
METRICS = ("rps", "p99_ms", "slow_1p_share")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> dict:
    """One real per-run row (from a synthetic run file) for the simulated runs to copy."""
    c = Condition("go", 0.25, 2048, 3, 5)
    path = write_run(
        run_path(tmp_path_factory.mktemp("runs"), c.id, 1),
        c,
        [0.002] * 990 + [0.15] * 10,
        wall_s=WINDOW_S,
    )
    return stats.summarise_run(path)


def simulate(template: dict, cv: float, reps: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-run rows of CONDITIONS conditions and their truths (one row per condition)."""
    rng = np.random.default_rng(seed)
    truth = pd.DataFrame(
        {
            "condition_id": [f"sim{i:04d}" for i in range(CONDITIONS)],
            "rps": rng.uniform(50, 1500, CONDITIONS),
            "p99_ms": rng.uniform(20, 300, CONDITIONS),
            "slow_1p_share": rng.uniform(0.005, 0.2, CONDITIONS),
        }
    )
    shape = (CONDITIONS, reps)

    def factor():  # the run-to-run variation, drawn apart for each metric
        return np.clip(1.0 + rng.normal(0.0, cv, shape), 0.01, None)

    rps = rng.poisson(truth["rps"].to_numpy()[:, None] * factor() * WINDOW_S) / WINDOW_S
    # A P99 read off ~5000 responses varies by about 1 % within a run.
    p99 = truth["p99_ms"].to_numpy()[:, None] * factor() * (1.0 + rng.normal(0.0, 0.01, shape))
    responses = 5000
    slow = (
        rng.binomial(
            responses, np.clip(truth["slow_1p_share"].to_numpy()[:, None] * factor(), 0, 1)
        )
        / responses
    )
    rows = []
    for i, cid in enumerate(truth["condition_id"]):
        for r in range(reps):
            rows.append(
                {
                    **template,
                    "condition_id": cid,
                    "repeat": r + 1,
                    "rps": rps[i, r],
                    "p99_ms": p99[i, r],
                    "slow_1p_share": slow[i, r],
                }
            )
    return pd.DataFrame(rows), truth


@pytest.fixture(scope="module")
def covered(template) -> pd.DataFrame:
    """Per case and metric: how many of the conditions' intervals hold their truth."""
    out = []
    for cv in CVS:
        for reps in REPS:
            per_run, truth = simulate(template, cv, reps, seed=int(cv * 1000) * 10 + reps)
            summary = (
                stats.summarise_conditions(per_run)
                .set_index("condition_id")
                .loc[truth["condition_id"]]
            )
            assert (summary["interval_method"] == "t over runs").all()
            for metric in METRICS:
                inside = (summary[f"{metric}_lo"].to_numpy() <= truth[metric].to_numpy()) & (
                    truth[metric].to_numpy() <= summary[f"{metric}_hi"].to_numpy()
                )
                out.append(
                    {
                        "cv": cv,
                        "reps": reps,
                        "metric": metric,
                        "inside": int(inside.sum()),
                        "checks": len(inside),
                    }
                )
            # Ratios of two conditions (retention, memory gain, Go vs Next.js): pairs of the simulated ones.
            rows = summary.to_dict("records")
            true_ratio = truth["rps"].to_numpy()
            inside = 0
            for i in range(0, CONDITIONS, 2):
                found = stats.condition_ratio(rows[i], rows[i + 1], "rps")
                inside += found.contains(true_ratio[i] / true_ratio[i + 1])
            out.append(
                {
                    "cv": cv,
                    "reps": reps,
                    "metric": "rps ratio",
                    "inside": int(inside),
                    "checks": CONDITIONS // 2,
                }
            )
    return pd.DataFrame(out)


@pytest.mark.parametrize("reps", REPS)
@pytest.mark.parametrize("cv", CVS)
def test_each_case_covers_95_percent(covered, cv, reps):
    case = covered[
        (covered["cv"] == cv) & (covered["reps"] == reps) & covered["metric"].isin(METRICS)
    ]
    share = case["inside"].sum() / case["checks"].sum()
    assert 0.93 <= share <= 0.97, case


@pytest.mark.parametrize("metric", METRICS)
def test_each_metric_covers_95_percent_over_all_cases(covered, metric):
    rows = covered[covered["metric"] == metric]
    assert 0.93 <= rows["inside"].sum() / rows["checks"].sum() <= 0.97, rows


@pytest.mark.parametrize("reps", REPS)
def test_the_ratio_of_two_conditions_covers_95_percent(covered, reps):
    # Welch's interval over-covers a little with 2-3 runs a side (tests/test_repstats.py says why).
    rows = covered[(covered["metric"] == "rps ratio") & (covered["reps"] == reps)]
    assert 0.93 <= rows["inside"].sum() / rows["checks"].sum() <= 0.985, rows


def test_the_old_bootstrap_range_would_not_cover(covered, template):
    # What this replaces: an interval as wide as the runs' range covers far less than 95 % with 3 runs at 7 %.
    per_run, truth = simulate(template, 0.07, 3, seed=99)
    spans = per_run.groupby("condition_id")["rps"].agg(["min", "max"]).loc[truth["condition_id"]]
    inside = (spans["min"].to_numpy() <= truth["rps"].to_numpy()) & (
        truth["rps"].to_numpy() <= spans["max"].to_numpy()
    )
    assert inside.mean() < 0.85

"""The forward prediction: a cell's RPS from its settings and other cells' measurements only.

The decomposition (model.py) reads a cell's own measured sidecar and app CPU, so in a
quota-bound cell it reproduces the cell by construction. This module predicts instead:
for a cell (app, vCPU, memory, sidecar count n, per-sidecar nominal load L) it reads
the cell's settings and never its own measured CPU or RPS.

- Cost per request (`cost_ms`, `_lo`, `_hi`): fitted on the app's 0 % load cells at
  the same vCPU (the calibration: the app alone, and the same app beside idle
  sidecars, which burn under 0.2 % of a core), at the memory limit most of those
  runs have. Value and 95 % interval: the t interval of the mean over all their runs'
  own costs (repstats.mean_interval), so one outlier run is one of many (the
  article set has 12 such runs per app and vCPU), and its weight is visible in the
  interval rather than hidden in a point.
- Other processes' CPU (`other_pred_pct`): the mean of the same runs' other CPU.
- Sidecars' delivered CPU (`sidecars_pred_pct`) = n x d(L): d is the CPU one sidecar
  delivers at nominal load L, interpolated linearly in L between the other loaded
  cells of the same app, vCPU and sidecar count (of any count when there is no other
  cell with n sidecars; any memory; each cell gives its measured sidecar CPU / n at
  its L, cells at the same L are averaged), through
  (0, 0) below the smallest L; above the largest L the last segment's slope carries
  on, kept between holding the last value and holding the last delivered/nominal
  fraction (wall-clock sidecars deliver less and less of their nominal load as it
  grows when the quota is tight: beside Go at 0.25 vCPU 58 % of it at 5 %, 12 % at
  35 %; beside Go at 1 vCPU 35-58 % at every load). The predicted cell is never among them.
- Predicted RPS = (100 x vCPU - sidecars_pred - other_pred) / 100 / cost; its
  interval is that at the cost interval's ends (the delivery's own uncertainty is
  not carried).

Scoring (declared split, leave-one-out):
- fit cells: the 0 % load cells (they set the cost); never scored.
- scored cells: every loaded cell at a quota-bound level, each predicted from a fit
  that leaves it out (its own sidecar CPU is not among the delivery points).
- not scored: levels whose 0 % load runs were not throttled (median throttled share
  < 0.5: on this 2-core host, 2 vCPU), where the quota does not set the app's CPU
  and this model has no host model; cells with no fit (no 0 % load cell or no other
  loaded cell of that app and vCPU); cells with no measured RPS.
- Within 10 %, with the calibration's interval: ratio = measured / predicted RPS and
  its interval [measured / predicted_hi, measured / predicted_lo]. "within" when the
  whole ratio interval lies in [0.9, 1.1]; "miss" when all of it lies outside;
  "undecided" when it straddles an edge (the cost's interval alone could make it
  either). The share within 10 % counts "within" only. The measured RPS is taken as
  its mean over the cell's runs; its own run-to-run spread is not added.

Why a miss (read after the prediction, from the cell's own measurements):
ratio = sidecar_factor x use_factor x cost_factor, exactly, with
sidecar_factor = CPU left measured / CPU left predicted (did the sidecars and the
other processes take what was predicted?), use_factor = app CPU / CPU left measured
(did the app get what was left?) and cost_factor = predicted cost / the cell's cost
(app CPU / RPS: did a request cost what it did at 0 % load?). The factor furthest
from 1 names the miss.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from .repstats import as_float as _f
from .repstats import clipped, mean_interval

WITHIN = 0.10
THROTTLED_LEVEL = (
    0.5  # median throttled share of the 0 % load runs at and above which the quota binds
)
SCHEME = (
    "leave-one-out: cost from the app's 0 % load cells at that vCPU (not scored); sidecar delivery from "
    "the other loaded cells of that app, vCPU and sidecar count"
)
FACTORS = {
    "sidecars": "sidecars' delivered CPU",
    "use": "app's use of the CPU left",
    "cost": "cost per request",
}

FORWARD_COLUMNS = [
    "condition_id",
    "app",
    "vcpu",
    "memory_mb",
    "sidecar_count",
    "sidecar_load_pct",
    "total_sidecar_load_pct",
    "role",
    "cost_ms",
    "cost_ms_lo",
    "cost_ms_hi",
    "cost_runs",
    "cost_memory_mb",
    "other_pred_pct",
    "delivered_per_sidecar_pct",
    "delivery_points",
    "sidecars_pred_pct",
    "available_pred_pct",
    "predicted_rps",
    "predicted_rps_lo",
    "predicted_rps_hi",
    "rps",
    "rps_lo",
    "rps_hi",
    "ratio",
    "ratio_lo",
    "ratio_hi",
    "verdict",
    "within",
    "sidecars_cpu_pct",
    "other_cpu_pct",
    "app_cpu_pct",
    "cell_cost_ms",
    "sidecar_factor",
    "use_factor",
    "cost_factor",
    "leading_factor",
    "reason",
]


@dataclass(frozen=True)
class CostFit:
    """The cost per request of an app at a vCPU, fitted on its 0 % load runs."""

    value: float
    lo: float
    hi: float
    runs: int
    memory_mb: float
    other_pct: float
    throttled_share: float
    cells: tuple[str, ...]

    @property
    def quota_bound(self) -> bool:
        return self.throttled_share >= THROTTLED_LEVEL


def _numeric(frame: pd.DataFrame, column: str) -> pd.Series:
    if column not in frame.columns:
        return pd.Series(np.nan, index=frame.index)
    return pd.to_numeric(frame[column], errors="coerce")


def _run_costs(runs: pd.DataFrame) -> pd.Series:
    """Each run's cost, ms of app CPU per successful response (its app_cost_ms, or app CPU % / RPS)."""
    if "app_cost_ms" in runs.columns:
        return _numeric(runs, "app_cost_ms")
    return _numeric(runs, "app_cpu_pct") / 100.0 / _numeric(runs, "rps") * 1000.0


def zero_load_runs(per_run: pd.DataFrame) -> pd.DataFrame:
    """The runs of 0 % load cells (app alone or beside idle sidecars), each (condition, repeat) once."""
    zero = per_run[np.isclose(_numeric(per_run, "total_sidecar_load_pct").fillna(-1), 0.0)]
    keys = [c for c in ("condition_id", "repeat") if c in zero.columns]
    return zero.drop_duplicates(subset=keys) if keys else zero


def fit_cost(per_run: pd.DataFrame, app: str, vcpu: float) -> CostFit | None:
    """The cost fit of an app at a vCPU from its 0 % load runs, at the memory most of them have (ties: larger)."""
    zero = zero_load_runs(per_run)
    rows = zero[(zero["app"] == app) & np.isclose(_numeric(zero, "vcpu"), float(vcpu))]
    costs = _run_costs(rows)
    # A request always costs CPU: a run whose app counter read none (0 ms a request) has no cost to give.
    rows = rows[np.isfinite(costs) & (costs > 0)]
    if rows.empty:
        return None
    counts = rows["memory_mb"].value_counts()
    memory = max(counts.index, key=lambda m: (counts[m], float(m)))
    rows = rows[rows["memory_mb"] == memory]
    estimate = clipped(mean_interval(_run_costs(rows).to_numpy(float)))
    return CostFit(
        estimate.value,
        estimate.lo,
        estimate.hi,
        estimate.n,
        float(memory),
        float(_numeric(rows, "other_cpu_pct").mean()),
        float(_numeric(rows, "throttled_share").median()),
        tuple(sorted(rows["condition_id"].unique())),
    )


# What delivery_points reads of the summary.
DELIVERY_COLUMNS = (
    "condition_id",
    "app",
    "vcpu",
    "sidecar_count",
    "sidecar_load_pct",
    "sidecars_cpu_pct",
)


def delivery_points(
    summary: pd.DataFrame, app: str, vcpu: float, sidecar_count: float, leave_out: str
) -> list[tuple[float, float]]:
    """(per-sidecar nominal load, mean delivered CPU per sidecar) of the loaded cells of an app and vCPU, all but
    `leave_out`, sorted by load: those with the same sidecar count when there are any, else every count.
    On the columns' arrays: it is asked once a cell, and each selection of the frame copied every column."""
    count = _numeric(summary, "sidecar_count").to_numpy(float)
    load = _numeric(summary, "sidecar_load_pct").to_numpy(float)
    with np.errstate(invalid="ignore"):
        rows = (
            (summary["app"] == app).to_numpy(dtype=bool, na_value=False)
            & np.isclose(_numeric(summary, "vcpu").to_numpy(float), float(vcpu))
            & (count > 0)
            & (load > 0)
            & (summary["condition_id"] != leave_out).to_numpy(dtype=bool, na_value=True)
        )
    same = rows & np.isclose(count, float(sidecar_count))
    rows = same if same.any() else rows
    per_sidecar = _numeric(summary, "sidecars_cpu_pct").to_numpy(float)[rows] / count[rows]
    load = load[rows]
    kept = ~(np.isnan(per_sidecar) | np.isnan(load))
    means = pd.Series(per_sidecar[kept]).groupby(load[kept], sort=True).mean()
    return [(float(level), float(value)) for level, value in means.items()]


def delivered_per_sidecar(points: list[tuple[float, float]], load: float) -> float:
    """CPU one sidecar delivers at a nominal load; NaN without points.

    Linear between the points, through (0, 0) below the smallest. Above the largest, the last segment's
    slope carried on, kept between holding the last value (a sidecar never delivers less at a higher load)
    and holding the last delivered/nominal fraction (nor a larger share of it).
    """
    load = _f(load)
    if math.isnan(load):
        return math.nan
    if load <= 0:
        return 0.0
    if not points:
        return math.nan
    loads = [0.0] + [p[0] for p in points]
    values = [0.0] + [p[1] for p in points]
    if load <= loads[-1]:
        return float(np.interp(load, loads, values))
    slope = (values[-1] - values[-2]) / (loads[-1] - loads[-2])
    extended = values[-1] + slope * (load - loads[-1])
    return float(min(max(extended, values[-1]), values[-1] / loads[-1] * load))


def _rps(available_pct: float, cost_ms: float) -> float:
    if math.isnan(cost_ms) or math.isnan(available_pct):
        return math.nan
    if cost_ms <= 0:
        return (
            math.inf
        )  # a t interval's lower end below zero (few, spread runs): no upper bound on the RPS
    return max(available_pct, 0.0) / 100.0 / (cost_ms / 1000.0)


def verdict(ratio_lo: float, ratio_hi: float, within: float = WITHIN) -> str:
    """ "within", "miss" or "undecided" for a ratio interval against [1 - within, 1 + within]."""
    if math.isnan(ratio_lo) or math.isnan(ratio_hi):
        return ""
    if 1 - within <= ratio_lo and ratio_hi <= 1 + within:
        return "within"
    if ratio_hi < 1 - within or ratio_lo > 1 + within:
        return "miss"
    return "undecided"


def predict_cell(
    cond: Mapping[str, Any],
    summary: pd.DataFrame,
    per_run: pd.DataFrame,
    costs: Mapping[tuple[str, float], CostFit | None] | None = None,
) -> dict[str, Any]:
    """The forward prediction of one condition (module docstring). Reads the cell's settings only; its measured
    values are copied beside the prediction to score and explain it, never into it."""
    app, vcpu, cid = str(cond["app"]), _f(cond["vcpu"]), str(cond["condition_id"])
    count, load = _f(cond.get("sidecar_count")), _f(cond.get("sidecar_load_pct"))
    total = _f(cond.get("total_sidecar_load_pct"))
    fit = (
        costs[(app, vcpu)]
        if costs is not None and (app, vcpu) in costs
        else fit_cost(per_run, app, vcpu)
    )
    points = delivery_points(summary, app, vcpu, count, leave_out=cid)
    per_sidecar = delivered_per_sidecar(points, load) if count > 0 else 0.0
    sidecars_pred = count * per_sidecar if count > 0 else 0.0
    row: dict[str, Any] = {
        c: cond.get(c)
        for c in (
            "condition_id",
            "app",
            "vcpu",
            "memory_mb",
            "sidecar_count",
            "sidecar_load_pct",
            "total_sidecar_load_pct",
            "rps",
            "rps_lo",
            "rps_hi",
            "sidecars_cpu_pct",
            "other_cpu_pct",
            "app_cpu_pct",
        )
    }
    row.update(
        {
            "delivered_per_sidecar_pct": per_sidecar,
            "delivery_points": len(points),
            "sidecars_pred_pct": sidecars_pred,
        }
    )
    if fit is None:
        row.update(
            {
                "role": "no fit",
                "reason": "no 0 % load cell of this app at this vCPU: no cost to predict with",
            }
        )
        return row
    quota = 100.0 * vcpu
    available = quota - sidecars_pred - fit.other_pct
    row.update(
        {
            "cost_ms": fit.value,
            "cost_ms_lo": fit.lo,
            "cost_ms_hi": fit.hi,
            "cost_runs": fit.runs,
            "cost_memory_mb": fit.memory_mb,
            "other_pred_pct": fit.other_pct,
            "available_pred_pct": available,
            "predicted_rps": _rps(available, fit.value),
            "predicted_rps_lo": _rps(available, fit.hi),
            "predicted_rps_hi": _rps(available, fit.lo),
        }
    )
    measured = _f(cond.get("rps"))
    predicted = row["predicted_rps"]
    row["ratio"] = measured / predicted if predicted else math.nan
    row["ratio_lo"] = measured / row["predicted_rps_hi"] if row["predicted_rps_hi"] else math.nan
    row["ratio_hi"] = measured / row["predicted_rps_lo"] if row["predicted_rps_lo"] else math.nan
    if cid in fit.cells or (not math.isnan(total) and total <= 0):
        row.update({"role": "fit", "reason": "0 % load: fits the cost, not scored"})
    elif not fit.quota_bound:
        row.update(
            {
                "role": "host-bound",
                "reason": (
                    f"not scored: the app's 0 % load runs at this vCPU were "
                    f"throttled in {fit.throttled_share:.0%} of periods, so the "
                    "quota does not set its CPU (host-bound level)"
                ),
            }
        )
    elif math.isnan(measured) or measured <= 0:
        row.update(
            {
                "role": "not measured",
                "reason": "no measured RPS (every repetition failed): nothing to score",
            }
        )
    elif math.isnan(sidecars_pred):
        row.update(
            {
                "role": "no fit",
                "reason": "no other loaded cell of this app at this vCPU: no delivery to "
                "predict with",
            }
        )
    else:
        row["role"] = "scored"
    _explain(row)
    return row


def _explain(row: dict[str, Any], within: float = WITHIN) -> None:
    """Verdict, the three factors and the reason, from the cell's own measurements (after the prediction)."""
    quota = 100.0 * _f(row["vcpu"])
    sidecars, other, app = (
        _f(row.get("sidecars_cpu_pct")),
        _f(row.get("other_cpu_pct")),
        _f(row.get("app_cpu_pct")),
    )
    left = (
        quota - (0.0 if math.isnan(sidecars) else sidecars) - (0.0 if math.isnan(other) else other)
    )
    measured = _f(row.get("rps"))
    cell_cost = app / 100.0 / measured * 1000.0 if measured else math.nan
    pred_left = _f(row.get("available_pred_pct"))
    row["cell_cost_ms"] = cell_cost
    row["sidecar_factor"] = left / pred_left if pred_left > 0 else math.nan
    row["use_factor"] = app / left if left > 0 else math.nan
    row["cost_factor"] = _f(row.get("cost_ms")) / cell_cost if cell_cost else math.nan
    if row.get("role") != "scored":
        row.update({"verdict": "", "within": False, "leading_factor": ""})
        return
    row["verdict"] = verdict(_f(row["ratio_lo"]), _f(row["ratio_hi"]), within)
    row["within"] = row["verdict"] == "within"
    factors = {
        "sidecars": row["sidecar_factor"],
        "use": row["use_factor"],
        "cost": row["cost_factor"],
    }
    finite = {k: v for k, v in factors.items() if v and not math.isnan(v) and v > 0}
    if row["verdict"] == "within" or not finite:
        row.update({"leading_factor": "", "reason": ""})
        return
    lead = max(finite, key=lambda k: abs(math.log(finite[k])))
    row["leading_factor"] = lead
    texts = {
        "sidecars": (
            f"the sidecars and other processes took {quota - left:.1f} % of a core, "
            f"{quota - pred_left:.1f} % predicted from the other cells at this vCPU "
            f"(sidecar factor {factors['sidecars']:.2f})"
        ),
        "use": (
            f"the app used {app:.1f} % of a core of the {left:.1f} % left to it "
            f"(use factor {factors['use']:.2f})"
        ),
        "cost": (
            f"a request cost {cell_cost:.3g} ms, {_f(row['cost_ms']):.3g} ms "
            f"[{_f(row['cost_ms_lo']):.3g}-{_f(row['cost_ms_hi']):.3g}] at 0 % load"
            + (
                f" (fitted at {_f(row['cost_memory_mb']):g} MB, this cell has {_f(row['memory_mb']):g} MB)"
                if _f(row["memory_mb"]) != _f(row.get("cost_memory_mb"))
                else ""
            )
            + f" (cost factor {factors['cost']:.2f})"
        ),
    }
    ordered = sorted(finite, key=lambda k: abs(math.log(finite[k])), reverse=True)
    reason = (
        "; ".join(texts[k] for k in ordered if abs(math.log(finite[k])) > math.log(1 + within / 2))
        or f"no single factor beyond 5 %; the largest is the {FACTORS[lead]} ({finite[lead]:.2f})"
    )
    if row["verdict"] == "undecided":
        reason = (
            f"undecided: the ratio's interval {_f(row['ratio_lo']):.2f}-{_f(row['ratio_hi']):.2f} "
            f"straddles the 10 % band; {reason}"
        )
    row["reason"] = reason


def forward_predict(
    summary: pd.DataFrame, per_run: pd.DataFrame, calibration_runs: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per condition of the summary: the forward prediction, its verdict and the reason of a miss.

    summary: the condition summary (settings, measured rps and CPU columns; the CPU columns are read for the
    other cells' delivery and to explain, never for the cell's own prediction); per_run: the runs summary;
    calibration_runs: the calibration's own runs (app alone at levels the matrix lacks), when there are any.
    """
    runs = (
        per_run
        if calibration_runs is None or calibration_runs.empty
        else pd.concat([per_run, calibration_runs], ignore_index=True)
    )
    costs = {
        key: fit_cost(runs, *key)
        for key in {(str(a), float(v)) for a, v in zip(summary["app"], summary["vcpu"])}
    }
    # The other cells are read for their delivery only: those columns alone (each cell's selection copies them).
    delivery = summary[[c for c in DELIVERY_COLUMNS if c in summary.columns]]
    rows = [predict_cell(cond, delivery, runs, costs) for _, cond in summary.iterrows()]
    return pd.DataFrame(rows).reindex(columns=FORWARD_COLUMNS)


def share_within(forward: pd.DataFrame) -> pd.DataFrame:
    """Per app: scored cells, within / undecided / miss, the share within, the median ratio, misses by factor."""
    out = []
    for app, group in forward.groupby("app", sort=True):
        scored = group[group["role"] == "scored"]
        counts = scored["verdict"].value_counts()
        not_within = scored[scored["verdict"] != "within"]
        by_factor = not_within["leading_factor"].value_counts()
        out.append(
            {
                "app": app,
                "cells": len(scored),
                "within": int(counts.get("within", 0)),
                "undecided": int(counts.get("undecided", 0)),
                "miss": int(counts.get("miss", 0)),
                "share_within": float(counts.get("within", 0) / len(scored))
                if len(scored)
                else math.nan,
                "point_within": int((np.abs(scored["ratio"].astype(float) - 1) <= WITHIN).sum()),
                "median_ratio": float(scored["ratio"].median()) if len(scored) else math.nan,
                "not_within_sidecars": int(by_factor.get("sidecars", 0)),
                "not_within_use": int(by_factor.get("use", 0)),
                "not_within_cost": int(by_factor.get("cost", 0)),
                "fit_cells": int((group["role"] == "fit").sum()),
                "host_bound_cells": int((group["role"] == "host-bound").sum()),
                "no_fit_cells": int((group["role"] == "no fit").sum()),
            }
        )
    return pd.DataFrame(
        out,
        columns=[
            "app",
            "cells",
            "within",
            "undecided",
            "miss",
            "share_within",
            "point_within",
            "median_ratio",
            "not_within_sidecars",
            "not_within_use",
            "not_within_cost",
            "fit_cells",
            "host_bound_cells",
            "no_fit_cells",
        ],
    )


def misses(forward: pd.DataFrame) -> pd.DataFrame:
    """The scored cells not within 10 % (miss, then undecided), furthest first by |log ratio|."""
    rows = forward[(forward["role"] == "scored") & (forward["verdict"] != "within")].copy()
    rows["distance"] = np.abs(np.log(rows["ratio"].astype(float)))
    rows["order"] = (rows["verdict"] != "miss").astype(int)
    return rows.sort_values(["order", "distance"], ascending=[True, False]).drop(
        columns=["distance", "order"]
    )

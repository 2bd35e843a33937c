"""The CPU-budget decomposition: each cell's RPS split into the CPU the app got and what a request cost it.

A decomposition, not a prediction: it reads the cell's own measured sidecar and
other CPU, and in a quota-bound cell (the task uses its whole quota) "measured /
predicted" below equals the cost ratio to within about 1.5 %: the sidecar input
carries no information the cell did not already show. Both parts are measured
and useful (did the app get the CPU left to it? did a request cost what it cost
alone?). The prediction from a cell's settings and other cells only is
forward.py.

Definitions (the summary, tables and charts keep to these):

- App CPU rate: the app process's CPU seconds from the kernel's per-process
  accounting over the CPU window, per second of that window (`app_cpu_pct` / 100).
- Cost per request (`app_cost_ms`) = app CPU rate / RPS, in ms of CPU per
  successful response: the app's CPU seconds over its successful responses,
  each counted per second of its own window (the CPU window and hey's load
  window differ by about 0.1 s). A condition's cost pools its repetitions:
  sum of app CPU seconds / sum of CPU-window seconds, over sum of successful
  responses / sum of load-window seconds, as RPS pools them.
- Its interval (`app_cost_ms_lo`, `_hi`): the 95 % t interval of the mean of
  the repetitions' own costs (repstats.mean_interval: the runs are the
  independent units, with the small-sample penalty of t). With one repetition
  there is none (NaN). Drawing 3 repetitions with replacement, as before, gave
  about their range: a ~73 % interval.
- Other processes (`other_cpu_pct`) = task CPU (the cgroup's usage) - app -
  sidecars, in % of one core: the entrypoint, a shell, whatever else the task
  ran. It can read slightly below zero (tick accounting), and is used as read.
- CPU the app could get (`available_cpu_pct`) = the quota (100 x vCPU) - what
  the sidecars and the other processes of the task really used (% of one core).
- Decomposed RPS (column `predicted_rps`, kept under its old name) = available
  CPU / calibrated cost at the condition's quota (the app alone at that vCPU,
  calibration.py). `ratio` = measured RPS / that; |ratio - 1| <= 0.10 says the
  cell's CPU left and the calibrated cost account for it within 10 %, not that it
  was predicted.
- The ratio splits exactly into two measured factors:
  ratio = cpu_use x cost_factor, with cpu_use = app CPU / available CPU (did
  the app get the CPU left to it?) and cost_factor = calibrated cost / the
  cell's own cost (did each request cost what it cost alone?). The reason of a
  miss names the factor that is further from 1, with the flags that bear on it.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from .repstats import as_float as _f
from .repstats import clipped, mean_interval

WITHIN = 0.10  # a prediction within 10 % of the measured RPS explains the cell
# The article's stated CPU cost per request of its two apps (its text: 0.6 ms Go API, 2.0 ms Next.js SSR).
ARTICLE_STATED_COST_MS = {"go": 0.6, "next": 2.0}
RUN_COST_COLUMNS = ["app_cpu_s", "other_cpu_pct", "app_cost_ms"]
CONDITION_COST_COLUMNS = ["other_cpu_pct", "app_cost_ms", "app_cost_ms_lo", "app_cost_ms_hi"]


# --- cost per request -------------------------------------------------------------------------------------


def run_cost_ms(app_cpu_pct: float, rps: float) -> float:
    """ms of app CPU per successful response: (app CPU % / 100) / RPS x 1000."""
    app_cpu_pct, rps = _f(app_cpu_pct), _f(rps)
    if not rps or math.isnan(rps) or math.isnan(app_cpu_pct):
        return math.nan
    return app_cpu_pct / 100.0 / rps * 1000.0


def with_run_costs(per_run: pd.DataFrame) -> pd.DataFrame:
    """A copy of a runs summary with app_cpu_s, other_cpu_pct and app_cost_ms per run."""
    out = per_run.copy()
    app = pd.to_numeric(out["app_cpu_pct"], errors="coerce")
    out["app_cpu_s"] = app / 100.0 * pd.to_numeric(out["cgroup_wall_s"], errors="coerce")
    sidecars = pd.to_numeric(out["sidecars_cpu_pct"], errors="coerce").fillna(0.0)
    out["other_cpu_pct"] = pd.to_numeric(out["task_cpu_pct"], errors="coerce") - app - sidecars
    out["app_cost_ms"] = [run_cost_ms(a, r) for a, r in zip(app, out["rps"])]
    return out


def pooled_cost_ms(
    app_cpu_s: np.ndarray, cpu_wall_s: np.ndarray, successful: np.ndarray, load_s: np.ndarray
) -> float:
    """Pooled cost of some repetitions: (sum app CPU s / sum CPU window s) / (sum responses / sum load s) x 1000."""
    app_cpu_s, cpu_wall_s = np.asarray(app_cpu_s, float), np.asarray(cpu_wall_s, float)
    successful, load_s = np.asarray(successful, float), np.asarray(load_s, float)
    if successful.sum() <= 0 or cpu_wall_s.sum() <= 0 or load_s.sum() <= 0:
        return math.nan
    return float(app_cpu_s.sum() / cpu_wall_s.sum() / (successful.sum() / load_s.sum()) * 1000.0)


def cost_interval(runs: pd.DataFrame) -> tuple[float, float, float]:
    """Pooled cost of a condition's repetitions and the 95 % t interval of the mean of their per-run costs.

    The runs are the independent units (repstats): with R >= 2 repetitions the interval is
    mean +- t(0.975, R - 1) x s / sqrt(R) over the runs' app_cost_ms; with one it is NaN (no run-to-run
    variation to measure). The point stays the pooled cost, pooled as RPS is.
    """
    arrays = [
        pd.to_numeric(runs[c], errors="coerce").to_numpy(float)
        for c in ("app_cpu_s", "cgroup_wall_s", "successful", "load_s")
    ]
    point = pooled_cost_ms(*arrays)
    if math.isnan(point):
        return point, math.nan, math.nan
    estimate = clipped(
        mean_interval(pd.to_numeric(runs["app_cost_ms"], errors="coerce").to_numpy(float))
    )
    return point, estimate.lo, estimate.hi


def add_cost_columns(
    per_run: pd.DataFrame, summary: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The runs summary and the condition summary with the cost columns (RUN_/CONDITION_COST_COLUMNS) added."""
    runs = with_run_costs(per_run)
    summary = summary.copy()
    found: dict[str, tuple[float, float, float, float]] = {}
    for condition_id, group in runs.groupby("condition_id", sort=False):
        point, lo, hi = cost_interval(group)
        found[str(condition_id)] = (float(group["other_cpu_pct"].mean()), point, lo, hi)
    for i, column in enumerate(CONDITION_COST_COLUMNS):
        summary[column] = [found.get(str(c), (math.nan,) * 4)[i] for c in summary["condition_id"]]
    return runs, summary


# --- the prediction ---------------------------------------------------------------------------------------


def available_cpu_pct(vcpu: float, sidecars_cpu_pct: float, other_cpu_pct: float) -> float:
    """CPU the app could get, % of one core: the quota minus what the sidecars and other processes used."""
    sidecars = 0.0 if math.isnan(_f(sidecars_cpu_pct)) else _f(sidecars_cpu_pct)
    other = 0.0 if math.isnan(_f(other_cpu_pct)) else _f(other_cpu_pct)
    return 100.0 * _f(vcpu) - sidecars - other


def predicted_rps(available_pct: float, cost_ms: float) -> float:
    """RPS the app would serve with available_pct % of a core at cost_ms of CPU per request."""
    available_pct, cost_ms = _f(available_pct), _f(cost_ms)
    if not cost_ms or math.isnan(cost_ms) or math.isnan(available_pct):
        return math.nan
    return max(available_pct, 0.0) / 100.0 / (cost_ms / 1000.0)


def _codes(value: Any) -> set[str]:
    return {c for c in str(value or "").split(",") if c and c != "nan"}


def _off_one(factor: float) -> float:
    """How far a factor is from 1, as |log|: infinite at or below 0 (an app that used no CPU), NaN for NaN."""
    if math.isnan(factor):
        return math.nan
    return abs(math.log(factor)) if factor > 0 else math.inf


def miss_reason(row: Mapping[str, Any], within: float = WITHIN) -> str:
    """The most likely reason the data shows for a cell's measured RPS differing from the prediction.

    "" when the cell is within `within`. The factor further from 1 (cpu_use or
    cost_factor, see the module docstring) leads; flags that bear on it follow.
    """
    ratio = _f(row.get("ratio"))
    if math.isnan(ratio):
        if math.isnan(_f(row.get("calibrated_cost_ms"))):
            return "no calibration of this app at this quota"
        return "no prediction (no CPU or response counts)"
    if abs(ratio - 1.0) <= within:
        return ""
    codes = _codes(row.get("flags"))
    parts = []
    if "host_bound" in codes:
        parts.append(
            f"host-bound: the host's CPUs, not the quota, limited the task (host {_f(row.get('host_busy_pct')):.0f} % "
            f"busy, throttled share {_f(row.get('throttled_share')):.2f})"
        )
    use, cost = _f(row.get("cpu_use")), _f(row.get("cost_factor"))
    cell_cost, cal_cost = _f(row.get("app_cost_ms")), _f(row.get("calibrated_cost_ms"))
    cost_text = None
    if _off_one(cost) > math.log(1 + within / 2):
        direction = "rose" if cost < 1 else "fell"
        throttled = _f(row.get("throttled_share"))
        share = (
            f" as the app's CPU fell to {_f(row.get('app_cpu_pct')):.1f} % of a core beside the sidecars "
            f"({throttled:.0%} of periods throttled)"
            if cost < 1
            else ""
        )
        cost_text = f"cost per request {direction} to {cell_cost:.3g} ms from {cal_cost:.3g} ms alone at this quota{share}"
        cal_lo, cal_hi = _f(row.get("calibrated_cost_ms_lo")), _f(row.get("calibrated_cost_ms_hi"))
        if cal_lo <= cell_cost <= cal_hi:
            cost_text += (
                f", inside the calibrated cost's own 95 % interval ({cal_lo:.3g}-{cal_hi:.3g} ms): "
                "the calibration's spread"
            )
    use_text = None
    if _off_one(use) > math.log(1 + within / 2):
        if use < 1:
            task, quota = _f(row.get("task_cpu_pct")), 100.0 * _f(row.get("vcpu"))
            left = (
                "the task left quota unused"
                if task < 0.9 * quota
                else "the quota was used, by the other processes' and accounting's share"
            )
            use_text = (
                f"the app used {_f(row.get('app_cpu_pct')):.1f} % of a core of the "
                f"{_f(row.get('available_cpu_pct')):.1f} % left to it ({left})"
            )
        else:
            use_text = (
                f"the app used {_f(row.get('app_cpu_pct')):.1f} % of a core, more than the "
                f"{_f(row.get('available_cpu_pct')):.1f} % the quota left it"
            )
    ranked = sorted(
        [
            (_off_one(cost) if cost_text else -1, cost_text),
            (_off_one(use) if use_text else -1, use_text),
        ],
        key=lambda t: t[0],
        reverse=True,
    )
    parts += [text for _, text in ranked if text]
    if "not_steady" in codes:
        parts.append("throughput drifted within the window (~)")
    if "noisy" in codes:
        parts.append("wide interval (±)")
    if "low_coverage" in codes:
        parts.append("the load generator was idle part of the window (L)")
    if "failed_requests" in codes:
        parts.append("failed requests (E)")
    if "oom_or_restart" in codes:
        parts.append("OOM kill or restart (M)")
    if not parts:
        parts.append("within the measured spread of its parts (no single factor beyond 5 %)")
    return "; ".join(parts)


MODEL_COLUMNS = [
    "condition_id",
    "app",
    "vcpu",
    "memory_mb",
    "sidecar_count",
    "sidecar_load_pct",
    "total_sidecar_load_pct",
    "sidecar_burn",
    "sidecars_cpu_pct",
    "other_cpu_pct",
    "available_cpu_pct",
    "app_cpu_pct",
    "task_cpu_pct",
    "throttled_share",
    "host_busy_pct",
    "calibrated_cost_ms",
    "calibrated_cost_ms_lo",
    "calibrated_cost_ms_hi",
    "app_cost_ms",
    "app_cost_ms_lo",
    "app_cost_ms_hi",
    "predicted_rps",
    "predicted_rps_lo",
    "predicted_rps_hi",
    "rps",
    "rps_lo",
    "rps_hi",
    "ratio",
    "within",
    "cpu_use",
    "cost_factor",
    "flags",
    "reason",
]


def calibrated_cost(calibration: pd.DataFrame, app: str, vcpu: float) -> tuple[float, float, float]:
    """The calibrated cost (point, lo, hi) of an app at a quota, or NaNs if that quota was not calibrated."""
    rows = calibration[
        (calibration["app"] == app) & ((calibration["vcpu"] - float(vcpu)).abs() < 1e-9)
    ]
    if rows.empty:
        return math.nan, math.nan, math.nan
    first = rows.iloc[0]
    return (
        _f(first["app_cost_ms"]),
        _f(first.get("app_cost_ms_lo")),
        _f(first.get("app_cost_ms_hi")),
    )


def decompose(
    summary: pd.DataFrame,
    calibration: pd.DataFrame,
    sidecar_burn: str | None = None,
    within: float = WITHIN,
) -> pd.DataFrame:
    """One row per condition of the summary: its RPS decomposed (CPU left from its own measured sidecar and other
    CPU, over the calibrated cost) against the measured RPS, the two factors and the reason.

    summary: a condition summary with the cost columns (add_cost_columns);
    calibration: calibration.calibration_table's frame (app, vcpu, app_cost_ms, _lo, _hi).
    predicted_rps_lo/hi: the prediction at the calibrated cost's interval ends.
    """
    rows = []
    for _, cond in summary.iterrows():
        row = {c: cond.get(c) for c in MODEL_COLUMNS if c in summary.columns}
        row["sidecar_burn"] = sidecar_burn
        cost, cost_lo, cost_hi = calibrated_cost(calibration, cond["app"], cond["vcpu"])
        available = available_cpu_pct(
            cond["vcpu"], cond.get("sidecars_cpu_pct"), cond.get("other_cpu_pct")
        )
        predicted = predicted_rps(available, cost)
        measured = _f(cond["rps"])
        ratio = measured / predicted if predicted and not math.isnan(predicted) else math.nan
        app_cpu = _f(cond.get("app_cpu_pct"))
        row.update(
            {
                "calibrated_cost_ms": cost,
                "calibrated_cost_ms_lo": cost_lo,
                "calibrated_cost_ms_hi": cost_hi,
                "available_cpu_pct": available,
                "predicted_rps": predicted,
                "predicted_rps_lo": predicted_rps(available, cost_hi),
                "predicted_rps_hi": predicted_rps(available, cost_lo),
                "ratio": ratio,
                "within": bool(abs(ratio - 1.0) <= within) if not math.isnan(ratio) else False,
                "cpu_use": app_cpu / available if available > 0 else math.nan,
                "cost_factor": cost / _f(cond.get("app_cost_ms"))
                if _f(cond.get("app_cost_ms"))
                else math.nan,
            }
        )
        row["reason"] = miss_reason(row, within)
        rows.append(row)
    return pd.DataFrame(rows, columns=MODEL_COLUMNS)


predict = decompose  # the name it had when it was presented as a prediction


def share_within(model: pd.DataFrame) -> pd.DataFrame:
    """Per app (decomposition): cells with a calibration, cells whose CPU left and calibrated cost account for
    them within 10 %, their share, and the median ratio."""
    out = []
    for app, group in model.groupby("app", sort=True):
        scored = group[group["ratio"].notna()]
        out.append(
            {
                "app": app,
                "cells": len(scored),
                "within": int(scored["within"].sum()),
                "share_within": float(scored["within"].mean()) if len(scored) else math.nan,
                "median_ratio": float(scored["ratio"].median()) if len(scored) else math.nan,
            }
        )
    return pd.DataFrame(out, columns=["app", "cells", "within", "share_within", "median_ratio"])


def largest_misses(model: pd.DataFrame, n: int | None = None) -> pd.DataFrame:
    """The cells outside 10 %, furthest first (by |log ratio|)."""
    misses = model[model["ratio"].notna() & ~model["within"].astype(bool)].copy()
    misses["distance"] = np.abs(np.log(misses["ratio"].astype(float)))
    misses = misses.sort_values("distance", ascending=False).drop(columns="distance")
    return misses if n is None else misses.head(n)


# --- the delivered load -----------------------------------------------------------------------------------


def article_delivered_estimate(rps: float, baseline_rps: float, vcpu: float) -> float:
    """An estimate of the CPU the article's sidecars really used (% of one core), from its own RPS.

    If its app served baseline_rps with the whole quota and each request cost the
    same at every load, the sidecars took what the app lost: 100 x vCPU x (1 - RPS /
    baseline RPS). An estimate: it assumes a CPU-bound app at a fixed cost, which
    the article's cells are only partly (article_costs).
    """
    rps, baseline_rps = _f(rps), _f(baseline_rps)
    if not baseline_rps or math.isnan(rps) or math.isnan(baseline_rps):
        return math.nan
    return 100.0 * _f(vcpu) * (1.0 - rps / baseline_rps)


# --- the article against the same physics -----------------------------------------------------------------


def implied_cost_ms(vcpu: float, rps: float) -> float:
    """The most CPU per request a server limited to vcpu can have spent at rps: vCPU / RPS, in ms."""
    vcpu, rps = _f(vcpu), _f(rps)
    if not rps or math.isnan(rps):
        return math.nan
    return vcpu / rps * 1000.0


def article_verdict(stated_ms: float, implied_ms: float, within: float = WITHIN) -> str:
    """Whether an app-only cell fits a CPU-limited server at the article's stated cost."""
    if math.isnan(_f(stated_ms)) or math.isnan(_f(implied_ms)):
        return ""
    factor = stated_ms / implied_ms
    if factor > 1 + within:
        return (
            f"cannot be CPU-limited at the stated cost: {stated_ms:g} ms a request would need "
            f"{factor:.1f} x the quota"
        )
    if factor >= 1 - within:
        return "consistent: a CPU-limited server at the stated cost"
    return f"possible, below the quota: at the stated cost the app used {factor:.0%} of it"


def article_costs(ref: pd.DataFrame, calibration: pd.DataFrame) -> pd.DataFrame:
    """The article's app-only cells (rps_grid, no sidecar): implied cost beside its stated cost and ours."""
    cells = ref[
        (ref["table"] == "rps_grid") & (ref["sidecar_count"] == 0) & (ref["metric"] == "rps")
    ]
    out = []
    for _, cell in cells.sort_values(["app", "vcpu"]).iterrows():
        implied = implied_cost_ms(cell["vcpu"], cell["value"])
        stated = ARTICLE_STATED_COST_MS.get(cell["app"], math.nan)
        ours, ours_lo, ours_hi = (
            calibrated_cost(calibration, cell["app"], cell["vcpu"])
            if calibration is not None and len(calibration)
            else (math.nan,) * 3
        )
        out.append(
            {
                "app": cell["app"],
                "vcpu": float(cell["vcpu"]),
                "article_rps": float(cell["value"]),
                "article_implied_cost_ms": implied,
                "article_stated_cost_ms": stated,
                "stated_over_implied": stated / implied if implied else math.nan,
                "ours_cost_ms": ours,
                "ours_cost_ms_lo": ours_lo,
                "ours_cost_ms_hi": ours_hi,
                "verdict": article_verdict(stated, implied),
            }
        )
    return pd.DataFrame(
        out,
        columns=[
            "app",
            "vcpu",
            "article_rps",
            "article_implied_cost_ms",
            "article_stated_cost_ms",
            "stated_over_implied",
            "ours_cost_ms",
            "ours_cost_ms_lo",
            "ours_cost_ms_hi",
            "verdict",
        ],
    )


def summary_with_costs(summary: pd.DataFrame, per_run: pd.DataFrame) -> pd.DataFrame:
    """The condition summary with the cost columns, computing them from the runs if an older summary lacks them."""
    if all(c in summary.columns for c in CONDITION_COST_COLUMNS):
        return summary
    return add_cost_columns(per_run, summary)[1]


def iter_apps(frame: pd.DataFrame) -> Iterable[str]:
    return sorted(frame["app"].dropna().unique()) if "app" in frame.columns else []


# --- sidecars that burn what they claim: the same conditions under load.sidecar_burn wall and cpu ----------

BURN_COLUMNS = [
    "burn",
    "preset",
    "condition_id",
    "app",
    "vcpu",
    "memory_mb",
    "sidecar_count",
    "total_sidecar_load_pct",
    "sidecars_cpu_pct",
    "rps",
    "rps_lo",
    "rps_hi",
    "retained",
    "p99_ms",
    "p99_ms_lo",
    "p99_ms_hi",
    "slow_1p_share",
    "flags",
]


def burn_comparison(summaries: Mapping[tuple[str, str], pd.DataFrame]) -> pd.DataFrame:
    """The conditions measured under more than one sidecar_burn, in long form (one row per burn and condition).

    summaries: {(burn, preset): condition summary}. retained = RPS / the RPS of the same sweep's 0 % load cell
    under the same burn.
    """
    frames = []
    for (burn, preset), summary in summaries.items():
        frame = summary.copy()
        frame["burn"], frame["preset"] = burn, preset
        base = frame[np.isclose(frame["total_sidecar_load_pct"], 0.0)].set_index(
            ["app", "vcpu", "memory_mb", "sidecar_count"]
        )["rps"]
        keys = list(zip(frame["app"], frame["vcpu"], frame["memory_mb"], frame["sidecar_count"]))
        frame["retained"] = [
            r / base.get(k, math.nan) if k in base.index else math.nan
            for r, k in zip(frame["rps"], keys)
        ]
        frames.append(frame.reindex(columns=BURN_COLUMNS))
    if not frames:
        return pd.DataFrame(columns=BURN_COLUMNS)
    long = pd.concat(frames, ignore_index=True)
    shared = long.groupby("condition_id")["burn"].nunique()
    long = long[long["condition_id"].isin(shared[shared > 1].index) & (long["sidecar_count"] > 0)]
    return long.sort_values(
        ["app", "vcpu", "memory_mb", "sidecar_count", "total_sidecar_load_pct", "burn"],
        kind="stable",
    ).reset_index(drop=True)

"""The model's tables: the calibration, the decomposition (model.py), the forward prediction (forward.py) and
the cost per request the article's own cells imply.

The calibration's and the decomposition's cells are laid out first as the CPU-budget model's
(_calibration_cells, _model_cells ...); the tables below name them for what they are and
state the interval method.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from . import forward as fwd
from .cells import APP_NAMES, cell_codes, codes_of
from .table_format import Table, fmt, measured

COST_INTERVAL_NOTE = (
    "Cost per request = the app process's CPU seconds (kernel accounting) / its successful "
    "responses, each per second of its own window, pooled over the repetitions; [lo–hi]: 95 % t "
    "interval of the mean of the repetitions' own costs (none with one repetition)."
)


# --- the CPU-budget model (model.py, calibration.py): calibration, predicted against measured, the article --


def _cost_cell(value, lo, hi, flags=None) -> str:
    return measured(float(value), float(lo), float(hi), codes_of(flags), digits=3)


def _calibration_cells(calibration: pd.DataFrame) -> Table:
    """Cost per request per app and vCPU level, with its 95 % interval over repetitions."""
    display = pd.DataFrame(
        {
            "app": [APP_NAMES.get(a, a) for a in calibration["app"]],
            "quota": calibration["level"],
            "runs": calibration["repeats"],
            "RPS": [
                measured(float(v), float(lo), float(hi), codes_of(f), "rps", 0)
                for v, lo, hi, f in zip(
                    calibration["rps"],
                    calibration["rps_lo"],
                    calibration["rps_hi"],
                    calibration["flags"],
                )
            ],
            "app CPU %": [fmt(float(v), 1) for v in calibration["app_cpu_pct"]],
            "throttled share": [fmt(float(v), 2) for v in calibration["throttled_share"]],
            "cost per request, ms CPU": [
                _cost_cell(v, lo, hi)
                for v, lo, hi in zip(
                    calibration["app_cost_ms"],
                    calibration["app_cost_ms_lo"],
                    calibration["app_cost_ms_hi"],
                )
            ],
            "source": calibration["source"],
        }
    )
    seen = (
        set().union(*(set(codes_of(f)) for f in calibration["flags"]))
        if len(calibration)
        else set()
    )
    notes = [
        "Each app alone (no sidecar), at each vCPU level of the preset and with no CPU limit (a quota of "
        "all the host's CPUs).",
        "Cost per request = the app process's CPU seconds (kernel accounting) / its successful responses, each "
        "per second of its own window; pooled over the repetitions, with a 95 % interval from drawing the "
        "repetitions with replacement (1000 draws).",
        "source: matrix = the preset's own app-only condition; calibration run = measured for the calibration "
        "(results/<preset>/calibration/runs/).",
    ]
    return Table(
        "calibration",
        "Calibration: CPU cost per request, each app alone",
        calibration,
        display,
        notes,
        seen,
    )


def _model_cells(model: pd.DataFrame) -> Table:
    """Predicted against measured RPS for every condition, with the factors and the reason of each miss."""
    display = pd.DataFrame(
        {
            "condition": model["condition_id"],
            "sidecars' CPU %": [fmt(float(v), 1) for v in model["sidecars_cpu_pct"]],
            "left for the app %": [fmt(float(v), 1) for v in model["available_cpu_pct"]],
            "app CPU %": [fmt(float(v), 1) for v in model["app_cpu_pct"]],
            "cost ms (alone)": [fmt(float(v), 3) for v in model["calibrated_cost_ms"]],
            "cost ms (here)": [fmt(float(v), 3) for v in model["app_cost_ms"]],
            "predicted RPS": [
                measured(float(v), float(lo), float(hi), digits=0)
                for v, lo, hi in zip(
                    model["predicted_rps"], model["predicted_rps_lo"], model["predicted_rps_hi"]
                )
            ],
            "measured RPS": [
                measured(float(v), float(lo), float(hi), codes_of(f), "rps", 0)
                for v, lo, hi, f in zip(
                    model["rps"], model["rps_lo"], model["rps_hi"], model["flags"]
                )
            ],
            "measured / predicted": [fmt(float(v), 2) for v in model["ratio"]],
            "within 10 %": ["yes" if w else "no" for w in model["within"]],
            "reason": model["reason"].fillna(""),
        }
    )
    seen = (
        set().union(*(cell_codes(codes_of(f), "rps") for f in model["flags"]))
        if len(model)
        else set()
    )
    burn = (
        sorted({str(b) for b in model["sidecar_burn"].dropna()}) if "sidecar_burn" in model else []
    )
    notes = [
        "Predicted RPS = CPU left for the app (the quota - what the sidecars and the task's other processes "
        "really used, % of one core) / the app's calibrated cost per request at that quota (calibration table); "
        "its interval is the prediction at the calibrated cost's interval ends.",
        "measured / predicted = (app CPU / CPU left for it) x (cost alone / cost here): the reason of a cell "
        "outside 10 % names the factor further from 1, then the flags that bear on it.",
        f"Sidecars count their busy time by {'CPU time' if burn == ['cpu'] else 'the wall clock'} "
        f"(load.sidecar_burn: {', '.join(burn) or '?'}); the model uses what they really used either way.",
    ]
    return Table(
        "model", "The CPU-budget model: predicted against measured RPS", model, display, notes, seen
    )


def _model_share_cells(share: pd.DataFrame) -> Table:
    display = pd.DataFrame(
        {
            "app": [APP_NAMES.get(a, a) for a in share["app"]],
            "cells": share["cells"],
            "within 10 %": [
                f"{w} ({fmt(100 * float(s), 0)} %)"
                for w, s in zip(share["within"], share["share_within"])
            ],
            "median measured / predicted": [fmt(float(v), 2) for v in share["median_ratio"]],
        }
    )
    return Table(
        "model_share",
        "How many cells the CPU-budget model explains within 10 %",
        share,
        display,
        ["Cells: conditions with a prediction (a calibration of the app at their quota)."],
    )


def _model_misses_cells(misses: pd.DataFrame) -> Table:
    display = pd.DataFrame(
        {
            "condition": misses["condition_id"],
            "measured / predicted": [fmt(float(v), 2) for v in misses["ratio"]],
            "app CPU / left for it": [fmt(float(v), 2) for v in misses["cpu_use"]],
            "cost alone / cost here": [fmt(float(v), 2) for v in misses["cost_factor"]],
            "reason": misses["reason"],
        }
    )
    return Table(
        "model_misses",
        "Cells outside 10 %, furthest first, with the most likely reason",
        misses,
        display,
        [
            "Most likely reason: the factor further from 1 first, then the flags that bear on the cell."
        ],
    )


def article_costs_table(costs: pd.DataFrame) -> Table:
    """The cost per request each of the article's app-only cells implies, beside its stated cost and ours."""
    display = pd.DataFrame(
        {
            "app": [APP_NAMES.get(a, a) for a in costs["app"]],
            "vCPU": [f"{v:g}" for v in costs["vcpu"]],
            "article RPS": [fmt(float(v), 0) for v in costs["article_rps"]],
            "implied cost, ms (vCPU / RPS)": [
                fmt(float(v), 3) for v in costs["article_implied_cost_ms"]
            ],
            "stated cost, ms": [fmt(float(v), 1) for v in costs["article_stated_cost_ms"]],
            "ours, ms (calibration)": [
                _cost_cell(v, lo, hi)
                for v, lo, hi in zip(
                    costs["ours_cost_ms"], costs["ours_cost_ms_lo"], costs["ours_cost_ms_hi"]
                )
            ],
            "verdict": costs["verdict"],
        }
    )
    notes = [
        "Implied cost: the most CPU a request can have cost a server limited to that vCPU at that RPS "
        "(vCPU / RPS); a stated cost above it cannot be true of a CPU-limited server.",
        "Stated costs: the article's text (Go API 0.6 ms, Next.js SSR 2.0 ms of CPU per request).",
        "Ours: this preset's calibration at the same quota, where it has one (— where it has none).",
    ]
    return Table(
        "article_costs",
        "The article against the same physics: the cost its app-only cells imply",
        costs,
        display,
        notes,
    )


# --- the tables, named for what they are --------------------------------------------------------------


def calibration_table(calibration: pd.DataFrame) -> Table:
    table = _calibration_cells(calibration)
    notes = [
        COST_INTERVAL_NOTE if note.startswith("Cost per request") else note for note in table.notes
    ]
    return replace(table, notes=notes)


def decomposition_table(model: pd.DataFrame) -> Table:
    """Every condition's RPS decomposed into the CPU left to the app (its own measured sidecar CPU) and the cost."""
    table = _model_cells(model)
    display = table.display.rename(
        columns={"predicted RPS": "decomposed RPS", "measured / predicted": "measured / decomposed"}
    )
    notes = [
        "A decomposition, not a prediction: it reads the cell's own measured sidecar and other CPU. Decomposed "
        "RPS = CPU left for the app (the quota - what the sidecars and the task's other processes really used, "
        "% of one core) / the app's calibrated cost per request at that quota (calibration table); in a "
        "quota-bound cell measured / decomposed is the cost ratio (cost alone / cost here) within about 1.5 %. "
        "The prediction from a cell's settings and other cells only is the forward table. CSV columns keep "
        "their names (predicted_rps = decomposed RPS).",
        *table.notes[1:],
    ]
    return replace(
        table,
        name="decomposition",
        title="The CPU-budget decomposition: measured RPS against CPU left / calibrated cost",
        display=display,
        notes=notes,
    )


def decomposition_share_table(share: pd.DataFrame) -> Table:
    table = _model_share_cells(share)
    display = table.display.rename(
        columns={"median measured / predicted": "median measured / decomposed"}
    )
    return replace(
        table,
        name="decomposition_share",
        display=display,
        title="How many cells the decomposition accounts for within 10 % (its own CPU read: not a "
        "prediction)",
        notes=[
            "Cells: conditions with a calibration of the app at their quota. In quota-bound cells this "
            "share is the share whose cost per request stayed within 10 % of the calibrated one; the "
            "forward_share table is the prediction's score."
        ],
    )


def decomposition_misses_table(misses: pd.DataFrame) -> Table:
    table = _model_misses_cells(misses)
    display = table.display.rename(columns={"measured / predicted": "measured / decomposed"})
    return replace(
        table,
        name="decomposition_misses",
        display=display,
        title="Cells the decomposition does not account for within 10 %, furthest first",
    )


def _interval(value, lo, hi, digits: int) -> str:
    return measured(float(value), float(lo), float(hi), digits=digits)


def forward_table(forward: pd.DataFrame) -> Table:
    """Every condition: the forward prediction, its parts beside the measured ones, the verdict and the reason."""
    display = pd.DataFrame(
        {
            "condition": forward["condition_id"],
            "role": forward["role"],
            "sidecars' CPU % predicted (measured)": [
                f"{fmt(float(p), 1)} ({fmt(float(m), 1)})"
                for p, m in zip(forward["sidecars_pred_pct"], forward["sidecars_cpu_pct"])
            ],
            "cost ms at 0 % load (here)": [
                f"{_interval(v, lo, hi, 3)} ({fmt(float(h), 3)})"
                for v, lo, hi, h in zip(
                    forward["cost_ms"],
                    forward["cost_ms_lo"],
                    forward["cost_ms_hi"],
                    forward["cell_cost_ms"],
                )
            ],
            "predicted RPS": [
                _interval(v, lo, hi, 0)
                for v, lo, hi in zip(
                    forward["predicted_rps"],
                    forward["predicted_rps_lo"],
                    forward["predicted_rps_hi"],
                )
            ],
            "measured RPS": [fmt(float(v), 0) for v in forward["rps"]],
            "measured / predicted": [
                _interval(v, lo, hi, 2)
                for v, lo, hi in zip(forward["ratio"], forward["ratio_lo"], forward["ratio_hi"])
            ],
            "within 10 %": forward["verdict"].fillna(""),
            "reason": forward["reason"].fillna(""),
        }
    )
    notes = [
        f"Scheme: {fwd.SCHEME}. A cell's own measured CPU and RPS are never read for its prediction; they are "
        "shown beside it and used only to score and explain it.",
        "Predicted RPS = (100 x vCPU - predicted sidecar CPU - other processes' CPU at 0 % load) / the cost at "
        "0 % load; [lo–hi]: at the cost's 95 % interval ends (t interval over the 0 % load runs).",
        "Sidecar CPU predicted = sidecar count x the CPU one sidecar delivered at that nominal load, interpolated "
        "between the other loaded cells of the same app, vCPU and sidecar count (forward.py).",
        "within 10 %: within = the whole interval of measured / predicted inside 0.90-1.10; miss = all of it "
        "outside; undecided = it straddles an edge.",
        "role: scored, fit (a 0 % load cell: sets the cost), host-bound (the level's 0 % load runs were not "
        "throttled: not a test of the quota), no fit.",
    ]
    return Table(
        "forward",
        "Forward prediction: each cell's RPS from its settings and other cells only",
        forward,
        display,
        notes,
    )


def forward_share_table(share: pd.DataFrame) -> Table:
    def pct(count, total):
        return f"{count} ({fmt(100 * count / total, 0)} %)" if total else str(count)

    display = pd.DataFrame(
        {
            "app": [APP_NAMES.get(a, a) for a in share["app"]],
            "scored cells": share["cells"],
            "within 10 % (whole interval)": [
                pct(w, c) for w, c in zip(share["within"], share["cells"])
            ],
            "undecided": share["undecided"],
            "miss": share["miss"],
            "point within 10 %": [pct(w, c) for w, c in zip(share["point_within"], share["cells"])],
            "median measured / predicted": [fmt(float(v), 2) for v in share["median_ratio"]],
            "not within, led by sidecars / use / cost": [
                f"{s} / {u} / {c}"
                for s, u, c in zip(
                    share["not_within_sidecars"], share["not_within_use"], share["not_within_cost"]
                )
            ],
            "not scored: fit / host-bound / no fit": [
                f"{f} / {h} / {n}"
                for f, h, n in zip(
                    share["fit_cells"], share["host_bound_cells"], share["no_fit_cells"]
                )
            ],
        }
    )
    notes = [
        "Scored: loaded cells at quota-bound levels, each predicted from a fit that leaves it out.",
        "within 10 % (whole interval): the share counts only these. point within 10 %: |measured / predicted - 1| "
        "<= 0.10 at the cost's point value, ignoring its interval, for comparison.",
        "Led by: of the cells not within, how many have each factor furthest from 1 (measured / predicted = "
        "sidecar factor x use factor x cost factor, forward.py).",
    ]
    return Table(
        "forward_share",
        "How many cells the forward prediction gets within 10 %",
        share,
        display,
        notes,
    )


def forward_misses_table(misses: pd.DataFrame) -> Table:
    display = pd.DataFrame(
        {
            "condition": misses["condition_id"],
            "verdict": misses["verdict"],
            "measured / predicted": [
                _interval(v, lo, hi, 2)
                for v, lo, hi in zip(misses["ratio"], misses["ratio_lo"], misses["ratio_hi"])
            ],
            "sidecar factor": [fmt(float(v), 2) for v in misses["sidecar_factor"]],
            "use factor": [fmt(float(v), 2) for v in misses["use_factor"]],
            "cost factor": [fmt(float(v), 2) for v in misses["cost_factor"]],
            "reason": misses["reason"],
        }
    )
    notes = [
        "measured / predicted = sidecar factor (CPU left measured / predicted) x use factor (app CPU / CPU left "
        "measured) x cost factor (cost at 0 % load / cost here); the reason names the factors beyond 5 %, "
        "furthest from 1 first. Misses first, then undecided cells, each furthest first."
    ]
    return Table(
        "forward_misses",
        "Forward prediction: cells not within 10 %, with the factor that misses",
        misses,
        display,
        notes,
    )


def forward_tables(forward: pd.DataFrame) -> list[Table]:
    return [
        forward_table(forward),
        forward_share_table(fwd.share_within(forward)),
        forward_misses_table(fwd.misses(forward)),
    ]

"""The model's tables: the calibration, the decomposition (model.py) and the forward prediction (forward.py).

The decomposition's and the calibration's cells are laid out by tables.py; this module
names them for what they are and states the interval method. The forward prediction's
tables are made here.
"""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from . import forward as fwd
from . import tables
from .tables import APP_NAMES, Table, fmt, measured

COST_INTERVAL_NOTE = ("Cost per request = the app process's CPU seconds (kernel accounting) / its successful "
                      "responses, each per second of its own window, pooled over the repetitions; [lo–hi]: 95 % t "
                      "interval of the mean of the repetitions' own costs (none with one repetition).")


def calibration_table(calibration: pd.DataFrame) -> Table:
    table = tables.calibration_table(calibration)
    notes = [COST_INTERVAL_NOTE if note.startswith("Cost per request") else note for note in table.notes]
    return replace(table, notes=notes)


def decomposition_table(model: pd.DataFrame) -> Table:
    """Every condition's RPS decomposed into the CPU left to the app (its own measured sidecar CPU) and the cost."""
    table = tables.model_table(model)
    display = table.display.rename(columns={"predicted RPS": "decomposed RPS",
                                            "measured / predicted": "measured / decomposed"})
    notes = ["A decomposition, not a prediction: it reads the cell's own measured sidecar and other CPU. Decomposed "
             "RPS = CPU left for the app (the quota - what the sidecars and the task's other processes really used, "
             "% of one core) / the app's calibrated cost per request at that quota (calibration table); in a "
             "quota-bound cell measured / decomposed is the cost ratio (cost alone / cost here) within about 1.5 %. "
             "The prediction from a cell's settings and other cells only is the forward table. CSV columns keep "
             "their names (predicted_rps = decomposed RPS).",
             *table.notes[1:]]
    return replace(table, name="decomposition", title="The CPU-budget decomposition: measured RPS against CPU left / "
                   "calibrated cost", display=display, notes=notes)


def decomposition_share_table(share: pd.DataFrame) -> Table:
    table = tables.model_share_table(share)
    display = table.display.rename(columns={"median measured / predicted": "median measured / decomposed"})
    return replace(table, name="decomposition_share", display=display,
                   title="How many cells the decomposition accounts for within 10 % (its own CPU read: not a "
                         "prediction)",
                   notes=["Cells: conditions with a calibration of the app at their quota. In quota-bound cells this "
                          "share is the share whose cost per request stayed within 10 % of the calibrated one; the "
                          "forward_share table is the prediction's score."])


def decomposition_misses_table(misses: pd.DataFrame) -> Table:
    table = tables.model_misses_table(misses)
    display = table.display.rename(columns={"measured / predicted": "measured / decomposed"})
    return replace(table, name="decomposition_misses", display=display,
                   title="Cells the decomposition does not account for within 10 %, furthest first")


def _interval(value, lo, hi, digits: int) -> str:
    return measured(float(value), float(lo), float(hi), digits=digits)


def forward_table(forward: pd.DataFrame) -> Table:
    """Every condition: the forward prediction, its parts beside the measured ones, the verdict and the reason."""
    display = pd.DataFrame({
        "condition": forward["condition_id"],
        "role": forward["role"],
        "sidecars' CPU % predicted (measured)": [f"{fmt(float(p), 1)} ({fmt(float(m), 1)})" for p, m in
                                                 zip(forward["sidecars_pred_pct"], forward["sidecars_cpu_pct"])],
        "cost ms at 0 % load (here)": [f"{_interval(v, lo, hi, 3)} ({fmt(float(h), 3)})" for v, lo, hi, h in
                                       zip(forward["cost_ms"], forward["cost_ms_lo"], forward["cost_ms_hi"],
                                           forward["cell_cost_ms"])],
        "predicted RPS": [_interval(v, lo, hi, 0) for v, lo, hi in
                          zip(forward["predicted_rps"], forward["predicted_rps_lo"], forward["predicted_rps_hi"])],
        "measured RPS": [fmt(float(v), 0) for v in forward["rps"]],
        "measured / predicted": [_interval(v, lo, hi, 2) for v, lo, hi in
                                 zip(forward["ratio"], forward["ratio_lo"], forward["ratio_hi"])],
        "within 10 %": forward["verdict"].fillna(""),
        "reason": forward["reason"].fillna(""),
    })
    notes = [f"Scheme: {fwd.SCHEME}. A cell's own measured CPU and RPS are never read for its prediction; they are "
             "shown beside it and used only to score and explain it.",
             "Predicted RPS = (100 x vCPU - predicted sidecar CPU - other processes' CPU at 0 % load) / the cost at "
             "0 % load; [lo–hi]: at the cost's 95 % interval ends (t interval over the 0 % load runs).",
             "Sidecar CPU predicted = sidecar count x the CPU one sidecar delivered at that nominal load, interpolated "
             "between the other loaded cells of the same app, vCPU and sidecar count (forward.py).",
             "within 10 %: within = the whole interval of measured / predicted inside 0.90-1.10; miss = all of it "
             "outside; undecided = it straddles an edge.",
             "role: scored, fit (a 0 % load cell: sets the cost), host-bound (the level's 0 % load runs were not "
             "throttled: not a test of the quota), no fit."]
    return Table("forward", "Forward prediction: each cell's RPS from its settings and other cells only", forward,
                 display, notes)


def forward_share_table(share: pd.DataFrame) -> Table:
    def pct(count, total):
        return f"{count} ({fmt(100 * count / total, 0)} %)" if total else str(count)

    display = pd.DataFrame({
        "app": [APP_NAMES.get(a, a) for a in share["app"]],
        "scored cells": share["cells"],
        "within 10 % (whole interval)": [pct(w, c) for w, c in zip(share["within"], share["cells"])],
        "undecided": share["undecided"],
        "miss": share["miss"],
        "point within 10 %": [pct(w, c) for w, c in zip(share["point_within"], share["cells"])],
        "median measured / predicted": [fmt(float(v), 2) for v in share["median_ratio"]],
        "not within, led by sidecars / use / cost": [f"{s} / {u} / {c}" for s, u, c in
                                                     zip(share["not_within_sidecars"], share["not_within_use"],
                                                         share["not_within_cost"])],
        "not scored: fit / host-bound / no fit": [f"{f} / {h} / {n}" for f, h, n in
                                                  zip(share["fit_cells"], share["host_bound_cells"],
                                                      share["no_fit_cells"])],
    })
    notes = ["Scored: loaded cells at quota-bound levels, each predicted from a fit that leaves it out.",
             "within 10 % (whole interval): the share counts only these. point within 10 %: |measured / predicted - 1| "
             "<= 0.10 at the cost's point value, ignoring its interval, for comparison.",
             "Led by: of the cells not within, how many have each factor furthest from 1 (measured / predicted = "
             "sidecar factor x use factor x cost factor, forward.py)."]
    return Table("forward_share", "How many cells the forward prediction gets within 10 %", share, display, notes)


def forward_misses_table(misses: pd.DataFrame) -> Table:
    display = pd.DataFrame({
        "condition": misses["condition_id"],
        "verdict": misses["verdict"],
        "measured / predicted": [_interval(v, lo, hi, 2) for v, lo, hi in
                                 zip(misses["ratio"], misses["ratio_lo"], misses["ratio_hi"])],
        "sidecar factor": [fmt(float(v), 2) for v in misses["sidecar_factor"]],
        "use factor": [fmt(float(v), 2) for v in misses["use_factor"]],
        "cost factor": [fmt(float(v), 2) for v in misses["cost_factor"]],
        "reason": misses["reason"],
    })
    notes = ["measured / predicted = sidecar factor (CPU left measured / predicted) x use factor (app CPU / CPU left "
             "measured) x cost factor (cost at 0 % load / cost here); the reason names the factors beyond 5 %, "
             "furthest from 1 first. Misses first, then undecided cells, each furthest first."]
    return Table("forward_misses", "Forward prediction: cells not within 10 %, with the factor that misses", misses,
                 display, notes)


def forward_tables(forward: pd.DataFrame) -> list[Table]:
    return [forward_table(forward), forward_share_table(fwd.share_within(forward)),
            forward_misses_table(fwd.misses(forward))]

"""The article's tables, from our summary, with the article's numbers beside ours.

Each is a table_format.Table, written as <name>.md and <name>.csv (table_format.py says how a cell reads).
A table never fails because part of the matrix is missing, nor because a summary predates intervals or
flags (its cells show the value alone). They hold the conditions at the article's settings; the knobs
against throttling have their own table (mitigations.py), written with them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from . import reference as refmod
from .breaking import BREAK, TOO_FEW, assess_rows
from .cells import (
    APP_NAMES,
    NO_RATIO,
    article_settings,
    baseline_memory,
    between,
    cell_codes,
    codes_of,
    measured_only,
    ratio_record,
    runs_of,
)
from .findings import findings_table
from .mitigations import mitigations
from .repstats import Estimate
from .stats import ratio_to_published
from .table_format import (
    DEFINITIONS,
    MISSING,
    Table,
    environment_note,
    fmt,
    load_text,
    marks,
    measured,
    missing_note,
    ratio_text,
    write_table_files,
)

SIDECAR_SETS = {0: "app only", 1: "+proxy", 2: "+agent", 3: "+agent+log"}
# Per-sidecar loads of the full grid; the fine-step runs (1 % steps near breaking points) are not grid cells.
GRID_SIDECAR_LOADS = refmod.GRID_SIDECAR_LOADS
P99_GRID_LOADS = (0.0, 15.0, 45.0, 75.0, 105.0)
MEMORY_SIDECAR_LOAD = 15.0

STEADY_NOTE = (
    "Steady P99 / steady RPS: over the second half of the load window only, after any start-up "
    "transient; the article's numbers are whole-window."
)


# --- cells of the article's tables ----------------------------------------------------------------


def ratio(ours: float, article: float) -> float:
    return ours / article if article and not (math.isnan(ours) or math.isnan(article)) else math.nan


def to_article(rows: pd.DataFrame, article: float, metric: str) -> Estimate:
    """Ours / the article's number for a cell: over the runs of its one condition (stats.ratio_to_published);
    a cell of several conditions gets the ratio of their mean, without an interval."""
    if math.isnan(article) or metric not in rows.columns or rows[metric].notna().sum() == 0:
        return NO_RATIO
    if len(rows) == 1:
        return ratio_to_published(rows.iloc[0], article, metric)
    return Estimate(
        ratio(float(rows[metric].mean()), article), math.nan, math.nan, len(rows), "several"
    )


def at(rows: pd.DataFrame, load: float) -> pd.DataFrame:
    return rows[np.isclose(rows["total_sidecar_load_pct"], load)]


TAIL_SHARE = 0.01  # P99: 1 % of the responses are at or above it


def tail_vs_article(rows: pd.DataFrame, article_p99: float) -> tuple[str, str]:
    """A bimodal cell against the article's P99, by what that P99 says of the tail shares.

    Article P99 p with k x T < p <= (k + 1) x T: at least 1 % of its responses were slower than k
    periods and at most 1 % slower than k + 1. Ours agrees when our shares' 95 % intervals allow
    both (slow_<k>p_share_hi >= 1 %, slow_<k+1>p_share_lo <= 1 %), else differs. Returns (text, verdict);
    ("", "") when the cell is no single bimodal condition or the article has no P99 there."""
    if (
        len(rows) != 1
        or math.isnan(article_p99)
        or "bimodal" not in codes_of(rows.iloc[0].get("flags"))
    ):
        return "", ""
    row = rows.iloc[0]
    period = float(row.get("period_ms", math.nan))
    period = period if math.isfinite(period) and period > 0 else 100.0
    k = math.ceil(article_p99 / period) - 1  # article_p99 in (k T, (k + 1) T]
    parts, verdict = [], "agrees"
    for periods, side in ((k, ">="), (k + 1, "<=")):
        column = f"slow_{periods}p_share"
        if not 1 <= periods <= 3 or column not in row.index or pd.isna(row[column]):
            continue
        lo, hi = float(row.get(f"{column}_lo", math.nan)), float(row.get(f"{column}_hi", math.nan))
        lo, hi = (
            (float(row[column]) if math.isnan(lo) else lo),
            (float(row[column]) if math.isnan(hi) else hi),
        )
        if (side == ">=" and hi < TAIL_SHARE) or (side == "<=" and lo > TAIL_SHARE):
            verdict = "differs"
        parts.append(
            f"> {periods * period:g} ms {100 * float(row[column]):.1f} % [{100 * lo:.1f}–{100 * hi:.1f}] "
            f"(article {side} 1 %)"
        )
    if not parts:
        return "", ""
    return "tails: " + "; ".join(parts) + f": {verdict}", verdict


def delivered(rows: pd.DataFrame) -> float:
    """The sidecars' delivered CPU (% of one core, mean over the runs) of a cell's conditions."""
    if "sidecars_cpu_pct" not in rows.columns or rows["sidecars_cpu_pct"].notna().sum() == 0:
        return math.nan
    return float(rows["sidecars_cpu_pct"].mean())


DELIVERED_NOTE = (
    "Load: the sidecars' nominal total load, and in parentheses the CPU they delivered (% of one core, "
    "mean over the runs; summary.csv sidecars_cpu_pct). Wall-clock sidecars, the article's method, burn "
    "less than nominal when the task is throttled; the delivered CPU is what the app lost."
)
BIMODAL_NOTE = (
    "B (bimodal): the runs' P99 fall on both sides of a boundary between whole CFS periods, so a P99 "
    "ratio would compare one mode with the other; such a cell is compared with the article by the tail "
    "shares its P99 implies (at least 1 % slower than k periods, at most 1 % slower than k + 1)."
)


def at_load(rows: pd.DataFrame, load: float, metric: str) -> tuple[float, int]:
    """Mean of a metric over the conditions at one total load, and how many that is."""
    if metric not in rows.columns:
        return math.nan, 0
    hit = rows[np.isclose(rows["total_sidecar_load_pct"], load)][metric].dropna()
    return (float(hit.mean()) if len(hit) else math.nan), int(len(hit))


@dataclass(frozen=True)
class Measured:
    value: float
    lo: float
    hi: float
    codes: tuple[str, ...]
    conditions: int


def measure(rows: pd.DataFrame, metric: str) -> Measured:
    """A metric over the given summary rows (usually one condition): value, interval ends and flag codes.
    Several rows (a grid cell of several conditions) average value and interval ends alike."""
    return _measured(rows, metric, np.ones(len(rows), dtype=bool))


def measured_at(rows: pd.DataFrame, load: float, metric: str) -> Measured:
    """measure() of the rows at one total load."""
    return _measured(
        rows, metric, np.isclose(rows["total_sidecar_load_pct"].to_numpy(dtype="float64"), load)
    )


def _measured(rows: pd.DataFrame, metric: str, chosen: np.ndarray) -> Measured:
    """measure() of the chosen rows, on the columns' arrays (a frame selection for each of the tables'
    hundreds of cells was most of their time)."""

    def values(column: str) -> np.ndarray:
        if column not in rows.columns:
            return np.array([], dtype="float64")
        picked = rows[column].to_numpy(dtype="float64", na_value=np.nan)[chosen]
        return picked[~np.isnan(picked)]

    def mean(column: str) -> float:
        found = values(column)
        return float(found.mean()) if len(found) else math.nan

    codes: list[str] = []
    for value in rows["flags"].to_numpy()[chosen] if "flags" in rows.columns else []:
        codes += [c for c in codes_of(value) if c not in codes]
    return Measured(
        mean(metric),
        mean(f"{metric}_lo"),
        mean(f"{metric}_hi"),
        tuple(codes),
        len(values(metric)),
    )


def flags_text(codes) -> str:
    return ",".join(sorted(codes))


def apps_of(summary: pd.DataFrame, ref: pd.DataFrame) -> list[str]:
    apps = set(summary["app"].dropna()) | set(ref["app"].dropna())
    return [a for a in ("go", "next") if a in apps] + sorted(apps - {"go", "next"})


# --- the tables ------------------------------------------------------------------------------------


def load_sweep(
    summary: pd.DataFrame, ref: pd.DataFrame, app: str, vcpu: float = 0.25, sidecar_count: int = 3
) -> Table:
    memory = baseline_memory(summary)
    rows = runs_of(summary, app, vcpu, sidecar_count, memory)
    art = refmod.select(ref, "load_sweep", app=app, vcpu=vcpu, sidecar_count=sidecar_count)
    loads = sorted(set(rows["total_sidecar_load_pct"].dropna()) | set(art["load"].dropna()))
    records, seen, tails = [], set(), {}
    for load in loads:
        record = {"total_sidecar_load_pct": load}
        codes: tuple[str, ...] = ()
        for metric in ("p50_ms", "p99_ms", "rps"):
            ours = measured_at(rows, load, metric)
            article = refmod.value(
                ref,
                "load_sweep",
                metric,
                app=app,
                vcpu=vcpu,
                sidecar_count=sidecar_count,
                load=load,
            )
            record.update(
                {
                    metric: ours.value,
                    f"{metric}_lo": ours.lo,
                    f"{metric}_hi": ours.hi,
                    f"{metric}_article": article,
                    **ratio_record(f"{metric}_ratio", to_article(at(rows, load), article, metric)),
                }
            )
            codes = ours.codes
            if ours.conditions:
                seen |= cell_codes(codes, metric)
        for metric in ("steady_p99_ms", "steady_rps"):
            record[metric] = measured_at(rows, load, metric).value
        record["sidecars_cpu_pct"] = delivered(at(rows, load))
        text, verdict = tail_vs_article(at(rows, load), record["p99_ms_article"])
        record["p99_tails_vs_article"] = verdict
        if verdict:  # a bimodal cell: no P99 ratio, its tail shares instead
            record.update(
                {"p99_ms_ratio": math.nan, "p99_ms_ratio_lo": math.nan, "p99_ms_ratio_hi": math.nan}
            )
            tails[load] = text
        record["repeats"] = measured_at(rows, load, "repeats").value
        record["flags"] = flags_text(codes)
        records.append(record)
    data = pd.DataFrame(
        records,
        columns=[
            "total_sidecar_load_pct",
            "sidecars_cpu_pct",
            "p50_ms",
            "p50_ms_lo",
            "p50_ms_hi",
            "p50_ms_article",
            "p50_ms_ratio",
            "p50_ms_ratio_lo",
            "p50_ms_ratio_hi",
            "p99_ms",
            "p99_ms_lo",
            "p99_ms_hi",
            "p99_ms_article",
            "p99_ms_ratio",
            "p99_ms_ratio_lo",
            "p99_ms_ratio_hi",
            "steady_p99_ms",
            "rps",
            "rps_lo",
            "rps_hi",
            "rps_article",
            "rps_ratio",
            "rps_ratio_lo",
            "rps_ratio_hi",
            "steady_rps",
            "p99_tails_vs_article",
            "repeats",
            "flags",
        ],
    )

    def ratios(metric):
        return [
            tails.get(r["total_sidecar_load_pct"])
            if metric == "p99_ms" and r["total_sidecar_load_pct"] in tails
            else ratio_text(r[f"{metric}_ratio"], r[f"{metric}_ratio_lo"], r[f"{metric}_ratio_hi"])
            for _, r in data.iterrows()
        ]

    def cells(metric, digits):
        return [
            measured(
                r[metric],
                r[f"{metric}_lo"],
                r[f"{metric}_hi"],
                codes_of(r["flags"]),
                metric,
                digits,
            )
            for _, r in data.iterrows()
        ]

    display = pd.DataFrame(
        {
            "Total load (delivered)": [
                load_text(x, u)
                for x, u in zip(data["total_sidecar_load_pct"], data["sidecars_cpu_pct"])
            ],
            "P50 ms": cells("p50_ms", 1),
            "P50 ms (article)": data["p50_ms_article"].map(fmt),
            "P99 ms": cells("p99_ms", 1),
            "P99 ms (article)": data["p99_ms_article"].map(fmt),
            "P99 ours/article": ratios("p99_ms"),
            "Steady P99 ms": data["steady_p99_ms"].map(fmt),
            "RPS": cells("rps", 0),
            "RPS (article)": data["rps_article"].map(lambda v: fmt(v, 0)),
            "RPS ours/article": ratios("rps"),
            "Steady RPS": data["steady_rps"].map(lambda v: fmt(v, 0)),
        }
    )
    title = f"{APP_NAMES.get(app, app)} {vcpu:g} vCPU + {sidecar_count} sidecars: total sidecar load -> P50, P99, RPS"
    notes = [
        DEFINITIONS,
        STEADY_NOTE,
        DELIVERED_NOTE,
        f"Memory {memory} MB. Rows: every total load measured here or published by the article.",
    ]
    if tails:
        notes.append(BIMODAL_NOTE)
    return Table(
        f"load_sweep_{app}", title, data, display, notes + missing_note(display[["P50 ms"]]), seen
    )


def _range_text(loads: pd.Series) -> str:
    if loads.empty:
        return ""
    low, high = loads.min(), loads.max()
    return f"{low:g}%" if low == high else f"{low:g}-{high:g}%"


def breaking_points(summary: pd.DataFrame, ref: pd.DataFrame) -> Table:
    memory = baseline_memory(summary)
    article = refmod.change_points(ref)
    series = set()
    # A failed condition has no P99 to place in a sweep: the loads counted and assessed are the measured ones.
    rows = measured_only(runs_of(summary, memory_mb=memory))
    rows = rows[rows["sidecar_count"] > 0]
    for (app, vcpu, sc), _ in rows.groupby(["app", "vcpu", "sidecar_count"]):
        series.add((app, float(vcpu), int(sc)))
    for r in article.itertuples():
        series.add((r.app, float(r.vcpu), int(r.sidecar_count)))
    records, seen = [], set()
    for app, vcpu, sc in sorted(series):
        sweep = runs_of(rows, app, vcpu, sc)
        result = assess_rows(sweep) if len(sweep) else None
        step = result.step if result else None
        verdict = result.verdict if result else TOO_FEW
        codes: list[str] = []
        if step is not None:
            for load in (step.before_load_pct, step.after_load_pct):
                codes += [c for c in measured_at(sweep, load, "p99_ms").codes if c not in codes]
            seen |= cell_codes(codes, "p99_ms")
        art = article[
            (article["app"] == app)
            & np.isclose(article["vcpu"], vcpu)
            & (article["sidecar_count"] == sc)
        ]
        a = art.iloc[0] if len(art) else None
        record = {
            "app": app,
            "vcpu": vcpu,
            "sidecar_count": sc,
            "loads_measured": int(sweep["total_sidecar_load_pct"].nunique()),
            "load_range": _range_text(sweep["total_sidecar_load_pct"]),
            "verdict": verdict,
            "before_load_pct": step.before_load_pct if step else math.nan,
            "after_load_pct": step.after_load_pct if step else math.nan,
            "before_p99_ms": step.before_p99_ms if step else math.nan,
            "after_p99_ms": step.after_p99_ms if step else math.nan,
            "rule": step.reason if step else "",
            "evidence": step.evidence if step else "",
            "flags": flags_text(cell_codes(codes, "p99_ms")),
            "article_before_load_pct": a["before_load_pct"] if a is not None else math.nan,
            "article_after_load_pct": a["after_load_pct"] if a is not None else math.nan,
            "article_before_p99_ms": a["before_p99_ms"] if a is not None else math.nan,
            "article_after_p99_ms": a["after_p99_ms"] if a is not None else math.nan,
            "before_sidecars_cpu_pct": delivered(at(sweep, step.before_load_pct))
            if step
            else math.nan,
            "after_sidecars_cpu_pct": delivered(at(sweep, step.after_load_pct))
            if step
            else math.nan,
        }
        record["same_step_as_article"] = (
            bool(
                step.before_load_pct == a["before_load_pct"]
                and step.after_load_pct == a["after_load_pct"]
            )
            if a is not None and step is not None and verdict == BREAK
            else None
        )
        record["vs_article"] = versus_article(verdict, step, a)
        records.append(record)
    data = pd.DataFrame(
        records,
        columns=[
            "app",
            "vcpu",
            "sidecar_count",
            "loads_measured",
            "load_range",
            "verdict",
            "before_load_pct",
            "after_load_pct",
            "before_p99_ms",
            "after_p99_ms",
            "rule",
            "evidence",
            "flags",
            "article_before_load_pct",
            "article_after_load_pct",
            "article_before_p99_ms",
            "article_after_p99_ms",
            "same_step_as_article",
            "vs_article",
            "before_sidecars_cpu_pct",
            "after_sidecars_cpu_pct",
        ],
    )

    def step_text(before, after, p_before, p_after, used_before=math.nan, used_after=math.nan):
        if math.isnan(before):
            return MISSING
        used = (
            f", {fmt(used_before)} -> {fmt(used_after)} % CPU used"
            if not (math.isnan(used_before) or math.isnan(used_after))
            else ""
        )
        return f"{before:g}% -> {after:g}% ({fmt(p_before)} -> {fmt(p_after)} ms{used})"

    display = pd.DataFrame(
        {
            "Setup": [
                f"{APP_NAMES.get(r.app, r.app)} {r.vcpu:g} vCPU + {r.sidecar_count} sidecar(s)"
                for r in data.itertuples()
            ],
            "Loads measured": [
                f"{r.loads_measured} ({r.load_range})" if r.loads_measured else MISSING
                for r in data.itertuples()
            ],
            "Verdict": data["verdict"],
            "Step (P99)": [
                step_text(
                    r.before_load_pct,
                    r.after_load_pct,
                    r.before_p99_ms,
                    r.after_p99_ms,
                    r.before_sidecars_cpu_pct,
                    r.after_sidecars_cpu_pct,
                )
                + (
                    f" {marks(codes_of(r.flags), 'p99_ms')}"
                    if marks(codes_of(r.flags), "p99_ms")
                    else ""
                )
                for r in data.itertuples()
            ],
            "Evidence": [r.evidence or MISSING for r in data.itertuples()],
            "Article": [
                step_text(
                    r.article_before_load_pct,
                    r.article_after_load_pct,
                    r.article_before_p99_ms,
                    r.article_after_p99_ms,
                )
                for r in data.itertuples()
            ],
            "Against the article": [r.vs_article or MISSING for r in data.itertuples()],
        }
    )
    counts = data["vs_article"].value_counts()
    tally = ", ".join(f"{counts[v]} {v}" for v in VS_ARTICLE if v in counts)
    notes = [
        "Rule (detected from the data, not typed in; breaking.py): along each app / vCPU / sidecar-count sweep at "
        f"{memory} MB, sorted by total sidecar load, a step is large when P99 rises and either (jump) rises by at "
        "least half a CFS period (50 ms at the 100 ms period), or (period) moves past a multiple k of the CFS period "
        "by more than 2 ms (previous <= k*100+2 ms < current) while rising by at least 5 % of the period (5 ms), "
        "or the share of responses slower than k periods (k = 1, 2, 3) rises by at least 1 percentage point. "
        "A large step is a break when it is also clear of the noise: every load from the step on has its 95 % "
        "interval's low end above the high end of every load before it (so a dip and recovery is not a break). "
        "A run with no successful response counts as the worst point. Applied to the article's own published "
        "sweeps (no intervals) it finds the article's four breaking points.",
        "Verdict: 'break' (the first step meeting both), 'within noise' (the first large step whose intervals "
        "overlap what came before or after; no break found), 'none' (no large step over the loads measured), "
        "'too few loads'. The fine 1 % steps of the article preset are needed to place a break to within a few %.",
        "Against the article, by the rule (not by hand): 'same step' (our break is the article's step), 'earlier' / "
        "'later' (our break's step ends at or before / starts at or after the article's), 'overlapping' (the two "
        "steps share loads), 'no break at 95 %' (the article has a break, our intervals place none), 'no article "
        "break' (the article publishes none for the sweep)."
        + (f" Here: {tally}." if tally else ""),
        DEFINITIONS,
    ]
    return Table(
        "breaking_points",
        "Breaking points: first load step where P99 breaks",
        data,
        display,
        notes,
        seen,
    )


VS_ARTICLE = (
    "same step",
    "earlier",
    "later",
    "overlapping",
    "no break at 95 %",
    "no article break",
)


def versus_article(verdict: str, step, article) -> str:
    """Our sweep's breaking point against the article's, by the rule (see breaking_points' notes)."""
    if article is None:
        return "no article break"
    if verdict != BREAK or step is None:
        return "no break at 95 %"
    before, after = float(article["before_load_pct"]), float(article["after_load_pct"])
    if step.before_load_pct == before and step.after_load_pct == after:
        return "same step"
    if step.after_load_pct <= before:
        return "earlier"
    if step.before_load_pct >= after:
        return "later"
    return "overlapping"


def go_vs_next(
    summary: pd.DataFrame, ref: pd.DataFrame, vcpu: float = 0.25, sidecar_count: int = 3
) -> Table:
    memory = baseline_memory(summary)
    go = runs_of(summary, "go", vcpu, sidecar_count, memory)
    nx = runs_of(summary, "next", vcpu, sidecar_count, memory)
    art_loads = set(
        refmod.select(ref, "p99_grid", vcpu=vcpu, sidecar_count=sidecar_count)["load"].dropna()
    )
    # Loads both apps were measured at, plus the article's rows (its side-by-side table uses the grid loads).
    loads = sorted(
        art_loads | (set(go["total_sidecar_load_pct"]) & set(nx["total_sidecar_load_pct"]))
    )
    records, cells, seen = [], [], set()
    for load in loads:
        record = {"total_sidecar_load_pct": load}
        record.update(
            {
                f"{app}_sidecars_cpu_pct": delivered(at(rows, load))
                for app, rows in (("go", go), ("next", nx))
            }
        )
        used = " / ".join(
            f"{record[f'{app}_sidecars_cpu_pct']:.1f}"
            for app in ("go", "next")
            if not math.isnan(record[f"{app}_sidecars_cpu_pct"])
        )
        shown = {"Total load": f"{load:g}%" + (f" ({used} used)" if used and load > 0 else "")}
        for app, rows in (("go", go), ("next", nx)):
            name = APP_NAMES[app].split()[0]
            codes: tuple[str, ...] = ()
            for metric, digits, label in (("p99_ms", 1, "P99 ms"), ("rps", 0, "RPS")):
                ours = measured_at(rows, load, metric)
                article = refmod.value(
                    ref,
                    "load_sweep",
                    metric,
                    app=app,
                    vcpu=vcpu,
                    sidecar_count=sidecar_count,
                    load=load,
                )
                record.update(
                    {
                        f"{app}_{metric}": ours.value,
                        f"{app}_{metric}_lo": ours.lo,
                        f"{app}_{metric}_hi": ours.hi,
                        f"{app}_{metric}_article": article,
                    }
                )
                text = measured(ours.value, ours.lo, ours.hi, ours.codes, metric, digits)
                shown[f"{name} {label} (article)"] = text + (
                    f" ({fmt(article, digits)})" if not math.isnan(article) else ""
                )
                codes = ours.codes
                if ours.conditions:
                    seen |= cell_codes(codes, metric)
            record[f"{app}_flags"] = flags_text(codes)
        # How many times Next.js's RPS Go serves, with both apps' run-to-run uncertainty.
        record.update(ratio_record("go_next_rps_ratio", between(at(go, load), at(nx, load))))
        record["go_next_rps_ratio_article"] = ratio(
            record["go_rps_article"], record["next_rps_article"]
        )
        shown["Go/Next RPS (article)"] = ratio_text(
            record["go_next_rps_ratio"],
            record["go_next_rps_ratio_lo"],
            record["go_next_rps_ratio_hi"],
            1,
        ) + (
            f" ({fmt(record['go_next_rps_ratio_article'], 1)})"
            if not math.isnan(record["go_next_rps_ratio_article"])
            else ""
        )
        records.append(record)
        cells.append(shown)
    columns = (
        ["total_sidecar_load_pct"]
        + [
            f"{a}_{m}{s}"
            for a in ("go", "next")
            for m in ("p99_ms", "rps")
            for s in ("", "_lo", "_hi", "_article")
        ]
        + ["go_flags", "next_flags"]
        + [
            "go_next_rps_ratio",
            "go_next_rps_ratio_lo",
            "go_next_rps_ratio_hi",
            "go_next_rps_ratio_article",
        ]
        + ["go_sidecars_cpu_pct", "next_sidecars_cpu_pct"]
    )
    data = pd.DataFrame(records, columns=columns)
    display = pd.DataFrame(
        cells,
        columns=["Total load"]
        + [f"{n} {l} (article)" for n in ("Go", "Next") for l in ("P99 ms", "RPS")]
        + ["Go/Next RPS (article)"],
    )
    notes = [
        f"{vcpu:g} vCPU, {sidecar_count} sidecars, {memory} MB. Cells: ours [95 % interval] flags (article).",
        "Go/Next RPS: Go's RPS over Next.js's at the same load, with both cells' run-to-run uncertainty.",
        "Total load: nominal, and in parentheses the CPU the sidecars delivered beside Go / beside Next.js "
        "(% of one core, mean over the runs).",
        DEFINITIONS,
    ]
    return Table(
        "go_vs_next",
        f"Go vs Next at {vcpu:g} vCPU + {sidecar_count} sidecars",
        data,
        display,
        notes + missing_note(display),
        seen,
    )


def bucket_runs(rows: pd.DataFrame, low: float, high: float) -> tuple[pd.DataFrame, bool]:
    """Runs of a grid cell: total load in [low, high] at the grid's per-sidecar loads.
    Falls back to every run in the range (second value True) if the matrix has no grid-level run there."""
    in_range = rows[
        (rows["total_sidecar_load_pct"] >= low - 1e-9)
        & (rows["total_sidecar_load_pct"] <= high + 1e-9)
    ]
    levels = in_range["sidecar_load_pct"].to_numpy(dtype=float)[:, None]
    on_grid = in_range[np.isclose(levels, np.array(GRID_SIDECAR_LOADS)[None, :]).any(axis=1)]
    if len(on_grid) or in_range.empty:
        return on_grid, False
    return in_range, True


def rps_grid(summary: pd.DataFrame, ref: pd.DataFrame, app: str) -> Table:
    memory = baseline_memory(summary)
    rows_all = runs_of(summary, app=app, memory_mb=memory)
    art = refmod.select(ref, "rps_grid", app=app)
    vcpus = sorted(set(rows_all["vcpu"].dropna()) | set(art["vcpu"]))
    records, cells, fallback_used, seen = [], [], False, set()
    for vcpu in vcpus:
        for sc, label in SIDECAR_SETS.items():
            rows = runs_of(rows_all, vcpu=vcpu, sidecar_count=sc)
            record = {"vcpu": vcpu, "sidecar_count": sc, "sidecar_set": label}
            shown = {"vCPU": f"{vcpu:.2f}", "Sidecars": label}
            for bucket, low, high in refmod.LOAD_BUCKETS:
                hit, fallback = bucket_runs(rows, low, high)
                fallback_used |= fallback
                ours = measure(hit, "rps")
                article = refmod.value(
                    ref,
                    "rps_grid",
                    "rps",
                    app=app,
                    vcpu=vcpu,
                    sidecar_count=sc,
                    total_sidecar_load_pct=bucket,
                )
                record.update(
                    {
                        f"rps_{bucket}": ours.value,
                        f"rps_{bucket}_lo": ours.lo,
                        f"rps_{bucket}_hi": ours.hi,
                        f"rps_{bucket}_article": article,
                        **ratio_record(f"rps_{bucket}_ratio", to_article(hit, article, "rps")),
                        f"runs_{bucket}": len(hit),
                        f"flags_{bucket}": flags_text(cell_codes(ours.codes, "rps")),
                        f"loads_{bucket}": " ".join(
                            f"{x:g}" for x in sorted(hit["total_sidecar_load_pct"])
                        ),
                        f"sidecars_cpu_pct_{bucket}": delivered(hit),
                    }
                )
                if len(hit):
                    seen |= cell_codes(ours.codes, "rps")
                used = record[f"sidecars_cpu_pct_{bucket}"]
                text = (
                    measured(ours.value, ours.lo, ours.hi, ours.codes, "rps", 0)
                    + (f" @{used:.1f}" if not math.isnan(used) and high > 0 else "")
                    + (f" ({fmt(article, 0)})" if not math.isnan(article) else "")
                )
                if len(hit) > 1:
                    text += f" [n={len(hit)}]"
                if fallback:
                    text += " *"
                shown[f"{bucket}%"] = text
            if any(record[f"runs_{b}"] for b, _, _ in refmod.LOAD_BUCKETS) or any(
                not math.isnan(record[f"rps_{b}_article"]) for b, _, _ in refmod.LOAD_BUCKETS
            ):
                records.append(record)
                cells.append(shown)
    data = pd.DataFrame(records)
    display = pd.DataFrame(
        cells, columns=["vCPU", "Sidecars"] + [f"{b}%" for b, _, _ in refmod.LOAD_BUCKETS]
    )
    notes = [
        f"Cells: our RPS [95 % interval] flags @ the CPU the sidecars delivered (% of one core, mean over the runs) "
        f"(article's RPS). Columns are ranges of nominal total sidecar load (inclusive); memory {memory} MB.",
        "A cell holds the runs whose total load lies in its range and whose per-sidecar load is one of the grid's "
        f"levels ({', '.join(f'{x:g}' for x in GRID_SIDECAR_LOADS)} %); fine-step runs appear in the load sweeps, "
        "not here. When several conditions fall in one cell (e.g. +proxy at 5 % and 15 %), the cell is the mean of "
        "their RPS and of their interval ends (wider than the mean's own interval), marked [n=conditions], with the "
        "flags of any of them; the CSV lists their loads (loads_<bucket>).",
        DEFINITIONS,
    ]
    if fallback_used:
        notes.append(
            "*: no run at a grid level in this range; the cell is the mean of the runs in the range."
        )
    if data.empty:
        data = pd.DataFrame(columns=["vcpu", "sidecar_count", "sidecar_set"])
    return Table(
        f"rps_grid_{app}",
        f"{APP_NAMES.get(app, app)}: RPS for every vCPU x sidecar set x total load",
        data,
        display,
        notes + missing_note(display),
        seen,
    )


def p99_grid(summary: pd.DataFrame, ref: pd.DataFrame, app: str, sidecar_count: int = 3) -> Table:
    memory = baseline_memory(summary)
    rows_all = runs_of(summary, app=app, sidecar_count=sidecar_count, memory_mb=memory)
    art = refmod.select(ref, "p99_grid", app=app, sidecar_count=sidecar_count)
    vcpus = sorted(set(rows_all["vcpu"].dropna()) | set(art["vcpu"]))
    records, cells, seen = [], [], set()
    for vcpu in vcpus:
        rows = runs_of(rows_all, vcpu=vcpu)
        record = {"vcpu": vcpu}
        shown = {"vCPU": f"{vcpu:.2f}"}
        for load in P99_GRID_LOADS:
            ours = measured_at(rows, load, "p99_ms")
            article = refmod.value(
                ref,
                "p99_grid",
                "p99_ms",
                app=app,
                vcpu=vcpu,
                sidecar_count=sidecar_count,
                load=load,
            )
            _, verdict = tail_vs_article(at(rows, load), article)
            ratio_found = NO_RATIO if verdict else to_article(at(rows, load), article, "p99_ms")
            record.update(
                {
                    f"p99_ms_{load:g}": ours.value,
                    f"p99_ms_{load:g}_lo": ours.lo,
                    f"p99_ms_{load:g}_hi": ours.hi,
                    f"p99_ms_{load:g}_article": article,
                    f"sidecars_cpu_pct_{load:g}": delivered(at(rows, load)),
                    f"p99_tails_vs_article_{load:g}": verdict,
                    **ratio_record(f"p99_ms_{load:g}_ratio", ratio_found),
                    f"flags_{load:g}": flags_text(cell_codes(ours.codes, "p99_ms")),
                }
            )
            if ours.conditions:
                seen |= cell_codes(ours.codes, "p99_ms")
            used = record[f"sidecars_cpu_pct_{load:g}"]
            shown[f"{load:g}%"] = (
                measured(ours.value, ours.lo, ours.hi, ours.codes, "p99_ms")
                + (f" ({fmt(article)})" if not math.isnan(article) else "")
                + (f" @{used:.1f}" if not math.isnan(used) and load > 0 else "")
                + (f" tails {verdict}" if verdict else "")
            )
        records.append(record)
        cells.append(shown)
    data = pd.DataFrame(records)
    if data.empty:
        data = pd.DataFrame(columns=["vcpu"])
    display = pd.DataFrame(cells, columns=["vCPU"] + [f"{x:g}%" for x in P99_GRID_LOADS])
    notes = [
        f"Cells: our P99 ms [95 % interval] flags (article's) @ the CPU the sidecars delivered (% of one core). "
        f"Rows: vCPU; columns: nominal total sidecar load; {sidecar_count} sidecars, {memory} MB.",
        BIMODAL_NOTE
        + " Here: 'tails agrees' / 'tails differs' (p99_grid CSV: p99_tails_vs_article_<load>).",
        DEFINITIONS,
    ]
    return Table(
        f"p99_grid_{app}",
        f"{APP_NAMES.get(app, app)}: P99 (ms) by vCPU x total load, {sidecar_count} sidecars",
        data,
        display,
        notes + missing_note(display),
        seen,
    )


def memory_table(
    summary: pd.DataFrame,
    ref: pd.DataFrame,
    sidecar_count: int = 3,
    sidecar_load_pct: float = MEMORY_SIDECAR_LOAD,
) -> Table:
    rows_all = runs_of(summary, sidecar_count=sidecar_count)
    rows_all = rows_all[np.isclose(rows_all["sidecar_load_pct"], sidecar_load_pct)]
    art = refmod.select(ref, "memory")
    base_memory = baseline_memory(summary)
    keys = set(zip(rows_all["vcpu"], rows_all["memory_mb"])) | set(
        zip(art["vcpu"], art["memory_mb"])
    )
    records, seen = [], set()
    for vcpu, memory in sorted(keys):
        record = {"vcpu": float(vcpu), "memory_mb": int(memory)}
        for app in ("go", "next"):
            cell = runs_of(rows_all, app, vcpu, memory_mb=int(memory))
            ours = measure(cell, "rps")
            article = refmod.value(
                ref,
                "memory",
                "rps",
                app=app,
                vcpu=vcpu,
                memory_mb=int(memory),
                sidecar_count=sidecar_count,
            )
            # Memory gain: over the same app and vCPU at the baseline memory, both sides' runs counted.
            gain = between(cell, runs_of(rows_all, app, vcpu, memory_mb=base_memory))
            record.update(
                {
                    f"{app}_rps": ours.value,
                    f"{app}_rps_lo": ours.lo,
                    f"{app}_rps_hi": ours.hi,
                    f"{app}_rps_article": article,
                    **ratio_record(f"{app}_rps_ratio", to_article(cell, article, "rps")),
                    **ratio_record(f"{app}_gain", gain),
                    f"{app}_flags": flags_text(cell_codes(ours.codes, "rps")),
                }
            )
            if ours.conditions:
                seen |= cell_codes(ours.codes, "rps")
        records.append(record)
    columns = ["vcpu", "memory_mb"] + [
        f"{a}_{s}"
        for a in ("go", "next")
        for s in (
            "rps",
            "rps_lo",
            "rps_hi",
            "rps_article",
            "rps_ratio",
            "rps_ratio_lo",
            "rps_ratio_hi",
            "gain",
            "gain_lo",
            "gain_hi",
            "flags",
        )
    ]
    data = pd.DataFrame(records, columns=columns)

    def cells(app):
        return [
            measured(
                r[f"{app}_rps"],
                r[f"{app}_rps_lo"],
                r[f"{app}_rps_hi"],
                codes_of(r[f"{app}_flags"]),
                "rps",
                0,
            )
            for _, r in data.iterrows()
        ]

    def ratios(app, what):
        return [
            ratio_text(r[f"{app}_{what}"], r[f"{app}_{what}_lo"], r[f"{app}_{what}_hi"])
            for _, r in data.iterrows()
        ]

    display = pd.DataFrame(
        {
            "vCPU": [f"{x:.2f}" for x in data["vcpu"]],
            "Memory limit": [f"{m} MB" for m in data["memory_mb"]],
            "Go RPS": cells("go"),
            "Go RPS (article)": data["go_rps_article"].map(lambda v: fmt(v, 0)),
            "Go ours/article": ratios("go", "rps_ratio"),
            f"Go / {base_memory} MB": ratios("go", "gain"),
            "Next RPS": cells("next"),
            "Next RPS (article)": data["next_rps_article"].map(lambda v: fmt(v, 0)),
            "Next ours/article": ratios("next", "rps_ratio"),
            f"Next / {base_memory} MB": ratios("next", "gain"),
        }
    )
    notes = [
        f"{sidecar_count} sidecars at {sidecar_load_pct:g} % each (total {sidecar_count * sidecar_load_pct:g} %). "
        "The article publishes 1 vCPU only (it saw no memory effect at 0.25-0.5 vCPU).",
        f"<app> / {base_memory} MB: the memory gain, RPS over the same app's RPS at {base_memory} MB and the same "
        "vCPU, with both cells' run-to-run uncertainty; an interval holding 1 shows no memory effect at 95 %.",
        DEFINITIONS,
    ]
    return Table(
        "memory",
        "RPS by memory limit",
        data,
        display,
        notes + missing_note(display[["Go RPS", "Next RPS"]]),
        seen,
    )


TABLE_BUILDERS: dict[str, Callable[[pd.DataFrame, pd.DataFrame], Table]] = {
    "load_sweep_go": lambda s, r: load_sweep(s, r, "go"),
    "load_sweep_next": lambda s, r: load_sweep(s, r, "next"),
    "breaking_points": breaking_points,
    "go_vs_next": go_vs_next,
    "rps_grid_go": lambda s, r: rps_grid(s, r, "go"),
    "rps_grid_next": lambda s, r: rps_grid(s, r, "next"),
    "p99_grid_go": lambda s, r: p99_grid(s, r, "go"),
    "p99_grid_next": lambda s, r: p99_grid(s, r, "next"),
    "memory": memory_table,
}
TABLE_NAMES = tuple(TABLE_BUILDERS) + ("findings", "mitigations")


def build_tables(summary: pd.DataFrame, ref: pd.DataFrame) -> list[Table]:
    """The article's tables over the conditions at its settings, its findings checked by rule (findings.py, with the
    breaking points' rows), then the knobs' table (empty without knobs)."""
    article = article_settings(summary)
    built = [build(article, ref) for build in TABLE_BUILDERS.values()]
    points = next(t.data for t in built if t.name == "breaking_points")
    return built + [findings_table(article, ref, points), mitigations(summary, ref)]


def write_tables(summary: pd.DataFrame, ref: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """Write <name>.md and <name>.csv for every table; returns the paths written."""
    return write_table_files(build_tables(summary, ref), out_dir, environment_note(summary))

"""The article's findings, each checked against our summary by one rule: the findings table.

A finding is one of the article's conclusions with the numbers it rests on. Each number is a check: a ratio
between conditions of the same kind that the article published and we measured, computed the same way from
both (retention: RPS at a load over the same setup's RPS at 0 %; P99 at a load over P99 at 0 %; the memory
gain; Next.js's retention over Go's). Ours carry every condition's run-to-run uncertainty (95 % Welch t
interval of the runs' log values: cells.between, stats.condition_contrast).

The rule, the same for every check (no verdict is written by hand):

- The article's direction: down (its ratio below 1 / 1.1), up (above 1.1), flat (within 10 % of 1).
- Ours: down when our interval lies below 1, up when above 1, flat when it lies within 10 % of 1 (between
  1 / 1.1 and 1.1), otherwise not clear at 95 %.
- A check reproduces the article when ours shows the article's direction; it differs when ours shows
  another one; it is not clear when our interval decides nothing.
- Its size: the article's ratio inside our interval, or ours above or below it.
- A breaking point (a P99 step by a CFS period) is the breaking_points table's rule: a step at 95 % is the
  article's direction; it is the same size when it lies between the same two loads.

A finding is reproduced when every check reproduces, not reproduced when none does, partly otherwise.

Data: summary (the article's settings) + the article's numbers + the breaking_points table's rows ->
findings_table (one row per check in findings.csv, one per finding in findings.md, which the README's
findings table copies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from . import reference as refmod
from .cells import NO_RATIO, cell_codes, codes_of, measured_only, runs_of
from .repstats import Estimate, as_float
from .stats import condition_contrast
from .table_format import Table, fmt, marks, ratio_text

BAND = 1.1  # "flat": within 10 % of 1, on either side (1 / 1.1 to 1.1)
DOWN, UP, FLAT, UNCLEAR, STEP = "down", "up", "flat", "not clear", "step"
REPRODUCED, DIFFERS, NOT_CLEAR = "reproduced", "differs", "not clear at 95 %"
INSIDE, ABOVE, BELOW = "article's inside", "ours above", "ours below"
APPS = {"go": "Go", "next": "Next.js"}
DEFAULT_MEMORY_MB = 2048


@dataclass(frozen=True)
class Cell:
    """One condition at the article's settings."""

    app: str
    vcpu: float
    sidecar_count: int
    load: float
    memory_mb: int = DEFAULT_MEMORY_MB


@dataclass(frozen=True)
class Check:
    """A ratio of conditions: the product of each cell's metric to the power of its sign."""

    label: str
    metric: str
    terms: tuple[tuple[Cell, int], ...]
    article_table: str  # the article's table its numbers come from (its tables differ a little)


@dataclass(frozen=True)
class Finding:
    claim: str
    checks: tuple[Check, ...] = ()
    breaking: bool = False  # checked by the breaking_points table's rows instead


def over_idle(
    metric: str, label: str, app: str, vcpu: float, load: float, table: str, sidecars: int
) -> Check:
    """A metric at a total load over the same setup's at 0 %."""
    return Check(
        label,
        metric,
        ((Cell(app, vcpu, sidecars, load), 1), (Cell(app, vcpu, sidecars, 0.0), -1)),
        table,
    )


def kept(app: str, vcpu: float, load: float, table: str, sidecars: int = 3) -> Check:
    """RPS at a total load over RPS at 0 %, same setup (retention)."""
    label = f"{APPS[app]} {vcpu:g} vCPU, {sidecars} x {load / sidecars:g} %"
    return over_idle("rps", label, app, vcpu, load, table, sidecars)


def p99_rise(app: str, vcpu: float, load: float, table: str, sidecars: int = 3) -> Check:
    """P99 at a total load over P99 at 0 %, same setup."""
    label = f"{APPS[app]} {vcpu:g} vCPU P99, {sidecars} x {load / sidecars:g} % over 0 %"
    return over_idle("p99_ms", label, app, vcpu, load, table, sidecars)


def memory_gain(
    app: str, vcpu: float, load: float, high: int, low: int, sidecars: int = 3
) -> Check:
    label = f"{APPS[app]} {high / 1024:g} GB over {low} MB"
    return Check(
        label,
        "rps",
        (
            (Cell(app, vcpu, sidecars, load, high), 1),
            (Cell(app, vcpu, sidecars, load, low), -1),
        ),
        "memory",
    )


def next_over_go(vcpu: float, load: float, table: str, sidecars: int = 3) -> Check:
    """Next.js's retention over Go's at one total load: below 1 when Next.js loses more."""
    label = f"Next.js's kept over Go's, {vcpu:g} vCPU, {sidecars} x {load / sidecars:g} %"
    return Check(
        label,
        "rps",
        (
            (Cell("next", vcpu, sidecars, load), 1),
            (Cell("next", vcpu, sidecars, 0.0), -1),
            (Cell("go", vcpu, sidecars, load), -1),
            (Cell("go", vcpu, sidecars, 0.0), 1),
        ),
        table,
    )


FINDINGS = (
    Finding(
        "At 0.25 vCPU a few % to a dozen % of sidecar load changes performance, the more so the more "
        "CPU the app needs",
        (
            kept("go", 0.25, 15, "load_sweep"),
            kept("next", 0.25, 3, "load_sweep"),
            kept("next", 0.25, 15, "load_sweep"),
            next_over_go(0.25, 15, "load_sweep"),
        ),
    ),
    Finding(
        "From 0.5 vCPU on, about 15 % of sidecar load matters little",
        (
            kept("go", 0.5, 15, "rps_grid"),
            kept("go", 1.0, 15, "rps_grid"),
            kept("next", 0.5, 15, "rps_grid"),
            kept("next", 1.0, 15, "rps_grid"),
        ),
    ),
    Finding(
        "At 2 vCPU even 105 % of sidecar load leaves P99 stable",
        (
            p99_rise("go", 2.0, 105, "p99_grid"),
            p99_rise("next", 2.0, 105, "p99_grid"),
            kept("go", 2.0, 105, "rps_grid"),
            kept("next", 2.0, 105, "rps_grid"),
        ),
    ),
    Finding(
        "Memory does not help when CPU is short; with CPU to spare, Next.js gains 1.7x from 512 MB "
        "to 4 GB",
        (
            memory_gain("next", 1.0, 45, 4096, 512),
            memory_gain("go", 1.0, 45, 4096, 512),
        ),
    ),
    Finding("P99 steps up by a CFS period at a breaking point of sidecar load", breaking=True),
    Finding(
        "Next.js suffers more than Go at 0.25 vCPU + 3 sidecars",
        (
            next_over_go(0.25, 45, "load_sweep"),
            next_over_go(0.25, 75, "load_sweep"),
            next_over_go(0.25, 105, "load_sweep"),
        ),
    ),
)


# --- the rule --------------------------------------------------------------------------------------


def direction_of(value: float) -> str:
    """The article's direction: down, up or flat (within 10 % of 1); not clear without a value."""
    if not math.isfinite(value):
        return UNCLEAR
    if value < 1 / BAND:
        return DOWN
    if value > BAND:
        return UP
    return FLAT


def shown(found: Estimate) -> str:
    """Our direction at 95 %: down or up (interval clear of 1), flat (interval within 10 % of 1), else not
    clear."""
    if not found.has_interval:
        return UNCLEAR
    if found.hi < 1:
        return DOWN
    if found.lo > 1:
        return UP
    if 1 / BAND <= found.lo and found.hi <= BAND:
        return FLAT
    return UNCLEAR


def verdict(article: float, found: Estimate) -> str:
    ours = shown(found)
    if ours == UNCLEAR or direction_of(article) == UNCLEAR:
        return NOT_CLEAR
    return REPRODUCED if ours == direction_of(article) else DIFFERS


def size(article: float, found: Estimate) -> str:
    if not (found.has_interval and math.isfinite(article)):
        return ""
    if found.contains(article):
        return INSIDE
    return ABOVE if found.lo > article else BELOW


def finding_verdict(verdicts: list[str]) -> str:
    """reproduced / partly / not reproduced, with the counts behind it."""
    if not verdicts:
        return "not measured"
    n, hits = len(verdicts), verdicts.count(REPRODUCED)
    word = "reproduced" if hits == n else "not reproduced" if hits == 0 else "partly"
    parts = [f"{hits} of {n} in the article's direction"]
    for other in (DIFFERS, NOT_CLEAR):
        if verdicts.count(other):
            parts.append(f"{verdicts.count(other)} {other}")
    return f"{word}: " + ", ".join(parts)


# --- values ----------------------------------------------------------------------------------------


def article_value(ref: pd.DataFrame, table: str, cell: Cell, metric: str) -> float:
    """The article's number for a cell in one of its tables: at the cell's total load, else (its full RPS
    grid) in the load bucket ("25-45") that holds it; NaN when the article has none."""
    where = dict(
        app=cell.app, vcpu=cell.vcpu, sidecar_count=cell.sidecar_count, memory_mb=cell.memory_mb
    )
    found = refmod.value(ref, table, metric, load=cell.load, **where)
    if math.isfinite(found):
        return found
    rows = refmod.select(ref, table, metric=metric, **where)
    for label, value in zip(rows["total_sidecar_load_pct"], rows["value"]):
        low, high = refmod.bucket_bounds(label)
        if low <= cell.load <= high:
            return float(value)
    return math.nan


def article_ratio(ref: pd.DataFrame, check: Check) -> float:
    result = 1.0
    for cell, sign in check.terms:
        result *= article_value(ref, check.article_table, cell, check.metric) ** sign
    return result


def our_row(summary: pd.DataFrame, cell: Cell) -> pd.Series | None:
    if summary.empty or "app" not in summary.columns:
        return None
    rows = runs_of(summary, cell.app, cell.vcpu, cell.sidecar_count, cell.memory_mb)
    rows = rows[np.isclose(rows["total_sidecar_load_pct"], cell.load)]
    return rows.iloc[0] if len(rows) == 1 else None


@dataclass(frozen=True)
class Ours:
    found: Estimate
    codes: list[str]  # flag codes of its cells that bear on the metric
    ids: list[str]  # its conditions
    app_cpu: float  # the same ratio of the app's CPU (app_cpu_pct): the reason, in CPU terms
    sidecars_cpu_pct: float  # what the first cell's sidecars delivered, % of one core


def cpu_ratio(rows: list, column: str = "app_cpu_pct") -> float:
    """The same product as the check's over the cells' CPU column; NaN when a cell lacks it."""
    result = 1.0
    for row, sign in rows:
        value = as_float(row.get(column))
        if not (math.isfinite(value) and value > 0):
            return math.nan
        result *= value**sign
    return result


def our_ratio(summary: pd.DataFrame, check: Check) -> Ours:
    """Our ratio with its interval, its cells' marks and ids, and the app's CPU in the same ratio."""
    rows = [(our_row(summary, cell), sign) for cell, sign in check.terms]
    if any(row is None for row, _ in rows):
        return Ours(NO_RATIO, [], [], math.nan, math.nan)
    codes: list[str] = []
    for row, _ in rows:
        # In the flags' own order, cell by cell (a set's order changed from one process to the next).
        given = codes_of(row.get("flags"))
        kept = cell_codes(given, check.metric)
        codes += [c for c in given if c in kept and c not in codes]
    return Ours(
        condition_contrast(rows, check.metric),
        codes,
        [str(row.get("condition_id", "")) for row, _ in rows],
        cpu_ratio(rows),
        as_float(rows[0][0].get("sidecars_cpu_pct")),
    )


# --- the table -------------------------------------------------------------------------------------

COLUMNS = [
    "finding",
    "claim",
    "check",
    "metric",
    "conditions",
    "article",
    "article_step",
    "article_direction",
    "value",
    "lo",
    "hi",
    "our_step",
    "our_direction",
    "verdict",
    "size",
    "app_cpu_ratio",
    "sidecars_cpu_pct",
    "flags",
]


def check_records(
    summary: pd.DataFrame, ref: pd.DataFrame, number: int, finding: Finding
) -> list[dict]:
    records = []
    for check in finding.checks:
        article = article_ratio(ref, check)
        ours = our_ratio(summary, check)
        found = ours.found
        records.append(
            {
                "finding": number,
                "claim": finding.claim,
                "check": check.label,
                "metric": check.metric,
                "conditions": " ".join(
                    f"{'+' if sign > 0 else '-'}{i}" for i, (_, sign) in zip(ours.ids, check.terms)
                ),
                "article": article,
                "article_step": "",
                "article_direction": direction_of(article),
                "value": found.value,
                "lo": found.lo,
                "hi": found.hi,
                "our_step": "",
                "our_direction": shown(found) if math.isfinite(found.value) else "",
                "verdict": verdict(article, found) if math.isfinite(found.value) else "",
                "size": size(article, found),
                "app_cpu_ratio": ours.app_cpu,
                "sidecars_cpu_pct": ours.sidecars_cpu_pct,
                "flags": ",".join(ours.codes),
            }
        )
    return records


def breaking_records(points: pd.DataFrame | None, number: int, finding: Finding) -> list[dict]:
    """One check per setup where the article found a breaking point, from the breaking_points table's rows."""
    records: list[dict] = []
    if points is None or "vs_article" not in points.columns:
        return records
    for _, r in points[points["vs_article"] != "no article break"].iterrows():
        at_95 = r["vs_article"] != "no break at 95 %"
        records.append(
            {
                "finding": number,
                "claim": finding.claim,
                "check": f"{APPS.get(r['app'], r['app'])} {float(r['vcpu']):g} vCPU + "
                f"{int(r['sidecar_count'])}",
                "metric": "p99_ms",
                "conditions": "",
                "article": math.nan,
                "article_step": _step(r["article_before_load_pct"], r["article_after_load_pct"]),
                "article_direction": STEP,
                "value": math.nan,
                "lo": math.nan,
                "hi": math.nan,
                "our_step": _step(r["before_load_pct"], r["after_load_pct"])
                if at_95
                else str(r["verdict"]),
                "our_direction": STEP if at_95 else UNCLEAR,
                "verdict": REPRODUCED if at_95 else NOT_CLEAR,
                "size": (INSIDE if r["vs_article"] == "same step" else f"ours {r['vs_article']}")
                if at_95
                else "",
                "app_cpu_ratio": math.nan,
                "sidecars_cpu_pct": as_float(r.get("after_sidecars_cpu_pct"))
                if at_95
                else math.nan,
                "flags": str(r.get("flags", "") or "") if at_95 else "",
            }
        )
    return records


def _step(before, after) -> str:
    return f"{float(before):g} -> {float(after):g} %"


def findings_data(
    summary: pd.DataFrame, ref: pd.DataFrame, points: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per check of every finding (module docstring), in FINDINGS order."""
    summary = measured_only(summary)
    records: list[dict] = []
    for number, finding in enumerate(FINDINGS, 1):
        if finding.breaking:
            records += breaking_records(points, number, finding)
        else:
            records += check_records(summary, ref, number, finding)
    return pd.DataFrame(records, columns=COLUMNS)


def _ours_text(r: pd.Series) -> str:
    if r["article_direction"] == STEP:
        return str(r["our_step"])
    text = ratio_text(r["value"], r["lo"], r["hi"])
    mark = marks(codes_of(r["flags"]), r["metric"])
    text = f"{text} {mark}" if mark else text
    cpu = as_float(r["app_cpu_ratio"])
    return f"{text} (app CPU {cpu:.2f})" if math.isfinite(cpu) else text


def _article_text(r: pd.Series) -> str:
    return str(r["article_step"]) if r["article_direction"] == STEP else fmt(r["article"], 2)


def findings_table(
    summary: pd.DataFrame, ref: pd.DataFrame, points: pd.DataFrame | None = None
) -> Table:
    """findings.csv: one row per check; findings.md: one row per finding, the checks joined by "; "."""
    data = findings_data(summary, ref, points)
    rows, seen = [], set()
    for number, finding in enumerate(FINDINGS, 1):
        checks = data[data["finding"] == number]
        measured = checks[checks["verdict"] != ""]
        for codes, metric in zip(checks["flags"], checks["metric"]):
            seen |= cell_codes(codes_of(codes), metric)
        rows.append(
            {
                "The article found": finding.claim,
                "The article's numbers": "; ".join(
                    f"{r['check']}: {_article_text(r)}" for _, r in checks.iterrows()
                ),
                "Ours": "; ".join(f"{r['check']}: {_ours_text(r)}" for _, r in checks.iterrows()),
                "Verdict": finding_verdict(list(measured["verdict"])) + _sizes(measured),
            }
        )
    notes = [
        "Each number is a ratio between two of the article's conditions (or, for Next.js against Go, "
        "between two such ratios), computed alike from the article's published numbers and from ours: "
        'retention is RPS at a load over the same setup\'s RPS at 0 %, "3 x 5 %" three sidecars at 5 % each. '
        "[lo–hi]: 95 % Welch t interval of the runs' log values, every condition's run-to-run variation "
        "counted.",
        f"Rule: the article's direction is down (its ratio below 1/{BAND:g}), up (above {BAND:g}) or flat "
        f"(within 10 % of 1); ours is down or up when our interval is clear of 1, flat when it lies within "
        f"10 % of 1, else not clear at 95 %. A check is reproduced when ours shows the article's direction; "
        "a finding is reproduced when all its checks are, partly when some are. Size: whether the "
        "article's ratio lies inside our interval. The verdict judges the article's published numbers, "
        "not its words: where they disagree (it calls the losses at 0.5 and 1 vCPU little), its numbers "
        "are what is checked.",
        "(app CPU x): the same ratio of the CPU the app's process got (app_cpu_pct): where it matches "
        "the RPS ratio, the app lost throughput in proportion to the CPU the sidecars took from it.",
        "Breaking points: the breaking_points table's rule; a step at 95 % reproduces the article's, the "
        "same size when it lies between the same two loads.",
    ]
    return Table(
        "findings", "The article's findings, checked by rule", data, pd.DataFrame(rows), notes, seen
    )


def _sizes(measured: pd.DataFrame) -> str:
    sized = measured[measured["size"] != ""]
    if sized.empty:
        return ""
    inside = int((sized["size"] == INSIDE).sum())
    return f"; the article's size in {inside} of {len(sized)}"

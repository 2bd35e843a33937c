"""The article's tables, from our summary, with the article's numbers beside ours.

Each table is written twice: <name>.csv (numbers, one column per value, for
machines: `rps`, `rps_lo`, `rps_hi`, `flags` ...) and <name>.md (the same cells
formatted, with a title and the rules that made them). A measured cell shows
its value, its 95 % interval and its flags' marks, e.g. `1195 [1185–1202] H`;
a legend below the table explains the marks that appear in it (from
flags.FLAGS). A cell with no run in the current matrix is "—" in Markdown and
empty in CSV; a table never fails because part of the matrix is missing, nor
because a summary predates intervals or flags (its cells show the value alone).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from . import reference as refmod
from .breaking import BREAK, TOO_FEW, assess_rows
from .flags import FLAGS
from .repstats import Estimate
from .stats import condition_ratio, environments, ratio_to_published

MISSING = "—"
FAILED_CELL = "failed"
DEFAULT_MEMORY_MB = 2048
SIDECAR_SETS = {0: "app only", 1: "+proxy", 2: "+agent", 3: "+agent+log"}
# Ranges of total sidecar load, as the article's full RPS tables group them (inclusive).
LOAD_BUCKETS = (("0", 0.0, 0.0), ("5-15", 5.0, 15.0), ("25-45", 25.0, 45.0), ("50-75", 50.0, 75.0),
                ("105", 105.0, 105.0))
# Per-sidecar loads of the full grid; the fine-step runs (1 % steps near breaking points) are not grid cells.
GRID_SIDECAR_LOADS = refmod.GRID_SIDECAR_LOADS
P99_GRID_LOADS = (0.0, 15.0, 45.0, 75.0, 105.0)
MEMORY_SIDECAR_LOAD = 15.0

DEFINITIONS = (
    "Values are whole-window, the article's definition: a run's RPS = successful (2xx) responses / load window "
    "(hey's span) and its percentiles are nearest-rank over its successful responses (ms); a cell is the mean of "
    "its runs. [lo–hi]: 95 % t interval over the runs' values (summary.csv interval_method \"t over runs\"; "
    "its coverage is checked by simulation); a cell of one run shows its within-run interval only (\"within-run "
    "only\"). Ratios (ours/article, retention, memory gain, Go/Next) carry both sides' run-to-run uncertainty: "
    "Welch's t interval of the runs' log values (against the article's numbers, taken as exact: a t interval)."
)
STEADY_NOTE = ("Steady P99 / steady RPS: over the second half of the load window only, after any start-up "
               "transient; the article's numbers are whole-window.")
# Flags that do not bear on a metric's cell: P99.9's sample count says nothing about RPS, P50 or P99.
NOT_FOR = {
    "rps": {"few_samples_p99", "few_samples_p99_9", "bimodal"},
    "steady_rps": {"few_samples_p99", "few_samples_p99_9", "bimodal"},
    "p50_ms": {"few_samples_p99", "few_samples_p99_9", "bimodal"},
    "p99_ms": {"few_samples_p99_9"},
    "steady_p99_ms": {"few_samples_p99_9"},
}


@dataclass
class Table:
    name: str
    title: str
    data: pd.DataFrame  # numbers, written as CSV
    display: pd.DataFrame  # formatted cells, written as Markdown
    notes: list[str] = field(default_factory=list)
    flags: set[str] = field(default_factory=set)  # flag codes marked in its cells, for the legend


# --- small helpers ---------------------------------------------------------------------------------

def fmt(value, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return f"{value:,.{digits}f}".replace(",", "") if digits else f"{value:.0f}"


def paired(ours: float, article: float, digits: int = 1) -> str:
    """"ours (article)", or just ours when the article has no number for the cell."""
    text = fmt(ours, digits)
    if not math.isnan(article):
        text += f" ({fmt(article, digits)})"
    return text


def codes_of(value) -> list[str]:
    """Flag codes from a summary's `flags` cell ("a,b"; "" or missing: none), in FLAGS order."""
    if not isinstance(value, str) or not value:
        return []
    given = {c.strip() for c in value.split(",") if c.strip()}
    return [c for c in FLAGS if c in given] + sorted(given - set(FLAGS))


def marks(codes, metric: str | None = None) -> str:
    """The cell marks of the codes that bear on the metric, e.g. "H S"."""
    shown = [c for c in codes if c not in NOT_FOR.get(metric, set())]
    return " ".join(FLAGS[c].mark if c in FLAGS else c for c in shown)


def measured(value: float, lo: float, hi: float, codes=(), metric: str | None = None, digits: int = 1) -> str:
    """"1195 [1185–1202] H": value, 95 % interval (when known) and flag marks; "failed" when no repetition
    of the cell was measured because they failed (flag run_failed, no value)."""
    text = fmt(value, digits)
    if text == MISSING:
        return FAILED_CELL if "run_failed" in codes else text
    if not (math.isnan(lo) or math.isnan(hi)):
        text += f" [{fmt(lo, digits)}–{fmt(hi, digits)}]"
    mark = marks(codes, metric)
    return f"{text} {mark}" if mark else text


def cell_codes(codes, metric: str | None = None) -> set[str]:
    return {c for c in codes if c not in NOT_FOR.get(metric, set())}


def legend(codes: set[str]) -> list[str]:
    """One line per flag marked in a table: mark - label - rule; nothing when no cell is flagged."""
    if not codes:
        return []
    lines = [f"{FLAGS[c].mark} - {FLAGS[c].label} - {FLAGS[c].rule}." for c in FLAGS if c in codes]
    return ["Flags: " + " ".join(f"`{FLAGS[c].mark}`" for c in FLAGS if c in codes) + " (legend below)."] + lines


def ratio(ours: float, article: float) -> float:
    return ours / article if article and not (math.isnan(ours) or math.isnan(article)) else math.nan


NO_RATIO = Estimate(math.nan, math.nan, math.nan, 0, "none")


def to_article(rows: pd.DataFrame, article: float, metric: str) -> Estimate:
    """Ours / the article's number for a cell: over the runs of its one condition (stats.ratio_to_published);
    a cell of several conditions gets the ratio of their mean, without an interval."""
    if math.isnan(article) or metric not in rows.columns or rows[metric].notna().sum() == 0:
        return NO_RATIO
    if len(rows) == 1:
        return ratio_to_published(rows.iloc[0], article, metric)
    return Estimate(ratio(float(rows[metric].mean()), article), math.nan, math.nan, len(rows), "several")


def between(rows: pd.DataFrame, base: pd.DataFrame, metric: str = "rps") -> Estimate:
    """One condition's metric over another's (retention, memory gain, Go/Next): stats.condition_ratio."""
    if len(rows) != 1 or len(base) != 1:
        return NO_RATIO
    return condition_ratio(rows.iloc[0], base.iloc[0], metric)


def ratios_over(rows: pd.DataFrame, base: pd.Series, metric: str = "rps") -> tuple[np.ndarray, ...]:
    """Each row's metric over one base condition's (retention, memory gain): values, lo, hi arrays."""
    found = [condition_ratio(row, base, metric) for _, row in rows.iterrows()]
    return tuple(np.array([getattr(f, k) for f in found], dtype="float64") for k in ("value", "lo", "hi"))


def ratio_record(prefix: str, found: Estimate) -> dict[str, float]:
    return {prefix: found.value, f"{prefix}_lo": found.lo, f"{prefix}_hi": found.hi}


def ratio_text(value: float, lo: float, hi: float, digits: int = 2) -> str:
    """"0.95 [0.80–1.10]", or the value alone when it has no interval."""
    text = fmt(value, digits)
    if text != MISSING and not (math.isnan(lo) or math.isnan(hi)):
        text += f" [{fmt(lo, digits)}–{fmt(hi, digits)}]"
    return text


def at(rows: pd.DataFrame, load: float) -> pd.DataFrame:
    return rows[np.isclose(rows["total_sidecar_load_pct"], load)]


TAIL_SHARE = 0.01  # P99: 1 % of the responses are at or above it


def tail_vs_article(rows: pd.DataFrame, article_p99: float) -> tuple[str, str]:
    """A bimodal cell against the article's P99, by what that P99 says of the tail shares.

    Article P99 p with k x T < p <= (k + 1) x T: at least 1 % of its responses were slower than k
    periods and at most 1 % slower than k + 1. Ours agrees when our shares' 95 % intervals allow
    both (slow_<k>p_share_hi >= 1 %, slow_<k+1>p_share_lo <= 1 %), else differs. Returns (text, verdict);
    ("", "") when the cell is no single bimodal condition or the article has no P99 there."""
    if len(rows) != 1 or math.isnan(article_p99) or "bimodal" not in codes_of(rows.iloc[0].get("flags")):
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
        lo, hi = (float(row[column]) if math.isnan(lo) else lo), (float(row[column]) if math.isnan(hi) else hi)
        if (side == ">=" and hi < TAIL_SHARE) or (side == "<=" and lo > TAIL_SHARE):
            verdict = "differs"
        parts.append(f"> {periods * period:g} ms {100 * float(row[column]):.1f} % [{100 * lo:.1f}–{100 * hi:.1f}] "
                     f"(article {side} 1 %)")
    if not parts:
        return "", ""
    return "tails: " + "; ".join(parts) + f": {verdict}", verdict


def delivered(rows: pd.DataFrame) -> float:
    """The sidecars' delivered CPU (% of one core, mean over the runs) of a cell's conditions."""
    if "sidecars_cpu_pct" not in rows.columns or rows["sidecars_cpu_pct"].notna().sum() == 0:
        return math.nan
    return float(rows["sidecars_cpu_pct"].mean())


def load_text(load: float, used: float) -> str:
    """"15% (11.2 used)": the nominal total load and the CPU the sidecars delivered."""
    return f"{load:g}%" + (f" ({used:.1f} used)" if not math.isnan(used) and load > 0 else "")


DELIVERED_NOTE = ("Load: the sidecars' nominal total load, and in parentheses the CPU they delivered (% of one core, "
                  "mean over the runs; summary.csv sidecars_cpu_pct). Wall-clock sidecars, the article's method, burn "
                  "less than nominal when the task is throttled; the delivered CPU is what the app lost.")
BIMODAL_NOTE = ("B (bimodal): the runs' P99 fall on both sides of a boundary between whole CFS periods, so a P99 "
                "ratio would compare one mode with the other; such a cell is compared with the article by the tail "
                "shares its P99 implies (at least 1 % slower than k periods, at most 1 % slower than k + 1).")


def baseline_memory(summary: pd.DataFrame) -> int:
    """2048 MB (the article's default) if the matrix has it, else the most common memory limit."""
    if summary.empty:
        return DEFAULT_MEMORY_MB
    if (summary["memory_mb"] == DEFAULT_MEMORY_MB).any():
        return DEFAULT_MEMORY_MB
    return int(summary["memory_mb"].mode().iloc[0])


def measured_only(summary: pd.DataFrame) -> pd.DataFrame:
    """The conditions with at least one measured repetition (a summary from before failed_runs: all of them)."""
    if "failed_runs" not in summary.columns or "repeats" not in summary.columns:
        return summary
    return summary[pd.to_numeric(summary["repeats"], errors="coerce").fillna(1) > 0]


def runs_of(summary: pd.DataFrame, app: str | None = None, vcpu: float | None = None,
            sidecar_count: int | None = None, memory_mb: int | None = None) -> pd.DataFrame:
    rows = summary
    if app is not None:
        rows = rows[rows["app"] == app]
    if vcpu is not None:
        rows = rows[np.isclose(rows["vcpu"], vcpu)]
    if sidecar_count is not None:
        rows = rows[rows["sidecar_count"] == sidecar_count]
    if memory_mb is not None:
        rows = rows[rows["memory_mb"] == memory_mb]
    return rows


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
    def mean(column):
        if column not in rows.columns:
            return math.nan
        values = rows[column].dropna()
        return float(values.mean()) if len(values) else math.nan

    codes: list[str] = []
    for value in rows["flags"] if "flags" in rows.columns else []:
        codes += [c for c in codes_of(value) if c not in codes]
    return Measured(mean(metric), mean(f"{metric}_lo"), mean(f"{metric}_hi"), tuple(codes),
                    int(rows[metric].notna().sum()) if metric in rows.columns else 0)


def measured_at(rows: pd.DataFrame, load: float, metric: str) -> Measured:
    return measure(rows[np.isclose(rows["total_sidecar_load_pct"], load)], metric)


def flags_text(codes) -> str:
    return ",".join(sorted(codes))


def apps_of(summary: pd.DataFrame, ref: pd.DataFrame) -> list[str]:
    apps = set(summary["app"].dropna()) | set(ref["app"].dropna())
    return [a for a in ("go", "next") if a in apps] + sorted(apps - {"go", "next"})


APP_NAMES = {"go": "Go API", "next": "Next SSR"}


def setup_name(app: str, vcpu: float, sidecar_count: int) -> str:
    noun = "sidecar" if sidecar_count == 1 else "sidecars"
    return f"{APP_NAMES.get(app, app).split()[0]} {vcpu:g} vCPU + {sidecar_count} {noun}"


def environment_note(summary: pd.DataFrame) -> list[str]:
    envs = environments(summary)
    if len(envs) > 1:
        hosts = ", ".join(sorted(set(envs.get("env_hostname", pd.Series(["?"])).astype(str))))
        return [f"Warning: these runs come from {len(envs)} different environments (hosts: {hosts}); "
                "compare cells across environments with care (see summary.csv env_* columns)."]
    return []


def missing_note(display: pd.DataFrame) -> list[str]:
    count = int(display.apply(lambda col: col.astype(str).str.startswith(MISSING)).to_numpy().sum())
    failed = int(display.apply(lambda col: col.astype(str).str.startswith(FAILED_CELL)).to_numpy().sum())
    notes = []
    if count:
        notes.append(f"{count} cell(s) show {MISSING}: no run of the current matrix for them (the article's number, "
                     "where it has one, is in parentheses).")
    if failed:
        notes.append(f"{failed} cell(s) show {FAILED_CELL}: every repetition of the condition failed (a process of the "
                     "task died; summary.csv `failure` says which and why).")
    return notes


# --- the tables ------------------------------------------------------------------------------------

def load_sweep(summary: pd.DataFrame, ref: pd.DataFrame, app: str, vcpu: float = 0.25,
               sidecar_count: int = 3) -> Table:
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
            article = refmod.value(ref, "load_sweep", metric, app=app, vcpu=vcpu, sidecar_count=sidecar_count,
                                   load=load)
            record.update({metric: ours.value, f"{metric}_lo": ours.lo, f"{metric}_hi": ours.hi,
                           f"{metric}_article": article,
                           **ratio_record(f"{metric}_ratio", to_article(at(rows, load), article, metric))})
            codes = ours.codes
            if ours.conditions:
                seen |= cell_codes(codes, metric)
        for metric in ("steady_p99_ms", "steady_rps"):
            record[metric] = measured_at(rows, load, metric).value
        record["sidecars_cpu_pct"] = delivered(at(rows, load))
        text, verdict = tail_vs_article(at(rows, load), record["p99_ms_article"])
        record["p99_tails_vs_article"] = verdict
        if verdict:  # a bimodal cell: no P99 ratio, its tail shares instead
            record.update({"p99_ms_ratio": math.nan, "p99_ms_ratio_lo": math.nan, "p99_ms_ratio_hi": math.nan})
            tails[load] = text
        record["repeats"] = measured_at(rows, load, "repeats").value
        record["flags"] = flags_text(codes)
        records.append(record)
    data = pd.DataFrame(records, columns=[
        "total_sidecar_load_pct", "sidecars_cpu_pct", "p50_ms", "p50_ms_lo", "p50_ms_hi", "p50_ms_article", "p50_ms_ratio",
        "p50_ms_ratio_lo", "p50_ms_ratio_hi",
        "p99_ms", "p99_ms_lo", "p99_ms_hi", "p99_ms_article", "p99_ms_ratio", "p99_ms_ratio_lo", "p99_ms_ratio_hi",
        "steady_p99_ms", "rps", "rps_lo", "rps_hi", "rps_article", "rps_ratio", "rps_ratio_lo", "rps_ratio_hi",
        "steady_rps", "p99_tails_vs_article", "repeats", "flags"])

    def ratios(metric):
        return [tails.get(r["total_sidecar_load_pct"]) if metric == "p99_ms" and r["total_sidecar_load_pct"] in tails
                else ratio_text(r[f"{metric}_ratio"], r[f"{metric}_ratio_lo"], r[f"{metric}_ratio_hi"])
                for _, r in data.iterrows()]

    def cells(metric, digits):
        return [measured(r[metric], r[f"{metric}_lo"], r[f"{metric}_hi"], codes_of(r["flags"]), metric, digits)
                for _, r in data.iterrows()]

    display = pd.DataFrame({
        "Total load (delivered)": [load_text(x, u) for x, u in zip(data["total_sidecar_load_pct"],
                                                                    data["sidecars_cpu_pct"])],
        "P50 ms": cells("p50_ms", 1), "P50 ms (article)": data["p50_ms_article"].map(fmt),
        "P99 ms": cells("p99_ms", 1), "P99 ms (article)": data["p99_ms_article"].map(fmt),
        "P99 ours/article": ratios("p99_ms"),
        "Steady P99 ms": data["steady_p99_ms"].map(fmt),
        "RPS": cells("rps", 0), "RPS (article)": data["rps_article"].map(lambda v: fmt(v, 0)),
        "RPS ours/article": ratios("rps"),
        "Steady RPS": data["steady_rps"].map(lambda v: fmt(v, 0)),
    })
    title = f"{APP_NAMES.get(app, app)} {vcpu:g} vCPU + {sidecar_count} sidecars: total sidecar load -> P50, P99, RPS"
    notes = [DEFINITIONS, STEADY_NOTE, DELIVERED_NOTE,
             f"Memory {memory} MB. Rows: every total load measured here or published by the article."]
    if tails:
        notes.append(BIMODAL_NOTE)
    return Table(f"load_sweep_{app}", title, data, display, notes + missing_note(display[["P50 ms"]]), seen)


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
        art = article[(article["app"] == app) & np.isclose(article["vcpu"], vcpu) & (article["sidecar_count"] == sc)]
        a = art.iloc[0] if len(art) else None
        record = {
            "app": app, "vcpu": vcpu, "sidecar_count": sc,
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
            "before_sidecars_cpu_pct": delivered(at(sweep, step.before_load_pct)) if step else math.nan,
            "after_sidecars_cpu_pct": delivered(at(sweep, step.after_load_pct)) if step else math.nan,
        }
        record["same_step_as_article"] = (
            bool(step.before_load_pct == a["before_load_pct"] and step.after_load_pct == a["after_load_pct"])
            if a is not None and step is not None and verdict == BREAK else None)
        record["vs_article"] = versus_article(verdict, step, a)
        records.append(record)
    data = pd.DataFrame(records, columns=["app", "vcpu", "sidecar_count", "loads_measured", "load_range", "verdict",
                                          "before_load_pct", "after_load_pct", "before_p99_ms", "after_p99_ms",
                                          "rule", "evidence", "flags", "article_before_load_pct",
                                          "article_after_load_pct", "article_before_p99_ms", "article_after_p99_ms",
                                          "same_step_as_article", "vs_article", "before_sidecars_cpu_pct",
                                          "after_sidecars_cpu_pct"])

    def step_text(before, after, p_before, p_after, used_before=math.nan, used_after=math.nan):
        if math.isnan(before):
            return MISSING
        used = (f", {fmt(used_before)} -> {fmt(used_after)} % CPU used"
                if not (math.isnan(used_before) or math.isnan(used_after)) else "")
        return f"{before:g}% -> {after:g}% ({fmt(p_before)} -> {fmt(p_after)} ms{used})"

    display = pd.DataFrame({
        "Setup": [f"{APP_NAMES.get(r.app, r.app)} {r.vcpu:g} vCPU + {r.sidecar_count} sidecar(s)" for r in data.itertuples()],
        "Loads measured": [f"{r.loads_measured} ({r.load_range})" if r.loads_measured else MISSING for r in data.itertuples()],
        "Verdict": data["verdict"],
        "Step (P99)": [step_text(r.before_load_pct, r.after_load_pct, r.before_p99_ms, r.after_p99_ms,
                                 r.before_sidecars_cpu_pct, r.after_sidecars_cpu_pct)
                       + (f" {marks(codes_of(r.flags), 'p99_ms')}" if marks(codes_of(r.flags), "p99_ms") else "")
                       for r in data.itertuples()],
        "Evidence": [r.evidence or MISSING for r in data.itertuples()],
        "Article": [step_text(r.article_before_load_pct, r.article_after_load_pct, r.article_before_p99_ms,
                              r.article_after_p99_ms) for r in data.itertuples()],
        "Against the article": [r.vs_article or MISSING for r in data.itertuples()],
    })
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
        "break' (the article publishes none for the sweep)." + (f" Here: {tally}." if tally else ""),
        DEFINITIONS,
    ]
    return Table("breaking_points", "Breaking points: first load step where P99 breaks", data, display, notes, seen)


VS_ARTICLE = ("same step", "earlier", "later", "overlapping", "no break at 95 %", "no article break")


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


def go_vs_next(summary: pd.DataFrame, ref: pd.DataFrame, vcpu: float = 0.25, sidecar_count: int = 3) -> Table:
    memory = baseline_memory(summary)
    go = runs_of(summary, "go", vcpu, sidecar_count, memory)
    nx = runs_of(summary, "next", vcpu, sidecar_count, memory)
    art_loads = set(refmod.select(ref, "p99_grid", vcpu=vcpu, sidecar_count=sidecar_count)["load"].dropna())
    # Loads both apps were measured at, plus the article's rows (its side-by-side table uses the grid loads).
    loads = sorted(art_loads | (set(go["total_sidecar_load_pct"]) & set(nx["total_sidecar_load_pct"])))
    records, cells, seen = [], [], set()
    for load in loads:
        record = {"total_sidecar_load_pct": load}
        record.update({f"{app}_sidecars_cpu_pct": delivered(at(rows, load)) for app, rows in (("go", go), ("next", nx))})
        used = " / ".join(f"{record[f'{app}_sidecars_cpu_pct']:.1f}" for app in ("go", "next")
                          if not math.isnan(record[f"{app}_sidecars_cpu_pct"]))
        shown = {"Total load": f"{load:g}%" + (f" ({used} used)" if used and load > 0 else "")}
        for app, rows in (("go", go), ("next", nx)):
            name = APP_NAMES[app].split()[0]
            codes: tuple[str, ...] = ()
            for metric, digits, label in (("p99_ms", 1, "P99 ms"), ("rps", 0, "RPS")):
                ours = measured_at(rows, load, metric)
                article = refmod.value(ref, "load_sweep", metric, app=app, vcpu=vcpu, sidecar_count=sidecar_count, load=load)
                record.update({f"{app}_{metric}": ours.value, f"{app}_{metric}_lo": ours.lo,
                               f"{app}_{metric}_hi": ours.hi, f"{app}_{metric}_article": article})
                text = measured(ours.value, ours.lo, ours.hi, ours.codes, metric, digits)
                shown[f"{name} {label} (article)"] = text + (f" ({fmt(article, digits)})" if not math.isnan(article) else "")
                codes = ours.codes
                if ours.conditions:
                    seen |= cell_codes(codes, metric)
            record[f"{app}_flags"] = flags_text(codes)
        # How many times Next.js's RPS Go serves, with both apps' run-to-run uncertainty.
        record.update(ratio_record("go_next_rps_ratio", between(at(go, load), at(nx, load))))
        record["go_next_rps_ratio_article"] = ratio(record["go_rps_article"], record["next_rps_article"])
        shown["Go/Next RPS (article)"] = ratio_text(
            record["go_next_rps_ratio"], record["go_next_rps_ratio_lo"], record["go_next_rps_ratio_hi"], 1) + (
            f" ({fmt(record['go_next_rps_ratio_article'], 1)})"
            if not math.isnan(record["go_next_rps_ratio_article"]) else "")
        records.append(record)
        cells.append(shown)
    columns = (["total_sidecar_load_pct"] + [f"{a}_{m}{s}" for a in ("go", "next") for m in ("p99_ms", "rps")
                                             for s in ("", "_lo", "_hi", "_article")] + ["go_flags", "next_flags"]
               + ["go_next_rps_ratio", "go_next_rps_ratio_lo", "go_next_rps_ratio_hi", "go_next_rps_ratio_article"]
               + ["go_sidecars_cpu_pct", "next_sidecars_cpu_pct"])
    data = pd.DataFrame(records, columns=columns)
    display = pd.DataFrame(cells, columns=["Total load"] + [f"{n} {l} (article)" for n in ("Go", "Next")
                                                            for l in ("P99 ms", "RPS")] + ["Go/Next RPS (article)"])
    notes = [f"{vcpu:g} vCPU, {sidecar_count} sidecars, {memory} MB. Cells: ours [95 % interval] flags (article).",
             "Go/Next RPS: Go's RPS over Next.js's at the same load, with both cells' run-to-run uncertainty.",
             "Total load: nominal, and in parentheses the CPU the sidecars delivered beside Go / beside Next.js "
             "(% of one core, mean over the runs).",
             DEFINITIONS]
    return Table("go_vs_next", f"Go vs Next at {vcpu:g} vCPU + {sidecar_count} sidecars", data, display,
                 notes + missing_note(display), seen)


def bucket_runs(rows: pd.DataFrame, low: float, high: float) -> tuple[pd.DataFrame, bool]:
    """Runs of a grid cell: total load in [low, high] at the grid's per-sidecar loads.
    Falls back to every run in the range (second value True) if the matrix has no grid-level run there."""
    in_range = rows[(rows["total_sidecar_load_pct"] >= low - 1e-9) & (rows["total_sidecar_load_pct"] <= high + 1e-9)]
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
            for bucket, low, high in LOAD_BUCKETS:
                hit, fallback = bucket_runs(rows, low, high)
                fallback_used |= fallback
                ours = measure(hit, "rps")
                article = refmod.value(ref, "rps_grid", "rps", app=app, vcpu=vcpu, sidecar_count=sc,
                                       total_sidecar_load_pct=bucket)
                record.update({f"rps_{bucket}": ours.value, f"rps_{bucket}_lo": ours.lo, f"rps_{bucket}_hi": ours.hi,
                               f"rps_{bucket}_article": article,
                               **ratio_record(f"rps_{bucket}_ratio", to_article(hit, article, "rps")),
                               f"runs_{bucket}": len(hit), f"flags_{bucket}": flags_text(cell_codes(ours.codes, "rps")),
                               f"loads_{bucket}": " ".join(f"{x:g}" for x in sorted(hit["total_sidecar_load_pct"])),
                               f"sidecars_cpu_pct_{bucket}": delivered(hit)})
                if len(hit):
                    seen |= cell_codes(ours.codes, "rps")
                used = record[f"sidecars_cpu_pct_{bucket}"]
                text = measured(ours.value, ours.lo, ours.hi, ours.codes, "rps", 0) + (
                    f" @{used:.1f}" if not math.isnan(used) and high > 0 else "") + (
                    f" ({fmt(article, 0)})" if not math.isnan(article) else "")
                if len(hit) > 1:
                    text += f" [n={len(hit)}]"
                if fallback:
                    text += " *"
                shown[f"{bucket}%"] = text
            if any(record[f"runs_{b}"] for b, _, _ in LOAD_BUCKETS) or any(
                    not math.isnan(record[f"rps_{b}_article"]) for b, _, _ in LOAD_BUCKETS):
                records.append(record)
                cells.append(shown)
    data = pd.DataFrame(records)
    display = pd.DataFrame(cells, columns=["vCPU", "Sidecars"] + [f"{b}%" for b, _, _ in LOAD_BUCKETS])
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
        notes.append("*: no run at a grid level in this range; the cell is the mean of the runs in the range.")
    if data.empty:
        data = pd.DataFrame(columns=["vcpu", "sidecar_count", "sidecar_set"])
    return Table(f"rps_grid_{app}", f"{APP_NAMES.get(app, app)}: RPS for every vCPU x sidecar set x total load",
                 data, display, notes + missing_note(display), seen)


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
            article = refmod.value(ref, "p99_grid", "p99_ms", app=app, vcpu=vcpu, sidecar_count=sidecar_count, load=load)
            _, verdict = tail_vs_article(at(rows, load), article)
            ratio_found = NO_RATIO if verdict else to_article(at(rows, load), article, "p99_ms")
            record.update({f"p99_ms_{load:g}": ours.value, f"p99_ms_{load:g}_lo": ours.lo,
                           f"p99_ms_{load:g}_hi": ours.hi, f"p99_ms_{load:g}_article": article,
                           f"sidecars_cpu_pct_{load:g}": delivered(at(rows, load)),
                           f"p99_tails_vs_article_{load:g}": verdict,
                           **ratio_record(f"p99_ms_{load:g}_ratio", ratio_found),
                           f"flags_{load:g}": flags_text(cell_codes(ours.codes, "p99_ms"))})
            if ours.conditions:
                seen |= cell_codes(ours.codes, "p99_ms")
            used = record[f"sidecars_cpu_pct_{load:g}"]
            shown[f"{load:g}%"] = measured(ours.value, ours.lo, ours.hi, ours.codes, "p99_ms") + (
                f" ({fmt(article)})" if not math.isnan(article) else "") + (
                f" @{used:.1f}" if not math.isnan(used) and load > 0 else "") + (f" tails {verdict}" if verdict else "")
        records.append(record)
        cells.append(shown)
    data = pd.DataFrame(records)
    if data.empty:
        data = pd.DataFrame(columns=["vcpu"])
    display = pd.DataFrame(cells, columns=["vCPU"] + [f"{x:g}%" for x in P99_GRID_LOADS])
    notes = [f"Cells: our P99 ms [95 % interval] flags (article's) @ the CPU the sidecars delivered (% of one core). "
             f"Rows: vCPU; columns: nominal total sidecar load; {sidecar_count} sidecars, {memory} MB.",
             BIMODAL_NOTE + " Here: 'tails agrees' / 'tails differs' (p99_grid CSV: p99_tails_vs_article_<load>).",
             DEFINITIONS]
    return Table(f"p99_grid_{app}", f"{APP_NAMES.get(app, app)}: P99 (ms) by vCPU x total load, {sidecar_count} sidecars",
                 data, display, notes + missing_note(display), seen)


def memory_table(summary: pd.DataFrame, ref: pd.DataFrame, sidecar_count: int = 3,
                 sidecar_load_pct: float = MEMORY_SIDECAR_LOAD) -> Table:
    rows_all = runs_of(summary, sidecar_count=sidecar_count)
    rows_all = rows_all[np.isclose(rows_all["sidecar_load_pct"], sidecar_load_pct)]
    art = refmod.select(ref, "memory")
    base_memory = baseline_memory(summary)
    keys = set(zip(rows_all["vcpu"], rows_all["memory_mb"])) | set(zip(art["vcpu"], art["memory_mb"]))
    records, seen = [], set()
    for vcpu, memory in sorted(keys):
        record = {"vcpu": float(vcpu), "memory_mb": int(memory)}
        for app in ("go", "next"):
            cell = runs_of(rows_all, app, vcpu, memory_mb=int(memory))
            ours = measure(cell, "rps")
            article = refmod.value(ref, "memory", "rps", app=app, vcpu=vcpu, memory_mb=int(memory),
                                   sidecar_count=sidecar_count)
            # Memory gain: over the same app and vCPU at the baseline memory, both sides' runs counted.
            gain = between(cell, runs_of(rows_all, app, vcpu, memory_mb=base_memory))
            record.update({f"{app}_rps": ours.value, f"{app}_rps_lo": ours.lo, f"{app}_rps_hi": ours.hi,
                           f"{app}_rps_article": article,
                           **ratio_record(f"{app}_rps_ratio", to_article(cell, article, "rps")),
                           **ratio_record(f"{app}_gain", gain),
                           f"{app}_flags": flags_text(cell_codes(ours.codes, "rps"))})
            if ours.conditions:
                seen |= cell_codes(ours.codes, "rps")
        records.append(record)
    columns = ["vcpu", "memory_mb"] + [f"{a}_{s}" for a in ("go", "next")
                                       for s in ("rps", "rps_lo", "rps_hi", "rps_article", "rps_ratio", "rps_ratio_lo",
                                                 "rps_ratio_hi", "gain", "gain_lo", "gain_hi", "flags")]
    data = pd.DataFrame(records, columns=columns)

    def cells(app):
        return [measured(r[f"{app}_rps"], r[f"{app}_rps_lo"], r[f"{app}_rps_hi"], codes_of(r[f"{app}_flags"]), "rps", 0)
                for _, r in data.iterrows()]

    def ratios(app, what):
        return [ratio_text(r[f"{app}_{what}"], r[f"{app}_{what}_lo"], r[f"{app}_{what}_hi"]) for _, r in data.iterrows()]

    display = pd.DataFrame({
        "vCPU": [f"{x:.2f}" for x in data["vcpu"]],
        "Memory limit": [f"{m} MB" for m in data["memory_mb"]],
        "Go RPS": cells("go"), "Go RPS (article)": data["go_rps_article"].map(lambda v: fmt(v, 0)),
        "Go ours/article": ratios("go", "rps_ratio"), f"Go / {base_memory} MB": ratios("go", "gain"),
        "Next RPS": cells("next"),
        "Next RPS (article)": data["next_rps_article"].map(lambda v: fmt(v, 0)),
        "Next ours/article": ratios("next", "rps_ratio"), f"Next / {base_memory} MB": ratios("next", "gain"),
    })
    notes = [f"{sidecar_count} sidecars at {sidecar_load_pct:g} % each (total {sidecar_count * sidecar_load_pct:g} %). "
             "The article publishes 1 vCPU only (it saw no memory effect at 0.25-0.5 vCPU).",
             f"<app> / {base_memory} MB: the memory gain, RPS over the same app's RPS at {base_memory} MB and the same "
             "vCPU, with both cells' run-to-run uncertainty; an interval holding 1 shows no memory effect at 95 %.",
             DEFINITIONS]
    return Table("memory", "RPS by memory limit", data, display,
                 notes + missing_note(display[["Go RPS", "Next RPS"]]), seen)


# --- output ----------------------------------------------------------------------------------------

def to_markdown(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = ["| " + " | ".join(str(v).replace("|", "/") for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body]) if len(frame.columns) else "(no columns)"


def render(table: Table, extra_notes: Sequence[str] = ()) -> str:
    lines = [f"# {table.title}", ""]
    lines.append(to_markdown(table.display) if len(table.display) else "_No run of the current matrix and no "
                                                                      "article number for this table._")
    lines.append("")
    lines += [f"- {note}" for note in [*table.notes, *extra_notes]]
    flagged = legend(table.flags)
    if flagged:
        lines += ["", flagged[0], ""] + [f"- {line}" for line in flagged[1:]]
    return "\n".join(lines) + "\n"


def article_settings(summary: pd.DataFrame) -> pd.DataFrame:
    """The conditions at the article's settings (no knob against throttling): what the article's tables hold."""
    if "knobs" not in summary.columns:
        return summary
    return summary[knob_labels(summary["knobs"]) == ""]


def knob_labels(knobs: pd.Series) -> pd.Series:
    """A condition's knobs as text, "" for none (a column read back from CSV with no knob is all NaN floats)."""
    return knobs.astype(object).where(knobs.notna(), "").astype(str)


ARTICLE_SETTINGS = "article's settings"


def mitigations(summary: pd.DataFrame, ref: pd.DataFrame | None = None) -> Table:
    """Each knob against throttling beside the article's settings of the same setup and load: RPS and its
    ratio to the article's settings, P99, the share of responses slower than one period (the condition's own),
    the delivered sidecar CPU and the throttling and burst counts. Within each setup and load the knobs are
    ranked by their RPS ratio (the ratio's value; rows whose interval holds 1 are marked "~")."""
    rows = measured_only(summary)
    if "knobs" not in rows.columns:
        rows = rows.assign(knobs="")
    rows = rows.assign(knobs=knob_labels(rows["knobs"]))
    setups = ["app", "vcpu", "memory_mb", "sidecar_count", "total_sidecar_load_pct"]
    records = []
    if (rows["knobs"] != "").any():
        for key, group in rows.groupby(setups, sort=True):
            base = group[group["knobs"] == ""]
            knobbed = group[group["knobs"] != ""]
            if knobbed.empty:
                continue
            found = []
            for _, row in pd.concat([base, knobbed]).iterrows():
                ratio_found = between(row.to_frame().T, base, "rps") if len(base) == 1 else NO_RATIO
                p99_found = between(row.to_frame().T, base, "p99_ms") if len(base) == 1 else NO_RATIO
                found.append({
                    **dict(zip(setups, key)), "knobs": row["knobs"] or ARTICLE_SETTINGS,
                    "rps": row.get("rps"), "rps_lo": row.get("rps_lo", math.nan), "rps_hi": row.get("rps_hi", math.nan),
                    **ratio_record("rps_vs_article_settings", ratio_found),
                    "p99_ms": row.get("p99_ms"), "p99_ms_lo": row.get("p99_ms_lo", math.nan),
                    "p99_ms_hi": row.get("p99_ms_hi", math.nan),
                    **ratio_record("p99_vs_article_settings", p99_found),
                    "period_ms": row.get("period_ms"), "slow_1p_share": row.get("slow_1p_share"),
                    "sidecars_cpu_pct": row.get("sidecars_cpu_pct"), "app_cpu_pct": row.get("app_cpu_pct"),
                    "nr_throttled": row.get("nr_throttled"),
                    "throttled_share": row.get("throttled_share"), "throttled_s": row.get("throttled_s"),
                    "nr_bursts": row.get("nr_bursts", math.nan), "burst_s": row.get("burst_s", math.nan),
                    "repeats": row.get("repeats", math.nan), "flags": row.get("flags", ""),
                })
            order = sorted((r for r in found if r["knobs"] != ARTICLE_SETTINGS),
                           key=lambda r: -(r["rps_vs_article_settings"] if math.isfinite(
                               float(r["rps_vs_article_settings"])) else -math.inf))
            for rank, r in enumerate(order, 1):
                r["rank_by_rps"] = rank
            records += found
    columns = setups + ["knobs", "rank_by_rps", "rps", "rps_lo", "rps_hi", "rps_vs_article_settings",
                        "rps_vs_article_settings_lo", "rps_vs_article_settings_hi", "p99_ms", "p99_ms_lo",
                        "p99_ms_hi", "p99_vs_article_settings", "p99_vs_article_settings_lo",
                        "p99_vs_article_settings_hi", "period_ms", "slow_1p_share", "app_cpu_pct", "sidecars_cpu_pct",
                        "nr_throttled", "throttled_share", "throttled_s", "nr_bursts", "burst_s", "repeats", "flags"]
    data = pd.DataFrame(records, columns=columns)
    seen: set[str] = set()
    for flags in data["flags"]:
        seen |= cell_codes(codes_of(flags), "rps") | cell_codes(codes_of(flags), "p99_ms")

    def ratio_cell(r, prefix):
        text = ratio_text(float(r[prefix]), float(r[f"{prefix}_lo"]), float(r[f"{prefix}_hi"]))
        lo, hi = float(r[f"{prefix}_lo"]), float(r[f"{prefix}_hi"])
        return f"{text} ~" if math.isfinite(lo) and math.isfinite(hi) and lo <= 1 <= hi else text

    display = pd.DataFrame({
        "Setup": [f"{APP_NAMES.get(r['app'], r['app'])} {r['vcpu']:g} vCPU + {int(r['sidecar_count'])} sidecars"
                  for _, r in data.iterrows()],
        "Total load": [load_text(r["total_sidecar_load_pct"], r["sidecars_cpu_pct"]) for _, r in data.iterrows()],
        "Knobs": data["knobs"],
        "Rank": data["rank_by_rps"].map(lambda v: fmt(v, 0)),
        "RPS": [measured(r["rps"], r["rps_lo"], r["rps_hi"], codes_of(r["flags"]), "rps", 0)
                for _, r in data.iterrows()],
        "RPS / article's settings": [ratio_cell(r, "rps_vs_article_settings") for _, r in data.iterrows()],
        "P99 ms": [measured(r["p99_ms"], r["p99_ms_lo"], r["p99_ms_hi"], codes_of(r["flags"]), "p99_ms", 1)
                   for _, r in data.iterrows()],
        "P99 / article's settings": [ratio_cell(r, "p99_vs_article_settings") for _, r in data.iterrows()],
        "> 1 period %": [fmt(100 * float(v), 2) for v in data["slow_1p_share"]],
        "App CPU %": [fmt(float(v), 1) for v in data["app_cpu_pct"]],
        "Throttled periods %": [fmt(100 * float(v), 1) for v in data["throttled_share"]],
        "Throttled s": data["throttled_s"].map(lambda v: fmt(float(v), 2)),
        "Bursts": data["nr_bursts"].map(lambda v: fmt(float(v), 0)),
        "Burst s": data["burst_s"].map(lambda v: fmt(float(v), 3)),
    })
    notes = [DEFINITIONS,
             "Each knob is compared with the article's settings (period 100 ms, no burst, a quota of vcpu, any CPU, "
             "the runtimes' defaults, one container) at the same app, vCPU, memory, sidecars and load; a ratio "
             "marked ~ has 1 inside its interval (no difference shown). Rank: by the RPS ratio within the setup "
             "and load. App CPU and total load (delivered): each role's CPU, from its process tree (process "
             "topology) or its own container's cgroup (task topology).",
             "> 1 period: the share of responses slower than the condition's own CFS period (100 ms at the "
             "article's settings). Bursts and burst s: the task cgroup's nr_bursts and burst time over the window "
             "(kernels with CFS burst); throttled periods: nr_throttled / nr_periods."]
    return Table("mitigations", "Knobs against CFS throttling and the task topology: each beside the article's "
                 "settings", data, display,
                 notes + missing_note(display[["RPS"]]), seen)


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
TABLE_NAMES = tuple(TABLE_BUILDERS) + ("mitigations",)


def build_tables(summary: pd.DataFrame, ref: pd.DataFrame) -> list[Table]:
    """The article's tables over the conditions at its settings, then the knobs' table (empty without knobs)."""
    article = article_settings(summary)
    return [build(article, ref) for build in TABLE_BUILDERS.values()] + [mitigations(summary, ref)]


def write_tables(summary: pd.DataFrame, ref: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """Write <name>.md and <name>.csv for every table; returns the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    extra = environment_note(summary)
    written = []
    for table in build_tables(summary, ref):
        written += write_table(table, out_dir, extra)
    return written


def write_table(table: Table, out_dir: Path, extra_notes: Sequence[str] = ()) -> list[Path]:
    """<name>.md (its display, notes and flag legend) and <name>.csv (its numbers) in out_dir."""
    csv_path, md_path = out_dir / f"{table.name}.csv", out_dir / f"{table.name}.md"
    table.data.to_csv(csv_path, index=False, float_format="%.6g")
    md_path.write_text(render(table, extra_notes), encoding="utf-8")
    return [md_path, csv_path]


# --- the CPU-budget model (model.py, calibration.py): calibration, predicted against measured, the article --

def _cost_cell(value, lo, hi, flags=None) -> str:
    return measured(float(value), float(lo), float(hi), codes_of(flags), digits=3)


def calibration_table(calibration: pd.DataFrame) -> Table:
    """Cost per request per app and vCPU level, with its 95 % interval over repetitions."""
    display = pd.DataFrame({
        "app": [APP_NAMES.get(a, a) for a in calibration["app"]],
        "quota": calibration["level"],
        "runs": calibration["repeats"],
        "RPS": [measured(float(v), float(lo), float(hi), codes_of(f), "rps", 0) for v, lo, hi, f in
                zip(calibration["rps"], calibration["rps_lo"], calibration["rps_hi"], calibration["flags"])],
        "app CPU %": [fmt(float(v), 1) for v in calibration["app_cpu_pct"]],
        "throttled share": [fmt(float(v), 2) for v in calibration["throttled_share"]],
        "cost per request, ms CPU": [_cost_cell(v, lo, hi) for v, lo, hi in
                                     zip(calibration["app_cost_ms"], calibration["app_cost_ms_lo"],
                                         calibration["app_cost_ms_hi"])],
        "source": calibration["source"],
    })
    seen = set().union(*(set(codes_of(f)) for f in calibration["flags"])) if len(calibration) else set()
    notes = ["Each app alone (no sidecar), at each vCPU level of the preset and with no CPU limit (a quota of "
             "all the host's CPUs).",
             "Cost per request = the app process's CPU seconds (kernel accounting) / its successful responses, each "
             "per second of its own window; pooled over the repetitions, with a 95 % interval from drawing the "
             "repetitions with replacement (1000 draws).",
             "source: matrix = the preset's own app-only condition; calibration run = measured for the calibration "
             "(results/<preset>/calibration/runs/)."]
    return Table("calibration", "Calibration: CPU cost per request, each app alone", calibration, display, notes,
                 seen)


def model_table(model: pd.DataFrame) -> Table:
    """Predicted against measured RPS for every condition, with the factors and the reason of each miss."""
    display = pd.DataFrame({
        "condition": model["condition_id"],
        "sidecars' CPU %": [fmt(float(v), 1) for v in model["sidecars_cpu_pct"]],
        "left for the app %": [fmt(float(v), 1) for v in model["available_cpu_pct"]],
        "app CPU %": [fmt(float(v), 1) for v in model["app_cpu_pct"]],
        "cost ms (alone)": [fmt(float(v), 3) for v in model["calibrated_cost_ms"]],
        "cost ms (here)": [fmt(float(v), 3) for v in model["app_cost_ms"]],
        "predicted RPS": [measured(float(v), float(lo), float(hi), digits=0) for v, lo, hi in
                          zip(model["predicted_rps"], model["predicted_rps_lo"], model["predicted_rps_hi"])],
        "measured RPS": [measured(float(v), float(lo), float(hi), codes_of(f), "rps", 0) for v, lo, hi, f in
                         zip(model["rps"], model["rps_lo"], model["rps_hi"], model["flags"])],
        "measured / predicted": [fmt(float(v), 2) for v in model["ratio"]],
        "within 10 %": ["yes" if w else "no" for w in model["within"]],
        "reason": model["reason"].fillna(""),
    })
    seen = set().union(*(cell_codes(codes_of(f), "rps") for f in model["flags"])) if len(model) else set()
    burn = sorted({str(b) for b in model["sidecar_burn"].dropna()}) if "sidecar_burn" in model else []
    notes = ["Predicted RPS = CPU left for the app (the quota - what the sidecars and the task's other processes "
             "really used, % of one core) / the app's calibrated cost per request at that quota (calibration table); "
             "its interval is the prediction at the calibrated cost's interval ends.",
             "measured / predicted = (app CPU / CPU left for it) x (cost alone / cost here): the reason of a cell "
             "outside 10 % names the factor further from 1, then the flags that bear on it.",
             f"Sidecars count their busy time by {'CPU time' if burn == ['cpu'] else 'the wall clock'} "
             f"(load.sidecar_burn: {', '.join(burn) or '?'}); the model uses what they really used either way."]
    return Table("model", "The CPU-budget model: predicted against measured RPS", model, display, notes, seen)


def model_share_table(share: pd.DataFrame) -> Table:
    display = pd.DataFrame({
        "app": [APP_NAMES.get(a, a) for a in share["app"]],
        "cells": share["cells"],
        "within 10 %": [f"{w} ({fmt(100 * float(s), 0)} %)" for w, s in zip(share["within"], share["share_within"])],
        "median measured / predicted": [fmt(float(v), 2) for v in share["median_ratio"]],
    })
    return Table("model_share", "How many cells the CPU-budget model explains within 10 %", share, display,
                 ["Cells: conditions with a prediction (a calibration of the app at their quota)."])


def model_misses_table(misses: pd.DataFrame) -> Table:
    display = pd.DataFrame({
        "condition": misses["condition_id"],
        "measured / predicted": [fmt(float(v), 2) for v in misses["ratio"]],
        "app CPU / left for it": [fmt(float(v), 2) for v in misses["cpu_use"]],
        "cost alone / cost here": [fmt(float(v), 2) for v in misses["cost_factor"]],
        "reason": misses["reason"],
    })
    return Table("model_misses", "Cells outside 10 %, furthest first, with the most likely reason", misses, display,
                 ["Most likely reason: the factor further from 1 first, then the flags that bear on the cell."])


def article_costs_table(costs: pd.DataFrame) -> Table:
    """The cost per request each of the article's app-only cells implies, beside its stated cost and ours."""
    display = pd.DataFrame({
        "app": [APP_NAMES.get(a, a) for a in costs["app"]],
        "vCPU": [f"{v:g}" for v in costs["vcpu"]],
        "article RPS": [fmt(float(v), 0) for v in costs["article_rps"]],
        "implied cost, ms (vCPU / RPS)": [fmt(float(v), 3) for v in costs["article_implied_cost_ms"]],
        "stated cost, ms": [fmt(float(v), 1) for v in costs["article_stated_cost_ms"]],
        "ours, ms (calibration)": [_cost_cell(v, lo, hi) for v, lo, hi in
                                   zip(costs["ours_cost_ms"], costs["ours_cost_ms_lo"], costs["ours_cost_ms_hi"])],
        "verdict": costs["verdict"],
    })
    notes = ["Implied cost: the most CPU a request can have cost a server limited to that vCPU at that RPS "
             "(vCPU / RPS); a stated cost above it cannot be true of a CPU-limited server.",
             "Stated costs: the article's text (Go API 0.6 ms, Next.js SSR 2.0 ms of CPU per request).",
             "Ours: this preset's calibration at the same quota, where it has one (— where it has none)."]
    return Table("article_costs", "The article against the same physics: the cost its app-only cells imply",
                 costs, display, notes)


def write_model_tables(tables: Sequence[Table], out_dir: str | Path, extra_notes: Sequence[str] = ()) -> list[Path]:
    """Write <name>.md and <name>.csv for each table (the model's, calibration's)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for table in tables:
        csv_path, md_path = out_dir / f"{table.name}.csv", out_dir / f"{table.name}.md"
        table.data.to_csv(csv_path, index=False, float_format="%.6g")
        md_path.write_text(render(table, extra_notes), encoding="utf-8")
        written += [md_path, csv_path]
    return written


def burn_comparison_table(long: pd.DataFrame) -> Table:
    """Sidecars counting busy time by the wall clock (the article) against by CPU time, condition by condition."""
    burns = sorted(long["burn"].dropna().unique()) if len(long) else []
    records, display_rows, seen = [], [], set()
    for cid, group in long.groupby("condition_id", sort=False):
        by = {b: g.iloc[0] for b, g in group.groupby("burn")}
        record = {"condition_id": cid}
        row = {"condition": cid}
        for burn in burns:
            r = by.get(burn)
            for column in ("sidecars_cpu_pct", "rps", "rps_lo", "rps_hi", "retained", "p99_ms", "p99_ms_lo",
                           "p99_ms_hi", "flags"):
                record[f"{column}_{burn}"] = r[column] if r is not None else math.nan
            codes = codes_of(r["flags"]) if r is not None else []
            seen |= cell_codes(codes, "p99_ms")
            row[f"sidecars' CPU % ({burn})"] = fmt(float(r["sidecars_cpu_pct"]), 1) if r is not None else MISSING
            row[f"RPS retained ({burn})"] = (f"{100 * float(r['retained']):.0f} %"
                                             if r is not None and not math.isnan(float(r["retained"])) else MISSING)
            row[f"P99 ms ({burn})"] = (measured(float(r["p99_ms"]), float(r["p99_ms_lo"]), float(r["p99_ms_hi"]),
                                                codes, "p99_ms", 0) if r is not None else MISSING)
        records.append(record)
        display_rows.append(row)
    notes = ["wall: the sidecars count their busy time by the wall clock, as the article's did, and burn less than "
             "their load when throttled; cpu: they count CPU time and burn it (load.sidecar_burn).",
             "RPS retained: over the same sweep's 0 % load RPS under the same setting. Conditions measured under "
             "both settings only."]
    return Table("burn_comparison", "Sidecars that burn what they claim: wall-clock against CPU-time sidecars",
                 pd.DataFrame(records), pd.DataFrame(display_rows), notes, seen)


def burn_breaking_points_table(summaries: dict, ref: pd.DataFrame) -> Table:
    """The breaking points of each sweep under each sidecar_burn, side by side ({burn: condition summary})."""
    frames = []
    for burn, summary in summaries.items():
        data = breaking_points(summary, ref).data.copy()
        data.insert(0, "burn", burn)
        frames.append(data)
    data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    keep = [c for c in ("burn", "app", "vcpu", "sidecar_count", "verdict", "before_load_pct", "after_load_pct")
            if c in data.columns]
    display = data[keep].copy() if len(data) else pd.DataFrame(columns=keep)
    if len(display):
        display["app"] = [APP_NAMES.get(a, a) for a in display["app"]]
        display = display.sort_values(["app", "vcpu", "sidecar_count", "burn"], kind="stable")
    return Table("burn_breaking_points", "Breaking points with wall-clock and with CPU-time sidecars", data, display,
                 ["Each sweep's breaking point by the rule of breaking_points.md, once per sidecar_burn setting."])

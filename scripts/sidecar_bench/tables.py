"""The article's tables, from our summary, with the article's numbers beside ours.

Each table is written twice: <name>.csv (numbers, one column per value, for
machines) and <name>.md (the same cells formatted, with a title and the rules
that made them). A cell with no run in the current matrix is "—" in Markdown
and empty in CSV; a table never fails because part of the matrix is missing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from . import reference as refmod
from .breaking import assess_rows, breaking_point
from .stats import environments

MISSING = "—"
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
    "RPS = successful (2xx) responses / measured window wall time; percentiles are nearest-rank over the "
    "successful responses' response times (ms)."
)


@dataclass
class Table:
    name: str
    title: str
    data: pd.DataFrame  # numbers, written as CSV
    display: pd.DataFrame  # formatted cells, written as Markdown
    notes: list[str] = field(default_factory=list)


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


def ratio(ours: float, article: float) -> float:
    return ours / article if article and not (math.isnan(ours) or math.isnan(article)) else math.nan


def baseline_memory(summary: pd.DataFrame) -> int:
    """2048 MB (the article's default) if the matrix has it, else the most common memory limit."""
    if summary.empty:
        return DEFAULT_MEMORY_MB
    if (summary["memory_mb"] == DEFAULT_MEMORY_MB).any():
        return DEFAULT_MEMORY_MB
    return int(summary["memory_mb"].mode().iloc[0])


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
    """Mean of a metric over the runs at one total load, and how many runs that is."""
    hit = rows[np.isclose(rows["total_sidecar_load_pct"], load)][metric].dropna()
    return (float(hit.mean()) if len(hit) else math.nan), int(len(hit))


def apps_of(summary: pd.DataFrame, ref: pd.DataFrame) -> list[str]:
    apps = set(summary["app"].dropna()) | set(ref["app"].dropna())
    return [a for a in ("go", "next") if a in apps] + sorted(apps - {"go", "next"})


APP_NAMES = {"go": "Go API", "next": "Next SSR"}


def environment_note(summary: pd.DataFrame) -> list[str]:
    envs = environments(summary)
    if len(envs) > 1:
        hosts = ", ".join(sorted(set(envs.get("env_hostname", pd.Series(["?"])).astype(str))))
        return [f"Warning: these runs come from {len(envs)} different environments (hosts: {hosts}); "
                "compare cells across environments with care (see summary.csv env_* columns)."]
    return []


def missing_note(display: pd.DataFrame) -> list[str]:
    count = int(display.apply(lambda col: col.astype(str).str.startswith(MISSING)).to_numpy().sum())
    if count:
        return [f"{count} cell(s) show {MISSING}: no run of the current matrix for them (the article's number, "
                "where it has one, is in parentheses)."]
    return []


# --- the tables ------------------------------------------------------------------------------------

def load_sweep(summary: pd.DataFrame, ref: pd.DataFrame, app: str, vcpu: float = 0.25,
               sidecar_count: int = 3) -> Table:
    memory = baseline_memory(summary)
    rows = runs_of(summary, app, vcpu, sidecar_count, memory)
    art = refmod.select(ref, "load_sweep", app=app, vcpu=vcpu, sidecar_count=sidecar_count)
    loads = sorted(set(rows["total_sidecar_load_pct"].dropna()) | set(art["load"].dropna()))
    records = []
    for load in loads:
        record = {"total_sidecar_load_pct": load}
        for metric in ("p50_ms", "p99_ms", "rps"):
            ours, n = at_load(rows, load, metric)
            article = refmod.value(ref, "load_sweep", metric, app=app, vcpu=vcpu, sidecar_count=sidecar_count,
                                   load=load)
            record.update({metric: ours, f"{metric}_article": article, f"{metric}_ratio": ratio(ours, article)})
        record["runs"] = n
        records.append(record)
    data = pd.DataFrame(records, columns=["total_sidecar_load_pct", "p50_ms", "p50_ms_article", "p50_ms_ratio",
                                          "p99_ms", "p99_ms_article", "p99_ms_ratio", "rps", "rps_article",
                                          "rps_ratio", "runs"])
    display = pd.DataFrame({
        "Total load": [f"{x:g}%" for x in data["total_sidecar_load_pct"]],
        "P50 ms": data["p50_ms"].map(fmt), "P50 ms (article)": data["p50_ms_article"].map(fmt),
        "P99 ms": data["p99_ms"].map(fmt), "P99 ms (article)": data["p99_ms_article"].map(fmt),
        "P99 ours/article": data["p99_ms_ratio"].map(lambda v: fmt(v, 2)),
        "RPS": data["rps"].map(lambda v: fmt(v, 0)), "RPS (article)": data["rps_article"].map(lambda v: fmt(v, 0)),
        "RPS ours/article": data["rps_ratio"].map(lambda v: fmt(v, 2)),
    })
    title = f"{APP_NAMES.get(app, app)} {vcpu:g} vCPU + {sidecar_count} sidecars: total sidecar load -> P50, P99, RPS"
    notes = [DEFINITIONS, f"Memory {memory} MB. Rows: every total load measured here or published by the article."]
    return Table(f"load_sweep_{app}", title, data, display, notes + missing_note(display[["P50 ms"]]))


def _range_text(loads: pd.Series) -> str:
    if loads.empty:
        return ""
    low, high = loads.min(), loads.max()
    return f"{low:g}%" if low == high else f"{low:g}-{high:g}%"


def breaking_points(summary: pd.DataFrame, ref: pd.DataFrame) -> Table:
    memory = baseline_memory(summary)
    article = refmod.change_points(ref)
    series = set()
    rows = runs_of(summary, memory_mb=memory)
    rows = rows[rows["sidecar_count"] > 0]
    for (app, vcpu, sc), _ in rows.groupby(["app", "vcpu", "sidecar_count"]):
        series.add((app, float(vcpu), int(sc)))
    for r in article.itertuples():
        series.add((r.app, float(r.vcpu), int(r.sidecar_count)))
    records = []
    for app, vcpu, sc in sorted(series):
        sweep = runs_of(rows, app, vcpu, sc)
        period = float(sweep["period_ms"].median()) if len(sweep) and sweep["period_ms"].notna().any() else 100.0
        found = breaking_point(sweep["total_sidecar_load_pct"], sweep["p99_ms"], period_ms=period) if len(sweep) else None
        art = article[(article["app"] == app) & np.isclose(article["vcpu"], vcpu) & (article["sidecar_count"] == sc)]
        a = art.iloc[0] if len(art) else None
        record = {
            "app": app, "vcpu": vcpu, "sidecar_count": sc,
            "loads_measured": int(sweep["total_sidecar_load_pct"].nunique()),
            "load_range": _range_text(sweep["total_sidecar_load_pct"]),
            "before_load_pct": found.before_load_pct if found else math.nan,
            "after_load_pct": found.after_load_pct if found else math.nan,
            "before_p99_ms": found.before_p99_ms if found else math.nan,
            "after_p99_ms": found.after_p99_ms if found else math.nan,
            "rule": found.reason if found else ("none" if sweep["total_sidecar_load_pct"].nunique() > 1 else "too few loads"),
            "article_before_load_pct": a["before_load_pct"] if a is not None else math.nan,
            "article_after_load_pct": a["after_load_pct"] if a is not None else math.nan,
            "article_before_p99_ms": a["before_p99_ms"] if a is not None else math.nan,
            "article_after_p99_ms": a["after_p99_ms"] if a is not None else math.nan,
        }
        record["same_step_as_article"] = (
            bool(found and a is not None and found.before_load_pct == a["before_load_pct"]
                 and found.after_load_pct == a["after_load_pct"]) if a is not None and found else None)
        records.append(record)
    data = pd.DataFrame(records, columns=["app", "vcpu", "sidecar_count", "loads_measured", "load_range",
                                          "before_load_pct", "after_load_pct", "before_p99_ms", "after_p99_ms",
                                          "rule", "article_before_load_pct", "article_after_load_pct",
                                          "article_before_p99_ms", "article_after_p99_ms", "same_step_as_article"])

    def step(before, after, p_before, p_after):
        if math.isnan(before):
            return MISSING
        return f"{before:g}% -> {after:g}% ({fmt(p_before)} -> {fmt(p_after)} ms)"

    display = pd.DataFrame({
        "Setup": [f"{APP_NAMES.get(r.app, r.app)} {r.vcpu:g} vCPU + {r.sidecar_count} sidecar(s)" for r in data.itertuples()],
        "Loads measured": [f"{r.loads_measured} ({r.load_range})" if r.loads_measured else MISSING for r in data.itertuples()],
        "Breaking point (P99)": [step(r.before_load_pct, r.after_load_pct, r.before_p99_ms, r.after_p99_ms)
                                 for r in data.itertuples()],
        "Rule": data["rule"],
        "Article": [step(r.article_before_load_pct, r.article_after_load_pct, r.article_before_p99_ms,
                         r.article_after_p99_ms) for r in data.itertuples()],
    })
    notes = [
        "Rule (detected from the data, not typed in): along each app / vCPU / sidecar-count sweep at "
        f"{memory} MB, sorted by total sidecar load (P99s at one load averaged), the breaking point is the first "
        "step where P99 rises and either (jump) rises by at least half a CFS period (50 ms at the 100 ms period), "
        "or (period) moves past a multiple k of the CFS period by more than 2 ms (previous <= k*100+2 ms < current) "
        "while rising by at least 5 % of the period (5 ms): throttled requests then wait one more period. Applied to the article's own published sweeps it finds the "
        "article's four breaking points.",
        "'none': no step met the rule over the loads measured; the fine 1 % steps of the article preset are needed "
        "to place a breaking point to within a few %.",
        DEFINITIONS,
    ]
    return Table("breaking_points", "Breaking points: first load step where P99 breaks", data, display, notes)


def go_vs_next(summary: pd.DataFrame, ref: pd.DataFrame, vcpu: float = 0.25, sidecar_count: int = 3) -> Table:
    memory = baseline_memory(summary)
    go = runs_of(summary, "go", vcpu, sidecar_count, memory)
    nx = runs_of(summary, "next", vcpu, sidecar_count, memory)
    art_loads = set(refmod.select(ref, "p99_grid", vcpu=vcpu, sidecar_count=sidecar_count)["load"].dropna())
    # Loads both apps were measured at, plus the article's rows (its side-by-side table uses the grid loads).
    loads = sorted(art_loads | (set(go["total_sidecar_load_pct"]) & set(nx["total_sidecar_load_pct"])))
    records = []
    for load in loads:
        record = {"total_sidecar_load_pct": load}
        for app, rows in (("go", go), ("next", nx)):
            for metric in ("p99_ms", "rps"):
                ours, _ = at_load(rows, load, metric)
                article = refmod.value(ref, "load_sweep", metric, app=app, vcpu=vcpu, sidecar_count=sidecar_count, load=load)
                record[f"{app}_{metric}"] = ours
                record[f"{app}_{metric}_article"] = article
        records.append(record)
    columns = ["total_sidecar_load_pct"] + [f"{a}_{m}{s}" for a in ("go", "next") for m in ("p99_ms", "rps")
                                            for s in ("", "_article")]
    data = pd.DataFrame(records, columns=columns)
    display = pd.DataFrame({"Total load": [f"{x:g}%" for x in data["total_sidecar_load_pct"]]})
    for app in ("go", "next"):
        name = APP_NAMES[app].split()[0]
        display[f"{name} P99 ms (article)"] = [paired(o, a) for o, a in zip(data[f"{app}_p99_ms"], data[f"{app}_p99_ms_article"])]
        display[f"{name} RPS (article)"] = [paired(o, a, 0) for o, a in zip(data[f"{app}_rps"], data[f"{app}_rps_article"])]
    notes = [f"{vcpu:g} vCPU, {sidecar_count} sidecars, {memory} MB. Cells: ours (article).", DEFINITIONS]
    return Table("go_vs_next", f"Go vs Next at {vcpu:g} vCPU + {sidecar_count} sidecars", data, display,
                 notes + missing_note(display))


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
    records, cells, fallback_used = [], [], False
    for vcpu in vcpus:
        for sc, label in SIDECAR_SETS.items():
            rows = runs_of(rows_all, vcpu=vcpu, sidecar_count=sc)
            record = {"vcpu": vcpu, "sidecar_count": sc, "sidecar_set": label}
            shown = {"vCPU": f"{vcpu:.2f}", "Sidecars": label}
            for bucket, low, high in LOAD_BUCKETS:
                hit, fallback = bucket_runs(rows, low, high)
                fallback_used |= fallback
                ours = float(hit["rps"].mean()) if len(hit) else math.nan
                article = refmod.value(ref, "rps_grid", "rps", app=app, vcpu=vcpu, sidecar_count=sc,
                                       total_sidecar_load_pct=bucket)
                record.update({f"rps_{bucket}": ours, f"rps_{bucket}_article": article,
                               f"rps_{bucket}_ratio": ratio(ours, article), f"runs_{bucket}": len(hit),
                               f"loads_{bucket}": " ".join(f"{x:g}" for x in sorted(hit["total_sidecar_load_pct"]))})
                text = paired(ours, article, 0)
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
        f"Cells: our RPS (article's RPS). Columns are ranges of total sidecar load (inclusive); memory {memory} MB.",
        "A cell holds the runs whose total load lies in its range and whose per-sidecar load is one of the grid's "
        f"levels ({', '.join(f'{x:g}' for x in GRID_SIDECAR_LOADS)} %); fine-step runs appear in the load sweeps, "
        "not here. When several runs fall in one cell (e.g. +proxy at 5 % and 15 %), the cell is the mean of their "
        "RPS, marked [n=runs]; the CSV lists their loads (loads_<bucket>).",
        DEFINITIONS,
    ]
    if fallback_used:
        notes.append("*: no run at a grid level in this range; the cell is the mean of the runs in the range.")
    if data.empty:
        data = pd.DataFrame(columns=["vcpu", "sidecar_count", "sidecar_set"])
    return Table(f"rps_grid_{app}", f"{APP_NAMES.get(app, app)}: RPS for every vCPU x sidecar set x total load",
                 data, display, notes + missing_note(display))


def p99_grid(summary: pd.DataFrame, ref: pd.DataFrame, app: str, sidecar_count: int = 3) -> Table:
    memory = baseline_memory(summary)
    rows_all = runs_of(summary, app=app, sidecar_count=sidecar_count, memory_mb=memory)
    art = refmod.select(ref, "p99_grid", app=app, sidecar_count=sidecar_count)
    vcpus = sorted(set(rows_all["vcpu"].dropna()) | set(art["vcpu"]))
    records, cells = [], []
    for vcpu in vcpus:
        rows = runs_of(rows_all, vcpu=vcpu)
        record = {"vcpu": vcpu}
        shown = {"vCPU": f"{vcpu:.2f}"}
        for load in P99_GRID_LOADS:
            ours, n = at_load(rows, load, "p99_ms")
            article = refmod.value(ref, "p99_grid", "p99_ms", app=app, vcpu=vcpu, sidecar_count=sidecar_count, load=load)
            record.update({f"p99_ms_{load:g}": ours, f"p99_ms_{load:g}_article": article,
                           f"p99_ms_{load:g}_ratio": ratio(ours, article)})
            shown[f"{load:g}%"] = paired(ours, article)
        records.append(record)
        cells.append(shown)
    data = pd.DataFrame(records)
    if data.empty:
        data = pd.DataFrame(columns=["vcpu"])
    display = pd.DataFrame(cells, columns=["vCPU"] + [f"{x:g}%" for x in P99_GRID_LOADS])
    notes = [f"Cells: our P99 ms (article's). Rows: vCPU; columns: total sidecar load; {sidecar_count} sidecars, "
             f"{memory} MB.", DEFINITIONS]
    return Table(f"p99_grid_{app}", f"{APP_NAMES.get(app, app)}: P99 (ms) by vCPU x total load, {sidecar_count} sidecars",
                 data, display, notes + missing_note(display))


def memory_table(summary: pd.DataFrame, ref: pd.DataFrame, sidecar_count: int = 3,
                 sidecar_load_pct: float = MEMORY_SIDECAR_LOAD) -> Table:
    rows_all = runs_of(summary, sidecar_count=sidecar_count)
    rows_all = rows_all[np.isclose(rows_all["sidecar_load_pct"], sidecar_load_pct)]
    art = refmod.select(ref, "memory")
    keys = set(zip(rows_all["vcpu"], rows_all["memory_mb"])) | set(zip(art["vcpu"], art["memory_mb"]))
    records = []
    for vcpu, memory in sorted(keys):
        record = {"vcpu": float(vcpu), "memory_mb": int(memory)}
        for app in ("go", "next"):
            rows = runs_of(rows_all, app, vcpu, memory_mb=int(memory))
            ours = float(rows["rps"].mean()) if len(rows) else math.nan
            article = refmod.value(ref, "memory", "rps", app=app, vcpu=vcpu, memory_mb=int(memory),
                                   sidecar_count=sidecar_count)
            record.update({f"{app}_rps": ours, f"{app}_rps_article": article, f"{app}_rps_ratio": ratio(ours, article)})
        records.append(record)
    columns = ["vcpu", "memory_mb"] + [f"{a}_rps{s}" for a in ("go", "next") for s in ("", "_article", "_ratio")]
    data = pd.DataFrame(records, columns=columns)
    display = pd.DataFrame({
        "vCPU": [f"{x:.2f}" for x in data["vcpu"]],
        "Memory limit": [f"{m} MB" for m in data["memory_mb"]],
        "Go RPS": data["go_rps"].map(lambda v: fmt(v, 0)), "Go RPS (article)": data["go_rps_article"].map(lambda v: fmt(v, 0)),
        "Go ours/article": data["go_rps_ratio"].map(lambda v: fmt(v, 2)),
        "Next RPS": data["next_rps"].map(lambda v: fmt(v, 0)),
        "Next RPS (article)": data["next_rps_article"].map(lambda v: fmt(v, 0)),
        "Next ours/article": data["next_rps_ratio"].map(lambda v: fmt(v, 2)),
    })
    notes = [f"{sidecar_count} sidecars at {sidecar_load_pct:g} % each (total {sidecar_count * sidecar_load_pct:g} %). "
             "The article publishes 1 vCPU only (it saw no memory effect at 0.25-0.5 vCPU).", DEFINITIONS]
    return Table("memory", "RPS by memory limit", data, display,
                 notes + missing_note(display[["Go RPS", "Next RPS"]]))


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
    return "\n".join(lines) + "\n"


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
TABLE_NAMES = tuple(TABLE_BUILDERS)


def build_tables(summary: pd.DataFrame, ref: pd.DataFrame) -> list[Table]:
    return [build(summary, ref) for build in TABLE_BUILDERS.values()]


def write_tables(summary: pd.DataFrame, ref: pd.DataFrame, out_dir: str | Path) -> list[Path]:
    """Write <name>.md and <name>.csv for every table; returns the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    extra = environment_note(summary)
    written = []
    for table in build_tables(summary, ref):
        csv_path, md_path = out_dir / f"{table.name}.csv", out_dir / f"{table.name}.md"
        table.data.to_csv(csv_path, index=False, float_format="%.6g")
        md_path.write_text(render(table, extra), encoding="utf-8")
        written += [md_path, csv_path]
    return written

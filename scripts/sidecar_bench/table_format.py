"""How every table is made and written: a Table's cells as text and its .md and .csv files.

Each table is written twice: <name>.csv (numbers, one column per value, for
machines: `rps`, `rps_lo`, `rps_hi`, `flags` ...) and <name>.md (the same cells
formatted, with a title and the rules that made them). A measured cell shows
its value, its 95 % interval and its flags' marks, e.g. `1195 [1185–1202] H`;
a legend below the table explains the marks that appear in it (from
flags.FLAGS). A cell with no run in the current matrix is "—" in Markdown and
empty in CSV.

The article's tables are tables.py's, the knobs' mitigations.py's, the model's model_tables.py's, the
sidecar burns' burn_tables.py's, the layouts' layouts.py's; none of them imports a chart module or altair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import pandas as pd

from .cells import NOT_FOR
from .flags import FLAGS
from .stats import environments

MISSING = "—"
FAILED_CELL = "failed"

DEFINITIONS = (
    "Values are whole-window, the article's definition: a run's RPS = successful (2xx) responses / load window "
    "(hey's span) and its percentiles are nearest-rank over its successful responses (ms); a cell is the mean of "
    'its runs. [lo–hi]: 95 % t interval over the runs\' values (summary.csv interval_method "t over runs"; '
    'its coverage is checked by simulation); a cell of one run shows its within-run interval only ("within-run '
    "only\"). Ratios (ours/article, retention, memory gain, Go/Next) carry both sides' run-to-run uncertainty: "
    "Welch's t interval of the runs' log values (against the article's numbers, taken as exact: a t interval)."
)


@dataclass
class Table:
    name: str
    title: str
    data: pd.DataFrame  # numbers, written as CSV
    display: pd.DataFrame  # formatted cells, written as Markdown
    notes: list[str] = field(default_factory=list)
    flags: set[str] = field(default_factory=set)  # flag codes marked in its cells, for the legend


# --- cells ---------------------------------------------------------------------------------------


def fmt(value, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    return f"{value:,.{digits}f}".replace(",", "") if digits else f"{value:.0f}"


def paired(ours: float, article: float, digits: int = 1) -> str:
    """ "ours (article)", or just ours when the article has no number for the cell."""
    text = fmt(ours, digits)
    if not math.isnan(article):
        text += f" ({fmt(article, digits)})"
    return text


def marks(codes, metric: str | None = None) -> str:
    """The cell marks of the codes that bear on the metric, e.g. "H S"."""
    shown = [c for c in codes if c not in NOT_FOR.get(metric, set())]
    return " ".join(FLAGS[c].mark if c in FLAGS else c for c in shown)


def measured(
    value: float, lo: float, hi: float, codes=(), metric: str | None = None, digits: int = 1
) -> str:
    """ "1195 [1185–1202] H": value, 95 % interval (when known) and flag marks; "failed" when no repetition
    of the cell was measured because they failed (flag run_failed, no value)."""
    text = fmt(value, digits)
    if text == MISSING:
        return FAILED_CELL if "run_failed" in codes else text
    if not (math.isnan(lo) or math.isnan(hi)):
        text += f" [{fmt(lo, digits)}–{fmt(hi, digits)}]"
    mark = marks(codes, metric)
    return f"{text} {mark}" if mark else text


def legend(codes: set[str]) -> list[str]:
    """One line per flag marked in a table: mark - label - rule; nothing when no cell is flagged."""
    if not codes:
        return []
    lines = [f"{FLAGS[c].mark} - {FLAGS[c].label} - {FLAGS[c].rule}." for c in FLAGS if c in codes]
    return [
        "Flags: " + " ".join(f"`{FLAGS[c].mark}`" for c in FLAGS if c in codes) + " (legend below)."
    ] + lines


def ratio_text(value: float, lo: float, hi: float, digits: int = 2) -> str:
    """ "0.95 [0.80–1.10]", or the value alone when it has no interval."""
    text = fmt(value, digits)
    if text != MISSING and not (math.isnan(lo) or math.isnan(hi)):
        text += f" [{fmt(lo, digits)}–{fmt(hi, digits)}]"
    return text


CLEAR = "*"  # a ratio whose 95 % interval excludes 1 ("~" is the drift flag's mark)


def ratio_cell(value: float, lo: float, hi: float) -> str:
    """ratio_text, marked CLEAR when its interval excludes 1 (a difference shown at 95 %)."""
    text = ratio_text(value, lo, hi)
    return (
        f"{text} {CLEAR}" if math.isfinite(lo) and math.isfinite(hi) and not lo <= 1 <= hi else text
    )


def load_text(load: float, used: float) -> str:
    """ "15% (11.2 used)": the nominal total load and the CPU the sidecars delivered."""
    return f"{load:g}%" + (f" ({used:.1f} used)" if not math.isnan(used) and load > 0 else "")


def environment_note(summary: pd.DataFrame) -> list[str]:
    envs = environments(summary)
    if len(envs) > 1:
        hosts = ", ".join(sorted(set(envs.get("env_hostname", pd.Series(["?"])).astype(str))))
        return [
            f"Warning: these runs come from {len(envs)} different environments (hosts: {hosts}); "
            "compare cells across environments with care (see summary.csv env_* columns)."
        ]
    return []


def missing_note(display: pd.DataFrame) -> list[str]:
    count = int(display.apply(lambda col: col.astype(str).str.startswith(MISSING)).to_numpy().sum())
    failed = int(
        display.apply(lambda col: col.astype(str).str.startswith(FAILED_CELL)).to_numpy().sum()
    )
    notes = []
    if count:
        notes.append(
            f"{count} cell(s) show {MISSING}: no run of the current matrix for them (the article's number, "
            "where it has one, is in parentheses)."
        )
    if failed:
        notes.append(
            f"{failed} cell(s) show {FAILED_CELL}: every repetition of the condition failed (a process of the "
            "task died; summary.csv `failure` says which and why)."
        )
    return notes


# --- output ----------------------------------------------------------------------------------------


def to_markdown(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = [
        "| " + " | ".join(str(v).replace("|", "/") for v in row) + " |"
        for row in frame.itertuples(index=False)
    ]
    return "\n".join([header, rule, *body]) if len(frame.columns) else "(no columns)"


def render(table: Table, extra_notes: Sequence[str] = ()) -> str:
    lines = [f"# {table.title}", ""]
    lines.append(
        to_markdown(table.display)
        if len(table.display)
        else "_No run of the current matrix and no article number for this table._"
    )
    lines.append("")
    lines += [f"- {note}" for note in [*table.notes, *extra_notes]]
    flagged = legend(table.flags)
    if flagged:
        lines += ["", flagged[0], ""] + [f"- {line}" for line in flagged[1:]]
    return "\n".join(lines) + "\n"


def write_table(table: Table, out_dir: Path, extra_notes: Sequence[str] = ()) -> list[Path]:
    """<name>.md (its display, notes and flag legend) and <name>.csv (its numbers) in out_dir."""
    csv_path, md_path = out_dir / f"{table.name}.csv", out_dir / f"{table.name}.md"
    table.data.to_csv(csv_path, index=False, float_format="%.6g")
    md_path.write_text(render(table, extra_notes), encoding="utf-8")
    return [md_path, csv_path]


def write_table_files(
    tables: Sequence[Table], out_dir: str | Path, extra_notes: Sequence[str] = ()
) -> list[Path]:
    """Write <name>.md and <name>.csv for each table in out_dir (made if missing); returns the paths written."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for table in tables:
        written += write_table(table, out_dir, extra_notes)
    return written

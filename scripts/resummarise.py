"""Recompute a published set's statistics from its per-run rows, its run files being gone.

    .venv/bin/python scripts/resummarise.py SET_DIR [SET_DIR ...]
        [--reference workflow/reference/article-results.csv]

A published set keeps runs_summary.csv (one row per run) but not the raw run
files. With 2 or more repetitions per condition the condition summary needs
only those rows (stats.summarise_conditions), so a better statistic reaches a
published set without a new measurement. For each SET_DIR this rewrites:

- runs_summary.csv: the runs' flags by the current rules (flags.run_flags on
  each row; a flag computed from raw samples keeps the value the row holds),
  every other cell as it was;
- summary.csv: stats.summarise_conditions over those rows, with the cost
  columns of model.add_cost_columns, as aggregate_runs writes it;
- tables/*.md, *.csv and the charts made from the summary alone
  (SUMMARY_CHARTS, PNG and SVG); the charts drawn from raw samples
  (latency_distribution, per_second) stay as published;
- provenance.json and PROVENANCE.md: the flag counts, and a line saying when
  and with which commit the statistics were recomputed;
- report.html.

The CPU-budget model's outputs (calibration/, model/) are left as they are:
their rule republishes them.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

from sidecar_bench import charts, set_report, tables
from sidecar_bench import flags as flagmod
from sidecar_bench.chart_files import save_chart
from sidecar_bench.model import add_cost_columns
from sidecar_bench.reference import load_reference
from sidecar_bench.stats import FAILED, summarise_conditions

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "workflow" / "reference" / "article-results.csv"
SUMMARY_CHARTS = {
    "latency_rps_vs_load": charts.latency_rps_chart,
    "rps_retained": charts.retained_chart,
    "rps_by_memory": charts.memory_chart,
    "tail_share_vs_load": lambda summary, ref: charts.tail_share_chart(summary),
}
METHOD = (
    "mean of the runs, Student's t 95 % interval over their values (2+ runs), run-to-run CV per metric; "
    "ratios with both sides' uncertainty (Welch's t on the runs' logs)"
)


class ResummariseError(ValueError):
    pass


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def rerun_flags(per_run: pd.DataFrame) -> pd.DataFrame:
    """The runs' flags by today's rules, from their rows (failed runs keep theirs)."""
    out = per_run.copy()
    measured = out["status"] != FAILED
    out.loc[measured, "flags"] = [
        flagmod.join(flagmod.run_flags(row)) for row in out[measured].to_dict("records")
    ]
    return out


def resummarise(set_dir: Path, reference: Path = REFERENCE) -> dict:
    """Rewrite one published set's statistics from its runs_summary.csv; returns its flag counts."""
    set_dir = Path(set_dir)
    runs_csv = set_dir / "runs_summary.csv"
    if not runs_csv.exists():
        raise ResummariseError(
            f"{runs_csv}: no such file; a published set keeps its per-run rows there"
        )
    per_run = pd.read_csv(runs_csv, keep_default_na=False, na_values=[""])
    per_run["flags"] = per_run["flags"].fillna("")
    counts = per_run[per_run["status"] != FAILED].groupby("condition_id").size()
    single = sorted(counts[counts < 2].index)
    if single:
        raise ResummariseError(
            f"{runs_csv}: condition(s) {', '.join(single[:5])} have one measured run; their "
            "interval needs the run file (within-run only): summarise them with aggregate_runs"
        )
    per_run = rerun_flags(per_run)
    failed = per_run["status"] == FAILED
    summary = summarise_conditions(per_run)
    _, summary = add_cost_columns(per_run[~failed], summary)
    # The rows as published, text for text, but for their flags: no number is rewritten by a round trip.
    as_text = pd.read_csv(runs_csv, dtype=str, keep_default_na=False)
    as_text["flags"] = per_run["flags"].to_numpy()
    as_text.to_csv(runs_csv, index=False)
    summary.to_csv(set_dir / "summary.csv", index=False, float_format="%.6g")

    ref = load_reference(reference)
    tables.write_tables(summary, ref, set_dir / "tables")
    (set_dir / "charts").mkdir(parents=True, exist_ok=True)
    for name, build in SUMMARY_CHARTS.items():
        save_chart(build(summary, ref), set_dir / "charts", name, ("png", "svg"))

    flagged = {code: int(summary[f"flag_{code}"].sum()) for code in flagmod.CODES}
    marked = int((summary["flags"].fillna("") != "").sum())
    commit = _commit()
    info_path = set_dir / "provenance.json"
    info = json.loads(info_path.read_text()) if info_path.exists() else {}
    info.update(
        {
            "flagged_conditions": marked,
            "flagged_by_flag": flagged,
            "statistics": {
                "recomputed_from": "runs_summary.csv",
                "commit": commit,
                "method": METHOD,
            },
        }
    )
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    shown = ", ".join(f"{code} {count}" for code, count in flagged.items() if count) or "none"
    set_report.replace_provenance_lines(
        set_dir,
        ("- flagged conditions:", "- statistics recomputed"),
        [
            f"- flagged conditions: {marked} of {len(summary)} ({shown})",
            f"- statistics recomputed from runs_summary.csv at commit {commit[:12]}: {METHOD}",
        ],
    )
    set_report.write(set_dir, set_report.title_of(set_dir))
    return {"conditions": len(summary), "flagged": marked, "by_flag": flagged}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="+", type=Path)
    parser.add_argument("--reference", type=Path, default=REFERENCE)
    args = parser.parse_args(argv)
    try:
        for set_dir in args.sets:
            found = resummarise(set_dir, args.reference)
            print(
                f"resummarise: {set_dir}: {found['conditions']} conditions, {found['flagged']} marked "
                f"({', '.join(f'{c} {n}' for c, n in found['by_flag'].items() if n) or 'none'})",
                file=sys.stderr,
            )
    except ResummariseError as err:
        print(f"resummarise: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

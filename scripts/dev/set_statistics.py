"""What a published set's statistics promise and what its own runs show of them.

    .venv/bin/python scripts/dev/set_statistics.py results/published/article [--compare OLD_SET_DIR]

From the set's runs_summary.csv, summary.csv, tables/findings.csv and model/tables/forward_share.csv
(each part is skipped when its file is missing), prints in Markdown:

- held-out repetitions: for every condition with 3 or more measured runs, each run left out in turn and
  the 95 % t prediction interval of one new run from the others (mean +- t(n - 2) x s x sqrt(1 + 1/(n - 1)),
  n - 1 runs left); the share of left-out runs inside it, per metric (RPS, P99, share slower than one
  period). An honest interval method over runs holds about 95 % of them;
- the run-to-run CV of RPS per app (median and quartiles, summary.csv rps_cv);
- the marks: how many cells carry each flag, and how many carry any, per app;
- the drift flag (not_steady) per app, on runs;
- the findings' verdicts (tables/findings.csv) and the forward model's share within 10 % per app.

With --compare, the same for another set beside it (for example the set before a republication).
Not part of the workflow: reads published files only, changes nothing.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from sidecar_bench.cells import codes_of
from sidecar_bench.repstats import std_of, t_interval

METRICS = {"rps": "RPS", "p99_ms": "P99", "slow_1p_share": "share slower than one period"}


def measured_runs(set_dir: Path) -> pd.DataFrame:
    runs = pd.read_csv(set_dir / "runs_summary.csv")
    if "status" in runs.columns:
        runs = runs[runs["status"].fillna("measured") == "measured"]
    return runs


def held_out(runs: pd.DataFrame, metric: str, confidence: float = 0.95) -> tuple[int, int]:
    """(inside, tried): left-out runs inside the prediction interval from the other runs."""
    inside = tried = 0
    for _, group in runs.groupby("condition_id"):
        values = group[metric].dropna().to_numpy(dtype="float64")
        if len(values) < 3:
            continue
        for i in range(len(values)):
            others = np.delete(values, i)
            scale = std_of(others) * math.sqrt(1 + 1 / len(others))
            tried += 1
            if scale == 0:
                inside += bool(values[i] == others[0])
                continue
            lo, hi = t_interval(confidence, len(others) - 1, float(others.mean()), scale)
            inside += bool(lo <= values[i] <= hi)
    return inside, tried


def quartiles(values: pd.Series) -> str:
    values = values.dropna()
    if values.empty:
        return "—"
    q1, q2, q3 = np.percentile(values, [25, 50, 75])
    return f"{100 * q2:.1f} % [IQR {100 * q1:.1f}-{100 * q3:.1f}]"


def mark_counts(summary: pd.DataFrame) -> pd.DataFrame:
    rows = []
    for app, group in summary.groupby("app"):
        codes = [codes_of(v) for v in group["flags"]]
        counted = {"app": app, "cells": len(group), "any mark": sum(1 for c in codes if c)}
        for code in sorted({c for cs in codes for c in cs}):
            counted[code] = sum(1 for cs in codes if code in cs)
        rows.append(counted)
    return pd.DataFrame(rows).fillna(0)


def report(set_dir: Path) -> list[str]:
    lines = [f"## {set_dir}", ""]
    if (set_dir / "runs_summary.csv").exists():
        runs = measured_runs(set_dir)
        lines += ["Held-out repetitions inside the 95 % prediction interval from the others:", ""]
        for metric, name in METRICS.items():
            if metric in runs.columns:
                inside, tried = held_out(runs, metric)
                share = f"{100 * inside / tried:.1f} %" if tried else "—"
                lines.append(f"- {name}: {inside} of {tried} ({share})")
        lines.append("")
        flagged = runs.assign(drift=[("not_steady" in codes_of(v)) for v in runs["flags"]])
        lines.append("Drift flag (not_steady) on runs:")
        lines.append("")
        for app, group in flagged.groupby("app"):
            lines.append(
                f"- {app}: {int(group['drift'].sum())} of {len(group)} "
                f"({100 * group['drift'].mean():.1f} %)"
            )
        lines.append("")
    if (set_dir / "summary.csv").exists():
        summary = pd.read_csv(set_dir / "summary.csv")
        lines.append("Run-to-run CV of RPS (median [IQR]):")
        lines.append("")
        for app, group in summary.groupby("app"):
            lines.append(f"- {app}: {quartiles(group['rps_cv'])}")
        lines += ["", "Cells per mark:", "", mark_counts(summary).to_markdown(index=False), ""]
    findings = set_dir / "tables" / "findings.csv"
    if findings.exists():
        data = pd.read_csv(findings, dtype={"verdict": str, "size": str}).fillna(
            {"verdict": "", "size": ""}
        )
        counts = data[data["verdict"] != ""].groupby("verdict").size()
        lines.append(
            "Findings' checks: "
            + ", ".join(f"{n} {v}" for v, n in counts.items())
            + "; sizes: "
            + ", ".join(
                f"{n} {s}" for s, n in data[data["size"] != ""].groupby("size").size().items()
            )
        )
        lines.append("")
    forward = set_dir / "model" / "tables" / "forward_share.csv"
    if forward.exists():
        share = pd.read_csv(forward)
        lines.append("Forward model, cells within 10 % by the whole interval (scored cells only):")
        lines.append("")
        for _, r in share.iterrows():
            lines.append(
                f"- {r['app']}: {int(r['within'])} of {int(r['cells'])} "
                f"({100 * float(r['share_within']):.1f} %), {int(r['undecided'])} undecided, "
                f"{int(r['miss'])} missed"
            )
        lines.append("")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("set_dir", type=Path)
    parser.add_argument("--compare", type=Path, help="another set, printed after the first")
    args = parser.parse_args(argv)
    for set_dir in [args.set_dir] + ([args.compare] if args.compare else []):
        if not (set_dir / "summary.csv").exists() and not (set_dir / "runs_summary.csv").exists():
            parser.error(f"{set_dir}: not a published set (no summary.csv or runs_summary.csv)")
        print("\n".join(report(set_dir)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

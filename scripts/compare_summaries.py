"""Compare a summary with a published one, cell by cell, within their intervals.

    .venv/bin/python scripts/compare_summaries.py PUBLISHED_SUMMARY.csv YOUR_SUMMARY.csv
        [--metrics retention,p99_ms,slow_1p_share] [--out comparison.csv]

For every condition both summaries hold, and each metric, prints the published
value with its 95 % interval, yours with yours, and whether they agree: the two
intervals overlap. Where a summary has no interval (an older summary, or a single
run without blocks), the point value stands for its interval.

Absolute RPS is a property of the host (two machines of the same kind differ by a
quarter while their ratios agree), so the default metrics travel between hosts:
`retention` (RPS over the RPS of the same app / vCPU / sidecar count / memory at
0 % sidecar load, with both cells' run-to-run uncertainty), P99 and
the shares of responses slower than 1 and 2 CFS periods. `rps` is there too, with
the median ratio of yours to the published as the host factor.

Typical use, after re-measuring a published set:

    snakemake --cores 1 --config preset=figure
    .venv/bin/python scripts/compare_summaries.py results/published/figure/summary.csv results/figure/summary.csv
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

from sidecar_bench.stats import condition_ratio

KEY = "condition_id"
SWEEP = ["app", "vcpu", "sidecar_count", "memory_mb"]
DEFAULT_METRICS = ("retention", "p99_ms", "slow_1p_share", "slow_2p_share")
KNOWN_METRICS = (
    "retention",
    "rps",
    "p50_ms",
    "p90_ms",
    "p95_ms",
    "p99_ms",
    "p99_9_ms",
    "slow_1p_share",
    "slow_2p_share",
    "slow_3p_share",
    "sidecars_cpu_pct",
    "app_cpu_pct",
)


class CompareError(ValueError):
    pass


def with_retention(summary: pd.DataFrame) -> pd.DataFrame:
    """Add retention, retention_lo, retention_hi: RPS over the same sweep's 0 % load RPS, with the run-to-run
    uncertainty of both cells (stats.condition_ratio over their per-run RPS, `rps_runs`); a summary without
    per-run values gives the ratio of the two values without an interval."""
    frame = summary.copy().reset_index(drop=True)
    zero = frame[frame["total_sidecar_load_pct"] == 0].drop_duplicates(SWEEP)
    bases = {tuple(row[c] for c in SWEEP): row for _, row in zero.iterrows()}
    found = []
    for _, row in frame.iterrows():
        base = bases.get(tuple(row[c] for c in SWEEP))
        found.append(condition_ratio(row, base) if base is not None else None)
    for suffix, attr in (("", "value"), ("_lo", "lo"), ("_hi", "hi")):
        frame[f"retention{suffix}"] = [math.nan if f is None else getattr(f, attr) for f in found]
    return frame


def _bounds(row: pd.Series, metric: str, side: str) -> tuple[float, float, float]:
    value = row.get(f"{metric}_{side}", math.nan)  # an older summary may lack the metric
    value = math.nan if pd.isna(value) else float(value)
    lo = row.get(f"{metric}_lo_{side}", math.nan)
    hi = row.get(f"{metric}_hi_{side}", math.nan)
    lo = value if pd.isna(lo) else float(lo)
    hi = value if pd.isna(hi) else float(hi)
    return value, lo, hi


def compare(
    published: pd.DataFrame, yours: pd.DataFrame, metrics: tuple[str, ...] = DEFAULT_METRICS
) -> pd.DataFrame:
    """One row per condition and metric: both values, both intervals, agree (the intervals overlap)."""
    unknown = [m for m in metrics if m not in KNOWN_METRICS]
    if unknown:
        raise CompareError(
            f"--metrics: unknown metric(s) {', '.join(unknown)}; known: {', '.join(KNOWN_METRICS)}"
        )
    for name, frame in (("published", published), ("yours", yours)):
        missing = [c for c in (KEY, *SWEEP, "total_sidecar_load_pct", "rps") if c not in frame]
        if missing:
            raise CompareError(
                f"the {name} summary lacks column(s) {', '.join(missing)}: is it a summary.csv?"
            )
    published, yours = with_retention(published), with_retention(yours)
    keep = [KEY, *SWEEP, "total_sidecar_load_pct"]
    columns = [c for m in metrics for c in (m, f"{m}_lo", f"{m}_hi")]
    # Suffix every metric column, also those only one side has.
    left = published[keep + [c for c in columns if c in published]].rename(
        columns={c: f"{c}_published" for c in columns}
    )
    right = yours[[KEY] + [c for c in columns if c in yours]].rename(
        columns={c: f"{c}_yours" for c in columns}
    )
    joined = left.merge(right, on=KEY)
    if joined.empty:
        raise CompareError(
            "the two summaries have no condition in common (compare the same preset)"
        )
    rows = []
    for _, row in joined.iterrows():
        for metric in metrics:
            value_p, lo_p, hi_p = _bounds(row, metric, "published")
            value_y, lo_y, hi_y = _bounds(row, metric, "yours")
            known = not (math.isnan(value_p) or math.isnan(value_y))
            rows.append(
                {
                    KEY: row[KEY],
                    "app": row["app"],
                    "vcpu": row["vcpu"],
                    "sidecar_count": row["sidecar_count"],
                    "total_sidecar_load_pct": row["total_sidecar_load_pct"],
                    "metric": metric,
                    "published": value_p,
                    "published_lo": lo_p,
                    "published_hi": hi_p,
                    "yours": value_y,
                    "yours_lo": lo_y,
                    "yours_hi": hi_y,
                    "agree": bool(known and lo_y <= hi_p and lo_p <= hi_y) if known else None,
                }
            )
    return pd.DataFrame(rows)


def host_factor(published: pd.DataFrame, yours: pd.DataFrame) -> float:
    """Median of your RPS over the published RPS, over the conditions both hold."""
    joined = published[[KEY, "rps"]].merge(yours[[KEY, "rps"]], on=KEY, suffixes=("_p", "_y"))
    return float((joined["rps_y"] / joined["rps_p"]).median()) if len(joined) else math.nan


def _fmt(value: float, lo: float, hi: float, metric: str) -> str:
    if math.isnan(value):
        return "-"
    if metric == "retention" or metric.startswith("slow_"):
        return f"{value * 100:.1f} % [{lo * 100:.1f}-{hi * 100:.1f}]"
    digits = 0 if metric == "rps" else 1
    return f"{value:.{digits}f} [{lo:.{digits}f}-{hi:.{digits}f}]"


def render(table: pd.DataFrame, factor: float) -> str:
    lines = [
        "| condition | metric | published [95 %] | yours [95 %] | agree |",
        "|---|---|---|---|---|",
    ]
    for _, row in table.iterrows():
        agree = {True: "yes", False: "NO", None: "-"}[row["agree"]]
        lines.append(
            f"| {row[KEY]} | {row['metric']} | "
            f"{_fmt(row['published'], row['published_lo'], row['published_hi'], row['metric'])} | "
            f"{_fmt(row['yours'], row['yours_lo'], row['yours_hi'], row['metric'])} | {agree} |"
        )
    lines.append("")
    for metric, part in table.groupby("metric", sort=False):
        judged = part["agree"].dropna()
        if judged.empty:
            lines.append(f"- {metric}: not in both summaries, or no value to compare")
            continue
        lines.append(
            f"- {metric}: {int(judged.sum())} of {len(judged)} cells agree within the intervals"
        )
    lines.append(f"- host factor (median RPS yours / published): {factor:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("published", type=Path)
    parser.add_argument("yours", type=Path)
    parser.add_argument(
        "--metrics",
        default=",".join(DEFAULT_METRICS),
        help=f"comma-separated, from: {', '.join(KNOWN_METRICS)}",
    )
    parser.add_argument("--out", type=Path, help="also write the comparison as CSV")
    args = parser.parse_args(argv)
    metrics = tuple(m.strip() for m in args.metrics.split(",") if m.strip())
    try:
        for path in (args.published, args.yours):
            if not path.exists():
                raise CompareError(f"{path}: no such file")
        published, yours = pd.read_csv(args.published), pd.read_csv(args.yours)
        table = compare(published, yours, metrics)
    except CompareError as err:
        print(f"compare_summaries: error: {err}", file=sys.stderr)
        return 2
    print(render(table, host_factor(published, yours)))
    if args.out:
        table.to_csv(args.out, index=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())

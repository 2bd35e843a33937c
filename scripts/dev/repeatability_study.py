"""The repeatability study: which measuring design gives the tightest honest intervals.

    snakemake --cores 1 --config preset=study-30s
    snakemake --cores 1 --config preset=study-10s
    snakemake --cores 1 --config preset=study-10s-warm
    .venv/bin/python scripts/dev/repeatability_study.py [--results results] [--out results/published/repeatability]

The three presets measure the same six conditions three times each: 30 s runs,
10 s runs, and 10 s runs after 5 s of warm-up. From their run files this
compares, per condition:

- 1 x 30 s (the article's design): the first 30 s run alone, with the interval
  one run can give (block bootstrap over its 1 s blocks), and how many of the
  other two 30 s runs land inside that interval (an honest interval holds them);
- 3 x 10 s and 3 x 10 s + warm-up: the three runs pooled, with the interval over
  repetitions and blocks;
- the reference: all three 30 s runs pooled (the most data on the condition),
  and whether each design's interval holds it.

Writes repeatability.md and repeatability.csv. Statistics come from
sidecar_bench.stats and intervals (the same code as the summaries).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from sidecar_bench.stats import summarise_conditions, summarise_runs

DESIGNS = (
    # (name, preset, runs pooled, seconds of load per condition incl. warm-up)
    ("1 x 30 s", "study-30s", 1),
    ("3 x 10 s", "study-10s", 3),
    ("3 x 10 s + 5 s warm-up", "study-10s-warm", 3),
)
METRICS = ("rps", "p99_ms", "slow_1p_share")


def per_run(results: Path, preset: str) -> pd.DataFrame:
    paths = sorted((results / preset / "runs").glob("*/rep*.parquet"))
    if not paths:
        raise SystemExit(
            f"no run files under {results / preset / 'runs'}: run snakemake --cores 1 --config "
            f"preset={preset} first"
        )
    return summarise_runs(paths)


def inside(value: float, lo: float, hi: float) -> bool:
    return lo <= value <= hi


def study(results: Path) -> pd.DataFrame:
    runs = {preset: per_run(results, preset) for _, preset, _ in DESIGNS}
    reference = summarise_conditions(runs["study-30s"]).set_index("condition_id")
    rows = []
    for name, preset, pooled in DESIGNS:
        frame = runs[preset]
        for condition_id, group in frame.groupby("condition_id", sort=True):
            group = group.sort_values("repeat")
            chosen = group.head(pooled)
            cell = summarise_conditions(chosen).iloc[0]
            others = group.iloc[pooled:] if pooled == 1 else group.iloc[0:0]
            row = {
                "condition_id": condition_id,
                "design": name,
                "load_s_per_condition": float((group["duration_s"] + group["warmup_s"]).iloc[0])
                * pooled,
                "flags": cell["flags"],
            }
            for metric in METRICS:
                value, lo, hi = cell[metric], cell[f"{metric}_lo"], cell[f"{metric}_hi"]
                ref = reference.loc[condition_id, metric]
                row.update(
                    {
                        metric: value,
                        f"{metric}_lo": lo,
                        f"{metric}_hi": hi,
                        f"{metric}_width_pct": 100 * (hi - lo) / value if value else float("nan"),
                        f"{metric}_holds_reference": inside(ref, lo, hi),
                        f"{metric}_reference": ref,
                    }
                )
                if not others.empty:
                    row[f"{metric}_other_runs_inside"] = (
                        f"{sum(inside(v, lo, hi) for v in others[metric])}/{len(others)}"
                    )
            row["rps_runs"] = " / ".join(f"{v:.0f}" for v in group["rps"])
            row["p99_runs"] = " / ".join(f"{v:.0f}" for v in group["p99_ms"])
            rows.append(row)
    return pd.DataFrame(rows)


def _others(group: pd.DataFrame, metric: str) -> str:
    """'3/12': how many other single runs fell inside single runs' intervals ('-' for pooled designs)."""
    column = f"{metric}_other_runs_inside"
    if column not in group or group[column].isna().all():
        return "-"
    counts = [tuple(map(int, text.split("/"))) for text in group[column].dropna()]
    return f"{sum(c[0] for c in counts)}/{sum(c[1] for c in counts)}"


def markdown(frame: pd.DataFrame) -> str:
    lines = [
        "| condition | design | RPS [95 % interval] | width | P99 ms [95 % interval] | width | "
        "holds the 3 x 30 s value (RPS, P99) | single runs: RPS; P99 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in frame.itertuples():
        holds = f"{'yes' if row.rps_holds_reference else 'no'}, {'yes' if row.p99_ms_holds_reference else 'no'}"
        lines.append(
            f"| {row.condition_id} | {row.design} | {row.rps:.0f} [{row.rps_lo:.0f}, {row.rps_hi:.0f}] | "
            f"{row.rps_width_pct:.1f} % | {row.p99_ms:.0f} [{row.p99_ms_lo:.0f}, {row.p99_ms_hi:.0f}] | "
            f"{row.p99_ms_width_pct:.0f} % | {holds} | {row.rps_runs}; {row.p99_runs} |"
        )
    lines += [
        "",
        "Median over the six conditions:",
        "",
        "| design | RPS interval width | P99 interval width | intervals holding the 3 x 30 s value "
        "(RPS, P99) | other 30 s runs inside a 30 s run's interval (RPS, P99) | load per condition |",
        "|---|---|---|---|---|---|",
    ]
    for design, group in frame.groupby("design", sort=False):
        lines.append(
            f"| {design} | {group['rps_width_pct'].median():.1f} % | {group['p99_ms_width_pct'].median():.0f} % | "
            f"{int(group['rps_holds_reference'].sum())}/{len(group)}, "
            f"{int(group['p99_ms_holds_reference'].sum())}/{len(group)} | "
            f"{_others(group, 'rps')}, {_others(group, 'p99_ms')} | "
            f"{group['load_s_per_condition'].iloc[0]:.0f} s |"
        )
    return "\n".join(lines) + "\n"


def main(results: str = "results", out: str = "results/published/repeatability") -> pd.DataFrame:
    frame = study(Path(results))
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out_dir / "repeatability.csv", index=False, float_format="%.6g")
    text = markdown(frame)
    (out_dir / "repeatability.md").write_text(
        "# Repeatability study: 1 x 30 s against 3 x 10 s (with and without warm-up)\n\n"
        "Made by scripts/dev/repeatability_study.py from the presets study-30s, study-10s and study-10s-warm.\n\n"
        + text
    )
    print(text)
    return frame


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--results", default="results", help="the results directory holding the study presets"
    )
    parser.add_argument(
        "--out", default="results/published/repeatability", help="where to write the table"
    )
    args = parser.parse_args()
    main(args.results, args.out)

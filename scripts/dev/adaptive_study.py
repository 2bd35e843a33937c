"""What adaptive repetitions would cost and save, simulated on a published set's per-run rows.

    .venv/bin/python scripts/dev/adaptive_study.py [--runs results/published/figure/runs_summary.csv]
        [--max-repeats 6] [--draws 200]

The stopping rule is sidecar_bench.adaptive.decide, the checkpoint's own code, fed the
first k runs of each condition in the order they were measured:

1. Replayed (measured runs only): planned 2, cap 3. The rule sees runs 1-2 and adds run 3
   only if it says so; against fixed 3 repetitions. Every number is a measured run.
2. Extended (a model): planned 3, cap --max-repeats. Runs beyond the measured ones are
   drawn from a normal law with the condition's own mean and standard deviation of each
   metric (RPS, P99, tail share), --draws times; against fixed --max-repeats repetitions
   drawn the same way.

For each: runs measured, decisions made, wall time at the set's own measured time per run
(window starts over the set's span) plus DECISION_S per round decided, and the median half-width
of the RPS and P99 intervals (relative to the mean) for Go and Next.js, with how many
conditions end within the RPS target. Prints a Markdown table.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from sidecar_bench.adaptive import AdaptiveSettings, decide
from sidecar_bench.repstats import mean_interval

# One decide_repeat job per round of repetitions: a Python start and the round's run files read. Measured
# here: the decision on the figure preset's 55 conditions x 3 synthetic runs took 4.1 s with Snakemake's own
# start (the machine shared).
DECISION_S = 4.0
COLUMNS = ("rps", "p99_ms", "slow_1p_share")


def run_time_s(runs: pd.DataFrame) -> float:
    """The set's own time per run: span of its window starts over the runs between them."""
    starts = pd.to_datetime(runs["window_start"]).sort_values()
    return float((starts.iloc[-1] - starts.iloc[0]).total_seconds() / (len(starts) - 1))


def rows_of(frame: pd.DataFrame) -> list[dict]:
    return frame.assign(status=frame.get("status", "measured")).to_dict("records")


def adaptive_runs(rows: list[dict], settings: AdaptiveSettings, planned: int) -> tuple[int, int]:
    """How many of rows the rule would measure, and the decisions it makes on the way."""
    k, decisions = planned, 0
    while k <= len(rows):
        decisions += 1
        if not decide("c", rows[:k], settings, planned)["add"]:
            return k, decisions
        k += 1
    return len(rows), decisions


def widths(rows: list[dict]) -> dict[str, float]:
    out = {}
    for metric, column in (("rps", "rps"), ("p99", "p99_ms")):
        e = mean_interval([row[column] for row in rows])
        out[metric] = (e.hi - e.lo) / 2 / e.value if e.has_interval and e.value else np.nan
    return out


def summarise(
    name: str, per_condition: list[dict], run_s: float, target: float, draws: int = 1
) -> dict:
    """Totals per campaign (model rows: the mean over the draws) and median widths."""
    frame = pd.DataFrame(per_condition)
    # One decision job per round: as many as the condition that went furthest had decisions.
    rounds = (
        frame.groupby("draw")["decisions"].max().mean()
        if "draw" in frame
        else frame["decisions"].max()
    )
    out = {"design": name, "runs": frame["runs"].sum(), "decisions": rounds}
    out["wall_min"] = (out["runs"] * run_s + out["decisions"] * DECISION_S) / 60
    for app in ("go", "next"):
        sub = frame[frame["app"] == app]
        out[f"{app}_rps_median_pm"] = 100 * sub["rps"].median()
        out[f"{app}_p99_median_pm"] = 100 * sub["p99"].median()
        out[f"{app}_within_rps_target"] = (
            f"{(sub['rps'] <= target).sum() / draws:.1f}/{len(sub) // draws}"
        )
    return out


def replayed(runs: pd.DataFrame, settings: AdaptiveSettings) -> list[dict]:
    """Planned 2, cap 3 on the measured runs."""
    settings = AdaptiveSettings(
        max_repeats=3, rps=settings.rps, p99=settings.p99, tail_share=settings.tail_share
    )
    fixed, adaptive = [], []
    for cid, group in runs.groupby("condition_id"):
        rows = rows_of(group.sort_values("repeat"))
        app = rows[0]["app"]
        fixed.append({"app": app, "runs": len(rows), "decisions": 0, **widths(rows)})
        n, d = adaptive_runs(rows, settings, planned=2)
        adaptive.append({"app": app, "runs": n, "decisions": d, **widths(rows[:n])})
    return [("fixed 3 (measured)", fixed), ("adaptive 2 -> at most 3 (measured)", adaptive)]


def extended(runs: pd.DataFrame, settings: AdaptiveSettings, cap: int, draws: int) -> list:
    """Planned 3, cap `cap`: runs 4.. drawn from each condition's normal law, `draws` times."""
    rng = np.random.default_rng(0)
    fixed, adaptive = [], []
    for cid, group in runs.groupby("condition_id"):
        group = group.sort_values("repeat")
        rows = rows_of(group)
        app = rows[0]["app"]
        mean, sd = group[list(COLUMNS)].mean(), group[list(COLUMNS)].std(ddof=1).fillna(0)
        for draw in range(draws):
            extra = [
                dict(
                    rows[-1],
                    repeat=len(rows) + i + 1,
                    **{c: max(float(rng.normal(mean[c], sd[c])), 0.0) for c in COLUMNS},
                )
                for i in range(cap - len(rows))
            ]
            full = rows + extra
            fixed.append(
                {"app": app, "runs": cap / draws, "decisions": 0, "draw": draw, **widths(full)}
            )
            n, d = adaptive_runs(full, settings, planned=len(rows))
            adaptive.append(
                {"app": app, "runs": n / draws, "decisions": d, "draw": draw, **widths(full[:n])}
            )
    return [(f"fixed {cap} (model)", fixed), (f"adaptive 3 -> at most {cap} (model)", adaptive)]


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="results/published/figure/runs_summary.csv")
    parser.add_argument("--max-repeats", type=int, default=6)
    parser.add_argument("--draws", type=int, default=200)
    parser.add_argument("--rps", type=float, default=AdaptiveSettings.rps)
    parser.add_argument("--p99", type=float, default=AdaptiveSettings.p99)
    parser.add_argument("--tail-share", type=float, default=AdaptiveSettings.tail_share)
    args = parser.parse_args(argv)
    runs = pd.read_csv(args.runs)
    runs = runs[runs.get("status", "measured") == "measured"]
    settings = AdaptiveSettings(
        max_repeats=args.max_repeats, rps=args.rps, p99=args.p99, tail_share=args.tail_share
    )
    run_s = run_time_s(runs)
    table = [summarise(name, rows, run_s, args.rps) for name, rows in replayed(runs, settings)]
    table += [
        summarise(name, rows, run_s, args.rps, args.draws)
        for name, rows in extended(runs, settings, args.max_repeats, args.draws)
    ]
    frame = pd.DataFrame(table)
    header = (
        f"{args.runs}: {runs['condition_id'].nunique()} conditions, {len(runs)} runs, {run_s:.1f} s a run; "
        f"targets rps +-{100 * args.rps:g} %, p99 +-{100 * args.p99:g} %, tail share +-{100 * args.tail_share:g}"
        f" points; the 'model' rows draw runs beyond the measured ones ({args.draws} draws)\n\n"
    )
    text = header + frame.to_markdown(index=False, floatfmt=".1f")
    print(text)
    return text


if __name__ == "__main__":
    main()

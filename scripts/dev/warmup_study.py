"""When does each app's rate stop rising? The measurement behind load.warmup (docs/method.md).

    .venv/bin/python scripts/dev/warmup_study.py [--preset article] [--seconds 60] [--repeats 3]
        [--sidecars 0,3] [--only next_cpu0.25] [--out results/warmup-study]

For every app and vCPU of the preset's matrix, with no sidecar and with idle sidecars
(load 0 %), it starts the task as a run does (runner.Measurement: same limits, same
hardening, load generator in the task's network namespace), waits for the app's first 200,
then loads it with one hey run of --seconds (the preset's concurrency) and reads hey's CSV:
the responses started in each whole second are the rate series. Per series it reports

- the rate over 0-5 s, 5-15 s and the last third (the plateau), and the rise 5-15 s over 0-5 s
  (what the fixed 5 s warm-up leaves);
- steady_s: when the until_steady rule (warmup.steady_time, the runner's own rule on 1 s
  bursts, with the config's load.warmup settings) would stop;
- plateau_s: the first second from which the 3 s mean stays within the tolerance of the plateau.

- the drift rule (flags.not_steady, the summary's) on the measured window that each fixed warm-up in
  WARMUPS, and the until_steady rule, would leave: how often it fires per app.

Writes rates.csv (the raw series, one row per second, replaced after every cell), drift-by-warmup.csv and
warmup-study.md to --out; --analyse remakes the last two from rates.csv without measuring. Must be measured alone on
the machine: 16 cells of --seconds 60 take about 20 min a repetition here (each cell ~75 s:
start, readiness, load, CSV). Holds the engine's measurement lock throughout each cell.
"""

from __future__ import annotations

import argparse
import math
import os
import uuid
from dataclasses import replace
from typing import Sequence
from pathlib import Path

import altair as alt
import numpy as np
import pandas as pd
import yaml

from sidecar_bench import hey, runner
from sidecar_bench.measurement import LOADGEN_CSV
from sidecar_bench.cells import APP_NAMES
from sidecar_bench.chart_files import save_chart
from sidecar_bench.conditions import Condition, LoadSettings
from sidecar_bench.experiment import load_experiment
from sidecar_bench.failures import RunError
from sidecar_bench.flags import not_steady
from sidecar_bench.hosts import host_lock, lock_dir
from sidecar_bench.stats import thirds_of_counts
from sidecar_bench.warmup import WarmupSettings, rates_per_second, steady_time

ROOT = Path(__file__).resolve().parents[2]


def cells(preset: str, sidecars: list[int], only: str | None) -> list[Condition]:
    experiment = load_experiment(
        {**yaml.safe_load((ROOT / "config.yaml").read_text()), "preset": preset}
    )
    pairs = sorted({(c.app, c.vcpu) for c in experiment.conditions})
    chosen = [Condition(app, vcpu, 2048, count, 0) for app, vcpu in pairs for count in sidecars]
    return [c for c in chosen if not only or only in c.id]


def measure(client, condition: Condition, seconds: float, concurrency: int) -> np.ndarray:
    """One task, one hey run of `seconds`: the start offsets of its 2xx responses."""
    load = LoadSettings(duration_s=seconds, concurrency=concurrency, warmup_s=0)
    m = runner.Measurement(
        client,
        condition,
        load,
        client.images.get(f"sidecar-bench/task:{condition.variant}"),
        client.images.get("sidecar-bench/loadgen:latest"),
        uuid.uuid4().hex,
    )
    try:
        m.start()
        m.wait_ready()
        result = m.hey(seconds, LOADGEN_CSV)
        if result.exit_code != 0:
            raise RunError(
                f"{condition.id}: hey exited with {result.exit_code}: {result.stderr[:300]}"
            )
        samples = hey.parse_csv(m.loadgen_exec(["cat", LOADGEN_CSV]).stdout)
    finally:
        m.remove()
    ok = samples[(samples["status_code"] >= 200) & (samples["status_code"] < 300)]
    return ok["offset_s"].to_numpy()


def describe(rates: list[float], settings: WarmupSettings) -> dict:
    r = np.asarray(rates, dtype=float)
    plateau = float(r[-max(1, len(r) // 3) :].mean())
    early, next10 = float(r[:5].mean()), float(r[5:15].mean()) if len(r) > 5 else float("nan")
    rolling = pd.Series(r).rolling(3).mean().to_numpy()
    inside = rolling >= (1 - settings.tolerance) * plateau
    plateau_s = next(
        (i + 1.0 for i in range(len(r)) if inside[i:].all() and np.isfinite(rolling[i])), None
    )
    return {
        "rps_0_5s": early,
        "rps_5_15s": next10,
        "rps_plateau": plateau,
        "rise_5_15_over_0_5": next10 / early - 1 if early else float("nan"),
        "plateau_over_5_15": plateau / next10 - 1 if next10 else float("nan"),
        "steady_s": steady_time(rates, settings),
        "plateau_s": plateau_s,
    }


def main(argv: list[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="article")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--sidecars", default="0,3", help="sidecar counts, idle (0 %% load), comma-separated"
    )
    parser.add_argument("--only", default=None, help="only cells whose id contains this text")
    parser.add_argument("--out", default="results/warmup-study")
    parser.add_argument(
        "--analyse",
        action="store_true",
        help="measure nothing: remake the tables from the rates.csv already in --out",
    )
    args = parser.parse_args(argv)
    config = load_experiment(
        {**yaml.safe_load((ROOT / "config.yaml").read_text()), "preset": args.preset}
    )
    settings = (
        config.load.warmup
        if config.load.warmup.until_steady
        else WarmupSettings(mode="until_steady")
    )
    out = Path(args.out)
    if args.analyse:
        return write_outputs(
            out, pd.read_csv(out / "rates.csv"), args, settings, config.load.duration_s, chart=True
        )
    out.mkdir(parents=True, exist_ok=True)
    seconds = int(args.seconds)
    series: list[dict] = []
    table = pd.DataFrame()
    for repeat in range(1, args.repeats + 1):
        for condition in cells(args.preset, [int(x) for x in args.sidecars.split(",")], args.only):
            with host_lock(
                [{"name": "local", "url": None}], lock_dir(), 3600, f"warmup_study {condition.id}"
            ) as (_, client):
                offsets = measure(client, condition, args.seconds, config.load.concurrency)
            rates = rates_per_second(offsets, seconds)
            series += [
                {
                    "condition_id": condition.id,
                    "app": condition.app,
                    "vcpu": condition.vcpu,
                    "sidecars": condition.sidecar_count,
                    "repeat": repeat,
                    "second": s,
                    "rps": r,
                }
                for s, r in enumerate(rates)
            ]
            row = describe(rates, settings)
            print(
                f"warmup_study: {condition.id} rep {repeat}: "
                + ", ".join(
                    f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()
                ),
                flush=True,
            )
            # After every cell, so that an interrupted study keeps what it measured.
            table = write_outputs(out, pd.DataFrame(series), args, settings, config.load.duration_s)
    if series:
        write_outputs(out, pd.DataFrame(series), args, settings, config.load.duration_s, chart=True)
    return table


SERIES_KEYS = ["condition_id", "app", "vcpu", "sidecars", "repeat"]
# Fixed warm-ups weighed against each other, in seconds (the study's series must be this long plus a window).
WARMUPS = (0, 5, 10, 15, 20, 30, 45)
# The until_steady rule's windows weighed (the configured one is always in), with this cap.
STEADY_WINDOWS, STEADY_MAX_S = (3, 5, 10), 45.0


def drift_after(rates: Sequence[float], warmup_s: int, window_s: int) -> dict | None:
    """The drift rule (flags.not_steady) on the window that a fixed warm-up of warmup_s would leave:
    seconds warmup_s .. warmup_s + window_s of one continuous series. None if the series is too short."""
    counts = np.asarray(rates, dtype="float64")[warmup_s : warmup_s + window_s]
    if len(counts) < window_s:
        return None
    row = {"rps": float(counts.mean()), **thirds_of_counts(counts)}
    return {
        **row,
        "rise": row["last_third_rps"] / row["first_third_rps"] - 1
        if row["first_third_rps"]
        else np.nan,
        "drifted": not_steady(row),
    }


def steady_rules(settings: WarmupSettings) -> dict[str, WarmupSettings]:
    """The until_steady rule as configured, and with longer windows and a later cap: a slow ramp (+1 % a second)
    rises by 3 % over 3 s windows, inside the 5 % tolerance, but by 10 % over 10 s windows."""
    rules = {"until_steady": settings}
    for window_s in STEADY_WINDOWS:
        if window_s != settings.window_s:
            rules[f"until_steady, {window_s:g} s windows"] = replace(
                settings, window_s=float(window_s), max_s=max(settings.max_s, STEADY_MAX_S)
            )
    return rules


def drift_by_warmup(series: pd.DataFrame, window_s: int, settings: WarmupSettings) -> pd.DataFrame:
    """For every series and fixed warm-up (and each until_steady rule's stop, rounded up to a whole second, its cap
    where it never settles): the drift rule's verdict on the measured window after it."""
    rows = []
    rules = steady_rules(settings)
    for key, group in series.sort_values("second").groupby(SERIES_KEYS, sort=True):
        rates = group["rps"].tolist()
        plateau = float(
            np.mean(rates[-max(1, len(rates) // 3) :])
        )  # as describe(): the series' last third
        candidates = [(f"fixed {w} s", w) for w in WARMUPS]
        for label, rule in rules.items():
            steady = steady_time(rates, rule)
            candidates.append((label, int(math.ceil(steady if steady is not None else rule.max_s))))
        for label, warmup_s in candidates:
            found = drift_after(rates, warmup_s, window_s)
            if found is not None:
                rows.append(
                    {
                        **dict(zip(SERIES_KEYS, key)),
                        "warmup": label,
                        "warmup_s": warmup_s,
                        **found,
                        "of_plateau": found["rps"] / plateau if plateau else np.nan,
                    }
                )
    return pd.DataFrame(rows)


def drift_summary(drift: pd.DataFrame) -> pd.DataFrame:
    """Per app and warm-up: how many series' windows the drift rule flags, the median and largest rise of the last
    third over the first, the window's rate over the series' plateau (its last third: median and lowest), and the
    mean warm-up in seconds."""
    if drift.empty:
        return pd.DataFrame()
    order = {label: i for i, label in enumerate(dict.fromkeys(drift["warmup"]))}
    summary = (
        drift.groupby(["app", "warmup"], sort=False)
        .agg(
            series=("drifted", "size"),
            drifted=("drifted", "sum"),
            median_rise=("rise", "median"),
            largest_rise=("rise", lambda r: r.loc[r.abs().idxmax()] if r.notna().any() else np.nan),
            median_of_plateau=("of_plateau", "median"),
            lowest_of_plateau=("of_plateau", "min"),
            mean_warmup_s=("warmup_s", "mean"),
        )
        .reset_index()
    )
    summary["drifted"] = summary["drifted"].astype(int)
    return summary.sort_values(
        ["app", "warmup"],
        key=lambda c: c.map(order) if c.name == "warmup" else c,
        ignore_index=True,
    )


def rate_chart(series: pd.DataFrame, marks: Sequence[float] = (5, 30)) -> alt.TopLevelMixin:
    """Each app and vCPU's rate in every second over its series' plateau (the last third), the median over repeats and
    sidecar counts, one panel per app; rules at the warm-ups in marks."""

    data = series.copy()
    data["plateau"] = data.groupby(SERIES_KEYS)["rps"].transform(
        lambda r: r.iloc[-max(1, len(r) // 3) :].mean()
    )
    data["of_plateau"] = data["rps"] / data["plateau"]
    data = data.groupby(["app", "vcpu", "second"], as_index=False)["of_plateau"].median()
    data["vCPU"] = data["vcpu"].map(lambda v: f"{v:g}")
    data["App"] = data["app"].map(APP_NAMES).fillna(data["app"])
    base = (
        alt.Chart(data)
        .mark_line(strokeWidth=1.6)
        .encode(
            x=alt.X("second:Q", title="Seconds of load since the app was ready"),
            y=alt.Y(
                "of_plateau:Q",
                title="Rate over its plateau (last third)",
                axis=alt.Axis(format="%"),
                scale=alt.Scale(zero=True),
            ),
            color=alt.Color("vCPU:N", title="vCPU", sort=sorted(data["vCPU"].unique(), key=float)),
            tooltip=["App:N", "vCPU:N", "second:Q", alt.Tooltip("of_plateau:Q", format=".0%")],
        )
    )
    rules = (
        alt.Chart(pd.DataFrame({"second": list(marks), "label": [f"{m:g} s" for m in marks]}))
        .mark_rule(strokeDash=[4, 3], color="#555")
        .encode(x="second:Q")
    )
    labels = rules.mark_text(align="left", dx=3, y=8, color="#555").encode(text="label:N")
    panels = [
        alt.layer(base.transform_filter(alt.datum.App == name), rules, labels).properties(
            title=name, width=330, height=200
        )
        for name in dict.fromkeys(data["App"])
    ]
    return (
        alt.hconcat(*panels)
        .resolve_scale(color="shared")
        .properties(
            title=alt.Title(
                "How long each app warms up: its rate in each second over its plateau",
                subtitle=[
                    "Median over the repetitions and the idle sidecar counts measured; plateau: the series' last third. "
                    "Dashed: the fixed warm-ups 5 s (today) and 30 s."
                ],
            )
        )
    )


def _replace(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_outputs(
    out: Path,
    series: pd.DataFrame,
    args: argparse.Namespace,
    settings: WarmupSettings,
    window_s: float,
    chart: bool = False,
) -> pd.DataFrame:
    """rates.csv (the raw series), and from it warmup-study.md and drift-by-warmup.csv, each replaced whole (never
    half-written), and with chart the rate chart (warmup-study.png, .html). Returns the per-series table."""
    _replace(out / "rates.csv", series.to_csv(index=False))
    rows = [
        {
            **dict(zip(SERIES_KEYS, key)),
            **describe(group.sort_values("second")["rps"].tolist(), settings),
        }
        for key, group in series.groupby(SERIES_KEYS, sort=False)
    ]
    table = pd.DataFrame(rows)
    drift = drift_by_warmup(series, int(window_s), settings)
    _replace(out / "drift-by-warmup.csv", drift.to_csv(index=False))
    summary = drift_summary(drift)
    _replace(
        out / "warmup-study.md",
        f"# When the rate stops rising ({args.seconds:g} s of load, preset {args.preset}, until_steady rule "
        f"window {settings.window_s:g} s, tolerance {settings.tolerance:g}, max {settings.max_s:g} s)\n\n"
        + table.to_markdown(index=False, floatfmt=".3g")
        + "\n\n"
        f"## The drift rule on the {window_s:g} s window each warm-up leaves\n\n"
        "The window is cut from the same continuous series; `until_steady`: the rule's stop on the series, "
        "rounded up to a whole second (its cap where it never settles); the longer windows' rules cap at "
        f"{STEADY_MAX_S:g} s. of_plateau: the window's rate over the series' last third (a window that reaches "
        "into the last third is partly compared with itself).\n\n"
        + (
            summary.to_markdown(index=False, floatfmt=".3g")
            if not summary.empty
            else "(no series long enough)"
        )
        + "\n",
    )
    if chart and not series.empty:
        save_chart(rate_chart(series), out, "warmup-study", formats=("html", "png"))
    return table


if __name__ == "__main__":
    main()

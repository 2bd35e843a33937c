"""A real proxy against the article's busy-loop stand-in (docs/proxy.md): the tables of the proxy preset.

Read from the runs summary (one row per run) and the condition summary; nothing is measured here.

- proxy_cost: per condition with a real proxy, the proxy's CPU per request (ms: its CPU share over
  the window / RPS) and the app's, each the mean of the runs with its t interval (repstats).
- comparison: per app and vCPU, the app alone, behind the real proxy (with and without access log),
  and with a busy-loop proxy (the stand-in, sidecar_count 1): RPS, P50, P99 and the share of responses
  slower than one CFS period, with their intervals, and the proxy's measured CPU share.
- budget: the CPU-budget reading. RPS against quota / (app cost + proxy cost): with the app's cost
  per request measured alone at the same vCPU and the proxy's measured behind it, how many requests
  the quota pays for, against what was measured. For the stand-in, (quota - its measured CPU) / app cost.
- standin_gap: the real proxy against the stand-in at the same CPU share, as ratios with Welch intervals:
  RPS kept against the app alone, and the proxy's RPS, P50 and P99 over the stand-in's.
- standin_sets(): the config of step two, the busy-loop stand-ins at each real proxy's measured CPU
  share (a documented two-step: the share is known only once the real proxy has been measured).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import pandas as pd

from . import repstats
from .conditions import DEFAULT_PROXY
from .runfile import RunFileError, read_meta

REAL_PROXIES = ("haproxy", "haproxy-nolog")
STANDIN = "busy-loop stand-in"
ALONE = "alone"
# How a condition reads in the comparison (setup column), in table order.
SETUPS = (ALONE, "haproxy", "haproxy-nolog", STANDIN)
METRICS = ("rps", "p50_ms", "p99_ms", "slow_1p_share")


def proxy_of(run_file: str) -> str:
    """The proxy a run had (its file's condition), the busy-loop when its condition names none."""
    try:
        return read_meta(run_file)["condition"].get("proxy", DEFAULT_PROXY)
    except RunFileError:
        return DEFAULT_PROXY


def setup_of(proxy: str, sidecar_count: int) -> str | None:
    """The comparison's setup of a condition, None when it is none of them (e.g. 3 sidecars)."""
    if proxy in REAL_PROXIES:
        return proxy if sidecar_count == 1 else None
    return {0: ALONE, 1: STANDIN}.get(int(sidecar_count))


def with_setups(per_run: pd.DataFrame, proxies: Mapping[str, str] | None = None) -> pd.DataFrame:
    """Measured runs with proxy, setup and per-request costs (ms) of the app and the proxy.

    proxies: run file -> proxy (read from the run files when not given).
    """
    runs = per_run[per_run["status"] == "measured"].copy()
    runs["proxy"] = [(proxies or {}).get(f) or proxy_of(f) for f in runs["run_file"]]
    runs["setup"] = [setup_of(p, n) for p, n in zip(runs["proxy"], runs["sidecar_count"])]
    rps = pd.to_numeric(runs["rps"], errors="coerce")
    for role in ("app", "proxy"):
        share = pd.to_numeric(runs[f"{role}_cpu_pct"], errors="coerce") / 100.0
        runs[f"{role}_cost_ms"] = (share / rps * 1000.0).where(rps > 0)
    return runs[runs["setup"].notna()]


# Shares of requests or of periods: their intervals end at 1 (every other metric's at 0 only).
SHARES = ("slow_1p_share", "throttled_share")


def _estimate(values: Iterable[float], prefix: str) -> dict[str, float]:
    """The mean of the runs with its t interval, held to what the metric can be (repstats.clipped)."""
    e = repstats.clipped(repstats.mean_interval(values), 0.0, 1.0 if prefix in SHARES else math.inf)
    return {prefix: e.value, f"{prefix}_lo": e.lo, f"{prefix}_hi": e.hi}


def proxy_cost(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per real-proxy condition: proxy and app CPU per request (ms) and the proxy's CPU share."""
    rows = []
    real = runs[runs["proxy"].isin(REAL_PROXIES)]
    for (condition_id, app, vcpu, proxy), group in real.groupby(
        ["condition_id", "app", "vcpu", "proxy"], sort=True
    ):
        rows.append(
            {
                "condition_id": condition_id,
                "app": app,
                "vcpu": vcpu,
                "proxy": proxy,
                "repeats": len(group),
                **_estimate(group["proxy_cost_ms"], "proxy_cost_ms"),
                **_estimate(group["app_cost_ms"], "app_cost_ms"),
                **_estimate(group["proxy_cpu_pct"], "proxy_cpu_pct"),
                **_estimate(group["rps"], "rps"),
            }
        )
    return pd.DataFrame(rows)


def comparison(runs: pd.DataFrame) -> pd.DataFrame:
    """Per app, vCPU and setup: the metrics with their t intervals over the runs, and the proxy's CPU share."""
    rows = []
    for (app, vcpu, setup), group in runs.groupby(["app", "vcpu", "setup"], sort=True):
        for condition_id, cond in group.groupby("condition_id", sort=True):
            row: dict[str, Any] = {
                "app": app,
                "vcpu": vcpu,
                "setup": setup,
                "condition_id": condition_id,
                "repeats": len(cond),
            }
            for metric in METRICS:
                row.update(_estimate(cond[metric], metric))
            row.update(_estimate(cond["proxy_cpu_pct"], "proxy_cpu_pct"))
            row.update(_estimate(cond["throttled_share"], "throttled_share"))
            rows.append(row)
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    order = {setup: i for i, setup in enumerate(SETUPS)}
    table["_order"] = table["setup"].map(order)
    return (
        table.sort_values(["app", "vcpu", "_order", "condition_id"])
        .drop(columns="_order")
        .reset_index(drop=True)
    )


def budget(runs: pd.DataFrame) -> pd.DataFrame:
    """The CPU-budget reading per app, vCPU and proxy setup (module docstring)."""
    rows = []
    for (app, vcpu), group in runs.groupby(["app", "vcpu"], sort=True):
        alone = group[group["setup"] == ALONE]
        app_cost = repstats.mean_interval(alone["app_cost_ms"]).value
        for (setup, condition_id), cond in group[group["setup"] != ALONE].groupby(
            ["setup", "condition_id"]
        ):
            measured = repstats.clipped(repstats.mean_interval(cond["rps"]))
            proxy_cpu = repstats.mean_interval(cond["proxy_cpu_pct"]).value
            if setup in REAL_PROXIES:
                proxy_cost = repstats.mean_interval(cond["proxy_cost_ms"]).value
                budget_rps = (
                    1000.0 * vcpu / (app_cost + proxy_cost)
                    if app_cost + proxy_cost > 0
                    else math.nan
                )
            else:
                proxy_cost = math.nan
                left = 100.0 * vcpu - proxy_cpu
                budget_rps = left / 100.0 * 1000.0 / app_cost if app_cost > 0 else math.nan
            rows.append(
                {
                    "app": app,
                    "vcpu": vcpu,
                    "setup": setup,
                    "condition_id": condition_id,
                    "app_cost_ms_alone": app_cost,
                    "proxy_cost_ms": proxy_cost,
                    "proxy_cpu_pct": proxy_cpu,
                    "budget_rps": budget_rps,
                    "rps": measured.value,
                    "rps_lo": measured.lo,
                    "rps_hi": measured.hi,
                    "measured_vs_budget": measured.value / budget_rps if budget_rps else math.nan,
                }
            )
    return pd.DataFrame(rows)


def standin_sets(
    cost: pd.DataFrame,
    memory_mb: int,
    preset: str,
    preset_sets: list[str],
    proxy: str = "haproxy",
    no_limit_vcpu: float | None = None,
) -> dict[str, Any]:
    """Step two's config (for --configfile): one set per app and vCPU, a busy-loop proxy (sidecar_count 1)
    at the real proxy's measured CPU share rounded to 0.1 %, and the preset extended with them.

    Cells at no limit (vcpu >= no_limit_vcpu) are left out: there the proxy takes from no quota.
    """
    sets: dict[str, Any] = {}
    chosen = cost[cost["proxy"] == proxy].sort_values(["app", "vcpu"])
    for row in chosen.itertuples():
        if no_limit_vcpu is not None and row.vcpu >= no_limit_vcpu:
            continue
        share = round(float(row.proxy_cpu_pct), 1)
        if not math.isfinite(share) or share <= 0:
            continue
        name = f"proxy_standin_{row.app}_{row.vcpu:g}"
        sets[name] = {
            "app": [row.app],
            "vcpu": [float(row.vcpu)],
            "memory_mb": [int(memory_mb)],
            "sidecar_count": [1],
            "sidecar_load_pct": [share],
        }
    names = [n for n in preset_sets if n not in sets] + list(sets)
    return {"sets": sets, "presets": {preset: {"sets": names}}}


def _ratio(
    numerator: Iterable[float], denominator: Iterable[float], prefix: str
) -> dict[str, float]:
    e = repstats.ratio_interval(numerator, denominator)
    return {prefix: e.value, f"{prefix}_lo": e.lo, f"{prefix}_hi": e.hi}


def standin_gap(runs: pd.DataFrame) -> pd.DataFrame:
    """How far the busy-loop stand-in is from the real proxy at the same CPU share, as ratios.

    One row per app, vCPU and real proxy: RPS retained against the app alone, behind the real proxy and
    behind the stand-in, and the real proxy over the stand-in for RPS, P50 and P99; each a ratio of
    geometric means with Welch's t interval of the runs' logs (repstats.ratio_interval). Cells without a
    stand-in (no limit) keep the retained RPS only.
    """
    rows = []
    for (app, vcpu), group in runs.groupby(["app", "vcpu"], sort=True):
        alone, standin = group[group["setup"] == ALONE], group[group["setup"] == STANDIN]
        for proxy in REAL_PROXIES:
            real = group[group["setup"] == proxy]
            if real.empty:
                continue
            row: dict[str, Any] = {
                "app": app,
                "vcpu": vcpu,
                "proxy": proxy,
                "repeats": len(real),
                **_ratio(real["rps"], alone["rps"], "rps_vs_alone"),
                **_ratio(standin["rps"], alone["rps"], "standin_rps_vs_alone"),
            }
            for metric in ("rps", "p50_ms", "p99_ms"):
                row.update(_ratio(real[metric], standin[metric], f"{metric}_vs_standin"))
            rows.append(row)
    return pd.DataFrame(rows)


def _cell(value: float, lo: float = math.nan, hi: float = math.nan, digits: int = 2) -> str:
    if not math.isfinite(value):
        return "-"
    text = f"{value:.{digits}f}"
    if math.isfinite(lo) and math.isfinite(hi):
        text += f" [{lo:.{digits}f}–{hi:.{digits}f}]"  # as every other table writes an interval
    return text


def markdown(
    title: str, table: pd.DataFrame, columns: Mapping[str, tuple[str, int]], notes: Iterable[str]
) -> str:
    """A table as Markdown: columns maps a metric to (heading, digits); a metric with _lo/_hi gets its interval."""
    lines = [f"# {title}", ""]
    if table.empty:
        lines.append("_No run of a real proxy in this preset._")
    else:
        headings = ["app", "vCPU", "setup" if "setup" in table else "proxy"]
        headings += [heading for heading, _ in columns.values()]
        lines += ["| " + " | ".join(headings) + " |", "|" + "---|" * len(headings)]
        for row in table.to_dict("records"):
            cells = [row["app"], f"{row['vcpu']:g}", row.get("setup", row.get("proxy"))]
            for metric, (_, digits) in columns.items():
                cells.append(
                    _cell(
                        row.get(metric, math.nan),
                        row.get(f"{metric}_lo", math.nan),
                        row.get(f"{metric}_hi", math.nan),
                        digits,
                    )
                )
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    lines.append("")
    lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"


COST_COLUMNS = {
    "proxy_cost_ms": ("proxy CPU ms/request", 3),
    "app_cost_ms": ("app CPU ms/request", 3),
    "proxy_cpu_pct": ("proxy CPU % of a core", 1),
    "rps": ("RPS", 0),
}
COMPARISON_COLUMNS = {
    "rps": ("RPS", 0),
    "p50_ms": ("P50 ms", 1),
    "p99_ms": ("P99 ms", 1),
    "slow_1p_share": ("share > 1 period", 3),
    "proxy_cpu_pct": ("proxy CPU %", 1),
    "throttled_share": ("throttled periods", 2),
}
BUDGET_COLUMNS = {
    "app_cost_ms_alone": ("app ms/req alone", 3),
    "proxy_cost_ms": ("proxy ms/req", 3),
    "proxy_cpu_pct": ("proxy CPU %", 1),
    "budget_rps": ("budget RPS", 0),
    "rps": ("measured RPS", 0),
    "measured_vs_budget": ("measured / budget", 2),
}
GAP_COLUMNS = {
    "rps_vs_alone": ("RPS kept behind the proxy", 2),
    "standin_rps_vs_alone": ("RPS kept behind the stand-in", 2),
    "rps_vs_standin": ("RPS: proxy / stand-in", 2),
    "p50_ms_vs_standin": ("P50: proxy / stand-in", 2),
    "p99_ms_vs_standin": ("P99: proxy / stand-in", 2),
}
INTERVAL_NOTE = "Values are the mean of the runs; brackets: 95 % t interval over the runs (scripts/sidecar_bench/repstats.py)."

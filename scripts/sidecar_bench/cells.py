"""The summary's cells as the tables and the charts both read them: which conditions, their flags, their
ratios and their names.

The table modules (tables.py, mitigations.py, model_tables.py ...) and the chart modules (charts.py,
model_charts.py ...) both import this module, which imports neither, nor altair, so that no table module imports
a chart module. The workflow makes each analysis rule depend on the modules its script imports
(workflow/rules/common.smk, get_analysis_code): editing a chart module remakes the charts only, editing this
module the tables and the charts.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from .flags import FLAGS
from .repstats import Estimate
from .stats import condition_ratio

DEFAULT_MEMORY_MB = 2048
APP_NAMES = {"go": "Go API", "next": "Next SSR"}

# Flags that do not bear on a metric's cell: P99.9's sample count says nothing about RPS, P50 or P99.
NOT_FOR = {
    "rps": {"few_samples_p99", "few_samples_p99_9", "bimodal"},
    "steady_rps": {"few_samples_p99", "few_samples_p99_9", "bimodal"},
    "p50_ms": {"few_samples_p99", "few_samples_p99_9", "bimodal"},
    "p99_ms": {"few_samples_p99_9"},
    "steady_p99_ms": {"few_samples_p99_9"},
}


# --- flags -----------------------------------------------------------------------------------------


def codes_of(value) -> list[str]:
    """Flag codes from a summary's `flags` cell ("a,b"; "" or missing: none), in FLAGS order."""
    if not isinstance(value, str) or not value:
        return []
    given = {c.strip() for c in value.split(",") if c.strip()}
    return [c for c in FLAGS if c in given] + sorted(given - set(FLAGS))


def cell_codes(codes, metric: str | None = None) -> set[str]:
    return {c for c in codes if c not in NOT_FOR.get(metric, set())}


# --- ratios of two conditions ----------------------------------------------------------------------

NO_RATIO = Estimate(math.nan, math.nan, math.nan, 0, "none")


def between(rows: pd.DataFrame, base: pd.DataFrame, metric: str = "rps") -> Estimate:
    """One condition's metric over another's (retention, memory gain, Go/Next): stats.condition_ratio."""
    if len(rows) != 1 or len(base) != 1:
        return NO_RATIO
    return condition_ratio(rows.iloc[0], base.iloc[0], metric)


def ratios_over(rows: pd.DataFrame, base: pd.Series, metric: str = "rps") -> tuple[np.ndarray, ...]:
    """Each row's metric over one base condition's (retention, memory gain): values, lo, hi arrays."""
    found = [condition_ratio(row, base, metric) for _, row in rows.iterrows()]
    return tuple(
        np.array([getattr(f, k) for f in found], dtype="float64") for k in ("value", "lo", "hi")
    )


# --- which conditions ------------------------------------------------------------------------------


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


def runs_of(
    summary: pd.DataFrame,
    app: str | None = None,
    vcpu: float | None = None,
    sidecar_count: int | None = None,
    memory_mb: int | None = None,
) -> pd.DataFrame:
    """The summary's rows of one setup (any of its parts left out: any value), in the summary's order.
    One mask, one selection: each selection copies every column, and the tables ask for hundreds."""
    if app is None and vcpu is None and sidecar_count is None and memory_mb is None:
        return summary
    mask = np.ones(len(summary), dtype=bool)
    if app is not None:
        mask &= (summary["app"] == app).to_numpy(dtype=bool, na_value=False)
    if vcpu is not None:
        mask &= np.isclose(summary["vcpu"], vcpu)
    if sidecar_count is not None:
        mask &= (summary["sidecar_count"] == sidecar_count).to_numpy(dtype=bool, na_value=False)
    if memory_mb is not None:
        mask &= (summary["memory_mb"] == memory_mb).to_numpy(dtype=bool, na_value=False)
    return summary[mask]


def article_settings(summary: pd.DataFrame) -> pd.DataFrame:
    """The conditions at the article's settings (no knob against throttling): what the article's tables hold."""
    if "knobs" not in summary.columns:
        return summary
    return summary[knob_labels(summary["knobs"]) == ""]


def knob_labels(knobs: pd.Series) -> pd.Series:
    """A condition's knobs as text, "" for none (a column read back from CSV with no knob is all NaN floats)."""
    return knobs.astype(object).where(knobs.notna(), "").astype(str)


ARTICLE_SETTINGS = "article's settings"
KNOB_SETUP = ["app", "vcpu", "memory_mb", "sidecar_count", "total_sidecar_load_pct"]


def ratio_record(prefix: str, found: Estimate) -> dict[str, float]:
    """A ratio's value and interval as three columns: prefix, prefix_lo, prefix_hi."""
    return {prefix: found.value, f"{prefix}_lo": found.lo, f"{prefix}_hi": found.hi}


def knob_rows(summary: pd.DataFrame) -> pd.DataFrame:
    """Each knob condition (and the task layout) beside the article's settings of the same setup and load: one
    row per condition of a setup and load that has both, the article's settings first, with the RPS and P99
    ratios to them (both sides' run-to-run uncertainty) and, within the setup and load, a rank by the RPS
    ratio. What the mitigations table shows and the knobs chart draws."""
    rows = measured_only(summary)
    if "knobs" not in rows.columns:
        rows = rows.assign(knobs="")
    rows = rows.assign(knobs=knob_labels(rows["knobs"]))
    setups = KNOB_SETUP
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
                p99_found = (
                    between(row.to_frame().T, base, "p99_ms") if len(base) == 1 else NO_RATIO
                )
                found.append(
                    {
                        **dict(zip(setups, key)),
                        "knobs": row["knobs"] or ARTICLE_SETTINGS,
                        "rps": row.get("rps"),
                        "rps_lo": row.get("rps_lo", math.nan),
                        "rps_hi": row.get("rps_hi", math.nan),
                        **ratio_record("rps_vs_article_settings", ratio_found),
                        "p99_ms": row.get("p99_ms"),
                        "p99_ms_lo": row.get("p99_ms_lo", math.nan),
                        "p99_ms_hi": row.get("p99_ms_hi", math.nan),
                        **ratio_record("p99_vs_article_settings", p99_found),
                        "period_ms": row.get("period_ms"),
                        "slow_1p_share": row.get("slow_1p_share"),
                        "sidecars_cpu_pct": row.get("sidecars_cpu_pct"),
                        "app_cpu_pct": row.get("app_cpu_pct"),
                        "nr_throttled": row.get("nr_throttled"),
                        "throttled_share": row.get("throttled_share"),
                        "throttled_s": row.get("throttled_s"),
                        "nr_bursts": row.get("nr_bursts", math.nan),
                        "burst_s": row.get("burst_s", math.nan),
                        "repeats": row.get("repeats", math.nan),
                        "flags": row.get("flags", ""),
                    }
                )
            order = sorted(
                (r for r in found if r["knobs"] != ARTICLE_SETTINGS),
                key=lambda r: (
                    -(
                        r["rps_vs_article_settings"]
                        if math.isfinite(float(r["rps_vs_article_settings"]))
                        else -math.inf
                    )
                ),
            )
            for rank, r in enumerate(order, 1):
                r["rank_by_rps"] = rank
            records += found
    columns = setups + [
        "knobs",
        "rank_by_rps",
        "rps",
        "rps_lo",
        "rps_hi",
        "rps_vs_article_settings",
        "rps_vs_article_settings_lo",
        "rps_vs_article_settings_hi",
        "p99_ms",
        "p99_ms_lo",
        "p99_ms_hi",
        "p99_vs_article_settings",
        "p99_vs_article_settings_lo",
        "p99_vs_article_settings_hi",
        "period_ms",
        "slow_1p_share",
        "app_cpu_pct",
        "sidecars_cpu_pct",
        "nr_throttled",
        "throttled_share",
        "throttled_s",
        "nr_bursts",
        "burst_s",
        "repeats",
        "flags",
    ]
    return pd.DataFrame(records, columns=columns)


# --- names ---------------------------------------------------------------------------------------


def setup_name(app: str, vcpu: float, sidecar_count: int) -> str:
    noun = "sidecar" if sidecar_count == 1 else "sidecars"
    return f"{APP_NAMES.get(app, app).split()[0]} {vcpu:g} vCPU + {sidecar_count} {noun}"

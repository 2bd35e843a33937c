"""The knobs against CFS throttling and the task topology, each beside the article's settings: mitigations.md.

Data: summary (every condition, knobs or not) -> mitigations -> one row per setup, load and knob, ranked by
the knob's RPS ratio to the article's settings. The article's own tables (tables.py) hold the article's
settings only.
"""

from __future__ import annotations

import math

import pandas as pd

from .cells import APP_NAMES, NO_RATIO, between, cell_codes, codes_of, knob_labels, measured_only
from .table_format import (DEFINITIONS, Table, fmt, load_text, measured, missing_note, ratio_record,
                           ratio_text)

ARTICLE_SETTINGS = "article's settings"


def mitigations(summary: pd.DataFrame, ref: pd.DataFrame | None = None) -> Table:
    """Each knob against throttling beside the article's settings of the same setup and load: RPS and its
    ratio to the article's settings, P99, the share of responses slower than one period (the condition's own),
    the delivered sidecar CPU and the throttling and burst counts. Within each setup and load the knobs are
    ranked by their RPS ratio (the ratio's value; rows whose interval holds 1 are marked "~")."""
    rows = measured_only(summary)
    if "knobs" not in rows.columns:
        rows = rows.assign(knobs="")
    rows = rows.assign(knobs=knob_labels(rows["knobs"]))
    setups = ["app", "vcpu", "memory_mb", "sidecar_count", "total_sidecar_load_pct"]
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
                p99_found = between(row.to_frame().T, base, "p99_ms") if len(base) == 1 else NO_RATIO
                found.append({
                    **dict(zip(setups, key)), "knobs": row["knobs"] or ARTICLE_SETTINGS,
                    "rps": row.get("rps"), "rps_lo": row.get("rps_lo", math.nan), "rps_hi": row.get("rps_hi", math.nan),
                    **ratio_record("rps_vs_article_settings", ratio_found),
                    "p99_ms": row.get("p99_ms"), "p99_ms_lo": row.get("p99_ms_lo", math.nan),
                    "p99_ms_hi": row.get("p99_ms_hi", math.nan),
                    **ratio_record("p99_vs_article_settings", p99_found),
                    "period_ms": row.get("period_ms"), "slow_1p_share": row.get("slow_1p_share"),
                    "sidecars_cpu_pct": row.get("sidecars_cpu_pct"), "app_cpu_pct": row.get("app_cpu_pct"),
                    "nr_throttled": row.get("nr_throttled"),
                    "throttled_share": row.get("throttled_share"), "throttled_s": row.get("throttled_s"),
                    "nr_bursts": row.get("nr_bursts", math.nan), "burst_s": row.get("burst_s", math.nan),
                    "repeats": row.get("repeats", math.nan), "flags": row.get("flags", ""),
                })
            order = sorted((r for r in found if r["knobs"] != ARTICLE_SETTINGS),
                           key=lambda r: -(r["rps_vs_article_settings"] if math.isfinite(
                               float(r["rps_vs_article_settings"])) else -math.inf))
            for rank, r in enumerate(order, 1):
                r["rank_by_rps"] = rank
            records += found
    columns = setups + ["knobs", "rank_by_rps", "rps", "rps_lo", "rps_hi", "rps_vs_article_settings",
                        "rps_vs_article_settings_lo", "rps_vs_article_settings_hi", "p99_ms", "p99_ms_lo",
                        "p99_ms_hi", "p99_vs_article_settings", "p99_vs_article_settings_lo",
                        "p99_vs_article_settings_hi", "period_ms", "slow_1p_share", "app_cpu_pct", "sidecars_cpu_pct",
                        "nr_throttled", "throttled_share", "throttled_s", "nr_bursts", "burst_s", "repeats", "flags"]
    data = pd.DataFrame(records, columns=columns)
    seen: set[str] = set()
    for flags in data["flags"]:
        seen |= cell_codes(codes_of(flags), "rps") | cell_codes(codes_of(flags), "p99_ms")

    def ratio_cell(r, prefix):
        text = ratio_text(float(r[prefix]), float(r[f"{prefix}_lo"]), float(r[f"{prefix}_hi"]))
        lo, hi = float(r[f"{prefix}_lo"]), float(r[f"{prefix}_hi"])
        return f"{text} ~" if math.isfinite(lo) and math.isfinite(hi) and lo <= 1 <= hi else text

    display = pd.DataFrame({
        "Setup": [f"{APP_NAMES.get(r['app'], r['app'])} {r['vcpu']:g} vCPU + {int(r['sidecar_count'])} sidecars"
                  for _, r in data.iterrows()],
        "Total load": [load_text(r["total_sidecar_load_pct"], r["sidecars_cpu_pct"]) for _, r in data.iterrows()],
        "Knobs": data["knobs"],
        "Rank": data["rank_by_rps"].map(lambda v: fmt(v, 0)),
        "RPS": [measured(r["rps"], r["rps_lo"], r["rps_hi"], codes_of(r["flags"]), "rps", 0)
                for _, r in data.iterrows()],
        "RPS / article's settings": [ratio_cell(r, "rps_vs_article_settings") for _, r in data.iterrows()],
        "P99 ms": [measured(r["p99_ms"], r["p99_ms_lo"], r["p99_ms_hi"], codes_of(r["flags"]), "p99_ms", 1)
                   for _, r in data.iterrows()],
        "P99 / article's settings": [ratio_cell(r, "p99_vs_article_settings") for _, r in data.iterrows()],
        "> 1 period %": [fmt(100 * float(v), 2) for v in data["slow_1p_share"]],
        "App CPU %": [fmt(float(v), 1) for v in data["app_cpu_pct"]],
        "Throttled periods %": [fmt(100 * float(v), 1) for v in data["throttled_share"]],
        "Throttled s": data["throttled_s"].map(lambda v: fmt(float(v), 2)),
        "Bursts": data["nr_bursts"].map(lambda v: fmt(float(v), 0)),
        "Burst s": data["burst_s"].map(lambda v: fmt(float(v), 3)),
    })
    notes = [DEFINITIONS,
             "Each knob is compared with the article's settings (period 100 ms, no burst, a quota of vcpu, any CPU, "
             "the runtimes' defaults, one container) at the same app, vCPU, memory, sidecars and load; a ratio "
             "marked ~ has 1 inside its interval (no difference shown). Rank: by the RPS ratio within the setup "
             "and load. App CPU and total load (delivered): each role's CPU, from its process tree (process "
             "topology) or its own container's cgroup (task topology).",
             "> 1 period: the share of responses slower than the condition's own CFS period (100 ms at the "
             "article's settings). Bursts and burst s: the task cgroup's nr_bursts and burst time over the window "
             "(kernels with CFS burst); throttled periods: nr_throttled / nr_periods."]
    return Table("mitigations", "Knobs against CFS throttling and the task topology: each beside the article's "
                 "settings", data, display,
                 notes + missing_note(display[["RPS"]]), seen)

"""The knobs against CFS throttling and the task topology, each beside the article's settings: mitigations.md.

Data: summary (every condition, knobs or not) -> mitigations -> one row per setup, load and knob, ranked by
the knob's RPS ratio to the article's settings. The article's own tables (tables.py) hold the article's
settings only.
"""

from __future__ import annotations

import pandas as pd

from .cells import APP_NAMES, cell_codes, codes_of, knob_rows
from .table_format import DEFINITIONS, Table, fmt, load_text, measured, missing_note, ratio_cell


def mitigations(summary: pd.DataFrame, ref: pd.DataFrame | None = None) -> Table:
    """Each knob against throttling beside the article's settings of the same setup and load: RPS and its
    ratio to the article's settings, P99, the share of responses slower than one period (the condition's own),
    the delivered sidecar CPU and the throttling and burst counts. Within each setup and load the knobs are
    ranked by their RPS ratio (the ratio's value; a ratio whose interval excludes 1 is marked "*")."""
    data = knob_rows(summary)
    seen: set[str] = set()
    for flags in data["flags"]:
        seen |= cell_codes(codes_of(flags), "rps") | cell_codes(codes_of(flags), "p99_ms")

    def ratio_of(r, prefix):
        return ratio_cell(float(r[prefix]), float(r[f"{prefix}_lo"]), float(r[f"{prefix}_hi"]))

    display = pd.DataFrame(
        {
            "Setup": [
                f"{APP_NAMES.get(r['app'], r['app'])} {r['vcpu']:g} vCPU + {int(r['sidecar_count'])} sidecars"
                for _, r in data.iterrows()
            ],
            "Total load": [
                load_text(r["total_sidecar_load_pct"], r["sidecars_cpu_pct"])
                for _, r in data.iterrows()
            ],
            "Knobs": data["knobs"],
            "Rank": data["rank_by_rps"].map(lambda v: fmt(v, 0)),
            "RPS": [
                measured(r["rps"], r["rps_lo"], r["rps_hi"], codes_of(r["flags"]), "rps", 0)
                for _, r in data.iterrows()
            ],
            "RPS / article's settings": [
                ratio_of(r, "rps_vs_article_settings") for _, r in data.iterrows()
            ],
            "P99 ms": [
                measured(
                    r["p99_ms"], r["p99_ms_lo"], r["p99_ms_hi"], codes_of(r["flags"]), "p99_ms", 1
                )
                for _, r in data.iterrows()
            ],
            "P99 / article's settings": [
                ratio_of(r, "p99_vs_article_settings") for _, r in data.iterrows()
            ],
            "> 1 period %": [fmt(100 * float(v), 2) for v in data["slow_1p_share"]],
            "App CPU %": [fmt(float(v), 1) for v in data["app_cpu_pct"]],
            "Throttled periods %": [fmt(100 * float(v), 1) for v in data["throttled_share"]],
            "Throttled s": data["throttled_s"].map(lambda v: fmt(float(v), 2)),
            "Bursts": data["nr_bursts"].map(lambda v: fmt(float(v), 0)),
            "Burst s": data["burst_s"].map(lambda v: fmt(float(v), 3)),
        }
    )
    notes = [
        DEFINITIONS,
        "Each knob is compared with the article's settings (period 100 ms, no burst, a quota of vcpu, any CPU, "
        "the runtimes' defaults, one container) at the same app, vCPU, memory, sidecars and load; a ratio "
        "marked * has 1 outside its 95 % interval (a difference shown); unmarked, none is shown. Rank: by "
        "the RPS ratio within the setup and load. App CPU and total load (delivered): each role's CPU, from its "
        "process tree (process topology) or its own container's cgroup (task topology).",
        "> 1 period: the share of responses slower than the condition's own CFS period (100 ms at the "
        "article's settings). Bursts and burst s: the task cgroup's nr_bursts and burst time over the window "
        "(kernels with CFS burst); throttled periods: nr_throttled / nr_periods.",
    ]
    return Table(
        "mitigations",
        "Knobs against CFS throttling and the task topology: each beside the article's settings",
        data,
        display,
        notes + missing_note(display[["RPS"]]),
        seen,
    )

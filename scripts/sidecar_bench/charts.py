"""The article's charts (and a few it lacked), from our summary, with the article's values as hollow marks; and
the look every chart module shares (model_charts, burn_charts, layout_charts draw with it).

Our points carry their 95 % intervals (error bars) and a red ring when the
condition is flagged (flags.FLAGS; the subtitle names the flags present).
Every chart is written as <name>.html (Vega-Lite with its JavaScript inlined,
so it opens offline), <name>.png (scale 2) and <name>.svg (chart_files.py). A chart whose data
the current matrix lacks is still written, saying what is missing; a summary
without intervals or flags draws points without bars or rings.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Callable, Collection, Iterable, Iterator, Sequence

import altair as alt
import numpy as np
import pandas as pd

from . import reference as refmod
from .breaking import assess_rows
from .cells import (
    APP_NAMES,
    article_settings,
    baseline_memory,
    cell_codes,
    codes_of,
    measured_only,
    ratios_over,
    runs_of,
    setup_name,
)
from . import vlspec
from .chart_files import save_chart
from .flags import FLAGS
from .runfile import read_columns, read_failure
from .timeseries import per_second

# The article's four setups: app, vCPU, sidecar count.
FIGURE_SETUPS = (("go", 0.25, 3), ("next", 0.25, 3), ("next", 0.5, 3), ("next", 0.25, 1))
RETAINED_SETUPS = (("go", 0.25, 3), ("next", 0.25, 3), ("next", 0.5, 3))
DISTRIBUTION_SETUPS = (("go", 0.25, 3), ("next", 0.25, 3))
SETUP_COLORS = ["#4c78a8", "#f58518", "#54a24b", "#b279a2"]
SERIES_COLORS = {"P50": "#4c78a8", "P99": "#e45756", "RPS": "#54a24b"}
SOURCES = ("ours", "article")
FLAG_COLOR = "#d62728"
FLAGGED = "flagged condition"
LOAD_TITLE = "Total sidecar load (% of one core)"
DELIVERED_TITLE = "Sidecars' measured CPU (% of one core)"
# Domain ends at the highest load (no "nice" 110 whose label collides with 100).
LOAD_SCALE = alt.Scale(nice=False, zero=True)
WIDTH, HEIGHT = 260, 190
ECDF_POINTS = 1500
PANEL_WIDTH, LABEL_PX = 330, 16  # distribution panels; a rotated period label needs ~16 px of axis
REP_FILE = re.compile(r"rep(\d+)$")
# Not ringed where a chart shows the sidecars' measured CPU: sidecar_under (retired; older summaries still carry
# it) is what that CPU shows.
MODEL_UNRINGED = {"sidecar_under"}


def placeholder(title: str, message: str) -> alt.Chart:
    return (
        alt.Chart(pd.DataFrame({"text": [message]}))
        .mark_text(fontSize=14)
        .encode(text=alt.Text("text:N"))
        .properties(title=title, width=520, height=80)
    )


def figure_setup_parts(data: pd.DataFrame, rows: list) -> Iterator[tuple[str, str, pd.DataFrame]]:
    """Each of the article's four setups (FIGURE_SETUPS): its app, its name and its rows of data (column "setup");
    a setup not in data gets a placeholder panel appended to rows instead."""
    for app, vcpu, sc in FIGURE_SETUPS:
        name = setup_name(app, vcpu, sc)
        part = data[data["setup"] == name]
        if part.empty:
            rows.append(
                placeholder(name, "not in the current matrix").properties(
                    width=WIDTH, height=HEIGHT
                )
            )
            continue
        yield app, name, part


# --- sources, intervals and flags: one look for every chart ------------------------------------------------


def article_shape() -> alt.Shape:
    """The article's points: hollow diamonds, with a legend entry drawn hollow as they are (ours are the
    filled points of the colour legend)."""
    return alt.Shape(
        "source:N",
        title="Source",
        scale=alt.Scale(domain=["article"], range=["diamond"]),
        legend=alt.Legend(
            symbolFillColor="transparent",
            symbolStrokeColor="gray",
            symbolStrokeWidth=1.5,
            labelExpr="'the article (hollow)'",
        ),
    )


def flag_marks(value) -> str:
    return " ".join(FLAGS[c].mark if c in FLAGS else c for c in codes_of(value))


def metric_flags(value, metric: str) -> str:
    """The flags of a summary cell that bear on one metric (cells.NOT_FOR), joined as in the summary."""
    return ",".join(sorted(cell_codes(codes_of(value), metric)))


def flagged_subtitle(
    frames: Iterable[pd.DataFrame], lead: str = "Red rings: flagged conditions"
) -> str:
    """ "Red rings: flagged conditions (H host-bound, not quota-bound; ...)" for the flags present, or ""."""
    present: set[str] = set()
    for frame in frames:
        if "flags" in frame.columns:
            for value in frame["flags"]:
                present |= set(codes_of(value))
    if not present:
        return ""
    named = "; ".join(f"{FLAGS[c].mark} {FLAGS[c].label}" for c in FLAGS if c in present)
    return f"{lead} ({named}; rules in the tables' legends)."


def with_flags(frame: pd.DataFrame) -> pd.DataFrame:
    frame = frame.copy()
    flags = frame["flags"] if "flags" in frame.columns else pd.Series("", index=frame.index)
    frame["flags"] = flags.fillna("").astype(str)
    frame["marks"] = frame["flags"].map(flag_marks)
    frame["flagged"] = np.where(frame["flags"] != "", FLAGGED, "")
    return frame


def flag_ring(base: alt.Chart, y: alt.Y, size: int = 160) -> alt.Chart:
    """A red ring around each flagged point, with a legend entry."""
    return (
        base.transform_filter(alt.datum.flagged == FLAGGED)
        .mark_point(shape="circle", filled=False, size=size, strokeWidth=2)
        .encode(
            y=y,
            stroke=alt.Stroke(
                "flagged:N",
                title="Flags",
                scale=alt.Scale(domain=[FLAGGED], range=[FLAG_COLOR]),
                legend=alt.Legend(
                    symbolType="circle", symbolFillColor="transparent", symbolStrokeWidth=2
                ),
            ),
        )
    )


def ours_and_article(
    base: alt.Chart, y: alt.Y, lo: str, hi: str, line: dict | None = None
) -> list[alt.Chart]:
    """Ours: line, error bars (lo..hi), filled points, red rings on flagged ones; the article: hollow diamonds."""
    ours = base.transform_filter(alt.datum.source == "ours")
    article = base.transform_filter(alt.datum.source == "article")
    spec = y.to_dict()
    y_lo = alt.Y(
        f"{lo}:Q", title=spec.get("title", alt.Undefined), scale=spec.get("scale", alt.Undefined)
    )
    return [
        ours.mark_line(**(line or {})).encode(y=y),
        ours.transform_filter(f"isValid(datum['{lo}']) && isValid(datum['{hi}'])")
        .mark_rule(strokeWidth=1.5)
        .encode(y=y_lo, y2=alt.Y2(f"{hi}:Q")),
        ours.mark_point(size=35, filled=True, opacity=1).encode(y=y),
        flag_ring(ours, y),
        article.mark_point(size=70, strokeWidth=1.5, filled=False).encode(
            y=y, shape=article_shape()
        ),
    ]


# --- figure 1: latency and RPS against total load, ours and the article's each on its own RPS scale ---------

METRICS = (("p50_ms", "P50"), ("p99_ms", "P99"), ("rps", "RPS"))


def column_of(rows: pd.DataFrame, name: str) -> pd.Series:
    return rows[name] if name in rows.columns else pd.Series(math.nan, index=rows.index)


LATENCY_FLOOR_MS = 0.1  # hey's resolution


def latency_low_end(values) -> pd.Series:
    """Latency interval low ends as drawn on a log axis, where a t interval's low end of 0 would break the
    whole axis: no latency is below hey's resolution, so that is where such a bar ends."""
    return pd.to_numeric(pd.Series(values), errors="coerce").clip(lower=LATENCY_FLOOR_MS)


def figure_data(summary: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    memory = baseline_memory(summary)
    frames = []
    for app, vcpu, sc in FIGURE_SETUPS:
        name = setup_name(app, vcpu, sc)
        rows = runs_of(summary, app, vcpu, sc, memory).sort_values("total_sidecar_load_pct")
        for column, series in METRICS:
            if len(rows):
                frames.append(
                    pd.DataFrame(
                        {
                            "setup": name,
                            "load": rows["total_sidecar_load_pct"].to_numpy(),
                            "series": series,
                            "value": rows[column].to_numpy(),
                            "lo": column_of(rows, f"{column}_lo").to_numpy(),
                            "hi": column_of(rows, f"{column}_hi").to_numpy(),
                            "source": "ours",
                            "delivered": column_of(rows, "sidecars_cpu_pct").to_numpy(),
                            "flags": [metric_flags(v, column) for v in column_of(rows, "flags")],
                        }
                    )
                )
            article = refmod.sweep(ref, app, vcpu, sc, column)
            if len(article):
                frames.append(
                    pd.DataFrame(
                        {
                            "setup": name,
                            "load": article.index,
                            "series": series,
                            "value": article.to_numpy(),
                            "lo": math.nan,
                            "hi": math.nan,
                            "source": "article",
                            "delivered": math.nan,
                            "flags": "",
                        }
                    )
                )
    columns = ["setup", "load", "series", "value", "lo", "hi", "source", "delivered", "flags"]
    data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    # Latencies go on a log axis (latency_low_end).
    latency = data["series"].isin(["P50", "P99"])
    data.loc[latency, "lo"] = latency_low_end(data.loc[latency, "lo"])
    return with_flags(data.dropna(subset=["value"]))


def latency_rps_chart(summary: pd.DataFrame, ref: pd.DataFrame) -> vlspec.ChartLike:
    data = figure_data(summary, ref)
    title = "Latency and RPS against total sidecar load"
    if data.empty:
        return placeholder(title, "No run of the four setups in the current matrix.")
    color = alt.Color(
        "series:N",
        title="Series",
        scale=alt.Scale(domain=list(SERIES_COLORS), range=list(SERIES_COLORS.values())),
    )
    x = alt.X("load:Q", title=LOAD_TITLE, scale=LOAD_SCALE)
    tooltip = [
        alt.Tooltip("setup:N"),
        alt.Tooltip("series:N"),
        alt.Tooltip("source:N"),
        alt.Tooltip("load:Q", title="load %"),
        alt.Tooltip("delivered:Q", title="sidecars' CPU used %", format=".1f"),
        alt.Tooltip("value:Q", format=".1f"),
        alt.Tooltip("lo:Q", format=".1f"),
        alt.Tooltip("hi:Q", format=".1f"),
        alt.Tooltip("marks:N"),
    ]
    rows = []
    for _, name, part in figure_setup_parts(data, rows):
        base = alt.Chart(part).encode(x=x, color=color, tooltip=tooltip)
        latency = base.transform_filter(
            alt.FieldOneOfPredicate(field="series", oneOf=["P50", "P99"])
        )
        y_lat = alt.Y("value:Q", title="Latency (ms, log)", scale=alt.Scale(type="log"))
        panels = [
            vlspec.layer(
                *ours_and_article(latency.encode(detail=alt.Detail("series:N")), y_lat, "lo", "hi")
            ).properties(title=f"{name}: P50, P99", width=WIDTH, height=HEIGHT)
        ]
        for source, label in (
            ("ours", "RPS, ours (own scale)"),
            ("article", "RPS, the article (own scale)"),
        ):
            rps = base.transform_filter(alt.datum.series == "RPS")
            # From zero: on a cut axis a retention of 0.46 looks like one of 0.63.
            y_rps = alt.Y("value:Q", title="RPS (responses/s)", scale=alt.Scale(zero=True))
            if not ((part["series"] == "RPS") & (part["source"] == source)).any():
                panels.append(
                    placeholder(label, f"no {source} RPS").properties(width=WIDTH, height=HEIGHT)
                )
                continue
            layers = ours_and_article(
                rps.transform_filter(alt.datum.source == source), y_rps, "lo", "hi"
            )
            panels.append(vlspec.layer(*layers).properties(title=label, width=WIDTH, height=HEIGHT))
        rows.append(vlspec.hconcat(*panels).resolve_scale(y="independent"))
    subtitle = [
        "Filled points and lines: ours, with 95 % interval bars; hollow diamonds: the article. RPS in two "
        "panels, each from zero on its own scale (ours and the article's differ in level; their drops "
        "compare as heights)."
    ]
    flagged = flagged_subtitle([data])
    if flagged:
        subtitle.append(flagged)
    return (
        vlspec.vconcat(*rows)
        .resolve_scale(color="shared", shape="shared", stroke="shared")
        .properties(title=alt.Title(title, subtitle=subtitle))
    )


# --- figure 2: RPS retained vs the no-load baseline --------------------------------------------------


def retained_data(summary: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    memory = baseline_memory(summary)
    frames = []
    for app, vcpu, sc in RETAINED_SETUPS:
        name = setup_name(app, vcpu, sc)
        rows = runs_of(summary, app, vcpu, sc, memory).sort_values("total_sidecar_load_pct")
        base = rows[np.isclose(rows["total_sidecar_load_pct"], 0.0)]
        if len(base) and float(base["rps"].iloc[0]) > 0:
            # Retention with both the loaded cell's and the baseline's run-to-run uncertainty.
            retained, lo, hi = ratios_over(rows, base.iloc[0])
            frames.append(
                pd.DataFrame(
                    {
                        "setup": name,
                        "load": rows["total_sidecar_load_pct"].to_numpy(),
                        "retained": retained,
                        "lo": lo,
                        "hi": hi,
                        "rps": rows["rps"].to_numpy(),
                        "source": "ours",
                        "delivered": column_of(rows, "sidecars_cpu_pct").to_numpy(),
                        "flags": [metric_flags(v, "rps") for v in column_of(rows, "flags")],
                    }
                )
            )
        article = refmod.sweep(ref, app, vcpu, sc, "rps")
        if len(article) and 0.0 in article.index:
            frames.append(
                pd.DataFrame(
                    {
                        "setup": name,
                        "load": article.index,
                        "retained": article.to_numpy() / article.loc[0.0],
                        "lo": math.nan,
                        "hi": math.nan,
                        "rps": article.to_numpy(),
                        "source": "article",
                        "delivered": math.nan,
                        "flags": "",
                    }
                )
            )
    data = (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(
            columns=["setup", "load", "retained", "lo", "hi", "rps", "source", "delivered", "flags"]
        )
    )
    return with_flags(data)


# The retention axis stops this far above the highest point (ours or the article's), in whole tenths: an
# interval reaching beyond is cut there and marked with a caret (its full range is in the tooltip), so that
# one wide interval (2 repetitions of a noisy cell) cannot squeeze every point into the chart's foot.
AXIS_HEADROOM = 1.15
CUT_MARK = "\u25b2"


def capped_axis_top(points: Iterable[float], highs: Iterable[float]) -> float | None:
    """The y axis's top, AXIS_HEADROOM x the highest point rounded up to a tenth, when an interval's top
    reaches beyond it; None when every interval fits (the axis is then drawn as before, to the highest)."""
    values = np.asarray(list(points), dtype=float)
    values = values[np.isfinite(values)]
    tops = np.asarray(list(highs), dtype=float)
    tops = tops[np.isfinite(tops)]
    if not len(values) or not len(tops):
        return None
    top = math.ceil(AXIS_HEADROOM * float(values.max()) * 10 - 1e-9) / 10
    return top if float(tops.max()) > top else None


def retained_chart(summary: pd.DataFrame, ref: pd.DataFrame) -> vlspec.ChartLike:
    data = retained_data(summary, ref)
    title = "RPS retained relative to the no-load baseline (3 sidecars)"
    if data.empty:
        return placeholder(
            title,
            "No run pair (no load and loaded) of Go 0.25 / Next 0.25 / Next 0.5 + 3 sidecars "
            "in this matrix.",
        )
    names = [setup_name(*s) for s in RETAINED_SETUPS]
    color = alt.Color(
        "setup:N", title="Setup", scale=alt.Scale(domain=names, range=SETUP_COLORS[:3])
    )
    top = capped_axis_top(data["retained"], data["hi"])
    data["hi_shown"] = data["hi"] if top is None else data["hi"].clip(upper=top)
    data["cut"] = False if top is None else data["hi"] > top
    y = alt.Y(
        "retained:Q",
        title="RPS retained (share of the 0 % load RPS)",
        axis=alt.Axis(format="%"),
        scale=alt.Scale(zero=True)
        if top is None
        else alt.Scale(zero=True, domain=[0, top], nice=False),
    )
    base = alt.Chart(data).encode(
        x=alt.X("load:Q", title=LOAD_TITLE, scale=LOAD_SCALE),
        color=color,
        tooltip=[
            alt.Tooltip("setup:N"),
            alt.Tooltip("source:N"),
            alt.Tooltip("load:Q"),
            alt.Tooltip("delivered:Q", title="sidecars' CPU used %", format=".1f"),
            alt.Tooltip("rps:Q", format=".0f"),
            alt.Tooltip("retained:Q", format=".0%"),
            alt.Tooltip("lo:Q", format=".0%"),
            alt.Tooltip("hi:Q", format=".0%"),
            alt.Tooltip("marks:N"),
        ],
    )
    subtitle = [
        "Hollow diamonds: the article's values. Bars: 95 % interval of our retention, with the run-to-run "
        "variation of both the loaded cell and its 0 % baseline."
    ]
    layers = ours_and_article(base, y, "lo", "hi_shown")
    if top is not None:
        subtitle.append(
            f"{CUT_MARK} at a bar's top: its interval goes on above the axis (its full range in the tooltip)."
        )
        layers.append(
            base.transform_filter(alt.datum.cut)
            .mark_point(shape="triangle-up", filled=True, size=70, opacity=1)
            .encode(y=alt.Y("hi_shown:Q", scale=y.to_dict()["scale"]))
        )
    flagged = flagged_subtitle([data])
    if flagged:
        subtitle.append(flagged)
    return vlspec.layer(*layers).properties(
        width=520, height=300, title=alt.Title(title, subtitle=subtitle)
    )


# --- figure 3: RPS by memory limit --------------------------------------------------------------------


def memory_data(
    summary: pd.DataFrame, ref: pd.DataFrame, sidecar_count: int = 3, sidecar_load_pct: float = 15.0
) -> pd.DataFrame:
    rows = runs_of(summary, sidecar_count=sidecar_count)
    rows = rows[np.isclose(rows["sidecar_load_pct"], sidecar_load_pct)]
    frames = []
    memory = baseline_memory(summary)
    if len(rows):
        ours = pd.DataFrame(
            {
                "app": rows["app"],
                "vcpu": rows["vcpu"],
                "memory_mb": rows["memory_mb"],
                "rps": rows["rps"],
                "lo": column_of(rows, "rps_lo"),
                "hi": column_of(rows, "rps_hi"),
                "source": "ours",
                "flags": [metric_flags(v, "rps") for v in column_of(rows, "flags")],
                "rel": math.nan,
                "rel_lo": math.nan,
                "rel_hi": math.nan,
            }
        )
        # The memory gain over the same app and vCPU at the baseline memory, both cells' runs counted.
        for (app, vcpu), part in rows.groupby(["app", "vcpu"]):
            base = part[part["memory_mb"] == memory]
            if len(base):
                rel = ratios_over(part, base.iloc[0])
                ours.loc[part.index, ["rel", "rel_lo", "rel_hi"]] = np.column_stack(rel)
        frames.append(ours)
    art = refmod.select(ref, "memory", metric="rps")
    if len(art):
        frames.append(
            art[["app", "vcpu", "memory_mb", "value"]]
            .rename(columns={"value": "rps"})
            .assign(lo=math.nan, hi=math.nan, source="article", flags="")
        )
    if not frames:
        return pd.DataFrame(
            columns=[
                "app",
                "vcpu",
                "memory_mb",
                "rps",
                "lo",
                "hi",
                "source",
                "flags",
                "marks",
                "flagged",
                "App",
                "base_rps",
                "rel",
                "rel_lo",
                "rel_hi",
            ]
        )
    data = with_flags(pd.concat(frames, ignore_index=True))
    data["App"] = data["app"].map(lambda a: APP_NAMES.get(a, a))
    # RPS relative to the same source's cell at the grid's memory (baseline_memory: 2048 MB) for that app and vCPU:
    # the article's 1 vCPU Next.js and ours differ 5-fold in RPS, their trends compare as ratios.
    base = (
        data[data["memory_mb"] == memory]
        .groupby(["source", "app", "vcpu"])["rps"]
        .first()
        .rename("base_rps")
    )
    data = data.join(base, on=["source", "app", "vcpu"])
    article = data["source"] == "article"
    data.loc[article, "rel"] = data.loc[article, "rps"] / data.loc[article, "base_rps"]
    return data


def memory_chart(summary: pd.DataFrame, ref: pd.DataFrame) -> vlspec.ChartLike:
    data = memory_data(summary, ref)
    memory = baseline_memory(summary)
    title = f"RPS by memory limit, relative to {memory} MB (3 sidecars at 15 % each)"
    if data.empty:
        return placeholder(title, "No memory runs (3 sidecars x 15 %) in the current matrix.")
    panels = []
    for vcpu in sorted(data["vcpu"].unique()):
        part = data[np.isclose(data["vcpu"], vcpu)]
        if part["memory_mb"].nunique() < 2:
            continue  # a grid run at one memory limit is no memory comparison
        base = alt.Chart(part).encode(
            x=alt.X("memory_mb:O", title="Memory limit (MB)", axis=alt.Axis(labelAngle=0)),
            color=alt.Color(
                "App:N",
                title="App",
                scale=alt.Scale(domain=list(APP_NAMES.values()), range=SETUP_COLORS[:2]),
            ),
            detail=alt.Detail("App:N"),
            tooltip=[
                alt.Tooltip("App:N"),
                alt.Tooltip("source:N"),
                alt.Tooltip("memory_mb:O"),
                alt.Tooltip("rps:Q", format=".0f"),
                alt.Tooltip("lo:Q", format=".0f"),
                alt.Tooltip("hi:Q", format=".0f"),
                alt.Tooltip("rel:Q", format=".2f"),
                alt.Tooltip("marks:N"),
            ],
        )
        y = alt.Y("rel:Q", title=f"RPS / RPS at {memory} MB", scale=alt.Scale(zero=True))
        panels.append(
            vlspec.layer(*ours_and_article(base, y, "rel_lo", "rel_hi")).properties(
                title=f"{vcpu:g} vCPU", width=220, height=240
            )
        )
    if not panels:
        return placeholder(
            title, "No vCPU with runs at two or more memory limits in the current matrix."
        )
    subtitle = [
        f"Each app's RPS over its own RPS at {memory} MB, at the same vCPU (ours over ours, the article's over "
        "the article's). Bars: our 95 % intervals.",
        "The article published 1 vCPU only (hollow diamonds). Our intervals carry the run-to-run variation of "
        "both cells.",
    ]
    flagged = flagged_subtitle([data])
    if flagged:
        subtitle.append(flagged)
    return (
        vlspec.hconcat(*panels)
        .resolve_scale(color="shared", shape="shared", y="shared")
        .properties(title=alt.Title(title, subtitle=subtitle))
    )


# --- beyond the article: how many responses wait whole CFS periods --------------------------------------------

TAIL_SERIES = {1: "> 1 period", 2: "> 2 periods", 3: "> 3 periods"}
TAIL_COLORS = ["#f58518", "#e45756", "#72286f"]


def tail_data(summary: pd.DataFrame) -> pd.DataFrame:
    memory = baseline_memory(summary)
    frames = []
    for app, vcpu, sc in FIGURE_SETUPS:
        rows = runs_of(summary, app, vcpu, sc, memory).sort_values("total_sidecar_load_pct")
        for k, series in TAIL_SERIES.items():
            column = f"slow_{k}p_share"
            if rows.empty or column not in rows.columns:
                continue
            frames.append(
                pd.DataFrame(
                    {
                        "setup": setup_name(app, vcpu, sc),
                        "load": rows["total_sidecar_load_pct"].to_numpy(),
                        "series": series,
                        "share": rows[column].to_numpy(),
                        "lo": column_of(rows, f"{column}_lo").to_numpy(),
                        "hi": column_of(rows, f"{column}_hi").to_numpy(),
                        "source": "ours",
                        "flags": [metric_flags(v, "p99_ms") for v in column_of(rows, "flags")],
                    }
                )
            )
    columns = ["setup", "load", "series", "share", "lo", "hi", "source", "flags"]
    data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    return with_flags(data.dropna(subset=["share"]))


def tail_share_chart(summary: pd.DataFrame) -> vlspec.ChartLike:
    data = tail_data(summary)
    title = "Share of responses slower than 1, 2 and 3 CFS periods against total sidecar load"
    if data.empty:
        return placeholder(
            title, "No tail shares (slow_<k>p_share) for the four setups in this summary."
        )
    period = (
        float(summary["period_ms"].median())
        if "period_ms" in summary and summary["period_ms"].notna().any()
        else 100.0
    )
    color = alt.Color(
        "series:N",
        title=f"Slower than (period {period:g} ms)",
        scale=alt.Scale(domain=list(TAIL_SERIES.values()), range=TAIL_COLORS),
    )
    y = alt.Y(
        "share:Q",
        title="Share of successful responses",
        axis=alt.Axis(format="%"),
        scale=alt.Scale(zero=True),
    )
    panels = []
    for name in dict.fromkeys(data["setup"]):
        part = data[data["setup"] == name]
        base = alt.Chart(part).encode(
            x=alt.X("load:Q", title=LOAD_TITLE, scale=LOAD_SCALE),
            color=color,
            detail=alt.Detail("series:N"),
            tooltip=[
                alt.Tooltip("setup:N"),
                alt.Tooltip("series:N"),
                alt.Tooltip("load:Q", title="load %"),
                alt.Tooltip("share:Q", format=".2%"),
                alt.Tooltip("lo:Q", format=".2%"),
                alt.Tooltip("hi:Q", format=".2%"),
                alt.Tooltip("marks:N"),
            ],
        )
        panels.append(
            vlspec.layer(*ours_and_article(base, y, "lo", "hi")[:4]).properties(
                title=name, width=WIDTH, height=HEIGHT
            )
        )
    subtitle = [
        "A throttled request waits for the next period: these shares move P99 (1 % of responses). "
        "Bars: 95 % intervals."
    ]
    flagged = flagged_subtitle([data])
    if flagged:
        subtitle.append(flagged)
    return (
        vlspec.concat(*panels, columns=2)
        .resolve_scale(color="shared")
        .properties(title=alt.Title(title, subtitle=subtitle))
    )


# --- beyond the article: latency distributions ----------------------------------------------------------


def run_files(
    runs: Sequence[str | Path], only: Collection[str] | None = None
) -> dict[str, list[tuple[int, Path]]]:
    """Run files by condition id, each with its repetition: runs/<id>/rep<N>.parquet (or <id>.parquet = rep 1);
    failure records left out. only: just these conditions' files (a chart draws a few of hundreds; each file
    looked at is opened to tell a failure record)."""
    out: dict[str, list[tuple[int, Path]]] = {}
    for p in map(Path, runs):
        match = REP_FILE.fullmatch(p.stem)
        cid, repeat = (p.parent.name, int(match.group(1))) if match else (p.stem, 1)
        if only is not None and cid not in only:
            continue
        if read_failure(p) is not None:
            continue  # a failure record (on_failure: record): no sample to draw
        out.setdefault(cid, []).append((repeat, p))
    return {cid: sorted(files) for cid, files in out.items()}


def chosen_conditions(summary: pd.DataFrame) -> pd.DataFrame:
    """Per distribution setup: the no-load run, the two runs around our breaking point, and the highest load."""
    memory = baseline_memory(summary)
    picked = []
    for app, vcpu, sc in DISTRIBUTION_SETUPS:
        rows = runs_of(summary, app, vcpu, sc, memory).sort_values("total_sidecar_load_pct")
        if rows.empty:
            continue
        loads = list(rows["total_sidecar_load_pct"])
        wanted = {loads[0], loads[-1]}
        step = assess_rows(rows).step
        if step is not None:
            wanted |= {step.before_load_pct, step.after_load_pct}
        for load in sorted(wanted):
            picked.append(rows[np.isclose(rows["total_sidecar_load_pct"], load)].iloc[0])
    return pd.DataFrame(picked)


def ccdf_points(response_time_s: np.ndarray, points: int = ECDF_POINTS) -> pd.DataFrame:
    """(latency ms, share of responses slower than it), at ~`points` ranks plus every rank in the top 0.5 %."""
    ms = np.sort(response_time_s) * 1000.0
    n = len(ms)
    if n == 0:
        return pd.DataFrame(columns=["latency_ms", "slower"])
    ranks = np.unique(
        np.concatenate(
            [
                np.linspace(0, n - 1, min(points, n)).astype(int),
                np.arange(max(0, n - min(int(n * 0.005), points)), n),
            ]
        )
    )
    return pd.DataFrame(
        {"latency_ms": np.maximum(ms[ranks], 0.05), "slower": (n - ranks - 1 + 0.5) / n}
    )


def period_labels(period: float, top: float, min_log_gap: float = 0.2) -> pd.DataFrame:
    """Period multiples up to the data's top, labelled only where a label has room on a log axis:
    at least min_log_gap decades from the previous label (16 px on a 330 px axis of 4 decades is ~0.2)."""
    lines = pd.DataFrame({"latency_ms": [period * k for k in range(1, int(top // period) + 2)]})
    labels, last = [], -math.inf
    for value in lines["latency_ms"]:
        roomy = math.log10(value) - last >= min_log_gap
        labels.append(f"{value:g} ms" if roomy else "")
        last = math.log10(value) if roomy else last
    return lines.assign(label=labels)


def distribution_chart(
    summary: pd.DataFrame, ref: pd.DataFrame, runs: Sequence[str | Path]
) -> vlspec.ChartLike:
    title = "Latency distribution: share of responses slower than x (log-log)"
    chosen = chosen_conditions(summary)
    files = run_files(runs, set(chosen["condition_id"]) if len(chosen) else set())
    frames, marks = [], []
    for row in chosen.itertuples() if len(chosen) else []:
        paths = [p for _, p in files.get(row.condition_id, [])]
        if not paths:
            continue
        ok = []
        for (
            path
        ) in paths:  # every repetition pooled: the distribution of all the condition's responses
            cols = read_columns(path, ["response_time_s", "status_code"])
            ok.append(
                cols["response_time_s"][(cols["status_code"] >= 200) & (cols["status_code"] <= 299)]
            )
        points = ccdf_points(np.concatenate(ok))
        if points.empty:  # no successful response in any repetition: no distribution to draw
            continue
        name = setup_name(row.app, row.vcpu, row.sidecar_count)
        mark = flag_marks(getattr(row, "flags", ""))
        label = f"{row.total_sidecar_load_pct:g}%" + (f" ({mark})" if mark else "")
        frames.append(points.assign(setup=name, load=label, load_pct=row.total_sidecar_load_pct))
        for metric, share in (("p50_ms", 0.5), ("p99_ms", 0.01)):
            value = refmod.value(
                ref,
                "load_sweep",
                metric,
                app=row.app,
                vcpu=row.vcpu,
                sidecar_count=row.sidecar_count,
                load=row.total_sidecar_load_pct,
            )
            if not math.isnan(value):
                marks.append(
                    {
                        "setup": name,
                        "load": label,
                        "load_pct": row.total_sidecar_load_pct,
                        "latency_ms": value,
                        "slower": share,
                        "source": "article",
                        "what": metric[:3].upper(),
                    }
                )
    if not frames:
        return placeholder(
            title,
            "No successful per-request data for Go / Next 0.25 vCPU + 3 sidecars in the current matrix.",
        )
    data = pd.concat(frames, ignore_index=True)
    period = (
        float(summary["period_ms"].median())
        if "period_ms" in summary and summary["period_ms"].notna().any()
        else 100.0
    )
    top, bottom = float(data["latency_ms"].max()), float(data["latency_ms"].min())
    # A fixed domain just around the data: label spacing below is computed for exactly this domain.
    low, high = max(bottom, 0.05) / 1.5, max(top, period) * 1.5
    decades = math.log10(high / low)
    periods = period_labels(period, top, min_log_gap=LABEL_PX * decades / PANEL_WIDTH)
    x = alt.X(
        "latency_ms:Q",
        title="Response time (ms, log scale)",
        scale=alt.Scale(type="log", domain=[low, high], nice=False),
    )
    y = alt.Y(
        "slower:Q",
        title="Share of responses slower (log scale)",
        scale=alt.Scale(type="log"),
        axis=alt.Axis(format="%"),
    )
    panels = []
    for name in dict.fromkeys(data["setup"]):
        part = data[data["setup"] == name]
        order = list(dict.fromkeys(part.sort_values("load_pct")["load"]))
        color = alt.Color(
            "load:N",
            title="Total sidecar load",
            sort=order,
            scale=alt.Scale(domain=order, range=SETUP_COLORS[: len(order)] + ["#9d755d"] * 4),
        )
        layers = [
            alt.Chart(periods).mark_rule(strokeDash=[2, 3], color="gray").encode(x=x),
            alt.Chart(periods[periods["label"] != ""])
            .mark_text(angle=270, align="right", baseline="bottom", dx=-4, dy=-2, y=0, color="gray")
            .encode(x=x, text=alt.Text("label:N")),
            alt.Chart(part)
            .mark_line(interpolate="step-after")
            .encode(
                x=x,
                y=y,
                color=color,
                tooltip=[
                    alt.Tooltip("load:N"),
                    alt.Tooltip("latency_ms:Q", format=".1f"),
                    alt.Tooltip("slower:Q", format=".3%"),
                ],
            ),
        ]
        art = pd.DataFrame([m for m in marks if m["setup"] == name])
        if len(art):
            layers.append(
                alt.Chart(art)
                .mark_point(size=80, strokeWidth=1.5, filled=False, shape="diamond")
                .encode(
                    x=x,
                    y=y,
                    color=color,
                    tooltip=[
                        alt.Tooltip("load:N"),
                        alt.Tooltip("what:N"),
                        alt.Tooltip("latency_ms:Q", format=".1f"),
                    ],
                )
            )
        panels.append(vlspec.layer(*layers).properties(title=name, width=PANEL_WIDTH, height=260))
    subtitle = [
        f"Dashed: multiples of the CFS period ({period:g} ms). Hollow diamonds: the article's P50 (at 50 %) "
        "and P99 (at 1 %) for the same load. All repetitions pooled."
    ]
    flagged = flagged_subtitle([chosen], lead="Marks after a load: flags")
    if flagged:
        subtitle.append(flagged)
    return (
        vlspec.hconcat(*panels)
        .resolve_scale(color="independent")
        .properties(title=alt.Title(title, subtitle=subtitle))
    )


# --- beyond the article: per-second series of chosen runs ----------------------------------------------------


def timeseries_data(summary: pd.DataFrame, runs: Sequence[str | Path]) -> pd.DataFrame:
    """Per second, for the four figure setups at no load and at their highest load: first repetition."""
    memory = baseline_memory(summary)
    picked = []
    for app, vcpu, sc in FIGURE_SETUPS:
        rows = runs_of(summary, app, vcpu, sc, memory).sort_values("total_sidecar_load_pct")
        if rows.empty:
            continue
        picked += [
            (app, vcpu, sc, row)
            for _, row in rows.iloc[[0, -1]].drop_duplicates("condition_id").iterrows()
        ]
    files = run_files(runs, {row["condition_id"] for *_, row in picked})
    frames = []
    for app, vcpu, sc, row in picked:
        reps = files.get(row["condition_id"], [])
        if not reps:
            continue
        series = per_second(reps[0][1])
        mark = flag_marks(row.get("flags", ""))
        label = f"{row['total_sidecar_load_pct']:g}% load" + (f" ({mark})" if mark else "")
        frames.append(
            series.assign(
                setup=setup_name(app, vcpu, sc),
                load=label,
                flags=row.get("flags", ""),
                load_pct=row["total_sidecar_load_pct"],
                repeat=reps[0][0],
            )
        )
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def timeseries_chart(summary: pd.DataFrame, runs: Sequence[str | Path]) -> vlspec.ChartLike:
    data = timeseries_data(summary, runs)
    title = "Per second: responses/s and P99, first repetition, at no load and the highest load"
    if data.empty:
        return placeholder(title, "No run files of the four setups in the current matrix.")
    x = alt.X("second:Q", title="Second of the load window (by completion time)")
    rows = []
    for name in dict.fromkeys(data["setup"]):
        part = data[data["setup"] == name]
        order = list(dict.fromkeys(part.sort_values("load_pct")["load"]))
        color = alt.Color(
            "load:N",
            title="Condition",
            sort=order,
            legend=alt.Legend(orient="right"),
            scale=alt.Scale(domain=order, range=["#4c78a8", "#e45756"]),
        )
        base = alt.Chart(part).encode(
            x=x,
            color=color,
            tooltip=[
                alt.Tooltip("load:N"),
                alt.Tooltip("second:Q"),
                alt.Tooltip("rps:Q", format=".0f"),
                alt.Tooltip("p99_ms:Q", format=".1f"),
            ],
        )
        rps = base.mark_line(point=alt.OverlayMarkDef(size=12)).encode(
            y=alt.Y("rps:Q", title="Responses/s", scale=alt.Scale(zero=True))
        )
        p99 = base.mark_line(point=alt.OverlayMarkDef(size=12)).encode(
            y=alt.Y("p99_ms:Q", title="P99 of the second (ms, log)", scale=alt.Scale(type="log"))
        )
        rows.append(
            vlspec.hconcat(
                rps.properties(title=f"{name}: responses/s", width=WIDTH, height=150),
                p99.properties(title=f"{name}: P99", width=WIDTH, height=150),
            ).resolve_scale(color="independent")
        )
    subtitle = ["A drifting line means the whole-window value is not a steady state."]
    flagged = flagged_subtitle([data.drop_duplicates("load")], lead="Marks after a load: flags")
    if flagged:
        subtitle.append(flagged)
    return vlspec.vconcat(*rows).properties(title=alt.Title(title, subtitle=subtitle))


# --- output -------------------------------------------------------------------------------------------------

CHART_NAMES = (
    "latency_rps_vs_load",
    "rps_retained",
    "rps_by_memory",
    "tail_share_vs_load",
    "latency_distribution",
    "per_second",
)


def chart_makers(
    summary: pd.DataFrame, ref: pd.DataFrame, runs: Sequence[str | Path]
) -> dict[str, Callable[[], vlspec.ChartLike]]:
    """Each chart of CHART_NAMES as a function that makes it: write_charts hands each to be drawn before it makes
    the next (drawing goes on beside the making)."""
    summary = measured_only(
        summary
    )  # a condition whose repetitions all failed has no point to draw
    # The article's charts hold its settings only; the knobs against throttling have their own table.
    summary = article_settings(summary)
    return {
        "latency_rps_vs_load": lambda: latency_rps_chart(summary, ref),
        "rps_retained": lambda: retained_chart(summary, ref),
        "rps_by_memory": lambda: memory_chart(summary, ref),
        "tail_share_vs_load": lambda: tail_share_chart(summary),
        "latency_distribution": lambda: distribution_chart(summary, ref, runs),
        "per_second": lambda: timeseries_chart(summary, runs),
    }


def build_charts(
    summary: pd.DataFrame, ref: pd.DataFrame, runs: Sequence[str | Path]
) -> dict[str, vlspec.ChartLike]:
    return {name: make() for name, make in chart_makers(summary, ref, runs).items()}


def write_charts(
    summary: pd.DataFrame,
    ref: pd.DataFrame,
    runs: Sequence[str | Path],
    out_dir: str | Path,
    formats: Iterable[str] = ("html", "png", "svg"),
) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, make in chart_makers(summary, ref, runs).items():
        written += save_chart(make(), out_dir, name, tuple(formats))
    return written

"""The article's charts (and a few it lacked), from our summary, with the article's values as hollow marks.

Every chart is written as <name>.html (Vega-Lite with its JavaScript inlined, so
it opens offline), <name>.png (scale 2) and <name>.svg. A chart whose data the
current matrix lacks is still written, saying what is missing.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Sequence

import altair as alt
import numpy as np
import pandas as pd

from . import reference as refmod
from .runfile import read_columns
from .breaking import breaking_point
from .tables import APP_NAMES, baseline_memory, runs_of

# The article's four setups: app, vCPU, sidecar count.
FIGURE_SETUPS = (("go", 0.25, 3), ("next", 0.25, 3), ("next", 0.5, 3), ("next", 0.25, 1))
RETAINED_SETUPS = (("go", 0.25, 3), ("next", 0.25, 3), ("next", 0.5, 3))
DISTRIBUTION_SETUPS = (("go", 0.25, 3), ("next", 0.25, 3))
SERIES_COLORS = {"P50": "#4c78a8", "P99": "#e45756", "RPS": "#54a24b"}
SOURCE_SHAPES = {"ours": "circle", "article": "diamond"}
LOAD_TITLE = "Total sidecar load (% of one core)"
# Domain ends at the highest load (no "nice" 110 whose label collides with 100).
LOAD_SCALE = alt.Scale(nice=False, zero=True)
WIDTH, HEIGHT = 300, 220
ECDF_POINTS = 1500


def setup_name(app: str, vcpu: float, sidecar_count: int) -> str:
    noun = "sidecar" if sidecar_count == 1 else "sidecars"
    return f"{APP_NAMES.get(app, app).split()[0]} {vcpu:g} vCPU + {sidecar_count} {noun}"


def placeholder(title: str, message: str) -> alt.Chart:
    return (alt.Chart(pd.DataFrame({"text": [message]})).mark_text(fontSize=14)
            .encode(text="text:N").properties(title=title, width=520, height=80))


def source_shape() -> alt.Shape:
    return alt.Shape("source:N", title="Source",
                     scale=alt.Scale(domain=list(SOURCE_SHAPES), range=list(SOURCE_SHAPES.values())))


# --- figure 1: latency (left, log) + RPS (right) against total load ---------------------------------

def figure_data(summary: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    memory = baseline_memory(summary)
    frames = []
    for app, vcpu, sc in FIGURE_SETUPS:
        name = setup_name(app, vcpu, sc)
        rows = runs_of(summary, app, vcpu, sc, memory)
        if len(rows):
            grouped = rows.groupby("total_sidecar_load_pct")[["p50_ms", "p99_ms", "rps"]].mean().reset_index()
            for column, series in (("p50_ms", "P50"), ("p99_ms", "P99"), ("rps", "RPS")):
                frames.append(pd.DataFrame({"setup": name, "load": grouped["total_sidecar_load_pct"],
                                            "series": series, "value": grouped[column], "source": "ours"}))
        for metric, series in (("p50_ms", "P50"), ("p99_ms", "P99"), ("rps", "RPS")):
            article = refmod.sweep(ref, app, vcpu, sc, metric)
            if len(article):
                frames.append(pd.DataFrame({"setup": name, "load": article.index, "series": series,
                                            "value": article.to_numpy(), "source": "article"}))
    columns = ["setup", "load", "series", "value", "source"]
    data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
    return data.dropna(subset=["value"])


def latency_rps_chart(summary: pd.DataFrame, ref: pd.DataFrame) -> alt.TopLevelMixin:
    data = figure_data(summary, ref)
    title = "Latency (left, log) and RPS (right) against total sidecar load"
    if data.empty:
        return placeholder(title, "No run of the four setups in the current matrix.")
    color = alt.Color("series:N", title="Series",
                      scale=alt.Scale(domain=list(SERIES_COLORS), range=list(SERIES_COLORS.values())))
    x = alt.X("load:Q", title=LOAD_TITLE, scale=LOAD_SCALE)
    tooltip = ["setup:N", "series:N", "source:N", alt.Tooltip("load:Q", title="load %"),
               alt.Tooltip("value:Q", format=".1f")]
    panels = []
    for app, vcpu, sc in FIGURE_SETUPS:
        name = setup_name(app, vcpu, sc)
        part = data[data["setup"] == name]
        if part.empty:
            panels.append(placeholder(name, "not in the current matrix").properties(width=WIDTH, height=HEIGHT))
            continue
        base = alt.Chart(part).encode(x=x, color=color, tooltip=tooltip)
        lat = base.transform_filter(alt.FieldOneOfPredicate(field="series", oneOf=["P50", "P99"]))
        rps = base.transform_filter(alt.datum.series == "RPS")
        y_lat = alt.Y("value:Q", title="Latency (ms, log scale)", scale=alt.Scale(type="log"),
                      axis=alt.Axis(orient="left"))
        y_rps = alt.Y("value:Q", title="RPS (responses/s)", scale=alt.Scale(zero=True),
                      axis=alt.Axis(orient="right", titleColor=SERIES_COLORS["RPS"]))
        latency = alt.layer(
            lat.transform_filter(alt.datum.source == "ours").mark_line().encode(y=y_lat, detail="series:N"),
            lat.transform_filter(alt.datum.source == "ours").mark_point(filled=True, size=30).encode(y=y_lat, shape=source_shape()),
            lat.transform_filter(alt.datum.source == "article").mark_point(filled=False, size=70, strokeWidth=1.5)
            .encode(y=y_lat, shape=source_shape()),
        )
        throughput = alt.layer(
            rps.transform_filter(alt.datum.source == "ours").mark_line(strokeDash=[5, 3]).encode(y=y_rps),
            rps.transform_filter(alt.datum.source == "ours").mark_point(filled=True, size=30).encode(y=y_rps, shape=source_shape()),
            rps.transform_filter(alt.datum.source == "article").mark_point(filled=False, size=70, strokeWidth=1.5)
            .encode(y=y_rps, shape=source_shape()),
        )
        shown = name if (part["source"] == "ours").any() else f"{name} (article only: no runs here)"
        panels.append(alt.layer(latency, throughput).resolve_scale(y="independent")
                      .properties(title=shown, width=WIDTH, height=HEIGHT))
    return (alt.concat(*panels, columns=2).resolve_scale(color="shared", shape="shared")
            .properties(title=alt.Title(title, subtitle="Filled points and lines: ours; hollow diamonds: the article. "
                                                        "RPS line dashed, on the right axis.")))


# --- figure 2: RPS retained vs the no-load baseline --------------------------------------------------

def retained_data(summary: pd.DataFrame, ref: pd.DataFrame) -> pd.DataFrame:
    memory = baseline_memory(summary)
    frames = []
    for app, vcpu, sc in RETAINED_SETUPS:
        name = setup_name(app, vcpu, sc)
        rows = runs_of(summary, app, vcpu, sc, memory)
        ours = rows.groupby("total_sidecar_load_pct")["rps"].mean()
        if 0.0 in ours.index and ours.loc[0.0] > 0:
            frames.append(pd.DataFrame({"setup": name, "load": ours.index, "retained": ours.to_numpy() / ours.loc[0.0],
                                        "rps": ours.to_numpy(), "source": "ours"}))
        article = refmod.sweep(ref, app, vcpu, sc, "rps")
        if len(article) and 0.0 in article.index:
            frames.append(pd.DataFrame({"setup": name, "load": article.index,
                                        "retained": article.to_numpy() / article.loc[0.0],
                                        "rps": article.to_numpy(), "source": "article"}))
    data = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["setup", "load", "retained", "rps", "source"])
    return data


def retained_chart(summary: pd.DataFrame, ref: pd.DataFrame) -> alt.TopLevelMixin:
    data = retained_data(summary, ref)
    title = "RPS retained relative to the no-load baseline (3 sidecars)"
    if data.empty or not (data["source"] == "ours").any():
        note = "No run pair (no load and loaded) of Go 0.25 / Next 0.25 / Next 0.5 + 3 sidecars in this matrix."
        if data.empty:
            return placeholder(title, note)
    names = [setup_name(*s) for s in RETAINED_SETUPS]
    color = alt.Color("setup:N", title="Setup", scale=alt.Scale(domain=names, range=["#4c78a8", "#f58518", "#54a24b"]))
    base = alt.Chart(data).encode(
        x=alt.X("load:Q", title=LOAD_TITLE, scale=LOAD_SCALE),
        y=alt.Y("retained:Q", title="RPS retained (share of the 0 % load RPS)", axis=alt.Axis(format="%"),
                scale=alt.Scale(zero=True)),
        color=color,
        tooltip=["setup:N", "source:N", "load:Q", alt.Tooltip("rps:Q", format=".0f"),
                 alt.Tooltip("retained:Q", format=".0%")],
    )
    ours = base.transform_filter(alt.datum.source == "ours")
    return alt.layer(
        ours.mark_line(),
        ours.mark_point(filled=True, size=35).encode(shape=source_shape()),
        base.transform_filter(alt.datum.source == "article").mark_point(filled=False, size=80, strokeWidth=1.5)
        .encode(shape=source_shape()),
    ).properties(width=520, height=300, title=alt.Title(title, subtitle="Hollow diamonds: the article's values."))


# --- figure 3: RPS by memory limit --------------------------------------------------------------------

def memory_data(summary: pd.DataFrame, ref: pd.DataFrame, sidecar_count: int = 3,
                sidecar_load_pct: float = 15.0) -> pd.DataFrame:
    rows = runs_of(summary, sidecar_count=sidecar_count)
    rows = rows[np.isclose(rows["sidecar_load_pct"], sidecar_load_pct)]
    frames = []
    if len(rows):
        grouped = rows.groupby(["app", "vcpu", "memory_mb"])["rps"].mean().reset_index()
        frames.append(grouped.assign(source="ours"))
    art = refmod.select(ref, "memory", metric="rps")
    if len(art):
        frames.append(art[["app", "vcpu", "memory_mb", "value"]].rename(columns={"value": "rps"}).assign(source="article"))
    if not frames:
        return pd.DataFrame(columns=["app", "vcpu", "memory_mb", "rps", "source", "App", "panel"])
    data = pd.concat(frames, ignore_index=True)
    data["App"] = data["app"].map(lambda a: APP_NAMES.get(a, a))
    data["panel"] = data["vcpu"].map(lambda v: f"{v:g} vCPU")
    return data


def memory_chart(summary: pd.DataFrame, ref: pd.DataFrame) -> alt.TopLevelMixin:
    data = memory_data(summary, ref)
    title = "RPS by memory limit (3 sidecars at 15 % each)"
    if data.empty:
        return placeholder(title, "No memory runs (3 sidecars x 15 %) in the current matrix.")
    panels = []
    for vcpu in sorted(data["vcpu"].unique()):
        part = data[np.isclose(data["vcpu"], vcpu)]
        if part["memory_mb"].nunique() < 2:
            continue  # a grid run at one memory limit is no memory comparison
        base = alt.Chart(part).encode(
            x=alt.X("memory_mb:O", title="Memory limit (MB)", axis=alt.Axis(labelAngle=0)),
            y=alt.Y("rps:Q", title="RPS (responses/s)", scale=alt.Scale(zero=True)),
            color=alt.Color("App:N", title="App", scale=alt.Scale(domain=list(APP_NAMES.values()),
                                                                    range=["#4c78a8", "#f58518"])),
            tooltip=["App:N", "source:N", "memory_mb:O", alt.Tooltip("rps:Q", format=".0f")],
        )
        ours = base.transform_filter(alt.datum.source == "ours")
        panels.append(alt.layer(
            ours.mark_line(), ours.mark_point(filled=True, size=40).encode(shape=source_shape()),
            base.transform_filter(alt.datum.source == "article").mark_point(filled=False, size=90, strokeWidth=1.5)
            .encode(shape=source_shape()),
        ).properties(title=f"{vcpu:g} vCPU", width=220, height=240))
    if not panels:
        return placeholder(title, "No vCPU with runs at two or more memory limits in the current matrix.")
    return alt.hconcat(*panels).resolve_scale(color="shared", shape="shared").properties(
        title=alt.Title(title, subtitle="The article published 1 vCPU only (hollow diamonds)."))


# --- beyond the article: throttling ---------------------------------------------------------------------

def throttling_chart(summary: pd.DataFrame, sidecar_count: int = 3) -> alt.TopLevelMixin:
    memory = baseline_memory(summary)
    rows = runs_of(summary, sidecar_count=sidecar_count, memory_mb=memory)
    title = f"Share of CFS periods throttled against total sidecar load ({sidecar_count} sidecars)"
    rows = rows.dropna(subset=["throttled_share"]) if "throttled_share" in rows else rows.iloc[0:0]
    if rows.empty:
        return placeholder(title, "No run with cgroup throttling counters in the current matrix.")
    data = rows[["app", "vcpu", "total_sidecar_load_pct", "throttled_share", "throttled_s_per_s", "condition_id"]].copy()
    data["App"] = data["app"].map(lambda a: APP_NAMES.get(a, a))
    data["vCPU"] = data["vcpu"].map(lambda v: f"{v:g}")
    return alt.Chart(data).mark_line(point=True).encode(
        x=alt.X("total_sidecar_load_pct:Q", title=LOAD_TITLE, scale=LOAD_SCALE),
        y=alt.Y("throttled_share:Q", title="Throttled periods (nr_throttled / nr_periods)", axis=alt.Axis(format="%"),
                scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("vCPU:N", title="vCPU", sort=sorted(data["vCPU"].unique(), key=float)),
        tooltip=["condition_id:N", alt.Tooltip("throttled_share:Q", format=".1%"),
                 alt.Tooltip("throttled_s_per_s:Q", title="throttled s per s", format=".3f")],
    ).properties(width=300, height=240).facet(column=alt.Column("App:N", title=None, header=alt.Header(labelFontSize=13, labelFontWeight="bold"))).properties(
        title=alt.Title(title, subtitle="cgroup cpu.stat deltas over the cgroup snapshot window (cgroup_wall_s)"))


# --- beyond the article: latency distributions ----------------------------------------------------------

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
        found = breaking_point(rows["total_sidecar_load_pct"], rows["p99_ms"])
        if found:
            wanted |= {found.before_load_pct, found.after_load_pct}
        for load in sorted(wanted):
            picked.append(rows[np.isclose(rows["total_sidecar_load_pct"], load)].iloc[0])
    return pd.DataFrame(picked)


def ccdf_points(response_time_s: np.ndarray, points: int = ECDF_POINTS) -> pd.DataFrame:
    """(latency ms, share of responses slower than it), at ~`points` ranks plus every rank in the top 0.5 %."""
    ms = np.sort(response_time_s) * 1000.0
    n = len(ms)
    if n == 0:
        return pd.DataFrame(columns=["latency_ms", "slower"])
    ranks = np.unique(np.concatenate([np.linspace(0, n - 1, min(points, n)).astype(int),
                                      np.arange(max(0, n - min(int(n * 0.005), points)), n)]))
    return pd.DataFrame({"latency_ms": np.maximum(ms[ranks], 0.05), "slower": (n - ranks - 1 + 0.5) / n})


def distribution_chart(summary: pd.DataFrame, ref: pd.DataFrame, runs: Sequence[str | Path]) -> alt.TopLevelMixin:
    title = "Latency distribution: share of responses slower than x (log-log)"
    chosen = chosen_conditions(summary)
    by_name = {Path(p).name: Path(p) for p in runs}
    frames, marks = [], []
    for row in chosen.itertuples() if len(chosen) else []:
        path = by_name.get(row.run_file)
        if path is None:
            continue
        cols = read_columns(path, ["response_time_s", "status_code"])
        ok = cols["response_time_s"][(cols["status_code"] >= 200) & (cols["status_code"] <= 299)]
        points = ccdf_points(ok)
        name = setup_name(row.app, row.vcpu, row.sidecar_count)
        label = f"{row.total_sidecar_load_pct:g}%"
        frames.append(points.assign(setup=name, load=label, load_pct=row.total_sidecar_load_pct))
        for metric, share in (("p50_ms", 0.5), ("p99_ms", 0.01)):
            value = refmod.value(ref, "load_sweep", metric, app=row.app, vcpu=row.vcpu,
                                 sidecar_count=row.sidecar_count, load=row.total_sidecar_load_pct)
            if not math.isnan(value):
                marks.append({"setup": name, "load": label, "load_pct": row.total_sidecar_load_pct,
                              "latency_ms": value, "slower": share, "source": "article",
                              "what": metric[:3].upper()})
    if not frames:
        return placeholder(title, "No per-request data for Go / Next 0.25 vCPU + 3 sidecars in the current matrix.")
    data = pd.concat(frames, ignore_index=True)
    period = float(summary["period_ms"].median()) if "period_ms" in summary and summary["period_ms"].notna().any() else 100.0
    top = float(data["latency_ms"].max())
    periods = pd.DataFrame({"latency_ms": [period * k for k in range(1, int(top // period) + 2)]})
    periods["label"] = periods["latency_ms"].map(lambda v: f"{v:g} ms")
    order = [f"{x:g}%" for x in sorted(data["load_pct"].unique())]
    color = alt.Color("load:N", title="Total sidecar load", sort=order)
    x = alt.X("latency_ms:Q", title="Response time (ms, log scale)", scale=alt.Scale(type="log"))
    y = alt.Y("slower:Q", title="Share of responses slower (log scale)", scale=alt.Scale(type="log"),
              axis=alt.Axis(format="%"))
    panels = []
    for name in dict.fromkeys(data["setup"]):
        part = data[data["setup"] == name]
        layers = [
            alt.Chart(periods).mark_rule(strokeDash=[2, 3], color="gray").encode(x=x),
            alt.Chart(periods).mark_text(angle=270, align="right", baseline="bottom", dx=-4, dy=-2, y=0,
                                         color="gray").encode(x=x, text="label:N"),
            alt.Chart(part).mark_line(interpolate="step-after").encode(x=x, y=y, color=color,
                                                                       tooltip=["load:N", alt.Tooltip("latency_ms:Q", format=".1f"),
                                                                                alt.Tooltip("slower:Q", format=".3%")]),
        ]
        art = pd.DataFrame([m for m in marks if m["setup"] == name])
        if len(art):
            layers.append(alt.Chart(art).mark_point(filled=False, size=80, strokeWidth=1.5).encode(
                x=x, y=y, color=color, shape=source_shape(),
                tooltip=["load:N", "what:N", alt.Tooltip("latency_ms:Q", format=".1f")]))
        panels.append(alt.layer(*layers).properties(title=name, width=330, height=260))
    return alt.hconcat(*panels).resolve_scale(color="independent").properties(
        title=alt.Title(title, subtitle=f"Dashed: multiples of the CFS period ({period:g} ms). Hollow diamonds: the "
                                        "article's P50 (at 50 %) and P99 (at 1 %) for the same load."))


# --- output -------------------------------------------------------------------------------------------------

CHART_NAMES = ("latency_rps_vs_load", "rps_retained", "rps_by_memory", "throttling_vs_load", "latency_distribution")


def build_charts(summary: pd.DataFrame, ref: pd.DataFrame, runs: Sequence[str | Path]) -> dict[str, alt.TopLevelMixin]:
    return {
        "latency_rps_vs_load": latency_rps_chart(summary, ref),
        "rps_retained": retained_chart(summary, ref),
        "rps_by_memory": memory_chart(summary, ref),
        "throttling_vs_load": throttling_chart(summary),
        "latency_distribution": distribution_chart(summary, ref, runs),
    }


def save_chart(chart: alt.TopLevelMixin, out_dir: Path, name: str, formats: Iterable[str] = ("html", "png", "svg")) -> list[Path]:
    chart = chart.configure_axis(labelFontSize=11, titleFontSize=12).configure_title(fontSize=15, subtitleFontSize=11) \
        .configure_legend(labelFontSize=11, titleFontSize=12)
    written = []
    for fmt in formats:
        path = out_dir / f"{name}.{fmt}"
        if fmt == "html":
            chart.save(path, inline=True)  # JavaScript inlined: opens without network
        elif fmt == "png":
            chart.save(path, scale_factor=2)
        else:
            chart.save(path)
        written.append(path)
    return written


def write_charts(summary: pd.DataFrame, ref: pd.DataFrame, runs: Sequence[str | Path], out_dir: str | Path,
                 formats: Iterable[str] = ("html", "png", "svg")) -> list[Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, chart in build_charts(summary, ref, runs).items():
        written += save_chart(chart, out_dir, name, tuple(formats))
    return written

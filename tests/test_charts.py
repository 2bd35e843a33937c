"""Charts from synthetic run files and hand-made summaries: every file written, offline HTML, article marks,
intervals and flags present."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import aggregate_runs
import plot_charts
from sidecar_bench import record, reference, repstats
from sidecar_bench.charts import (
    CHART_NAMES,
    FLAGGED,
    ccdf_points,
    distribution_chart,
    figure_data,
    latency_rps_chart,
    period_labels,
    run_files,
    tail_data,
    tail_share_chart,
    timeseries_data,
    write_charts,
)
from sidecar_bench.conditions import Condition, LoadSettings
from sidecar_bench.stats import summarise_runs
from sidecar_bench.synthetic import two_mode_samples, write_run, write_small_set

REFERENCE = Path(__file__).resolve().parents[1] / "workflow" / "reference" / "article-results.csv"


@pytest.fixture(scope="module")
def charts(tmp_path_factory):
    root = tmp_path_factory.mktemp("charts")
    runs = write_small_set(root / "runs")
    aggregate_runs.main(
        runs=runs, summary_parquet=root / "summary.parquet", summary_csv=root / "summary.csv"
    )
    plot_charts.main(
        summary=root / "summary.parquet", reference=REFERENCE, runs=runs, out_dir=root / "charts"
    )
    return root / "charts"


def test_every_chart_is_written_as_html_png_and_svg(charts):
    names = {p.name for p in charts.iterdir()}
    assert names == {f"{n}.{ext}" for n in CHART_NAMES for ext in ("html", "png", "svg")}
    for name in CHART_NAMES:
        assert (charts / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert "<svg" in (charts / f"{name}.svg").read_text()[:500]


def test_html_opens_without_network(charts):
    for name in CHART_NAMES:
        html = (charts / f"{name}.html").read_text()
        assert "<script src=" not in html.replace('<script src="data:', ""), name
        assert "vegaEmbed" in html or "vega-embed" in html


def test_figure_holds_ours_and_the_articles_values(tmp_path):
    ref = reference.load_reference(REFERENCE)
    summary = summarise_runs(write_small_set(tmp_path))
    data = figure_data(summary, ref)
    go = data[data["setup"] == "Go 0.25 vCPU + 3 sidecars"]
    ours = go[(go["source"] == "ours") & (go["series"] == "P99")].set_index("load")["value"]
    assert ours.loc[18] == pytest.approx(190)
    article = go[(go["source"] == "article") & (go["series"] == "RPS")].set_index("load")["value"]
    assert article.loc[18] == pytest.approx(235)
    # Next 0.5 + 3 has no runs here, but its published P99s are drawn.
    assert set(data[data["setup"] == "Next 0.5 vCPU + 3 sidecars"]["source"]) == {"article"}


def test_ccdf_shows_the_period_step():
    points = ccdf_points(two_mode_samples(2.0, 100.0, n=1000, slow=20))
    slow = points[points["latency_ms"] >= 100]
    assert slow["slower"].max() == pytest.approx(0.0195, abs=1e-3)  # ~2 % wait a full period
    assert len(points) <= 1000


def test_charts_survive_a_matrix_without_their_setups(tmp_path):
    ref = reference.load_reference(REFERENCE)
    runs = write_small_set(tmp_path / "runs")[-1:]  # one Go 1 vCPU memory run only
    written = write_charts(summarise_runs(runs), ref, runs, tmp_path / "charts", formats=("html",))
    assert [p.name for p in written] == [f"{n}.html" for n in CHART_NAMES]
    written = write_charts(summarise_runs([]), ref, [], tmp_path / "empty", formats=("svg",))
    assert len(written) == len(CHART_NAMES)


def test_the_distribution_leaves_out_a_condition_without_one_successful_response(tmp_path):
    # Go 0.25 vCPU + 3 sidecars at two loads; every response of the second is a 503 (a real run file: it has rows).
    ref = reference.load_reference(REFERENCE)
    answered, refused = Condition("go", 0.25, 2048, 3, 5), Condition("go", 0.25, 2048, 3, 15)
    samples = two_mode_samples(2.0, 100.0, n=400, slow=8)
    ok = write_run(tmp_path / answered.id / "rep1.parquet", answered, samples)
    failed = write_run(
        tmp_path / refused.id / "rep1.parquet", refused, samples, status_code=np.full(400, 503)
    )
    spec = distribution_chart(summarise_runs([ok, failed]), ref, [ok, failed]).to_dict()
    drawn = {
        str(v) for l in layers_of(spec) for v in l["encoding"].get("color", {}).get("sort", [])
    }
    # 3 x 5 % (15 %) drawn, 3 x 15 % (45 %) left out.
    assert {label.split()[0] for label in drawn} == {"15%"}
    # Only the condition without a successful response: a placeholder, not a failed chart stage.
    alone = distribution_chart(summarise_runs([failed]), ref, [failed]).to_dict()
    assert "No successful per-request data" in str(alone)


# --- intervals, flags and the fixes a reader needs, on a hand-made per-condition summary ---


def hand_summary():
    rows = []
    for load, p99, rps, flags in (
        (0, 98.0, 1000.0, ""),
        (15, 104.0, 620.0, "host_bound"),
        (18, 187.0, 600.0, ""),
        (45, 193.0, 540.0, "failed_requests,few_samples_p99_9"),
    ):
        rows.append(
            {
                "condition_id": f"go_cpu0.25_mem2048_sc3_load{load // 3:02d}",
                "app": "go",
                "vcpu": 0.25,
                "memory_mb": 2048,
                "sidecar_count": 3,
                "sidecar_load_pct": load / 3,
                "total_sidecar_load_pct": float(load),
                "p50_ms": 1.0,
                "p50_ms_lo": 0.9,
                "p50_ms_hi": 1.1,
                "p99_ms": p99,
                "p99_ms_lo": p99 - 3,
                "p99_ms_hi": p99 + 4,
                "rps": rps,
                "rps_lo": rps - 10,
                "rps_hi": rps + 12,
                "slow_1p_share": 0.01,
                "slow_1p_share_lo": 0.008,
                "slow_1p_share_hi": 0.012,
                "slow_2p_share": 0.0,
                "slow_3p_share": 0.0,
                "period_ms": 100.0,
                "successful": 9000,
                "flags": flags,
            }
        )
    return pd.DataFrame(rows)


def layers_of(spec):
    """Every single-view spec inside a (nested) compound spec."""
    if "layer" in spec:
        for layer in spec["layer"]:
            yield from layers_of(layer)
    for key in ("hconcat", "vconcat", "concat"):
        for part in spec.get(key, []):
            yield from layers_of(part)
    if "mark" in spec:
        yield spec


def mark_type(layer):
    return layer["mark"]["type"] if isinstance(layer["mark"], dict) else layer["mark"]


def test_figure_has_interval_bars_and_a_ring_on_flagged_points():
    ref = reference.load_reference(REFERENCE)
    data = figure_data(hand_summary(), ref)
    ours = data[(data["source"] == "ours") & (data["series"] == "P99")].set_index("load")
    assert (ours.loc[15, "lo"], ours.loc[15, "hi"]) == (101.0, 108.0)
    assert ours.loc[15, "flagged"] == FLAGGED and ours.loc[0, "flagged"] == ""
    # P99.9's sample count does not flag an RPS point; failed requests do.
    rps = data[(data["source"] == "ours") & (data["series"] == "RPS")].set_index("load")
    assert rps.loc[45, "flags"] == "failed_requests"
    spec = latency_rps_chart(hand_summary(), ref).to_dict()
    layers = list(layers_of(spec))
    bars = [l for l in layers if mark_type(l) == "rule" and "y2" in l.get("encoding", {})]
    assert bars and bars[0]["encoding"]["y2"]["field"] == "hi"
    # RPS axes start at zero: a cut axis makes a 0.46 retention look like a 0.63 one.
    rps_axes = [
        l["encoding"]["y"]
        for l in layers
        if l.get("encoding", {}).get("y", {}).get("title") == "RPS (responses/s)"
    ]
    assert rps_axes and all(y["scale"]["zero"] is True for y in rps_axes)
    rings = [l for l in layers if l.get("encoding", {}).get("stroke", {}).get("field") == "flagged"]
    assert rings and rings[0]["mark"]["filled"] is False
    assert "Red rings: flagged conditions (H host-bound" in " ".join(spec["title"]["subtitle"])


def test_rps_panels_have_their_own_scales_and_the_legend_draws_hollow_diamonds():
    ref = reference.load_reference(REFERENCE)
    spec = latency_rps_chart(hand_summary(), ref).to_dict()
    go = spec["vconcat"][0]
    assert [p["title"] for p in go["hconcat"]][1:] == [
        "RPS, ours (own scale)",
        "RPS, the article (own scale)",
    ]
    assert go["resolve"]["scale"]["y"] == "independent"
    article = [l for l in layers_of(spec) if l.get("encoding", {}).get("shape", {}).get("legend")]
    assert article and article[0]["mark"]["filled"] is False
    assert article[0]["encoding"]["shape"]["legend"]["symbolFillColor"] == "transparent"


def test_tail_shares_replace_the_saturated_throttling_chart():
    assert "throttling_vs_load" not in CHART_NAMES and "tail_share_vs_load" in CHART_NAMES
    data = tail_data(hand_summary())
    one = data[data["series"] == "> 1 period"].set_index("load")
    assert (one.loc[0, "share"], one.loc[0, "lo"], one.loc[0, "hi"]) == (0.01, 0.008, 0.012)
    spec = tail_share_chart(hand_summary()).to_dict()
    assert any(mark_type(l) == "rule" and "y2" in l["encoding"] for l in layers_of(spec))


def test_period_labels_leave_room_on_a_log_axis():
    labels = period_labels(100.0, 1500.0)
    shown = [l for l in labels["label"] if l]
    assert shown[:4] == [
        "100 ms",
        "200 ms",
        "400 ms",
        "700 ms",
    ]  # 300 is 0.18 decades from 200: would overprint
    assert "500 ms" not in shown and "800 ms" not in shown
    assert len(labels) == 16  # every period multiple still has its dashed line


def test_run_files_are_grouped_by_condition_and_repetition():
    files = run_files(
        ["r/runs/go_x/rep2.parquet", "r/runs/go_x/rep1.parquet", "r/runs/next_y.parquet"]
    )
    assert [(n, p.name) for n, p in files["go_x"]] == [(1, "rep1.parquet"), (2, "rep2.parquet")]
    assert files["next_y"][0][0] == 1
    # Only the conditions a chart draws.
    only = run_files(["r/runs/go_x/rep1.parquet", "r/runs/next_y.parquet"], only={"next_y"})
    assert list(only) == ["next_y"]


def test_run_files_leave_failure_records_out_only_among_the_conditions_asked_for(tmp_path):
    condition = Condition("go", 0.25, 2048, 0, 0)
    failure = record.failure_record(
        condition.as_dict(), 1, LoadSettings().as_dict(), "boom", {"phase": "start"}, "local", "t"
    )
    failed = record.write_failure(tmp_path / "go_x" / "rep1.parquet", failure)
    measured = write_run(
        tmp_path / "go_x" / "rep2.parquet", condition, two_mode_samples(2.0, 100.0, n=50, slow=0)
    )
    assert run_files([failed, measured], only={"next_y"}) == {}
    assert run_files([failed, measured], only={"go_x"}) == {"go_x": [(2, measured)]}


def test_per_second_chart_shows_the_first_repetition_at_no_load_and_the_highest(tmp_path):
    summary = hand_summary()
    runs = []
    for cid, load in zip(summary["condition_id"], summary["total_sidecar_load_pct"]):
        condition = Condition("go", 0.25, 2048, 3, load / 3)
        for rep, slow in ((1, 100.0), (2, 300.0)):
            runs.append(
                write_run(
                    tmp_path / cid / f"rep{rep}.parquet",
                    condition,
                    np.resize(two_mode_samples(2.0, slow), 1000),
                    wall_s=10.0,
                )
            )
    data = timeseries_data(summary, runs)
    assert set(data["load"]) == {"0% load", "45% load (‡ E)"}
    assert set(data["repeat"]) == {1} and data["p99_ms"].max() == pytest.approx(100.0)
    assert data.groupby("load")["responses"].sum().to_dict() == {
        "0% load": 1000,
        "45% load (‡ E)": 1000,
    }


def test_memory_chart_compares_each_apps_rps_with_its_own_2048_mb_cell():
    from sidecar_bench.charts import memory_chart, memory_data

    ref = reference.load_reference(REFERENCE)
    rows = []
    for memory_mb, rps in ((512, 250.0), (2048, 400.0), (4096, 440.0)):
        rows.append(
            {
                "condition_id": f"next_cpu1_mem{memory_mb}_sc3_load15",
                "app": "next",
                "vcpu": 1.0,
                "memory_mb": memory_mb,
                "sidecar_count": 3,
                "sidecar_load_pct": 15.0,
                "total_sidecar_load_pct": 45.0,
                "rps": rps,
                "rps_lo": rps - 40,
                "rps_hi": rps + 40,
                "flags": "noisy" if memory_mb == 512 else "",
                "repeats": 3,
                "failed_runs": 0,
                "rps_runs": ";".join(f"{rps + d:g}" for d in (-20, 0, 20)),
            }
        )
    summary = pd.DataFrame(rows)
    data = memory_data(summary, ref)
    ours = data[data["source"] == "ours"].set_index("memory_mb")
    assert ours["rel"].round(3).to_dict() == {
        512: 0.624,
        2048: 1.0,
        4096: 1.1,
    }  # ratio of geometric means
    # The gain's interval counts the 2048 MB cell's runs too: wider than 512 MB's own spread over a fixed 400.
    gain = repstats.ratio_interval([230.0, 250.0, 270.0], [380.0, 400.0, 420.0])
    assert (ours.loc[512, "rel_lo"], ours.loc[512, "rel_hi"]) == pytest.approx((gain.lo, gain.hi))
    assert ours.loc[512, "rel_lo"] < 230 / 400 and ours.loc[512, "rel_hi"] > 270 / 400
    # The article's 1 vCPU Next.js over its own 2048 MB cell (2,308 RPS): 1,960 -> 0.85, 3,344 -> 1.45.
    article = data[(data["source"] == "article") & (data["app"] == "next")].set_index("memory_mb")
    assert article["rel"].round(2).to_dict() == {512: 0.85, 1024: 0.98, 2048: 1.0, 4096: 1.45}
    spec = memory_chart(summary, ref).to_dict()
    assert spec["title"]["text"].startswith("RPS by memory limit, relative to 2048 MB")
    assert spec["hconcat"][0]["layer"][0]["encoding"]["y"]["field"] == "rel"


def test_a_latency_interval_down_to_zero_ends_at_heys_resolution_on_the_log_axis():
    ref = reference.load_reference(REFERENCE)
    summary = hand_summary().assign(p50_ms_lo=0.0)  # a t interval of two runs clipped at 0
    data = figure_data(summary, ref)
    p50 = data[(data["source"] == "ours") & (data["series"] == "P50")]
    assert (p50["lo"] == 0.1).all()
    rps = data[(data["source"] == "ours") & (data["series"] == "RPS")]
    assert (
        rps["lo"] == summary["rps_lo"].to_numpy()
    ).all()  # RPS stays on its linear axis from zero


def test_each_format_is_written_as_chart_save_writes_it(charts, tmp_path):
    """save_chart makes a chart's spec once for all formats: every file is byte for byte chart.save's (for a chart
    altair composes; the figures' own compound charts are altair's specs, tests/test_vlspec.py)."""
    import altair as alt

    from sidecar_bench.chart_files import save_chart

    summary = pd.read_parquet(charts.parent / "summary.parquet")
    base = alt.Chart(summary).encode(x="total_sidecar_load_pct:Q", y="rps:Q", color="app:N")
    chart = alt.hconcat(
        alt.layer(base.mark_line(), base.mark_point()).properties(title="RPS"),
        base.mark_point().encode(y="p99_ms:Q").properties(title="P99"),
    ).properties(title=alt.Title("Both", subtitle=["a subtitle"]))
    written = save_chart(chart, tmp_path, "fast")
    configured = (
        chart.configure_axis(labelFontSize=11, titleFontSize=12)
        .configure_title(fontSize=15, subtitleFontSize=11)
        .configure_legend(labelFontSize=11, titleFontSize=12)
    )
    configured.save(tmp_path / "ref.html", inline=True)
    configured.save(tmp_path / "ref.png", scale_factor=2)
    configured.save(tmp_path / "ref.svg")
    assert [p.name for p in written] == ["fast.html", "fast.png", "fast.svg"]
    for fmt in ("html", "png", "svg"):
        assert (tmp_path / f"fast.{fmt}").read_bytes() == (tmp_path / f"ref.{fmt}").read_bytes(), (
            fmt
        )
    # Asked for alone, as the warm-up study asks for html and png, each is still chart.save's.
    for fmt in ("png", "svg"):
        (alone,) = save_chart(chart, tmp_path, f"alone-{fmt}", formats=(fmt,))
        assert alone.read_bytes() == (tmp_path / f"ref.{fmt}").read_bytes(), fmt


def test_a_spec_off_the_vega_lite_schema_is_refused_when_the_check_is_on(monkeypatch):
    """The workflow skips the schema check (chart_spec); the suite turns it on (conftest) and it must fire."""
    import altair as alt
    import jsonschema

    from sidecar_bench import chart_files

    bad = alt.Chart(pd.DataFrame({"a": [1, 2]})).mark_point().encode(x="a:Q")
    bad.encoding.x.type = "quantity"  # not one of Vega-Lite's types
    with pytest.raises(jsonschema.ValidationError, match="quantity"):
        chart_files.chart_spec(bad)
    monkeypatch.setenv(chart_files.CHECK_ENV, "0")
    assert chart_files.chart_spec(bad)["encoding"]["x"]["type"] == "quantity"


def test_the_schema_check_sees_each_datasets_first_rows_and_every_other_key():
    from sidecar_bench import chart_files

    rows = [{"a": i} for i in range(10)]
    spec = {
        "datasets": {"d": rows},
        "layer": [{"data": {"values": rows}, "mark": "point", "encoding": {"x": {"field": "a"}}}],
    }
    view = chart_files.schema_view(spec)
    assert view["datasets"]["d"] == rows[: chart_files.CHECKED_ROWS]
    assert view["layer"][0]["data"]["values"] == rows[: chart_files.CHECKED_ROWS]
    assert view["layer"][0]["encoding"] == spec["layer"][0]["encoding"]
    assert spec["datasets"]["d"] == rows and spec["layer"][0]["data"]["values"] == rows  # untouched


def test_the_javascript_bundle_is_made_once_and_kept_by_the_versions_that_make_it(
    monkeypatch, tmp_path
):
    """vl-convert bundles Vega-Embed afresh in every process (seconds); the charts keep it in the user's cache,
    named by vl-convert's and Vega-Lite's versions, written whole, and an empty file is made again."""
    import vl_convert

    from sidecar_bench import chart_files

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    bundle = chart_files.javascript_bundle()
    (path,) = (tmp_path / "sidecar-bench").iterdir()
    assert vl_convert.__version__ in path.name and path.read_text() == bundle
    assert "vega-embed" in bundle.lower()
    path.write_text("// kept")
    assert chart_files.javascript_bundle() == "// kept"  # read, not made again
    path.write_text("")
    assert chart_files.javascript_bundle() == bundle and path.read_text() == bundle
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left


def retention_summary(loaded_runs):
    """Go 0.25 vCPU + 3 sidecars at 0 % and 15 % load, 2048 MB: the 15 % cell's runs as given."""
    rows = []
    for load, runs in ((0.0, (400.0, 410.0, 405.0)), (15.0, loaded_runs)):
        rows.append(
            {
                "condition_id": f"go_cpu0.25_mem2048_sc3_load{load:02g}",
                "app": "go",
                "vcpu": 0.25,
                "memory_mb": 2048,
                "sidecar_count": 3,
                "sidecar_load_pct": load,
                "total_sidecar_load_pct": 3 * load,
                "rps": float(np.exp(np.mean(np.log(runs)))),
                "flags": "",
                "repeats": len(runs),
                "failed_runs": 0,
                "rps_runs": ";".join(f"{r:g}" for r in runs),
            }
        )
    return pd.DataFrame(rows)


@pytest.mark.parametrize("wide", [True, False])
def test_one_wide_retention_interval_is_cut_at_the_axis_and_marked_not_stretching_it(wide):
    """The axis stops just above the highest point (a tenth rounded up, 15 % headroom) when an interval
    reaches beyond: the bar ends there with a caret; without such an interval nothing is cut."""
    from sidecar_bench.charts import CUT_MARK, capped_axis_top, retained_chart, retained_data

    ref = reference.load_reference(REFERENCE)
    summary = retention_summary((60.0, 300.0) if wide else (200.0, 205.0, 210.0))
    data = retained_data(summary, ref)
    spec = retained_chart(summary, ref).to_dict()
    layers = list(layers_of(spec))
    carets = [
        l
        for l in layers
        if isinstance(l.get("mark"), dict) and l["mark"].get("shape") == "triangle-up"
    ]
    bars = [l for l in layers if mark_type(l) == "rule" and "y2" in l.get("encoding", {})]
    subtitle = " ".join(spec["title"]["subtitle"])
    top = capped_axis_top(data["retained"], data["hi"])
    if wide:
        ours = data[data["source"] == "ours"]
        assert ours["hi"].max() > 5  # 2 runs, 1 degree of freedom: the interval reaches far up
        # The highest point is the article's or our 100 %: 1.15 x it, rounded up to a tenth.
        highest = data["retained"].max()
        assert top == pytest.approx(np.ceil(1.15 * highest * 10) / 10)
        assert all(
            l["encoding"]["y"]["scale"]["domain"] == [0, top]
            for l in layers
            if "y" in l.get("encoding", {})
        )
        assert bars[0]["encoding"]["y2"]["field"] == "hi_shown" and len(carets) == 1
        assert CUT_MARK in subtitle
    else:
        assert top is None
        assert not carets and CUT_MARK not in subtitle
        assert all(
            "domain" not in l["encoding"]["y"]["scale"]
            for l in layers
            if "y" in l.get("encoding", {})
        )


def test_the_axis_top_leaves_every_point_and_uncut_interval_as_it_was():
    from sidecar_bench.charts import capped_axis_top

    assert capped_axis_top([1.0, 0.5], [1.1, 0.6]) is None
    assert capped_axis_top([1.0, 0.5], [1.1, 3.0]) == 1.2
    assert capped_axis_top([7.2, 1.0], [7.5, 30.0]) == 8.3
    assert capped_axis_top([float("nan")], [2.0]) is None
    assert capped_axis_top([1.0], [float("nan")]) is None

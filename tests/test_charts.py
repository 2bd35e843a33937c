"""Charts from a small set of synthetic run files: every file written, offline HTML, article marks present."""

from pathlib import Path

import pytest

import aggregate_runs
import plot_charts
from sidecar_bench import reference
from sidecar_bench.charts import CHART_NAMES, ccdf_points, figure_data, write_charts
from sidecar_bench.stats import summarise_runs
from sidecar_bench.synthetic import two_mode_samples, write_small_set

REFERENCE = Path(__file__).resolve().parents[1] / "workflow" / "reference" / "article-results.csv"


@pytest.fixture(scope="module")
def charts(tmp_path_factory):
    root = tmp_path_factory.mktemp("charts")
    runs = write_small_set(root / "runs")
    aggregate_runs.main(runs=runs, summary_parquet=root / "summary.parquet", summary_csv=root / "summary.csv")
    plot_charts.main(summary=root / "summary.parquet", reference=REFERENCE, runs=runs, out_dir=root / "charts")
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
        assert "<script src=" not in html.replace("<script src=\"data:", ""), name
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

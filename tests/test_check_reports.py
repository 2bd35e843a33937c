"""scripts/dev/check_reports.py: the probe put into a copy of a report page, its counts read back, and the
verdict; in a real headless Chromium with no network where the machine has one (Debian's `chromium`)."""

import shutil
from pathlib import Path

import pytest

import check_reports
from sidecar_bench import set_report

ROOT = Path(__file__).resolve().parents[1]
ARTICLE = ROOT / "results" / "published" / "article"
FINE = "PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciIHdpZHRoPSIxMCIgaGVpZ2h0PSIxMCIvPg=="
BAD_PAGE = f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>bad</title>
<link rel="stylesheet" href="https://cdn.example.com/x.css"></head><body>
<img alt="fine" src="data:image/svg+xml;base64,{FINE}">
<img alt="garbled" src="data:image/svg+xml;base64,bm90IGFuIHN2Zw==">
<img alt="remote" src="https://example.com/chart.png">
</body></html>"""


def test_the_probe_goes_first_in_the_head_and_leaves_the_page_as_it_was():
    page = (
        '<html lang="en"><head><meta charset="utf-8"><title>t</title></head><body>x</body></html>'
    )
    out = check_reports.probed(page)
    assert out.startswith('<html lang="en"><head><meta http-equiv="Content-Security-Policy"')
    assert out.replace(check_reports.PROBE, "") == page
    with pytest.raises(ValueError, match="no <head>"):
        check_reports.probed("<html><body></body></html>")


def test_the_counts_are_read_from_the_dom_and_judged():
    dom = (
        '<body><img alt="a"><pre id="report-check">{&quot;images&quot;: 2, &quot;broken&quot;: '
        "[&quot;b &amp; c&quot;], &quot;blocked&quot;: []}</pre></body>"
    )
    result = check_reports.read_result(dom)
    assert result == {"images": 2, "broken": ["b & c"], "blocked": []}
    assert check_reports.verdict(result, 2) == ["not shown: b & c"]
    assert check_reports.verdict({"images": 3, "broken": [], "blocked": []}, 3) == []
    assert check_reports.verdict({"images": 2, "broken": [], "blocked": ["https://x/y"]}, 3) == [
        "2 images on the page, 3 charts in the set",
        "asked for what a file offline cannot give: https://x/y",
    ]
    with pytest.raises(ValueError, match="did not run"):
        check_reports.read_result("<body></body>")


def test_the_charts_a_set_must_show_are_those_the_page_embeds():
    charts = set_report.page_charts(ARTICLE)
    assert charts and all(p.suffix in (".svg", ".png") for p in charts)
    page = (ARTICLE / "report.html").read_text()
    assert page.count("<img ") == len(charts)


def _svg(low: float) -> str:
    import altair as alt
    import pandas as pd
    import vl_convert

    data = pd.DataFrame({"x": [1.0, 2.0], "p99": [low, 200.0]})
    chart = (
        alt.Chart(data).mark_point().encode(x="x:Q", y=alt.Y("p99:Q", scale=alt.Scale(type="log")))
    )
    return vl_convert.vegalite_to_svg(chart.to_dict())


def test_a_log_axis_from_zero_is_found_in_the_drawn_chart_and_a_sound_one_is_not():
    assert check_reports.flat_log_axes(_svg(0.0)) == ["p99"]
    assert check_reports.flat_log_axes(_svg(0.1)) == []
    assert (
        check_reports.flat_log_axes(
            "aria-label=\"Y-axis titled 'Share slower' for a log scale with values from 0.001% to 100%\""
        )
        == []
    )
    assert check_reports.flat_log_axes(
        "aria-label=\"X-axis titled 'RPS (log)' for a log scale with values from 0 to 5,805.55\""
    ) == ["RPS (log)"]


@pytest.mark.parametrize(
    "set_dir",
    sorted(p.parent for p in (ROOT / "results" / "published").glob("*/report.html")),
    ids=lambda p: p.name,
)
def test_every_published_chart_has_a_scale_on_its_log_axes(set_dir):
    assert check_reports.chart_problems(set_dir) == []


needs_browser = pytest.mark.skipif(
    shutil.which(check_reports.BROWSER) is None, reason="no chromium on this machine"
)


@needs_browser
def test_in_a_real_browser_a_published_page_passes_and_a_broken_one_fails(tmp_path):
    result, problems = check_reports.check(ARTICLE)
    assert problems == [] and result["images"] == len(set_report.page_charts(ARTICLE))
    bad = tmp_path / "bad"
    (bad / "charts").mkdir(parents=True)
    (bad / "charts" / "one.svg").write_bytes((ARTICLE / "charts" / "rps_retained.svg").read_bytes())
    (bad / "report.html").write_text(BAD_PAGE)
    result, problems = check_reports.check(bad)
    assert result["images"] == 3 and sorted(result["broken"]) == ["garbled", "remote"]
    assert sorted(result["blocked"]) == [
        "https://cdn.example.com/x.css",
        "https://example.com/chart.png",
    ]
    assert problems[0] == "3 images on the page, 1 charts in the set"

"""The knobs (mitigations) table's marks and chart: each knob's RPS and P99 ratio to the article's settings at the
same setup and load, a ratio marked only when its interval excludes 1, and no chart for a set without knobs."""

from pathlib import Path

import pandas as pd
import pytest

import plot_charts
from sidecar_bench.chart_files import save_chart
from sidecar_bench.mitigation_charts import has_knobs, knobs_chart, knobs_data
from sidecar_bench.mitigations import mitigations

REFERENCE = Path(__file__).resolve().parents[1] / "workflow" / "reference" / "article-results.csv"
PARTS = {"": "", "period 5 ms": "_period5ms", "burst 100 %": "_burst100"}


def row(knobs, load, rps_runs, p99_runs, app="go", vcpu=0.25, sidecars=3):
    rps, p99 = [float(v) for v in rps_runs], [float(v) for v in p99_runs]
    return {
        "condition_id": f"{app}_cpu{vcpu:g}_mem2048_sc{sidecars}_load{int(load / sidecars):02d}{PARTS[knobs]}",
        "app": app,
        "vcpu": vcpu,
        "memory_mb": 2048,
        "sidecar_count": sidecars,
        "sidecar_load_pct": load / sidecars,
        "total_sidecar_load_pct": float(load),
        "knobs": knobs,
        "repeats": len(rps),
        "failed_runs": 0,
        "rps": sum(rps) / len(rps),
        "rps_lo": min(rps),
        "rps_hi": max(rps),
        "rps_runs": ";".join(f"{v:g}" for v in rps),
        "p99_ms": sum(p99) / len(p99),
        "p99_ms_lo": min(p99),
        "p99_ms_hi": max(p99),
        "p99_ms_runs": ";".join(f"{v:g}" for v in p99),
        "slow_1p_share": 0.01,
        "app_cpu_pct": 20.0,
        "sidecars_cpu_pct": float(load) * 0.9,
        "throttled_share": 0.5,
        "flags": "",
        "period_ms": 100.0,
        "nr_throttled": 50,
        "throttled_s": 1.0,
        "nr_bursts": 0,
        "burst_s": 0.0,
    }


@pytest.fixture
def summary():
    return pd.DataFrame(
        [
            row("", 0, [1000, 1010, 990], [10, 11, 9]),
            row("", 30, [500, 505, 495], [190, 188, 192]),
            # A period 5 ms that doubles the RPS under load (clear of 1) and changes nothing idle.
            row("period 5 ms", 0, [1002, 1012, 992], [10, 11, 9]),
            row("period 5 ms", 30, [1000, 1010, 990], [20, 21, 19]),
            # A burst whose runs straddle the article's settings' (1 inside the interval).
            row("burst 100 %", 30, [450, 560, 505], [150, 230, 190]),
        ]
    )


def test_a_ratio_is_marked_only_when_its_interval_excludes_one(summary):
    display = mitigations(summary).display.set_index(["Total load", "Knobs"])
    cells = {
        (load.split("%")[0], knobs): value
        for (load, knobs), value in display["RPS / article's settings"].items()
    }
    assert cells[("30", "period 5 ms")].startswith("2.00") and cells[
        ("30", "period 5 ms")
    ].endswith(" *")
    assert not cells[("30", "burst 100 %")].endswith("*") and not cells[
        ("0", "period 5 ms")
    ].endswith("*")
    p99 = {
        (load.split("%")[0], knobs): value
        for (load, knobs), value in display["P99 / article's settings"].items()
    }
    assert p99[("30", "period 5 ms")].endswith(" *")
    # "~" is the drift flag's mark: no ratio carries it.
    assert not any("~" in str(value) for value in display["RPS / article's settings"])


def test_the_chart_data_names_each_setups_loads_and_marks_clear_ratios(summary):
    data = knobs_data(summary).set_index(["total_sidecar_load_pct", "knobs"])
    assert set(data.index) == {(0.0, "period 5 ms"), (30.0, "period 5 ms"), (30.0, "burst 100 %")}
    assert data.loc[(0.0, "period 5 ms"), "load_level"] == "idle sidecars"
    assert data.loc[(30.0, "period 5 ms"), "load_level"] == "highest load"
    assert data.loc[(30.0, "period 5 ms"), "rps_vs_article_settings_clear"]
    assert data.loc[(30.0, "period 5 ms"), "p99_vs_article_settings_clear"]
    assert not data.loc[(30.0, "burst 100 %"), "rps_vs_article_settings_clear"]
    assert not data.loc[(0.0, "period 5 ms"), "rps_vs_article_settings_clear"]
    assert data.loc[(30.0, "period 5 ms"), "setup"] == "Go 0.25 vCPU + 3 sidecars"


def test_the_chart_draws_rps_and_p99_per_setup(summary, tmp_path):
    chart = knobs_chart(summary)
    rows = chart.to_dict()["vconcat"]
    assert (
        len(rows) == 1 and len(rows[0]["hconcat"]) == 2
    )  # one setup: its RPS ratio, then its P99 ratio
    svg = save_chart(chart, tmp_path, "knobs", ("svg",))[0].read_text()
    for text in (
        "period 5 ms",
        "burst 100 %",
        "Go 0.25 vCPU + 3 sidecars",
        "highest load",
        "idle sidecars",
    ):
        assert text in svg, text


def test_the_charts_rule_script_adds_the_chart_only_with_knobs(summary, tmp_path, monkeypatch):
    monkeypatch.setattr(plot_charts, "write_charts", lambda *args, **kwargs: [])
    article_only = summary[summary["knobs"] == ""]
    assert has_knobs(summary) and not has_knobs(article_only)
    for name, frame in (("with", summary), ("without", article_only)):
        parquet = tmp_path / f"{name}.parquet"
        frame.to_parquet(parquet)
        out = tmp_path / name / "charts"
        out.mkdir(parents=True)
        written = plot_charts.main(summary=parquet, reference=REFERENCE, runs=[], out_dir=out)
        assert [p.name for p in written] == (
            ["knobs.html", "knobs.png", "knobs.svg"] if name == "with" else []
        )

"""The layouts table and chart (layouts.py, layout_charts.py): the task's two layouts side by side, each retention over its own
layout's no-load condition, the task / process ratio at the same load, and nothing for a set without the task
layout."""

import math
from pathlib import Path

import pandas as pd
import pytest

import make_tables
import plot_charts
from sidecar_bench.chart_files import save_chart
from sidecar_bench.layout_charts import layouts_chart
from sidecar_bench.layouts import has_task_layout, layouts_data, layouts_table

REFERENCE = Path(__file__).resolve().parents[1] / "workflow" / "reference" / "article-results.csv"


def row(knobs, load, rps_runs, app="go", vcpu=0.25, sidecars=3, slow=0.01, flags=""):
    values = [float(v) for v in rps_runs]
    part = {"": "", "task topology": "_task", "task topology, app cpu 1024": "_task_appcpu1024"}[
        knobs
    ]
    return {
        "condition_id": f"{app}_cpu{vcpu:g}_mem2048_sc{sidecars}_load{int(load / sidecars):02d}{part}",
        "app": app,
        "vcpu": vcpu,
        "memory_mb": 2048,
        "sidecar_count": sidecars,
        "sidecar_load_pct": load / sidecars,
        "total_sidecar_load_pct": float(load),
        "knobs": knobs,
        "repeats": len(values),
        "failed_runs": 0,
        "rps": sum(values) / len(values),
        "rps_lo": min(values),
        "rps_hi": max(values),
        "rps_runs": ";".join(f"{v:g}" for v in values),
        "p99_ms": 100.0,
        "p99_ms_lo": 90.0,
        "p99_ms_hi": 110.0,
        "slow_1p_share": slow,
        "app_cpu_pct": 20.0,
        "sidecars_cpu_pct": float(load) * 0.9,
        "throttled_share": 0.5,
        "flags": flags,
        # The rest of a summary row's columns that the article's tables read.
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
            row("", 0, [1000, 1010, 990]),
            row("", 30, [600, 610, 590], slow=0.05),
            row("task topology", 0, [1000, 1004, 996]),
            row("task topology", 30, [300, 306, 294], slow=0.20),
            # Not the default weights: the mitigations table's, not this one's.
            row("task topology, app cpu 1024", 30, [900, 905, 895]),
            # A setup measured in one layout only has nothing to set beside.
            row("", 0, [500, 505, 495], app="next"),
            row("", 10, [400, 405, 395], app="next"),
        ]
    )


def by(data, layout, load):
    found = data[(data["layout"] == layout) & (data["total_sidecar_load_pct"] == load)]
    assert len(found) == 1, found
    return found.iloc[0]


def test_each_layout_retains_over_its_own_no_load_condition(summary):
    data = layouts_data(summary)
    assert set(zip(data["app"], data["layout"], data["total_sidecar_load_pct"])) == {
        ("go", "process", 0.0),
        ("go", "process", 30.0),
        ("go", "task", 0.0),
        ("go", "task", 30.0),
    }
    assert by(data, "process", 30)["retained"] == pytest.approx(0.6, abs=0.01)
    assert by(data, "task", 30)["retained"] == pytest.approx(0.3, abs=0.01)
    assert by(data, "task", 0)["retained"] == 1.0
    # Intervals from both conditions' runs hold the value and are not points.
    task = by(data, "task", 30)
    assert task["retained_lo"] < task["retained"] < task["retained_hi"]


def test_the_task_over_the_process_layout_at_the_same_load(summary):
    data = layouts_data(summary)
    loaded = by(data, "task", 30)
    assert loaded["task_vs_process"] == pytest.approx(0.5, abs=0.01)
    assert loaded["task_vs_process_hi"] < 1  # a difference shown
    unloaded = by(data, "task", 0)
    assert unloaded["task_vs_process_lo"] <= 1 <= unloaded["task_vs_process_hi"]
    assert math.isnan(by(data, "process", 30)["task_vs_process"])  # the process rows are the base


def test_the_table_marks_no_difference_and_names_both_layouts(summary):
    table = layouts_table(summary)
    display = table.display
    assert (
        list(display["Layout"])
        == ["one container (the article's)", "ECS task (a container per role)"] * 2
    )
    cells = list(display["Task / one container"])
    assert cells[0] == "" and cells[2] == ""  # process rows
    assert not cells[1].endswith("*") and cells[3].endswith(
        " *"
    )  # 1.00 holds 1; 0.50 is clear of it
    assert display["> 1 period %"].tolist() == ["1.00", "1.00", "5.00", "20.00"]


def test_a_set_without_the_task_layout_gets_no_layouts(summary, tmp_path):
    process_only = summary[summary["knobs"] == ""]
    assert has_task_layout(summary) and not has_task_layout(process_only)
    assert layouts_data(process_only).empty
    # Through the rule scripts: the files appear with the task layout only.
    for name, frame in (("with", summary), ("without", process_only)):
        parquet = tmp_path / f"{name}.parquet"
        frame.to_parquet(parquet)
        make_tables.main(summary=parquet, reference=REFERENCE, out_dir=tmp_path / name / "tables")
    assert (tmp_path / "with" / "tables" / "layouts.md").exists()
    assert not (tmp_path / "without" / "tables" / "layouts.md").exists()
    text = (tmp_path / "with" / "tables" / "layouts.md").read_text()
    assert "ECS task (a container per role)" in text and "0.50 [" in text


def test_the_chart_draws_both_layouts_per_setup(summary, tmp_path):
    chart = layouts_chart(summary)
    assert len(chart.to_dict()["vconcat"]) == 2  # retention above, the tail share below
    written = save_chart(chart, tmp_path, "layouts", ("svg",))
    svg = written[0].read_text()
    assert "ECS task (a container per role)" in svg and "one container (the article's)" in svg
    assert "Go 0.25 vCPU + 3 sidecars" in svg


def test_the_charts_rule_script_adds_the_chart_only_with_the_task_layout(
    summary, tmp_path, monkeypatch
):
    # The article's charts are tested elsewhere (test_charts.py); here only which files the script adds.
    monkeypatch.setattr(plot_charts, "write_charts", lambda *args, **kwargs: [])
    for name, frame in (("with", summary), ("without", summary[summary["knobs"] == ""])):
        parquet = tmp_path / f"{name}.parquet"
        frame.to_parquet(parquet)
        out = tmp_path / name / "charts"
        out.mkdir(parents=True)
        written = plot_charts.main(summary=parquet, reference=REFERENCE, runs=[], out_dir=out)
        # With the task layout the knobs chart sets it (and its weights) beside the article's settings too.
        assert [p.name for p in written] == (
            ["layouts.html", "layouts.png", "layouts.svg", "knobs.html", "knobs.png", "knobs.svg"]
            if name == "with"
            else []
        )

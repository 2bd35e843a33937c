"""Tables from a small set of synthetic run files written per the run file format (record.py)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import aggregate_runs
import make_tables
from sidecar_bench import reference
from sidecar_bench.stats import summarise_runs
from sidecar_bench.synthetic import write_small_set
from sidecar_bench.tables import MISSING, TABLE_NAMES, write_tables

REFERENCE = Path(__file__).resolve().parents[1] / "workflow" / "reference" / "article-results.csv"


@pytest.fixture(scope="module")
def ref():
    return reference.load_reference(REFERENCE)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """Run the two Snakemake scripts' main() on the small synthetic set; return the tables directory."""
    root = tmp_path_factory.mktemp("analysis")
    runs = write_small_set(root / "runs")
    aggregate_runs.main(runs=runs, summary_parquet=root / "summary.parquet", summary_csv=root / "summary.csv")
    make_tables.main(summary=root / "summary.parquet", reference=REFERENCE, out_dir=root / "tables")
    return root / "tables"


def csv(tables, name):
    return pd.read_csv(tables / f"{name}.csv")


def test_every_table_is_written_as_markdown_and_csv(tables):
    names = {p.name for p in tables.iterdir()}
    assert names == {f"{n}.{ext}" for n in TABLE_NAMES for ext in ("md", "csv")}
    assert set(TABLE_NAMES) == {"load_sweep_go", "load_sweep_next", "breaking_points", "go_vs_next", "rps_grid_go",
                                "rps_grid_next", "p99_grid_go", "p99_grid_next", "memory"}


def test_summary_files_hold_one_row_per_run(tables):
    summary = pd.read_csv(tables.parent / "summary.csv")
    assert len(summary) == 10
    assert summary.set_index("condition_id").loc["go_cpu0.25_mem2048_sc3_load05", "rps"] == pytest.approx(250)
    assert len(pd.read_parquet(tables.parent / "summary.parquet")) == 10


def test_load_sweep_has_ours_beside_the_article(tables):
    sweep = csv(tables, "load_sweep_go").set_index("total_sidecar_load_pct")
    assert sweep.loc[15, "p99_ms"] == pytest.approx(108)
    assert sweep.loc[15, "p99_ms_article"] == pytest.approx(109.1)
    assert sweep.loc[15, "rps"] == pytest.approx(250)
    assert sweep.loc[15, "rps_article"] == pytest.approx(245)
    assert sweep.loc[15, "rps_ratio"] == pytest.approx(250 / 245, rel=1e-4)
    # A load the article published but this matrix lacks: article number, no ours.
    assert np.isnan(sweep.loc[45, "p99_ms"]) and sweep.loc[45, "p99_ms_article"] == pytest.approx(196.6)
    md = (tables / "load_sweep_go.md").read_text()
    assert "| 15% | 3.5 | 3.7 | 108.0 | 109.1 |" in md
    assert f"| 45% | {MISSING} | 3.4 | {MISSING} | 196.6 |" in md


def test_breaking_point_is_detected_from_the_runs(tables):
    points = csv(tables, "breaking_points")
    go = points[(points["app"] == "go") & (points["vcpu"] == 0.25) & (points["sidecar_count"] == 3)].iloc[0]
    assert (go["before_load_pct"], go["after_load_pct"], go["rule"]) == (15, 18, "jump")
    assert (go["article_before_load_pct"], go["article_after_load_pct"]) == (15, 18)
    assert bool(go["same_step_as_article"]) is True
    # Next 0.5 + 3 is in the article but not in this matrix: its row shows the article only.
    nx = points[(points["app"] == "next") & (points["vcpu"] == 0.5)].iloc[0]
    assert np.isnan(nx["before_load_pct"]) and nx["article_after_load_pct"] == 21
    assert "18% -> 21% (100.0 -> 106.0 ms)" in (tables / "breaking_points.md").read_text()


def test_rps_grid_cells_average_the_runs_of_a_bucket(tables):
    grid = csv(tables, "rps_grid_go")
    proxy = grid[(grid["vcpu"] == 0.25) & (grid["sidecar_count"] == 1)].iloc[0]
    assert proxy["rps_5-15"] == pytest.approx((310 + 270) / 2)  # runs at 5 % and 15 % total
    assert proxy["runs_5-15"] == 2 and proxy["loads_5-15"] == "5 15"
    assert proxy["rps_5-15_article"] == pytest.approx(318)
    three = grid[(grid["vcpu"] == 0.25) & (grid["sidecar_count"] == 3)].iloc[0]
    # 18 % total is a fine step (6 % per sidecar), not a grid level: not in the 5-15 or 25-45 cells.
    assert three["rps_5-15"] == pytest.approx(250) and three["runs_5-15"] == 1
    assert three["runs_25-45"] == 0
    md = (tables / "rps_grid_go.md").read_text()
    assert "| 0.25 | +proxy | — (372) | 290 (318) [n=2] | — (321) | — | — |" in md
    assert "| 2.00 | +agent+log | — (7589) |" in md


def test_p99_grid_go_vs_next_and_memory(tables):
    p99 = csv(tables, "p99_grid_next").set_index("vcpu")
    assert p99.loc[0.25, "p99_ms_15"] == pytest.approx(500)
    assert p99.loc[0.25, "p99_ms_15_article"] == pytest.approx(499.9)
    side = csv(tables, "go_vs_next").set_index("total_sidecar_load_pct")
    assert side.loc[15, "go_p99_ms"] == pytest.approx(108) and side.loc[15, "next_rps"] == pytest.approx(70)
    assert side.loc[15, "next_rps_article"] == pytest.approx(67)
    memory = csv(tables, "memory").set_index(["vcpu", "memory_mb"])
    assert memory.loc[(1.0, 512), "go_rps"] == pytest.approx(1400)
    assert memory.loc[(1.0, 512), "go_rps_article"] == pytest.approx(1403)
    assert np.isnan(memory.loc[(1.0, 4096), "go_rps"]) and memory.loc[(1.0, 4096), "next_rps_article"] == 3344


def test_markdown_states_the_definitions(tables):
    md = (tables / "rps_grid_go.md").read_text()
    assert "nearest-rank" in md and "wall time" in md and "mean of their RPS" in md
    assert "Rule (detected from the data" in (tables / "breaking_points.md").read_text()


def test_breaking_point_rule_is_stated_with_both_branches_and_the_minimum_rise(tables):
    # The footnote and the report caption must state the rule stats.breaking_point applies, 5 % rise included.
    md = (tables / "breaking_points.md").read_text()
    caption = (REFERENCE.parents[1] / "report" / "breaking_points.rst").read_text()
    for text in (md, caption):
        assert "half a CFS period" in text and "more than 2 ms" in text
        assert "at least 5 % of the period" in text and "5 ms" in text


def test_tables_survive_an_empty_or_tiny_matrix(tmp_path, ref):
    empty = summarise_runs([])
    written = write_tables(empty, ref, tmp_path / "empty")
    assert len(written) == 2 * len(TABLE_NAMES)
    assert "— (369)" in (tmp_path / "empty" / "go_vs_next.md").read_text()
    one = summarise_runs(write_small_set(tmp_path / "runs")[:1])
    write_tables(one, ref, tmp_path / "one")
    assert (tmp_path / "one" / "memory.csv").exists()


def test_different_environments_are_flagged(tmp_path, ref):
    summary = summarise_runs(write_small_set(tmp_path / "runs"))
    summary.loc[0, "env_hostname"] = "other-host"
    write_tables(summary, ref, tmp_path / "t")
    assert "2 different environments" in (tmp_path / "t" / "load_sweep_go.md").read_text()

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
from sidecar_bench.table_format import MISSING
from sidecar_bench.tables import TABLE_NAMES, write_tables

REFERENCE = Path(__file__).resolve().parents[1] / "workflow" / "reference" / "article-results.csv"


@pytest.fixture(scope="module")
def ref():
    return reference.load_reference(REFERENCE)


@pytest.fixture(scope="module")
def tables(tmp_path_factory):
    """Run the two Snakemake scripts' main() on the small synthetic set; return the tables directory."""
    root = tmp_path_factory.mktemp("analysis")
    runs = write_small_set(root / "runs")
    aggregate_runs.main(
        runs=runs, summary_parquet=root / "summary.parquet", summary_csv=root / "summary.csv"
    )
    make_tables.main(summary=root / "summary.parquet", reference=REFERENCE, out_dir=root / "tables")
    return root / "tables"


def csv(tables, name):
    return pd.read_csv(tables / f"{name}.csv")


def test_every_table_is_written_as_markdown_and_csv(tables):
    names = {p.name for p in tables.iterdir()}
    assert names == {f"{n}.{ext}" for n in TABLE_NAMES for ext in ("md", "csv")}
    assert set(TABLE_NAMES) == {
        "load_sweep_go",
        "load_sweep_next",
        "breaking_points",
        "go_vs_next",
        "rps_grid_go",
        "rps_grid_next",
        "p99_grid_go",
        "p99_grid_next",
        "memory",
        "findings",
        "mitigations",
    }


def test_summary_files_hold_one_row_per_run(tables):
    summary = pd.read_csv(tables.parent / "summary.csv")
    assert len(summary) == 10
    assert summary.set_index("condition_id").loc[
        "go_cpu0.25_mem2048_sc3_load05", "rps"
    ] == pytest.approx(250)
    assert len(pd.read_parquet(tables.parent / "summary.parquet")) == 10


def summary_rps(tables, condition_id):
    return (
        pd.read_csv(tables.parent / "summary.csv")
        .set_index("condition_id")
        .loc[condition_id, "rps"]
    )


def test_load_sweep_has_ours_beside_the_article(tables):
    sweep = csv(tables, "load_sweep_go").set_index("total_sidecar_load_pct")
    assert sweep.loc[15, "p99_ms"] == pytest.approx(108)
    assert sweep.loc[15, "p99_ms_article"] == pytest.approx(109.1)
    rps = summary_rps(tables, "go_cpu0.25_mem2048_sc3_load05")
    assert sweep.loc[15, "rps"] == pytest.approx(rps, rel=1e-5)
    assert sweep.loc[15, "rps_article"] == pytest.approx(245)
    assert sweep.loc[15, "rps_ratio"] == pytest.approx(rps / 245, rel=1e-4)
    # A load the article published but this matrix lacks: article number, no ours.
    assert np.isnan(sweep.loc[45, "p99_ms"]) and sweep.loc[45, "p99_ms_article"] == pytest.approx(
        196.6
    )
    md = (tables / "load_sweep_go.md").read_text()
    # The nominal load with the CPU the sidecars delivered (synthetic sidecars burn 98 % of 3 x 5 %).
    assert "| 15% (14.7 used) | 3.5" in md and "| 3.7 | 108.0" in md and "| 109.1 |" in md
    assert sweep.loc[15, "sidecars_cpu_pct"] == pytest.approx(14.7)
    assert f"| 45% | {MISSING} | 3.4 | {MISSING} | 196.6 |" in md


def test_breaking_point_is_detected_from_the_runs(tables):
    points = csv(tables, "breaking_points")
    go = points[
        (points["app"] == "go") & (points["vcpu"] == 0.25) & (points["sidecar_count"] == 3)
    ].iloc[0]
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
    both = summary_rps(tables, "go_cpu0.25_mem2048_sc1_load05") + summary_rps(
        tables, "go_cpu0.25_mem2048_sc1_load15"
    )
    assert proxy["rps_5-15"] == pytest.approx(both / 2, rel=1e-5)  # runs at 5 % and 15 % total
    assert proxy["runs_5-15"] == 2 and proxy["loads_5-15"] == "5 15"
    assert proxy["rps_5-15_article"] == pytest.approx(318)
    three = grid[(grid["vcpu"] == 0.25) & (grid["sidecar_count"] == 3)].iloc[0]
    # 18 % total is a fine step (6 % per sidecar), not a grid level: not in the 5-15 or 25-45 cells.
    assert three["rps_5-15"] == pytest.approx(
        summary_rps(tables, "go_cpu0.25_mem2048_sc3_load05"), rel=1e-5
    )
    assert three["runs_5-15"] == 1
    assert three["runs_25-45"] == 0
    md = (tables / "rps_grid_go.md").read_text()
    assert (
        f"| 0.25 | +proxy | — (372) | {proxy['rps_5-15']:.0f}" in md
        and " (318) [n=2] | — (321) | — | — |" in md
    )
    # The CPU the sidecars delivered beside our value (synthetic sidecars: 98 % of 5 and 15 %, mean 9.8).
    assert proxy["sidecars_cpu_pct_5-15"] == pytest.approx(9.8) and " @9.8 (318) [n=2]" in md
    assert "| 2.00 | +agent+log | — (7589) |" in md


def test_p99_grid_go_vs_next_and_memory(tables):
    p99 = csv(tables, "p99_grid_next").set_index("vcpu")
    assert p99.loc[0.25, "p99_ms_15"] == pytest.approx(500)
    assert p99.loc[0.25, "p99_ms_15_article"] == pytest.approx(499.9)
    side = csv(tables, "go_vs_next").set_index("total_sidecar_load_pct")
    assert side.loc[15, "go_p99_ms"] == pytest.approx(108)
    assert side.loc[15, "next_rps"] == pytest.approx(
        summary_rps(tables, "next_cpu0.25_mem2048_sc3_load05"), rel=1e-5
    )
    assert side.loc[15, "next_rps_article"] == pytest.approx(67)
    memory = csv(tables, "memory").set_index(["vcpu", "memory_mb"])
    assert memory.loc[(1.0, 512), "go_rps"] == pytest.approx(
        summary_rps(tables, "go_cpu1_mem512_sc3_load15"), rel=1e-5
    )
    assert memory.loc[(1.0, 512), "go_rps_article"] == pytest.approx(1403)
    assert (
        np.isnan(memory.loc[(1.0, 4096), "go_rps"])
        and memory.loc[(1.0, 4096), "next_rps_article"] == 3344
    )


def test_markdown_states_the_definitions(tables):
    md = (tables / "rps_grid_go.md").read_text()
    assert "nearest-rank" in md and "whole-window" in md and "mean of their RPS" in md
    assert "Rule (detected from the data" in (tables / "breaking_points.md").read_text()


def test_breaking_point_rule_is_stated_with_both_branches_and_the_minimum_rise(tables):
    # The footnote and the report caption must state the rule stats.breaking_point applies, 5 % rise included.
    md = (tables / "breaking_points.md").read_text()
    caption = (
        REFERENCE.parents[1] / "report" / "tables.rst"
    ).read_text()  # per-table captions, by name
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


# --- intervals, flags and verdicts on a hand-made per-condition summary (the aggregate's contract columns) ---


def condition_row(
    app, vcpu, sc, load, p99, p99_lo, p99_hi, rps, rps_lo, rps_hi, flags="", memory=2048
):
    per_sidecar = load / sc if sc else 0.0
    return {
        "condition_id": f"{app}_cpu{vcpu:g}_mem{memory}_sc{sc}_load{per_sidecar:02g}",
        "app": app,
        "vcpu": vcpu,
        "memory_mb": memory,
        "sidecar_count": sc,
        "sidecar_load_pct": per_sidecar,
        "total_sidecar_load_pct": float(load),
        "repeats": 3,
        "successful": 3000,
        "p50_ms": 3.0,
        "p50_ms_lo": 2.9,
        "p50_ms_hi": 3.2,
        "p99_ms": p99,
        "p99_ms_lo": p99_lo,
        "p99_ms_hi": p99_hi,
        "rps": rps,
        "rps_lo": rps_lo,
        "rps_hi": rps_hi,
        "steady_rps": rps + 5,
        "steady_p99_ms": p99 - 1,
        "period_ms": 100.0,
        "flags": flags,
    }


@pytest.fixture()
def hand_summary():
    return pd.DataFrame(
        [
            condition_row("go", 0.25, 3, 0, 105, 103, 107, 1195, 1185, 1202, "host_bound"),
            condition_row("go", 0.25, 3, 3, 98, 96, 100, 1150, 1140, 1160),
            condition_row("go", 0.25, 3, 6, 104, 101, 106, 1120, 1100, 1130, "few_samples_p99_9"),
            condition_row("next", 0.25, 3, 0, 290, 285, 296, 80, 78, 82),
            condition_row(
                "next", 0.25, 3, 3, 300, 296, 305, 78, 76, 80, "few_samples_p99,failed_requests"
            ),
            condition_row("next", 0.25, 3, 6, 398, 390, 405, 60, 58, 62),
            condition_row("next", 0.25, 3, 9, 397, 391, 404, 59, 57, 61),
        ]
    )


def test_cells_show_the_interval_and_the_flag_marks(hand_summary, ref, tmp_path):
    write_tables(hand_summary, ref, tmp_path)
    md = (tmp_path / "load_sweep_go.md").read_text()
    # RPS with its interval and the host-bound mark; the article's number in its own column.
    assert "| 1195 [1185–1202] H | 369 |" in md
    assert "105.0 [103.0–107.0] H | 104.6 |" in md
    # P99.9's sample count does not bear on P99 or RPS: no mark at 6 %.
    assert "104.0 [101.0–106.0] |" in md and "‡" not in md
    # Steady-state columns beside the whole-window ones.
    assert "Steady P99 ms" in md and "Steady RPS" in md and "whole-window" in md
    sweep = pd.read_csv(tmp_path / "load_sweep_go.csv").set_index("total_sidecar_load_pct")
    assert (sweep.loc[0, "rps"], sweep.loc[0, "rps_lo"], sweep.loc[0, "rps_hi"]) == (
        1195,
        1185,
        1202,
    )
    assert sweep.loc[0, "flags"] == "host_bound" and sweep.loc[0, "steady_rps"] == 1200


def test_legend_lists_only_the_flags_in_the_table(hand_summary, ref, tmp_path):
    write_tables(hand_summary, ref, tmp_path)
    go = (tmp_path / "load_sweep_go.md").read_text()
    assert "- H - host-bound, not quota-bound - throttled share < 0.05" in go
    assert "failed requests" not in go and "few samples" not in go
    nx = (tmp_path / "load_sweep_next.md").read_text()
    assert "300.0 [296.0–305.0] † E |" in nx  # P99 cell: few samples for P99 and failed requests
    assert "| 78 [76–80] E |" in nx  # RPS cell: few samples for P99 does not bear on RPS
    assert "- † - few samples for P99 - fewer than 500 successful responses" in nx
    assert "- E - failed requests" in nx and "host-bound" not in nx
    assert "Flags:" not in (tmp_path / "memory.md").read_text()  # no flagged cell, no legend


def test_breaking_point_table_says_break_within_noise_or_none(hand_summary, ref, tmp_path):
    write_tables(hand_summary, ref, tmp_path)
    points = pd.read_csv(tmp_path / "breaking_points.csv")
    go = points[points["app"] == "go"].iloc[0]
    # 105, 98, 104 ms: a dip and recovery; 98 -> 104 crosses 100 ms but stays below the 107 ms seen before.
    assert go["verdict"] == "within noise" and (go["before_load_pct"], go["after_load_pct"]) == (
        3,
        6,
    )
    nx = points[
        (points["app"] == "next") & (points["vcpu"] == 0.25) & (points["sidecar_count"] == 3)
    ].iloc[0]
    assert nx["verdict"] == "break" and (nx["before_load_pct"], nx["after_load_pct"]) == (3, 6)
    assert bool(nx["same_step_as_article"]) is True
    # Verdicts against the article come from the rule: a sweep within noise places no break at 95 %.
    assert (nx["vs_article"], go["vs_article"]) == ("same step", "no break at 95 %")
    md = (tmp_path / "breaking_points.md").read_text()
    assert "| within noise | 3% -> 6% (98.0 -> 104.0 ms) |" in md
    assert "from 6% on P99 >= 101.0 ms <= 107.0 ms, the highest before" in md
    assert "from 6% on P99 >= 390.0 ms > 305.0 ms, the highest before" in md
    flat = hand_summary[hand_summary["app"] == "next"].assign(
        p99_ms=300.0, p99_ms_lo=295.0, p99_ms_hi=305.0
    )
    write_tables(flat, ref, tmp_path / "flat")
    assert "| none |" in (tmp_path / "flat" / "breaking_points.md").read_text()


def test_ratios_carry_the_run_to_run_uncertainty_of_both_sides(hand_summary, ref, tmp_path):
    from sidecar_bench import repstats

    runs = {
        ("go", 0): "1180;1195;1210",
        ("go", 3): "1120;1150;1180",
        ("next", 0): "78;80;82",
        ("next", 3): "70;78;86",
    }
    summary = hand_summary.copy()
    summary["rps_runs"] = [
        runs.get((a, int(load)), "")
        for a, load in zip(summary["app"], summary["total_sidecar_load_pct"])
    ]
    write_tables(summary, ref, tmp_path)
    sweep = pd.read_csv(tmp_path / "load_sweep_go.csv").set_index("total_sidecar_load_pct")
    # Ours / the article's 369 RPS: a t interval of the runs' logs, the article's number taken as exact.
    exact = repstats.ratio_to_exact([1180.0, 1195.0, 1210.0], 369.0)
    assert (
        sweep.loc[0, "rps_ratio"],
        sweep.loc[0, "rps_ratio_lo"],
        sweep.loc[0, "rps_ratio_hi"],
    ) == pytest.approx((exact.value, exact.lo, exact.hi), rel=1e-5)
    md = (tmp_path / "load_sweep_go.md").read_text()
    assert f"| {exact.value:.2f} [{exact.lo:.2f}–{exact.hi:.2f}] |" in md
    # Go / Next.js at 3 %: Welch's interval over both cells' runs.
    both = repstats.ratio_interval([1120.0, 1150.0, 1180.0], [70.0, 78.0, 86.0])
    side = pd.read_csv(tmp_path / "go_vs_next.csv").set_index("total_sidecar_load_pct")
    assert (
        side.loc[3, "go_next_rps_ratio_lo"],
        side.loc[3, "go_next_rps_ratio_hi"],
    ) == pytest.approx((both.lo, both.hi), rel=1e-5)
    assert (
        f"{both.value:.1f} [{both.lo:.1f}–{both.hi:.1f}]"
        in (tmp_path / "go_vs_next.md").read_text()
    )


def test_a_bimodal_cell_is_compared_with_the_article_by_its_tail_shares(ref, tmp_path):
    def row(load, flags, slow2_lo):
        r = condition_row("go", 0.25, 3, load, 160.7, 60.0, 260.0, 500, 450, 550, flags)
        r.update(
            {
                "slow_1p_share": 0.029,
                "slow_1p_share_lo": 0.020,
                "slow_1p_share_hi": 0.038,
                "slow_2p_share": slow2_lo + 0.003,
                "slow_2p_share_lo": slow2_lo,
                "slow_2p_share_hi": slow2_lo + 0.006,
            }
        )
        return r

    # The article's P99 at 15 % is 109.1 ms: >= 1 % slower than 100 ms, <= 1 % slower than 200 ms.
    summary = pd.DataFrame([row(0, "", 0.0), row(15, "bimodal", 0.0), row(18, "bimodal", 0.02)])
    write_tables(summary, ref, tmp_path)
    sweep = pd.read_csv(tmp_path / "load_sweep_go.csv", keep_default_na=False).set_index(
        "total_sidecar_load_pct"
    )
    assert sweep.loc[15, "p99_tails_vs_article"] == "agrees" and sweep.loc[15, "p99_ms_ratio"] == ""
    assert sweep.loc[0, "p99_tails_vs_article"] == "" and float(sweep.loc[0, "p99_ms_ratio"]) > 0
    md = (tmp_path / "load_sweep_go.md").read_text()
    assert (
        "tails: > 100 ms 2.9 % [2.0–3.8] (article >= 1 %); > 200 ms 0.3 % [0.0–0.6] (article <= 1 %): agrees"
        in md
    )
    assert "B (bimodal)" in md
    # At 18 % (article 194.9 ms) ours has 2 % or more slower than two periods, the article at most 1 %: differs.
    assert sweep.loc[18, "p99_tails_vs_article"] == "differs"


def test_versus_the_article_by_the_rule():
    from sidecar_bench.breaking import BREAK, BreakingPoint
    from sidecar_bench.tables import versus_article

    article = {"before_load_pct": 3.0, "after_load_pct": 6.0}

    def step(before, after):
        return BreakingPoint(before, after, 100.0, 190.0, "jump")

    assert versus_article(BREAK, step(3, 6), article) == "same step"
    assert versus_article(BREAK, step(0, 3), article) == "earlier"
    assert versus_article(BREAK, step(6, 9), article) == "later"
    assert versus_article(BREAK, step(4, 5), article) == "overlapping"
    assert versus_article("within noise", step(3, 6), article) == "no break at 95 %"
    assert versus_article(BREAK, step(3, 6), None) == "no article break"


def test_knobs_have_their_own_table_and_stay_out_of_the_articles(tmp_path, ref):
    """A knob condition beside the article's settings: ranked by its RPS ratio in the mitigations table, absent
    from the article's tables (which would otherwise hold two rows for one setup and load)."""
    from sidecar_bench.conditions import Condition
    from sidecar_bench.synthetic import write_run

    base = Condition("go", 0.25, 2048, 3, 10)
    period = Condition("go", 0.25, 2048, 3, 10, cpu_period_ms=5)
    burst = Condition("go", 0.25, 2048, 3, 10, cpu_burst_pct=100)
    rng = np.random.default_rng(1)
    paths = []
    for condition, ms, rows, bursts in (
        (base, 100.0, 300, None),
        (period, 25.0, 1200, None),
        (burst, 50.0, 600, 40),
    ):
        for repeat in (1, 2, 3):
            overrides = {"cgroup": {"nr_bursts": bursts, "burst_s": 0.2}} if bursts else None
            paths.append(
                write_run(
                    tmp_path / "runs" / condition.id / f"rep{repeat}.parquet",
                    condition,
                    rng.normal(ms, 1, rows + 10 * repeat) / 1000,
                    repeat=repeat,
                    meta_overrides=overrides,
                )
            )
    aggregate_runs.main(
        runs=paths, summary_parquet=tmp_path / "summary.parquet", summary_csv=tmp_path / "s.csv"
    )
    make_tables.main(
        summary=tmp_path / "summary.parquet", reference=REFERENCE, out_dir=tmp_path / "tables"
    )
    summary = pd.read_csv(tmp_path / "s.csv")
    assert dict(zip(summary["condition_id"], summary["knobs"].fillna(""))) == {
        base.id: "",
        period.id: "period 5 ms",
        burst.id: "burst 100 %",
    }
    table = csv(tmp_path / "tables", "mitigations").set_index("knobs")
    assert set(table.index) == {"article's settings", "period 5 ms", "burst 100 %"}
    # Four times the article's settings' responses at a quarter of the latency, and twice at half.
    assert (
        table.loc["period 5 ms", "rank_by_rps"] == 1
        and table.loc["burst 100 %", "rank_by_rps"] == 2
    )
    assert table.loc["period 5 ms", "rps_vs_article_settings"] == pytest.approx(4, rel=0.05)
    assert table.loc["period 5 ms", "rps_vs_article_settings_lo"] > 1
    assert table.loc["burst 100 %", "nr_bursts"] == 40
    assert table.loc["period 5 ms", "p99_vs_article_settings"] < 0.5
    sweep = csv(tmp_path / "tables", "load_sweep_go")
    assert sweep[np.isclose(sweep["total_sidecar_load_pct"], 30)]["repeats"].tolist() == [3]

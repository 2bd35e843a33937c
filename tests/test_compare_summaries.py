"""Comparing a re-measured summary with a published one, within the intervals."""

import math

import numpy as np
import pandas as pd
import pytest

import compare_summaries as cs


def summary(rows):
    frame = pd.DataFrame(
        rows,
        columns=[
            "condition_id",
            "app",
            "vcpu",
            "sidecar_count",
            "memory_mb",
            "total_sidecar_load_pct",
            "rps",
            "rps_lo",
            "rps_hi",
            "p99_ms",
            "p99_ms_lo",
            "p99_ms_hi",
            "rps_runs",
        ],
    )
    return frame


PUBLISHED = summary(
    [
        ("go_0", "go", 0.25, 3, 2048, 0, 800, 780, 820, 99, 96, 100, "790;800;810"),
        ("go_15", "go", 0.25, 3, 2048, 15, 500, 480, 540, 105, 101, 187, "480;500;520"),
    ]
)
# Another host: a fifth slower, same shape; P99 at 15 % moved to two periods.
YOURS = summary(
    [
        ("go_0", "go", 0.25, 3, 2048, 0, 640, 620, 660, 98, 97, 99, "630;640;650"),
        ("go_15", "go", 0.25, 3, 2048, 15, 410, 400, 420, 190, 188, 193, "400;410;420"),
    ]
)


def welch_log_ratio(num, den):
    """The textbook Welch interval of mean(log num) - mean(log den), exponentiated."""
    from scipy import stats

    a, b = np.log(num), np.log(den)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    half = stats.t.ppf(0.975, df) * math.sqrt(va + vb)
    diff = a.mean() - b.mean()
    return math.exp(diff), math.exp(diff - half), math.exp(diff + half)


def test_retention_carries_both_cells_run_to_run_uncertainty():
    frame = cs.with_retention(PUBLISHED).set_index("condition_id")
    row = frame.loc["go_15"]
    expected = welch_log_ratio([480.0, 500.0, 520.0], [790.0, 800.0, 810.0])
    assert (row["retention"], row["retention_lo"], row["retention_hi"]) == pytest.approx(expected)
    # Wider than the loaded cell's own spread over a fixed baseline (480/800 .. 520/800) would say.
    assert row["retention_lo"] < 480 / 800 and row["retention_hi"] > 520 / 800
    assert frame.loc["go_0", "retention"] == pytest.approx(1.0)


def test_a_summary_without_per_run_values_gives_retention_without_an_interval():
    frame = cs.with_retention(PUBLISHED.drop(columns=["rps_runs"])).set_index("condition_id")
    assert frame.loc["go_15", "retention"] == pytest.approx(500 / 800)
    assert math.isnan(frame.loc["go_15", "retention_lo"])


def test_cells_agree_when_their_intervals_overlap():
    table = cs.compare(PUBLISHED, YOURS, ("retention", "rps", "p99_ms")).set_index(
        ["condition_id", "metric"]
    )
    # Retention at 15 %: published 0.625, yours 0.641, each with both cells' uncertainty: overlap.
    assert table.loc[("go_15", "retention"), "agree"]
    assert table.loc[("go_15", "retention"), "yours"] == pytest.approx(410 / 640, rel=1e-3)
    # Absolute RPS does not travel between hosts; P99 at 15 %: [101, 187] against [188, 193]: no overlap.
    assert not table.loc[("go_15", "rps"), "agree"]
    assert not table.loc[("go_15", "p99_ms"), "agree"]
    assert table.loc[("go_0", "p99_ms"), "agree"]
    assert cs.host_factor(PUBLISHED, YOURS) == pytest.approx((640 / 800 + 410 / 500) / 2)


def test_a_summary_without_intervals_compares_its_point_values():
    older = YOURS.drop(columns=["rps_lo", "rps_hi", "p99_ms_lo", "p99_ms_hi"])
    table = cs.compare(PUBLISHED, older, ("p99_ms", "slow_1p_share")).set_index(
        ["condition_id", "metric"]
    )
    assert table.loc[("go_0", "p99_ms"), "agree"]  # 98 inside [96, 100]
    assert table.loc[("go_0", "p99_ms"), "yours_lo"] == 98
    # A metric only one summary has is shown, not judged.
    assert table.loc[("go_0", "slow_1p_share"), "agree"] is None


def test_bad_input_is_named(tmp_path, capsys):
    with pytest.raises(cs.CompareError, match="unknown metric.*p42"):
        cs.compare(PUBLISHED, YOURS, ("p42",))
    with pytest.raises(cs.CompareError, match="lacks column.*rps"):
        cs.compare(PUBLISHED, YOURS.drop(columns=["rps"]))
    with pytest.raises(cs.CompareError, match="no condition in common"):
        cs.compare(PUBLISHED, YOURS.assign(condition_id=["a", "b"]))
    assert cs.main([str(tmp_path / "missing.csv"), str(tmp_path / "x.csv")]) == 2
    assert "missing.csv: no such file" in capsys.readouterr().err


def test_command_prints_every_cell_and_the_counts(tmp_path, capsys):
    PUBLISHED.to_csv(tmp_path / "p.csv", index=False)
    YOURS.to_csv(tmp_path / "y.csv", index=False)
    assert (
        cs.main(
            [
                str(tmp_path / "p.csv"),
                str(tmp_path / "y.csv"),
                "--metrics",
                "retention,p99_ms",
                "--out",
                str(tmp_path / "c.csv"),
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    assert "| go_15 | p99_ms | 105.0 [101.0-187.0] | 190.0 [188.0-193.0] | NO |" in text
    assert "- retention: 2 of 2 cells agree within the intervals" in text
    assert "- p99_ms: 1 of 2 cells agree within the intervals" in text
    assert len(pd.read_csv(tmp_path / "c.csv")) == 4

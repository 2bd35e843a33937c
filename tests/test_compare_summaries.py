"""Comparing a re-measured summary with a published one, within the intervals."""

import math
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import compare_summaries as cs  # noqa: E402


def summary(rows):
    frame = pd.DataFrame(rows, columns=["condition_id", "app", "vcpu", "sidecar_count", "memory_mb",
                                        "total_sidecar_load_pct", "rps", "rps_lo", "rps_hi", "p99_ms", "p99_ms_lo",
                                        "p99_ms_hi"])
    return frame


PUBLISHED = summary([
    ("go_0", "go", 0.25, 3, 2048, 0, 800, 780, 820, 99, 96, 100),
    ("go_15", "go", 0.25, 3, 2048, 15, 500, 480, 540, 105, 101, 187),
])
# Another host: a fifth slower, same shape; P99 at 15 % moved to two periods.
YOURS = summary([
    ("go_0", "go", 0.25, 3, 2048, 0, 640, 620, 660, 98, 97, 99),
    ("go_15", "go", 0.25, 3, 2048, 15, 410, 400, 420, 190, 188, 193),
])


def test_retention_is_rps_over_the_same_sweeps_zero_load_rps():
    frame = cs.with_retention(PUBLISHED)
    row = frame.set_index("condition_id").loc["go_15"]
    assert (row["retention"], row["retention_lo"], row["retention_hi"]) == (500 / 800, 480 / 800, 540 / 800)
    assert frame.set_index("condition_id").loc["go_0", "retention"] == 1.0


def test_cells_agree_when_their_intervals_overlap():
    table = cs.compare(PUBLISHED, YOURS, ("retention", "rps", "p99_ms")).set_index(["condition_id", "metric"])
    # Retention at 15 %: published [0.600, 0.675], yours [400/640, 420/640] = [0.625, 0.656]: overlap.
    assert table.loc[("go_15", "retention"), "agree"]
    assert math.isclose(table.loc[("go_15", "retention"), "yours"], 410 / 640)
    # Absolute RPS does not travel between hosts; P99 at 15 %: [101, 187] against [188, 193]: no overlap.
    assert not table.loc[("go_15", "rps"), "agree"]
    assert not table.loc[("go_15", "p99_ms"), "agree"]
    assert table.loc[("go_0", "p99_ms"), "agree"]
    assert cs.host_factor(PUBLISHED, YOURS) == pytest.approx((640 / 800 + 410 / 500) / 2)


def test_a_summary_without_intervals_compares_its_point_values():
    older = YOURS.drop(columns=["rps_lo", "rps_hi", "p99_ms_lo", "p99_ms_hi"])
    table = cs.compare(PUBLISHED, older, ("p99_ms", "slow_1p_share")).set_index(["condition_id", "metric"])
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
    assert cs.main([str(tmp_path / "p.csv"), str(tmp_path / "y.csv"), "--metrics", "retention,p99_ms",
                    "--out", str(tmp_path / "c.csv")]) == 0
    text = capsys.readouterr().out
    assert "| go_15 | p99_ms | 105.0 [101.0-187.0] | 190.0 [188.0-193.0] | NO |" in text
    assert "- retention: 2 of 2 cells agree within the intervals" in text
    assert "- p99_ms: 1 of 2 cells agree within the intervals" in text
    assert len(pd.read_csv(tmp_path / "c.csv")) == 4

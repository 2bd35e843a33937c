"""The repeatability study's table, from synthetic run files of its three presets."""

import pytest

from sidecar_bench.conditions import Condition
from sidecar_bench.synthetic import write_model_run

import repeatability_study

CONDITIONS = [Condition("go", 0.25, 2048, 3, 5), Condition("next", 0.5, 2048, 0, 0)]


def test_study_compares_the_designs_on_every_condition(tmp_path):
    for preset, duration in (("study-30s", 30.0), ("study-10s", 10.0), ("study-10s-warm", 10.0)):
        for condition in CONDITIONS:
            for repeat in (1, 2, 3):
                write_model_run(
                    tmp_path / preset / "runs", condition, duration_s=duration, repeat=repeat
                )
    frame = repeatability_study.main(str(tmp_path), str(tmp_path / "out"))
    assert len(frame) == len(CONDITIONS) * len(repeatability_study.DESIGNS)
    single = frame[frame["design"] == "1 x 30 s"]
    # One 30 s run's interval is judged by the two other 30 s runs.
    assert set(single["rps_other_runs_inside"]) <= {"0/2", "1/2", "2/2"}
    assert (frame["rps_lo"] <= frame["rps"]).all() and (frame["rps"] <= frame["rps_hi"]).all()
    text = (tmp_path / "out" / "repeatability.md").read_text()
    assert "| design | RPS interval width |" in text
    assert "3 x 10 s + 5 s warm-up" in text


def test_missing_study_runs_say_which_preset_to_run(tmp_path):
    with pytest.raises(SystemExit, match="preset=study-30s"):
        repeatability_study.main(str(tmp_path), str(tmp_path / "out"))

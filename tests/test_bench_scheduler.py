"""The scheduler benchmark on the real Snakefile: a copy whose image and run jobs are stubs makes every run file."""

import pytest

import bench_scheduler
from workflow_helpers import ROOT


@pytest.mark.workflow
def test_a_pass_makes_every_run_file_of_the_preset_with_stub_jobs(tmp_path):
    targets = bench_scheduler.stub_project(tmp_path, "quick")
    assert len(targets) == 8 and targets[0].endswith("rep1.parquet")
    assert (
        not (tmp_path / "results").exists()
        and (tmp_path / "Snakefile").read_text() == (ROOT / "Snakefile").read_text()
    )
    wall = bench_scheduler.one_pass(tmp_path, targets, "greedy")
    assert wall > 0 and all((tmp_path / target).read_text() == "{}" for target in targets)
    # A second pass starts from nothing again.
    bench_scheduler.one_pass(tmp_path, targets[:1], "ilp")
    assert not (tmp_path / targets[1]).exists() and (tmp_path / targets[0]).exists()


def test_the_report_has_each_schedulers_median(monkeypatch):
    walls = iter([8.0, 12.0, 10.0, 14.0])
    monkeypatch.setattr(bench_scheduler, "stub_project", lambda dest, preset: ["a", "b"])
    monkeypatch.setattr(bench_scheduler, "one_pass", lambda project, targets, s: next(walls))
    report = bench_scheduler.main("article", ["greedy", "ilp"], 2)
    assert [p["scheduler"] for p in report["passes"]] == ["greedy", "ilp", "greedy", "ilp"]
    assert report["run_jobs"] == 2
    assert report["s_per_run_job_median"] == {"greedy": 4.5, "ilp": 6.5}

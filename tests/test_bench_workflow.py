"""The workflow benchmark's accounting: which runs it asks for, and a run's load from its file and its log."""

import yaml

import bench_workflow
from workflow_helpers import ROOT


def test_the_runs_asked_for_are_every_first_repetition_before_any_second():
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["preset"] = "quick"
    files = bench_workflow.run_files(config, None)
    assert len(files) == 4 * 2 and len(set(files)) == 8
    assert all(f.endswith("rep1.parquet") for f in files[:4])
    assert all(f.endswith("rep2.parquet") for f in files[4:])
    assert bench_workflow.run_files(config, 3) == files[:3]


def test_a_runs_load_starts_its_warm_up_before_its_window():
    meta = {
        "window": {
            "start": "2026-12-03T03:00:10.250+00:00",
            "end": "2026-12-03T03:00:20.250+00:00",
        },
        "load": {"warmup_s": 5},
    }
    start, end = bench_workflow.load_span(meta)
    assert end - start == 15.0


def test_the_apps_start_is_read_from_the_runs_log(tmp_path):
    log = tmp_path / "rep1.log"
    log.write_text("2026-12-03 03:00:01 INFO next_x: app ready after 9.5 s\n")
    assert bench_workflow.ready_s(log) == 9.5
    log.write_text("no such line\n")
    assert bench_workflow.ready_s(log) is None
    assert bench_workflow.ready_s(tmp_path / "missing.log") is None

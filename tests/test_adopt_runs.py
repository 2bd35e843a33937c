"""Taking over another preset's runs: only the same condition, measured the same way on the image built now."""

import json
import os
from pathlib import Path

import yaml

from sidecar_bench.conditions import Condition
from sidecar_bench.synthetic import write_model_run

import adopt_runs

ROOT = Path(__file__).resolve().parents[1]
SMALL = Condition("go", 0.5, 2048, 1, 25)
OTHER = Condition("go", 0.25, 2048, 3, 5)


def config_file(tmp_path: Path, target_load: dict) -> Path:
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["sets"]["small"] = dict(
        app=["go"], vcpu=[0.5], memory_mb=[2048], sidecar_count=[1], sidecar_load_pct=[25]
    )
    config["sets"]["both"] = dict(
        app=["go"],
        vcpu=[0.25, 0.5],
        memory_mb=[2048],
        sidecar_count=[1, 3],
        sidecar_load_pct=[5, 25],
    )
    config["presets"]["from"] = {
        "sets": ["both"],
        "repeats": 3,
        "load": {"duration_s": 5, "warmup_s": 0},
    }
    config["presets"]["to"] = {"sets": ["small"], "repeats": 2, "load": target_load}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def measured(tmp_path: Path) -> Path:
    results = tmp_path / "results"
    runs = results / "from" / "runs"
    for repeat in (1, 2, 3):
        write_model_run(runs, SMALL, duration_s=5, repeat=repeat)
    write_model_run(runs, OTHER, duration_s=5)
    images = results / "images"
    images.mkdir(parents=True)
    record = images / "go-sidecar.json"
    record.write_text(json.dumps({"hosts": {"local": "sha256:synthetic"}}))
    os.utime(record, (1, 1))  # built before the runs
    return results


def test_the_same_condition_measured_the_same_way_is_taken_over_and_nothing_else(tmp_path):
    results = measured(tmp_path)
    config = config_file(tmp_path, {"duration_s": 5, "warmup_s": 0})
    adopted, left = adopt_runs.main("from", "to", str(results), config, dry_run=True)
    assert len(adopted) == 2 and not (results / "to").exists()

    adopted, left = adopt_runs.main("from", "to", str(results), config)
    dest = results / "to" / "runs" / SMALL.id
    assert sorted(p.name for p in dest.iterdir()) == ["rep1.parquet", "rep2.parquet"]
    source = results / "from" / "runs" / SMALL.id / "rep1.parquet"
    assert (dest / "rep1.parquet").read_bytes() == source.read_bytes()
    assert (dest / "rep1.parquet").stat().st_mtime_ns == source.stat().st_mtime_ns
    assert left == {"not a condition of to": 1, "repetition above to's 2": 1}

    # Nothing is taken twice or overwritten.
    adopted, left = adopt_runs.main("from", "to", str(results), config)
    assert adopted == [] and left["to has it already"] == 2


def test_other_load_settings_or_another_image_keep_a_run_out(tmp_path):
    results = measured(tmp_path)
    adopted, left = adopt_runs.main(
        "from", "to", str(results), config_file(tmp_path, {"duration_s": 10, "warmup_s": 0})
    )
    assert adopted == [] and left["other load settings"] == 2

    config = config_file(tmp_path, {"duration_s": 5, "warmup_s": 0})
    record = results / "images" / "go-sidecar.json"
    record.write_text(json.dumps({"hosts": {"local": "sha256:rebuilt"}}))
    os.utime(record, (1, 1))
    adopted, left = adopt_runs.main("from", "to", str(results), config)
    assert adopted == [] and left["measured on another task image than the one built now"] == 2

    # The same image, but its record is newer than the runs: Snakemake would measure them again.
    record.write_text(json.dumps({"hosts": {"local": "sha256:synthetic"}}))
    adopted, left = adopt_runs.main("from", "to", str(results), config)
    assert adopted == [] and left["older than the task image's record"] == 2


ALONE_NO_LIMIT = Condition("go", 2, 2048, 0, 0)  # in FROM's matrix
ALONE_SMALL = Condition("go", 0.5, 2048, 0, 0)  # measured by FROM's calibration


def with_alone_runs(tmp_path: Path, target_load: dict) -> tuple[Path, Path]:
    """FROM's matrix holds Go alone with no CPU limit; its calibration Go alone at 0.5 vCPU."""
    results = measured(tmp_path)
    config_path = config_file(tmp_path, target_load)
    config = yaml.safe_load(config_path.read_text())
    config["calibration"] = {"no_limit_vcpu": 2}
    config["sets"]["alone"] = dict(
        app=["go"], vcpu=[2], memory_mb=[2048], sidecar_count=[0], sidecar_load_pct=[0]
    )
    config["presets"]["from"]["sets"] = ["both", "alone"]
    config_path.write_text(yaml.safe_dump(config))
    for repeat in (1, 2):
        write_model_run(results / "from" / "runs", ALONE_NO_LIMIT, duration_s=5, repeat=repeat)
        write_model_run(
            results / "from" / "calibration" / "runs", ALONE_SMALL, duration_s=5, repeat=repeat
        )
    record = results / "images" / "go.json"
    record.write_text(json.dumps({"hosts": {"local": "sha256:synthetic"}}))
    os.utime(record, (1, 1))
    return results, config_path


def test_the_calibration_takes_the_same_runs_from_the_matrix_or_the_calibration(tmp_path):
    results, config_path = with_alone_runs(tmp_path, {"duration_s": 5, "warmup_s": 0})
    adopted, left = adopt_runs.main("from", "to", str(results), config_path)
    calibration = results / "to" / "calibration" / "runs"
    assert sorted(
        p.relative_to(calibration).as_posix() for p in calibration.rglob("*.parquet")
    ) == [
        f"{ALONE_SMALL.id}/rep1.parquet",
        f"{ALONE_SMALL.id}/rep2.parquet",
        f"{ALONE_NO_LIMIT.id}/rep1.parquet",
        f"{ALONE_NO_LIMIT.id}/rep2.parquet",
    ]
    assert len(adopted) == 6 and not (results / "to" / "runs" / ALONE_NO_LIMIT.id).exists()
    assert left == {"not a condition of to": 1, "repetition above to's 2": 1}


def test_how_sidecars_burn_does_not_keep_out_a_run_without_sidecars(tmp_path):
    load = {
        "duration_s": 5,
        "warmup_s": 0,
        "sidecar_burn": "cpu",
    }  # FROM's burned by the wall clock
    results, config_path = with_alone_runs(tmp_path, load)
    adopted, left = adopt_runs.main("from", "to", str(results), config_path)
    assert {dest.parent.name for _, dest in adopted} == {ALONE_NO_LIMIT.id, ALONE_SMALL.id}
    assert left["other load settings"] == 2  # SMALL has a sidecar: its burn mode is a setting

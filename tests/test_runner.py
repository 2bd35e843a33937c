"""The runner: run files, failure counting, locks, and real measurements on the local Docker engine."""

import fcntl
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pandas as pd
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from sidecar_bench import (
    channel,
    containers,
    hey,
    hostreads,
    hosts,
    image,
    job,
    preload,
    record,
    runner,
)
from conftest import hold_engine, terminal_signals_preexec, wait_until
from sidecar_bench.conditions import Condition, LoadSettings
import sidecar_bench.measurement as measurement_module

FIXTURES = Path(__file__).parent / "fixtures" / "runner"
ROOT = Path(__file__).resolve().parents[1]


# ---- run files --------------------------------------------------------------------------------


def make_meta(condition: Condition, rows: int) -> dict:
    return {
        "format_version": 2,
        "repeat": 1,
        "condition": condition.as_dict(),
        "load": {"duration_s": 1, "concurrency": 3, "warmup_s": 0, "url": runner.WORK_URL},
        "window": {
            "start": "2026-01-01T00:00:00+00:00",
            "end": "2026-01-01T00:00:01+00:00",
            "wall_s": 1.0,
            "load_s": 1.01,
        },
        "requests": {
            "rows": rows,
            "non_2xx": 0,
            "failed": 0,
            "failed_source": "test",
            "error_distribution": {},
            "cap_reached": False,
        },
        "limits": {
            "cpu_quota_us": 25000,
            "cpu_period_us": 100000,
            "vcpu": 0.25,
            "memory_limit_bytes": 2048 * 2**20,
            "swap_limit_bytes": 0,
        },
        "host": {"cpus": 2, "busy_s": 0.5, "total_s": 2.0},
        "loadgen": {"cpu_s": 0.3},
        "cgroup": {
            "source": "cgroup-v1",
            "nr_periods": 10,
            "nr_throttled": 9,
            "throttled_s": 0.5,
            "usage_s": 0.25,
            "period_us": 100000,
            "quota_us": 25000,
        },
        "processes": [{"role": "app", "target_pct": None, "cpu_s": 0.2}],
        "container": {
            "exit_code": None,
            "oom_killed": False,
            "restart_count": 0,
            "peak_memory_bytes": 1,
        },
        "environment": {key: "x" for key in record.ENVIRONMENT_KEYS},
    }


@pytest.fixture
def two_run_files(tmp_path):
    samples = hey.parse_csv((FIXTURES / "hey-z1s-c3.csv").read_text())
    paths = []
    for condition in (Condition("go", 0.25, 2048, 0, 0), Condition("next", 1, 512, 3, 5)):
        paths.append(
            record.write_run(
                tmp_path / f"{condition.id}.parquet", samples, make_meta(condition, len(samples))
            )
        )
    return tmp_path, samples, paths


def test_run_files_read_as_one_dataset_in_pandas_pyarrow_and_duckdb(two_run_files):
    directory, samples, paths = two_run_files
    frame = pd.read_parquet(directory)
    assert len(frame) == 2 * len(samples)
    assert list(frame.columns) == record.SCHEMA.names
    assert ds.dataset(directory, format="parquet").to_table().schema.equals(record.SCHEMA)
    counts = duckdb.sql(
        f"select condition_id, count(*), min(vcpu), max(sidecar_count) from read_parquet('{directory}/*.parquet') "
        "group by all order by 1"
    ).fetchall()
    assert counts == [
        ("go_cpu0.25_mem2048_sc0_load00", len(samples), 0.25, 0),
        ("next_cpu1_mem512_sc3_load05", len(samples), 1.0, 3),
    ]


def test_read_run_returns_rows_and_meta(two_run_files):
    _, samples, paths = two_run_files
    frame, meta = record.read_run(paths[1])
    assert meta == record.read_run_meta(paths[1])
    assert meta["condition"]["total_sidecar_load_pct"] == 15.0
    assert frame["total_sidecar_load_pct"].eq(15.0).all()
    assert frame["response_time_s"].tolist() == samples["response_time_s"].tolist()


def test_a_bad_record_writes_nothing_and_keeps_the_old_file(two_run_files):
    directory, samples, paths = two_run_files
    before = paths[0].read_bytes()
    meta = make_meta(Condition("go", 0.25, 2048, 0, 0), len(samples) + 1)
    with pytest.raises(record.RunFileError, match="requests.rows"):
        record.write_run(paths[0], samples, meta)
    meta = make_meta(Condition("go", 0.25, 2048, 0, 0), len(samples))
    del meta["cgroup"]["nr_throttled"]
    with pytest.raises(record.RunFileError, match="cgroup lacks nr_throttled"):
        record.write_run(paths[0], samples, meta)
    assert paths[0].read_bytes() == before
    assert sorted(p.name for p in directory.iterdir()) == sorted(p.name for p in paths)


def test_a_run_being_written_is_invisible_to_readers_and_an_interrupted_one_leaves_nothing(
    two_run_files, monkeypatch
):
    # README: runs are written to a temporary name and renamed; a reader never sees half a run.
    directory, samples, paths = two_run_files
    complete = sorted(p.name for p in paths)
    write_table = pq.write_table
    seen = []

    def written_not_yet_renamed(table, where, **kwargs):
        write_table(table, where, **kwargs)
        seen.append(sorted(Path(f).name for f in ds.dataset(directory, format="parquet").files))
        seen.append(sorted(p.name for p in directory.glob("*.parquet")))

    def written_not_yet_renamed_hidden(table, where, **kwargs):
        written_not_yet_renamed(table, where, **kwargs)
        # Beside its final name (one file system: the rename is atomic), hidden from dataset readers.
        seen.append(
            [
                p.name.startswith(".new.parquet.")
                for p in directory.iterdir()
                if p.name.startswith(".")
            ]
        )

    monkeypatch.setattr(pq, "write_table", written_not_yet_renamed_hidden)
    meta = make_meta(Condition("go", 0.25, 2048, 0, 0), len(samples))
    record.write_run(directory / "new.parquet", samples, meta)
    assert seen == [complete, complete, [True]]

    def interrupted(table, where, **kwargs):
        write_table(table, where, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(pq, "write_table", interrupted)
    before = paths[0].read_bytes()
    with pytest.raises(KeyboardInterrupt):
        record.write_run(paths[0], samples, meta)
    assert paths[0].read_bytes() == before
    assert sorted(p.name for p in directory.iterdir()) == sorted([*complete, "new.parquet"])


def test_complete_rows_write_as_they_are_and_into_a_directory_not_yet_made(two_run_files):
    directory, samples, paths = two_run_files
    frame, meta = record.read_run(paths[1])
    again = record.write_run(directory / "deep" / "er" / "copy.parquet", frame, meta)
    copied, copied_meta = record.read_run(again)
    assert copied.equals(frame) and copied_meta == meta


def test_version_2_values_at_their_edges(two_run_files):
    directory, samples, paths = two_run_files
    meta = make_meta(Condition("go", 0.25, 2048, 0, 0), len(samples))
    meta["window"]["load_s"] = 0.5  # a window shorter than a second is a window
    record.validate_meta(meta)
    meta["host"] = None
    del meta["loadgen"]["cpu_s"]
    with pytest.raises(record.RunFileError, match=r"^run metadata loadgen lacks cpu_s$"):
        record.validate_meta(meta)
    meta = make_meta(Condition("go", 0.25, 2048, 0, 0), len(samples))
    del meta["repeat"], meta["limits"]
    with pytest.raises(
        record.RunFileError, match=r"^run metadata \(format_version 2\) lacks repeat, limits$"
    ):
        record.validate_meta(meta)
    meta = make_meta(Condition("go", 0.25, 2048, 0, 0), len(samples))
    del meta["host"]["cpus"], meta["host"]["total_s"]
    with pytest.raises(record.RunFileError, match=r"^run metadata host lacks cpus, total_s$"):
        record.validate_meta(meta)


def test_version_2_needs_its_keys_and_version_1_files_still_read(two_run_files):
    directory, samples, paths = two_run_files
    condition = Condition("go", 0.25, 2048, 0, 0)
    for section, key in record.V2_KEYS:
        meta = make_meta(condition, len(samples))
        del (meta[section] if section else meta)[key]
        name = f"{section}.{key}" if section else key
        with pytest.raises(record.RunFileError, match=rf"format_version 2\) lacks {name}"):
            record.write_run(directory / "v2.parquet", samples, meta)
    meta = make_meta(condition, len(samples))
    meta["repeat"] = 0
    with pytest.raises(record.RunFileError, match="repeat is 0"):
        record.write_run(directory / "v2.parquet", samples, meta)
    v1 = make_meta(condition, len(samples))
    v1["format_version"] = 1
    for key in ("repeat", "limits", "host", "loadgen"):
        del v1[key]
    del v1["window"]["load_s"], v1["requests"]["cap_reached"]
    assert (
        record.read_run_meta(record.write_run(directory / "v1.parquet", samples, v1))[
            "format_version"
        ]
        == 1
    )
    v1["format_version"] = 4
    with pytest.raises(
        record.RunFileError, match="format_version is 4, this code reads 1 and 2 and 3"
    ):
        record.write_run(directory / "v4.parquet", samples, v1)
    # Version 3 adds the knobs against throttling; version 2 files (no knobs) still read.
    v3 = make_meta(condition, len(samples))
    v3["format_version"] = 3
    with pytest.raises(record.RunFileError, match=r"format_version 3\) lacks knobs"):
        record.write_run(directory / "v3.parquet", samples, v3)
    v3["knobs"] = {}
    assert (
        record.read_run_meta(record.write_run(directory / "v3.parquet", samples, v3))[
            "format_version"
        ]
        == 3
    )
    assert (
        record.read_run_meta(
            record.write_run(directory / "v2.parquet", samples, make_meta(condition, len(samples)))
        )["format_version"]
        == 2
    )


def test_each_bad_metadata_value_is_named_with_what_it_should_be():
    condition = Condition("go", 0.25, 2048, 0, 0)

    def changed(change):
        meta = make_meta(condition, 10)
        change(meta)
        return meta

    nan = float("nan")
    cases = [
        (lambda m: (m.pop("load"), m.pop("environment")), "run metadata lacks load, environment"),
        (
            lambda m: m.update(format_version=True),
            "run metadata format_version is True, this code reads 1 and 2 and 3",
        ),
        (lambda m: m.update(repeat=True), "run metadata repeat is True, not a whole number >= 1"),
        (lambda m: m.update(repeat=1.0), "run metadata repeat is 1.0, not a whole number >= 1"),
        (
            lambda m: m["window"].update(load_s=0),
            "run metadata window.load_s is 0, not a number of seconds > 0",
        ),
        (
            lambda m: m["window"].update(load_s=True),
            "run metadata window.load_s is True, not a number of seconds > 0",
        ),
        (
            lambda m: m["window"].update(load_s="1"),
            "run metadata window.load_s is '1', not a number of seconds > 0",
        ),
        (
            lambda m: m["requests"].update(cap_reached=0),
            "run metadata requests.cap_reached is 0, not true/false",
        ),
        (
            lambda m: m.update(limits=None),
            "run metadata limits is None, not an object with cpu_quota_us, "
            "cpu_period_us, vcpu, memory_limit_bytes, swap_limit_bytes",
        ),
        (
            lambda m: m.update(host=[]),
            "run metadata host is [], not an object with cpus, busy_s, total_s",
        ),
        (
            lambda m: m["limits"].pop("swap_limit_bytes"),
            "run metadata limits lacks swap_limit_bytes",
        ),
        (lambda m: m["loadgen"].pop("cpu_s"), "run metadata loadgen lacks cpu_s"),
        (
            lambda m: (m["condition"].pop("id"), m["condition"].pop("app")),
            "run metadata condition lacks id, app",
        ),
        (
            lambda m: m["container"].pop("peak_memory_bytes"),
            "run metadata container lacks peak_memory_bytes",
        ),
        (
            lambda m: m["environment"].pop("hey_version"),
            "run metadata environment lacks hey_version",
        ),
        (lambda m: m["requests"].pop("failed_source"), "run metadata requests lacks failed_source"),
        (lambda m: m.update(cgroup=None), "run metadata cgroup is None, not a mapping"),
        (lambda m: m.update(environment=[]), "run metadata environment is [], not a mapping"),
        (lambda m: m["window"].pop("end"), "run metadata window lacks end"),
        (lambda m: m["window"].pop("wall_s"), "run metadata window lacks wall_s"),
        (
            lambda m: m.update(processes={}),
            "run metadata processes must be a list of {role, target_pct, cpu_s}",
        ),
        (
            lambda m: m.update(processes=[{"role": "app", "cpu_s": 1}]),
            "run metadata processes must be a list of {role, target_pct, cpu_s}",
        ),
        (
            lambda m: m["cgroup"].update(usage_s=nan),
            "run metadata is not plain JSON: Out of range float values are not JSON compliant",
        ),
    ]
    for change, message in cases:
        with pytest.raises(record.RunFileError) as err:
            record.validate_meta(changed(change))
        assert str(err.value).startswith(message), (message, str(err.value))
    # The engine may hide the host's and the load generator's counters: null is a value there.
    record.validate_meta(changed(lambda m: m.update(host=None, loadgen=None)))


def test_a_record_refuses_rows_of_another_condition_or_schema():
    samples = hey.parse_csv((FIXTURES / "hey-ok.csv").read_text())
    meta = make_meta(Condition("go", 0.25, 2048, 0, 0), len(samples))
    rows = record.RunRecord.from_samples(samples, meta).rows
    other = {**meta, "condition": Condition("go", 0.5, 2048, 0, 0).as_dict()}
    with pytest.raises(record.RunFileError) as err:
        record.RunRecord(rows, other)
    assert str(err.value) == (
        "rows carry condition ids ['go_cpu0.25_mem2048_sc0_load00'], meta says "
        "'go_cpu0.5_mem2048_sc0_load00'"
    )
    with pytest.raises(record.RunFileError, match=r"^rows do not have the run file schema"):
        record.RunRecord(rows.drop(["dns_s"]), meta)
    with pytest.raises(record.RunFileError) as err:
        record.to_table(samples)
    assert str(err.value) == (
        "run rows: missing columns ['condition_id', 'app', 'vcpu', 'memory_mb', "
        "'sidecar_count', 'sidecar_load_pct', 'total_sidecar_load_pct'], unexpected columns []"
    )
    frame = rows.to_pandas()
    frame["status_code"] = "x"
    with pytest.raises(
        record.RunFileError, match=r"^run rows do not convert to the run file schema: "
    ):
        record.to_table(frame)
    # The condition's columns repeat its values on every row, the samples keep theirs.
    table = record.RunRecord.from_samples(samples, meta).rows
    assert table.column("vcpu").unique().to_pylist() == [0.25]
    assert table.column("total_sidecar_load_pct").unique().to_pylist() == [0.0]
    assert table.column("offset_s").to_pylist() == samples["offset_s"].tolist()


def test_a_failure_record_is_refused_unless_complete_and_plain(tmp_path):
    condition = Condition("go", 0.25, 2048, 1, 5)
    good = record.failure_record(
        condition.as_dict(),
        2,
        LoadSettings().as_dict(),
        "boom",
        {
            "role": "app",
            "pid": 7,
            "exit_status": 137,
            "signal": "SIGKILL",
            "oom_killed": 1,
            "phase": "window",
            "container_status": "exited",
            "container_exit_code": 137,
        },
        "local",
        "2026-12-01T00:00:00+00:00",
    )
    assert good == {
        "failure_version": 1,
        "status": "failed",
        "condition": condition.as_dict(),
        "repeat": 2,
        "load": LoadSettings().as_dict(),
        "error": "boom",
        "process": {"role": "app", "pid": 7},
        "exit_status": 137,
        "signal": "SIGKILL",
        "oom_killed": True,
        "phase": "window",
        "container_status": "exited",
        "container_exit_code": 137,
        "host_name": "local",
        "time": "2026-12-01T00:00:00+00:00",
    }
    path = record.write_failure(tmp_path / "run.parquet", good)
    assert record.read_failure(path) == good
    with pytest.raises(record.FailedRunError) as err:
        record.read_run_meta(path)
    assert str(err.value) == (
        f"{path}: a failure record, not a measured run (go_cpu0.25_mem2048_sc1_load05 rep 2 "
        "failed inside the measured window: app (pid 7) killed by SIGKILL, OOM-killed True); "
        "delete it (or rerun with --forcerun) to measure the run again"
    )
    cases = [
        ({"signal": None, "time": None}, None),
        ({"status": "measured"}, "failure record has status 'measured', version 1"),
        ({"failure_version": 2}, "failure record has status 'failed', version 2"),
        ({"repeat": 0}, "failure record repeat is 0, not a whole number >= 1"),
        ({"repeat": True}, "failure record repeat is True, not a whole number >= 1"),
        (
            {"condition": {"id": condition.id}},
            "failure record condition lacks app, vcpu, memory_mb, sidecar_count, "
            "sidecar_load_pct, total_sidecar_load_pct",
        ),
        ({"exit_status": float("inf")}, "failure record is not plain JSON"),
    ]
    for change, message in cases:
        if message is None:
            record.validate_failure({**good, **change})
            continue
        with pytest.raises(record.RunFileError) as err:
            record.validate_failure({**good, **change})
        assert str(err.value).startswith(message), str(err.value)
    lacking = {key: value for key, value in good.items() if key not in ("phase", "host_name")}
    with pytest.raises(record.RunFileError) as err:
        record.validate_failure(lacking)
    assert str(err.value) == "failure record lacks phase, host_name"
    # A run file is not a failure record.
    run = record.write_run(
        tmp_path / "measured.parquet",
        hey.parse_csv((FIXTURES / "hey-ok.csv").read_text()),
        make_meta(condition, 40),
    )
    assert record.read_failure(run) is None


def test_analysis_reads_name_the_file_and_keep_a_failure_a_failure(tmp_path):
    from sidecar_bench import runfile

    samples = hey.parse_csv((FIXTURES / "hey-ok.csv").read_text())
    condition = Condition("go", 0.25, 2048, 0, 0)
    run = record.write_run(tmp_path / "run.parquet", samples, make_meta(condition, len(samples)))
    assert runfile.read_meta(run) == record.read_run_meta(run)
    columns = runfile.read_columns(run, ["response_time_s", "status_code"])
    assert list(columns) == ["response_time_s", "status_code"]
    assert columns["response_time_s"].tolist() == samples["response_time_s"].tolist()
    assert runfile.read_failure(run) is None
    broken = tmp_path / "broken.parquet"
    broken.write_bytes(b"not parquet")
    with pytest.raises(
        record.RunFileError,
        match=rf"^{broken}: not a readable Parquet run file \(.*\); rerun its "
        r"condition$",
    ):
        runfile.read_meta(broken)
    assert runfile.read_failure(broken) is None
    with pytest.raises(record.RunFileError) as err:
        runfile.read_columns(run, ["response_time_s", "nope"])
    assert (
        str(err.value) == f"{run}: cannot read columns ['response_time_s', 'nope'] (no column nope)"
    )
    with pytest.raises(record.RunFileError) as err:
        runfile.read_columns(broken, ["response_time_s"])
    assert str(err.value).startswith(f"{broken}: cannot read columns ['response_time_s'] (")
    assert "Parquet" in str(err.value)  # Arrow's own reason, not a missing column
    v4 = make_meta(condition, len(samples))
    v4["format_version"] = 4
    table = record.RunRecord.from_samples(samples, make_meta(condition, len(samples))).rows
    import pyarrow.parquet as pq

    pq.write_table(
        table.replace_schema_metadata({record.METADATA_KEY: json.dumps(v4).encode()}),
        tmp_path / "v4.parquet",
    )
    with pytest.raises(record.RunFileError) as err:
        runfile.read_meta(tmp_path / "v4.parquet")
    assert str(err.value) == (
        f"{tmp_path / 'v4.parquet'}: run metadata format_version is 4, this code reads 1 and 2 "
        "and 3"
    )
    failure = record.failure_record(
        condition.as_dict(),
        1,
        LoadSettings().as_dict(),
        "boom",
        {"role": "app", "pid": 7, "exit_status": 1, "phase": "start"},
        "local",
        "t",
    )
    failed = record.write_failure(tmp_path / "failed.parquet", failure)
    with pytest.raises(record.FailedRunError) as err:
        runfile.read_meta(failed)
    assert str(err.value).startswith(
        f"{failed}: a failure record, not a measured run ("
    ) and not str(err.value).startswith(f"{failed}: {failed}")
    assert runfile.read_failure(failed) == failure
    # A damaged failure record (no condition) is still refused as a failure, saying it cannot tell which.
    pq.write_table(
        record.SCHEMA.empty_table().replace_schema_metadata(
            {record.FAILURE_KEY: json.dumps({"status": "failed"}).encode()}
        ),
        tmp_path / "damaged.parquet",
    )
    with pytest.raises(record.FailedRunError) as err:
        record.read_run_meta(tmp_path / "damaged.parquet")
    assert str(err.value) == (
        f"{tmp_path / 'damaged.parquet'}: a failure record, not a measured run (?); delete it "
        "(or rerun with --forcerun) to measure the run again"
    )
    bad = {**failure, "repeat": 0}
    pq.write_table(
        record.SCHEMA.empty_table().replace_schema_metadata(
            {record.FAILURE_KEY: json.dumps(bad).encode()}
        ),
        tmp_path / "bad-failure.parquet",
    )
    with pytest.raises(record.RunFileError) as err:
        runfile.read_failure(tmp_path / "bad-failure.parquet")
    assert (
        str(err.value)
        == f"{tmp_path / 'bad-failure.parquet'}: failure record repeat is 0, not a whole number >= 1"
    )


# ---- failure counting, progress ---------------------------------------------------------------


def test_a_failed_runs_line_says_which_process_died_how_and_where():
    # README, "Failed runs": the summary's failure text, one line per failed repetition.
    base = {
        "condition": {"id": "go_cpu0.25_mem2048_sc1_load05"},
        "repeat": 2,
        "phase": "window",
        "oom_killed": False,
    }
    cases = [
        (
            {"process": {"role": "app", "pid": 10}, "signal": "SIGKILL", "exit_status": 137},
            "go_cpu0.25_mem2048_sc1_load05 rep 2 failed inside the measured window: app (pid 10) killed by SIGKILL, "
            "OOM-killed False",
        ),
        (
            {
                "process": {"role": "proxy", "pid": 11},
                "signal": None,
                "exit_status": 1,
                "phase": "start",
                "oom_killed": True,
            },
            "go_cpu0.25_mem2048_sc1_load05 rep 2 failed before the measured window: sidecar proxy (pid 11) exited with "
            "status 1, OOM-killed True",
        ),
        (
            {"process": {"role": "proxy", "pid": 11}, "exit_status": 0},
            "go_cpu0.25_mem2048_sc1_load05 rep 2 failed inside the measured window: sidecar proxy (pid 11) exited with "
            "status 0, OOM-killed False",
        ),
        (
            {"process": {"role": "agent", "pid": 12}},
            "go_cpu0.25_mem2048_sc1_load05 rep 2 failed inside the measured window: sidecar agent (pid 12) gone, "
            "OOM-killed False",
        ),
        (
            {"process": None, "container_status": "running", "oom_killed": True},
            "go_cpu0.25_mem2048_sc1_load05 rep 2 failed inside the measured window: another process of the task, "
            "OOM-killed True",
        ),
        (
            {"process": {"role": None}, "container_status": "exited", "container_exit_code": 137},
            "go_cpu0.25_mem2048_sc1_load05 rep 2 failed inside the measured window: the task (exit code 137), "
            "OOM-killed False",
        ),
    ]
    for failure, text in cases:
        assert record.failure_text({**base, **failure}) == text


def tcp(name: str) -> dict:
    return runner.parse_tcp_counters((FIXTURES / name).read_text())


def test_refused_connections_count_as_failed_even_with_no_rows():
    failed, evidence = runner.count_failed(
        0, 5, 5, tcp("snmp-before.txt"), tcp("snmp-after-refused.txt")
    )
    assert failed == 10
    assert evidence["tcp_attempt_fails"] == 10


def test_answers_hey_did_not_record_count_as_failed():
    clean = tcp("snmp-before.txt")
    assert runner.count_failed(100, 7, 107, clean, clean)[0] == 0
    assert runner.count_failed(100, 7, 110, clean, clean) == (
        3,
        {
            "served_not_recorded": 3,
            "tcp_attempt_fails": 0,
            "tcp_estab_resets": 0,
            "tcp_reset_connections": 0,
            "tcp_active_opens": 0,
        },
    )


def with_resets(counters: dict, resets: int) -> dict:
    return {**counters, "EstabResets": counters["EstabResets"] + resets}


def test_a_reset_seen_by_both_ends_of_one_connection_is_one_failure():
    # Client and server share the network namespace: one reset connection counts up to twice.
    clean = tcp("snmp-before.txt")
    failed, evidence = runner.count_failed(100, 0, 100, clean, with_resets(clean, 2))
    assert (
        failed == 1 and evidence["tcp_estab_resets"] == 2 and evidence["tcp_reset_connections"] == 1
    )
    # An odd count: at least one reset was seen by one end only, so round up.
    assert runner.count_failed(100, 0, 100, clean, with_resets(clean, 3))[0] == 2


def test_answers_past_heys_row_cap_are_not_failures():
    clean = tcp("snmp-before.txt")
    rows = hey.MAX_ROWS
    assert runner.count_failed(rows, 0, rows + 5000, clean, clean, cap_reached=True)[0] == 0
    assert (
        runner.count_failed(rows, 0, rows + 5000, clean, with_resets(clean, 4), cap_reached=True)[0]
        == 2
    )
    assert runner.count_failed(rows, 0, rows + 5000, clean, clean, cap_reached=False)[0] == 5000


def limits(quota=25000, period=100000, memory=2048 * 2**20, swap=0):
    return runner.cgroup.Limits(
        cpu_quota_us=quota, cpu_period_us=period, memory_limit_bytes=memory, swap_limit_bytes=swap
    )


def test_limits_read_back_must_be_the_conditions():
    condition = Condition("go", 0.25, 2048, 0, 0)
    runner.check_limits(condition, limits(), nr_periods=30)
    runner.check_limits(condition, limits(quota=25050), nr_periods=30)  # within 1e-3 vCPU
    with pytest.raises(
        runner.RunError,
        match=r"go_cpu0.25_mem2048_sc0_load00: expected a CPU limit of 0.25 vCPU, "
        r"the task's cgroup has quota 50000 / period 100000 us = 0.5 vCPU",
    ):
        runner.check_limits(condition, limits(quota=50000), nr_periods=30)
    with pytest.raises(runner.RunError, match=r"found cpu quota -1"):
        runner.check_limits(condition, limits(quota=-1), nr_periods=30)
    with pytest.raises(
        runner.RunError,
        match=r"expected a memory limit of 2048 MiB \(2147483648 bytes\), the task's "
        r"cgroup has 536870912 bytes",
    ):
        runner.check_limits(condition, limits(memory=512 * 2**20), nr_periods=30)
    with pytest.raises(runner.RunError, match=r"the task's cgroup has no memory limit$"):
        runner.check_limits(condition, limits(memory=-1), nr_periods=30)
    with pytest.raises(runner.RunError, match="nr_periods did not increase"):
        runner.check_limits(condition, limits(), nr_periods=0)
    # One period counted is enough.
    runner.check_limits(condition, limits(), nr_periods=1)


def test_a_run_fails_unless_its_cgroup_allows_no_swap():
    # README: "the memory limit is the condition's, with no swap".
    condition = Condition("go", 0.25, 2048, 0, 0)
    runner.check_limits(condition, limits(swap=0), nr_periods=30)
    prefix = (
        r"go_cpu0.25_mem2048_sc0_load00: expected no swap \(memory \+ swap limited to the memory limit, "
        r"2147483648 bytes\), the task's cgroup "
    )
    # The smallest swap there is: one page.
    with pytest.raises(
        runner.RunError, match=prefix + r"allows 4096 bytes \(0.00390625 MiB\) of swap"
    ):
        runner.check_limits(condition, limits(swap=4096), nr_periods=30)
    with pytest.raises(
        runner.RunError, match=prefix + r"allows 1073741824 bytes \(1024 MiB\) of swap"
    ):
        runner.check_limits(condition, limits(swap=2**30), nr_periods=30)
    with pytest.raises(
        runner.RunError, match=prefix + r"allows unlimited swap .*No swap limit support"
    ):
        runner.check_limits(condition, limits(swap=-1), nr_periods=30)
    with pytest.raises(runner.RunError, match=prefix + r"does not account swap .*swapaccount=1"):
        runner.check_limits(condition, limits(swap=None), nr_periods=30)


def test_every_refusal_of_the_read_back_says_what_was_found_and_what_to_do():
    condition = Condition("go", 0.25, 2048, 0, 0)
    messages = {
        None: "go_cpu0.25_mem2048_sc0_load00: expected a CPU limit of 0.25 vCPU on the task's cgroup, found no "
        "cgroup limit files",
        limits(
            memory=None
        ): "go_cpu0.25_mem2048_sc0_load00: expected a memory limit of 2048 MiB (2147483648 bytes), "
        "the task's cgroup has no memory limit file",
        limits(
            swap=None
        ): "go_cpu0.25_mem2048_sc0_load00: expected no swap (memory + swap limited to the memory "
        "limit, 2147483648 bytes), the task's cgroup does not account swap (no "
        "memory.memsw.limit_in_bytes or memory.swap.max): the kernel cannot hold the task to no "
        "swap; enable swap accounting on the host (cgroup v1: boot with swapaccount=1) and rerun",
        limits(
            swap=-1
        ): "go_cpu0.25_mem2048_sc0_load00: expected no swap (memory + swap limited to the memory "
        "limit, 2147483648 bytes), the task's cgroup allows unlimited swap (the engine stores this "
        'too when the kernel cannot limit swap: `docker info` then warns "No swap limit support")',
    }
    for found, message in messages.items():
        with pytest.raises(runner.RunError) as err:
            runner.check_limits(condition, found, nr_periods=30)
        assert str(err.value) == message
    with pytest.raises(runner.RunError) as err:
        runner.check_limits(condition, limits(), nr_periods=-2)
    assert str(err.value) == (
        "go_cpu0.25_mem2048_sc0_load00: the task cgroup's nr_periods did not increase over the "
        "window (delta -2): its CPU counters are not the task's own (cgroup v2 without the cpu "
        "controller delegated to containers?); enable it and rerun"
    )
    # A quota 0.2 % of a CPU off is another condition (the read-back tolerance is for rounding only).
    with pytest.raises(runner.RunError, match="= 0.252 vCPU"):
        runner.check_limits(condition, limits(quota=25200), nr_periods=30)
    with pytest.raises(runner.RunError, match="= 0.248 vCPU"):
        runner.check_limits(condition, limits(quota=24800), nr_periods=30)


def test_limits_beyond_the_host_are_refused_and_the_host_itself_is_enough():
    info = {"NCPU": 2, "MemTotal": 4 * 2**30}
    # All the host has is allowed: every CPU and all its memory (2 vCPU cells are flagged host-bound, not refused).
    runner.check_host_capacity(info, Condition("go", 2, 4096, 0, 0), "big", "ssh://me@big")
    with pytest.raises(runner.RunError) as err:
        runner.check_host_capacity(info, Condition("go", 2.5, 2048, 0, 0), "big", "ssh://me@big")
    assert str(err.value) == (
        "go_cpu2.5_mem2048_sc0_load00: vcpu 2.5 is above the 2 CPUs of host 'big' "
        "(ssh://me@big); lower vcpu in config.yaml or measure on a larger host"
    )
    with pytest.raises(runner.RunError) as err:
        runner.check_host_capacity(info, Condition("go", 1, 4097, 0, 0), "big", "ssh://me@big")
    assert str(err.value) == (
        "go_cpu1_mem4097_sc0_load00: memory_mb 4097 is above the 4096 MiB of host 'big' "
        "(ssh://me@big); lower memory_mb in config.yaml or measure on a larger host"
    )
    # An engine that does not say what it has is not refused for it.
    runner.check_host_capacity({}, Condition("go", 64, 2**20, 0, 0), "far", "tcp://far:2376")


def test_a_run_checks_the_engine_info_its_job_has_just_read_without_asking_again(tmp_path):
    # job.main reads the engine's info for its own capacity check and hands it on: one request fewer a run.
    def no_second_request():
        raise AssertionError("client.info() called again")

    client = SimpleNamespace(api=SimpleNamespace(base_url="tcp://far:2376"), info=no_second_request)
    with pytest.raises(runner.RunError, match="vcpu 2 is above the 1 CPUs of host 'far'"):
        runner.run_condition(
            client,
            Condition("go", 2, 2048, 0, 0),
            LoadSettings(duration_s=1),
            "task",
            "loadgen",
            tmp_path / "run.parquet",
            "far",
            info={"NCPU": 1},
        )
    assert not (tmp_path / "run.parquet").exists()


def test_failed_requests_are_counted_from_the_windows_deltas_not_the_totals():
    before = {"ActiveOpens": 1000, "AttemptFails": 100, "EstabResets": 40}
    after = {"ActiveOpens": 1010, "AttemptFails": 103, "EstabResets": 44}
    failed, evidence = runner.count_failed(500, 2000, 2500, before, after)
    assert failed == 3 + 2
    assert evidence == {
        "served_not_recorded": 0,
        "tcp_attempt_fails": 3,
        "tcp_estab_resets": 4,
        "tcp_reset_connections": 2,
        "tcp_active_opens": 10,
    }
    # The larger source wins: 7 answers hey has no row for beat 5 refused or reset.
    assert runner.count_failed(500, 2000, 2507, before, after)[0] == 7
    with pytest.raises(runner.RunError) as err:
        runner.count_failed(500, 2000, 2499, before, after)
    assert str(err.value) == (
        "the app's /stats served count rose by 499 but hey recorded 500 responses: the app "
        "restarted or /stats does not count /work responses"
    )


def test_tcp_counters_by_name_and_a_namespace_without_them():
    assert tcp("snmp-after-refused.txt")["AttemptFails"] == 10
    with pytest.raises(runner.RunError) as err:
        runner.parse_tcp_counters("Ip: Forwarding\nIp: 1\n")
    assert str(err.value) == "/proc/net/snmp has no Tcp: lines: 'Ip: Forwarding\\nIp: 1\\n'"


def test_the_apps_served_count_and_tcp_counters_come_from_one_probe():
    snmp = (FIXTURES / "snmp-before.txt").read_text()
    counters, served = runner.parse_netns_probe(f'{snmp}@@stats\n{{"served": 1234}}\n')
    assert served == 1234 and counters == tcp("snmp-before.txt")
    for answer in ("curl: (7) Failed to connect", '{"count": 3}', '["served"]'):
        with pytest.raises(runner.RunError) as err:
            runner.parse_netns_probe(f"{snmp}@@stats\n{answer}\n")
        assert str(err.value) == f'the app\'s /stats did not answer {{"served": N}}: {answer!r}'


def test_a_warm_up_and_the_reads_after_it_are_one_exec_that_keeps_heys_status_and_drops_its_output():
    # The real script under the host's sh: the warm-up's output goes nowhere, its exit status comes
    # first, then BEFORE_SCRIPT (here /stats does not answer: no app on the host's port).
    warmup = ["sh", "-c", "echo row; echo oops >&2; exit 3"]
    done = subprocess.run(
        ["sh", "-c", measurement_module.WARMUP_THEN_BEFORE, "warm-up", *warmup],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.stdout.startswith("@@before 3\n"), done.stdout
    assert "row" not in done.stdout and "oops" not in done.stderr
    assert "@@netns\n" in done.stdout and "@@stats" in done.stdout


def _answering_server():
    """An HTTP server on a free loopback port that answers every GET with 200."""
    import http.server

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_readiness_then_the_warm_up_and_its_reads_are_one_exec_under_a_real_shell():
    # The real script under the host's sh: poll until the URL answers, print when (the engine's clock), run the
    # warm-up (its output dropped, its status kept), then BEFORE_SCRIPT (here /stats does not answer: no app on
    # the host's port 8080), and last the clock again; the exec's status is the reads'.
    server = _answering_server()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/work"
        warmup = ["sh", "-c", "echo row; echo oops >&2; sleep 0.3; exit 3"]
        done = subprocess.run(
            ["sh", "-c", measurement_module.READY_THEN_WARMUP, "ready+warm-up", url, "20", "0.05"]
            + warmup,
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        server.shutdown()
    out = done.stdout
    assert out.startswith("@@ready "), out
    ready_at = float(out.split("\n", 1)[0].split()[1])
    assert "\n@@before 3\n" in out and "row" not in out and "oops" not in done.stderr
    assert "@@netns\n" in out and "@@stats" in out
    end_at = float(out.rpartition("\n@@end ")[2])
    assert 0.3 <= end_at - ready_at < 5
    assert done.returncode != 0  # the reads' status: /stats did not answer
    # Without a warm-up: the same clock readings around the reads.
    server = _answering_server()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/work"
        done = subprocess.run(
            ["sh", "-c", measurement_module.READY_SCRIPT, "ready", url, "20", "0.05"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    finally:
        server.shutdown()
    assert done.stdout.startswith("@@ready ") and "@@netns\n" in done.stdout, done.stdout
    assert float(done.stdout.rpartition("\n@@end ")[2]) >= float(done.stdout.split()[1])
    # An app that never answers: the poll's last answer and the status that says "not ready", no warm-up.
    done = subprocess.run(
        ["sh", "-c", measurement_module.READY_THEN_WARMUP, "ready+warm-up", "http://127.0.0.1:9/"]
        + ["2", "0.01", "sh", "-c", "echo warm-up ran"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == measurement_module.NOT_READY
    assert done.stdout == "@@last 000\n"


def _measurement(load=None):
    m = measurement_module.Measurement(
        None,
        Condition("go", 0.5, 2048, 0, 0),
        load or LoadSettings(duration_s=2, warmup_s=1),
        None,
        None,
        "r",
    )
    m.task = SimpleNamespace(status="running", reload=lambda: None)
    return m


def test_a_closed_loops_warm_up_runs_in_the_readiness_exec_and_its_time_is_not_the_apps_start(
    caplog,
):
    snmp = (FIXTURES / "snmp-before.txt").read_text()
    m = _measurement()
    execs = []
    status = 0

    def loadgen_exec(cmd):
        execs.append(cmd)
        time.sleep(
            0.5
        )  # the exec: readiness, then 0.4 s of warm-up and reads on the engine's clock
        return containers.ExecResult(
            0,
            f"@@ready 1000.10\n@@before {status}\n cpu X\n0.1.4\n@@netns\n{snmp}@@stats\n"
            '{"served": 7}\n@@end 1000.50\n',
            "",
        )

    m.loadgen_exec = loadgen_exec
    ready_s = m.wait_ready(1)
    assert 0.1 <= ready_s < 0.5, ready_s  # 0.5 or more: the warm-up was not taken off
    assert m.before == (" cpu X\n0.1.4\n", tcp("snmp-before.txt"), 7)
    assert len(execs) == 1
    assert execs[0][:3] == ["sh", "-c", measurement_module.READY_THEN_WARMUP]
    assert execs[0][4:5] == [m.work_url]
    # The warm-up's hey prints its summary, not the CSV nobody reads (the same load, less work after it).
    assert execs[0][7:] == m.hey_command(1, "/dev/null", csv=False) and "-z" in execs[0]
    assert "csv" not in execs[0][7:] and "csv" in m.hey_command(1, "/dev/null")
    assert "warm-up" not in caplog.text
    status = 124
    with caplog.at_level(logging.WARNING):
        m.wait_ready(1)
    assert "go_cpu0.5_mem2048_sc0_load00: the warm-up's hey exited with 124" in caplog.text
    # A `date` without %N: no clock to take the warm-up off with, so the exec's whole time (an upper bound).
    m.loadgen_exec = lambda cmd: (
        time.sleep(0.2),
        containers.ExecResult(
            0, f'@@ready N\n@@before 0\n p\n@@netns\n{snmp}@@stats\n{{"served": 7}}\n@@end N\n', ""
        ),
    )[1]
    assert m.wait_ready(1) >= 0.2
    # Without a warm-up, or an open loop's: readiness and the reads alone, the reads' time taken off too.
    execs.clear()
    m.loadgen_exec = lambda cmd: (
        execs.append(cmd),
        time.sleep(0.5),
        containers.ExecResult(
            0,
            f'@@ready 7.00\n cpu Y\n@@netns\n{snmp}@@stats\n{{"served": 9}}\n\n@@end 7.40\n',
            "",
        ),
    )[2]
    ready_s = m.wait_ready()
    assert 0.1 <= ready_s < 0.5 and m.before[0] == " cpu Y\n" and m.before[2] == 9, ready_s
    assert execs[0][2] == measurement_module.READY_SCRIPT and len(execs[0]) == 7
    m.open_load = measurement_module.OpenLoad(100, None)
    m.wait_ready(1)
    assert execs[1][2] == measurement_module.READY_SCRIPT and len(execs[1]) == 7


def test_a_warm_up_of_its_own_is_the_load_then_the_reads_in_an_exec_of_their_own():
    # What the runner does for an open loop's warm-up (its generator is another container): here the same two
    # steps on the load generator, the warm-up's load first, the before-window reads after it.
    snmp = (FIXTURES / "snmp-before.txt").read_text()
    m = _measurement()
    execs = []

    def loadgen_exec(cmd):
        execs.append(cmd)
        return containers.ExecResult(0, f' cpu Z\n@@netns\n{snmp}@@stats\n{{"served": 3}}\n', "")

    m.loadgen_exec = loadgen_exec
    m.warm_up(1)
    assert execs == [m.hey_command(1, "/dev/null"), ["sh", "-c", measurement_module.BEFORE_SCRIPT]]
    assert m.before == (" cpu Z\n", tcp("snmp-before.txt"), 3)


def test_a_failed_read_after_the_fused_warm_up_is_not_an_app_that_never_answered():
    m = _measurement()
    m.loadgen_exec = lambda cmd: containers.ExecResult(
        7, "@@ready 5.0\n@@before 0\n probe\n@@netns\n\n@@end 6.0\n", "curl: (7) refused"
    )
    with pytest.raises(runner.RunError) as err:
        m.wait_ready(1)
    assert "reading /stats and /proc/net/snmp failed: curl: (7) refused" in str(err.value)


def test_the_windows_exec_takes_the_reads_after_it_and_keeps_heys_status_output_and_time():
    snmp = (FIXTURES / "snmp-before.txt").read_text()
    csv_text = "response-time,status-code\n0.0100,200\n"
    m = _measurement()
    execs = []
    status = 0

    def loadgen_exec(cmd):
        execs.append(cmd)
        time.sleep(0.3)
        if cmd[2] == measurement_module.AFTER_SCRIPT:
            return containers.ExecResult(0, f'{snmp}@@stats\n{{"served": 4}}\n\n@@csv\nown', "")
        return containers.ExecResult(
            0,
            f"@@usage_ns 10\n@@start_uptime 5.5\n@@usage_ns 30\n@@hey {status} 100.25\n"
            f'{snmp}@@stats\n{{"served": 8}}\n\n@@csv\n{csv_text}\n@@end 100.45\n',
            "hey: some warning\n@@hey\ncurl: slow",
        )

    m.loadgen_exec = loadgen_exec
    result, wall = m.window(2)
    assert execs[0][:4] == ["sh", "-c", measurement_module.WINDOW_THEN_AFTER, "window"]
    assert execs[0][4] == measurement_module.LOADGEN_CSV
    assert execs[0][5:] == m.hey_command(2, measurement_module.LOADGEN_CSV)
    assert result == containers.ExecResult(
        0, "@@usage_ns 10\n@@start_uptime 5.5\n@@usage_ns 30\n", "hey: some warning\n"
    )
    assert m.after.stderr == "curl: slow"  # the reads' errors are not hey's
    assert hey.parse_loadgen_usage(result.stdout) == pytest.approx(20e-9)
    # The reads' 0.2 s (engine's clock) are not hey's: the load's wall time is the exec's less them.
    assert 0.09 <= wall < 0.3, wall  # 0.3 or more: the reads were not taken off
    tcp_after, served, csv_read = m.after_window()
    assert (tcp_after, served, csv_read) == (tcp("snmp-before.txt"), 8, csv_text)
    assert len(execs) == 1
    status = 2
    m.after = None
    assert m.window(2)[0].exit_code == 2
    # An exec cut off before hey's end: hey failed, and after_window reads on its own.
    m.after = None
    m.loadgen_exec = lambda cmd: (
        execs.append(cmd),
        containers.ExecResult(0, "@@usage_ns 10\n", "")
        if cmd[3] == "window"
        else loadgen_exec(cmd),
    )[1]
    assert m.window(2)[0].exit_code == -1
    assert m.after_window()[1:] == (4, "own")
    assert execs[-1][2] == measurement_module.AFTER_SCRIPT


def test_the_windows_script_under_a_real_shell_gives_heys_status_then_the_reads_and_the_csv(
    tmp_path,
):
    csv_file = tmp_path / "hey.csv"
    fake_hey = ["sh", "-c", f'echo "@@usage_ns 1"; printf "a,b\\n1,2\\n" > {csv_file}; exit 2']
    done = subprocess.run(
        ["sh", "-c", measurement_module.WINDOW_THEN_AFTER, "window", str(csv_file), *fake_hey],
        capture_output=True,
        text=True,
        timeout=30,
    )
    head, _, rest = done.stdout.partition("@@hey ")
    assert head == "@@usage_ns 1\n" and rest.startswith("2 ")
    # Here /stats does not answer (no app on the host's port 8080): the reads fail, the CSV is not read.
    assert done.returncode != 0 and "@@csv" not in rest and "\n@@end " in rest


def test_the_role_whose_process_is_gone_or_replaced_is_named():
    def snapshot(processes):
        line = "{pid} (x) S 1 1 1 0 -1 0 0 0 0 0 1 0 0 0 20 0 1 0 {start} 0 0"
        return runner.cgroup.TaskSnapshot(
            counters=None,
            roles={"app": 10, "proxy": 11, "agent": 12},
            clk_tck=100,
            processes=tuple(
                runner.cgroup.parse_proc_stat(line.format(pid=pid, start=start))
                for pid, start in processes
            ),
        )

    before = snapshot([(10, 500), (11, 501), (12, 502)])
    nobody = {"role": None, "pid": None, "exit_status": None, "signal": None}
    assert (
        runner._role_gone(before, snapshot([(10, 500), (11, 501), (12, 502), (13, 900)])) == nobody
    )
    assert runner._role_gone(before, snapshot([(10, 500), (12, 502)])) == {
        **nobody,
        "role": "proxy",
        "pid": 11,
    }
    # The same pid started again later is another process.
    assert runner._role_gone(before, snapshot([(10, 500), (11, 501), (12, 777)])) == {
        **nobody,
        "role": "agent",
        "pid": 12,
    }


def test_an_exit_status_above_128_is_a_signal_and_128_itself_is_not():
    line = "entrypoint: app (pid 7) exited with status {}; stopping the sidecars\n"
    assert runner.process_exit(line.format(129))["signal"] == "SIGHUP"
    assert runner.process_exit(line.format(128))["signal"] is None
    assert (
        runner.process_exit(line.format(128 + 70))["signal"] == "signal 70"
    )  # no such signal: its number
    assert runner.process_exit("no such line") == {
        "role": None,
        "pid": None,
        "exit_status": None,
        "signal": None,
    }
    assert runner.describe_exit(runner.process_exit("")) == (
        "the entrypoint logged no process exit (the whole task was killed)"
    )


def test_swap_is_checked_from_the_files_a_task_reads_on_either_hierarchy():
    condition = Condition("go", 0.25, 512, 0, 0)
    v1 = {
        "/sys/fs/cgroup/cpu/cpu.cfs_quota_us": "25000\n",
        "/sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes": f"{512 * 2**20}\n",
    }
    v2 = {
        "/sys/fs/cgroup/cpu.max": "25000 100000\n",
        "/sys/fs/cgroup/memory.max": f"{512 * 2**20}\n",
    }
    # docker run --memory 512m --memory-swap 512m, as the runner starts the task.
    for files in (
        {**v1, "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": f"{512 * 2**20}\n"},
        {**v2, "/sys/fs/cgroup/memory.swap.max": "0\n"},
    ):
        runner.check_limits(condition, runner.cgroup.parse_limits(files), nr_periods=30)
    # --memory-swap 1g: 512 MiB of swap; --memory-swap -1: unlimited; kernel without swap accounting: no file.
    refused = {
        "allows 536870912 bytes": (
            {**v1, "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": f"{2**30}\n"},
            {**v2, "/sys/fs/cgroup/memory.swap.max": f"{512 * 2**20}\n"},
        ),
        "allows unlimited swap": (
            {**v1, "/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": "9223372036854771712\n"},
            {**v2, "/sys/fs/cgroup/memory.swap.max": "max\n"},
        ),
        "does not account swap": (v1, v2),
    }
    for message, cases in refused.items():
        for files in cases:
            with pytest.raises(runner.RunError, match=message):
                runner.check_limits(condition, runner.cgroup.parse_limits(files), nr_periods=30)


def test_swap_from_the_engine_when_no_cgroup_file_is_readable():
    mib = 2**20
    # Docker's MemorySwap is memory + swap: equal to Memory is no swap; -1 unlimited (also stored when the kernel
    # cannot limit swap); a memory limit without --memory-swap is stored as twice the memory.
    for memory_swap, swap in ((512 * mib, 0), (512 * mib + 4096, 4096), (-1, -1), (0, 512 * mib)):
        applied = runner.cgroup.limits_from_host_config(
            {"NanoCpus": 250_000_000, "Memory": 512 * mib, "MemorySwap": memory_swap}
        )
        assert applied.swap_limit_bytes == swap, memory_swap
    # No memory limit: nothing to say about swap.
    assert (
        runner.cgroup.limits_from_host_config(
            {"NanoCpus": 250_000_000, "MemorySwap": -1}
        ).swap_limit_bytes
        is None
    )


def test_limits_from_the_engine_when_no_cgroup_file_is_readable():
    applied = runner.cgroup.limits_from_host_config(
        {
            "NanoCpus": 250_000_000,
            "CpuPeriod": 0,
            "CpuQuota": 0,
            "Memory": 2048 * 2**20,
            "MemorySwap": 2048 * 2**20,
        }
    )
    assert applied.as_dict() == {
        "cpu_quota_us": 25000,
        "cpu_period_us": 100000,
        "vcpu": 0.25,
        "memory_limit_bytes": 2048 * 2**20,
        "swap_limit_bytes": 0,
        "cpu_burst_us": None,
        "cpu_shares": None,
        "cpu_weight": None,
        "cpuset_cpus": None,
    }


def test_the_load_generator_exits_on_its_own_after_every_step_could_have_ended():
    # A killed workflow cannot remove it; `sleep infinity` kept it (and the task's namespace) for ever.
    def deadline(**settings) -> int:
        load = LoadSettings(**{"duration_s": 30, "warmup_s": 5, "ready_timeout_s": 120, **settings})
        return runner.Measurement(
            None, Condition("go", 1, 2048, 0, 0), load, None, None, "run"
        ).loadgen_deadline_s()

    # It outlives the longest run: the whole ready timeout, then the warm-up and the window, each hey run
    # until it is killed (HEY_GRACE_S past its duration); and not much longer: within 5 minutes of that.
    longest = 120 + (5 + runner.HEY_GRACE_S) + (30 + runner.HEY_GRACE_S)
    assert longest < deadline() <= longest + 300
    # Every second a step may take is a second more.
    for setting in ("duration_s", "warmup_s", "ready_timeout_s"):
        assert (
            deadline(
                **{setting: {"duration_s": 31, "warmup_s": 6, "ready_timeout_s": 121}[setting]}
            )
            == deadline() + 1
        )
    # The task outlives the load generator, which runs in its network namespace.
    measurement = runner.Measurement(
        None, Condition("go", 1, 2048, 0, 0), LoadSettings(), None, None, "run"
    )
    assert measurement.task_deadline_s() > measurement.loadgen_deadline_s()


def test_repeat_must_be_a_whole_number_from_one(tmp_path):
    for bad in (0, 1.0, True):
        with pytest.raises(
            runner.RunError, match=rf"go_cpu1_mem2048_sc0_load00: repeat {bad!r} is not"
        ):
            runner.run_condition(
                None,
                Condition("go", 1, 2048, 0, 0),
                LoadSettings(),
                "t",
                "l",
                tmp_path / "x.parquet",
                repeat=bad,
            )


def test_fewer_answers_than_rows_means_the_app_restarted():
    clean = tcp("snmp-before.txt")
    with pytest.raises(runner.RunError, match="restarted"):
        runner.count_failed(100, 7, 50, clean, clean)


def test_progress_line_counts_existing_run_files_and_estimates_the_rest(tmp_path):
    files = [tmp_path / f"{i}.parquet" for i in range(4)]
    files[0].touch()
    files[2].touch()
    load = LoadSettings(duration_s=30)
    line = job.progress_line(
        "start",
        "go_x",
        "local",
        load,
        {"total": 4, "run_files": [str(f) for f in files], "overhead_s": 30},
    )
    assert line == "sidecar-bench: start go_x rep 1 on local [2/4 done, ETA 2m]"
    assert (
        job.progress_line("done", "go_x", "h", load, None, repeat=3)
        == "sidecar-bench: done go_x rep 3 on h"
    )


def test_the_eta_gives_each_remaining_run_its_own_apps_warm_up(tmp_path):
    # 2 Go and 3 Next.js runs to go: 2 x (5 + 10 + 5) + 3 x (30 + 10 + 5) = 175 s, whichever app starts.
    files = [tmp_path / app / f"rep{r}.parquet" for app in ("go_a", "next_b") for r in (1, 2, 3)]
    files[0].parent.mkdir()
    files[0].touch()
    load = LoadSettings(duration_s=10, warmup_s=5, app_warmup_s={"next": 30})
    progress = {"total": 6, "run_files": [str(f) for f in files], "overhead_s": 5}
    for condition in ("go_a", "next_b"):
        line = job.progress_line("start", condition, "local", load, progress)
        assert line.endswith("[1/6 done, ETA 3m]"), line  # 175 s, rounded up to whole minutes
    # Without the files (a count only) every run is estimated at this run's app.
    counted = {"total": 6, "done": 1, "overhead_s": 5}
    assert job.progress_line("start", "go_a", "local", load, counted).endswith(
        "ETA 2m]"
    )  # 5 x 20 s
    assert job.progress_line("start", "next_b", "local", load, counted).endswith(
        "ETA 4m]"
    )  # 5 x 45 s


# ---- real engine ------------------------------------------------------------------------------

import docker  # noqa: E402


def image_for(client, tag):
    """The image, built from the project's sources if this engine lacks it (never skipped)."""
    try:
        return client.images.get(tag)
    except docker.errors.ImageNotFound:
        base = image.ensure_base(client, "debian:bookworm-slim", "debootstrap")
        variant = "loadgen" if tag == image.image_tag("loadgen") else tag.split(":")[1]
        return client.images.get(image.ensure_variant(client, variant, base))


@pytest.fixture()
def engine():
    """The engine's measurement lock, for tests that measure without job.main."""
    yield from hold_engine("tests/test_runner.py")


def leftovers(client, condition: Condition) -> list:
    return client.containers.list(
        all=True,
        filters={
            "label": [
                f"{runner.PROJECT_LABEL}={runner.PROJECT}",
                f"{runner.CONDITION_LABEL}={condition.id}",
            ]
        },
    )


# Memory sizes no experiment uses, so that concurrent runs of the real matrix are not mistaken for leftovers.
GO_TEST = Condition("go", 0.25, 2040, 1, 10)


@pytest.mark.docker
def test_a_task_whose_cgroup_allows_swap_is_refused_naming_the_swap(client, engine):
    # The runner's read-back on real cgroups: the task's own files (as the snapshot reads them inside the
    # container) and, for an engine whose files are unreadable, the engine's HostConfig.
    base = image.ensure_base(client, "debian:bookworm-slim", "debootstrap")
    condition = Condition("go", 0.25, 2041, 0, 0)
    mib = 2**20
    cases = {
        2041 * mib: None,
        2041 * mib + 64 * mib: r"allows 67108864 bytes \(64 MiB\) of swap",
        -1: "allows unlimited swap",
    }
    for memswap, refusal in cases.items():
        task = client.containers.run(
            base,
            ["sleep", "120"],
            detach=True,
            nano_cpus=250_000_000,
            mem_limit=f"{2041 * mib}",
            memswap_limit=memswap,
            network_mode="none",
            labels=runner.labels(condition, f"swap-test-{memswap}", "task"),
            **runner.hardening(runner.TASK_TMPFS),
        )
        try:
            snapshot = runner.exec_in(client, task.id, ["sh", "-c", runner.cgroup.SNAPSHOT_SCRIPT])
            task.reload()
            read_back = {
                "cgroup": runner.cgroup.parse_snapshot(snapshot.stdout).limits,
                "engine": runner.cgroup.limits_from_host_config(task.attrs["HostConfig"]),
            }
        finally:
            task.remove(force=True)
        for source, limits in read_back.items():
            if refusal is None:
                runner.check_limits(condition, limits, nr_periods=1)
                assert limits.swap_limit_bytes == 0, source
            else:
                with pytest.raises(
                    runner.RunError,
                    match=rf"^go_cpu0.25_mem2041_sc0_load00: expected no swap "
                    rf".*the task's cgroup {refusal}",
                ):
                    runner.check_limits(condition, limits, nr_periods=1)
    assert leftovers(client, condition) == []


@pytest.mark.docker
def test_go_run_writes_requests_throttling_and_sidecar_cpu(client, engine, tmp_path):
    image_for(client, "sidecar-bench/task:go-sidecar")
    load = LoadSettings(duration_s=3, concurrency=10, ready_timeout_s=60)
    out = tmp_path / f"{GO_TEST.id}.parquet"
    runner.run_condition(
        client,
        GO_TEST,
        load,
        "sidecar-bench/task:go-sidecar",
        "sidecar-bench/loadgen:latest",
        out,
        "local",
    )
    frame, meta = record.read_run(out)
    assert len(frame) > 100 and frame["status_code"].eq(200).all()
    assert meta["requests"]["failed"] == 0 and meta["requests"]["rows"] == len(frame)
    cpu = meta["cgroup"]
    assert cpu["source"] == "cgroup-v1" and cpu["quota_us"] == 25000 and cpu["period_us"] == 100000
    assert 0 < cpu["nr_throttled"] <= cpu["nr_periods"] <= 60
    # The cgroup cannot use more than its quota over the window (plus one period of slack).
    assert cpu["usage_s"] <= 0.25 * (cpu["wall_s"] + 0.2)
    app, proxy = meta["processes"]
    assert (app["role"], proxy["role"], proxy["target_pct"]) == ("app", "proxy", 10.0)
    # The sidecar busy-loops 10 ms of wall clock per 100 ms; while the saturated cgroup is
    # throttled it gets less CPU than that, never more (with a tick of slack).
    assert 0 < proxy["cpu_s"] <= 0.10 * cpu["wall_s"] * 1.2 + 0.02
    assert app["cpu_s"] + proxy["cpu_s"] == pytest.approx(cpu["usage_s"], abs=0.06)
    assert meta["container"]["oom_killed"] is False and meta["container"]["peak_memory_bytes"] > 0
    env = meta["environment"]
    assert env["image_variant"] == "go-sidecar" and env["hey_version"].startswith("0.1.4")
    assert env["cgroup_version"] == "1" and env["engine_id"] == client.info()["ID"]
    assert meta["window"]["wall_s"] >= 3
    assert meta["repeat"] == 1 and meta["format_version"] == 3 and meta["knobs"] == {}
    assert meta["limits"] == {
        "cpu_quota_us": 25000,
        "cpu_period_us": 100000,
        "vcpu": 0.25,
        "memory_limit_bytes": 2040 * 2**20,
        "swap_limit_bytes": 0,
        "cpu_burst_us": 0,
        "cpu_shares": 1024,
        "cpu_weight": None,
        "cpuset_cpus": f"0-{client.info()['NCPU'] - 1}",
    }
    assert (cpu["nr_bursts"], cpu["burst_s"]) == (0, 0.0)
    host = meta["host"]
    assert host["cpus"] == client.info()["NCPU"] and 0 < host["busy_s"] <= host["total_s"]
    # All CPUs over the CPU window (on the uptime clock); tick accounting on an idle CPU lags by a few
    # ticks here, 3 % over 3 s, which is why the busy share is busy_s / total_s from the same counters.
    window_s = cpu["start_lead_s"] + meta["window"]["load_s"] + cpu["end_lag_s"]
    assert host["total_s"] == pytest.approx(host["cpus"] * window_s, rel=0.1), (host, window_s)
    assert meta["loadgen"]["cpu_s"] > 0 and meta["requests"]["cap_reached"] is False
    assert leftovers(client, GO_TEST) == []
    # The task's snapshots were read from this host, as on every local engine whose runner may (hostreads.py).
    assert env["task_reads"] in (("host",) if os.geteuid() == 0 else ("host", "exec"))


@pytest.mark.docker
def test_a_run_whose_task_is_read_by_exec_makes_the_same_checks(
    client, engine, tmp_path, monkeypatch
):
    # What a remote engine's runs do (and SIDECAR_BENCH_TASK_READS=exec asks for): the snapshots by an exec in
    # the task. The same counters, roles and limits come back.
    image_for(client, "sidecar-bench/task:go-sidecar")
    monkeypatch.setenv(hostreads.ENV, "exec")
    out = tmp_path / "run.parquet"
    runner.run_condition(
        client,
        GO_TEST,
        LoadSettings(duration_s=2, concurrency=10, ready_timeout_s=60),
        "sidecar-bench/task:go-sidecar",
        "sidecar-bench/loadgen:latest",
        out,
        "local",
    )
    _, meta = record.read_run(out)
    cpu = meta["cgroup"]
    assert meta["environment"]["task_reads"] == "exec"
    assert cpu["source"] == "cgroup-v1" and 0 < cpu["nr_throttled"] <= cpu["nr_periods"]
    app, proxy = meta["processes"]
    assert (
        (app["role"], proxy["role"]) == ("app", "proxy") and app["cpu_s"] > 0 and proxy["cpu_s"] > 0
    )
    assert meta["limits"]["cpu_quota_us"] == 25000 and meta["limits"]["swap_limit_bytes"] == 0
    assert leftovers(client, GO_TEST) == []


@pytest.mark.docker
def test_a_warm_up_begins_after_the_jobs_late_imports_and_the_load_takes_two_load_generator_steps(
    client, engine, tmp_path, monkeypatch
):
    # preload.py: pandas and pyarrow are imported in a thread while the job waits on the engine; the run
    # waits for them before any load. Here the "imports" take 2 s from the run's start: the warm-up (2 s)
    # and the window come after they end, not beside them.
    # Readiness, the warm-up and the reads before the window are one step, the window's hey and the reads after
    # it another, each a command over the load generator's channel (no exec at all). The reads still bracket
    # the window alone.
    image_for(client, "sidecar-bench/task:go")
    ended = []
    late = threading.Thread(target=lambda: (time.sleep(2), ended.append(time.time())))
    monkeypatch.setattr(preload, "_thread", late)
    execs, steps = [], []
    original, original_run = client.api.exec_create, channel.Channel.run

    def exec_create(container, cmd, *args, **kwargs):
        execs.append(cmd)
        return original(container, cmd, *args, **kwargs)

    def run(self, cmd, *args, **kwargs):
        steps.append(cmd)
        return original_run(self, cmd, *args, **kwargs)

    monkeypatch.setattr(client.api, "exec_create", exec_create)
    monkeypatch.setattr(channel.Channel, "run", run)
    late.start()
    out = tmp_path / "run.parquet"
    runner.run_condition(
        client,
        Condition("go", 0.5, 2038, 0, 0),
        LoadSettings(duration_s=1, warmup_s=2, concurrency=2, ready_timeout_s=60),
        "sidecar-bench/task:go",
        "sidecar-bench/loadgen:latest",
        out,
        "local",
    )
    _, meta = record.read_run(out)
    window_start = datetime.fromisoformat(meta["window"]["start"]).timestamp()
    assert window_start - ended[0] >= 2.0, (meta["window"], ended)
    # One readiness step, or more if the app did not answer within the first (each would warm up on its answer).
    scripts = [cmd[3] for cmd in steps if cmd[:2] == ["sh", "-c"] and "hey" in cmd]
    assert set(scripts[:-1]) == {"ready+warm-up"} and scripts[-1] == "window", steps
    # hey runs over the channel only, and the task's snapshots are read from this host (hostreads.py; a root
    # runner's): no exec.
    if os.geteuid() == 0:
        assert execs == [] and meta["environment"]["task_reads"] == "host", execs
    *_, warm_up, window = (cmd for cmd in steps if "hey" in cmd)
    assert "csv" not in warm_up and "csv" in window  # the warm-up's hey formats no CSV
    # The reads before the window follow the warm-up (in its exec): the app's served count rose by the
    # window's responses alone, none of the warm-up's.
    requests = meta["requests"]
    assert requests["served_delta"] == requests["rows"] > 0 and requests["failed"] == 0, requests
    # The app's start is what is left of the first exec once its warm-up (2 s) and reads are taken off.
    assert 0 < meta["environment"]["ready_s"] < 1.5, meta["environment"]["ready_s"]
    # hey's wall time is its own exec's, less the reads after it.
    window_meta = meta["window"]
    assert window_meta["load_s"] <= window_meta["wall_s"] < window_meta["load_s"] + 1.0, window_meta


@pytest.mark.docker
def test_the_cpu_window_closes_when_the_load_stops_however_many_rows(client, engine, tmp_path):
    # hey writes its CSV after the load, ~15 µs a row, and streaming it took as long again: with the
    # snapshot after hey's exit, 24,000 rows held the CPU window open 0.44 s past the load. Above 10,000
    # rows that mistake breaks the 0.2 s bound below. 8 s of load, because a slow VM here answered
    # only 9,600 requests in 5 s (a quiet one 20,000).
    image_for(client, "sidecar-bench/task:go")
    condition = Condition("go", 2, 2043, 0, 0)
    out = tmp_path / "run.parquet"
    runner.run_condition(
        client,
        condition,
        LoadSettings(duration_s=8, concurrency=10, ready_timeout_s=60),
        "sidecar-bench/task:go",
        "sidecar-bench/loadgen:latest",
        out,
        "local",
        repeat=2,
    )
    frame, meta = record.read_run(out)
    window, cpu = meta["window"], meta["cgroup"]
    assert len(frame) > 10_000, ("too few rows to see the CSV's cost", window, cpu)
    assert window["load_s"] == pytest.approx(
        (frame["offset_s"] + frame["response_time_s"]).max(), abs=1e-6
    )
    # On the host's uptime clock (10 ms ticks): the CPU window ends within a CFS period or so of the load.
    assert -0.05 <= cpu["end_lag_s"] <= 0.2 and 0 <= cpu["start_lead_s"] <= 0.2, cpu
    # The runner's own clock adds the two snapshots' exec round trips (~0.05 s each on a quiet host,
    # more on a busy VM): the window is the lead, the load and the lag, with slack for those.
    assert 0 <= cpu["wall_s"] - window["load_s"] <= 0.2 + 0.2 + 0.1, (cpu, window)
    assert meta["repeat"] == 2


@pytest.mark.docker
def test_cpu_burning_sidecars_get_most_of_their_load_under_throttling(client, engine, tmp_path):
    # Under throttling a wall-clock sidecar loses busy time to the clock; a CPU-time one keeps spinning.
    image_for(client, "sidecar-bench/task:go-sidecar")
    condition = Condition("go", 0.25, 2039, 3, 5)
    share = {}
    for burn in ("wall", "cpu"):
        out = tmp_path / f"{burn}.parquet"
        load = LoadSettings(duration_s=3, concurrency=10, ready_timeout_s=60, sidecar_burn=burn)
        runner.run_condition(
            client,
            condition,
            load,
            "sidecar-bench/task:go-sidecar",
            "sidecar-bench/loadgen:latest",
            out,
            "local",
        )
        meta = record.read_run_meta(out)
        sidecars = [p["cpu_s"] for p in meta["processes"] if p["role"] != "app"]
        share[burn] = 100 * sum(sidecars) / meta["cgroup"]["wall_s"]
    target = condition.total_sidecar_load_pct
    # CPU-time sidecars get most of their load beside a saturating app; wall-clock ones
    # get at most theirs, and often far less (how much less varies from run to run).
    assert share["cpu"] >= 0.6 * target, share
    assert share["wall"] <= 1.2 * target, share


@pytest.mark.docker
def test_app_killed_for_memory_fails_with_the_reason_and_leaves_nothing(client, engine, tmp_path):
    # Go with three Python sidecars in 12 MiB: their anonymous memory gets the task OOM-killed every
    # time, mostly before the app answers, sometimes just after (Next.js alone in 16 MiB sometimes
    # only thrashes on its file pages until the ready timeout).
    image_for(client, "sidecar-bench/task:go-sidecar")
    condition = Condition("go", 1, 12, 3, 5)
    out = tmp_path / "run.parquet"
    with pytest.raises(
        runner.RunError,
        match=r"go_cpu1_mem12_sc3_load05: the app (exited|stopped during the measured "
        r"window)\b.*OOM-killed True\). It was OOM-killed: raise memory_mb",
    ):
        runner.run_condition(
            client,
            condition,
            LoadSettings(duration_s=3, ready_timeout_s=30),
            "sidecar-bench/task:go-sidecar",
            "sidecar-bench/loadgen:latest",
            out,
        )
    assert not out.exists() and leftovers(client, condition) == []


@pytest.mark.docker
def test_unknown_app_type_fails_with_the_entrypoints_message(client, engine, tmp_path, monkeypatch):
    image_for(client, "sidecar-bench/task:go")
    condition = Condition("go", 0.5, 2041, 0, 0)
    monkeypatch.setattr(
        measurement_module,
        "task_environment",
        lambda c, burn="wall": {"APP_TYPE": "cobol", "SIDECAR_COUNT": "0", "SIDECAR_LOAD": "0"},
    )
    with pytest.raises(
        runner.RunError, match=r"(?s)go_cpu0.5_mem2041.*exit code 64.*APP_TYPE='cobol'"
    ):
        runner.run_condition(
            client,
            condition,
            LoadSettings(duration_s=3, ready_timeout_s=30),
            "sidecar-bench/task:go",
            "sidecar-bench/loadgen:latest",
            tmp_path / "run.parquet",
        )
    assert leftovers(client, condition) == []


DRIVER = """
import sys
sys.stderr = open({log!r}, "w")
from sidecar_bench.job import main
main(condition={condition!r}, load={load!r}, hosts=[{{"name": "local", "url": None}}],
     image_refs={refs!r}, out={out!r}, lock_dir={lock_dir!r}, progress=None)
"""


def image_refs(client, tmp_path) -> dict:
    refs = {}
    for part, tag, variant in (
        ("task", "sidecar-bench/task:go-sidecar", "go-sidecar"),
        ("loadgen", "sidecar-bench/loadgen:latest", "loadgen"),
    ):
        path = tmp_path / f"{part}.json"
        path.write_text(
            json.dumps(
                {
                    "variant": variant,
                    "tag": tag,
                    "inputs_digest": "test",
                    "hosts": {"local": image_for(client, tag).id},
                }
            )
        )
        refs[part] = str(path)
    return refs


@pytest.mark.docker
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_run_leaves_no_file_and_no_container(client, tmp_path, signum):
    condition = Condition("go", 0.25, 2042, 1, 10)
    out, log = tmp_path / "run.parquet", tmp_path / "run.log"
    script = DRIVER.format(
        log=str(log),
        condition=condition.as_dict(),
        load=LoadSettings(duration_s=30, ready_timeout_s=60).as_dict(),
        refs=image_refs(client, tmp_path),
        out=str(out),
        lock_dir=str(hosts.lock_dir()),
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while "app ready" not in (log.read_text() if log.exists() else ""):
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    time.sleep(1.0)  # inside hey's window now
    assert leftovers(client, condition), "the run's containers should exist mid-measurement"
    process.send_signal(signum)
    # The clean-up does not wait for hey's 30 s window to end (it took ~1 s here; a runner that waited for the
    # load generator's exec took the rest of the window): 20 s trips only that.
    process.wait(timeout=20)
    assert process.returncode != 0
    assert f"interrupted by {signum.name}" in log.read_text()
    assert not out.exists() and list(tmp_path.glob("*.tmp")) == []
    assert leftovers(client, condition) == []


@pytest.mark.docker
def test_engine_lock_waits_for_the_other_measurement(client, tmp_path, caplog):
    lock_path = tmp_path / f"{hosts.sanitize(client.info()['ID'])}.lock"
    holder = open(lock_path, "a+")
    fcntl.flock(holder, fcntl.LOCK_EX)
    threading.Timer(1.0, lambda: fcntl.flock(holder, fcntl.LOCK_UN)).start()
    two_names = [{"name": "first", "url": None}, {"name": "same-engine", "url": None}]
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger=hosts.log.name):
        with hosts.host_lock(two_names, tmp_path, 60, "test") as (host, _):
            waited = time.monotonic() - started
    holder.close()
    # Both names are one engine, one lock: it waits on the first name instead of running at once.
    assert host["name"] == "first" and waited >= 0.9
    assert "waiting for" in caplog.text


def test_main_fails_naming_the_condition_when_no_host_answers(tmp_path):
    refs = {}
    for part in ("task", "loadgen"):
        refs[part] = tmp_path / f"{part}.json"
        refs[part].write_text(
            json.dumps(
                {
                    "variant": "go",
                    "tag": "t",
                    "inputs_digest": "d",
                    "base_image": "debian:bookworm-slim",
                    "hosts": {"other": "sha256:1"},
                }
            )
        )
    unreachable = [{"name": "local", "url": "unix:///nonexistent/docker.sock"}]
    with pytest.raises(
        runner.RunError, match=r"go_cpu1_mem2048_sc0_load00: no Docker host is reachable: local"
    ):
        job.main(
            Condition("go", 1, 2048, 0, 0).as_dict(),
            LoadSettings().as_dict(),
            unreachable,
            refs,
            str(tmp_path / "out.parquet"),
            str(tmp_path),
        )


@pytest.mark.docker
def test_a_host_the_image_rule_did_not_see_gets_its_images_built(client, tmp_path):
    # A host added after the images were built, or a cluster node: the run makes the
    # images there (here: finds them up to date) instead of failing or rerunning others.
    refs = {}
    for part, variant in (("task", "go"), ("loadgen", "loadgen")):
        refs[part] = tmp_path / f"{part}.json"
        refs[part].write_text(
            json.dumps(
                {
                    "variant": variant,
                    "tag": image.image_tag(variant),
                    "inputs_digest": "d",
                    "base_image": "debian:bookworm-slim",
                    "hosts": {"elsewhere": "sha256:0"},
                }
            )
        )
    out = tmp_path / "runs" / "go.parquet"
    condition = Condition("go", 1, 512, 0, 0)
    job.main(
        condition.as_dict(),
        LoadSettings(duration_s=1, concurrency=2).as_dict(),
        [{"name": "local", "url": None}],
        refs,
        str(out),
        str(hosts.lock_dir()),
        image_settings={"base_fallback": "debootstrap"},
        repeat=3,
    )
    meta = record.read_run_meta(out)
    assert meta["environment"]["host_name"] == "local" and meta["repeat"] == 3
    assert meta["environment"]["image_id"] == client.images.get(image.image_tag("go")).id


@pytest.mark.docker
def test_containers_of_a_run_that_died_are_removed_before_the_next(client, engine):
    # A run killed with SIGKILL cannot clean up; its task would burn CPU beside later runs.
    labels = {
        runner.PROJECT_LABEL: runner.PROJECT,
        runner.CONDITION_LABEL: "go_cpu9_mem9_sc0_load00",
    }
    stale = client.containers.run(
        image_for(client, "sidecar-bench/loadgen:latest").id,
        ["sleep", "300"],
        detach=True,
        labels=labels,
        network_mode="none",
    )
    try:
        assert stale.name in job.remove_stale_containers(client)
        assert not client.containers.list(all=True, filters={"id": stale.id})
    finally:
        try:
            stale.remove(force=True)
        except docker.errors.NotFound:
            pass


def start_watched(deadline_s: int, command: list[str]) -> subprocess.Popen:
    """The watcher as a container's entrypoint runs it (bash), its stdin a pipe as the runner's attach.
    In a process group of its own (end_group ends it all), every signal at its default as a container's
    PID 1 starts: the suite may not (a shell's background job ignores SIGINT, nohup SIGHUP, and bash
    cannot catch what it was started ignoring)."""
    return subprocess.Popen(
        containers.watched(deadline_s, command),
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=terminal_signals_preexec(),
        start_new_session=True,
    )


def catches(pid: int, signum: int) -> bool:
    """Whether process pid has a handler for signum (bash's trap): the SigCgt mask of /proc/<pid>/status."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) >> (signum - 1) & 1)
    return False


def end_group(process: subprocess.Popen) -> None:
    """Kill the watcher's whole process group, as a container's end kills its PID namespace: outside a
    container an app the watcher left (an orphan) would otherwise live on and load the machine."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
    if process.stdin:
        process.stdin.close()


def run_watched(deadline_s: int, command: list[str], timeout_s: float = 10) -> tuple[int, float]:
    """The watcher run to its end, its stdin held open: (exit status, seconds taken)."""
    started = time.monotonic()
    process = start_watched(deadline_s, command)
    try:
        return process.wait(timeout=timeout_s), time.monotonic() - started
    finally:
        end_group(process)


def test_the_watcher_returns_the_status_of_an_app_that_ends_at_once():
    # An app that exits just before the watcher's wait begins: bash's wait -n could miss it ("no such
    # job"), and the watcher lived on to its deadline, so the run timed out waiting for readiness instead
    # of naming the app's exit (1 in 30 tries once, 1 in ~200 under the parallel suite later). A plain wait
    # on the pid cannot miss it. 200 tries: every one ends at once with the app's status.
    found = [run_watched(30, ["sh", "-c", "exit 64"]) for _ in range(200)]
    assert [status for status, _ in found] == [64] * 200
    assert max(took for _, took in found) < 5


def test_the_watcher_ends_at_once_when_its_stdin_is_already_closed():
    # The reader ends before the watcher has set up or begun its wait: its signal then comes too early
    # (once, bash had no handler yet and died of SIGUSR1) or is not seen by the wait; it is handled from
    # the start and repeated every second. 200 tries: each ends with 137 within a few seconds.
    found = []
    for _ in range(200):
        started = time.monotonic()
        process = start_watched(30, ["sleep", "30"])
        process.stdin.close()
        try:
            found.append((process.wait(timeout=10), time.monotonic() - started))
        finally:
            end_group(process)
    assert [status for status, _ in found] == [137] * 200
    assert max(took for _, took in found) < 5


@pytest.mark.parametrize(
    "signum,status", [(signal.SIGTERM, 15), (signal.SIGINT, 2), (signal.SIGHUP, 1)]
)
def test_the_watcher_passes_a_signal_on_and_ends_with_the_apps_status(signum, status, tmp_path):
    # docker stop sends SIGTERM to PID 1, the watcher: the app must get it and the container must end with
    # the app's own status, not the watcher's 137.
    # The app waits in wait(2); its trap ends it with its own status. The signal is sent once the app has
    # set its trap (it says so) and the watcher has set its own (its mask of caught signals shows HUP's, the
    # last it sets; bash catches INT from its start): a fixed pause was a guess on a busy host.
    ready = tmp_path / "trapped"
    app = f"trap 'exit {status}' {signum.name[3:]}; : > {ready}; sleep 60 & wait $!"
    process = start_watched(30, ["bash", "-c", app])
    try:
        wait_until(
            lambda: ready.exists() and catches(process.pid, signal.SIGHUP),
            10,
            "the app or the watcher's trap not set within 10 s",
        )
        process.send_signal(signum)
        assert process.wait(timeout=10) == status
    finally:
        end_group(process)


def test_the_watcher_ends_the_app_at_its_deadline_and_when_its_stdin_closes():
    status, took = run_watched(1, ["sleep", "30"])
    assert status == 137 and 0.9 < took < 10
    process = start_watched(30, ["sleep", "30"])
    process.stdin.close()  # the runner's attach gone
    try:
        assert process.wait(timeout=10) == 137
    finally:
        end_group(process)


@pytest.mark.docker
def test_the_task_exits_on_its_own_after_its_deadline(client, engine):
    # The image's entrypoint runs under the watcher: should the runner's connection outlive the run (a
    # frozen runner), the app and its sidecars stop burning CPU once the run could no longer be going on.
    load = LoadSettings(duration_s=1, ready_timeout_s=30)
    measurement = runner.Measurement(
        client,
        Condition("go", 0.5, 512, 1, 5),
        load,
        image_for(client, "sidecar-bench/task:go-sidecar"),
        image_for(client, "sidecar-bench/loadgen:latest"),
        "deadline-test",
    )
    assert measurement.task_deadline_s() > measurement.loadgen_deadline_s()
    entrypoint = measurement.task_entrypoint()
    assert entrypoint[:5] == [
        "bash",
        "-c",
        runner.WATCH_SCRIPT,
        runner.WATCH_NAME,
        str(measurement.task_deadline_s()),
    ]
    assert entrypoint[5:] == measurement.task_image.attrs["Config"]["Entrypoint"]
    measurement.task_deadline_s = lambda: 3  # a short deadline for the test
    try:
        measurement.start()
        measurement.wait_ready()  # the app answers under timeout as it does without
        assert measurement.task.wait(timeout=30)["StatusCode"] == 137  # killed by its deadline
    finally:
        measurement.remove()
    assert (
        client.containers.list(
            all=True, filters={"label": f"{runner.RUN_LABEL}={measurement.run_id}"}
        )
        == []
    )


# A runner that starts one run's containers, says so, and then waits to be killed.
RUNNER_TO_KILL = """
import sys, time
import docker
from sidecar_bench import runner
from sidecar_bench.conditions import Condition, LoadSettings
client = docker.from_env()
task, loadgen, run_id = sys.argv[1:4]
measurement = runner.Measurement(client, Condition("go", 0.25, 2039, 3, 15), LoadSettings(duration_s=1),
                                 client.images.get(task), client.images.get(loadgen), run_id)
measurement.start()
measurement.wait_ready()
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.docker
def test_the_task_and_the_load_generator_stop_within_seconds_of_the_runners_kill(client, engine):
    # kill -9 leaves no clean-up to the runner: the closed attach connection ends both containers.
    task = image_for(client, "sidecar-bench/task:go-sidecar")
    loadgen = image_for(client, "sidecar-bench/loadgen:latest")
    run_id = f"kill-test-{time.time_ns()}"
    process = subprocess.Popen(
        [sys.executable, "-c", RUNNER_TO_KILL, task.id, loadgen.id, run_id],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT / "scripts",
    )
    run_filter = {"label": f"{runner.RUN_LABEL}={run_id}"}
    try:
        assert process.stdout.readline().strip() == "ready"
        running = client.containers.list(filters=run_filter)
        assert {c.labels[runner.PART_LABEL] for c in running} == {"task", "loadgen"}
        process.kill()
        process.wait(timeout=30)
        killed = time.monotonic()
        while client.containers.list(filters=run_filter, ignore_removed=True):  # running ones only
            assert time.monotonic() - killed < 15, (
                "the task or the load generator outlived the runner"
            )
            time.sleep(0.1)
        took = time.monotonic() - killed
        logging.getLogger(__name__).warning(
            "the containers stopped %.1f s after the runner's kill", took
        )
        stopped = {
            c.labels[runner.PART_LABEL]: c.attrs["State"]
            for c in client.containers.list(all=True, filters=run_filter)
        }
        # Ended by the watcher (PID 1 exits, the kernel kills the rest), not by their deadline.
        assert {part: state["ExitCode"] for part, state in stopped.items()} == {
            "task": 137,
            "loadgen": 137,
        }
    finally:
        if process.poll() is None:
            process.kill()
        for container in client.containers.list(all=True, filters=run_filter):
            container.remove(force=True)

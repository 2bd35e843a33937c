"""The runner: run files, failure counting, locks, and real measurements on the local Docker engine."""

import fcntl
import json
import logging
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow.dataset as ds
import pytest

from sidecar_bench import hey, hosts, image, job, record, runner
from conftest import hold_engine
from sidecar_bench.conditions import Condition, LoadSettings

FIXTURES = Path(__file__).parent / "fixtures" / "runner"
ROOT = Path(__file__).resolve().parents[1]


# ---- run files --------------------------------------------------------------------------------

def make_meta(condition: Condition, rows: int) -> dict:
    return {
        "format_version": 2,
        "repeat": 1,
        "condition": condition.as_dict(),
        "load": {"duration_s": 1, "concurrency": 3, "warmup_s": 0, "url": runner.WORK_URL},
        "window": {"start": "2026-01-01T00:00:00+00:00", "end": "2026-01-01T00:00:01+00:00", "wall_s": 1.0,
                   "load_s": 1.01},
        "requests": {"rows": rows, "non_2xx": 0, "failed": 0, "failed_source": "test", "error_distribution": {},
                     "cap_reached": False},
        "limits": {"cpu_quota_us": 25000, "cpu_period_us": 100000, "vcpu": 0.25,
                   "memory_limit_bytes": 2048 * 2**20, "swap_limit_bytes": 0},
        "host": {"cpus": 2, "busy_s": 0.5, "total_s": 2.0},
        "loadgen": {"cpu_s": 0.3},
        "cgroup": {"source": "cgroup-v1", "nr_periods": 10, "nr_throttled": 9, "throttled_s": 0.5, "usage_s": 0.25,
                   "period_us": 100000, "quota_us": 25000},
        "processes": [{"role": "app", "target_pct": None, "cpu_s": 0.2}],
        "container": {"exit_code": None, "oom_killed": False, "restart_count": 0, "peak_memory_bytes": 1},
        "environment": {key: "x" for key in record.ENVIRONMENT_KEYS},
    }


@pytest.fixture
def two_run_files(tmp_path):
    samples = hey.parse_csv((FIXTURES / "hey-z1s-c3.csv").read_text())
    paths = []
    for condition in (Condition("go", 0.25, 2048, 0, 0), Condition("next", 1, 512, 3, 5)):
        paths.append(record.write_run(tmp_path / f"{condition.id}.parquet", samples,
                                      make_meta(condition, len(samples))))
    return tmp_path, samples, paths


def test_run_files_read_as_one_dataset_in_pandas_pyarrow_and_duckdb(two_run_files):
    directory, samples, paths = two_run_files
    frame = pd.read_parquet(directory)
    assert len(frame) == 2 * len(samples)
    assert list(frame.columns) == record.SCHEMA.names
    assert ds.dataset(directory, format="parquet").to_table().schema.equals(record.SCHEMA)
    counts = duckdb.sql(
        f"select condition_id, count(*), min(vcpu), max(sidecar_count) from read_parquet('{directory}/*.parquet') "
        "group by all order by 1").fetchall()
    assert counts == [("go_cpu0.25_mem2048_sc0_load00", len(samples), 0.25, 0),
                      ("next_cpu1_mem512_sc3_load05", len(samples), 1.0, 3)]


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
    assert record.read_run_meta(record.write_run(directory / "v1.parquet", samples, v1))["format_version"] == 1
    v1["format_version"] = 4
    with pytest.raises(record.RunFileError, match="format_version is 4, this code reads 1 and 2 and 3"):
        record.write_run(directory / "v4.parquet", samples, v1)
    # Version 3 adds the knobs against throttling; version 2 files (no knobs) still read.
    v3 = make_meta(condition, len(samples))
    v3["format_version"] = 3
    with pytest.raises(record.RunFileError, match=r"format_version 3\) lacks knobs"):
        record.write_run(directory / "v3.parquet", samples, v3)
    v3["knobs"] = {}
    assert record.read_run_meta(record.write_run(directory / "v3.parquet", samples, v3))["format_version"] == 3
    assert record.read_run_meta(record.write_run(directory / "v2.parquet", samples, make_meta(condition, len(
        samples))))["format_version"] == 2


# ---- failure counting, progress ---------------------------------------------------------------

def tcp(name: str) -> dict:
    return runner.parse_tcp_counters((FIXTURES / name).read_text())


def test_refused_connections_count_as_failed_even_with_no_rows():
    failed, evidence = runner.count_failed(0, 5, 5, tcp("snmp-before.txt"), tcp("snmp-after-refused.txt"))
    assert failed == 10
    assert evidence["tcp_attempt_fails"] == 10


def test_answers_hey_did_not_record_count_as_failed():
    clean = tcp("snmp-before.txt")
    assert runner.count_failed(100, 7, 107, clean, clean)[0] == 0
    assert runner.count_failed(100, 7, 110, clean, clean) == (3, {
        "served_not_recorded": 3, "tcp_attempt_fails": 0, "tcp_estab_resets": 0, "tcp_reset_connections": 0,
        "tcp_active_opens": 0})


def with_resets(counters: dict, resets: int) -> dict:
    return {**counters, "EstabResets": counters["EstabResets"] + resets}


def test_a_reset_seen_by_both_ends_of_one_connection_is_one_failure():
    # Client and server share the network namespace: one reset connection counts up to twice.
    clean = tcp("snmp-before.txt")
    failed, evidence = runner.count_failed(100, 0, 100, clean, with_resets(clean, 2))
    assert failed == 1 and evidence["tcp_estab_resets"] == 2 and evidence["tcp_reset_connections"] == 1
    # An odd count: at least one reset was seen by one end only, so round up.
    assert runner.count_failed(100, 0, 100, clean, with_resets(clean, 3))[0] == 2


def test_answers_past_heys_row_cap_are_not_failures():
    clean = tcp("snmp-before.txt")
    rows = hey.MAX_ROWS
    assert runner.count_failed(rows, 0, rows + 5000, clean, clean, cap_reached=True)[0] == 0
    assert runner.count_failed(rows, 0, rows + 5000, clean, with_resets(clean, 4), cap_reached=True)[0] == 2
    assert runner.count_failed(rows, 0, rows + 5000, clean, clean, cap_reached=False)[0] == 5000


def limits(quota=25000, period=100000, memory=2048 * 2**20):
    return runner.cgroup.Limits(cpu_quota_us=quota, cpu_period_us=period, memory_limit_bytes=memory,
                                swap_limit_bytes=0)


def test_limits_read_back_must_be_the_conditions():
    condition = Condition("go", 0.25, 2048, 0, 0)
    runner.check_limits(condition, limits(), nr_periods=30)
    runner.check_limits(condition, limits(quota=25050), nr_periods=30)  # within 1e-3 vCPU
    with pytest.raises(runner.RunError, match=r"go_cpu0.25_mem2048_sc0_load00: expected a CPU limit of 0.25 vCPU, "
                                              r"the task's cgroup has quota 50000 / period 100000 us = 0.5 vCPU"):
        runner.check_limits(condition, limits(quota=50000), nr_periods=30)
    with pytest.raises(runner.RunError, match=r"found cpu quota -1"):
        runner.check_limits(condition, limits(quota=-1), nr_periods=30)
    with pytest.raises(runner.RunError, match=r"expected a memory limit of 2048 MiB \(2147483648 bytes\), the task's "
                                              r"cgroup has 536870912 bytes"):
        runner.check_limits(condition, limits(memory=512 * 2**20), nr_periods=30)
    with pytest.raises(runner.RunError, match="nr_periods did not increase"):
        runner.check_limits(condition, limits(), nr_periods=0)


def test_limits_from_the_engine_when_no_cgroup_file_is_readable():
    applied = runner.cgroup.limits_from_host_config({"NanoCpus": 250_000_000, "CpuPeriod": 0, "CpuQuota": 0,
                                                     "Memory": 2048 * 2**20, "MemorySwap": 2048 * 2**20})
    assert applied.as_dict() == {"cpu_quota_us": 25000, "cpu_period_us": 100000, "vcpu": 0.25,
                                 "memory_limit_bytes": 2048 * 2**20, "swap_limit_bytes": 0, "cpu_burst_us": None,
                                 "cpu_shares": None, "cpu_weight": None, "cpuset_cpus": None}


def test_the_load_generator_exits_on_its_own_after_every_step_could_have_ended():
    # A killed workflow cannot remove it; `sleep infinity` kept it (and the task's namespace) for ever.
    load = LoadSettings(duration_s=30, warmup_s=5, ready_timeout_s=120)
    measurement = runner.Measurement(None, Condition("go", 1, 2048, 0, 0), load, None, None, "run")
    assert measurement.loadgen_deadline_s() == 120 + 5 + 30 + 2 * runner.HEY_GRACE_S + runner.LOADGEN_GRACE_S


def test_repeat_must_be_a_whole_number_from_one(tmp_path):
    for bad in (0, 1.0, True):
        with pytest.raises(runner.RunError, match=rf"go_cpu1_mem2048_sc0_load00: repeat {bad!r} is not"):
            runner.run_condition(None, Condition("go", 1, 2048, 0, 0), LoadSettings(), "t", "l",
                                 tmp_path / "x.parquet", repeat=bad)


def test_fewer_answers_than_rows_means_the_app_restarted():
    clean = tcp("snmp-before.txt")
    with pytest.raises(runner.RunError, match="restarted"):
        runner.count_failed(100, 7, 50, clean, clean)


def test_progress_line_counts_existing_run_files_and_estimates_the_rest(tmp_path):
    files = [tmp_path / f"{i}.parquet" for i in range(4)]
    files[0].touch()
    files[2].touch()
    load = LoadSettings(duration_s=30)
    line = job.progress_line("start", "go_x", "local", load,
                                {"total": 4, "run_files": [str(f) for f in files], "overhead_s": 30})
    assert line == "sidecar-bench: start go_x rep 1 on local [2/4 done, ETA 2m]"
    assert job.progress_line("done", "go_x", "h", load, None, repeat=3) == "sidecar-bench: done go_x rep 3 on h"


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
    return client.containers.list(all=True, filters={"label": [f"{runner.PROJECT_LABEL}={runner.PROJECT}",
                                                               f"{runner.CONDITION_LABEL}={condition.id}"]})


# Memory sizes no experiment uses, so that concurrent runs of the real matrix are not mistaken for leftovers.
GO_TEST = Condition("go", 0.25, 2040, 1, 10)


@pytest.mark.docker
def test_go_run_writes_requests_throttling_and_sidecar_cpu(client, engine, tmp_path):
    image_for(client, "sidecar-bench/task:go-sidecar")
    load = LoadSettings(duration_s=3, concurrency=10, ready_timeout_s=60)
    out = tmp_path / f"{GO_TEST.id}.parquet"
    runner.run_condition(client, GO_TEST, load, "sidecar-bench/task:go-sidecar", "sidecar-bench/loadgen:latest",
                         out, "local")
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
    assert meta["limits"] == {"cpu_quota_us": 25000, "cpu_period_us": 100000, "vcpu": 0.25,
                              "memory_limit_bytes": 2040 * 2**20, "swap_limit_bytes": 0, "cpu_burst_us": 0,
                              "cpu_shares": 1024, "cpu_weight": None,
                              "cpuset_cpus": f"0-{client.info()['NCPU'] - 1}"}
    assert (cpu["nr_bursts"], cpu["burst_s"]) == (0, 0.0)
    host = meta["host"]
    assert host["cpus"] == client.info()["NCPU"] and 0 < host["busy_s"] <= host["total_s"]
    # All CPUs over the CPU window (on the uptime clock); tick accounting on an idle CPU lags by a few
    # ticks here, 3 % over 3 s, which is why the busy share is busy_s / total_s from the same counters.
    window_s = cpu["start_lead_s"] + meta["window"]["load_s"] + cpu["end_lag_s"]
    assert host["total_s"] == pytest.approx(host["cpus"] * window_s, rel=0.1), (host, window_s)
    assert meta["loadgen"]["cpu_s"] > 0 and meta["requests"]["cap_reached"] is False
    assert leftovers(client, GO_TEST) == []


@pytest.mark.docker
def test_the_cpu_window_closes_when_the_load_stops_however_many_rows(client, engine, tmp_path):
    # hey writes its CSV after the load, ~15 µs a row, and streaming it took as long again: with the
    # snapshot after hey's exit, 24,000 rows held the CPU window open 0.44 s past the load.
    image_for(client, "sidecar-bench/task:go")
    condition = Condition("go", 2, 2043, 0, 0)
    out = tmp_path / "run.parquet"
    runner.run_condition(client, condition, LoadSettings(duration_s=5, concurrency=10, ready_timeout_s=60),
                         "sidecar-bench/task:go", "sidecar-bench/loadgen:latest", out, "local", repeat=2)
    frame, meta = record.read_run(out)
    window, cpu = meta["window"], meta["cgroup"]
    assert len(frame) > 10_000, ("too few rows to see the CSV's cost", window, cpu)
    assert window["load_s"] == pytest.approx((frame["offset_s"] + frame["response_time_s"]).max(), abs=1e-6)
    # On the host's uptime clock (10 ms ticks): the CPU window ends within a CFS period or so of the load.
    assert -0.05 <= cpu["end_lag_s"] <= 0.2 and 0 <= cpu["start_lead_s"] <= 0.2, cpu
    assert cpu["wall_s"] - window["load_s"] < 0.3, (cpu, window)
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
        runner.run_condition(client, condition, load, "sidecar-bench/task:go-sidecar", "sidecar-bench/loadgen:latest",
                             out, "local")
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
    with pytest.raises(runner.RunError, match=r"go_cpu1_mem12_sc3_load05: the app (exited|stopped during the measured "
                                              r"window)\b.*OOM-killed True\). It was OOM-killed: raise memory_mb"):
        runner.run_condition(client, condition, LoadSettings(duration_s=3, ready_timeout_s=30),
                             "sidecar-bench/task:go-sidecar", "sidecar-bench/loadgen:latest", out)
    assert not out.exists() and leftovers(client, condition) == []


@pytest.mark.docker
def test_unknown_app_type_fails_with_the_entrypoints_message(client, engine, tmp_path, monkeypatch):
    image_for(client, "sidecar-bench/task:go")
    condition = Condition("go", 0.5, 2041, 0, 0)
    monkeypatch.setattr(runner, "task_environment", lambda c, burn="wall": {"APP_TYPE": "cobol", "SIDECAR_COUNT": "0",
                                                                "SIDECAR_LOAD": "0"})
    with pytest.raises(runner.RunError, match=r"(?s)go_cpu0.5_mem2041.*exit code 64.*APP_TYPE='cobol'"):
        runner.run_condition(client, condition, LoadSettings(duration_s=3, ready_timeout_s=30),
                             "sidecar-bench/task:go", "sidecar-bench/loadgen:latest", tmp_path / "run.parquet")
    assert leftovers(client, condition) == []


DRIVER = """
import sys
sys.path.insert(0, {scripts!r})
sys.stderr = open({log!r}, "w")
from sidecar_bench.job import main
main(condition={condition!r}, load={load!r}, hosts=[{{"name": "local", "url": None}}],
     image_refs={refs!r}, out={out!r}, lock_dir={lock_dir!r}, progress=None)
"""


def image_refs(client, tmp_path) -> dict:
    refs = {}
    for part, tag, variant in (("task", "sidecar-bench/task:go-sidecar", "go-sidecar"),
                               ("loadgen", "sidecar-bench/loadgen:latest", "loadgen")):
        path = tmp_path / f"{part}.json"
        path.write_text(json.dumps({"variant": variant, "tag": tag, "inputs_digest": "test",
                                    "hosts": {"local": image_for(client, tag).id}}))
        refs[part] = str(path)
    return refs


@pytest.mark.docker
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_interrupted_run_leaves_no_file_and_no_container(client, tmp_path, signum):
    condition = Condition("go", 0.25, 2042, 1, 10)
    out, log = tmp_path / "run.parquet", tmp_path / "run.log"
    script = DRIVER.format(scripts=str(ROOT / "scripts"), log=str(log), condition=condition.as_dict(),
                           load=LoadSettings(duration_s=30, ready_timeout_s=60).as_dict(),
                           refs=image_refs(client, tmp_path), out=str(out), lock_dir=str(hosts.lock_dir()))
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while "app ready" not in (log.read_text() if log.exists() else ""):
        assert process.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.1)
    time.sleep(1.0)  # inside hey's window now
    assert leftovers(client, condition), "the run's containers should exist mid-measurement"
    process.send_signal(signum)
    process.wait(timeout=60)
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
    with caplog.at_level(logging.INFO, logger="sidecar_bench.hosts"):
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
        refs[part].write_text(json.dumps({"variant": "go", "tag": "t", "inputs_digest": "d",
                                          "base_image": "debian:bookworm-slim", "hosts": {"other": "sha256:1"}}))
    unreachable = [{"name": "local", "url": "unix:///nonexistent/docker.sock"}]
    with pytest.raises(runner.RunError, match=r"go_cpu1_mem2048_sc0_load00: no Docker host is reachable: local"):
        job.main(Condition("go", 1, 2048, 0, 0).as_dict(), LoadSettings().as_dict(), unreachable,
                 refs, str(tmp_path / "out.parquet"), str(tmp_path))


@pytest.mark.docker
def test_a_host_the_image_rule_did_not_see_gets_its_images_built(client, tmp_path):
    # A host added after the images were built, or a cluster node: the run makes the
    # images there (here: finds them up to date) instead of failing or rerunning others.
    refs = {}
    for part, variant in (("task", "go"), ("loadgen", "loadgen")):
        refs[part] = tmp_path / f"{part}.json"
        refs[part].write_text(json.dumps({"variant": variant, "tag": image.image_tag(variant), "inputs_digest": "d",
                                          "base_image": "debian:bookworm-slim", "hosts": {"elsewhere": "sha256:0"}}))
    out = tmp_path / "runs" / "go.parquet"
    condition = Condition("go", 1, 512, 0, 0)
    job.main(condition.as_dict(), LoadSettings(duration_s=1, concurrency=2).as_dict(), [{"name": "local", "url": None}],
             refs, str(out), str(hosts.lock_dir()), image_settings={"base_fallback": "debootstrap"}, repeat=3)
    meta = record.read_run_meta(out)
    assert meta["environment"]["host_name"] == "local" and meta["repeat"] == 3
    assert meta["environment"]["image_id"] == client.images.get(image.image_tag("go")).id


@pytest.mark.docker
def test_containers_of_a_run_that_died_are_removed_before_the_next(client, engine):
    # A run killed with SIGKILL cannot clean up; its task would burn CPU beside later runs.
    labels = {runner.PROJECT_LABEL: runner.PROJECT, runner.CONDITION_LABEL: "go_cpu9_mem9_sc0_load00"}
    stale = client.containers.run(image_for(client, "sidecar-bench/loadgen:latest").id, ["sleep", "300"],
                                  detach=True, labels=labels, network_mode="none")
    try:
        assert stale.name in job.remove_stale_containers(client)
        assert not client.containers.list(all=True, filters={"id": stale.id})
    finally:
        try:
            stale.remove(force=True)
        except docker.errors.NotFound:
            pass


@pytest.mark.docker
def test_the_task_exits_on_its_own_after_its_deadline(client, engine):
    # The image's entrypoint runs under `timeout -s KILL`: after kill -9 of the workflow, the app and
    # its sidecars stop burning CPU once the run could no longer be going on.
    load = LoadSettings(duration_s=1, ready_timeout_s=30)
    measurement = runner.Measurement(client, Condition("go", 0.5, 512, 1, 5), load,
                                     image_for(client, "sidecar-bench/task:go-sidecar"),
                                     image_for(client, "sidecar-bench/loadgen:latest"), "deadline-test")
    assert measurement.task_deadline_s() == measurement.loadgen_deadline_s() + runner.TASK_GRACE_S
    entrypoint = measurement.task_entrypoint()
    assert entrypoint[:4] == ["timeout", "-s", "KILL", str(measurement.task_deadline_s())]
    assert entrypoint[4:] == measurement.task_image.attrs["Config"]["Entrypoint"]
    measurement.task_deadline_s = lambda: 3  # a short deadline for the test
    try:
        measurement.start()
        measurement.wait_ready()  # the app answers under timeout as it does without
        assert measurement.task.wait(timeout=30)["StatusCode"] == 137  # killed by its deadline
    finally:
        measurement.remove()
    assert client.containers.list(all=True, filters={"label": f"{runner.RUN_LABEL}={measurement.run_id}"}) == []

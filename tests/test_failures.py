"""A process of the task that dies in a run: the error, on_failure (stop | record), failure records, and how
the summaries, flags and tables show a failed condition (as failed, never as numbers)."""

import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.dataset as ds
import pytest

import aggregate_runs
import make_tables
from sidecar_bench import cgroup, flags, job, record, runfile, runjob, runner, stats
from sidecar_bench.conditions import Condition, LoadSettings
from sidecar_bench.synthetic import SMALL_SET, two_mode_samples, write_run

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "workflow" / "reference" / "article-results.csv"

# A condition whose every repetition failed, and one with one failed repetition of two.
ALL_FAILED = Condition("go", 0.25, 2048, 3, 5)
PART_FAILED = Condition("go", 0.25, 2048, 1, 5)


def failure_of(condition: Condition, repeat: int, role: str = "app", oom: bool = False) -> dict:
    died = {
        "role": role,
        "pid": 7,
        "exit_status": 137,
        "signal": "SIGKILL",
        "phase": "window",
        "oom_killed": oom,
        "container_status": "exited",
        "container_exit_code": 137 if role == "app" else 70,
    }
    return record.failure_record(
        condition.as_dict(),
        repeat,
        LoadSettings(duration_s=10).as_dict(),
        f"{condition.id}: the app stopped during the measured window; ...",
        died,
        "local",
        "2026-12-01T00:00:00+00:00",
    )


# ---- the error -------------------------------------------------------------------------------------


def test_the_entrypoints_exit_line_names_the_process_and_the_signal():
    log = (
        "entrypoint: started APP_TYPE=go SIDECAR_COUNT=1 SIDECAR_LOAD=5: app 7 proxy 9\n"
        "entrypoint: app (pid 7) exited with status 137; stopping the sidecars\n"
    )
    died = runner.process_exit(log)
    assert died == {"role": "app", "pid": 7, "exit_status": 137, "signal": "SIGKILL"}
    assert runner.describe_exit(died) == "app (pid 7) was killed by SIGKILL (status 137)"
    died = runner.process_exit(
        "entrypoint: sidecar log_router (pid 12) exited with status 1; stopping the task\n"
    )
    assert died == {"role": "log_router", "pid": 12, "exit_status": 1, "signal": None}
    assert runner.describe_exit(died) == "sidecar log_router (pid 12) exited with status 1"
    assert runner.process_exit("no such line")["role"] is None


def test_the_oom_kill_counter_is_read_from_either_cgroup_version():
    def snapshot(path: str, text: str) -> cgroup.TaskSnapshot:
        return cgroup.parse_snapshot(f"@@file {path}\n{text}@@end\n")

    v1 = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"
    assert snapshot("/sys/fs/cgroup/memory/memory.oom_control", v1).oom_kills == 2
    v2 = "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\noom_group_kill 0\n"
    assert snapshot("/sys/fs/cgroup/memory.events", v2).oom_kills == 1
    assert snapshot("/proc/uptime", "12.5 3.0\n").oom_kills is None
    # The snapshot script reads both files, so every snapshot carries the counter.
    assert all(path in cgroup.SNAPSHOT_SCRIPT for path in cgroup.OOM_FILES)


# ---- on_failure --------------------------------------------------------------------------------------


def test_on_failure_is_stop_unless_the_config_or_the_preset_says_record():
    presets = {"quick": {"sets": ["quick"]}, "keep": {"sets": ["quick"], "on_failure": "record"}}
    assert runjob.on_failure_setting({"preset": "quick", "presets": presets}) == "stop"
    assert runjob.on_failure_setting({"preset": "keep", "presets": presets}) == "record"
    assert (
        runjob.on_failure_setting({"preset": "keep", "presets": presets, "on_failure": "stop"})
        == "stop"
    )
    assert (
        runjob.on_failure_setting({"preset": "quick", "presets": presets, "on_failure": "record"})
        == "record"
    )
    with pytest.raises(runner.RunError, match="on_failure is 'maybe'"):
        runjob.on_failure_setting({"on_failure": "maybe"})


def test_the_schema_knows_on_failure_and_refuses_other_values():
    import yaml

    from sidecar_bench.experiment import ConfigError, check_config

    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    assert runjob.on_failure_setting(check_config(config)) == "stop"
    assert runjob.on_failure_setting(check_config({**config, "on_failure": "record"})) == "record"
    with pytest.raises(ConfigError, match="on_failure: 'skip' is not one of"):
        check_config({**config, "on_failure": "skip"})


# ---- failure records ---------------------------------------------------------------------------------


def test_a_failure_record_is_refused_where_samples_are_expected(tmp_path):
    path = record.write_failure(
        tmp_path / ALL_FAILED.id / "rep1.parquet", failure_of(ALL_FAILED, 1, oom=True)
    )
    assert record.read_failure(path)["process"] == {"role": "app", "pid": 7}
    for read in (record.read_run_meta, record.read_run, runfile.read_meta):
        with pytest.raises(
            record.FailedRunError,
            match=r"a failure record, not a measured run .*rep 1 failed inside "
            r"the measured window: app \(pid 7\) killed by SIGKILL, "
            r"OOM-killed True.*--forcerun",
        ):
            read(path)
    # Next to a measured run, a dataset reader over all run files reads no row of it.
    measured = write_run(
        tmp_path / PART_FAILED.id / "rep1.parquet",
        PART_FAILED,
        two_mode_samples(3, 105),
        wall_s=10.0,
    )
    assert ds.dataset([str(path), str(measured)], format="parquet").to_table().num_rows == 100
    assert record.read_failure(measured) is None


def test_a_failure_record_must_be_complete():
    failure = failure_of(ALL_FAILED, 1)
    del failure["error"]
    with pytest.raises(record.RunFileError, match="lacks error"):
        record.write_failure("/nonexistent/never-written.parquet", failure)


# ---- summaries, flags and tables ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    """The small synthetic set with ALL_FAILED's only repetition failed and PART_FAILED's second one failed."""
    root = tmp_path_factory.mktemp("failures")
    runs = []
    for condition, fast, slow, responses in SMALL_SET:
        samples = np.resize(two_mode_samples(fast, slow), responses)
        path = root / "runs" / condition.id / "rep1.parquet"
        if condition == ALL_FAILED:
            runs.append(record.write_failure(path, failure_of(condition, 1, role="proxy")))
        else:
            runs.append(
                write_run(
                    path,
                    condition,
                    samples,
                    wall_s=10.0,
                    repeat=1,
                    throttled_share=min(1.0, 0.4 + condition.total_sidecar_load_pct / 100),
                )
            )
    runs.append(
        record.write_failure(
            root / "runs" / PART_FAILED.id / "rep2.parquet", failure_of(PART_FAILED, 2, oom=True)
        )
    )
    aggregate_runs.main(
        runs=runs,
        summary_parquet=root / "summary.parquet",
        summary_csv=root / "summary.csv",
        runs_parquet=root / "runs_summary.parquet",
        runs_csv=root / "runs_summary.csv",
    )
    make_tables.main(summary=root / "summary.parquet", reference=REFERENCE, out_dir=root / "tables")
    return root


def test_failed_runs_are_rows_with_status_failed_and_no_numbers(analysed):
    per_run = pd.read_parquet(analysed / "runs_summary.parquet").set_index(
        ["condition_id", "repeat"]
    )
    failed = per_run.loc[(ALL_FAILED.id, 1)]
    assert failed["status"] == "failed" and failed["flags"] == "run_failed"
    assert "sidecar proxy (pid 7) killed by SIGKILL" in failed["failure"]
    for column in ("rps", "p99_ms", "successful", "task_cpu_pct", "app_cost_ms"):
        assert math.isnan(failed[column]), column
    oom = per_run.loc[(PART_FAILED.id, 2)]
    assert (
        oom["status"] == "failed"
        and oom["flags"] == "oom_or_restart,run_failed"
        and bool(oom["oom_killed"])
    )
    assert per_run.loc[(PART_FAILED.id, 1), "status"] == "measured"
    assert (per_run["status"] == "measured").sum() == len(SMALL_SET) - 1


def test_a_condition_pools_only_its_measured_repetitions_and_carries_the_flag(analysed, tmp_path):
    summary = pd.read_parquet(analysed / "summary.parquet").set_index("condition_id")
    part = summary.loc[PART_FAILED.id]
    assert (part["repeats"], part["failed_runs"]) == (1, 1)
    assert (
        "rep 2 failed" in part["failure"]
        and bool(part["flag_run_failed"])
        and "run_failed" in part["flags"]
    )
    # Its numbers are those of its measured repetition alone.
    alone = stats.summarise_conditions(
        stats.summarise_runs([analysed / "runs" / PART_FAILED.id / "rep1.parquet"])
    )
    assert part["rps"] == pytest.approx(alone["rps"].iloc[0])
    assert part["p99_ms"] == pytest.approx(alone["p99_ms"].iloc[0])
    assert part["successful"] == alone["successful"].iloc[0] and not math.isnan(part["app_cost_ms"])
    untouched = summary.drop(index=[PART_FAILED.id, ALL_FAILED.id])
    assert (untouched["failed_runs"] == 0).all() and not untouched["flag_run_failed"].any()


def test_a_condition_whose_repetitions_all_failed_has_no_number(analysed):
    summary = pd.read_csv(analysed / "summary.csv").set_index("condition_id")
    row = summary.loc[ALL_FAILED.id]
    assert (row["repeats"], row["failed_runs"], row["flags"]) == (0, 1, "run_failed")
    numeric = [
        c
        for c in stats.CONDITION_COLUMNS
        if c not in stats.IDENTITY_COLUMNS
        and c not in ("repeats", "failed_runs", "cap_reached", "oom_killed")
        and not c.startswith("flag")
        and not c.startswith("env_")
        and c not in ("failure", "cgroup_source", "interval_method", "load_model")
    ]
    assert all(pd.isna(row[c]) for c in numeric), [c for c in numeric if not pd.isna(row[c])]
    assert row["load_model"] == "closed"  # where its tables place it, from its failure records
    assert row["interval_method"] == "none"
    assert all(pd.isna(row[c]) for c in ("app_cost_ms", "app_cost_ms_lo"))


def test_tables_show_failed_cells_and_the_flag(analysed):
    sweep = pd.read_csv(analysed / "tables" / "load_sweep_go.csv").set_index(
        "total_sidecar_load_pct"
    )
    assert math.isnan(sweep.loc[15, "p99_ms"]) and math.isnan(sweep.loc[15, "rps"])
    assert sweep.loc[15, "flags"] == "run_failed"
    md = (analysed / "tables" / "load_sweep_go.md").read_text()
    assert (
        "| 15% | failed | 3.7 | failed | 109.1 |" in md
    )  # ours failed, the article's number beside it
    assert "cell(s) show failed: every repetition of the condition failed" in md
    assert "different environments" not in md  # a failed condition has none of its own
    grid = (analysed / "tables" / "rps_grid_go.md").read_text()
    # The +proxy row at 5 %: one repetition measured, one failed: its number with the F mark.
    proxy = next(line for line in grid.splitlines() if line.startswith("| 0.25 | +proxy"))
    assert proxy.split("|")[4].strip().startswith("290 [") and " F" in proxy.split("|")[4]
    assert "F - failed repetition" in grid


def test_the_run_failed_flag_is_documented_and_sorted_last():
    assert flags.CODES[-1] == "run_failed" and flags.FLAGS["run_failed"].mark == "F"
    assert "| run_failed | F |" in flags.__doc__
    assert flags.failed_run_flags({"oom_killed": True}) == ["oom_or_restart", "run_failed"]


def test_charts_skip_failure_records_and_failed_conditions(analysed):
    from sidecar_bench import charts

    runs = sorted((analysed / "runs").glob("*/rep*.parquet"))
    files = charts.run_files(runs)
    assert ALL_FAILED.id not in files and [r for r, _ in files[PART_FAILED.id]] == [1]
    summary = pd.read_parquet(analysed / "summary.parquet")
    assert ALL_FAILED.id not in set(charts.measured_only(summary)["condition_id"])


def test_breaking_points_assess_only_the_measured_loads(analysed):
    points = pd.read_csv(analysed / "tables" / "breaking_points.csv")
    go = points[
        (points["app"] == "go") & (points["vcpu"] == 0.25) & (points["sidecar_count"] == 3)
    ].iloc[0]
    assert (go["loads_measured"], go["load_range"]) == (2, "0-18%")  # 15 % failed


# ---- a process killed inside the measured window, on the real engine ---------------------------------------


def image_refs(client, tmp_path) -> dict:
    import docker

    from sidecar_bench import image

    refs = {}
    for part, variant in (("task", "go-sidecar"), ("loadgen", "loadgen")):
        try:
            found = client.images.get(image.image_tag(variant))
        except docker.errors.ImageNotFound:
            base = image.ensure_base(client, "debian:bookworm-slim", "debootstrap")
            found = client.images.get(image.ensure_variant(client, variant, base))
        path = tmp_path / f"{part}.json"
        path.write_text(
            json.dumps(
                {
                    "variant": variant,
                    "tag": image.image_tag(variant),
                    "inputs_digest": "test",
                    "hosts": {"local": found.id},
                }
            )
        )
        refs[part] = str(path)
    return refs


# Inside the task, as its own root (no capability needed for its own processes): SIGKILL to a role's pid.
KILL_ROLE = 'while read -r role pid; do [ "$role" = "$1" ] && kill -9 "$pid" && echo "$pid"; done < "$2"; exit 0'


class Killer(threading.Thread):
    """Waits until hey runs in the condition's load generator (the measured window has begun: no warm-up),
    lets the window run for `after_s`, then kills the task's process of `role` with SIGKILL."""

    def __init__(
        self, client, condition: Condition, role: str, after_s: float = 1.5, timeout_s: float = 1800
    ):
        super().__init__(daemon=True)
        self.client, self.condition, self.role = client, condition, role
        self.after_s, self.timeout_s = after_s, timeout_s
        self.killed_pid: int | None = None
        self.stop = threading.Event()  # set when the job is over: stop waiting for its window
        self.error: str | None = None

    def part(self, name: str):
        found = self.client.containers.list(
            filters={
                "label": [
                    f"{runner.CONDITION_LABEL}={self.condition.id}",
                    f"{runner.PART_LABEL}={name}",
                ]
            }
        )
        return found[0] if found else None

    def run(self) -> None:
        deadline = (
            time.monotonic() + self.timeout_s
        )  # the job may wait for another measurement's lease first
        try:
            while time.monotonic() < deadline and not self.stop.is_set():
                loadgen, task = self.part("loadgen"), self.part("task")
                if (
                    loadgen is not None
                    and task is not None
                    and any("hey" in " ".join(p) for p in (loadgen.top().get("Processes") or []))
                ):
                    time.sleep(self.after_s)
                    result = runner.exec_in(
                        self.client,
                        task.id,
                        ["sh", "-c", KILL_ROLE, "kill", self.role, "/run/sidecar-bench/roles"],
                    )
                    if result.exit_code != 0 or not result.stdout.strip():
                        self.error = f"kill failed: {result}"
                    else:
                        self.killed_pid = int(result.stdout.split()[0])
                    return
                time.sleep(0.1)
            self.error = "the measured window never began"
        except Exception as err:  # noqa: BLE001 - reported by the test
            self.error = f"{type(err).__name__}: {err}"


def run_job(client, tmp_path, killer: Killer, on_failure: str, out: Path):
    from sidecar_bench import hosts

    condition = killer.condition
    killer.start()
    try:
        return job.main(
            condition.as_dict(),
            LoadSettings(duration_s=8, warmup_s=0, ready_timeout_s=60).as_dict(),
            [{"name": "local", "url": None}],
            image_refs(client, tmp_path),
            str(out),
            str(hosts.lock_dir()),
            on_failure=on_failure,
        )
    finally:
        killer.stop.set()
        killer.join(timeout=60)


def leftovers(client, condition: Condition) -> list:
    return client.containers.list(
        all=True, filters={"label": f"{runner.CONDITION_LABEL}={condition.id}"}
    )


@pytest.mark.docker
def test_app_killed_inside_the_window_fails_the_run_naming_the_process(client, tmp_path):
    # Memory sizes no experiment uses, so that concurrent runs of the real matrix are not mistaken for leftovers.
    condition = Condition("go", 0.25, 2027, 1, 5)
    out = tmp_path / "runs" / condition.id / "rep1.parquet"
    killer = Killer(client, condition, "app")
    with pytest.raises(runner.AppStopped) as raised:
        run_job(client, tmp_path, killer, "stop", out)
    assert killer.error is None, killer.error
    text = str(raised.value)
    first = text.splitlines()[0]
    assert first.startswith(
        f"{condition.id}: the app stopped during the measured window; app (pid "
    ), text
    assert raised.value.failure["phase"] == "window"
    pid = raised.value.failure["pid"]
    assert pid == killer.killed_pid
    assert (
        f"app (pid {pid}) was killed by SIGKILL (status 137)" in first
        and "OOM-killed False)." in first
    ), text
    assert "entrypoint: app (pid" in text  # the log lines follow
    assert raised.value.failure["role"] == "app" and raised.value.failure["oom_killed"] is False
    assert raised.value.failure["container_exit_code"] == 137
    assert not out.exists() and not list(tmp_path.glob("runs/**/*.tmp"))
    assert leftovers(client, condition) == []


@pytest.mark.docker
def test_with_record_a_killed_sidecar_becomes_a_failure_record_shown_as_failed(client, tmp_path):
    condition = Condition("go", 0.25, 2026, 1, 5)
    out = tmp_path / "runs" / condition.id / "rep1.parquet"
    killer = Killer(client, condition, "proxy")
    path = run_job(client, tmp_path, killer, "record", out)
    assert killer.error is None, killer.error
    assert path == out and out.exists()
    failure = record.read_failure(out)
    assert failure["process"] == {"role": "proxy", "pid": killer.killed_pid}
    assert (failure["signal"], failure["exit_status"], failure["oom_killed"]) == (
        "SIGKILL",
        137,
        False,
    )
    assert (
        failure["phase"] == "window" and failure["container_exit_code"] == 70
    )  # the entrypoint's "a sidecar died"
    assert failure["condition"]["id"] == condition.id and failure["repeat"] == 1
    assert f"sidecar proxy (pid {killer.killed_pid}) was killed by SIGKILL" in failure["error"]
    with pytest.raises(record.FailedRunError):
        record.read_run(out)
    assert leftovers(client, condition) == []
    # The summaries and tables: failed, no number.
    root = tmp_path / "analysis"
    aggregate_runs.main(
        runs=[out],
        summary_parquet=root / "summary.parquet",
        summary_csv=root / "summary.csv",
        runs_parquet=root / "runs_summary.parquet",
        runs_csv=root / "runs_summary.csv",
    )
    make_tables.main(summary=root / "summary.parquet", reference=REFERENCE, out_dir=root / "tables")
    summary = pd.read_csv(root / "summary.csv").iloc[0]
    assert (summary["repeats"], summary["failed_runs"], summary["flags"]) == (0, 1, "run_failed")
    assert math.isnan(summary["rps"]) and math.isnan(summary["p99_ms"])
    assert f"sidecar proxy (pid {killer.killed_pid}) killed by SIGKILL" in summary["failure"]
    grid = (root / "tables" / "rps_grid_go.md").read_text()
    row = next(line for line in grid.splitlines() if line.startswith("| 0.25 | +proxy"))
    assert "failed" in row, row


@pytest.mark.docker
def test_with_record_an_app_killed_for_memory_is_recorded_as_oom_killed(client, tmp_path):
    # Go with three Python sidecars in 12 MiB is OOM-killed every time (test_runner.py): mostly before
    # it answers, sometimes a moment after, inside the window; both are recorded with their phase.
    from sidecar_bench import hosts

    condition = Condition("go", 1, 12, 3, 5)
    out = tmp_path / "runs" / condition.id / "rep2.parquet"
    path = job.main(
        condition.as_dict(),
        LoadSettings(duration_s=3, warmup_s=0, ready_timeout_s=30).as_dict(),
        [{"name": "local", "url": None}],
        image_refs(client, tmp_path),
        str(out),
        str(hosts.lock_dir()),
        repeat=2,
        on_failure="record",
    )
    failure = record.read_failure(path)
    assert (
        failure["oom_killed"] is True
        and failure["phase"] in ("start", "window")
        and failure["repeat"] == 2
    )
    assert "It was OOM-killed: raise memory_mb" in failure["error"]
    where = "before" if failure["phase"] == "start" else "inside"
    assert record.failure_text(failure).startswith(
        f"{condition.id} rep 2 failed {where} the measured window: "
    )
    assert leftovers(client, condition) == []


# ---- the real workflow ---------------------------------------------------------------------------------


def workflow_with_a_killed_app(client, tmp_path, memory_mb: int, *options: str):
    """A copy of the project whose one condition (Go 0.5 vCPU + 1 sidecar, 2 x 6 s) has its app killed in the first
    repetition that starts, run through the real Snakefile up to the tables: (condition, project, result,
    killer)."""
    import yaml

    from workflow_helpers import copy_project, snakemake, write_config

    condition = Condition("go", 0.5, memory_mb, 1, 10)
    project = copy_project(tmp_path / "project")
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["sets"]["failing"] = dict(
        app=["go"], vcpu=[0.5], memory_mb=[memory_mb], sidecar_count=[1], sidecar_load_pct=[10]
    )
    config["presets"]["failing"] = {
        "sets": ["failing"],
        "repeats": 2,
        "load": {"duration_s": 6, "warmup_s": 0},
    }
    write_config(project, preset="failing", sets=config["sets"], presets=config["presets"])
    killer = Killer(client, condition, "app", timeout_s=600)
    killer.start()
    try:
        done = snakemake(project, "results/failing/tables", *options, timeout=900)
    finally:
        killer.stop.set()
        killer.join(timeout=60)
    return condition, project, done, killer


@pytest.mark.docker
@pytest.mark.slow
def test_the_workflow_records_a_killed_run_as_failed_and_goes_on(client, tmp_path):
    condition, project, done, killer = workflow_with_a_killed_app(
        client, tmp_path, 2025, "--config", "on_failure=record"
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert killer.error is None, killer.error
    assert (
        f"sidecar-bench: FAILED {condition.id} rep" in output and "recorded as failed in" in output
    )
    runs = sorted((project / "results" / "failing" / "runs" / condition.id).glob("rep*.parquet"))
    statuses = sorted("failed" if record.read_failure(p) else "measured" for p in runs)
    assert statuses == ["failed", "measured"]
    summary = pd.read_csv(project / "results" / "failing" / "summary.csv").iloc[0]
    assert (summary["repeats"], summary["failed_runs"]) == (1, 1) and "run_failed" in summary[
        "flags"
    ]
    assert (
        summary["rps"] > 0
        and f"app (pid {killer.killed_pid}) killed by SIGKILL" in summary["failure"]
    )
    per_run = pd.read_csv(project / "results" / "failing" / "runs_summary.csv")
    assert sorted(per_run["status"]) == ["failed", "measured"]
    assert per_run[per_run["status"] == "failed"]["rps"].isna().all()
    # The recorded failure counts as done: nothing to do until its file is deleted.
    from workflow_helpers import snakemake

    again = snakemake(
        project, "results/failing/tables", "--dry-run", "--config", "on_failure=record", timeout=120
    )
    assert "Nothing to be done" in again.stdout + again.stderr
    assert leftovers(client, condition) == []


@pytest.mark.docker
@pytest.mark.slow
def test_on_failure_stop_through_the_workflow_names_the_process_logs_it_and_starts_nothing_else(
    client, tmp_path
):
    """The default on_failure (stop), through the real Snakefile: the job fails with the FAILED line naming the
    process, its log file holds the error, and Snakemake starts no other run (repetition 2 waits for every
    first one, so it is the job that would come next)."""
    condition, project, done, killer = workflow_with_a_killed_app(client, tmp_path, 2026)
    output = done.stdout + done.stderr
    assert killer.error is None, killer.error
    assert done.returncode != 0, output[-6000:]
    line = next(
        (
            x
            for x in output.splitlines()
            if f"sidecar-bench: FAILED {condition.id} rep 1 on local: " in x
        ),
        "",
    )
    assert f"pid {killer.killed_pid}" in line and "SIGKILL" in line, output[-6000:]
    log = project / "results" / "failing" / "logs" / "run_condition" / condition.id / "rep1.log"
    assert f"app (pid {killer.killed_pid}) was killed by SIGKILL" in log.read_text()
    assert f"start {condition.id} rep 2 " not in output
    runs = project / "results" / "failing" / "runs" / condition.id
    assert not runs.exists() or not list(runs.iterdir())
    assert not (project / "results" / "failing" / "summary.csv").exists()
    assert leftovers(client, condition) == []


@pytest.mark.docker
def test_an_oom_kill_inside_the_window_fails_the_run_even_if_the_app_survives(client, tmp_path):
    # A process started in the task mid-window asks for more than the condition's memory: the OOM killer takes it
    # (the largest), the app and the sidecar live on, and the run is not a measurement all the same.
    condition = Condition("go", 0.5, 96, 1, 5)
    out = tmp_path / "runs" / condition.id / "rep1.parquet"

    class Hog(Killer):
        def run(self) -> None:
            deadline = time.monotonic() + self.timeout_s
            while time.monotonic() < deadline and not self.stop.is_set():
                loadgen, task = self.part("loadgen"), self.part("task")
                if (
                    loadgen is not None
                    and task is not None
                    and any("hey" in " ".join(p) for p in (loadgen.top().get("Processes") or []))
                ):
                    time.sleep(self.after_s)
                    self.result = runner.exec_in(
                        self.client, task.id, ["python3", "-c", "b = bytearray(256 * 2**20)"]
                    )
                    return
                time.sleep(0.1)
            self.error = "the measured window never began"

    hog = Hog(client, condition, "none")
    with pytest.raises(runner.AppStopped) as raised:
        run_job(client, tmp_path, hog, "stop", out)
    assert hog.error is None and hog.result.exit_code == 137, (
        hog.error,
        getattr(hog, "result", None),
    )
    first = str(raised.value).splitlines()[0]
    assert first.startswith(
        f"{condition.id}: the app had a process OOM-killed during the measured window (the "
        "task cgroup's oom_kill counter rose from 0 to 1); no process of the app or its sidecars "
        "ended: the OOM killer took another process of the task"
    ), first
    assert "OOM-killed True). It was OOM-killed: raise memory_mb." in first
    assert raised.value.failure["oom_killed"] is True and raised.value.failure["role"] is None
    assert (
        raised.value.failure["phase"] == "window"
        and raised.value.failure["container_status"] == "running"
    )
    assert not out.exists() and leftovers(client, condition) == []


def test_a_failed_runs_row_and_its_conditions_row_hold_exactly_what_the_record_says(tmp_path):
    """Field by field: the identity from the record, status failed, the exit code, no window, no cgroup, no
    environment and no number; the condition's row with no repetition measured has no interval, no values
    per run, and of all flags only run_failed."""
    condition = ALL_FAILED
    path = record.write_failure(
        tmp_path / condition.id / "rep1.parquet", failure_of(condition, 1, role="proxy")
    )
    row = stats.summarise_run(path)
    assert set(row) >= set(stats.SUMMARY_COLUMNS)
    expected = {
        "condition_id": condition.id,
        "repeat": 1,
        "app": "go",
        "vcpu": 0.25,
        "memory_mb": 2048,
        "sidecar_count": 3,
        "sidecar_load_pct": 5,
        "total_sidecar_load_pct": 15,
        "duration_s": 10,
        "status": "failed",
        "run_file": str(path),
        "exit_code": 70,
        "cap_reached": False,
        "oom_killed": False,
        "load_model": "closed",
        "flags": "run_failed",
    }
    assert {key: row[key] for key in expected} == expected
    assert "sidecar proxy (pid 7) killed by SIGKILL" in row["failure"]
    for key in ("cgroup_source", "window_start"):
        assert row[key] is None, key
    assert all(row[key] is None for key in row if key.startswith("env_"))
    for column in ("rps", "p50_ms", "p99_ms", "successful", "task_cpu_pct", "nr_periods"):
        assert math.isnan(row[column]), column

    summary = stats.summarise_conditions(stats.summarise_runs([path])).iloc[0]
    assert (summary["repeats"], summary["failed_runs"]) == (0, 1)
    assert summary["interval_method"] == stats.NO_INTERVAL == "none"
    assert (summary["rps_runs"], summary["p99_ms_runs"]) == ("", "")
    assert not summary["cap_reached"] and not summary["oom_killed"]
    assert summary["cgroup_source"] is None
    assert all(summary[column] is None for column in stats.ENV_COLUMNS)
    assert "sidecar proxy (pid 7) killed by SIGKILL" in summary["failure"]
    assert summary["flags"] == "run_failed"
    raised = {c for c in summary.index if c.startswith("flag_") and summary[c]}
    assert raised == {"flag_run_failed"}
    for column in ("rps", "rps_lo", "rps_hi", "p99_ms", "p99_ms_lo", "successful"):
        assert math.isnan(summary[column]), column


def test_a_condition_whose_only_run_was_oom_killed_says_so(tmp_path):
    path = record.write_failure(
        tmp_path / ALL_FAILED.id / "rep1.parquet", failure_of(ALL_FAILED, 1, oom=True)
    )
    row = stats.summarise_run(path)
    assert row["oom_killed"] is True and row["exit_code"] == 137
    summary = stats.summarise_conditions(stats.summarise_runs([path])).iloc[0]
    assert summary["oom_killed"] and summary["repeats"] == 0
    assert summary["flags"] == "oom_or_restart,run_failed"

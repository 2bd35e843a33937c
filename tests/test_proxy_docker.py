"""A real proxy in the request path, on the real engine: the Snakefile runs a small proxy matrix with short
runs; the tests read its run files and tables, and dry-run the changes that must (and must not) rerun it."""

import contextlib
import json
import os

import pandas as pd
import pyarrow.parquet as pq
import pytest
import yaml

from workflow_helpers import ROOT, copy_project, dry_run, snakemake, write_config

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ALONE = "go_cpu0.5_mem512_sc0_load00"
HAPROXY = "go_cpu0.5_mem512_sc1_load00_px-haproxy"
NOLOG = "go_cpu0.5_mem512_sc1_load00_px-haproxy-nolog"
STANDIN = "go_cpu0.5_mem512_sc1_load05"
ALL = {ALONE, HAPROXY, NOLOG, STANDIN}
NO_LIMIT = f"{os.cpu_count() or 1:g}"
REPEATS = 2


def proxy_config():
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["sets"]["px_go"] = dict(
        app=["go"],
        vcpu=[0.5],
        memory_mb=[512],
        sidecar_count=[0, 1],
        sidecar_load_pct=[5],
        proxy=["busy-loop", "haproxy", "haproxy-nolog"],
    )
    config["presets"]["pxe2e"] = {
        "sets": ["px_go"],
        "repeats": REPEATS,
        "load": {"duration_s": 2, "warmup_s": 1, "sidecar_burn": "cpu"},
    }
    config["preset"] = "pxe2e"
    return config


# What the tests read (the proxy tables, through them the runs and their summary) and the calibration, which a change
# of the proxy must not rerun; not the article's tables and charts nor the model.
TARGETS = ("results/pxe2e/proxy", "calibration")


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The pxe2e preset, run for real once; the tests read it or dry-run it."""
    project = copy_project(tmp_path_factory.mktemp("proxy") / "project")
    write_config(project, **proxy_config())
    done = snakemake(project, *TARGETS, timeout=1500)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    return project


def metas(project):
    found = {}
    for path in sorted((project / "results" / "pxe2e" / "runs").glob("*/rep*.parquet")):
        found[(path.parent.name, int(path.stem.removeprefix("rep")))] = json.loads(
            pq.read_schema(path).metadata[b"sidecar_bench"]
        )
    return found


def test_the_load_goes_through_the_proxy_and_the_proxy_counts_what_hey_recorded(finished):
    runs = metas(finished)
    assert {cid for cid, _ in runs} == ALL
    for (cid, _), meta in runs.items():
        if cid in (HAPROXY, NOLOG):
            assert meta["load"]["url"] == "http://127.0.0.1:8000/work"
            proxy = meta["proxy"]
            assert proxy["kind"] == meta["condition"]["proxy"]
            # HAProxy's own count (its stats page) of the requests it forwarded over the window, against hey's
            # rows and the app's; it received those and at most the connections hey cut off as the warm-up and
            # the window ended (a throttled proxy may count the warm-up's after the before-read).
            assert proxy["requests"] == meta["requests"]["rows"] > 0, meta["requests"]
            assert proxy["requests"] == meta["requests"]["served_delta"]
            assert 0 <= proxy["received"] - proxy["requests"] <= 2 * meta["load"]["concurrency"]
            assert proxy["version"].startswith("2.6.") and len(proxy["config_sha256"]) == 64
            assert meta["environment"]["image_versions"]["haproxy-version"] == proxy["version"]
        else:
            assert meta["load"]["url"] == "http://127.0.0.1:8080/work"
            assert "proxy" not in meta
    for rep in range(1, REPEATS + 1):
        # One access log line per request received with the log on, no log file without it.
        assert (
            runs[(HAPROXY, rep)]["proxy"]["access_log_lines"]
            == runs[(HAPROXY, rep)]["proxy"]["received"]
        )
        assert runs[(NOLOG, rep)]["proxy"]["access_log_lines"] is None


def test_the_proxy_cpu_is_measured_like_every_role(finished):
    for (cid, _), meta in metas(finished).items():
        by_role = {p["role"]: p for p in meta["processes"]}
        if cid in (HAPROXY, NOLOG):
            assert set(by_role) == {"app", "proxy"}
            assert by_role["proxy"]["target_pct"] is None
            assert by_role["proxy"]["cpu_s"] > 0
            # The roles' CPU is part of the task cgroup's (the entrypoint's own is the rest).
            assert (
                by_role["app"]["cpu_s"] + by_role["proxy"]["cpu_s"]
                <= meta["cgroup"]["usage_s"] + 0.05
            )
    runs = pd.read_parquet(finished / "results" / "pxe2e" / "runs_summary.parquet").set_index(
        "condition_id"
    )
    assert (runs.loc[[HAPROXY, NOLOG], "proxy_cpu_pct"] > 0).all()


def test_the_proxy_tables_give_its_cost_per_request_with_an_interval(finished):
    out = finished / "results" / "pxe2e" / "proxy"
    cost = pd.read_csv(out / "proxy_cost.csv").set_index("condition_id")
    assert set(cost.index) == {HAPROXY, NOLOG}
    for cid in (HAPROXY, NOLOG):
        row = cost.loc[cid]
        # Two repetitions: a t interval with one degree of freedom, wide, maybe reaching below zero.
        assert row["proxy_cost_ms_lo"] <= row["proxy_cost_ms"] <= row["proxy_cost_ms_hi"]
        assert row["proxy_cost_ms"] > 0 and row["repeats"] == REPEATS
    comparison = pd.read_csv(out / "comparison.csv")
    assert set(comparison["setup"]) == {"alone", "haproxy", "haproxy-nolog", "busy-loop stand-in"}
    budget = pd.read_csv(out / "budget.csv").set_index("condition_id")
    assert budget.loc[HAPROXY, "budget_rps"] > 0
    assert "proxy CPU ms/request" in (out / "proxy_cost.md").read_text()
    standin = yaml.safe_load((out / "standin.yaml").read_text())
    assert list(standin["sets"]) == ["proxy_standin_go_0.5"]
    share = standin["sets"]["proxy_standin_go_0.5"]["sidecar_load_pct"][0]
    assert share == round(cost.loc[HAPROXY, "proxy_cpu_pct"], 1)


@contextlib.contextmanager
def edited(path, text):
    before = path.read_text()
    path.write_text(before + text)
    try:
        yield
    finally:
        path.write_text(before)


def test_unchanged_project_has_nothing_to_do(finished):
    assert dry_run(finished, *TARGETS).nothing_to_do


def test_changing_the_proxy_config_reruns_only_the_conditions_behind_it(finished):
    with edited(finished / "task-image" / "proxy" / "haproxy.cfg", "\n# edited\n"):
        plan = dry_run(finished, *TARGETS)
    assert plan.returncode == 0, plan.output
    assert plan.conditions == {HAPROXY, NOLOG}
    assert plan.jobs["run_condition"] == 2 * REPEATS
    assert plan.jobs["run_calibration"] == 0
    assert plan.variants == {"go-proxy"}


def test_step_two_adds_the_standins_and_reruns_nothing_measured(finished):
    standin = finished / "results" / "pxe2e" / "proxy" / "standin.yaml"
    plan = dry_run(finished, *TARGETS, "--configfile", str(standin))
    assert plan.returncode == 0, plan.output
    share = yaml.safe_load(standin.read_text())["sets"]["proxy_standin_go_0.5"]["sidecar_load_pct"][
        0
    ]
    load = f"{int(share):02d}" if share == int(share) else f"{share:g}"
    # A share that rounds to the matrix's own 5 % is that condition, already measured.
    assert plan.conditions == {f"go_cpu0.5_mem512_sc1_load{load}"} - {STANDIN}
    assert plan.jobs["build_image"] == 0

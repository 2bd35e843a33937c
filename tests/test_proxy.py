"""A real proxy in the request path, without Docker: the condition axis, the images' inputs, the proxy's
configuration, its counters, the tables, and the plans the proxy preset makes."""

import math
import re
import subprocess

import pandas as pd
import pytest
import yaml

from conftest import ROOT
from sidecar_bench import image, proxy, proxy_tables
from sidecar_bench.conditions import Condition, ConfigError, expand_set
from sidecar_bench.experiment import load_experiment
from workflow_helpers import copy_project, dry_run, write_config

PROXY_DIR = ROOT / "task-image" / "proxy"


# --- the condition axis -------------------------------------------------------------------------------


def test_the_default_proxy_keeps_every_id_and_params_as_they_were():
    condition = Condition("go", 0.25, 2048, 3, 5)
    assert condition.id == "go_cpu0.25_mem2048_sc3_load05"
    assert "proxy" not in condition.as_dict()
    assert condition.variant == "go-sidecar"
    assert Condition.from_dict(condition.as_dict()) == condition


def test_a_real_proxy_has_its_own_id_variant_and_no_set_load():
    condition = Condition("next", 0.5, 2048, 1, 0, "haproxy")
    assert condition.id == "next_cpu0.5_mem2048_sc1_load00_px-haproxy"
    assert condition.variant == "next-proxy"
    assert condition.as_dict()["proxy"] == "haproxy"
    assert Condition.from_dict(condition.as_dict()) == condition
    # Only the busy-loop sidecars after the proxy burn a set load.
    assert Condition("go", 1, 2048, 3, 5, "haproxy").total_sidecar_load_pct == 10


def test_a_real_proxy_needs_a_sidecar_slot_and_a_known_name():
    with pytest.raises(ConfigError, match=r"proxy: 'haproxy' needs sidecar_count >= 1"):
        Condition("go", 1, 2048, 0, 0, "haproxy")
    with pytest.raises(
        ConfigError, match=r"proxy: 'envoy' is not one of busy-loop, haproxy, haproxy-nolog"
    ):
        Condition("go", 1, 2048, 1, 0, "envoy")


def test_a_set_without_the_axis_is_the_busy_loop_and_a_lone_real_proxy_has_load_zero():
    axes = dict(app=["go"], vcpu=[1], memory_mb=[2048], sidecar_count=[1, 2], sidecar_load_pct=[5])
    assert [c.id for c in expand_set("s", axes)] == [
        "go_cpu1_mem2048_sc1_load05",
        "go_cpu1_mem2048_sc2_load05",
    ]
    ids = [
        c.id for c in expand_set("s", {**axes, "sidecar_count": [0, 1, 2], "proxy": ["haproxy"]})
    ]
    assert ids == [
        "go_cpu1_mem2048_sc0_load00",
        "go_cpu1_mem2048_sc1_load00_px-haproxy",
        "go_cpu1_mem2048_sc2_load05_px-haproxy",
    ]


def test_a_bad_proxy_in_the_config_names_the_key_and_the_value():
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["sets"]["proxy_real"]["proxy"] = ["envoy"]
    config["preset"] = "proxy"
    with pytest.raises(
        ConfigError, match=r"config.yaml: sets.proxy_real.proxy\[0\]: 'envoy' is not one of"
    ):
        load_experiment(config)


def test_the_proxy_preset_measures_each_app_alone_and_behind_haproxy():
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    experiment = load_experiment({**config, "preset": "proxy"})
    ids = {c.id for c in experiment.conditions}
    assert len(ids) == 24
    for app in ("go", "next"):
        for vcpu in ("0.25", "0.5", "1", "2"):
            assert f"{app}_cpu{vcpu}_mem2048_sc0_load00" in ids
            assert f"{app}_cpu{vcpu}_mem2048_sc1_load00_px-haproxy" in ids
            assert f"{app}_cpu{vcpu}_mem2048_sc1_load00_px-haproxy-nolog" in ids


# --- images -------------------------------------------------------------------------------------------


def rel(variant):
    return {p.relative_to(image.TASK_IMAGE_DIR).as_posix() for p in image.variant_inputs(variant)}


def test_the_proxy_config_is_an_input_of_the_proxy_variants_only():
    for variant in ("go-proxy", "next-proxy"):
        assert {"proxy/haproxy.cfg", "proxy/entrypoint.sh", "sidecar/sidecar.py"} <= rel(variant)
        assert "entrypoint.sh" not in rel(variant)
    for variant in ("go", "go-sidecar", "next", "next-sidecar"):
        assert not {p for p in rel(variant) if p.startswith("proxy/")}


def test_editing_the_proxy_config_changes_only_the_proxy_variants_digests(tmp_path):
    import shutil

    root = tmp_path / "task-image"
    shutil.copytree(
        image.TASK_IMAGE_DIR, root, ignore=shutil.ignore_patterns("node_modules", ".next")
    )
    variants = ("go", "go-sidecar", "next", "next-sidecar", "go-proxy", "next-proxy")
    before = {v: image.inputs_digest(v, "debian:bookworm-slim", root) for v in variants}
    with open(root / "proxy" / "haproxy.cfg", "a") as f:
        f.write("\n# edited\n")
    after = {v: image.inputs_digest(v, "debian:bookworm-slim", root) for v in variants}
    assert [v for v in variants if before[v] != after[v]] == ["go-proxy", "next-proxy"]


def test_the_article_variants_build_from_the_dockerfile_as_before():
    # The proxy stages come after every other: the others' pruned Dockerfiles do not mention them.
    # Each stage owns its lines up to the next FROM (a blank line too), so nothing may come between the last
    # article stage and the first proxy stage: the article's pruned Dockerfiles stay byte for byte.
    text = (image.TASK_IMAGE_DIR / "Dockerfile").read_text()
    without_proxy = text[: text.index("FROM python-runtime AS go-proxy-runtime")]
    for variant in ("go", "go-sidecar", "next", "next-sidecar"):
        assert image.prune_dockerfile(text, variant) == image.prune_dockerfile(
            without_proxy, variant
        )
        assert "haproxy" not in image.prune_dockerfile(text, variant)
    assert "apt-get install -y --no-install-recommends haproxy" in image.prune_dockerfile(
        text, "go-proxy"
    )


def test_the_proxy_entrypoint_is_the_entrypoint_plus_its_marked_blocks():
    ours = (PROXY_DIR / "entrypoint.sh").read_text().splitlines()
    kept, inside = [], False
    for line in ours:
        if "# [proxy] begin" in line:
            inside = True
        elif "# [proxy] end" in line:
            inside = False
        elif not inside:
            kept.append(line)
    original = (ROOT / "task-image" / "entrypoint.sh").read_text().splitlines()
    assert [line for line in kept if line.strip()] == [line for line in original if line.strip()]
    assert subprocess.run(["bash", "-n", str(PROXY_DIR / "entrypoint.sh")]).returncode == 0


# --- the configuration --------------------------------------------------------------------------------


def config_lines():
    return [
        line.split("#")[0].strip() for line in (PROXY_DIR / "haproxy.cfg").read_text().splitlines()
    ]


def test_haproxy_is_configured_as_a_sidecar_proxy():
    lines = config_lines()
    # Listens on the task's loopback only, forwards to the app, keeps connections alive both ways.
    assert "bind 127.0.0.1:8000" in lines and "server app 127.0.0.1:8080" in lines
    assert not [
        line for line in lines if line.startswith("bind") and not line.startswith("bind 127.0.0.1:")
    ]
    assert "option http-keep-alive" in lines and "http-reuse safe" in lines
    for closing in (
        "option httpclose",
        "option http-server-close",
        "option forceclose",
        "http-reuse never",
    ):
        assert closing not in lines
    # Caches and compresses nothing.
    assert not [
        line for line in lines if re.match(r"(cache|filter|compression|http-request cache)", line)
    ]
    # The access log only when asked for, to stdout (a file, by the entrypoint); no user switch or chroot,
    # which would need capabilities the task does not have.
    assert (
        lines[lines.index(".if defined(PROXY_ACCESS_LOG)") + 1]
        == "log stdout format raw local0 info"
    )
    assert not [line for line in lines if re.match(r"(user|group|uid|gid|chroot|daemon)\b", line)]
    assert "stats uri /stats" in lines and "bind 127.0.0.1:8404" in lines


def test_a_proxy_task_is_loaded_on_the_proxys_port_with_room_for_its_log():
    haproxy, nolog = (
        Condition("go", 1, 2048, 1, 0, "haproxy"),
        Condition("go", 1, 2048, 1, 0, "haproxy-nolog"),
    )
    plain = Condition("go", 1, 2048, 1, 5)
    assert proxy.base_url(haproxy) == proxy.base_url(nolog) == "http://127.0.0.1:8000"
    assert proxy.base_url(plain) == "http://127.0.0.1:8080"
    assert proxy.environment(plain) == {} and proxy.environment(nolog) == {"PROXY": "haproxy-nolog"}
    base = {"/run": "x", "/tmp": "y"}
    assert proxy.task_tmpfs(plain, base) == base == proxy.task_tmpfs(nolog, base)
    assert proxy.task_tmpfs(haproxy, base)["/var/log/proxy"].endswith("size=128m")

    assert proxy.container_command(nolog) == ["haproxy", "-db", "-f", "/etc/haproxy/sidecar.cfg"]
    # With the log on, its stdout goes to the file the log router would read, as the process topology's entrypoint.
    assert proxy.container_command(haproxy)[:2] == ["sh", "-c"]
    assert proxy.container_command(haproxy)[2] == (
        "PROXY_ACCESS_LOG=file exec haproxy -db -f /etc/haproxy/sidecar.cfg > /var/log/proxy/access.log"
    )


def test_a_real_proxy_runs_in_both_topologies():
    for topology in ("process", "task"):
        condition = Condition("go", 0.5, 2048, 2, 5, "haproxy", topology=topology)
        assert condition.variant == "go-proxy" and condition.roles == ("proxy", "agent")


# --- counters -----------------------------------------------------------------------------------------

STATS = (
    "# pxname,svname,qcur,qmax,scur,smax,slim,stot,req_tot,\n"
    "ingress,FRONTEND,,,0,10,4096,25,4847,\n"
    "app,app,0,0,0,10,,4845,4845,\n"
    "app,BACKEND,0,0,0,10,,4845,4845,\n"
    "stats,FRONTEND,,,1,1,4096,2,2,\n"
)


def test_the_proxys_counts_are_its_ingress_frontends_and_its_app_backends():
    # Received includes the connections hey cuts off while HAProxy waits for a request ("<BADREQ>"),
    # forwarded only what reached the app.
    assert proxy.parse_requests(STATS) == (4847, 4845)
    with pytest.raises(
        proxy.ProxyCountError, match="no req_tot for frontend 'ingress' and backend 'app'"
    ):
        proxy.parse_requests("# pxname,svname,req_tot\nstats,FRONTEND,2\n")
    assert proxy.parse_log_lines("120\n") == 120 and proxy.parse_log_lines("none\n") is None


def test_load_around_the_proxy_or_a_log_out_of_step_fails_the_run():
    haproxy = Condition("go", 1, 2048, 1, 0, "haproxy")
    labels = {proxy.VERSION_LABEL: "2.6.12-1+deb12u3", proxy.CONFIG_DIGEST_LABEL: "ab" * 32}
    section = proxy.record(haproxy, labels, (10, 10, 10), (112, 110, 112), 100)
    assert section["requests"] == 100 and section["received"] == section["access_log_lines"] == 102
    assert section["version"] == "2.6.12-1+deb12u3" and section["config_sha256"] == "ab" * 32
    with pytest.raises(
        proxy.ProxyCountError,
        match="the proxy forwarded 90 requests over the window, hey recorded 100",
    ):
        proxy.record(haproxy, labels, (10, 10, 10), (100, 100, 100), 100)
    with pytest.raises(
        proxy.ProxyCountError, match="access log grew by 99 lines over the window, it received 100"
    ):
        proxy.record(haproxy, labels, (10, 10, 10), (110, 110, 109), 100)
    nolog = Condition("go", 1, 2048, 1, 0, "haproxy-nolog")
    assert (
        proxy.record(nolog, labels, (0, 0, None), (100, 100, None), 100)["access_log_lines"] is None
    )


def test_resets_behind_a_proxy_are_not_failed_requests_but_unrecorded_requests_are():
    evidence = {
        "served_not_recorded": 0,
        "tcp_attempt_fails": 0,
        "tcp_estab_resets": 20,
        "tcp_reset_connections": 10,
        "tcp_active_opens": 22,
    }
    assert proxy.count_failed(100, 100, 100, evidence)[0] == 0
    failed, found = proxy.count_failed(100, 100, 103, evidence)
    assert failed == 3 and found["proxy_forwarded_not_recorded"] == 3
    assert proxy.count_failed(100, 100, 100, {**evidence, "tcp_attempt_fails": 2})[0] == 2


# --- tables -------------------------------------------------------------------------------------------


def runs_frame():
    """Two runs each of go at 0.5 vCPU alone, behind haproxy, and behind a busy-loop stand-in at 8 %."""
    rows = []
    for cid, count, load, kind, rps, app_pct, proxy_pct in (
        ("alone", 0, 0, "busy-loop", [1000, 1000], [50, 50], [math.nan] * 2),
        ("hap", 1, 0, "haproxy", [800, 840], [40, 42], [8, 8.4]),
        ("standin", 1, 8, "busy-loop", [900, 920], [42, 42], [8, 8]),
    ):
        for rep in (0, 1):
            rows.append(
                {
                    "condition_id": cid,
                    "app": "go",
                    "vcpu": 0.5,
                    "sidecar_count": count,
                    "sidecar_load_pct": load,
                    "status": "measured",
                    "run_file": f"{cid}/rep{rep}",
                    "rps": rps[rep],
                    "app_cpu_pct": app_pct[rep],
                    "proxy_cpu_pct": proxy_pct[rep],
                    "p50_ms": 5.0,
                    "p99_ms": 90.0,
                    "slow_1p_share": 0.01,
                    "throttled_share": 0.9,
                    "_proxy": kind,
                }
            )
    frame = pd.DataFrame(rows)
    return proxy_tables.with_setups(
        frame.drop(columns="_proxy"), dict(zip(frame["run_file"], frame["_proxy"]))
    )


def test_the_proxy_cost_is_its_cpu_share_over_rps_with_a_t_interval():
    cost = proxy_tables.proxy_cost(runs_frame()).set_index("condition_id")
    row = cost.loc["hap"]
    # 8 % of a core at 800 RPS = 0.1 ms per request, 8.4 % at 840 RPS = 0.1 ms: no spread, a zero-width interval.
    assert row["proxy_cost_ms"] == pytest.approx(0.1)
    assert row["proxy_cost_ms_lo"] == pytest.approx(0.1) and row[
        "proxy_cost_ms_hi"
    ] == pytest.approx(0.1)
    assert row["app_cost_ms"] == pytest.approx(0.5)
    assert row["rps_lo"] < 820 < row["rps_hi"]


def test_the_comparisons_intervals_end_where_the_metric_can():
    # Two runs far apart: t with 1 degree of freedom reaches below 0 and past 1, which no latency or share can.
    runs = runs_frame()
    hap = runs["condition_id"] == "hap"
    runs.loc[hap, "p50_ms"] = [5.0, 400.0]
    runs.loc[hap, "slow_1p_share"] = [0.05, 0.95]
    row = proxy_tables.comparison(runs).set_index("condition_id").loc["hap"]
    assert row["p50_ms_lo"] == 0.0 and row["p50_ms_hi"] > 400
    assert row["slow_1p_share_lo"] == 0.0 and row["slow_1p_share_hi"] == 1.0
    assert row["p50_ms"] == pytest.approx(202.5)  # the value stays the mean of the runs


def test_the_budget_reading_puts_measured_rps_against_quota_over_app_plus_proxy_cost():
    budget = proxy_tables.budget(runs_frame()).set_index("condition_id")
    # Quota 500 ms/s over (0.5 ms app alone + 0.1 ms proxy) = 833 RPS; measured 820.
    assert budget.loc["hap", "budget_rps"] == pytest.approx(500 / 0.6)
    assert budget.loc["hap", "measured_vs_budget"] == pytest.approx(820 / (500 / 0.6))
    # The stand-in: (50 % - its 8 %) of a core over 0.5 ms = 840 RPS.
    assert budget.loc["standin", "budget_rps"] == pytest.approx(840)


def test_the_standin_gap_is_the_real_proxy_over_the_standin_as_ratios_with_welch_intervals():
    gap = proxy_tables.standin_gap(runs_frame()).set_index("proxy")
    row = gap.loc["haproxy"]
    # Geometric means: sqrt(800 x 840) / 1000 kept behind the proxy, sqrt(900 x 920) / 1000 behind the stand-in.
    assert row["rps_vs_alone"] == pytest.approx(math.sqrt(800 * 840) / 1000)
    assert row["standin_rps_vs_alone"] == pytest.approx(math.sqrt(900 * 920) / 1000)
    assert row["rps_vs_standin"] == pytest.approx(math.sqrt(800 * 840) / math.sqrt(900 * 920))
    assert row["rps_vs_standin_lo"] < row["rps_vs_standin"] < row["rps_vs_standin_hi"]
    # Equal latencies in every run: a ratio of 1 with no spread.
    assert row["p99_ms_vs_standin"] == pytest.approx(1.0) == row["p99_ms_vs_standin_lo"]
    assert list(gap.index) == ["haproxy"]


def test_step_two_sets_a_standin_at_the_real_proxys_measured_share():
    cost = proxy_tables.proxy_cost(runs_frame())
    config = proxy_tables.standin_sets(
        cost, 2048, "proxy", ["proxy_alone", "proxy_real"], no_limit_vcpu=2
    )
    assert config["sets"] == {
        "proxy_standin_go_0.5": {
            "app": ["go"],
            "vcpu": [0.5],
            "memory_mb": [2048],
            "sidecar_count": [1],
            "sidecar_load_pct": [8.2],
        }
    }
    assert config["presets"]["proxy"]["sets"] == [
        "proxy_alone",
        "proxy_real",
        "proxy_standin_go_0.5",
    ]
    comparison = proxy_tables.comparison(runs_frame())
    assert list(comparison["setup"]) == ["alone", "haproxy", "busy-loop stand-in"]


# --- plans --------------------------------------------------------------------------------------------


@pytest.fixture()
def project(tmp_path):
    return copy_project(tmp_path / "project")


@pytest.mark.workflow
def test_the_proxy_preset_plans_the_proxy_images_and_its_report(project):
    plan = dry_run(project, "--config", "preset=proxy")
    assert plan.returncode == 0, plan.output
    assert plan.jobs["run_condition"] == 24 * 3
    assert plan.variants == {"go", "next", "go-proxy", "next-proxy", "loadgen"}
    assert plan.jobs["proxy_report"] == 1
    assert "go_cpu0.25_mem2048_sc1_load00_px-haproxy" in plan.conditions


def test_a_preset_without_a_real_proxy_plans_no_proxy_report(quick_plan):
    plan = quick_plan
    assert plan.returncode == 0, plan.output
    assert plan.jobs["proxy_report"] == 0
    assert not {v for v in plan.variants if v.endswith("-proxy")}


@pytest.mark.workflow
def test_step_two_config_adds_the_standins_to_the_preset(project, tmp_path):
    standin = tmp_path / "standin.yaml"
    standin.write_text(
        yaml.safe_dump(
            {
                "sets": {
                    "proxy_standin_go_0.25": {
                        "app": ["go"],
                        "vcpu": [0.25],
                        "memory_mb": [2048],
                        "sidecar_count": [1],
                        "sidecar_load_pct": [6.3],
                    }
                },
                "presets": {
                    "proxy": {"sets": ["proxy_alone", "proxy_real", "proxy_standin_go_0.25"]}
                },
            }
        )
    )
    write_config(project)
    plan = dry_run(project, "--config", "preset=proxy", "--configfile", str(standin))
    assert plan.returncode == 0, plan.output
    assert plan.jobs["run_condition"] == 25 * 3  # the preset's repeats are kept
    assert "go_cpu0.25_mem2048_sc1_load6.3" in plan.conditions


def test_a_cell_writes_its_interval_as_every_other_table_does():
    assert proxy_tables._cell(1.0, 0.5, 1.5) == "1.00 [0.50–1.50]"
    assert proxy_tables._cell(0.059, 0.039, 0.08, digits=3) == "0.059 [0.039–0.080]"
    assert proxy_tables._cell(2.0) == "2.00" and proxy_tables._cell(math.nan) == "-"

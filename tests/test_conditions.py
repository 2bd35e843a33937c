"""Condition ids, matrix expansion and config validation (no Docker)."""

import copy
import re
from pathlib import Path

import pytest
import yaml

from hypothesis import given
from hypothesis import strategies as st

from sidecar_bench.conditions import (
    APPS,
    MAX_SIDECARS,
    Condition,
    ConfigError,
    LoadSettings,
    check_startable,
    expand_matrix,
    expand_set,
)
from sidecar_bench.experiment import Host, check_config, check_host, load_experiment

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())


def test_id_is_readable_and_stable():
    assert Condition("go", 0.25, 2048, 3, 5).id == "go_cpu0.25_mem2048_sc3_load05"
    assert Condition("next", 2, 512, 1, 15).id == "next_cpu2_mem512_sc1_load15"
    assert Condition("go", 1.0, 256, 2, 2.5).id == "go_cpu1_mem256_sc2_load2.5"


ID = re.compile(
    r"(?P<app>[a-z]+)_cpu(?P<vcpu>[^_]+)_mem(?P<memory_mb>\d+)_sc(?P<sidecar_count>\d)_load(?P<load>.+)"
)
# The workflow's wildcard constraint on a condition id (workflow/rules/common.smk).
WORKFLOW_ID = re.search(
    r'condition="([^"]+)"', (ROOT / "workflow" / "rules" / "common.smk").read_text()
)[1]
conditions = st.builds(
    Condition,
    app=st.sampled_from(APPS),
    # From the smallest CPU limit Docker accepts (MIN_VCPU, README "Bad input") to more CPUs than any host here.
    vcpu=st.floats(min_value=0.01, max_value=512, allow_nan=False)
    | st.sampled_from([0.25, 0.5, 1, 2]),
    memory_mb=st.integers(min_value=6, max_value=2**20),
    sidecar_count=st.integers(min_value=0, max_value=MAX_SIDECARS),
    sidecar_load_pct=st.floats(min_value=0, max_value=100, allow_nan=False)
    | st.integers(min_value=0, max_value=100),
)


@given(conditions)
def test_an_id_reads_back_as_its_condition(condition):
    # Run files are named by id and the matrix is de-duplicated by id: an id names exactly one condition.
    parts = ID.fullmatch(condition.id)
    assert parts and re.fullmatch(WORKFLOW_ID, condition.id), condition.id
    assert (
        Condition(
            parts["app"],
            float(parts["vcpu"]),
            int(parts["memory_mb"]),
            int(parts["sidecar_count"]),
            float(parts["load"]),
        )
        == condition
    )


@given(conditions, conditions)
def test_two_conditions_share_an_id_only_when_equal(a, b):
    assert (a.id == b.id) == (a == b)


def test_ids_keep_every_digit_that_tells_two_conditions_apart():
    assert Condition("go", 0.1234564, 2048, 1, 5).id != Condition("go", 0.1234565, 2048, 1, 5).id
    assert Condition("go", 1, 2048, 3, 100 / 3).id == "go_cpu1_mem2048_sc3_load33.333333333333336"
    # Values with up to 6 digits keep the ids they always had.
    assert Condition("go", 0.125, 2048, 3, 12.5).id == "go_cpu0.125_mem2048_sc3_load12.5"


def test_one_and_one_point_zero_are_one_condition():
    assert Condition("go", 1, 2048, 1, 5) == Condition("go", 1.0, 2048, 1, 5.0)
    assert repr(Condition("go", 1, 2048, 1, 5)) == repr(Condition("go", 1.0, 2048, 1, 5.0))


def test_derived_values():
    condition = Condition("next", 0.5, 2048, 3, 7)
    assert condition.total_sidecar_load_pct == 21
    assert condition.variant == "next-sidecar"
    assert condition.roles == ("proxy", "agent", "log_router")
    assert Condition("go", 0.5, 2048, 0, 0).variant == "go"
    assert Condition.from_dict(condition.as_dict()) == condition


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(app="rust"), "app: 'rust' is not one of go, next"),
        (dict(vcpu=0), "vcpu: 0 is not > 0"),
        (dict(sidecar_count=7), "sidecar_count: 7 is not a whole number from 0 to 3"),
        (dict(sidecar_load_pct=-5), "sidecar_load_pct: -5 is not within 0..100"),
        (dict(memory_mb=4), "memory_mb: 4 is not a whole number >= 6"),
    ],
)
def test_bad_condition_names_field_and_value(kwargs, message):
    params = dict(app="go", vcpu=0.25, memory_mb=2048, sidecar_count=1, sidecar_load_pct=5) | kwargs
    with pytest.raises(ConfigError) as err:
        Condition(**params)
    assert str(err.value) == message


def test_grid_has_one_no_sidecar_run_per_app_and_vcpu():
    grid = expand_set("grid", CONFIG["sets"]["grid"])
    assert len(grid) == 2 * 4 * (1 + 3 * 5)
    no_sidecar = [c for c in grid if c.sidecar_count == 0]
    assert {c.sidecar_load_pct for c in no_sidecar} == {0}
    assert len(no_sidecar) == 8


def test_matrix_is_the_deduplicated_union_in_stable_order():
    sets = {
        "a": dict(
            app=["go"], vcpu=[1], memory_mb=[2048], sidecar_count=[3], sidecar_load_pct=[5, 15]
        ),
        "b": dict(
            app=["go"], vcpu=[1], memory_mb=[1024, 2048], sidecar_count=[3], sidecar_load_pct=[15]
        ),
    }
    ids = [c.id for c in expand_matrix(sets, ["b", "a"])]
    assert ids == [
        "go_cpu1_mem1024_sc3_load15",
        "go_cpu1_mem2048_sc3_load05",
        "go_cpu1_mem2048_sc3_load15",
    ]
    assert ids == [c.id for c in expand_matrix(sets, ["a", "b"])]


def test_article_preset_covers_the_article_conditions():
    experiment = load_experiment(CONFIG)
    ids = {c.id for c in experiment.conditions}
    assert len(ids) == 187
    # Every condition the article published a number for is in the matrix.
    reference = ROOT / "workflow" / "reference" / "article-results.csv"
    import pandas as pd

    ref = pd.read_csv(reference)
    for row in ref[
        ref["table"].isin(["load_sweep", "p99_grid", "memory", "change_point"])
    ].itertuples():
        per_sidecar = (
            float(row.total_sidecar_load_pct) / row.sidecar_count if row.sidecar_count else 0
        )
        condition = Condition(
            row.app, row.vcpu, int(row.memory_mb), int(row.sidecar_count), per_sidecar
        )
        assert condition.id in ids, (row.table, condition.id)


def test_quick_preset_overrides_duration_and_warmup():
    experiment = load_experiment(CONFIG | {"preset": "quick"})
    assert len(experiment.conditions) == 4
    assert experiment.repeats == 2
    assert experiment.load == LoadSettings(
        duration_s=5, concurrency=10, warmup_s=0, ready_timeout_s=120
    )


def test_article_method_preset_is_the_articles_method():
    experiment = load_experiment(CONFIG | {"preset": "article-method"})
    assert (experiment.repeats, experiment.load.duration_s, experiment.load.warmup_s) == (1, 30, 0)
    assert experiment.conditions == load_experiment(CONFIG).conditions


def bad(path, value):
    config = copy.deepcopy(CONFIG)
    node = config
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return config


@pytest.mark.parametrize(
    "path, value, message",
    [
        (
            ["sets", "grid", "vcpu"],
            [0, 1],
            "config.yaml: sets.grid.vcpu[0]: 0 is less than or equal to the minimum of 0",
        ),
        (
            ["sets", "grid", "app"],
            ["go", "rust"],
            "config.yaml: sets.grid.app[1]: 'rust' is not one of ['go', 'next']",
        ),
        (
            ["sets", "grid", "sidecar_count"],
            [7],
            "config.yaml: sets.grid.sidecar_count[0]: 7 is greater than the maximum of 3",
        ),
        (
            ["load", "duration_s"],
            "30s",
            "config.yaml: load.duration_s: '30s' is not of type 'number'",
        ),
        (
            ["load", "concurrency"],
            0,
            "config.yaml: load.concurrency: 0 is less than the minimum of 1",
        ),
        (
            ["hosts"],
            [{"name": "a", "url": "http://x"}],
            "config.yaml: hosts[0].url: 'http://x' does not match '^(unix|ssh|tcp|npipe)://'",
        ),
        (
            ["preset"],
            "nope",
            "config.yaml: preset: 'nope' is not one of the presets (article, article-cpu, article-method, article-sample, figure, figure-cpu, mitigations, openloop, proxy, quick, study-10s, study-10s-warm, study-30s, task)",
        ),
        (
            ["presets", "quick", "sets"],
            ["quick", "missing"],
            "config.yaml: sets: no set named 'missing'",
        ),
    ],
)
def test_bad_config_names_key_and_value(path, value, message):
    config = bad(path, value)
    if path == ["presets", "quick", "sets"]:
        config["preset"] = "quick"
    with pytest.raises(ConfigError) as err:
        load_experiment(config)
    assert str(err.value).startswith(message)


def test_defaults_are_filled_from_the_schema():
    config = copy.deepcopy(CONFIG)
    del config["load"], config["image"], config["hosts"]
    checked = check_config(config)
    assert checked["load"] == {
        "duration_s": 10,
        "concurrency": 10,
        "warmup_s": 5,
        "ready_timeout_s": 120,
        "sidecar_burn": "wall",
    }
    assert checked["image"]["base"] == "debian:bookworm-slim"
    assert checked["hosts"] == [{"name": "local", "url": None}]


def test_duplicate_host_names_are_refused():
    config = bad(["hosts"], [{"name": "a"}, {"name": "a", "url": "ssh://root@127.0.0.1"}])
    with pytest.raises(ConfigError, match="hosts: name 'a' is used twice"):
        load_experiment(config)


def test_numbers_given_on_the_command_line_are_numbers():
    # snakemake --config 'load={duration_s: 15}' hands nested values over as text.
    experiment = load_experiment(CONFIG | {"load": {"duration_s": "15", "concurrency": "4"}})
    assert experiment.load.duration_s == 15
    assert experiment.load.concurrency == 4
    with pytest.raises(ConfigError, match=r"load.duration_s: '15s' is not of type 'number'"):
        load_experiment(CONFIG | {"load": {"duration_s": "15s"}})


def test_sidecar_burn_is_a_measured_setting_and_is_checked():
    experiment = load_experiment(CONFIG | {"preset": "article-cpu"})
    assert experiment.load.sidecar_burn == "cpu"
    assert experiment.load.measured()["sidecar_burn"] == "cpu"
    assert "ready_timeout_s" not in experiment.load.measured()
    with pytest.raises(
        ConfigError, match=r"load.sidecar_burn: 'gpu' is not one of \['wall', 'cpu'\]"
    ):
        load_experiment(CONFIG | {"load": {"sidecar_burn": "gpu"}})


def test_repeats_come_from_the_preset_unless_given_at_the_top():
    config = copy.deepcopy(CONFIG)
    config["presets"]["quick"]["repeats"] = 2
    assert load_experiment(config | {"preset": "quick"}).repeats == 2
    assert load_experiment(config | {"preset": "quick", "repeats": "3"}).repeats == 3
    assert load_experiment(config | {"preset": "quick", "repeats": None}).repeats == 2
    del config["presets"]["quick"]["repeats"]
    assert load_experiment(config | {"preset": "quick"}).repeats == 1
    with pytest.raises(
        ConfigError, match=r"config.yaml: presets.quick.repeats: 0 is less than the minimum of 1"
    ):
        load_experiment(
            config
            | {
                "preset": "quick",
                "presets": {**config["presets"], "quick": {"sets": ["quick"], "repeats": 0}},
            }
        )


def test_limits_are_accepted_down_to_their_documented_minimums_and_refused_below():
    # README, "Bad input": Docker's smallest CPU limit (0.01) and memory limit (6 MB); what a task needs to start.
    for app, minimum in (("go", 32), ("next", 128)):
        expand_set(
            "edge",
            {
                "app": [app],
                "vcpu": [0.01],
                "memory_mb": [minimum],
                "sidecar_count": [3],
                "sidecar_load_pct": [0, 100],
            },
        )
        with pytest.raises(ConfigError) as err:
            expand_set(
                "edge",
                {
                    "app": [app],
                    "vcpu": [1],
                    "memory_mb": [minimum - 1],
                    "sidecar_count": [0],
                    "sidecar_load_pct": [0],
                },
            )
        assert str(err.value) == (
            f"sets.edge.memory_mb: {minimum - 1} is below {minimum} MB, the least a {app} task "
            'needs to start with up to 3 sidecars (docs/operations.md, "Bad input")'
        )
    with pytest.raises(ConfigError) as err:
        expand_set(
            "edge",
            {
                "app": ["go"],
                "vcpu": [0.009],
                "memory_mb": [2048],
                "sidecar_count": [0],
                "sidecar_load_pct": [0],
            },
        )
    assert (
        str(err.value)
        == "sets.edge.vcpu: 0.009 is below 0.01, the smallest CPU limit Docker accepts"
    )
    Condition("go", 1, 6, 0, 0)  # the runner API still takes what Docker takes
    for kwargs, message in (
        ({"memory_mb": 6.0}, "memory_mb: 6.0 is not a whole number >= 6"),
        ({"memory_mb": 5}, "memory_mb: 5 is not a whole number >= 6"),
        ({"sidecar_count": -1}, "sidecar_count: -1 is not a whole number from 0 to 3"),
        ({"sidecar_count": 1.0}, "sidecar_count: 1.0 is not a whole number from 0 to 3"),
        ({"sidecar_load_pct": 100.5}, "sidecar_load_pct: 100.5 is not within 0..100"),
        ({"vcpu": float("nan")}, "vcpu: nan is not > 0"),
    ):
        with pytest.raises(ConfigError) as err:
            Condition(
                **(
                    {
                        "app": "go",
                        "vcpu": 1,
                        "memory_mb": 64,
                        "sidecar_count": 3,
                        "sidecar_load_pct": 5,
                    }
                    | kwargs
                )
            )
        assert str(err.value) == message
    assert Condition("go", 1, 64, 3, 100).total_sidecar_load_pct == 300


def test_load_settings_are_refused_naming_the_key_and_accepted_at_their_edges():
    LoadSettings(duration_s=0.1, concurrency=1, warmup_s=0, ready_timeout_s=0.1, sidecar_burn="cpu")
    for kwargs, message in (
        ({"duration_s": 0}, "load.duration_s: 0 is not > 0"),
        ({"concurrency": 0}, "load.concurrency: 0 is not a whole number >= 1"),
        ({"concurrency": 2.0}, "load.concurrency: 2.0 is not a whole number >= 1"),
        ({"warmup_s": -1}, "load.warmup_s: -1 is not >= 0"),
        ({"ready_timeout_s": 0}, "load.ready_timeout_s: 0 is not > 0"),
        ({"sidecar_burn": "gpu"}, "load.sidecar_burn: 'gpu' is not one of wall, cpu"),
    ):
        with pytest.raises(ConfigError) as err:
            LoadSettings(**kwargs)
        assert str(err.value) == message
    assert LoadSettings().as_dict() == {
        "duration_s": 30,
        "concurrency": 10,
        "warmup_s": 0,
        "ready_timeout_s": 120,
        "sidecar_burn": "wall",
    }


def test_a_set_must_name_every_axis_and_no_other():
    axes = {
        "app": ["go"],
        "vcpu": [1],
        "memory_mb": [2048],
        "sidecar_count": [1],
        "sidecar_load_pct": [5],
    }
    with pytest.raises(ConfigError) as err:
        expand_set("s", {k: v for k, v in axes.items() if k not in ("vcpu", "sidecar_count")})
    assert str(err.value) == "sets.s: missing axis vcpu, sidecar_count"
    with pytest.raises(ConfigError) as err:
        expand_set("s", axes | {"gpu": [1], "disk": [2]})
    assert str(err.value) == "sets.s: unknown axis disk, gpu"
    with pytest.raises(ConfigError) as err:
        expand_set("s", axes | {"app": ["rust"]})
    assert str(err.value) == "sets.s.app: 'rust' is not one of go, next"
    with pytest.raises(ConfigError) as err:
        expand_matrix({"s": axes, "t": axes}, ["s", "u"])
    assert str(err.value) == "sets: no set named 'u' (known: s, t)"
    # One sidecar-free run per app and limits, whatever loads the set lists.
    free = expand_set("s", axes | {"sidecar_count": [0], "sidecar_load_pct": [5, 15]})
    assert [c.id for c in free] == ["go_cpu1_mem2048_sc0_load00"]


def test_an_experiment_carries_its_preset_image_and_hosts(tmp_path):
    tls = {}
    for key in ("ca_cert", "client_cert", "client_key"):
        (tmp_path / key).write_text("x")
        tls[key] = str(tmp_path / key)
    hosts = [
        {"name": "near", "url": "ssh://me@near"},
        {"name": "far", "url": "tcp://far:2376", "tls": tls},
        {"name": "local"},
    ]
    experiment = load_experiment(CONFIG | {"preset": "quick", "hosts": hosts})
    assert experiment.preset == "quick"
    assert experiment.image == check_config(CONFIG)["image"] and experiment.image["base"]
    assert experiment.hosts == (
        Host("near", "ssh://me@near", None),
        Host("far", "tcp://far:2376", tls),
        Host("local", None, None),
    )


def test_checking_a_config_leaves_the_callers_config_as_it_was():
    config = copy.deepcopy(CONFIG) | {"hosts": [{"name": "a"}]}
    before = copy.deepcopy(config)
    check_config(config)
    assert config == before


def test_numbers_given_as_text_are_numbers_in_every_section_and_other_text_stays_text():
    config = copy.deepcopy(CONFIG)
    config["sets"]["quick"]["vcpu"] = ["0.25"]
    config["presets"]["quick"]["repeats"] = "3"
    experiment = load_experiment(config | {"preset": "quick"})
    assert {c.vcpu for c in experiment.conditions} == {0.25} and experiment.repeats == 3
    # YAML would read "true" as a boolean: only numbers are converted.
    with pytest.raises(
        ConfigError, match=r"load.sidecar_burn: 'true' is not one of \['wall', 'cpu'\]"
    ):
        load_experiment(CONFIG | {"load": {"sidecar_burn": "true"}})


def test_errors_name_the_file_they_came_from_and_an_empty_preset():
    with pytest.raises(
        ConfigError, match=r"^config.yaml: load.concurrency: 0 is less than the minimum of 1"
    ):
        check_config(CONFIG | {"load": {"concurrency": 0}})
    with pytest.raises(
        ConfigError, match=r"^other.yaml: load.concurrency: 0 is less than the minimum of 1"
    ):
        load_experiment(CONFIG | {"load": {"concurrency": 0}}, source="other.yaml")
    for empty in ("", None):
        with pytest.raises(ConfigError) as err:
            load_experiment(CONFIG | {"preset": empty})
        assert str(err.value).startswith(
            "config.yaml: preset: empty; name one of the presets (article, "
        )
    with pytest.raises(
        ConfigError, match=r"^memory_mb: 16 is below 32 MB, the least a go task needs"
    ):
        check_startable(Condition("go", 1, 16, 0, 0))


def test_plain_tcp_to_a_host_name_or_no_host_is_refused_and_loopback_is_not():
    for url, hostname in (("tcp://buildbox:2375", "buildbox"), ("tcp://:2375", "None")):
        with pytest.raises(ConfigError) as err:
            check_host({"name": "b", "url": url}, "config.yaml: hosts[0]", {})
        assert str(err.value) == (
            f"config.yaml: hosts[0].url: {url!r} is plain TCP without TLS to {hostname}, not loopback: anyone on the "
            "way can read the engine's traffic and drive it, which is root on that machine (host 'b'). Use "
            "ssh://user@host, or tcp:// with tls (ca_cert, client_cert, client_key); or set insecure_tcp: true on "
            "this host to accept the risk"
        )
    for url in ("tcp://127.0.0.1:2375", "tcp://localhost:2375", "tcp://[::1]:2375"):
        check_host({"name": "b", "url": url}, "config.yaml: hosts[0]", {})

"""Condition ids, matrix expansion and config validation (no Docker)."""

import copy
from pathlib import Path

import pytest
import yaml

from sidecar_bench.conditions import Condition, ConfigError, LoadSettings, expand_matrix, expand_set
from sidecar_bench.experiment import check_config, load_experiment

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "config.yaml").read_text())


def test_id_is_readable_and_stable():
    assert Condition("go", 0.25, 2048, 3, 5).id == "go_cpu0.25_mem2048_sc3_load05"
    assert Condition("next", 2, 512, 1, 15).id == "next_cpu2_mem512_sc1_load15"
    assert Condition("go", 1.0, 256, 2, 2.5).id == "go_cpu1_mem256_sc2_load2.5"


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
        "a": dict(app=["go"], vcpu=[1], memory_mb=[2048], sidecar_count=[3], sidecar_load_pct=[5, 15]),
        "b": dict(app=["go"], vcpu=[1], memory_mb=[1024, 2048], sidecar_count=[3], sidecar_load_pct=[15]),
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
    for row in ref[ref["table"].isin(["load_sweep", "p99_grid", "memory", "change_point"])].itertuples():
        per_sidecar = float(row.total_sidecar_load_pct) / row.sidecar_count if row.sidecar_count else 0
        condition = Condition(row.app, row.vcpu, int(row.memory_mb), int(row.sidecar_count), per_sidecar)
        assert condition.id in ids, (row.table, condition.id)


def test_quick_preset_overrides_duration_and_warmup():
    experiment = load_experiment(CONFIG | {"preset": "quick"})
    assert len(experiment.conditions) == 4
    assert experiment.repeats == 2
    assert experiment.load == LoadSettings(duration_s=5, concurrency=10, warmup_s=0, ready_timeout_s=120)


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
        (["sets", "grid", "vcpu"], [0, 1], "config.yaml: sets.grid.vcpu[0]: 0 is less than or equal to the minimum of 0"),
        (["sets", "grid", "app"], ["go", "rust"], "config.yaml: sets.grid.app[1]: 'rust' is not one of ['go', 'next']"),
        (["sets", "grid", "sidecar_count"], [7], "config.yaml: sets.grid.sidecar_count[0]: 7 is greater than the maximum of 3"),
        (["load", "duration_s"], "30s", "config.yaml: load.duration_s: '30s' is not of type 'number'"),
        (["load", "concurrency"], 0, "config.yaml: load.concurrency: 0 is less than the minimum of 1"),
        (["hosts"], [{"name": "a", "url": "http://x"}], "config.yaml: hosts[0].url: 'http://x' does not match '^(unix|ssh|tcp|npipe)://'"),
        (["preset"], "nope", "config.yaml: preset: 'nope' is not one of the presets (article, article-cpu, article-method, figure, figure-cpu, mitigations, quick, study-10s, study-10s-warm, study-30s, task)"),
        (["presets", "quick", "sets"], ["quick", "missing"], "config.yaml: sets: no set named 'missing'"),
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
    assert checked["load"] == {"duration_s": 10, "concurrency": 10, "warmup_s": 5, "ready_timeout_s": 120,
                               "sidecar_burn": "wall"}
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
    with pytest.raises(ConfigError, match=r"load.sidecar_burn: 'gpu' is not one of \['wall', 'cpu'\]"):
        load_experiment(CONFIG | {"load": {"sidecar_burn": "gpu"}})


def test_repeats_come_from_the_preset_unless_given_at_the_top():
    config = copy.deepcopy(CONFIG)
    config["presets"]["quick"]["repeats"] = 2
    assert load_experiment(config | {"preset": "quick"}).repeats == 2
    assert load_experiment(config | {"preset": "quick", "repeats": "3"}).repeats == 3
    assert load_experiment(config | {"preset": "quick", "repeats": None}).repeats == 2
    del config["presets"]["quick"]["repeats"]
    assert load_experiment(config | {"preset": "quick"}).repeats == 1
    with pytest.raises(ConfigError, match=r"config.yaml: presets.quick.repeats: 0 is less than the minimum of 1"):
        load_experiment(config | {"preset": "quick", "presets": {**config["presets"], "quick": {"sets": ["quick"], "repeats": 0}}})

"""Warm-up until steady: the stopping rule, its settings, and the mode on the real engine."""

import pytest
import yaml

from sidecar_bench import record, runner
from sidecar_bench.conditions import Condition, ConfigError, LoadSettings
from sidecar_bench.experiment import load_experiment
from sidecar_bench.warmup import WarmupSettings, rates_per_second, steady_check, steady_time
from conftest import ROOT, hold_engine

SETTINGS = WarmupSettings(mode="until_steady", min_s=5, max_s=20, window_s=3, tolerance=0.05)


def bursts(rates):
    return [{"responses": r, "span_s": 1.0} for r in rates]


def test_a_rising_rate_keeps_warming_and_a_flat_one_stops_after_min_s():
    rising = [40, 44, 48, 52, 56, 60, 64, 68]
    assert steady_check(bursts(rising), 8.0, SETTINGS) == (False, None)
    settled = [40, 50, 60, 60, 61, 60, 59, 60]
    assert steady_check(bursts(settled[:7]), 7.0, SETTINGS) == (
        False,
        None,
    )  # 60.3 after 56.7: +6.5 %
    stop, why = steady_check(bursts(settled), 8.0, SETTINGS)
    assert stop and why.startswith("steady: 59.7 RPS over the last 3 bursts, 60.3 before")
    # Flat from the start, but not before min_s.
    assert steady_check(bursts([60] * 4), 4.0, SETTINGS) == (False, None)


def test_the_cap_stops_a_rate_that_never_settles():
    stop, why = steady_check(bursts(range(40, 60)), 20.0, SETTINGS)
    assert stop and why == "cap: still rising after max_s 20 s"


def test_the_study_finds_when_a_series_stops_rising():
    series = [30 + 3 * min(t, 12) for t in range(40)]  # rises for 12 s, then flat
    assert steady_time(series, SETTINGS) == 16.0  # 66 after 63 RPS: +4.8 %
    assert steady_time([10 * t for t in range(20)], SETTINGS) is None
    assert rates_per_second([0.1, 0.5, 1.2, 2.9, 3.5], 3) == [2.0, 1.0, 1.0]


def test_the_study_script_describes_a_series_and_keeps_each_cell_as_it_goes(tmp_path):
    import argparse

    import pandas as pd
    import warmup_study

    series = [30 + 3 * min(t, 12) for t in range(60)]  # rises for 12 s, then flat at 66
    row = warmup_study.describe(series, SETTINGS)
    assert row["rps_plateau"] == 66 and row["steady_s"] == 16.0
    assert (
        row["plateau_s"] == 13.0
    )  # the 3 s mean of seconds 10-12 (63) first reaches 95 % of 66 (62.7)
    assert row["rise_5_15_over_0_5"] == pytest.approx(57.6 / 36 - 1)  # seconds 5-14 over 0-4
    args = argparse.Namespace(seconds=60.0, preset="article")
    keys = {"condition_id": "go_x", "app": "go", "vcpu": 0.25, "sidecars": 0}
    one = [{**keys, "repeat": 1, "second": s, "rps": r} for s, r in enumerate(series)]
    two = one + [{**r, "repeat": 2} for r in one]
    warmup_study.write_outputs(tmp_path, pd.DataFrame(one), args, SETTINGS, 10)
    table = warmup_study.write_outputs(tmp_path, pd.DataFrame(two), args, SETTINGS, 10)
    assert (
        len(table) == 2 and len(pd.read_csv(tmp_path / "rates.csv")) == 120
    )  # replaced whole, not appended
    assert "fixed 15 s" in (tmp_path / "warmup-study.md").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "drift-by-warmup.csv",
        "rates.csv",
        "warmup-study.md",
    ]


def test_the_drift_rule_fires_on_a_window_left_rising_and_not_after_the_rise():
    import pandas as pd
    import warmup_study

    rising = [40 + 2 * min(t, 14) for t in range(60)]  # +2 RPS a second for 14 s, then flat at 68
    assert warmup_study.drift_after(rising, 0, 10)["drifted"]  # first third 42, last 56: +33 %
    assert warmup_study.drift_after(rising, 5, 10)["drifted"]  # 52 against 64.7: +24 %
    after = warmup_study.drift_after(rising, 15, 10)
    assert not after["drifted"] and after["rise"] == 0
    assert (
        warmup_study.drift_after(rising, 55, 10) is None
    )  # the series ends before the window does
    frame = pd.DataFrame(
        [
            {
                "condition_id": "n",
                "app": "next",
                "vcpu": 0.25,
                "sidecars": 0,
                "repeat": 1,
                "second": s,
                "rps": r,
            }
            for s, r in enumerate(rising)
        ]
    )
    drift = warmup_study.drift_by_warmup(frame, 10, SETTINGS)
    verdict = dict(zip(drift["warmup"], drift["drifted"]))
    assert verdict["fixed 5 s"] and not verdict["fixed 15 s"] and not verdict["until_steady"]
    # Stops after second 18: 68 RPS over seconds 15-17 after 66 over 12-14 (+3 %); after 17 it was +6 %.
    assert drift.loc[drift["warmup"] == "until_steady", "warmup_s"].item() == 18
    of_plateau = dict(zip(drift["warmup"], drift["of_plateau"]))
    assert of_plateau["fixed 5 s"] == pytest.approx(59 / 68) and of_plateau["fixed 15 s"] == 1
    summary = warmup_study.drift_summary(drift)
    assert summary.loc[summary["warmup"] == "fixed 0 s", "drifted"].item() == 1
    assert list(summary["warmup"])[:2] == ["fixed 0 s", "fixed 5 s"] and "until_steady" in set(
        summary["warmup"]
    )


def test_a_slow_ramp_passes_the_drift_rule_and_short_windows_but_not_long_windows():
    import pandas as pd
    import warmup_study

    slow = [
        100 + t for t in range(60)
    ]  # +1 % a second, never flat: what Next.js did here at 0.5 vCPU
    frame = pd.DataFrame(
        [
            {
                "condition_id": "n",
                "app": "next",
                "vcpu": 0.5,
                "sidecars": 0,
                "repeat": 1,
                "second": s,
                "rps": r,
            }
            for s, r in enumerate(slow)
        ]
    )
    drift = warmup_study.drift_by_warmup(frame, 10, SETTINGS).set_index("warmup")
    # 3 s windows: 104 after 101 (+3 %) is steady at once; the window after it is 26 % below the plateau, and the
    # drift rule (107 -> 114, +6.5 %) does not see it.
    assert drift.loc["until_steady", "warmup_s"] == 6 and not drift.loc["until_steady", "drifted"]
    assert drift.loc["until_steady", "of_plateau"] == pytest.approx(110.5 / 149.5)
    # 10 s windows: 114.5 after 104.5 (+9.6 %) and every later pair rise by more than 5 %: warms to the cap.
    assert drift.loc["until_steady, 10 s windows", "warmup_s"] == 45
    assert drift.loc["until_steady, 5 s windows", "warmup_s"] < 45


def test_a_warmup_per_app_changes_only_that_apps_runs_and_names_a_bad_key_or_value():
    plain = LoadSettings(duration_s=10, warmup_s=5)
    per_app = LoadSettings(duration_s=10, warmup_s=5, app_warmup_s={"next": 30})
    assert "app_warmup_s" not in plain.as_dict()  # absent: every run keeps today's trigger
    assert per_app.for_app("go").measured() == plain.measured() == plain.for_app("go").measured()
    assert per_app.for_app("next").measured() == {**plain.measured(), "warmup_s": 30}
    assert per_app.for_app("next").warmup_limit_s() == 30
    data = yaml.safe_load((ROOT / "config.yaml").read_text())
    data["load"]["app_warmup_s"] = {"next": 30}
    assert load_experiment(data).load.for_app("next").warmup_s == 30
    for bad, message in [({"java": 3}, "java"), ({"next": -1}, "-1"), ({"next": "long"}, "long")]:
        data["load"]["app_warmup_s"] = bad
        with pytest.raises(ConfigError, match=f"app_warmup_s.*{message}"):
            load_experiment(data)


def config_with(warmup):
    data = yaml.safe_load((ROOT / "config.yaml").read_text())
    data["load"]["warmup"] = warmup
    return data


def test_the_fixed_default_keeps_todays_rerun_trigger_and_until_steady_is_part_of_it():
    load = load_experiment(config_with({})).load
    assert load.measured() == {
        "duration_s": 10,
        "concurrency": 10,
        "warmup_s": 5,
        "sidecar_burn": "wall",
        "app_warmup_s": {"next": 30},
    }
    # What each app's runs get (and their trigger): Go 5 s, Next.js 30 s, as the warm-up study found.
    assert load.for_app("go").measured() == {
        "duration_s": 10,
        "concurrency": 10,
        "warmup_s": 5,
        "sidecar_burn": "wall",
    }
    assert load.for_app("next").measured()["warmup_s"] == 30
    steady = load_experiment(config_with({"mode": "until_steady", "max_s": 40})).load.measured()
    assert steady["warmup"] == {
        "mode": "until_steady",
        "min_s": 5,
        "max_s": 40,
        "window_s": 3,
        "tolerance": 0.05,
    }


def test_a_preset_that_sets_warmup_s_sets_it_for_every_app_unless_it_names_app_warmups_too():
    data = yaml.safe_load((ROOT / "config.yaml").read_text())

    def warmups(preset):
        load = load_experiment({**data, "preset": preset}).load
        return {app: load.for_app(app).warmup_s for app in ("go", "next")}

    assert warmups("article") == {"go": 5, "next": 30}  # the defaults
    assert warmups("figure") == {"go": 5, "next": 30}
    assert warmups("quick") == {"go": 0, "next": 0}  # warmup_s: 0 is no warm-up for any app
    assert warmups("study-10s-warm") == {"go": 5, "next": 5}
    data["presets"]["quick"]["load"]["app_warmup_s"] = {"next": 7}
    assert warmups("quick") == {"go": 0, "next": 7}
    data["presets"]["figure"]["load"] = {
        "app_warmup_s": {"go": 2}
    }  # its own, in place of the default's
    assert warmups("figure") == {"go": 2, "next": 5}


@pytest.mark.parametrize(
    "warmup, message",
    [
        (
            {"mode": "steady"},
            "config.yaml: load.warmup.mode: 'steady' is not one of ['fixed', 'until_steady']",
        ),
        (
            {"mode": "until_steady", "max_s": 2},
            "config.yaml: load.warmup.max_s: 2 is below min_s 5",
        ),
        ({"window_s": 0.5}, "config.yaml: load.warmup.window_s: 0.5 is less than the minimum of 1"),
        ({"tolerance": -1}, "config.yaml: load.warmup.tolerance: -1 is less than the minimum of 0"),
    ],
)
def test_bad_warmup_settings_name_the_key_and_the_value(warmup, message):
    with pytest.raises(ConfigError) as raised:
        load_experiment(config_with(warmup))
    assert message in str(raised.value)


# A memory size no experiment uses, so that concurrent runs of the real matrix are not mistaken for leftovers.
GO_WARM = Condition("go", 0.25, 2038, 1, 10)


@pytest.fixture()
def engine():
    yield from hold_engine("tests/test_warmup.py")


@pytest.mark.docker
def test_warmup_until_steady_runs_bursts_and_records_them(client, engine, tmp_path):
    load = LoadSettings(
        duration_s=2,
        concurrency=10,
        ready_timeout_s=60,
        warmup={"mode": "until_steady", "min_s": 2, "max_s": 4, "window_s": 1, "tolerance": 0.05},
    )
    out = tmp_path / "run.parquet"
    runner.run_condition(
        client, GO_WARM, load, "sidecar-bench/task:go-sidecar", "sidecar-bench/loadgen:latest", out
    )
    frame, meta = record.read_run(out)
    warm = meta["warmup"]
    assert warm["mode"] == "until_steady" and meta["load"]["warmup"]["max_s"] == 4
    # At least min_s of bursts, at most one burst past max_s; every burst served requests.
    assert 2 <= len(warm["bursts"]) <= 5 and 2 <= warm["load_s"] <= 5.5
    assert all(b["responses"] > 0 and b["rps"] > 0 for b in warm["bursts"])
    assert warm["reason"].startswith("steady" if warm["steady"] else "cap")
    assert warm["seconds"] >= warm["load_s"]
    assert len(frame) > 100 and meta["window"]["load_s"] >= 2
    assert runner.Measurement(client, GO_WARM, load, None, None, "x").loadgen_deadline_s() > 4 + 2


@pytest.mark.docker
def test_a_run_warms_up_for_its_apps_own_warmup_and_records_it(client, engine, tmp_path):
    # The experiment's settings with a warm-up for Go only: the run warms Go up for 2 s, not warmup_s's 0, and
    # records the warm-up it had (what its rerun trigger, get_load, says), not the per-app table.
    load = LoadSettings(
        duration_s=2, concurrency=10, warmup_s=0, ready_timeout_s=60, app_warmup_s={"go": 2}
    )
    out = tmp_path / "run.parquet"
    runner.run_condition(
        client,
        GO_WARM,
        load.as_dict(),
        "sidecar-bench/task:go-sidecar",
        "sidecar-bench/loadgen:latest",
        out,
    )
    _, meta = record.read_run(out)
    assert meta["load"]["warmup_s"] == 2 and "app_warmup_s" not in meta["load"], meta["load"]
    assert {key: meta["load"][key] for key in load.for_app("go").as_dict()} == load.for_app(
        "go"
    ).as_dict()

"""The knobs against CFS throttling: validation at config load, refusal before anything runs, and application
and read-back on the real engine (short runs)."""

import pytest

from conftest import hold_engine
from sidecar_bench import cgroup, knobs, record, runner
from sidecar_bench.conditions import Condition, ConfigError, LoadSettings, expand_set

from test_runner import image_for, leftovers

# Memory sizes no experiment uses, so that runs of a real matrix are not mistaken for these tests' leftovers.
BASE = dict(app="go", vcpu=0.25, memory_mb=2044, sidecar_count=1, sidecar_load_pct=10)
SHORT = LoadSettings(duration_s=2, concurrency=10, ready_timeout_s=90)


def test_the_article_settings_keep_their_ids_and_params():
    plain = Condition("go", 0.25, 2048, 3, 5)
    written_out = Condition(
        "go", 0.25, 2048, 3, 5, cpu_period_ms=100, cpu_burst_pct=0, cpu_quota=True
    )
    assert plain == written_out and written_out.id == "go_cpu0.25_mem2048_sc3_load05"
    # The params Snakemake fingerprints: exactly the keys from before the knobs.
    assert list(plain.as_dict()) == [
        "id",
        "app",
        "vcpu",
        "memory_mb",
        "sidecar_count",
        "sidecar_load_pct",
        "total_sidecar_load_pct",
    ]


@pytest.mark.parametrize(
    "knob, value, part",
    [
        ("cpu_period_ms", 5, "period5ms"),
        ("cpu_period_ms", 20, "period20ms"),
        ("cpu_burst_pct", 50, "burst50"),
        ("cpu_quota", False, "noquota"),
        ("cpuset", "0-1", "cpuset0to1"),
        ("gomaxprocs", 1, "gomaxprocs1"),
    ],
)
def test_each_knob_has_its_own_id_part_and_round_trips(knob, value, part):
    condition = Condition(**BASE, **{knob: value})
    assert condition.id.endswith("_" + part)
    assert condition.as_dict()[knob] == value
    assert Condition.from_dict(condition.as_dict()) == condition


def test_node_runtime_knobs_belong_to_next():
    condition = Condition("next", 0.5, 2048, 3, 7, uv_threadpool_size=1, node_semi_space_mb=16)
    assert condition.id.endswith("_uvpool1_semispace16")
    assert knobs.runtime_environment(condition) == {
        "UV_THREADPOOL_SIZE": "1",
        "NODE_OPTIONS": "--max-semi-space-size=16",
    }


@pytest.mark.parametrize(
    "knob, value, message",
    [
        ("cpu_period_ms", 0.5, r"cpu_period_ms: 0.5 is not a number from 1 to 1000"),
        ("cpu_period_ms", 2000, r"cpu_period_ms: 2000 is not a number from 1 to 1000"),
        (
            "cpu_period_ms",
            2,
            r"cpu_period_ms: 2 at vcpu 0.25 makes a quota of 500 us, below the 1000 us",
        ),
        ("cpu_burst_pct", 150, r"cpu_burst_pct: 150 is not within 0..100"),
        ("cpu_quota", "no", r"cpu_quota: 'no' is not true or false"),
        ("cpuset", "0-", r"cpuset: '0-' is not a CPU list"),
        ("cpuset", "1-0", r"cpuset: '1-0' has a range that runs backwards"),
        ("gomaxprocs", 0, r"gomaxprocs: 0 is not a whole number from 1 to 1024"),
        ("uv_threadpool_size", 4, r"uv_threadpool_size: 4 is a setting of the next app, not of go"),
    ],
)
def test_bad_knob_values_name_the_key_and_the_value(knob, value, message):
    with pytest.raises(ConfigError, match=message):
        expand_set("s", {**{k: [v] for k, v in BASE.items()}, knob: [value]})


def test_knobs_that_contradict_each_other_are_refused():
    with pytest.raises(ConfigError, match="cpu_burst_pct: 50 with cpu_quota false"):
        Condition(**BASE, cpu_quota=False, cpu_burst_pct=50)
    with pytest.raises(ConfigError, match="cpu_period_ms: 20 with cpu_quota false"):
        Condition(**BASE, cpu_quota=False, cpu_period_ms=20)
    with pytest.raises(ConfigError, match="cpuset: '1' has 1 CPU.*fewer than vcpu 1.5"):
        Condition(**{**BASE, "vcpu": 1.5}, cpuset="1")


def test_what_the_engine_cannot_apply_is_refused_before_anything_runs():
    info = {
        "NCPU": 2,
        "KernelVersion": "6.1.0",
        "SecurityOptions": ["name=seccomp,profile=builtin"],
    }
    knobs.check_supported(info, Condition(**BASE, cpu_burst_pct=100, cpuset="1"), "local")
    with pytest.raises(knobs.KnobError, match="cpuset '3' names CPU 3, host 'local' has CPUs 0-1"):
        knobs.check_supported(info, Condition(**BASE, cpu_quota=False, cpuset="3"), "local")
    for option, what in (
        ("name=rootless", "rootless"),
        ("name=userns", "with user-namespace remapping"),
    ):
        with pytest.raises(knobs.KnobError, match=f"engine runs {what}"):
            knobs.check_supported(
                {**info, "SecurityOptions": [option]}, Condition(**BASE, cpu_burst_pct=50), "h"
            )
    with pytest.raises(knobs.KnobError, match="needs Linux 5.14 or later"):
        knobs.check_supported(
            {**info, "KernelVersion": "5.10.0-21-amd64"}, Condition(**BASE, cpu_burst_pct=50), "h"
        )
    # A rootless engine measures everything but burst.
    knobs.check_supported(
        {**info, "SecurityOptions": ["name=rootless"]}, Condition(**BASE, cpu_period_ms=5), "h"
    )


def _limits(**changes):
    values = dict(
        cpu_quota_us=1250,
        cpu_period_us=5000,
        memory_limit_bytes=2044 * 2**20,
        swap_limit_bytes=0,
        cpu_burst_us=625,
        cpu_shares=1024,
        cpuset_cpus="0-1",
    )
    return cgroup.Limits(**{**values, **changes})


def test_a_run_whose_cgroup_does_not_hold_the_knobs_fails():
    condition = Condition(**BASE, cpu_period_ms=5, cpu_burst_pct=50)
    runner.check_limits(condition, _limits(), nr_periods=10)
    with pytest.raises(
        runner.RunError,
        match="expected CPU quota 1250 / period 5000 us .*has quota 25000 / period 100000",
    ):
        runner.check_limits(
            condition, _limits(cpu_quota_us=25000, cpu_period_us=100000), nr_periods=10
        )
    with pytest.raises(
        runner.RunError, match="expected a CFS burst of 625 us, the task's cgroup has 0"
    ):
        runner.check_limits(condition, _limits(cpu_burst_us=0), nr_periods=10)
    weights = Condition(**BASE, cpu_quota=False, cpuset="1")
    runner.check_limits(
        weights,
        _limits(cpu_quota_us=-1, cpu_period_us=100000, cpu_shares=256, cpuset_cpus="1"),
        nr_periods=0,
    )
    with pytest.raises(
        runner.RunError, match="expected 256 CPU shares, the task's cgroup has 1024"
    ):
        runner.check_limits(
            weights, _limits(cpu_quota_us=-1, cpu_period_us=100000, cpuset_cpus="1"), nr_periods=0
        )
    with pytest.raises(runner.RunError, match="expected cpuset 1, the task's cgroup has 0-1"):
        runner.check_limits(
            weights, _limits(cpu_quota_us=-1, cpu_period_us=100000, cpu_shares=256), nr_periods=0
        )
    with pytest.raises(
        runner.RunError,
        match="expected the app to run with GOMAXPROCS=1, its environment has "
        r"\(unset\)",
    ):
        runner.check_app_environment(Condition(**BASE, gomaxprocs=1), {})


def test_the_cpu_options_docker_gets():
    assert knobs.task_cpu_options(Condition(**BASE)) == {"nano_cpus": 250_000_000}
    assert knobs.task_cpu_options(Condition(**BASE, cpu_period_ms=5)) == {
        "cpu_period": 5000,
        "cpu_quota": 1250,
    }
    assert knobs.task_cpu_options(Condition(**BASE, cpu_quota=False, cpuset="1")) == {
        "cpu_shares": 256,
        "cpuset_cpus": "1",
    }


# ---- on the real engine -------------------------------------------------------------------------


@pytest.fixture()
def engine():
    yield from hold_engine("tests/test_knobs.py")


def measure(client, tmp_path, condition, image="sidecar-bench/task:go-sidecar"):
    image_for(client, image)
    loadgen = image_for(client, "sidecar-bench/loadgen:latest")
    out = tmp_path / f"{condition.id}.parquet"
    runner.run_condition(client, condition, SHORT, image, loadgen, out, "local")
    assert leftovers(client, condition) == []
    return record.read_run(out)


@pytest.mark.docker
def test_period_burst_and_gomaxprocs_are_applied_and_read_back(client, engine, tmp_path):
    condition = Condition(**BASE, cpu_period_ms=5, cpu_burst_pct=100, gomaxprocs=1)
    frame, meta = measure(client, tmp_path, condition)
    assert len(frame) > 0 and meta["format_version"] == 3
    limits = meta["limits"]
    assert (limits["cpu_quota_us"], limits["cpu_period_us"], limits["cpu_burst_us"]) == (
        1250,
        5000,
        1250,
    )
    cpu = meta["cgroup"]
    # A 5 ms period: about 200 periods a second, and the kernel's burst counters are there.
    assert (cpu["period_us"], cpu["quota_us"]) == (5000, 1250) and cpu["nr_periods"] > 100
    assert cpu["nr_bursts"] >= 0 and cpu["burst_s"] >= 0
    assert meta["knobs"] == {
        "cpu_period_ms": 5.0,
        "cpu_burst_pct": 100.0,
        "gomaxprocs": 1,
        "app_environment": {"GOMAXPROCS": "1"},
    }
    assert meta["condition"]["id"] == condition.id and meta["condition"]["cpu_period_ms"] == 5.0


@pytest.mark.docker
def test_no_quota_and_a_one_core_cpuset_are_applied_and_read_back(client, engine, tmp_path):
    condition = Condition(**BASE, cpu_quota=False, cpuset="1")
    _, meta = measure(client, tmp_path, condition)
    limits = meta["limits"]
    assert (
        limits["cpu_quota_us"],
        limits["vcpu"],
        limits["cpu_shares"],
        limits["cpuset_cpus"],
    ) == (-1, None, 256, "1")
    # No quota: nothing throttles; the task can use at most its one core.
    assert meta["cgroup"]["nr_throttled"] == 0
    assert meta["cgroup"]["usage_s"] <= meta["cgroup"]["wall_s"] * 1.05 + 0.02


@pytest.mark.docker
def test_node_runtime_settings_reach_the_app_process(client, engine, tmp_path):
    condition = Condition("next", 0.5, 2044, 1, 5, uv_threadpool_size=1, node_semi_space_mb=16)
    _, meta = measure(client, tmp_path, condition, "sidecar-bench/task:next-sidecar")
    assert meta["knobs"]["app_environment"] == {
        "UV_THREADPOOL_SIZE": "1",
        "NODE_OPTIONS": "--max-semi-space-size=16",
    }


@pytest.mark.docker
def test_a_cpuset_the_host_lacks_is_refused_before_any_container(client, engine, tmp_path):
    cpus = client.info()["NCPU"]
    condition = Condition(**{**BASE, "vcpu": 0.25}, cpuset=str(cpus))
    before = {c.id for c in client.containers.list(all=True)}
    with pytest.raises(runner.RunError, match=f"cpuset '{cpus}' names CPU {cpus}"):
        runner.run_condition(
            client,
            condition,
            SHORT,
            "sidecar-bench/task:go-sidecar",
            "sidecar-bench/loadgen:latest",
            tmp_path / "x.parquet",
            "local",
        )
    assert {c.id for c in client.containers.list(all=True)} == before
    assert not (tmp_path / "x.parquet").exists()

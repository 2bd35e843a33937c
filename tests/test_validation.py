"""Bad input: every case refused with a message naming the key and the value, before any container starts.

Most cases are refused where the config is loaded (the Snakefile's first lines: `snakemake -n`
already fails); the ones that need the engine (its CPU and memory) at the start of the run job,
before anything is created on it, naming the host. The "Bad input" table of docs/operations.md lists them.
"""

from __future__ import annotations

import copy
import json
import re
import subprocess

import docker
import pytest
import yaml

from sidecar_bench import job, runner
from sidecar_bench.conditions import MIN_MEMORY_MB, Condition, ConfigError, LoadSettings
from sidecar_bench.experiment import check_host, load_experiment
from workflow_helpers import ROOT, copy_project, snakemake

BASE = yaml.safe_load((ROOT / "config.yaml").read_text())


def config_with(**changes) -> dict:
    config = copy.deepcopy(BASE)
    config["preset"] = "quick"
    for key, value in changes.items():
        config[key] = value
    return config


def one_set(**axes) -> dict:
    """sets.quick replaced by one set with the given axes over sane defaults."""
    quick = (
        dict(app=["go"], vcpu=[0.5], memory_mb=[2048], sidecar_count=[1], sidecar_load_pct=[5])
        | axes
    )
    return {**BASE["sets"], "quick": quick}


def refused(config: dict) -> str:
    with pytest.raises(ConfigError) as err:
        load_experiment(config)
    return str(err.value)


# (case, config, the message, as a regular expression)
CASES = [
    (
        "unknown app",
        config_with(sets=one_set(app=["rust"])),
        r"sets\.quick\.app\[0\]: 'rust' is not one of \['go', 'next'\]",
    ),
    (
        "vcpu 0",
        config_with(sets=one_set(vcpu=[0])),
        r"sets\.quick\.vcpu\[0\]: 0 is less than or equal to the minimum of 0",
    ),
    (
        "vcpu negative",
        config_with(sets=one_set(vcpu=[-1])),
        r"sets\.quick\.vcpu\[0\]: -1 is less than or equal to the minimum of 0",
    ),
    (
        "vcpu below Docker's 0.01",
        config_with(sets=one_set(vcpu=[0.001])),
        r"sets\.quick\.vcpu: 0\.001 is below 0\.01, the smallest CPU limit Docker accepts",
    ),
    (
        "memory that does not parse",
        config_with(sets=one_set(memory_mb=["2G"])),
        r"sets\.quick\.memory_mb\[0\]: '2G' is not of type 'integer'",
    ),
    (
        "memory below what Next.js needs",
        config_with(sets=one_set(app=["next"], memory_mb=[64])),
        r"sets\.quick\.memory_mb: 64 is below 128 MB, the least a next task needs to start",
    ),
    (
        "memory below what Go needs",
        config_with(sets=one_set(memory_mb=[16])),
        r"sets\.quick\.memory_mb: 16 is below 32 MB, the least a go task needs to start",
    ),
    (
        "memory below Docker's 6 MB",
        config_with(sets=one_set(memory_mb=[4])),
        r"sets\.quick\.memory_mb\[0\]: 4 is less than the minimum of 6",
    ),
    (
        "sidecar load above 100",
        config_with(sets=one_set(sidecar_load_pct=[101])),
        r"sets\.quick\.sidecar_load_pct\[0\]: 101 is greater than the maximum of 100",
    ),
    (
        "sidecar load negative",
        config_with(sets=one_set(sidecar_load_pct=[-5])),
        r"sets\.quick\.sidecar_load_pct\[0\]: -5 is less than the minimum of 0",
    ),
    (
        "sidecar count above 3",
        config_with(sets=one_set(sidecar_count=[4])),
        r"sets\.quick\.sidecar_count\[0\]: 4 is greater than the maximum of 3",
    ),
    (
        "unknown preset",
        config_with(preset="huge"),
        r"preset: 'huge' is not one of the presets \(article, .*quick",
    ),
    (
        "empty preset name",
        config_with(preset=None),
        r"preset: empty; name one of the presets \(article, ",
    ),
    (
        "preset without sets",
        config_with(presets={**BASE["presets"], "quick": {}}),
        r"presets\.quick: 'sets' is a required property",
    ),
    (
        "preset with an empty list of sets",
        config_with(presets={**BASE["presets"], "quick": {"sets": []}}),
        r"presets\.quick\.sets: \[\] should be non-empty",
    ),
    (
        "unknown set",
        config_with(presets={**BASE["presets"], "quick": {"sets": ["nope"]}}),
        r"sets: no set named 'nope' \(known: .*quick",
    ),
    (
        "set listed twice",
        config_with(presets={**BASE["presets"], "quick": {"sets": ["quick", "grid", "quick"]}}),
        r"presets\.quick\.sets: 'quick' is listed twice",
    ),
    (
        "empty set",
        config_with(sets={**BASE["sets"], "quick": {}}),
        r"sets\.quick: 'app' is a required property",
    ),
    (
        "set with an empty axis",
        config_with(sets=one_set(app=[])),
        r"sets\.quick\.app: \[\] should be non-empty",
    ),
    ("no presets at all", config_with(presets={}), r"presets: \{\} should be non-empty"),
    (
        "duration 0",
        config_with(load={**BASE["load"], "duration_s": 0}),
        r"load\.duration_s: 0 is less than or equal to the minimum of 0",
    ),
    (
        "concurrency 0",
        config_with(load={**BASE["load"], "concurrency": 0}),
        r"load\.concurrency: 0 is less than the minimum of 1",
    ),
    (
        "a preset's duration 0",
        config_with(
            presets={**BASE["presets"], "quick": {"sets": ["quick"], "load": {"duration_s": 0}}}
        ),
        r"presets\.quick\.load\.duration_s: 0 is less than or equal to the minimum of 0",
    ),
    ("repeats 0", config_with(repeats=0), r"repeats: 0 is less than the minimum of 1"),
    ("unknown top-level key", config_with(bogus=1), r"\(top level\): .*'bogus' was unexpected"),
    (
        "unknown load key",
        config_with(load={**BASE["load"], "durtion_s": 5}),
        r"load: .*'durtion_s' was unexpected",
    ),
    ("unknown axis", config_with(sets=one_set(cpus=[1])), r"sets\.quick: .*'cpus' was unexpected"),
    (
        "unknown preset key",
        config_with(presets={**BASE["presets"], "quick": {"sets": ["quick"], "repeat": 2}}),
        r"presets\.quick: .*'repeat' was unexpected",
    ),
    (
        "unknown host key",
        config_with(hosts=[{"name": "local", "url": None, "adress": "x"}]),
        r"hosts\[0\]: .*'adress' was unexpected",
    ),
    (
        "host address of an unknown kind",
        config_with(hosts=[{"name": "far", "url": "http://192.0.2.1:2375"}]),
        r"hosts\[0\]\.url: 'http://192\.0\.2\.1:2375' does not match",
    ),
    (
        "two hosts of one name",
        config_with(hosts=[{"name": "a", "url": None}, {"name": "a", "url": None}]),
        r"hosts: name 'a' is used twice",
    ),
    (
        "TLS file that does not exist",
        config_with(
            hosts=[
                {
                    "name": "secure",
                    "url": "tcp://127.0.0.1:2376",
                    "tls": {
                        "ca_cert": "/nonexistent/ca.pem",
                        "client_cert": "/nonexistent/cert.pem",
                        "client_key": "/nonexistent/key.pem",
                    },
                }
            ]
        ),
        r"hosts\[0\]\.tls\.ca_cert: '/nonexistent/ca\.pem' does not exist \(host 'secure'",
    ),
]


@pytest.mark.parametrize(
    "config, message", [case[1:] for case in CASES], ids=[case[0] for case in CASES]
)
def test_bad_input_is_refused_naming_the_key_and_the_value(config, message):
    text = refused(config)
    assert text.startswith("config.yaml: ")
    assert re.search(message, text), text


def test_a_tls_directory_is_not_a_file(tmp_path):
    for name in ("ca.pem", "cert.pem"):
        (tmp_path / name).write_text("PEM")
    (tmp_path / "key.pem").mkdir()
    tls = {
        "ca_cert": str(tmp_path / "ca.pem"),
        "client_cert": str(tmp_path / "cert.pem"),
        "client_key": str(tmp_path / "key.pem"),
    }
    text = refused(
        config_with(hosts=[{"name": "secure", "url": "tcp://127.0.0.1:2376", "tls": tls}])
    )
    assert re.search(r"hosts\[0\]\.tls\.client_key: '.*key\.pem' is not a file", text), text
    (tmp_path / "key.pem").rmdir()
    (tmp_path / "key.pem").write_text("PEM")
    load_experiment(
        config_with(hosts=[{"name": "secure", "url": "tcp://127.0.0.1:2376", "tls": tls}])
    )


def test_plain_tcp_beyond_loopback_is_refused_unless_the_host_says_so(tmp_path):
    text = refused(config_with(hosts=[{"name": "shared", "url": "tcp://192.0.2.10:2375"}]))
    assert re.search(
        r"hosts\[0\]\.url: 'tcp://192\.0\.2\.10:2375' is plain TCP without TLS to 192\.0\.2\.10, not "
        r"loopback: .*drive it, which is root on that machine \(host 'shared'\)\. Use ssh://.*insecure_tcp: "
        r"true",
        text,
    ), text
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_text("PEM")
    tls = {
        "ca_cert": str(tmp_path / "ca.pem"),
        "client_cert": str(tmp_path / "cert.pem"),
        "client_key": str(tmp_path / "key.pem"),
    }
    for host in (
        {"name": "tls", "url": "tcp://192.0.2.10:2376", "tls": tls},
        {"name": "opted-in", "url": "tcp://192.0.2.10:2375", "insecure_tcp": True},
        {"name": "loopback", "url": "tcp://127.0.0.1:2375"},
        {"name": "localhost", "url": "tcp://localhost:2375"},
        {"name": "v6", "url": "tcp://[::1]:2375"},
        {"name": "ssh", "url": "ssh://me@192.0.2.10"},
    ):
        load_experiment(config_with(hosts=[host]))


def test_docker_host_of_plain_tcp_beyond_loopback_is_refused_too():
    host = {"name": "local", "url": None}
    with pytest.raises(
        ConfigError,
        match=r"hosts\[0\]\.url \(null: DOCKER_HOST\): 'tcp://192\.0\.2\.10:2375' is "
        r"plain TCP without TLS",
    ):
        check_host(host, "config.yaml: hosts[0]", {"DOCKER_HOST": "tcp://192.0.2.10:2375"})
    check_host(
        host,
        "config.yaml: hosts[0]",
        {"DOCKER_HOST": "tcp://192.0.2.10:2376", "DOCKER_TLS_VERIFY": "1"},
    )
    check_host(host, "config.yaml: hosts[0]", {"DOCKER_HOST": "unix:///var/run/docker.sock"})
    check_host(host, "config.yaml: hosts[0]", {})


def test_every_preset_of_the_shipped_config_passes():
    for preset in BASE["presets"]:
        assert load_experiment({**BASE, "preset": preset}).conditions


def test_the_runner_api_still_takes_limits_the_config_refuses():
    # Tests make an app run out of memory on purpose: only the config refuses such limits.
    assert Condition("next", 1, 16, 0, 0).memory_mb == 16
    assert MIN_MEMORY_MB == {"go": 32, "next": 128}


# ---- checks that need the engine: at the start of the run job, naming the host --------------


def host_info() -> dict:
    try:
        return docker.from_env().info()
    except docker.errors.DockerException as err:
        pytest.fail(f"no Docker engine answers ({err}); scripts/bench.sh test starts one")


def test_limits_beyond_the_host_name_the_host_and_what_it_has():
    info = {"NCPU": 2, "MemTotal": 4 * 2**30}
    with pytest.raises(
        runner.RunError,
        match=r"go_cpu64_mem2048_sc0_load00: vcpu 64 is above the 2 CPUs of host "
        r"'big' \(ssh://me@big\)",
    ):
        runner.check_host_capacity(info, Condition("go", 64, 2048, 0, 0), "big", "ssh://me@big")
    with pytest.raises(
        runner.RunError, match=r"memory_mb 8192 is above the 4096 MiB of host 'big'"
    ):
        runner.check_host_capacity(info, Condition("go", 1, 8192, 0, 0), "big", "ssh://me@big")
    runner.check_host_capacity(info, Condition("go", 2, 4096, 0, 0), "big", "ssh://me@big")


def image_refs(tmp_path) -> dict:
    """Image refs no engine has: the checks must fail before any image is looked up or built."""
    refs = {}
    for part, variant in (("task", "go"), ("loadgen", "loadgen")):
        refs[part] = tmp_path / f"{part}.json"
        refs[part].write_text(
            json.dumps(
                {
                    "variant": variant,
                    "tag": "sidecar-bench/none:none",
                    "inputs_digest": "d",
                    "base_image": "debian:bookworm-slim",
                    "hosts": {"local": "sha256:0"},
                }
            )
        )
    return {part: str(path) for part, path in refs.items()}


def containers_of(condition: Condition) -> list:
    return docker.from_env().containers.list(
        all=True, filters={"label": f"{runner.CONDITION_LABEL}={condition.id}"}
    )


@pytest.mark.docker
def test_vcpu_above_the_engines_cpus_fails_at_the_start_of_the_job_naming_the_host(tmp_path):
    cpus = host_info()["NCPU"]
    condition = Condition("go", cpus + 1, 2034, 0, 0)
    out = tmp_path / "run.parquet"
    with pytest.raises(
        runner.RunError, match=rf"vcpu {cpus + 1} is above the {cpus} CPUs of host 'local'"
    ):
        job.main(
            condition.as_dict(),
            LoadSettings(duration_s=1).as_dict(),
            [{"name": "local", "url": None}],
            image_refs(tmp_path),
            str(out),
            str(tmp_path / "locks"),
        )
    assert not out.exists() and containers_of(condition) == []


@pytest.mark.docker
def test_memory_above_the_engines_fails_at_the_start_of_the_job_naming_the_host(tmp_path):
    mib = host_info()["MemTotal"] // 2**20
    condition = Condition("go", 1, mib + 1024, 0, 0)
    with pytest.raises(
        runner.RunError, match=rf"memory_mb {mib + 1024} is above the {mib} MiB of host 'local'"
    ):
        job.main(
            condition.as_dict(),
            LoadSettings(duration_s=1).as_dict(),
            [{"name": "local", "url": None}],
            image_refs(tmp_path),
            str(tmp_path / "run.parquet"),
            str(tmp_path / "locks"),
        )
    assert containers_of(condition) == []


def test_an_unreachable_host_is_named_and_its_reason_logged(tmp_path, caplog):
    condition = Condition("go", 1, 2033, 0, 0)
    hosts = [{"name": "gone", "url": "unix:///nonexistent/docker.sock"}]
    with caplog.at_level("WARNING"):
        with pytest.raises(
            runner.RunError, match=r"go_cpu1_mem2033_sc0_load00: no Docker host is reachable: gone"
        ):
            job.main(
                condition.as_dict(),
                LoadSettings().as_dict(),
                hosts,
                image_refs(tmp_path),
                str(tmp_path / "run.parquet"),
                str(tmp_path / "locks"),
            )
    assert re.search(
        r"gone \(unix:///nonexistent/docker\.sock\) is not reachable.*No such file or directory",
        caplog.text,
    ), caplog.text


def test_an_unreachable_ssh_host_is_named_too(tmp_path, caplog):
    # Nothing listens on port 1: paramiko's own error must be handled like the SDK's.
    condition = Condition("go", 1, 2033, 0, 0)
    hosts = [{"name": "far", "url": "ssh://nobody@127.0.0.1:1"}]
    with caplog.at_level("WARNING"):
        with pytest.raises(runner.RunError, match=r"no Docker host is reachable: far"):
            job.main(
                condition.as_dict(),
                LoadSettings().as_dict(),
                hosts,
                image_refs(tmp_path),
                str(tmp_path / "run.parquet"),
                str(tmp_path / "locks"),
            )
    assert "far (ssh://nobody@127.0.0.1:1) is not reachable" in caplog.text, caplog.text


# ---- the real Snakefile ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return copy_project(tmp_path_factory.mktemp("badinput") / "project")


def write_bad_config(project, **changes) -> None:
    config = config_with(**changes)
    (project / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            dict(sets=one_set(app=["next"], memory_mb=[64])),
            "sets.quick.memory_mb: 64 is below 128 MB",
        ),
        (
            dict(presets={**BASE["presets"], "quick": {"sets": ["quick", "quick"]}}),
            "presets.quick.sets: 'quick' is listed twice",
        ),
        (
            dict(
                hosts=[
                    {
                        "name": "secure",
                        "url": "tcp://127.0.0.1:2376",
                        "tls": {
                            "ca_cert": "missing-ca.pem",
                            "client_cert": "c.pem",
                            "client_key": "k.pem",
                        },
                    }
                ]
            ),
            "hosts[0].tls.ca_cert: 'missing-ca.pem' does not exist (host 'secure'",
        ),
    ],
    ids=["memory", "duplicate set", "tls file"],
)
@pytest.mark.workflow
def test_snakemake_dry_run_fails_with_the_message(project, changes, message):
    write_bad_config(project, **changes)
    done = snakemake(project, "--dry-run", timeout=120)
    assert done.returncode != 0 and message in done.stderr + done.stdout, done.stderr[-2000:]


@pytest.mark.workflow
def test_command_line_values_are_checked_like_the_file(project):
    (project / "config.yaml").write_text((ROOT / "config.yaml").read_text())
    done = snakemake(
        project,
        "--dry-run",
        "--config",
        "preset=quick",
        "sets={quick: {app: [go], vcpu: [1], memory_mb: [16], sidecar_count: [3], sidecar_load_pct: [5]}}",
        timeout=120,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0 and "sets.quick.memory_mb: 16 is below 32 MB" in output, output[
        -2000:
    ]


@pytest.mark.docker
def test_a_real_run_with_bad_input_starts_no_container(project):
    write_bad_config(project, sets=one_set(app=["next"], memory_mb=[17]))
    done = snakemake(project, timeout=300)
    assert (
        done.returncode != 0
        and "sets.quick.memory_mb: 17 is below 128 MB" in done.stdout + done.stderr
    )
    assert not (project / "results").exists()
    assert containers_of(Condition("next", 0.5, 17, 1, 5)) == []


@pytest.mark.docker
@pytest.mark.slow
def test_vcpu_above_the_hosts_cpus_fails_in_the_workflow_naming_the_host(project):
    cpus = host_info()["NCPU"]
    write_bad_config(project, sets=one_set(vcpu=[cpus + 1], memory_mb=[2032], sidecar_count=[0]))
    done = snakemake(project, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode != 0
    assert f"vcpu {cpus + 1} is above the {cpus} CPUs of host 'local'" in output, output[-3000:]
    condition = Condition("go", cpus + 1, 2032, 0, 0)
    assert containers_of(condition) == []
    assert not (project / "results" / "quick" / "runs" / condition.id).exists()

"""A Docker engine reached over SSH: the workflow builds and measures through it.

The test starts its own sshd on 127.0.0.1 (a free port, its own keys, nothing of
the machine's ssh set-up changed) and points the workflow's `hosts` at
ssh://root@127.0.0.1:<port>. The engine behind it is this machine's, so the run
also proves that the per-engine lock recognises one engine under two names.
"""

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import docker
import paramiko
import pyarrow.parquet as pq
import pytest
import yaml
from conftest import as_from_a_terminal, wait_until
from sidecar_bench import hosts, image, job, lease, runner, sshconn
from sidecar_bench.conditions import Condition, LoadSettings
from test_faults import containers_of, deaths, run_files, targets, tiny_config, wait_mid_run
from test_runner import image_for
from workflow_helpers import ROOT, SNAKEMAKE, copy_project, snakemake, write_config

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SSHD = Path("/usr/sbin/sshd")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def ssh_engine(tmp_path_factory):
    if not SSHD.exists():
        pytest.fail("openssh-server is not installed: scripts/bench.sh test installs it")
    base = tmp_path_factory.mktemp("ssh")
    home = base / "home"
    (home / ".ssh").mkdir(parents=True)
    for key in ("host_key", "client_key"):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / key)], check=True
        )
    shutil.copy(base / "client_key.pub", base / "authorized_keys")
    port = free_port()
    config = base / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {base / 'host_key'}\n"
        f"AuthorizedKeysFile {base / 'authorized_keys'}\nPidFile {base / 'sshd.pid'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nStrictModes no\nUsePAM no\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    sshd = subprocess.Popen(
        [str(SSHD), "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE, text=True
    )
    # The client side: a HOME of the test's own, read by the Docker SDK's ssh transport.
    host_key = (base / "host_key.pub").read_text().split()
    (home / ".ssh" / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    (home / ".ssh" / "config").write_text(
        f"Host 127.0.0.1\n  IdentityFile {base / 'client_key'}\n  User root\n"
    )
    for _ in range(50):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    yield f"ssh://root@127.0.0.1:{port}", str(home)
    sshd.terminate()
    sshd.wait(timeout=10)


# Memory sizes no experiment uses, so that a matrix's containers are never taken for these.
REMOTE_SC0 = Condition("go", 0.5, 2038, 0, 0)
REMOTE_SC1 = Condition("go", 0.5, 2036, 1, 10)
LOAD = LoadSettings(duration_s=2, warmup_s=0.5, ready_timeout_s=60)


def refs_for(tmp_path, client, host_name: str, condition: Condition) -> dict:
    """The image rule's files for the condition's images on host_name (client None: no image known)."""
    refs = {}
    for part, variant in (("task", condition.variant), ("loadgen", "loadgen")):
        tag = image.image_tag(variant)
        path = tmp_path / f"{host_name}-{part}.json"
        path.write_text(
            json.dumps(
                {
                    "variant": variant,
                    "tag": tag,
                    "inputs_digest": "test",
                    "hosts": {host_name: image_for(client, tag).id} if client else {},
                }
            )
        )
        refs[part] = str(path)
    return refs


def lease_holder_pid(client) -> str | None:
    held = lease.current(client)
    return None if held is None else (held.labels or {}).get(lease.LABEL_PREFIX + "pid")


def project_containers(client, condition: Condition) -> list:
    return client.containers.list(
        all=True, filters={"label": f"{runner.CONDITION_LABEL}={condition.id}"}
    )


def shape(value):
    """The nested keys of a run file's metadata, without the values."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    return type(value).__name__ if value is not None else None


def test_a_run_over_ssh_measures_and_cleans_up_like_a_local_one(tmp_path, ssh_engine, monkeypatch):
    url, home = ssh_engine
    local = docker.from_env()
    paths = {}
    # Every SSH log-in the job makes: one for the whole run, shared by all its Docker clients (the lease's too).
    logins = []
    connect = paramiko.SSHClient.connect
    monkeypatch.setattr(
        paramiko.SSHClient,
        "connect",
        lambda self, *args, **kwargs: (
            logins.append(kwargs.get("hostname")),
            connect(self, *args, **kwargs),
        )[1],
    )
    for name, address in (("local", None), ("viassh", url)):
        monkeypatch.setenv("HOME", home)
        out = tmp_path / f"{name}.parquet"
        job.main(
            REMOTE_SC1.as_dict(),
            LOAD.as_dict(),
            [{"name": name, "url": address}],
            refs_for(tmp_path, local, name, REMOTE_SC1),
            str(out),
            str(hosts.lock_dir()),
        )
        paths[name] = out
        assert logins == ([] if address is None else ["127.0.0.1"]), logins
        # Nothing of the run is left on the engine, its lease is given back, its SSH connection closed.
        assert project_containers(local, REMOTE_SC1) == []
        assert lease_holder_pid(local) != str(os.getpid())
        assert sshconn._CONNECTIONS == {}
    metas = {
        name: json.loads(pq.read_table(path).schema.metadata[b"sidecar_bench"])
        for name, path in paths.items()
    }
    remote, here = metas["viassh"], metas["local"]
    assert (
        remote["environment"]["docker_host"] == url
        and remote["environment"]["host_name"] == "viassh"
    )
    # The same checks passed and the same record came back: limits read from the task's cgroup,
    # throttling counters, every role's CPU, the failure count.
    assert remote["limits"]["cpu_quota_us"] / remote["limits"]["cpu_period_us"] == pytest.approx(
        0.5
    )
    assert remote["limits"]["memory_limit_bytes"] == REMOTE_SC1.memory_mb * 2**20
    assert remote["cgroup"]["nr_periods"] > 0 and remote["requests"]["rows"] > 0
    assert [p["role"] for p in remote["processes"]] == ["app", "proxy"]
    assert shape(remote) == shape(here)
    assert pq.read_table(paths["viassh"]).num_rows == remote["requests"]["rows"]


DRIVER = """
import sys
sys.stderr = open({log!r}, "w")
from sidecar_bench.job import main
main(condition={condition!r}, load={load!r}, hosts=[{{"name": "viassh", "url": {url!r}}}],
     image_refs={refs!r}, out={out!r}, lock_dir={lock_dir!r}, progress=None)
"""


def test_ctrl_c_over_ssh_removes_the_run_and_gives_the_lease_back(tmp_path, ssh_engine):
    url, home = ssh_engine
    local = docker.from_env()
    out, log = tmp_path / "run.parquet", tmp_path / "run.log"
    script = DRIVER.format(
        log=str(log),
        condition=REMOTE_SC0.as_dict(),
        load=LoadSettings(duration_s=30, ready_timeout_s=60).as_dict(),
        url=url,
        refs=refs_for(tmp_path, local, "viassh", REMOTE_SC0),
        out=str(out),
        lock_dir=str(hosts.lock_dir()),
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        env={**os.environ, "HOME": home},
        preexec_fn=as_from_a_terminal,
    )
    wait_until(
        lambda: (
            "app ready" in (log.read_text() if log.exists() else "") or process.poll() is not None
        ),
        120,
        "the run over ssh never got ready",
    )
    assert process.poll() is None, log.read_text()
    time.sleep(1.0)  # inside hey's window now
    assert project_containers(local, REMOTE_SC0), (
        "the run's containers should exist mid-measurement"
    )
    process.send_signal(signal.SIGINT)
    process.wait(timeout=60)
    assert process.returncode != 0
    assert "interrupted by SIGINT" in log.read_text()
    assert not out.exists()
    assert project_containers(local, REMOTE_SC0) == []
    wait_until(
        lambda: lease_holder_pid(local) != str(process.pid),
        10,
        "the lease taken over ssh outlived its holder",
    )


def other_key_known_hosts(home: str, tmp_path) -> None:
    """known_hosts with a key of another machine under the test sshd's name."""
    known = Path(home) / ".ssh" / "known_hosts"
    name, _, _ = known.read_text().split()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "impostor")],
        check=True,
    )
    kind, key = (tmp_path / "impostor.pub").read_text().split()[:2]
    known.write_text(f"{name} {kind} {key}\n")


def test_a_host_key_that_does_not_match_known_hosts_is_refused_naming_the_host(
    tmp_path, ssh_engine, monkeypatch
):
    url, home = ssh_engine
    mine = tmp_path / "home"
    shutil.copytree(home, mine)
    monkeypatch.setenv("HOME", str(mine))
    other_key_known_hosts(str(mine), tmp_path)
    port = url.rsplit(":", 1)[1]
    with pytest.raises(
        hosts.HostError,
        match=rf"{url}: the host key of \[127.0.0.1\]:{port} does not match "
        rf"known_hosts.*ssh-keygen -R '\[127.0.0.1\]:{port}'",
    ):
        hosts.client_for({"name": "lab", "url": url})
    # A job stops with it (an unreachable host would be skipped): the message names the condition and the host.
    with pytest.raises(
        runner.RunError, match=rf"{REMOTE_SC0.id}: {url}: the host key of .* does not match"
    ):
        job.main(
            REMOTE_SC0.as_dict(),
            LOAD.as_dict(),
            [{"name": "lab", "url": url}],
            refs_for(tmp_path, None, "lab", REMOTE_SC0),
            str(tmp_path / "run.parquet"),
            str(tmp_path / "locks"),
        )
    (mine / ".ssh" / "known_hosts").write_text("")
    with pytest.raises(
        hosts.HostError,
        match=rf"\[127.0.0.1\]:{port} is not in known_hosts.*ssh -p {port} root@127",
    ):
        hosts.client_for({"name": "lab", "url": url})
    assert sshconn._CONNECTIONS == {}


def test_an_ssh_config_alias_reaches_the_engine(tmp_path, ssh_engine, monkeypatch):
    url, home = ssh_engine
    mine = tmp_path / "home"
    shutil.copytree(home, mine)
    port = url.rsplit(":", 1)[1]
    config = mine / ".ssh" / "config"
    key = next(
        line.split()[1] for line in config.read_text().splitlines() if "IdentityFile" in line
    )
    config.write_text(
        f"Host lab\n  HostName 127.0.0.1\n  Port {port}\n  User root\n  IdentityFile {key}\n"
    )
    monkeypatch.setenv("HOME", str(mine))
    client = hosts.client_for({"name": "lab", "url": "ssh://lab"}, 30)
    try:
        assert client.info()["ID"] == docker.from_env().info()["ID"]
    finally:
        client.close()
    assert sshconn._CONNECTIONS == {}


def test_a_small_matrix_runs_on_an_engine_reached_over_ssh(tmp_path, ssh_engine):
    url, home = ssh_engine
    project = copy_project(tmp_path / "project")
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["sets"]["remote"] = dict(
        app=["go"], vcpu=[0.5], memory_mb=[512], sidecar_count=[0, 1], sidecar_load_pct=[10]
    )
    # No warm-up (test_a_run_over_ssh_measures_and_cleans_up_like_a_local_one warms up over ssh).
    config["presets"]["remote"] = {"sets": ["remote"], "load": {"duration_s": 2, "warmup_s": 0}}
    write_config(
        project,
        preset="remote",
        presets=config["presets"],
        sets=config["sets"],
        hosts=[{"name": "viassh", "url": url}],
    )
    matrix = ["go_cpu0.5_mem512_sc0_load00", "go_cpu0.5_mem512_sc1_load10"]
    # The run files and the images they need: what goes through ssh (the analysis would run on this machine).
    targets = [f"results/remote/runs/{cid}/rep1.parquet" for cid in matrix]
    done = snakemake(
        project,
        *targets,
        timeout=1200,
        env={"HOME": home, "DOCKER_HOST": "unix:///nonexistent.sock"},
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    runs = sorted((project / "results" / "remote" / "runs").glob("*/rep*.parquet"))
    assert [p.parent.name for p in runs] == matrix
    for path in runs:
        table = pq.read_table(path)
        meta = json.loads(table.schema.metadata[b"sidecar_bench"])
        assert table.num_rows > 0
        assert meta["environment"]["docker_host"] == url
        assert meta["environment"]["host_name"] == "viassh"
        assert meta["cgroup"]["nr_periods"] > 0
    images = json.loads((project / "results" / "images" / "go-sidecar.json").read_text())
    assert list(images["hosts"]) == ["viassh"]


def test_without_socket_forwarding_each_connection_runs_dial_stdio(
    tmp_path, ssh_engine, monkeypatch
):
    """A key restricted in authorized_keys (no forwarding): the engine is still reached, through dial-stdio."""
    url, home = ssh_engine
    mine = tmp_path / "home"
    shutil.copytree(home, mine)
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "restricted")],
        check=True,
    )
    config = mine / ".ssh" / "config"
    authorized = Path(
        next(line.split()[1] for line in config.read_text().splitlines() if "IdentityFile" in line)
    ).with_name("authorized_keys")
    original = authorized.read_text()
    authorized.write_text(original + "restrict " + (tmp_path / "restricted.pub").read_text())
    config.write_text(f"Host 127.0.0.1\n  IdentityFile {tmp_path / 'restricted'}\n  User root\n")
    monkeypatch.setenv("HOME", str(mine))
    try:
        client = hosts.client_for({"name": "lab", "url": url}, 30)
        try:
            assert client.info()["ID"] == docker.from_env().info()["ID"]
            assert sshconn._CONNECTIONS[url].forwarding is False
        finally:
            client.close()
    finally:
        authorized.write_text(original)


def test_sigkill_of_the_workflow_stops_the_remote_task_and_load_generator_within_seconds(
    tmp_path, ssh_engine
):
    # The attach connection that ties the containers to the job runs through ssh: the job's death closes the
    # ssh session, sshd's `docker system dial-stdio` ends, and the engine closes the containers' stdin.
    url, home = ssh_engine
    memory = 525
    project = copy_project(tmp_path / "project")
    config = tiny_config(memory, hosts=[{"name": "viassh", "url": url}])
    config["presets"]["faults"]["load"]["duration_s"] = (
        20  # the kill lands inside the window, even on a slow engine
    )
    write_config(project, **config)
    client = docker.from_env()  # the same engine, seen from here
    log = open(project / "snakemake.out", "w")
    process = subprocess.Popen(
        [
            SNAKEMAKE,
            "--cores",
            "1",
            "--directory",
            str(project),
            "--snakefile",
            str(project / "Snakefile"),
            *targets(memory),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=as_from_a_terminal,
        env={**os.environ, "HOME": home, "DOCKER_HOST": "unix:///nonexistent.sock"},
    )
    try:
        interrupted = wait_mid_run(
            process, project, client, memory, timeout=600
        )  # may wait for the lease
        killed = time.time()
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    # The job died with its run unfinished (it could not remove its containers itself).
    assert interrupted not in run_files(project), (project / "snakemake.out").read_text()[-3000:]
    try:
        died = deaths(client, interrupted, killed)
        assert {part: code for part, (_, code) in died.items()} == {"task": 137, "loadgen": 137}
        logging.getLogger(__name__).warning(
            "the killed job's remote containers stopped %s s after the kill",
            {part: round(after, 2) for part, (after, _) in died.items()},
        )
    finally:
        for container in containers_of(client, {interrupted}):
            try:
                client.api.remove_container(container["Id"], force=True)
            except (
                docker.errors.APIError
            ):  # gone meanwhile, or being removed by another job's sweep
                pass

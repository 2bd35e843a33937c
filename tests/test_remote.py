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
import time
from pathlib import Path

import docker
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import as_from_a_terminal
from test_faults import containers_of, deaths, run_files, targets, tiny_config, wait_mid_run
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
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / key)], check=True)
    shutil.copy(base / "client_key.pub", base / "authorized_keys")
    port = free_port()
    config = base / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {base / 'host_key'}\n"
        f"AuthorizedKeysFile {base / 'authorized_keys'}\nPidFile {base / 'sshd.pid'}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\nStrictModes no\nUsePAM no\n"
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    sshd = subprocess.Popen([str(SSHD), "-D", "-e", "-f", str(config)], stderr=subprocess.PIPE, text=True)
    # The client side: a HOME of the test's own, read by the Docker SDK's ssh transport.
    host_key = (base / "host_key.pub").read_text().split()
    (home / ".ssh" / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_key[0]} {host_key[1]}\n")
    (home / ".ssh" / "config").write_text(f"Host 127.0.0.1\n  IdentityFile {base / 'client_key'}\n  User root\n")
    for _ in range(50):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.1)
    yield f"ssh://root@127.0.0.1:{port}", str(home)
    sshd.terminate()
    sshd.wait(timeout=10)


def test_a_small_matrix_runs_on_an_engine_reached_over_ssh(tmp_path, ssh_engine):
    url, home = ssh_engine
    project = copy_project(tmp_path / "project")
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["sets"]["remote"] = dict(app=["go"], vcpu=[0.5], memory_mb=[512], sidecar_count=[0, 1], sidecar_load_pct=[10])
    config["presets"]["remote"] = {"sets": ["remote"], "load": {"duration_s": 2}}
    write_config(project, preset="remote", presets=config["presets"], sets=config["sets"], hosts=[{"name": "viassh", "url": url}])
    done = snakemake(project, timeout=1200, env={"HOME": home, "DOCKER_HOST": "unix:///nonexistent.sock"})
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    runs = sorted((project / "results" / "remote" / "runs").glob("*/rep*.parquet"))
    assert [p.parent.name for p in runs] == ["go_cpu0.5_mem512_sc0_load00", "go_cpu0.5_mem512_sc1_load10"]
    for path in runs:
        table = pq.read_table(path)
        meta = json.loads(table.schema.metadata[b"sidecar_bench"])
        assert table.num_rows > 0
        assert meta["environment"]["docker_host"] == url
        assert meta["environment"]["host_name"] == "viassh"
        assert meta["cgroup"]["nr_periods"] > 0
    images = json.loads((project / "results" / "images" / "go-sidecar.json").read_text())
    assert list(images["hosts"]) == ["viassh"]


def test_sigkill_of_the_workflow_stops_the_remote_task_and_load_generator_within_seconds(tmp_path, ssh_engine):
    # The attach connection that ties the containers to the job runs through ssh: the job's death closes the
    # ssh session, sshd's `docker system dial-stdio` ends, and the engine closes the containers' stdin.
    url, home = ssh_engine
    memory = 525
    project = copy_project(tmp_path / "project")
    config = tiny_config(memory, hosts=[{"name": "viassh", "url": url}])
    config["presets"]["faults"]["load"]["duration_s"] = 20  # the kill lands inside the window, even on a slow engine
    write_config(project, **config)
    client = docker.from_env()  # the same engine, seen from here
    log = open(project / "snakemake.out", "w")
    process = subprocess.Popen(
        [SNAKEMAKE, "--cores", "1", "--directory", str(project), "--snakefile", str(project / "Snakefile"),
         *targets(memory)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=as_from_a_terminal,
        env={**os.environ, "HOME": home, "DOCKER_HOST": "unix:///nonexistent.sock"})
    try:
        interrupted = wait_mid_run(process, project, client, memory, timeout=600)  # may wait for the lease
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
        logging.getLogger(__name__).warning("the killed job's remote containers stopped %s s after the kill",
                                            {part: round(after, 2) for part, (after, _) in died.items()})
    finally:
        for container in containers_of(client, {interrupted}):
            try:
                client.api.remove_container(container["Id"], force=True)
            except docker.errors.APIError:  # gone meanwhile, or being removed by another job's sweep
                pass

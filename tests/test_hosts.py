"""Two Docker engines on one machine: the images are built on both, and runs never overlap.

The test starts a second dockerd of its own (own data root, socket, engine id and
bridge; tasks need only loopback) beside the machine's engine, and
runs a small matrix with --cores 2 over both. Both engines share the machine's cores,
so the machine-wide lease (lease.py) lets only one of them measure at a time.
"""

import json
import os
import shutil
import subprocess
import tempfile
import time
from datetime import datetime
from pathlib import Path

import docker
import pyarrow.parquet as pq
import pytest
import yaml

from sidecar_bench import image
from workflow_helpers import ROOT, copy_project, snakemake, write_config

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def second_engine():
    # A short path: unix socket paths are limited to 108 bytes.
    base = Path(tempfile.mkdtemp(prefix="sb-engine-", dir="/tmp"))
    # Its own key file gives the engine an id of its own (the lock is per engine id).
    (base / "daemon.json").write_text(json.dumps({"deprecated-key-path": str(base / "key.json")}))
    socket = base / "docker.sock"
    # A bridge of its own: started with --bridge=none, dockerd deletes the interface
    # docker0, which the machine's engine needs. No traffic is sent over it.
    bridge = f"sbbr{os.getpid() % 100000}"
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    subprocess.run(["ip", "link", "set", bridge, "up"], check=True)
    log = open(base / "dockerd.log", "w")
    dockerd = subprocess.Popen(
        [
            "dockerd",
            "--config-file",
            str(base / "daemon.json"),
            "--data-root",
            str(base / "data"),
            "--exec-root",
            str(base / "exec"),
            "--pidfile",
            str(base / "docker.pid"),
            "-H",
            f"unix://{socket}",
            f"--bridge={bridge}",
            "--iptables=false",
            "--ip-masq=false",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"unix://{socket}"
    deadline = time.monotonic() + 60
    while True:
        try:
            docker.DockerClient(base_url=url).ping()
            break
        except docker.errors.DockerException:
            if time.monotonic() > deadline or dockerd.poll() is not None:
                pytest.fail(
                    f"the second dockerd did not start:\n{(base / 'dockerd.log').read_text()[-3000:]}"
                )
            time.sleep(0.5)
    preload_images(url)
    yield url
    dockerd.terminate()
    dockerd.wait(timeout=60)
    log.close()
    # dockerd leaves its network namespace mount behind.
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    for mount in sorted((m for m in mounts if m.startswith(str(base))), reverse=True):
        subprocess.run(["umount", "-l", mount], check=False)
    shutil.rmtree(base, ignore_errors=True)
    subprocess.run(["ip", "link", "delete", bridge], check=False)


def preload_images(url):
    """Give the second engine the machine engine's images (docker save | docker load).

    Builds run on an engine's own bridge with NAT to the outside (image.py); this engine's
    bridge has none, so that it never touches the machine's iptables, and a build there could
    not reach Debian's mirror. With the images loaded, whose labels carry the current inputs
    digests, the workflow's "build on every host" finds them up to date there.
    """
    local = docker.from_env()
    base = image.ensure_base(local, "debian:bookworm-slim", "debootstrap")
    tags = [base] + [image.image_tag(variant) for variant in ("go", "go-sidecar", "loadgen")]
    for variant in ("go", "go-sidecar", "loadgen"):
        image.ensure_variant(local, variant, base)
    save = subprocess.Popen(["docker", "save", *tags], stdout=subprocess.PIPE)
    loaded = subprocess.run(
        ["docker", "-H", url, "load", "-q"], stdin=save.stdout, capture_output=True, text=True
    )
    save.stdout.close()
    assert save.wait() == 0 and loaded.returncode == 0, loaded.stderr


def windows(runs):
    for path in runs:
        meta = json.loads(pq.read_schema(path).metadata[b"sidecar_bench"])
        env = meta["environment"]
        yield (
            env["host_name"],
            env["engine_id"],
            datetime.fromisoformat(env["run_start"]),
            datetime.fromisoformat(env["run_end"]),
        )


def test_two_engines_of_one_machine_never_measure_at_once(tmp_path, second_engine):
    project = copy_project(tmp_path / "project")
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    config["sets"]["two"] = dict(
        app=["go"], vcpu=[0.5, 1], memory_mb=[512], sidecar_count=[0, 1], sidecar_load_pct=[10]
    )
    # No warm-up: the spans compared below are whole runs, whatever their phases.
    config["presets"]["two"] = {"sets": ["two"], "load": {"duration_s": 3, "warmup_s": 0}}
    hosts = [{"name": "first", "url": None}, {"name": "second", "url": second_engine}]
    write_config(project, preset="two", presets=config["presets"], sets=config["sets"], hosts=hosts)
    # The matrix's run files and the images they need on both engines; the analysis measures nothing.
    targets = [
        f"results/two/runs/go_cpu{vcpu}_mem512_sc{count}_load{load}/rep1.parquet"
        for vcpu in ("0.5", "1")
        for count, load in ((0, "00"), (1, "10"))
    ]
    done = snakemake(project, *targets, cores=2, timeout=1500)
    assert done.returncode == 0, (done.stdout + done.stderr)[-6000:]
    # Its engines share a machine: the workflow holds neither's lease (engine_hold.py), or an image
    # build bound to one engine would wait for ever on the lease the workflow holds on the other.
    assert "shares its machine with another engine of this workflow" in done.stdout + done.stderr

    runs = sorted((project / "results" / "two" / "runs").glob("*/rep*.parquet"))
    assert len(runs) == 4
    spans = list(windows(runs))
    assert {name for name, *_ in spans} <= {"first", "second"}
    # Two engines of one machine share its cores: the machine's lease lets only one measure at a time,
    # whichever engine each run landed on.
    ordered = sorted((start, end) for _, _, start, end in spans)
    for (_, end), (start, _) in zip(ordered, ordered[1:]):
        assert end <= start, f"two runs overlapped on one machine: {spans}"
    images = json.loads((project / "results" / "images" / "go-sidecar.json").read_text())
    assert set(images["hosts"]) == {"first", "second"}

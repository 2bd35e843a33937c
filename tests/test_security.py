"""How a run's containers are confined, read back from the engine; SIGHUP; a clean-up that survives its transport.

The settings are asked for at container creation (runner.hardening) and checked here as the
engine reports them (container.attrs["HostConfig"]) and as the processes inside see them
(/proc/<pid>/status). docs/operations.md, "Security", lists them.
"""

from __future__ import annotations

import io
import logging
import signal
import subprocess
import sys
import time
import uuid

import docker
import paramiko
import pytest
import requests

from conftest import hold_engine
from sidecar_bench import hosts, image, runner
from sidecar_bench.conditions import Condition, LoadSettings


@pytest.fixture()
def engine():
    yield from hold_engine("tests/test_security.py")


def image_for(client, variant: str):
    """The variant's image, built from the project's sources if this engine lacks it (never skipped)."""
    try:
        return client.images.get(image.image_tag(variant))
    except docker.errors.ImageNotFound:
        base = image.ensure_base(client, "debian:bookworm-slim", "debootstrap")
        return client.images.get(image.ensure_variant(client, variant, base))


def status_fields(client, container_id: str, pid: str) -> dict:
    """Cap*, NoNewPrivs and Seccomp lines of /proc/<pid>/status inside a container."""
    text = runner.exec_in(client, container_id, ["cat", f"/proc/{pid}/status"]).stdout
    return {
        key: value.strip()
        for key, _, value in (line.partition(":") for line in text.splitlines())
        if key.startswith("Cap") or key in ("NoNewPrivs", "Seccomp")
    }


NO_CAPABILITIES = "0000000000000000"


@pytest.mark.docker
@pytest.mark.parametrize(
    "variant, app, proxy",
    [
        ("go-sidecar", "go", "busy-loop"),
        ("next-sidecar", "next", "busy-loop"),
        ("go-proxy", "go", "haproxy"),
    ],
)
def test_task_and_load_generator_run_confined_and_still_answer(client, engine, variant, app, proxy):
    condition = Condition(app, 0.5, 2031, 3, 5, proxy)
    measurement = runner.Measurement(
        client,
        condition,
        LoadSettings(duration_s=1, ready_timeout_s=60),
        image_for(client, variant),
        image_for(client, "loadgen"),
        uuid.uuid4().hex,
    )
    try:
        measurement.start()
        # The app and its three sidecars start and answer under these settings.
        measurement.wait_ready()
        task = client.containers.get(measurement.task.id)
        loadgen = client.containers.get(measurement.loadgen.id)
        # The writable places the README's "Security" table documents, as the engine applied them; with
        # HAProxy's access log on, its directory too (docs/proxy.md).
        documented = (
            {"/run": "rw,nosuid,nodev,noexec,size=1m", "/tmp": "rw,nosuid,nodev,noexec,size=16m"},
            {"/tmp": "rw,nosuid,nodev,noexec,size=256m"},
        )
        if proxy == "haproxy":
            documented[0]["/var/log/proxy"] = "rw,nosuid,nodev,noexec,size=128m"
        for container, network, tmpfs in (
            (task, "none", documented[0]),
            (loadgen, f"container:{task.id}", documented[1]),
        ):
            host_config = container.attrs["HostConfig"]
            assert host_config["Privileged"] is False
            assert host_config["CapDrop"] == ["ALL"] and not host_config["CapAdd"]
            assert host_config["SecurityOpt"] == ["no-new-privileges:true"]
            assert host_config["ReadonlyRootfs"] is True
            assert host_config["Tmpfs"] == tmpfs
            assert not host_config["PortBindings"] and host_config["PublishAllPorts"] is False
            assert host_config["NetworkMode"] == network
            assert not container.attrs["NetworkSettings"]["Ports"]
        # Every process of the task (entrypoint, app, sidecars) and of an exec: no capability,
        # no way to gain one, and the engine's default seccomp filter.
        pids = runner.exec_in(
            client, task.id, ["sh", "-c", "cd /proc && echo [0-9]*"]
        ).stdout.split()
        assert len(pids) >= 5, pids
        checked = 0
        for container, pid in [(task, pid) for pid in pids] + [(loadgen, "self")]:
            fields = status_fields(client, container.id, pid)
            if not fields:
                continue  # the exec's own short-lived processes
            checked += 1
            assert {fields[k] for k in ("CapPrm", "CapEff", "CapBnd", "CapInh", "CapAmb")} == {
                NO_CAPABILITIES
            }, fields
            assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2", fields
        assert checked >= 5  # entrypoint, app, 3 sidecars (and the load generator's exec)
        # And as the kernel mounted them inside: tmpfs, nosuid, nodev, noexec, of the documented size (KiB).
        for container, sizes in (
            (task, {"/run": 1024, "/tmp": 16384}),
            (loadgen, {"/tmp": 262144}),
        ):
            mounts = runner.exec_in(
                client, container.id, ["cat", "/proc/mounts"]
            ).stdout.splitlines()
            for path, kib in sizes.items():
                fields = next(line.split() for line in mounts if line.split()[1] == path)
                options = set(fields[3].split(","))
                assert (
                    fields[2] == "tmpfs"
                    and {"nosuid", "nodev", "noexec", f"size={kib}k"} <= options
                ), fields
        # The root file system is read-only; the tmpfs mounts are where writes go.
        for container in (task, loadgen):
            denied = runner.exec_in(client, container.id, ["sh", "-c", "echo x > /written"])
            assert denied.exit_code != 0 and "Read-only file system" in denied.stderr
            assert (
                runner.exec_in(
                    client, container.id, ["sh", "-c", "echo x > /tmp/written"]
                ).exit_code
                == 0
            )
        # Even root inside cannot do what needs a capability (here: change a file's owner).
        chown = runner.exec_in(client, task.id, ["chown", "65534", "/tmp/written"])
        assert chown.exit_code != 0 and "Operation not permitted" in chown.stderr
    finally:
        measurement.remove()
    assert (
        client.containers.list(
            all=True, filters={"label": f"{runner.RUN_LABEL}={measurement.run_id}"}
        )
        == []
    )


@pytest.mark.docker
def test_build_steps_do_not_see_the_hosts_network(client, engine, caplog):
    # A step on the host's network would list the host's interfaces (docker0 among them).
    base = image.ensure_base(client, "debian:bookworm-slim", "debootstrap")
    nonce = uuid.uuid4().hex
    dockerfile = f"FROM {base}\nRUN echo {nonce} && cat /proc/net/dev\n".encode()
    with caplog.at_level(logging.DEBUG, logger=image.log.name):
        built = image._stream_build(client, "network probe", fileobj=io.BytesIO(dockerfile))
    try:
        output = caplog.text
        assert nonce in output
        host_interfaces = set(
            subprocess.run(["ls", "/sys/class/net"], capture_output=True, text=True).stdout.split()
        )
        assert "docker0" in host_interfaces
        assert "docker0:" not in output, output[-2000:]
        assert "eth0:" in output and "lo:" in output, output[-2000:]
    finally:
        client.images.remove(built, force=True)


# ---- SIGHUP ----------------------------------------------------------------------------------

DRIVER = """
import sys
sys.stderr = open({log!r}, "w")
from sidecar_bench.job import main
main(condition={condition!r}, load={load!r}, hosts=[{{"name": "local", "url": None}}],
     image_refs={refs!r}, out={out!r}, lock_dir={lock_dir!r}, progress=None)
"""


def image_refs(client, tmp_path) -> dict:
    import json

    refs = {}
    for part, variant in (("task", "go-sidecar"), ("loadgen", "loadgen")):
        path = tmp_path / f"{part}.json"
        path.write_text(
            json.dumps(
                {
                    "variant": variant,
                    "tag": image.image_tag(variant),
                    "inputs_digest": "test",
                    "hosts": {"local": image_for(client, variant).id},
                }
            )
        )
        refs[part] = str(path)
    return refs


@pytest.mark.docker
def test_sighup_mid_run_cleans_up_like_sigterm(client, tmp_path):
    # Closing the terminal that runs Snakemake sends SIGHUP to the job.
    condition = Condition("go", 0.25, 2030, 1, 10)
    out, log = tmp_path / "run.parquet", tmp_path / "run.log"
    script = DRIVER.format(
        log=str(log),
        condition=condition.as_dict(),
        load=LoadSettings(duration_s=30, ready_timeout_s=60).as_dict(),
        refs=image_refs(client, tmp_path),
        out=str(out),
        lock_dir=str(hosts.lock_dir()),
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    leftovers = lambda: client.containers.list(  # noqa: E731
        all=True, filters={"label": f"{runner.CONDITION_LABEL}={condition.id}"}
    )
    try:
        deadline = (
            time.monotonic() + 300
        )  # it may wait for another measurement's engine lease first
        while "app ready" not in (log.read_text() if log.exists() else ""):
            assert process.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        time.sleep(1.0)  # inside hey's window now
        assert leftovers(), "the run's containers should exist mid-measurement"
        process.send_signal(signal.SIGHUP)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode != 0
    assert "interrupted by SIGHUP" in log.read_text()
    assert (
        not out.exists() and list(tmp_path.glob("*.tmp")) == [] and list(tmp_path.glob(".*")) == []
    )
    assert leftovers() == []


def test_the_stop_signals_include_sighup():
    assert set(runner.STOP_SIGNALS) == {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    with runner.signals_raise():
        with pytest.raises(runner.Interrupted, match="SIGHUP"):
            signal.raise_signal(signal.SIGHUP)
    with runner.signals_deferred() as received:
        signal.raise_signal(signal.SIGHUP)
    assert received == [signal.SIGHUP]


# ---- clean-up through a failing transport ------------------------------------------------------


class FakeContainer:
    """Stands in for a container object only to make its removal fail; no engine behind it."""

    def __init__(self, name: str, error: BaseException | None = None) -> None:
        self.id = self.name = name
        self.error = error
        self.removed = False

    def remove(self, force: bool = False) -> None:
        if self.error is not None:
            raise self.error
        self.removed = True


class FailingContainers:
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def list(self, **kwargs):
        raise self.error


class FailingClient:
    def __init__(self, error: BaseException) -> None:
        self.containers = FailingContainers(error)


@pytest.mark.parametrize(
    "error",
    [
        requests.exceptions.ConnectionError("Connection aborted: RemoteDisconnected"),
        requests.exceptions.ReadTimeout("read timed out"),
        paramiko.SSHException("SSH session not active"),
        OSError(32, "Broken pipe"),
        docker.errors.APIError("500 Server Error"),
    ],
    ids=["requests connection", "requests timeout", "paramiko", "oserror", "api error"],
)
def test_removal_goes_on_past_a_transport_error(error, caplog):
    measurement = runner.Measurement(
        FailingClient(error), Condition("go", 1, 2048, 0, 0), LoadSettings(), None, None, "run"
    )
    measurement.loadgen = FakeContainer("loadgen", error)
    measurement.task = FakeContainer("task")
    with caplog.at_level(logging.WARNING, logger=runner.Measurement.__module__):
        measurement.remove()  # raises nothing
    assert measurement.task.removed
    assert "listing containers of run run failed" in caplog.text
    assert f"could not remove container loadgen ({type(error).__name__}" in caplog.text

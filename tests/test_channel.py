"""The load generator's command channel (channel.py): a command sent over its attached stdin comes back as an exec's
would (status, stdout, stderr, arguments byte for byte, no stdin), and the container still ends with the runner's
connection, at once even while a command runs, or at its deadline."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import docker
import docker.errors
import pytest

from conftest import hold_engine, wait_until
from sidecar_bench import channel, image
from sidecar_bench.containers import LOADGEN_TMPFS, hardening
from sidecar_bench.failures import RunError

LIBRARY = str(Path(channel.__file__).resolve().parents[1])


def test_a_command_is_its_arguments_each_ended_by_a_nul_in_base64():
    assert channel.encode(["sh", "-c", "echo 'a b'\n", ""]) == b"c2gALWMAZWNobyAnYSBiJwoAAA==\n"
    with pytest.raises(ValueError, match="channel can send"):
        channel.encode(["printf", "a\0b"])
    with pytest.raises(ValueError):
        channel.encode([])


@pytest.mark.parametrize(
    "out, done",
    [
        (b"text\n@@channel-done 0\n", True),
        (b"no newline@@channel-done 127\n", True),
        (b"text\n@@channel-done 0", False),  # its status not yet complete
        (b"@@channel-done x\n", False),
        (b"text\n", False),
    ],
)
def test_a_commands_end_is_its_mark_and_status_on_stdout(out, done):
    assert channel._done(bytearray(out)) is done


@pytest.fixture()
def engine():
    yield from hold_engine("tests/test_channel.py")


def loadgen_image(client):
    try:
        return client.images.get(image.image_tag("loadgen"))
    except docker.errors.ImageNotFound:
        base = image.ensure_base(client, "debian:bookworm-slim", "debootstrap")
        return client.images.get(image.ensure_variant(client, "loadgen", base))


def channel_container(client, deadline_s=120):
    """A load generator as the runner makes it (channel.py's PID 1, attached), started: (container, socket)."""
    container = client.containers.create(
        loadgen_image(client).id,
        detach=False,
        stdin_open=True,
        entrypoint=channel.entrypoint(deadline_s),
        network_mode="none",
        log_config={"type": "none"},
        labels={"org.sidecar-bench.project": "sidecar-bench", "org.sidecar-bench.part": "loadgen"},
        **hardening(LOADGEN_TMPFS),
    )
    sock = client.api.attach_socket(
        container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
    )
    container.start()
    return container, sock


@pytest.mark.docker
def test_a_command_comes_back_as_an_exec_would(engine):
    container, sock = channel_container(engine)
    try:
        channel_ = channel.Channel(sock)
        result = channel_.run(["sh", "-c", "echo out; echo err >&2; exit 3"], 30)
        assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
        # Arguments byte for byte: spaces, quotes, newlines, an empty one.
        odd = ["a b", " x\n\"'y", "", "$HOME `id`"]
        result = channel_.run(["printf", "%s|", *odd], 30)
        assert result.stdout == "".join(f"{arg}|" for arg in odd) and result.exit_code == 0
        # No stdin: a command that reads it ends at once.
        assert channel_.run(["sh", "-c", "cat; echo read"], 30).stdout == "read\n"
        assert channel_.run(["no-such-command"], 30).exit_code == 127
        assert channel_.run(["sh", "-c", "kill -9 $$"], 30).exit_code == 137
        # A large output (hey's CSV reaches ~70 MB), in full.
        big = channel_.run(["sh", "-c", "head -c 5000000 /dev/zero | tr '\\0' x"], 60)
        assert big.stdout == "x" * 5_000_000
        # Its commands are the container's own processes, as an exec's: the same cgroup and file system.
        assert (
            channel_.run(["cat", "/proc/self/cgroup"], 30).stdout
            == engine.api.exec_start(
                engine.api.exec_create(container.id, ["cat", "/proc/self/cgroup"])["Id"]
            ).decode()
        )
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_a_removed_container_ends_the_channel_with_a_run_error(engine):
    container, sock = channel_container(engine)
    channel_ = channel.Channel(sock)
    container.remove(force=True)
    with pytest.raises(RunError, match="load generator's channel"):
        channel_.run(["true"], 30)


HOLDER = textwrap.dedent(
    """
    import sys, time
    import docker
    from sidecar_bench import channel

    client = docker.from_env()
    sock = client.api.attach_socket(sys.argv[1], params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
    client.containers.get(sys.argv[1]).start()
    sock._sock.sendall(channel.encode(["sleep", "300"]))
    print("running", flush=True)
    time.sleep(300)
    """
)


@pytest.mark.docker
def test_the_runners_kill_9_ends_the_container_within_seconds_even_mid_command(engine):
    container = engine.containers.create(
        loadgen_image(engine).id,
        detach=False,
        stdin_open=True,
        entrypoint=channel.entrypoint(600),
        network_mode="none",
        log_config={"type": "none"},
        **hardening(LOADGEN_TMPFS),
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, container.id],
        env={**os.environ, "PYTHONPATH": LIBRARY},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "running\n"
        time.sleep(0.5)
        processes = engine.api.exec_start(
            engine.api.exec_create(
                container.id,
                ["sh", "-c", 'for p in /proc/[0-9]*; do tr "\\0" " " < "$p/cmdline"; echo; done'],
            )["Id"]
        ).decode()
        assert "sleep 300" in processes, processes
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        killed = time.monotonic()
        # Not when its command ends (300 s) nor at its deadline (600 s): within seconds of the runner's death.
        wait_until(
            lambda: engine.containers.get(container.id).status != "running",
            10,
            "the load generator outlived its runner",
        )
        assert time.monotonic() - killed < 10
        assert engine.containers.get(container.id).attrs["State"]["ExitCode"] == 137
    finally:
        if holder.poll() is None:
            holder.kill()
        container.remove(force=True)


@pytest.mark.docker
def test_the_container_ends_at_its_deadline_without_its_runner_saying_so(engine):
    container, sock = channel_container(engine, deadline_s=2)
    try:
        wait_until(
            lambda: engine.containers.get(container.id).status != "running",
            15,
            "the load generator outlived its deadline",
        )
        assert engine.containers.get(container.id).attrs["State"]["ExitCode"] == 137
    finally:
        sock.close()
        container.remove(force=True)

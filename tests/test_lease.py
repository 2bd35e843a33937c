"""The engine lease (scripts/sidecar_bench/lease.py) and the local lock, on the real engine.

Each test that takes the lease uses a lock directory of its own, so the local lock does
not hide the lease: that is how a second checkout or a second machine meets the first.
"""

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time

import docker
import pytest

from conftest import wait_until
from sidecar_bench import hosts, job, lease, runner

LOCAL = [{"name": "local", "url": None}]

HOLDER = textwrap.dedent("""
    import sys, time
    from sidecar_bench import hosts, lease
    lease.IDLE_S = {idle}
    with hosts.host_lock([{{"name": "local", "url": None}}], {locks!r}, 60, {what!r}):
        print("HOLDING", flush=True)
        time.sleep({hold})
""")


def start_holder(tmp_path, what="holder run", hold=60, idle=60, cwd=None):
    """Another workflow: a process of its own, its own lock directory, holding the lease."""
    locks = tmp_path / f"locks-{what.replace(' ', '-')}"
    script = HOLDER.format(locks=str(locks), what=what, hold=hold, idle=idle)
    process = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=cwd or tmp_path
    )
    line = process.stdout.readline()
    assert line.strip() == "HOLDING", f"the holder did not get the lease: {line!r}"
    return process


@pytest.fixture
def client():
    client = docker.from_env()
    yield client
    client.close()


def released(client, holder):
    """The lease of that holder process is gone (another workflow may hold the engine by now)."""
    current = lease.current(client)
    return current is None or current.labels.get(lease.LABEL_PREFIX + "pid") != str(holder.pid)


def create_when_free(client, **kwargs):
    """A container named like the lease, as soon as no one holds the engine (others may be testing)."""
    deadline = time.monotonic() + 120
    while True:
        try:
            return client.containers.create(name=lease.LEASE_NAME, **kwargs)
        except docker.errors.APIError as err:
            if err.status_code != 409 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.docker
def test_a_second_client_is_refused_and_told_who_holds_the_engine(client, tmp_path):
    checkout = tmp_path / "other-checkout"
    checkout.mkdir()
    holder = start_holder(tmp_path, "go_cpu1_mem512_sc0_load00 rep 1", cwd=checkout)
    try:
        with pytest.raises(lease.LeaseBusy) as busy:
            lease.try_acquire(client, "second")
        text = str(busy.value)
        assert (
            f"pid {holder.pid}" in text
            and str(checkout) in text
            and "go_cpu1_mem512_sc0_load00 rep 1" in text
        )
        assert " since 20" in text and "ago)" in text
        labels = lease.current(client).labels
        assert labels[lease.LABEL_PREFIX + "host"] == os.uname().nodename
        # The lease container holds nothing of the engine's: no network, no capabilities.
        config = lease.current(client).attrs["HostConfig"]
        assert config["NetworkMode"] == "none" and config["CapDrop"] == ["ALL"]
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.docker
def test_kill_9_of_the_holder_releases_the_lease(client, tmp_path):
    holder = start_holder(tmp_path)
    assert not released(client, holder)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    # The attach connection closes with the process: stdin ends, the container exits, the engine removes it.
    wait_until(
        lambda: released(client, holder), 10, "the lease of a killed holder was not released"
    )
    with hosts.host_lock(LOCAL, tmp_path / "mine", 60, "after the kill") as _:
        taken = lease.current(client)
        assert taken.labels[lease.LABEL_PREFIX + "pid"] == str(os.getpid())
    wait_until(  # the lease read once a try: it may go between two reads
        lambda: (now := lease.current(client)) is None or now.id != taken.id,
        10,
        "leaving host_lock left the lease container",
    )


@pytest.mark.docker
def test_a_frozen_holder_loses_the_lease_after_its_heartbeats_stop(client, tmp_path):
    holder = start_holder(tmp_path, idle=2)
    try:
        time.sleep(3)
        assert not released(client, holder), "heartbeats should keep a live holder's lease"
        holder.send_signal(signal.SIGSTOP)
        wait_until(lambda: released(client, holder), 15, "a stopped holder kept the lease")
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.docker
def test_waiting_workflow_says_who_holds_the_engine_then_gets_it(client, tmp_path, caplog, capfd):
    holder = start_holder(tmp_path, "build go-sidecar", hold=3)
    try:
        started = time.monotonic()
        with caplog.at_level(logging.INFO, logger=hosts.log.name):
            with hosts.host_lock(LOCAL, tmp_path / "mine", 60, "waiter", poll_s=0.5) as (host, _):
                waited = time.monotonic() - started
                mine = lease.current(client).labels
        assert waited >= 1.5 and host["name"] == "local"
        assert mine[lease.LABEL_PREFIX + "pid"] == str(os.getpid())
        waits = [
            r.getMessage() for r in caplog.records if "waiting for engine local" in r.getMessage()
        ]
        assert len(waits) == 1, waits  # once per holder, not once per poll
        assert f"pid {holder.pid}" in waits[0] and "(build go-sidecar) since " in waits[0]
        assert "sidecar-bench: waiting for engine local" in capfd.readouterr().err
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.docker
def test_no_wait_raises_with_the_holder(client, tmp_path):
    holder = start_holder(tmp_path, "matrix")
    try:
        with pytest.raises(
            hosts.HostError,
            match=rf"engine local is busy: held by .* pid {holder.pid} .*\(matrix\)",
        ):
            with hosts.host_lock(LOCAL, tmp_path / "mine", 60, "cleanup", wait=False):
                pass
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.docker
@pytest.mark.parametrize("state", ["created", "exited"])
def test_a_stale_lease_is_broken_and_only_that_one(client, tmp_path, monkeypatch, state):
    # A holder that died between create and start leaves a "created" lease; an engine stopped
    # under a lease leaves an "exited" one. Neither has a live holder.
    monkeypatch.setattr(lease, "CREATED_GRACE_S", 0.0)
    image = lease.lease_image(client)
    stale = create_when_free(
        client,
        image=image,
        command=["true"],
        labels=lease.holder_labels("dead run", "0" * 32, 60),
        network_mode="none",
    )
    try:
        if state == "exited":
            stale.start()
            stale.wait(timeout=30)
        time.sleep(1.1)
        try:
            stale.reload()
            assert lease.stale_reason(stale), stale.status
        except docker.errors.NotFound:
            pass  # another client waiting for the engine broke it first: the same rule at work
        with hosts.host_lock(LOCAL, tmp_path / "mine", 60, "after a stale lease"):
            assert lease.current(client).id != stale.id
        with pytest.raises(docker.errors.NotFound):
            stale.reload()
    finally:
        try:
            stale.remove(force=True)
        except docker.errors.NotFound:
            pass


@pytest.mark.docker
def test_the_sweep_spares_the_containers_of_a_live_lease(client, tmp_path):
    image = lease.lease_image(client)
    labels = {
        runner.PROJECT_LABEL: runner.PROJECT,
        runner.CONDITION_LABEL: "go_cpu9_mem9_sc0_load00",
    }
    old = client.containers.create(image, ["sleep", "60"], labels=labels, network_mode="none")
    holder = start_holder(tmp_path, "live run")
    try:
        # Another workflow holds the engine: nothing of ours is removed (its containers are live).
        assert job.remove_stale_containers(client) == []
        assert client.containers.list(all=True, filters={"id": old.id})
        holder.kill()
        holder.wait()
        wait_until(lambda: released(client, holder), 10, "lease not released")
        # Its holder gone, under a lease of our own: stale, removed.
        with hosts.host_lock(LOCAL, tmp_path / "mine", 60, "sweeper"):
            assert old.name in job.remove_stale_containers(client)
    finally:
        holder.kill()
        holder.wait()
        for container in client.containers.list(
            all=True, filters={"label": f"{runner.CONDITION_LABEL}=go_cpu9_mem9_sc0_load00"}
        ):
            container.remove(force=True)


def test_lock_dir_must_be_a_private_directory(tmp_path):
    target = tmp_path / "real"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    with pytest.raises(hosts.HostError, match="not a directory"):
        hosts._safe_lock_dir(link)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(hosts.HostError, match="writable by others"):
        hosts._safe_lock_dir(open_dir)
    fresh = hosts._safe_lock_dir(tmp_path / "fresh")
    assert (fresh.stat().st_mode & 0o777) == 0o700


def test_lock_files_are_never_followed_through_a_symlink_nor_truncated(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "engine.lock").symlink_to(victim)
    with pytest.raises(OSError):
        hosts._open_lock(tmp_path / "engine.lock")
    assert victim.read_text() == "precious"
    lock = tmp_path / "other.lock"
    lock.write_text("held by someone: go_cpu1 pid 1")
    fd = hosts._open_lock(lock)
    os.close(fd)
    assert lock.read_text() == "held by someone: go_cpu1 pid 1"


@pytest.mark.docker
def test_the_cleanup_commands_status_no_wait_and_host_options(client, tmp_path):
    """scripts/cleanup.py --status names the holder and removes nothing, --no-wait skips a busy engine and says
    who holds it, --host picks a configured host and refuses an unknown one."""
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "scripts" / "cleanup.py"
    config = tmp_path / "config.yaml"
    config.write_text("hosts:\n  - {name: local, url: null}\n")

    def cleanup(*args):
        return subprocess.run(
            [sys.executable, str(script), "--config", str(config), *args],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )

    condition = "go_cpu9_mem9_sc0_load02"
    labels = {runner.PROJECT_LABEL: runner.PROJECT, runner.CONDITION_LABEL: condition}
    left = client.containers.create(
        lease.lease_image(client), ["sleep", "60"], labels=labels, network_mode="none"
    )
    holder = start_holder(tmp_path, "matrix")
    try:
        shown = cleanup("--status")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert "local: lease held by " in shown.stdout and f"pid {holder.pid}" in shown.stdout, (
            shown.stdout
        )
        assert f"container {left.name} (created, {condition}" in shown.stdout, shown.stdout
        skipped = cleanup("--no-wait")
        assert skipped.returncode == 1, skipped.stdout + skipped.stderr
        assert (
            "engine local is busy: held by" in skipped.stderr
            and f"pid {holder.pid}" in skipped.stderr
        )
        unknown = cleanup("--host", "lab9")
        assert unknown.returncode != 0 and "no host named lab9" in unknown.stderr, unknown.stderr
        assert client.containers.list(all=True, filters={"id": left.id})  # nothing removed so far
        holder.kill()
        holder.wait()
        wait_until(lambda: released(client, holder), 10, "lease not released")
        cleaned = cleanup("--host", "local")
        assert cleaned.returncode == 0, cleaned.stdout + cleaned.stderr
        assert cleaned.stdout.startswith("local: removed ") and left.name in cleaned.stdout, (
            cleaned.stdout
        )
        assert not client.containers.list(all=True, filters={"id": left.id})
    finally:
        holder.kill()
        holder.wait()
        for container in client.containers.list(
            all=True, filters={"label": f"{runner.CONDITION_LABEL}={condition}"}
        ):
            container.remove(force=True)


@pytest.mark.docker
def test_the_lease_ends_at_its_time_limit_while_its_holder_still_beats_and_the_default_is_two_hours(
    client,
):
    # A lease whose holder keeps sending heartbeats (a runaway job) still ends at its limit: the container's
    # `timeout` kills it. Here a 3 s limit; the default limit, read from a default lease, is 2 h.
    held = lease.try_acquire(client, "limit test", max_hold_s=3)
    try:
        assert held.alive() and held.labels[lease.LABEL_PREFIX + "max-s"] == "3"
        wait_until(lambda: not held.alive(), 20, "the lease outlived its 3 s limit")
    finally:
        held.release()
    wait_until(lambda: lease.current(client) is None, 10, "the ended lease was not removed")
    default = lease.try_acquire(client, "default limit")
    try:
        entrypoint = default.container.attrs["Config"]["Entrypoint"]
        assert entrypoint[:4] == ["timeout", "-s", "KILL", "7200"], entrypoint
        assert default.labels[lease.LABEL_PREFIX + "max-s"] == "7200"
    finally:
        default.release()

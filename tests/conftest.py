import signal
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def hold_engine(owner: str):
    """Hold the local engine's measurement lock (as runs and builds do), yielding a client.

    Tests that start containers themselves take it, so that they never run beside a
    measurement on the same engine, e.g. a matrix the developer left running.
    """
    import pytest
    from sidecar_bench.hosts import HostError, host_lock, lock_dir

    try:
        lock = host_lock([{"name": "local", "url": None}], lock_dir(), 3600, owner)
        with lock as (_, client):
            yield client
    except HostError as err:
        pytest.fail(f"no Docker engine answers ({err}); scripts/bench.sh test starts one")


def as_from_a_terminal() -> None:
    """preexec_fn: the signals a terminal sends (Ctrl-C, hang-up, quit) back to their defaults.

    A test run started in the background by a non-interactive shell (`cmd &`, nohup) inherits
    SIGINT and SIGQUIT ignored, and Python leaves an ignored SIGINT ignored: a Snakemake started
    from it would never see the Ctrl-C a test sends it."""
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)


def wait_until(predicate, timeout: float, what: str) -> None:
    """Poll predicate every 0.2 s until it holds; fail with `what` after timeout seconds."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)



@pytest.fixture(scope="module")
def client():
    """A client of the local engine. These tests are the point of the suite: no engine is a failure, not a skip."""
    import docker

    try:
        c = docker.from_env()
        c.ping()
    except docker.errors.DockerException as err:
        pytest.fail(f"no Docker engine answers ({err}); scripts/bench.sh test starts one")
    return c

import importlib
import importlib.abc
import importlib.util
import fcntl
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import hypothesis
import pytest

ROOT = Path(__file__).resolve().parents[1]


class _PackageAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import sidecar_bench.* as scripts.sidecar_bench.* (one module object under both names).

    Only under mutmut (pyproject.toml [tool.mutmut]), which names a mutant by its file's path
    (scripts/sidecar_bench/hey.py -> scripts.sidecar_bench.hey) and switches it on only in the module
    of that name; the tests import the package as sidecar_bench (the installed package; mutmut puts
    its copy of the project first on sys.path, where scripts.sidecar_bench is the mutated one)."""

    def find_spec(self, name, path=None, target=None):
        if name == "sidecar_bench" or name.startswith("sidecar_bench."):
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        return importlib.import_module(f"scripts.{spec.name}")

    def exec_module(self, module):
        pass


if "MUTANT_UNDER_TEST" in os.environ:
    sys.meta_path.insert(0, _PackageAlias())

# Property tests: enough examples to find a counterexample in the suite, few and fixed under mutmut (it runs the
# covering tests once per mutant); no example database written into the tree.
hypothesis.settings.register_profile("suite", max_examples=150, deadline=None, database=None)
hypothesis.settings.register_profile(
    "mutation", max_examples=25, deadline=None, database=None, derandomize=True
)
hypothesis.settings.load_profile("mutation" if "MUTANT_UNDER_TEST" in os.environ else "suite")

# Every chart spec the tests write, here and in the workflows they start, is checked against the Vega-Lite schema
# (chart_files.chart_spec; the workflow itself skips the check). After the alias above: under mutmut the package
# is the mutated copy.
from sidecar_bench.chart_files import CHECK_ENV  # noqa: E402

os.environ[CHECK_ENV] = "1"


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


TERMINAL_SIGNALS = (signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM)


def as_from_a_terminal() -> None:
    """preexec_fn: the signals a terminal sends (Ctrl-C, hang-up, quit) and SIGTERM back to their defaults,
    as a terminal's command and a container's PID 1 start.

    A test run started in the background by a non-interactive shell (`cmd &`, nohup) inherits
    SIGINT and SIGQUIT ignored, and Python leaves an ignored SIGINT ignored: a Snakemake started
    from it would never see the Ctrl-C a test sends it, and bash cannot trap what it was started ignoring."""
    for signum in TERMINAL_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


def terminal_signals_preexec():
    """as_from_a_terminal where this process ignores one of those signals, else None. Only an ignored
    signal outlives exec (a handled one is set back to its default by it), and a preexec_fn makes
    Popen fork the whole test process (14 ms with pandas loaded) where it would otherwise use vfork
    (2 ms): for tests that start hundreds of processes."""
    ignored = any(signal.getsignal(s) == signal.SIG_IGN for s in TERMINAL_SIGNALS)
    return as_from_a_terminal if ignored else None


def wait_until(predicate, timeout: float, what: str) -> None:
    """Poll predicate every 0.2 s until it holds; fail with `what` after timeout seconds."""
    import time

    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.fixture(scope="session")
def quick_plan(tmp_path_factory, worker_id):
    """`snakemake -n --config preset=quick` in an unchanged copy of the project: one plan for the tests of several
    modules that read it (each dry run costs seconds: Snakemake's start, the config's checks, the DAG). Made once
    per suite: xdist's workers share this run's base directory, the first makes the plan, the others read it."""
    from workflow_helpers import copy_project, dry_run

    def make():
        plan = dry_run(
            copy_project(tmp_path_factory.mktemp("quick-plan") / "project"),
            "--config",
            "preset=quick",
        )
        assert plan.returncode == 0, plan.output
        return plan

    if worker_id == "master":
        return make()
    shared = tmp_path_factory.getbasetemp().parent  # this run's, one per pytest run
    with open(shared / "quick-plan.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        cached = shared / "quick-plan.pickle"
        if cached.exists():
            return pickle.loads(cached.read_bytes())
        plan = make()
        cached.write_bytes(pickle.dumps(plan))
        return plan


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


# ---- the tiers --------------------------------------------------------------------------------------------
# docker (the real engine), workflow (Snakemake on the real Snakefile: seconds each) and the rest, the fast
# tier: `pytest -m "not docker and not workflow"` (docs/development.md, "Tests"). A fast test that starts
# Snakemake fails here, naming the mark it needs, so that the fast tier stays fast.


def _is_snakemake(args) -> bool:
    words = [str(a) for a in args] if isinstance(args, (list, tuple)) else str(args).split()
    return bool(words) and (Path(words[0]).name == "snakemake" or words[1:3] == ["-m", "snakemake"])


@pytest.fixture(autouse=True)
def _fast_tests_start_no_snakemake(request, monkeypatch):
    if request.node.get_closest_marker("docker") or request.node.get_closest_marker("workflow"):
        return
    popen = subprocess.Popen
    nodeid = request.node.nodeid

    class Guarded(popen):
        def __init__(self, args, *more, **kwargs):
            if _is_snakemake(args):
                raise AssertionError(
                    f"{nodeid} runs Snakemake: mark it @pytest.mark.workflow (or docker)"
                )
            super().__init__(args, *more, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", Guarded)

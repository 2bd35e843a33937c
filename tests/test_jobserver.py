"""The job server (jobserver.py): a job's script runs in a process forked from it, with the job's arguments,
environment, directory and standard streams; its exit status is the job's; the job's signals reach it, and the
job's kill -9 stops it with its clean-up. No server, or none listening: the job runs in its own process."""

import ast
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import wait_until
from sidecar_bench import jobserver

LIBRARY = str(Path(jobserver.__file__).resolve().parents[1])

# The job's side: what workflow/scripts/run_condition.py does first.
CLIENT = textwrap.dedent(
    """
    import sys
    from sidecar_bench.jobserver import delegate

    STATUS = delegate(sys.argv[1], sys.argv[2:])
    if STATUS is not None:
        sys.exit(STATUS)
    print("ran in its own process", file=sys.stderr)
    sys.exit(42)
    """
)

# The script run in the forked process: it says where and how it runs, then does what argv[1] asks.
PROBE = textwrap.dedent(
    """
    import gc, json, os, signal, sys, time
    from sidecar_bench import jobserver

    what = sys.argv[1]
    print("to stdout")
    print("to stderr", file=sys.stderr)
    if what == "describe":
        json.dump(
            {
                "argv": sys.argv[1:],
                "foo": os.environ.get("FOO"),
                "server_env": os.environ.get(jobserver.ENV),
                "cwd": os.getcwd(),
                "pid": os.getpid(),
                "forked": jobserver.forked(),
                "imported": [m for m in ("docker", "pandas", "pyarrow", "sidecar_bench.job") if m in sys.modules],
                "frozen": gc.get_freeze_count(),
                "threads": len(os.listdir("/proc/self/task")),
            },
            open(sys.argv[2], "w"),
        )
    elif what == "exit":
        sys.exit(int(sys.argv[2]))
    elif what == "message":
        sys.exit("a message instead of a status")
    elif what == "raise":
        raise ValueError("an uncaught error")
    elif what == "true":
        sys.exit(True)
    elif what == "marker":
        open(sys.argv[2], "w").write("ran")
    elif what == "sleep":
        open(sys.argv[2], "w").write(str(os.getpid()))
        time.sleep(60)
    elif what == "wait":
        def stop(signum, frame):
            open(sys.argv[2], "w").write(signal.Signals(signum).name)
            sys.exit(5)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, stop)
        open(sys.argv[3], "w").write(str(os.getpid()))
        time.sleep(60)
    """
)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    directory = tmp_path_factory.mktemp("jobserver")
    (directory / "client.py").write_text(CLIENT)
    (directory / "probe.py").write_text(PROBE)
    saved = os.environ.pop(jobserver.ENV, None)
    path = jobserver.start(LIBRARY)
    try:
        yield path, directory
    finally:
        jobserver.stop()
        if saved is not None:
            os.environ[jobserver.ENV] = saved


@pytest.fixture()
def own_server(monkeypatch):
    """For a test that starts a server of its own: none named in the environment, and the module's (the fixture
    server's, if it runs) set aside meanwhile."""
    monkeypatch.delenv(jobserver.ENV, raising=False)
    monkeypatch.setattr(jobserver, "_server", {})


@pytest.fixture()
def broken_docker(tmp_path, monkeypatch, own_server):
    """A server started now fails its imports: the docker package it finds first raises."""
    broken = tmp_path / "broken"
    (broken / "docker").mkdir(parents=True)
    (broken / "docker" / "__init__.py").write_text("raise ImportError('no docker here')\n")
    monkeypatch.setenv("PYTHONPATH", str(broken))


def job(directory, *args, env=None, **kwargs):
    """The job's process: the client with the probe and its arguments (started, not waited for)."""
    return subprocess.Popen(
        [sys.executable, str(directory / "client.py"), str(directory / "probe.py"), *args],
        env={**os.environ, "PYTHONPATH": LIBRARY, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def test_the_script_runs_forked_with_the_jobs_arguments_environment_directory_and_streams(
    server, tmp_path
):
    path, directory = server
    out = tmp_path / "described.json"
    process = job(directory, "describe", str(out), env={"FOO": "bar"}, cwd=tmp_path)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert stdout == "to stdout\n" and stderr == "to stderr\n"
    described = json.loads(out.read_text())
    assert described["argv"] == ["describe", str(out)]
    assert described["foo"] == "bar"
    assert described["cwd"] == str(tmp_path)
    # Not the job's own process: one forked from the server, which has the library imported and frozen.
    assert described["pid"] != process.pid and described["forked"] is True
    assert described["imported"] == ["docker", "pandas", "pyarrow", "sidecar_bench.job"]
    assert described["frozen"] > 0
    # The script's thread and the one that passes the job's signals on: none of the server's libraries'.
    assert described["threads"] == 2
    # The script does not ask the server again.
    assert described["server_env"] is None


@pytest.mark.parametrize(
    "args, status, said",
    [
        (["exit", "0"], 0, ""),
        (["exit", "3"], 3, ""),
        (["message"], 1, "a message instead of a status\n"),
        (["raise"], 1, "ValueError: an uncaught error"),
        (["true"], 1, ""),
    ],
)
def test_the_jobs_exit_status_is_the_scripts(server, args, status, said):
    _, directory = server
    process = job(directory, *args)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == status, stderr
    assert stdout == "to stdout\n"
    assert said in stderr
    if args[0] == "raise":
        assert "Traceback" in stderr


def started_waiting(directory, tmp_path):
    marker, pid_file = tmp_path / "signal", tmp_path / "pid"
    process = job(directory, "wait", str(marker), str(pid_file))
    wait_until(lambda: pid_file.exists() and pid_file.read_text(), 30, "the script never started")
    return process, marker, int(pid_file.read_text())


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_to_the_job_reaches_the_script_and_the_job_exits_with_its_status(
    server, tmp_path, signum
):
    _, directory = server
    process, marker, _ = started_waiting(directory, tmp_path)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 5, stderr
    assert marker.read_text() == signal.Signals(signum).name


def test_the_jobs_kill_9_stops_the_script_with_sigterm(server, tmp_path):
    _, directory = server
    process, marker, pid = started_waiting(directory, tmp_path)
    process.kill()
    process.wait(timeout=30)
    wait_until(
        lambda: marker.exists() and marker.read_text(),
        10,
        "the forked process never heard of its job's death",
    )
    assert marker.read_text() == "SIGTERM"
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), 10, "the forked process lives on")


@pytest.mark.parametrize("value", [None, jobserver.OFF, "/nonexistent/socket"])
def test_without_a_listening_server_the_job_runs_in_its_own_process(server, value):
    _, directory = server
    env = {**os.environ, "PYTHONPATH": LIBRARY}
    env.pop(jobserver.ENV, None)
    if value is not None:
        env[jobserver.ENV] = value
    done = subprocess.run(
        [sys.executable, str(directory / "client.py"), str(directory / "probe.py"), "exit", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 42 and done.stderr == "ran in its own process\n", done.stderr


def test_off_starts_no_server(monkeypatch):
    monkeypatch.setenv(jobserver.ENV, jobserver.OFF)
    assert jobserver.start(LIBRARY) is None
    assert os.environ[jobserver.ENV] == jobserver.OFF


def test_the_server_ends_with_the_workflows_process(tmp_path):
    """Its standard input is the workflow's: kill -9 of the workflow ends it, and its socket goes."""
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import os, sys, time; from sidecar_bench import jobserver; jobserver.start(sys.argv[1]); "
            "print(jobserver._server['process'].pid, os.environ[jobserver.ENV], flush=True); time.sleep(60)",
            LIBRARY,
        ],
        env={**os.environ, "PYTHONPATH": LIBRARY},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pid, path = starter.stdout.readline().split()
        assert Path(path).exists()
        starter.kill()
        starter.wait(timeout=30)
        wait_until(
            lambda: not Path(f"/proc/{pid}").exists(), 10, "the job server outlived its workflow"
        )
        assert not Path(path).exists()
    finally:
        starter.kill()


def test_a_server_whose_imports_fail_says_why_and_the_workflow_goes_on(broken_docker):
    started = time.monotonic()
    with pytest.raises(jobserver.JobServerError, match="no docker here"):
        jobserver.start(LIBRARY)
    assert time.monotonic() - started < 30
    assert jobserver.ENV not in os.environ


def test_a_server_that_does_not_take_the_job_leaves_it_to_its_own_process(tmp_path, monkeypatch):
    """Listening but never forking (stopped, stuck): after the handshake's timeout the job runs itself."""
    import socket

    path = str(tmp_path / "socket")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    monkeypatch.setattr(jobserver, "HANDSHAKE_TIMEOUT_S", 0.5)
    try:
        started = time.monotonic()
        assert jobserver.delegate("script.py", [], {jobserver.ENV: path}) is None
        assert time.monotonic() - started < 10
    finally:
        listener.close()


def test_a_fork_ended_by_the_signal_its_job_passed_on_ends_the_job_by_it_too(server, tmp_path):
    """Outside the run's own handling a forwarded SIGTERM ends the forked process as it ends a process."""
    _, directory = server
    pid_file = tmp_path / "pid"
    process = job(directory, "sleep", str(pid_file))
    wait_until(lambda: pid_file.exists() and pid_file.read_text(), 30, "the script never started")
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGTERM


def test_a_job_that_gives_up_before_its_go_is_never_run_by_the_fork(server, tmp_path):
    """The handshake: the fork runs the script only after the job's GO; a job that closed runs it itself."""
    import socket

    path, directory = server
    marker = tmp_path / "marker"
    payload = json.dumps(
        {
            "script": str(directory / "probe.py"),
            "argv": ["marker", str(marker)],
            "env": {**os.environ, "PYTHONPATH": LIBRARY},
            "cwd": str(tmp_path),
        }
    ).encode()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(path)
    socket.send_fds(sock, [jobserver.HEADER.pack(len(payload))], [0, 1, 2])
    sock.sendall(payload)
    assert sock.makefile("rb").readline() == jobserver.STARTED
    sock.close()  # gave up: no GO
    time.sleep(1.0)
    assert not marker.exists()


def test_a_run_file_is_not_put_in_place_once_its_job_was_killed(tmp_path, monkeypatch):
    """A forked run whose job died (kill -9) while it wrote its file leaves no file: Snakemake gave it up."""
    import pyarrow as pa

    from sidecar_bench import record
    from sidecar_bench.signals import Interrupted

    monkeypatch.setattr(jobserver, "_orphaned", jobserver.threading.Event())
    table = pa.table({"x": [1, 2]})
    assert record._write_atomically(tmp_path / "kept.parquet", table).exists()
    jobserver._orphaned.set()
    with pytest.raises(Interrupted, match="killed before its file was in place"):
        record._write_atomically(tmp_path / "run.parquet", table)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.parquet"]


def test_after_the_first_stop_signal_the_next_cannot_cut_the_clean_up_short():
    """Ctrl-C reaches a forked run twice (the terminal's, and its job's passed on): the second is ignored
    until the clean-up holds the signals (signals_deferred)."""
    from sidecar_bench.signals import Interrupted, signals_raise

    previous = signal.getsignal(signal.SIGINT)
    with pytest.raises(Interrupted):
        with signals_raise():
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
            finally:
                assert all(
                    signal.getsignal(sig) is signal.SIG_IGN
                    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
                )
                os.kill(os.getpid(), signal.SIGINT)  # ignored: the clean-up goes on
                time.sleep(0.1)
    assert signal.getsignal(signal.SIGINT) is previous


# --- analysis jobs: a rule's script as Snakemake's script: directive runs it ------------------------------------

# What Snakemake writes and runs for a script: rule: its preamble (the job's `snakemake` object unpickled, the
# script's own path as __file__, the written file's as __real_file__), then the script. Here `snakemake` is a dict.
ANALYSIS_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    from sidecar_bench.jobserver import delegate_script, open_job_log

    delegate_script(globals())

    imported = [m for m in ("scipy.special", "altair", "sidecar_bench.charts", "snakemake.iocontainers")
                if m in sys.modules]
    sys.stderr = open_job_log(snakemake["log"])
    print("the script's own line", file=sys.stderr)
    json.dump({"pid": os.getpid(), "imported": imported, "file": __file__, "real": __real_file__},
              open(snakemake["out"], "w"))
    sys.exit(snakemake["status"])
    """
)


def snakemake_script(tmp_path, status=0):
    """The file Snakemake would write for ANALYSIS_SCRIPT's job, and the paths its `snakemake` names."""
    import pickle

    job = {"log": str(tmp_path / "job.log"), "out": str(tmp_path / "out.json"), "status": status}
    preamble = (
        "######## snakemake preamble start (automatically inserted, do not edit) ########\n"
        f"import sys;import pickle;snakemake = pickle.loads({pickle.dumps(job)!r});"
        f"__real_file__ = __file__; __file__ = {str(tmp_path / 'analysis.py')!r};\n"
        "######## snakemake preamble end #########\n"
    )
    written = tmp_path / "tmp1234.analysis.py"
    written.write_text(preamble + ANALYSIS_SCRIPT)
    return written, job


def analysis_job(written, env):
    return subprocess.run(
        [sys.executable, str(written)],
        env={**os.environ, "PYTHONPATH": LIBRARY, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_analysis_script_runs_forked_with_its_imports_done_and_says_so_in_its_log(
    server, tmp_path
):
    path, _ = server
    written, job = snakemake_script(tmp_path, status=4)
    done = analysis_job(written, {jobserver.ENV: path})
    assert done.returncode == 4, done.stderr
    ran = json.loads(Path(job["out"]).read_text())
    assert ran["imported"] == [
        "scipy.special",
        "altair",
        "sidecar_bench.charts",
        "snakemake.iocontainers",
    ]
    # The fork ran the file Snakemake wrote, preamble and all: the script sees what it would in its own process.
    assert ran["file"] == str(tmp_path / "analysis.py") and ran["real"] == str(written)
    first, second = Path(job["log"]).read_text().splitlines()
    assert first == f"process {ran['pid']}, forked by the workflow's job server (jobserver.py)"
    assert second == "the script's own line"


def test_without_a_server_an_analysis_script_runs_in_its_own_process(tmp_path):
    written, job = snakemake_script(tmp_path)
    env = {key: value for key, value in os.environ.items() if key != jobserver.ENV}
    done = subprocess.run(
        [sys.executable, str(written)],
        env={**env, "PYTHONPATH": LIBRARY},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    ran = json.loads(Path(job["out"]).read_text())
    assert ran["imported"] == []
    assert Path(job["log"]).read_text() == "the script's own line\n"


def test_a_script_run_without_snakemake_never_asks_the_server(monkeypatch):
    monkeypatch.setattr(jobserver, "delegate", lambda *args: pytest.fail("asked the server"))
    jobserver.delegate_script({"__file__": "plot_charts.py"})


def test_a_workflow_starts_a_server_for_its_runs_or_for_two_analysis_jobs():
    assert jobserver.worth_starting([], engine=True)
    assert jobserver.worth_starting(["aggregate_runs", "plot_charts"], engine=False)
    assert not jobserver.worth_starting(["plot_charts"], engine=False)
    assert not jobserver.worth_starting(["all", "report", "plot_charts"], engine=False)


ANALYSIS_SCRIPTS = sorted(
    path
    for path in (Path(LIBRARY).parent / "workflow" / "scripts").glob("*.py")
    if "delegate_script(globals())" in path.read_text(encoding="utf-8")
)


def test_every_analysis_rule_delegates_and_the_server_has_all_their_imports_done():
    """Importing any analysis script's modules after the server's imports loads no library or package more
    (only the standard library may be left): the forked process spends nothing on imports."""
    # Each rule of ANALYSIS_RULES runs its namesake script.
    assert {path.stem for path in ANALYSIS_SCRIPTS} == set(jobserver.ANALYSIS_RULES)
    for path in ANALYSIS_SCRIPTS:
        # First, after the docstring: nothing (the chart-drawing process, the log) happens in a process that
        # then hands the job over.
        body = ast.parse(path.read_text(encoding="utf-8")).body
        assert [ast.unparse(node) for node in body[1:3]] == [
            "from sidecar_bench.jobserver import delegate_script, open_job_log",
            "delegate_script(globals())",
        ], path.name
    probe = textwrap.dedent(
        """
        import ast, importlib, json, sys
        from sidecar_bench import jobserver
        for name in (*jobserver.ANALYSIS_MODULES,):
            importlib.import_module(name)
        before = set(sys.modules)
        for path in sys.argv[1:]:
            for node in ast.parse(open(path).read()).body:
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        importlib.import_module(alias.name)
                elif isinstance(node, ast.ImportFrom) and node.module:
                    importlib.import_module(node.module)
        new = sorted(m for m in set(sys.modules) - before if m.split(".")[0] not in sys.stdlib_module_names)
        print(json.dumps(new))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, *map(str, ANALYSIS_SCRIPTS)],
        env={**os.environ, "PYTHONPATH": LIBRARY},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_a_server_started_without_waiting_takes_the_jobs_once_it_listens(
    tmp_path, monkeypatch, own_server
):
    """For analysis jobs only: start returns before the server's imports are done; a job before it listens runs
    in its own process, the next ones are forked."""
    # The server's imports made 3 s slower (its interpreter's sitecustomize): the first job surely comes first.
    slow = tmp_path / "slow"
    slow.mkdir()
    (slow / "sitecustomize.py").write_text("import time\ntime.sleep(3)\n")
    monkeypatch.setenv("PYTHONPATH", str(slow))
    started = time.monotonic()
    path = jobserver.start(LIBRARY, wait=False)
    try:
        assert time.monotonic() - started < 1 and os.environ[jobserver.ENV] == path
        (tmp_path / "early").mkdir()
        early, job = snakemake_script(tmp_path / "early")
        done = analysis_job(early, {jobserver.ENV: path})
        assert done.returncode == 0, done.stderr
        assert (
            json.loads(Path(job["out"]).read_text())["imported"] == []
        )  # ran before the server listened
        wait_until(lambda: Path(path).exists(), 60, "the job server never listened")
        (tmp_path / "late").mkdir()
        late, job = snakemake_script(tmp_path / "late")
        done = analysis_job(late, {jobserver.ENV: path})
        assert done.returncode == 0, done.stderr
        assert "forked by the workflow's job server" in Path(job["log"]).read_text()
    finally:
        assert jobserver.stop() is None


def test_a_server_started_without_waiting_that_fails_says_why_at_its_stop(tmp_path, broken_docker):
    path = jobserver.start(LIBRARY, wait=False)
    try:
        process = jobserver._server["process"]
        wait_until(lambda: process.poll() is not None, 60, "the broken server never ended")
        written, job = snakemake_script(tmp_path)
        done = analysis_job(written, {jobserver.ENV: path})
        assert done.returncode == 0 and json.loads(Path(job["out"]).read_text())["imported"] == []
    finally:
        said = jobserver.stop()
    assert "no docker here" in said
    assert jobserver.ENV not in os.environ


def test_a_server_stopped_while_it_still_imports_is_no_failure(own_server):
    """A short workflow of analysis jobs ends before its server listens: nothing to warn about."""
    jobserver.start(LIBRARY, wait=False)
    assert jobserver.stop() is None


def test_after_an_edit_of_a_module_it_imported_the_server_leaves_the_jobs_to_their_own_processes(
    tmp_path, own_server
):
    """Forked after charts.py changed, a job would run the old charts.py and its outputs would look up to date."""
    import shutil

    library = tmp_path / "library"
    shutil.copytree(Path(LIBRARY) / "sidecar_bench", library / "sidecar_bench")
    path = jobserver.start(str(library))
    try:
        for name in ("before", "after"):
            (tmp_path / name).mkdir()
            written, job = snakemake_script(tmp_path / name)
            done = analysis_job(written, {jobserver.ENV: path, "PYTHONPATH": str(library)})
            assert done.returncode == 0, done.stderr
            log = Path(job["log"]).read_text()
            if name == "before":
                assert "forked by the workflow's job server" in log
                with open(library / "sidecar_bench" / "charts.py", "a") as charts:
                    charts.write("\n# edited while the workflow runs\n")
            else:
                assert log == "the script's own line\n", log
    finally:
        jobserver.stop()


def test_a_workflow_without_a_server_of_its_own_forgets_an_inherited_one():
    environ = {jobserver.ENV: "/tmp/another-workflows/socket"}
    jobserver.forget_inherited(environ)
    assert environ == {}
    environ = {jobserver.ENV: jobserver.OFF}
    jobserver.forget_inherited(environ)
    assert environ == {jobserver.ENV: jobserver.OFF}

"""Run jobs and analysis jobs forked from a process that has the library imported: a job's process does none
of the library's imports.

A run job is one process a run. Its interpreter's start and its imports (the Docker SDK, the library; pandas
and pyarrow, which preload.py imports while the job waits on the engine) took 0.16 s of each run's 1.0 s of
harness on a 2-core VM, and its exit as much again before leave_quickly. A workflow that runs its jobs on
this machine starts one job server at its start (Snakemake's onstart, workflow/rules/common.smk, beside the
engines' hold): a process that imports all of it once, freezes it for the collector, and listens on a Unix
socket named in the environment its jobs inherit (ENV). A run job's script (workflow/scripts/run_condition.py)
first asks it to run the script instead (delegate): it sends its arguments, environment, working directory
and its standard input, output and error (the descriptors themselves), and the server forks a process that
takes them over and runs the script as the job would have. The job's process, having imported nothing but the
standard library, waits for the forked one's exit status and exits with it.

The analysis rules' scripts (aggregate_runs, make_tables, plot_charts, calibrate, model_report, ...; Snakemake
runs them with its script: directive) do the same first thing (delegate_script): their imports (pandas, pyarrow,
scipy, altair and the library's analysis modules, ANALYSIS_MODULES) took 0.7-1.1 s of each stage's 1-4 s on a
2-core VM. The forked process runs the file Snakemake wrote (its preamble, which unpickles the job's `snakemake`
object, then the script), so the script runs as it would in its own process; the job's own process runs only
that preamble (Snakemake's imports, about 0.2 s) before it hands the job over. A workflow with no run to make
starts the server for at least ANALYSIS_JOBS_WORTH_IT analysis jobs (worth_starting), without waiting for its
imports (start(wait=False): nothing is measured beside them): a job that starts before it listens runs in its
own process meanwhile, on the other CPU, so a single job would gain nothing from it.

Nothing of a run changes: each run is still its own Snakemake job and its own process, opens its own log,
takes its engine's lock (and borrows the workflow's lease), and writes its own file; the forked process has
no state of an earlier run (the server never runs one, and forks before any Docker client exists).

Kill guarantees, as for a job's own process:
- a signal to the job (SIGINT, SIGTERM, SIGHUP: Ctrl-C, Snakemake stopping its jobs) is passed on to the
  forked process, which stops with its clean-up; the job exits with its status;
- the job's death by kill -9 closes the connection, and the forked process then stops itself with SIGTERM,
  with its clean-up, and puts no run file in place after it (orphaned(), record.py);
- the forked process is in the workflow's process group, as the job is: kill -9 of the group ends it, and its
  containers' watchers (containers.WATCH_SCRIPT, their stdins attached to it) end them within a second.
The server ignores SIGINT and SIGHUP (its forked processes are told by their jobs) and ends with the workflow:
at onsuccess and onerror (stop), or when the workflow's process is gone and its standard input closes.

No server (a cluster's jobs, a script run by hand, a server that could not start) or one that does not answer:
the job runs in its own process, as before. Never both: the forked process runs the script only once the job
has answered its STARTED with GO, and a job that gave up waiting sends none. The server must be free of threads when it forks: numpy's
OpenBLAS and pyarrow's jemalloc start one each on import, so it runs with one BLAS thread (a run job does no
linear algebra; an analysis job has one under Snakemake anyway, whose shell sets OPENBLAS_NUM_THREADS to the
job's threads) and Arrow's jemalloc without its background thread (NO_THREADS_ENV), and checks that it has
no other thread before it listens. A job comes to a process forked from it only while the library modules it
imported are unchanged (code_changed): after an edit, the jobs run in their own processes, with the new code.

Only the standard library at the top: the job's side (delegate) must cost nothing to import.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import struct
import sys
import threading
from typing import Any, Mapping

ENV = "SIDECAR_BENCH_JOB_SERVER"
# ENV's value that keeps a workflow from starting one (each job then runs in its own process).
OFF = "off"
# What a run job imports (workflow/scripts/run_condition.py); preload.MODULES come with them.
JOB_MODULES = (
    "sidecar_bench.runjob",
    "sidecar_bench.transports",
    "sidecar_bench.hosts",
    "sidecar_bench.job",
)
# What the analysis rules' scripts import (workflow/scripts/*.py but run_condition.py and build_image.py; a test
# checks that importing any of them after these imports nothing more), and Snakemake's preamble's own imports.
ANALYSIS_MODULES = (
    "snakemake.iocontainers",
    "snakemake.logging",
    "scipy.special",
    "altair",
    "yaml",
    "sidecar_bench.adaptive",
    "sidecar_bench.burn_charts",
    "sidecar_bench.burn_tables",
    "sidecar_bench.calibration",
    "sidecar_bench.capacity",
    "sidecar_bench.cells",
    "sidecar_bench.chart_files",
    "sidecar_bench.charts",
    "sidecar_bench.environment",
    "sidecar_bench.forward",
    "sidecar_bench.layout_charts",
    "sidecar_bench.layouts",
    "sidecar_bench.loadmodel",
    "sidecar_bench.mitigation_charts",
    "sidecar_bench.model",
    "sidecar_bench.model_charts",
    "sidecar_bench.model_tables",
    "sidecar_bench.openloop_report",
    "sidecar_bench.proxy_tables",
    "sidecar_bench.reference",
    "sidecar_bench.set_report",
    "sidecar_bench.stats",
    "sidecar_bench.table_format",
    "sidecar_bench.tables",
)
# The rules whose scripts delegate_script hands to the server, and how many pending make the server worth its
# start (about 1 s of imports on a 2-core VM, beside the first job, against 0.7-1.1 s saved per later stage).
ANALYSIS_RULES = frozenset(
    {
        "aggregate_runs",
        "make_tables",
        "plot_charts",
        "calibrate",
        "model_report",
        "burn_comparison",
        "compute_capacity",
        "compare_open_closed",
        "proxy_report",
        "decide_repeat",
    }
)
ANALYSIS_JOBS_WORTH_IT = 2
# Threads the server's imports would start, kept from starting (the module's docstring says why).
NO_THREADS_ENV = {
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    # Arrow's own jemalloc (prefix je_arrow_) without its background purging thread.
    "JE_ARROW_MALLOC_CONF": "background_thread:false",
}
READY = b"ready\n"
STARTED = b"started\n"
# The job's answer to STARTED: only then does the forked process run the script (a job that gave up waiting
# closes instead, and runs it itself): never both.
GO = b"go\n"
# How long onstart waits for the server's imports before the jobs run in their own processes instead.
START_TIMEOUT_S = 60
# How long a job waits for the server to fork its process before it runs in its own.
HANDSHAKE_TIMEOUT_S = 30
HEADER = struct.Struct("!I")
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class JobServerError(RuntimeError):
    """The server could not start (its imports failed, or it has threads it cannot fork with)."""


# --------------------------------------------------------------------------- the job's side


def delegate(script: str, argv: list[str], environ: Mapping[str, str] = os.environ) -> int | None:
    """Run script with argv in a process forked from the job server; its exit status, or None if no server
    took the job (none named in ENV, none listening, or it closed before starting it): then run it here."""
    path = environ.get(ENV)
    if not path or path == OFF:
        return None
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
    except OSError:
        return None  # a closed standard stream: nothing to hand over in its place
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # A server that does not take the job within this (stopped, stuck): the job runs here. A process it
    # forks later finds the job gone before it starts the script, and runs nothing.
    sock.settimeout(HANDSHAKE_TIMEOUT_S)
    try:
        sock.connect(path)
        payload = json.dumps(
            {
                "script": os.path.abspath(script),
                "argv": list(argv),
                "env": dict(environ),
                "cwd": os.getcwd(),
            }
        ).encode()
        socket.send_fds(sock, [HEADER.pack(len(payload))], [0, 1, 2])
        sock.sendall(payload)
        reader = sock.makefile("rb")
        if reader.readline() != STARTED:
            sock.close()
            return None  # nothing of the job ran: it runs here
        sock.settimeout(None)
        sock.sendall(GO)
    except OSError:  # socket.timeout included
        sock.close()
        return None
    forwarded: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        forwarded.append(signum)
        try:
            sock.sendall(f"signal {signum}\n".encode())
        except OSError:
            pass  # the forked process is gone: its status (or its absence) comes below

    for sig in FORWARDED:
        signal.signal(sig, forward)
    try:
        line = reader.readline()
    except OSError:  # reset by a forked process that ended with a signal line unread
        line = b""
    if line.startswith(b"exit "):
        return int(line.split()[1])
    if forwarded:
        # Ended by the signal passed on to it (outside the run's own handling): the job ends by it too.
        signal.signal(forwarded[-1], signal.SIG_DFL)
        os.kill(os.getpid(), forwarded[-1])
        return 128 + forwarded[-1]
    print(
        f"sidecar-bench: the job's process (forked by the job server {path}) ended without an exit "
        "status; its log says how far it got",
        file=sys.stderr,
        flush=True,
    )
    return 1


def delegate_script(namespace: Mapping[str, Any]) -> None:
    """The first thing of an analysis rule's script, called with its globals(): where Snakemake runs it (a
    `snakemake` object among them) and a job server listens, the server's forked process runs the file Snakemake
    wrote (__real_file__: its preamble, then the script) and this process exits with its status. Returns at once
    elsewhere: no server, none listening, a script run by hand or by the tests, or the forked process itself."""
    # __real_file__: the file Snakemake wrote, with its preamble (its __file__ is the script's own path, which
    # has none). Without it, a fork could not make the job's `snakemake` object: the job runs here.
    if "snakemake" not in namespace or "__real_file__" not in namespace:
        return
    status = delegate(str(namespace["__real_file__"]), sys.argv[1:])
    if status is not None:
        sys.exit(status)


def open_job_log(path: str) -> Any:
    """An analysis script's log, opened to be its sys.stderr; its first line says so when the job server forked
    this process."""
    log = open(path, "w")
    if forked():
        print(
            f"process {os.getpid()}, forked by the workflow's job server (jobserver.py)", file=log
        )
        log.flush()
    return log


def forget_inherited(environ: dict[str, str] = os.environ) -> None:
    """A workflow that starts no server of its own: its jobs must not find another's (a workflow started from
    one's job, a shell that has it set), which may run another checkout's library. OFF stays."""
    if environ.get(ENV) != OFF:
        environ.pop(ENV, None)


def worth_starting(rule_names: list[str], engine: bool) -> bool:
    """Whether a workflow whose pending jobs have these rules should start a job server: for its run jobs
    (engine: it holds its engines for them), or for at least ANALYSIS_JOBS_WORTH_IT analysis jobs."""
    return engine or sum(name in ANALYSIS_RULES for name in rule_names) >= ANALYSIS_JOBS_WORTH_IT


# --------------------------------------------------------------------------- the forked process


def _run_script(script: str) -> int:
    """Run script as __main__, as `python script` would: its exit status (an uncaught error: 1, traced)."""
    import runpy
    import traceback

    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as stop:
        code = stop.code
        if code is None:
            return 0
        if isinstance(code, int):
            return int(code)  # True and False too
        print(code, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        traceback.print_exc()
        return 128 + signal.SIGINT
    except BaseException:
        traceback.print_exc()
        return 1


def _recv_exactly(conn: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the job closed its connection before its request was complete")
        data += chunk
    return bytes(data)


_orphaned = threading.Event()


def orphaned() -> bool:
    """Whether this forked process's job has died (kill -9): whatever it was writing is no longer wanted."""
    return _orphaned.is_set()


def _watch(reader: Any, done: threading.Event) -> None:
    """Pass the job's signals on to this process; the job's death (end of its connection) is a SIGTERM."""
    try:
        for line in reader:
            words = line.split()
            if len(words) == 2 and words[0] == b"signal" and words[1].isdigit():
                os.kill(os.getpid(), int(words[1]))
    except OSError:
        pass
    if not done.is_set():
        _orphaned.set()
        os.kill(os.getpid(), signal.SIGTERM)


_forked = False


def forked() -> bool:
    """Whether this process is one the job server forked for a job."""
    return _forked


def _child(conn: socket.socket) -> None:
    """The forked process: take over the job's descriptors, environment and directory, run its script, exit."""
    global _forked
    _forked = True
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = 1
    try:
        header, fds, _, _ = socket.recv_fds(conn, HEADER.size, 3)
        if len(header) < HEADER.size:
            header += _recv_exactly(conn, HEADER.size - len(header))
        request = json.loads(_recv_exactly(conn, HEADER.unpack(header)[0]))
        if code_changed():
            return  # no STARTED: the job runs the script itself, with the library as it is now
        sys.stdout.flush()
        sys.stderr.flush()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        os.environ.pop(ENV, None)  # the script runs here: it must not ask the server again
        script = request["script"]
        sys.argv = [script, *request["argv"]]
        sys.path[0] = os.path.dirname(script)
        done = threading.Event()
        conn.sendall(STARTED)
        reader = conn.makefile("rb")
        if reader.readline() != GO:
            code = 0
            return  # the job gave up waiting and runs the script itself (finally: exit, nothing run)
        threading.Thread(target=_watch, args=(reader, done), daemon=True).start()
        code = _run_script(script)
        done.set()
    finally:
        try:
            import logging

            logging.shutdown()
            for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
                if stream is not None:
                    stream.flush()
        except Exception:  # the job's own streams: nothing left to report to
            pass
        try:
            conn.sendall(f"exit {code}\n".encode())
        except OSError:
            pass  # the job is gone
        os._exit(code)


# --------------------------------------------------------------------------- the server


def threads() -> int:
    """This process's threads, as the kernel counts them (native ones included)."""
    return len(os.listdir("/proc/self/task"))


def import_for_jobs() -> None:
    """Import what a run job imports, as its script would (without paramiko when no engine needs SSH), what
    it imports after its load (preload.MODULES), and what the analysis scripts import (ANALYSIS_MODULES)."""
    import gc
    import importlib

    from . import preload, runjob

    settings = os.environ.get(runjob.ENV)
    if settings:
        from .transports import skip_ssh_transport

        skip_ssh_transport(json.loads(settings).get("hosts") or [])
    for name in (*JOB_MODULES, *preload.MODULES, *ANALYSIS_MODULES):
        importlib.import_module(name)
    _stamp_code()
    # Frozen, the imports' objects are never walked by a forked process's collector (no copy-on-write of them).
    gc.freeze()
    if threads() != 1:
        raise JobServerError(
            f"the job server has {threads()} threads after its imports and cannot fork safely"
        )


# (mtime, size) of each library module the server imported, when it imported it.
_code_stamps: dict[str, tuple[int, int]] = {}


def _stamp_code() -> None:
    root = os.path.dirname(os.path.abspath(__file__)) + os.sep
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and os.path.abspath(path).startswith(root):
            status = os.stat(path)
            _code_stamps[path] = (status.st_mtime_ns, status.st_size)


def code_changed() -> bool:
    """Whether a library module the server imported has changed (or gone) since: a process forked now would run
    it as it was (an edit of charts.py while a workflow runs, say, whose analysis would then be made by the old
    code and look up to date), so the job runs in its own process instead, with the code as it is now."""
    for path, stamp in _code_stamps.items():
        try:
            status = os.stat(path)
        except OSError:
            return True
        if (status.st_mtime_ns, status.st_size) != stamp:
            return True
    return False


def serve(path: str) -> None:
    """Import, listen on path, say READY on stdout; fork a process per job until stdin closes or SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    import_for_jobs()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    sys.stdout.buffer.write(READY)
    sys.stdout.flush()
    uid = os.getuid()
    try:
        while True:
            readable, _, _ = select.select([listener, sys.stdin], [], [], 1.0)
            if sys.stdin in readable and not os.read(sys.stdin.fileno(), 4096):
                return  # the workflow's process is gone
            if listener in readable:
                conn, _ = listener.accept()
                peer_uid = struct.unpack(
                    "3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12)
                )[1]
                if peer_uid != uid:
                    conn.close()
                    continue
                if os.fork() == 0:
                    try:
                        listener.close()
                        _child(conn)
                    finally:
                        os._exit(1)
                conn.close()
            _reap()
    finally:
        listener.close()
        try:
            os.unlink(path)
        except OSError:
            pass


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


# --------------------------------------------------------------------------- the workflow's side

_server: dict[str, Any] = {}


def start(
    library_dir: str | None = None, timeout: float = START_TIMEOUT_S, wait: bool = True
) -> str | None:
    """Start this process's job server and name it in os.environ[ENV] (its jobs inherit it); its socket path,
    or None when ENV is OFF (SIDECAR_BENCH_JOB_SERVER=off: no server, each job imports the library itself).

    wait: return once it listens. Raises JobServerError if it does not within timeout (the jobs then run in
    their own processes). Without wait (a workflow with analysis jobs only: nothing is measured beside its
    imports), return at once: a job that starts before it listens runs in its own process, on the other CPU,
    and stop() says why a server that never listened did not."""
    import subprocess
    import tempfile

    if os.environ.get(ENV) == OFF:
        return None
    if _server:
        return _server["path"]
    os.environ.pop(
        ENV, None
    )  # another workflow's, inherited: never this one's jobs' if this one fails
    directory = tempfile.mkdtemp(prefix="sidecar-bench-jobs-")
    path = os.path.join(directory, "socket")
    env = {**os.environ, **NO_THREADS_ENV}
    env.pop(ENV, None)
    if library_dir:
        env["PYTHONPATH"] = os.pathsep.join(
            [library_dir, *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
        )
    errors = os.path.join(directory, "server.log")
    with open(errors, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "sidecar_bench.jobserver", path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
        )
    if not wait:
        _server.update(process=process, path=path, directory=directory)
        os.environ[ENV] = path
        return path
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    line = process.stdout.readline() if ready else b""
    if line != READY:
        process.kill()
        process.wait()
        with open(errors, errors="replace") as said_file:
            said = said_file.read().strip()[-500:]
        _remove(directory)
        raise JobServerError(
            f"the job server did not start within {timeout:g} s: {said or 'no output'}"
        )
    _server.update(process=process, path=path, directory=directory)
    os.environ[ENV] = path
    return path


def stop() -> str | None:
    """End this process's job server (jobs still running in its forked processes go on to their end). What it
    said if it had ended on its own before (a server started without wait whose imports failed, or one that
    died), else None: the jobs after its end ran in their own processes."""
    if not _server:
        return None
    process = _server.pop("process")
    os.environ.pop(ENV, None)
    # Ended before it was told to (its imports failed, or it died): what it said. One still importing when the
    # workflow ends is told now, and its failure to say READY to nobody is no failure.
    ended = process.poll()
    process.stdin.close()
    process.stdout.close()
    try:
        process.wait(timeout=5)
    except Exception:  # subprocess.TimeoutExpired: it did not see its stdin close
        process.kill()
        process.wait()
    directory = _server.pop("directory")
    said = None
    if ended not in (None, 0):
        with open(os.path.join(directory, "server.log"), errors="replace") as said_file:
            said = said_file.read().strip()[-500:] or f"exit status {ended}"
    _remove(directory)
    _server.clear()
    return said


def _remove(directory: str) -> None:
    import shutil

    shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    # Served from the package's module, not from __main__: a forked process's forked() is the one job.py reads.
    from sidecar_bench import jobserver

    try:
        jobserver.serve(sys.argv[1])
    except jobserver.JobServerError as err:
        sys.exit(f"sidecar-bench job server: {err}")

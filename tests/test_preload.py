"""The run job's late imports (preload.py): what the job imports at its start leaves pandas and pyarrow out,
and preload imports them in a thread of its own. That the run waits for them before its load is tested on the
real engine (test_runner.py)."""

import subprocess
import sys

from workflow_helpers import ROOT

LATE = ("pandas", "pyarrow", "pyarrow.parquet", "numpy")
# Imported by no run job at all: the config was validated when the workflow loaded it.
NEVER = ("jsonschema",)


def imported_after(code: str) -> set[str]:
    """The late (and never needed) modules imported once `code` ran in a fresh interpreter, as a run job
    starts."""
    found = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint(' '.join(sorted(sys.modules)))"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return set(found.stdout.split()) & {*LATE, *NEVER}


def test_the_run_job_starts_without_pandas_pyarrow_or_jsonschema():
    # What workflow/scripts/run_condition.py imports before it calls job.main.
    code = (
        "from sidecar_bench.runjob import RunJobError, log_path, parse\n"
        "from sidecar_bench.transports import skip_ssh_transport\n"
        "from sidecar_bench.hosts import lock_dir\n"
        "from sidecar_bench.job import leave_quickly, main\n"
    )
    assert imported_after(code) == set()


def test_preload_imports_them_in_a_thread_and_wait_returns_once_they_are_in():
    code = (
        "import threading\n"
        "from sidecar_bench import preload\n"
        "preload.start()\n"
        "assert preload._thread is not threading.current_thread() and preload._thread.daemon\n"
        "preload.wait()\n"
        "assert not preload._thread.is_alive()\n"
    )
    assert imported_after(code) == set(LATE)


def test_wait_without_start_returns_at_once():
    assert imported_after("from sidecar_bench import preload\npreload.wait()") == set()

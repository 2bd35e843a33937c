"""The run job's imports that wait for the end of its load (pandas and pyarrow: hey's CSV, the run file),
made in a thread while the job waits on the engine (its lease, the task's start; the app's readiness too when no
warm-up shares its exec: runner.py).

A run job is one process a run: importing pandas and pyarrow took about 0.4 s of its 3 s of harness on a
2-core host, and nothing needs them before the load ends. start() begins the imports when the job begins;
wait(), called before any load (warm-up included), holds the run until they are done, so their CPU never
runs beside the measured load. A failed import is left to the import that needs the module, which raises
it where it belongs.
"""

from __future__ import annotations

import importlib
import threading

MODULES = ("pandas", "pyarrow", "pyarrow.parquet")

_thread: threading.Thread | None = None


def _import_all() -> None:
    for name in MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # raised again by the import that needs it
            return


def start() -> None:
    """Begin the imports in a thread of their own (once per process)."""
    global _thread
    if _thread is None:
        _thread = threading.Thread(target=_import_all, name="sidecar-bench-preload", daemon=True)
        _thread.start()


def wait() -> None:
    """Return once the imports start() began are done (at once if it was not called)."""
    if _thread is not None:
        _thread.join()

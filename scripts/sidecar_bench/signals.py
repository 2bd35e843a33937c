"""Signals during a run: SIGINT, SIGTERM and SIGHUP end it with its clean-up, and none can cut the clean-up short.

A run raises Interrupted from the signal handler (signals_raise), so that its `finally` removes the containers;
while it removes them, the signals are held (signals_deferred) and raised again afterwards.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator


class Interrupted(BaseException):
    """SIGINT, SIGTERM or SIGHUP arrived; raised from the signal handler so that `finally` cleans up."""


# Every signal that ends a run with its clean-up: Ctrl-C, kill, and SIGHUP (the terminal that
# started Snakemake was closed, or an ssh session dropped).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def signals_raise() -> Iterator[None]:
    """Turn SIGINT, SIGTERM and SIGHUP into Interrupted for the duration (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        # Once: the next stop signal (Ctrl-C reaches a run forked by the job server both from the terminal and
        # through its job) must not cut short the clean-up this one starts; signals_deferred then holds them.
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        raise Interrupted(f"interrupted by {signal.Signals(signum).name}")

    previous = {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


@contextlib.contextmanager
def signals_deferred() -> Iterator[list[int]]:
    """Hold SIGINT/SIGTERM/SIGHUP while cleaning up, so a second Ctrl-C cannot leave containers behind."""
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    received: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, frame: received.append(signum))
        for sig in STOP_SIGNALS
    }
    try:
        yield received
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)

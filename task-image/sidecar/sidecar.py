#!/usr/bin/env python3
"""A stand-in sidecar for sidecar-bench: burns a target CPU share in 100 ms cycles.

Each cycle busy-loops for share x 100 ms, then sleeps for the rest of the cycle
(the article's method: 5 % = 5 ms busy + 95 ms sleep). With --burn wall (the
default, as in the article) the busy time is wall-clock time: while the task is
throttled the clock runs on, so the sidecar gets less CPU than it asks for. With
--burn cpu it spins until it has used share x 100 ms of CPU time, as a sidecar
with a fixed amount of work per cycle would. Either way the runner measures
what it really used from the kernel's accounting (/proc/PID/stat), not from here.

Usage: python3 sidecar.py --role proxy --load 5 [--burn wall|cpu]
"""

import argparse
import math
import signal
import sys
import time

ROLES = ("proxy", "agent", "log_router")
BURNS = ("wall", "cpu")
CYCLE_S = 0.100

_stop = False


def _request_stop(signum, frame):
    global _stop
    _stop = True


def parse_load(text: str) -> float:
    """Return the CPU share in percent, 0..100, or raise ArgumentTypeError."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--load {text!r} is not a number (percent, 0..100)"
        ) from None
    if not math.isfinite(value) or not 0.0 <= value <= 100.0:
        raise argparse.ArgumentTypeError(
            f"--load {text!r} is not within 0..100 (percent of one core)"
        )
    return value


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", required=True, choices=ROLES, help="sidecar role name")
    parser.add_argument(
        "--load", required=True, type=parse_load, help="target CPU share in percent of one core"
    )
    parser.add_argument(
        "--burn",
        default="wall",
        choices=BURNS,
        help="busy for share x 100 ms of wall-clock time (the article) or of CPU time",
    )
    return parser.parse_args(argv)


def run(load_pct: float, burn: str = "wall") -> None:
    busy_s = CYCLE_S * load_pct / 100.0
    clock = time.monotonic if burn == "wall" else time.process_time
    # Cycles are laid on a fixed grid so that a late wake-up shortens the next
    # sleep instead of stretching every cycle (the share stays share / 100 ms).
    next_cycle = time.monotonic()
    while not _stop:
        cycle_start = next_cycle
        busy_until = clock() + busy_s
        while clock() < busy_until and not _stop:
            pass
        next_cycle = cycle_start + CYCLE_S
        now = time.monotonic()
        if next_cycle < now:
            # Starved for more than a cycle (e.g. throttled): start afresh, do not catch up.
            next_cycle = now
            continue
        time.sleep(next_cycle - now)


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _request_stop)
    signal.signal(signal.SIGINT, _request_stop)
    print(
        f"sidecar {args.role}: {args.load:g} % of one core in {CYCLE_S * 1000:.0f} ms cycles "
        f"({args.burn} time)",
        flush=True,
    )
    run(args.load, args.burn)
    return 0


if __name__ == "__main__":
    sys.exit(main())

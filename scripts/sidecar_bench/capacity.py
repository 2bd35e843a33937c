"""capacity: a setup's closed-loop throughput, the base of its open-loop rates.

An open-loop condition is loaded at a share of its setup's capacity: the mean RPS of
the closed-loop runs of the same app, vCPU, memory and sidecar count with idle
sidecars (load 0), one value per repetition, as the statistics compute it
(stats.summarise_run: successful responses / load window). The workflow writes it to
results/<preset>/capacity/<capacity condition id>.json (rule compute_capacity, a
checkpoint); an open run's rate is round(rate_share x rps_mean) requests/s, and its run
file records the file's content (where the rate came from).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping

from .stats import MEASURED, summarise_run

CAPACITY_FORMAT = 1


class CapacityError(ValueError):
    """No capacity can be taken from the given runs, or a capacity file is not one; the message says which."""


def measure(condition_id: str, run_files: Iterable[str | Path]) -> dict[str, Any]:
    """The capacity record of a closed-loop condition from its run files (failure records are left out)."""
    rows = [summarise_run(path) for path in sorted(map(str, run_files))]
    measured = [row for row in rows if row["status"] == MEASURED]
    if not measured:
        raise CapacityError(
            f"{condition_id}: no measured run among {len(rows)} run files: no capacity to take "
            "an open-loop rate from (its runs failed)"
        )
    wrong = sorted({row["condition_id"] for row in measured} - {condition_id})
    if wrong:
        raise CapacityError(f"capacity of {condition_id}: run files of {', '.join(wrong)} given")
    rps = [float(row["rps"]) for row in measured]
    return {
        "format": CAPACITY_FORMAT,
        "condition_id": condition_id,
        "load_model": "closed",
        "rps_mean": sum(rps) / len(rps),
        "rps_runs": rps,
        "repeats": len(rps),
        "failed_runs": len(rows) - len(measured),
        "run_files": [str(row["run_file"]) for row in measured],
        "window_starts": [row["window_start"] for row in measured],
    }


def write(path: str | Path, record: Mapping[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dict(record), indent=1, sort_keys=True) + "\n")
    return path


def read(path: str | Path) -> dict[str, Any]:
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise CapacityError(f"{path}: not a capacity file ({err})") from None
    if record.get("format") != CAPACITY_FORMAT or not isinstance(
        record.get("rps_mean"), (int, float)
    ):
        raise CapacityError(
            f"{path}: not a capacity file of format {CAPACITY_FORMAT} with rps_mean"
        )
    return record


def rate_per_s(rate_share: float, capacity_rps: float) -> int:
    """The open-loop rate: rate_share x capacity, in whole requests/s (so that run-to-run noise in the
    capacity below half a request/s reruns nothing), at least 1."""
    if not (math.isfinite(capacity_rps) and capacity_rps > 0):
        raise CapacityError(f"capacity {capacity_rps!r} RPS is not a positive number")
    return max(1, round(rate_share * capacity_rps))

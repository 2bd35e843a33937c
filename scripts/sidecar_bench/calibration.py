"""Calibration: each app of a preset alone (no sidecar), at each of its vCPU levels and with no CPU limit.

What it measures is the app's CPU cost per request (model.py) from the kernel's
accounting, the number the CPU-budget model divides by.

- Conditions: for every app of the preset, `<app>_cpu<v>_mem<m>_sc0_load00` for
  each vCPU level v at which the preset runs that app, and once at the host's
  CPU count ("no limit"): a quota of every CPU of the host limits nothing the
  host does not, and keeps the runner's read-back check of the quota intact.
  m is the preset's most common memory limit (the article's 2048 MB).
- Where such a condition already is in the preset's matrix, its run files are
  used as they are; the others are measured by the rule run_calibration into
  results/<preset>/calibration/runs/<id>/rep<N>.parquet, with the preset's load
  settings and repetitions. They run on the app-only image variant (`go`,
  `next`): a changed app reruns them, a changed sidecar does not.
- The no-limit level is config `calibration.no_limit_vcpu`, or when null the CPU
  count of the machine that plans the workflow (set it to the engine's CPU
  count when the engine is remote).
"""

from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import pandas as pd

from .conditions import Condition

DEFAULT_MEMORY_MB = 2048
CALIBRATION_COLUMNS = [
    "app",
    "level",
    "vcpu",
    "no_limit",
    "condition_id",
    "source",
    "repeats",
    "rps",
    "rps_lo",
    "rps_hi",
    "app_cpu_pct",
    "throttled_share",
    "host_busy_pct",
    "app_cost_ms",
    "app_cost_ms_lo",
    "app_cost_ms_hi",
    "flags",
]


@dataclass(frozen=True)
class CalibrationCell:
    condition: Condition
    no_limit: bool
    in_matrix: bool

    @property
    def level(self) -> str:
        return level_name(self.condition.vcpu, self.no_limit)


def level_name(vcpu: float, no_limit: bool) -> str:
    """ "0.25 vCPU", or "no limit (2 vCPU = the host's CPUs)"."""
    return f"no limit ({vcpu:g} vCPU = the host's CPUs)" if no_limit else f"{vcpu:g} vCPU"


def no_limit_vcpu(settings: Mapping[str, Any] | None) -> float:
    """config calibration.no_limit_vcpu, or the CPU count of this machine when it is null or absent."""
    value = (settings or {}).get("no_limit_vcpu")
    return float(value) if value else float(os.cpu_count() or 1)


def memory_of(conditions: Iterable[Condition]) -> int:
    """The preset's most common memory limit (ties: the larger), DEFAULT_MEMORY_MB for an empty preset."""
    counts = Counter(c.memory_mb for c in conditions)
    if not counts:
        return DEFAULT_MEMORY_MB
    return max(counts, key=lambda m: (counts[m], m))


def calibration_cells(conditions: Iterable[Condition], no_limit: float) -> list[CalibrationCell]:
    """The calibration conditions of a matrix (module docstring), each once, sorted by app and vCPU."""
    conditions = list(conditions)
    in_matrix = {c.id for c in conditions}
    memory = memory_of(conditions)
    cells: dict[str, CalibrationCell] = {}
    for app in sorted({c.app for c in conditions}):
        levels = sorted({c.vcpu for c in conditions if c.app == app})
        for vcpu in [*levels, no_limit]:
            condition = Condition(app, vcpu, memory, 0, 0)
            is_no_limit = math.isclose(vcpu, no_limit)
            previous = cells.get(condition.id)
            cells[condition.id] = CalibrationCell(
                condition,
                is_no_limit or bool(previous and previous.no_limit),
                condition.id in in_matrix,
            )
    return sorted(cells.values(), key=lambda cell: (cell.condition.app, cell.condition.vcpu))


def cell_condition(cells: Iterable[CalibrationCell], condition_id: str) -> Condition:
    """The calibration condition of that id; ValueError naming it when it is not one of the cells."""
    for cell in cells:
        if cell.condition.id == condition_id:
            return cell.condition
    raise ValueError(
        f"condition {condition_id!r} is not a calibration condition of this preset "
        f"({', '.join(c.condition.id for c in cells)})"
    )


def run_path(preset: str, cell: CalibrationCell, repeat: int) -> str:
    """Where a calibration cell's repetition lives: the matrix's run file, or the calibration's own."""
    cid = cell.condition.id
    if cell.in_matrix:
        return f"results/{preset}/runs/{cid}/rep{repeat}.parquet"
    return f"results/{preset}/calibration/runs/{cid}/rep{repeat}.parquet"


def calibration_table(
    summary: pd.DataFrame, no_limit: float | None = None, in_matrix: Iterable[str] = ()
) -> pd.DataFrame:
    """One row per app and level from the calibration runs' condition summary (with the cost columns).

    no_limit: the vCPU of the no-limit level; in_matrix: ids of the calibration conditions that are the
    preset's own conditions (their source reads "matrix").
    """
    in_matrix = set(in_matrix)
    rows = []
    for _, cond in summary.iterrows():
        vcpu = float(cond["vcpu"])
        unlimited = no_limit is not None and math.isclose(vcpu, float(no_limit))
        row = {c: cond.get(c) for c in CALIBRATION_COLUMNS if c in summary.columns}
        row.update(
            {
                "level": level_name(vcpu, unlimited),
                "vcpu": vcpu,
                "no_limit": bool(unlimited),
                "source": "matrix" if cond["condition_id"] in in_matrix else "calibration run",
            }
        )
        rows.append(row)
    frame = pd.DataFrame(rows, columns=CALIBRATION_COLUMNS)
    return frame.sort_values(["app", "vcpu"], kind="stable").reset_index(drop=True)


def burn_peers(config: Mapping[str, Any], preset: str, exists=None) -> dict[str, str]:
    """{preset: sidecar_burn} of the other presets whose sidecars burn differently and whose summary exists."""
    from pathlib import Path

    exists = exists or (lambda path: Path(path).exists())
    base = (config.get("load") or {}).get("sidecar_burn", "wall")
    presets = config.get("presets") or {}
    own = (presets.get(preset, {}).get("load") or {}).get("sidecar_burn", base)
    peers = {}
    for name, settings in presets.items():
        burn = (settings.get("load") or {}).get("sidecar_burn", base)
        if name != preset and burn != own and exists(f"results/{name}/summary.parquet"):
            peers[name] = burn
    return peers

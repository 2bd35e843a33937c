"""Adaptive repetitions: one more run for a condition whose interval is still wider than its target.

After the planned repetitions (`repeats`), each condition's runs are summarised and its
95 % t intervals (repstats.mean_interval, the summary's own method) compared with the
targets of config.yaml's `adaptive` section:

- rps: half-width of the RPS interval over its mean (0.10 = +-10 %);
- p99: half-width of the P99 interval over its mean; for a condition whose runs' P99 fall
  on both sides of a CFS period boundary (flags.bimodal) P99's mean is a latency no run had,
  so the tail share's target applies instead:
- tail_share: half-width of the interval of the share of responses slower than one CFS
  period, in share units (0.02 = +-2 percentage points).

A condition with a metric wider than its target gets one more repetition, then is decided
again, until its intervals are within the targets or it has max_repeats runs. A condition
with a failed repetition (on_failure: record) gets none: its failure is the finding.
With one run there is no interval, which counts as wider than any target.

The decisions after each round are a small JSON file (results/<preset>/adaptive/after<N>.json,
the workflow's checkpoint decide_repeat), one per condition, each naming the metric, its width
and the target.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from . import flags
from .conditions import ConfigError

if TYPE_CHECKING:
    from .repstats import Estimate

# config.yaml adaptive keys -> the per-run column they judge.
METRIC_COLUMNS = {"rps": "rps", "p99": "p99_ms", "tail_share": "slow_1p_share"}
RELATIVE = {"rps": True, "p99": True, "tail_share": False}


@dataclass(frozen=True)
class AdaptiveSettings:
    """config.yaml's adaptive section. max_repeats None: off (the planned repetitions only)."""

    max_repeats: int | None = None
    rps: float | None = 0.10
    p99: float | None = 0.25
    tail_share: float | None = 0.02

    def __post_init__(self) -> None:
        if self.max_repeats is not None and (
            isinstance(self.max_repeats, bool)
            or not isinstance(self.max_repeats, int)
            or self.max_repeats < 1
        ):
            raise ConfigError(
                f"adaptive.max_repeats: {self.max_repeats!r} is not a whole number >= 1 or null"
            )
        for key in METRIC_COLUMNS:
            value = getattr(self, key)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ConfigError(f"adaptive.{key}: {value!r} is not a number > 0 or null")
        if self.max_repeats is not None and all(
            getattr(self, key) is None for key in METRIC_COLUMNS
        ):
            raise ConfigError(
                f"adaptive.max_repeats: {self.max_repeats} with every target (rps, p99, tail_share) "
                "null: nothing could add a repetition"
            )

    def cap(self, planned: int) -> int:
        """The most repetitions a condition can get: max_repeats, or the planned ones when off."""
        return planned if self.max_repeats is None else max(self.max_repeats, planned)

    def enabled(self, planned: int) -> bool:
        return self.cap(planned) > planned

    def check(self, planned: int, where: str = "adaptive") -> None:
        """Refuse a cap below the planned repetitions (say, --config repeats=8 with max_repeats 6)."""
        if self.max_repeats is not None and self.max_repeats < planned:
            raise ConfigError(
                f"{where}.max_repeats: {self.max_repeats} is below the {planned} planned repeats; "
                "raise it or lower repeats"
            )

    def targets(self) -> dict[str, float | None]:
        return {key: getattr(self, key) for key in METRIC_COLUMNS}

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def settings_from_config(config: Mapping[str, Any], preset: str) -> AdaptiveSettings:
    """The top-level adaptive section with the preset's own adaptive keys over it."""
    chosen = ((config.get("presets") or {}).get(preset) or {}).get("adaptive") or {}
    merged = {**(config.get("adaptive") or {}), **chosen}
    unknown = sorted(set(merged) - {"max_repeats", *METRIC_COLUMNS})
    if unknown:
        raise ConfigError(f"adaptive: unknown key {unknown[0]!r}")
    return AdaptiveSettings(**merged)


def _width(metric: str, estimate: Estimate) -> float:
    """Half-width of the interval, over the mean for relative metrics; inf without an interval."""
    if not estimate.has_interval:
        return math.inf
    half = (estimate.hi - estimate.lo) / 2
    if not RELATIVE[metric]:
        return half
    return half / abs(estimate.value) if estimate.value else (0.0 if half == 0 else math.inf)


def width_text(metric: str, width: float) -> str:
    if not math.isfinite(width):
        return "no interval (one run)"
    if RELATIVE[metric]:
        return f"+-{100 * width:.1f} % of the mean"
    return f"+-{100 * width:.2f} percentage points"


def target_text(metric: str, target: float) -> str:
    return f"+-{100 * target:g} %" if RELATIVE[metric] else f"+-{100 * target:g} points"


def judge(rows: Iterable[Mapping[str, Any]], settings: AdaptiveSettings) -> list[dict[str, Any]]:
    """Each checked metric of the runs (per-run rows as stats.summarise_run gives them):
    its value, interval, width and target, and whether it is wider than the target."""
    rows = [row for row in rows if row.get("status", "measured") != "failed"]
    values = {
        metric: [float(row[column]) for row in rows if row.get(column) is not None]
        for metric, column in METRIC_COLUMNS.items()
    }
    # Imported here: the workflow imports this module to read decisions while it parses the Snakefile, and
    # repstats brings scipy.stats, about a second of every snakemake invocation's start.
    from . import repstats

    is_bimodal = flags.bimodal(values["p99"], _period(rows))
    checked = []
    for metric in METRIC_COLUMNS:
        target = getattr(settings, metric)
        # P99 for unimodal runs, the tail share for bimodal ones (flags: compare a B cell by its tail share).
        if (
            target is None
            or (metric == "p99" and is_bimodal)
            or (metric == "tail_share" and not is_bimodal and settings.p99 is not None)
        ):
            continue
        estimate = repstats.mean_interval(values[metric])
        width = _width(metric, estimate)
        checked.append(
            {
                "metric": metric,
                "value": estimate.value,
                "lo": estimate.lo,
                "hi": estimate.hi,
                "half_width": width,
                "target": target,
                "wide": width > target,
                "bimodal": is_bimodal,
            }
        )
    return checked


def _period(rows: list[Mapping[str, Any]]) -> float:
    periods = [float(row["period_ms"]) for row in rows if row.get("period_ms") not in (None, "")]
    periods = [p for p in periods if math.isfinite(p) and p > 0]
    return periods[0] if periods else flags.DEFAULT_PERIOD_MS


def decide(
    condition_id: str, rows: list[Mapping[str, Any]], settings: AdaptiveSettings, planned: int
) -> dict:
    """Whether the condition gets repetition len(rows) + 1, and why (a decision record)."""
    runs = len(rows)
    cap = settings.cap(planned)
    failed = sorted(int(row.get("repeat", 0)) for row in rows if row.get("status") == "failed")
    checked = judge(rows, settings)
    wide = [m for m in checked if m["wide"]]
    described = "; ".join(
        f"{m['metric']}{' (bimodal P99)' if m['bimodal'] and m['metric'] == 'tail_share' else ''} "
        f"{width_text(m['metric'], m['half_width'])} "
        f"{'>' if m['wide'] else '<='} target {target_text(m['metric'], m['target'])}"
        for m in (wide or checked)
    )
    if failed:
        add, why = (
            False,
            f"no repetition added: repetition {failed[0]} failed (the failure is the finding)",
        )
    elif not wide:
        add, why = False, f"{runs} repetitions are enough: {described}"
    elif runs >= cap:
        add, why = (
            False,
            f"no repetition beyond {runs}: the cap (adaptive.max_repeats {cap}) is reached; {described}",
        )
    else:
        add, why = True, f"repetition {runs + 1} added: {described} ({runs} runs, at most {cap})"
    return {
        "condition": condition_id,
        "runs": runs,
        "planned": planned,
        "cap": cap,
        "add": add,
        "reason": f"{condition_id}: {why}",
        "metrics": [_jsonable(m) for m in checked],
    }


def _jsonable(metric: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: (None if isinstance(value, float) and not math.isfinite(value) else value)
        for key, value in metric.items()
    }


def write_decision(path: str | Path, decision: Mapping[str, Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(decision, indent=1) + "\n")
    tmp.replace(path)
    return path


def read_decisions(path: str | Path) -> list[dict[str, Any]]:
    """A round's decisions (checkpoint decide_repeat's output): one per condition in play."""
    return json.loads(Path(path).read_text())["decisions"]


def decide_files(
    run_files: Iterable[str | Path], settings: AdaptiveSettings, planned: int, out: str | Path
) -> list[dict[str, Any]]:
    """Checkpoint decide_repeat: summarise a round's run files (stats.summarise_run), decide for each
    condition on its runs, write {"decisions": [...]} to out."""
    from .stats import summarise_run

    rows: dict[str, list[dict[str, Any]]] = {}
    for path in run_files:
        row = summarise_run(path)
        rows.setdefault(row["condition_id"], []).append(row)
    decisions = [
        decide(cid, sorted(runs, key=lambda r: int(r["repeat"])), settings, planned)
        for cid, runs in sorted(rows.items())
    ]
    write_decision(out, {"decisions": decisions})
    return decisions

"""Warm-up until steady: load the app in short hey bursts until its rate stops rising, with a cap.

`load.warmup: {mode: until_steady, ...}` replaces the fixed `load.warmup_s` (mode fixed, the
default). The runner's warm-up phase then runs hey for BURST_S at a time (same URL and
concurrency as the measured window, nothing recorded but each burst's count and span) and
stops after a burst when

- at least min_s seconds of bursts have run, and
- the rate over the last window_s seconds of bursts is at most (1 + tolerance) times the
  rate over the window_s seconds before them (it no longer rises),

or when max_s seconds have run (then `steady` is false in the run file). The run file's
`warmup` holds the settings, every burst's responses, span and rate, the seconds it took and
why it stopped (docs/run-file-format.md).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

from .conditions import ConfigError

MODES = ("fixed", "until_steady")
# Seconds of load per burst: short enough to stop soon after the rate settles, long enough
# for tens of responses at Next.js's slowest (~40 RPS at 0.25 vCPU).
BURST_S = 1.0
# Run one burst and print "<2xx responses> <span s>" of its CSV ($1: CSV path, then the hey command).
BURST_SCRIPT = r"""
out=$1; shift
"$@" > "$out" || exit $?
awk -F, 'NR > 1 { if ($7 >= 200 && $7 < 300) n++; e = $8 + $1; if (e > m) m = e } END { printf "%d %.4f\n", n, m }' "$out"
"""


@dataclass(frozen=True)
class WarmupSettings:
    mode: str = "fixed"
    min_s: float = 5.0
    max_s: float = 30.0
    window_s: float = 3.0
    tolerance: float = 0.05

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"load.warmup.mode: {self.mode!r} is not one of {', '.join(MODES)}")
        for key in ("min_s", "max_s", "window_s", "tolerance"):
            value = getattr(self, key)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
            ):
                raise ConfigError(f"load.warmup.{key}: {value!r} is not a number >= 0")
        if self.window_s < BURST_S:
            raise ConfigError(
                f"load.warmup.window_s: {self.window_s!r} is below one burst ({BURST_S:g} s)"
            )
        if self.max_s < self.min_s:
            raise ConfigError(f"load.warmup.max_s: {self.max_s!r} is below min_s {self.min_s!r}")

    @property
    def until_steady(self) -> bool:
        return self.mode == "until_steady"

    def window_bursts(self) -> int:
        return max(1, round(self.window_s / BURST_S))

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def as_warmup(value: WarmupSettings | Mapping[str, Any] | None) -> WarmupSettings:
    if value is None:
        return WarmupSettings()
    if isinstance(value, WarmupSettings):
        return value
    if not isinstance(value, Mapping):
        raise ConfigError(f"load.warmup: {value!r} is not a mapping")
    unknown = sorted(set(value) - set(WarmupSettings.__dataclass_fields__))
    if unknown:
        raise ConfigError(f"load.warmup: unknown key {unknown[0]!r}")
    return WarmupSettings(**value)


def window_rate(bursts: Sequence[Mapping[str, float]]) -> float:
    span = sum(b["span_s"] for b in bursts)
    return sum(b["responses"] for b in bursts) / span if span > 0 else 0.0


def steady_check(
    bursts: Sequence[Mapping[str, float]], elapsed_s: float, settings: WarmupSettings
) -> tuple[bool, str | None]:
    """(stop, why) after the bursts so far: steady, capped, or go on (why None)."""
    w = settings.window_bursts()
    if elapsed_s >= settings.min_s and len(bursts) >= 2 * w:
        last, before = window_rate(bursts[-w:]), window_rate(bursts[-2 * w : -w])
        if last <= before * (1 + settings.tolerance):
            return True, (
                f"steady: {last:.1f} RPS over the last {w} bursts, {before:.1f} before "
                f"(rise {100 * (last / before - 1) if before else 0:+.1f} % <= {100 * settings.tolerance:g} %)"
            )
    if elapsed_s >= settings.max_s:
        return True, f"cap: still rising after max_s {settings.max_s:g} s"
    return False, None


def parse_burst(text: str) -> tuple[int, float]:
    """BURST_SCRIPT's last line -> (2xx responses, span s)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        raise ValueError("a warm-up burst printed nothing")
    count, span = lines[-1].split()
    return int(count), float(span)


def rates_per_second(offset_s: Sequence[float], seconds: int) -> list[float]:
    """Requests started in each whole second 0..seconds-1 (the study's series from one long hey run)."""
    counts = [0] * seconds
    for offset in offset_s:
        index = int(offset)
        if 0 <= index < seconds:
            counts[index] += 1
    return [float(c) for c in counts]


def steady_time(rates: Sequence[float], settings: WarmupSettings) -> float | None:
    """When the until_steady rule would stop on a per-second series (1 s bursts), or None if never."""
    uncapped = WarmupSettings(
        **{**settings.as_dict(), "max_s": max(settings.min_s, len(rates) + 1.0)}
    )
    bursts = []
    for second, rate in enumerate(rates, start=1):
        bursts.append({"responses": rate, "span_s": 1.0})
        stop, _ = steady_check(bursts, float(second), uncapped)
        if stop:
            return float(second)
    return None

"""Conditions: what one run measures, and the experiment's matrix of them.

A condition is a value. Its id is readable and stable, so that a run file
(`<id>.parquet`) keeps its meaning when the matrix around it changes.
"""

from __future__ import annotations

import itertools
from decimal import Decimal
from dataclasses import asdict, dataclass, fields
from typing import Any, Iterable, Mapping

APPS = ("go", "next")
ROLES = ("proxy", "agent", "log_router")
MAX_SIDECARS = len(ROLES)
BURNS = ("wall", "cpu")
# The smallest CPU limit Docker accepts (docker run --cpus 0.01).
MIN_VCPU = 0.01
# The smallest memory limit, in MB (MiB, as docker run --memory 128m), that an experiment may
# ask for: below it the task cannot start with all three sidecars. Found with 3 s runs at
# 0.5 vCPU on the task images: Go alone ran at 8 MiB, Go with 3 sidecars was OOM-killed at
# 16 MiB and peaked at 23 MiB when given 24; Next.js alone was OOM-killed under load at
# 48 MiB and thrashed at 64 (61 requests/s against ~100 with 2 GiB), Next.js with 3 sidecars was
# OOM-killed at 64 MiB and ran at 96 (45 requests/s). Each minimum is the lowest working limit
# with all three sidecars, rounded up with room for the Python sidecars' growth.
MIN_MEMORY_MB = {"go": 32, "next": 128}
# What plays the proxy role (the first sidecar): the article's busy-loop sidecar, or a real reverse
# proxy in the request path (HAProxy from Debian; docs/proxy.md): "haproxy" writes an access log
# line per request to a file, as a sidecar's log router would read it, "haproxy-nolog" logs nothing.
PROXIES = ("busy-loop", "haproxy", "haproxy-nolog")
DEFAULT_PROXY = PROXIES[0]


class ConfigError(ValueError):
    """A bad value in the experiment's configuration; the message names it."""


def _number_text(value: float) -> str:
    """Shortest decimal text that reads back as the same number: 0.25 -> '0.25', 2.0 -> '2', 1/3 ->
    '0.3333333333333333'; never an exponent (the workflow's id pattern is digits and a point).

    `:g` kept 6 digits: 0.1234564 and 0.1234565 shared an id, a run file and a matrix slot."""
    text = format(Decimal(repr(float(value))), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


@dataclass(frozen=True, order=True)
class Condition:
    """One task configuration: app, CPU and memory limits, sidecars and their load."""

    app: str
    vcpu: float
    memory_mb: int
    sidecar_count: int
    sidecar_load_pct: float
    proxy: str = DEFAULT_PROXY

    def __post_init__(self) -> None:
        if self.app not in APPS:
            raise ConfigError(f"app: {self.app!r} is not one of {', '.join(APPS)}")
        if not self.vcpu > 0:
            raise ConfigError(f"vcpu: {self.vcpu!r} is not > 0")
        if not (isinstance(self.memory_mb, int) and self.memory_mb >= 6):
            # Docker refuses memory limits under 6 MB.
            raise ConfigError(f"memory_mb: {self.memory_mb!r} is not a whole number >= 6")
        if not (isinstance(self.sidecar_count, int) and 0 <= self.sidecar_count <= MAX_SIDECARS):
            raise ConfigError(f"sidecar_count: {self.sidecar_count!r} is not a whole number from 0 to {MAX_SIDECARS}")
        if not 0 <= self.sidecar_load_pct <= 100:
            raise ConfigError(f"sidecar_load_pct: {self.sidecar_load_pct!r} is not within 0..100")
        if self.proxy not in PROXIES:
            raise ConfigError(f"proxy: {self.proxy!r} is not one of {', '.join(PROXIES)}")
        if self.proxy != DEFAULT_PROXY and self.sidecar_count < 1:
            raise ConfigError(f"proxy: {self.proxy!r} needs sidecar_count >= 1 (the proxy is the first sidecar), "
                              f"got {self.sidecar_count}")
        # Plain floats, so that 1 and 1.0 make one condition, one id and one repr.
        object.__setattr__(self, "vcpu", float(self.vcpu))
        object.__setattr__(self, "sidecar_load_pct", float(self.sidecar_load_pct))

    @property
    def id(self) -> str:
        load = self.sidecar_load_pct
        load_text = f"{int(load):02d}" if load == int(load) else _number_text(load)
        return (
            f"{self.app}_cpu{_number_text(self.vcpu)}_mem{self.memory_mb}"
            f"_sc{self.sidecar_count}_load{load_text}"
        ) + self.proxy_suffix

    @property
    def proxy_suffix(self) -> str:
        """'' for the article's busy-loop proxy (so no existing id changes), else '_px-<proxy>'."""
        return "" if self.proxy == DEFAULT_PROXY else f"_px-{self.proxy}"

    @property
    def real_proxy(self) -> bool:
        return self.proxy != DEFAULT_PROXY

    @property
    def total_sidecar_load_pct(self) -> float:
        # A real proxy burns no set load: only the busy-loop sidecars after it do.
        return (self.sidecar_count - self.real_proxy) * self.sidecar_load_pct

    @property
    def variant(self) -> str:
        """The task image variant this condition runs on."""
        if self.real_proxy:
            return f"{self.app}-proxy"
        return f"{self.app}-sidecar" if self.sidecar_count else self.app

    @property
    def roles(self) -> tuple[str, ...]:
        return ROLES[: self.sidecar_count]

    def as_dict(self) -> dict[str, Any]:
        values = asdict(self)
        if not self.real_proxy:
            # Absent at the default: a condition's dict is its run's rerun trigger (params).
            del values["proxy"]
        return {"id": self.id, **values, "total_sidecar_load_pct": self.total_sidecar_load_pct}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Condition":
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data or f.name != "proxy"})


@dataclass(frozen=True)
class LoadSettings:
    """How each condition is loaded: hey -z duration -c concurrency, after warm-up."""

    duration_s: float = 30
    concurrency: int = 10
    warmup_s: float = 0
    ready_timeout_s: float = 120
    # How sidecars measure their busy time: "wall" (the article) or "cpu".
    sidecar_burn: str = "wall"
    # Warm-up until steady (load.warmup, warmup.py): None or mode fixed keeps warmup_s.
    warmup: Any = None

    def __post_init__(self) -> None:
        # Warm-up until steady: the mapping from config.yaml as a WarmupSettings.
        from .warmup import as_warmup

        object.__setattr__(self, "warmup", as_warmup(self.warmup))
        if not self.duration_s > 0:
            raise ConfigError(f"load.duration_s: {self.duration_s!r} is not > 0")
        if not (isinstance(self.concurrency, int) and self.concurrency >= 1):
            raise ConfigError(f"load.concurrency: {self.concurrency!r} is not a whole number >= 1")
        if not self.warmup_s >= 0:
            raise ConfigError(f"load.warmup_s: {self.warmup_s!r} is not >= 0")
        if not self.ready_timeout_s > 0:
            raise ConfigError(f"load.ready_timeout_s: {self.ready_timeout_s!r} is not > 0")
        if self.sidecar_burn not in BURNS:
            raise ConfigError(f"load.sidecar_burn: {self.sidecar_burn!r} is not one of {', '.join(BURNS)}")

    def as_dict(self) -> dict[str, Any]:
        settings = asdict(self)
        if not self.warmup.until_steady:
            del settings["warmup"]  # warmup_s says it all (warm-up until steady)
        return settings

    def measured(self) -> dict[str, Any]:
        """The settings that can change a measurement: a run's rerun trigger.

        ready_timeout_s is left out: waiting longer for the app changes no result. So is
        warmup while its mode is fixed (warmup_s says it all), so that runs measured before
        warm-up until steady existed keep their trigger.
        """
        return {key: value for key, value in self.as_dict().items() if key != "ready_timeout_s"}

    def warmup_limit_s(self) -> float:
        """The longest the warm-up can take: warmup_s, or max_s plus a burst's start-up when until steady."""
        if self.warmup.until_steady:
            return self.warmup.max_s * 1.5 + 10
        return self.warmup_s


AXES = ("app", "vcpu", "memory_mb", "sidecar_count", "sidecar_load_pct")
# Axes a set may leave out, with the value they then take.
OPTIONAL_AXES = {"proxy": [DEFAULT_PROXY]}


def check_startable(condition: Condition, where: str = "") -> None:
    """Refuse limits under which the engine or the task cannot start (config checks; the
    runner API itself still takes them, so that tests can make an app run out of memory)."""
    if condition.vcpu < MIN_VCPU:
        raise ConfigError(f"{where}vcpu: {condition.vcpu:g} is below {MIN_VCPU:g}, the smallest CPU limit Docker "
                          "accepts")
    minimum = MIN_MEMORY_MB[condition.app]
    if condition.memory_mb < minimum:
        raise ConfigError(f"{where}memory_mb: {condition.memory_mb} is below {minimum} MB, the least a {condition.app} "
                          "task needs to start with up to 3 sidecars (docs/operations.md, \"Bad input\")")


def expand_set(name: str, axes: Mapping[str, Iterable[Any]]) -> list[Condition]:
    """The product of one named set's axes.

    With no sidecars the per-sidecar load and the proxy mean nothing, so they are set to 0 and the
    busy-loop: `sc0` conditions of a grid collapse into one run instead of five copies. A real proxy
    alone (one sidecar) has no busy-loop sidecar either: its load is set to 0 too.
    """
    missing = [axis for axis in AXES if axis not in axes]
    if missing:
        raise ConfigError(f"sets.{name}: missing axis {', '.join(missing)}")
    unknown = sorted(set(axes) - set(AXES) - set(OPTIONAL_AXES))
    if unknown:
        raise ConfigError(f"sets.{name}: unknown axis {', '.join(unknown)}")
    axes = {**OPTIONAL_AXES, **axes}
    names = AXES + tuple(OPTIONAL_AXES)
    conditions: dict[str, Condition] = {}
    for values in itertools.product(*(axes[axis] for axis in names)):
        params = dict(zip(names, values))
        if params["sidecar_count"] == 0:
            # No sidecar, no proxy: one condition, the app alone.
            params["sidecar_load_pct"] = 0
            params["proxy"] = DEFAULT_PROXY
        elif params["proxy"] != DEFAULT_PROXY and params["sidecar_count"] == 1:
            # A real proxy alone: no busy-loop sidecar is left for the load to mean anything.
            params["sidecar_load_pct"] = 0
        try:
            condition = Condition(**params)
        except ConfigError as err:
            raise ConfigError(f"sets.{name}.{err}") from None
        check_startable(condition, f"sets.{name}.")
        conditions.setdefault(condition.id, condition)
    return list(conditions.values())


def expand_matrix(sets: Mapping[str, Mapping[str, Iterable[Any]]], names: Iterable[str]) -> list[Condition]:
    """The de-duplicated union of the named sets, in a stable order."""
    chosen: dict[str, Condition] = {}
    for name in names:
        if name not in sets:
            raise ConfigError(f"sets: no set named {name!r} (known: {', '.join(sorted(sets))})")
        for condition in expand_set(name, sets[name]):
            chosen.setdefault(condition.id, condition)
    return sorted(chosen.values())

"""Conditions: what one run measures, and the experiment's matrix of them.

A condition is a value. Its id is readable and stable, so that a run file
(`runs/<id>/rep<N>.parquet`) keeps its meaning when the matrix around it changes.
"""

from __future__ import annotations

import functools
import itertools
import re
from decimal import Decimal
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Iterable, Mapping

APPS = ("go", "next")
ROLES = ("proxy", "agent", "log_router")
MAX_SIDECARS = len(ROLES)
BURNS = ("wall", "cpu")
# --- load model (open loop: docs/open-loop.md) ---------------------------------------------
# closed: hey's closed loop, the article's (the default; ids and params as before the axis).
# open: requests at a fixed rate, a share of the setup's measured closed-loop capacity.
LOAD_MODELS = ("closed", "open")
ARRIVALS = ("poisson", "constant")
DEFAULT_ARRIVALS = "poisson"
# --- end load model ------------------------------------------------------------------------
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
# The CFS period Docker and the kernel accept (docker run --cpu-period: 1 ms to 1 s), and the smallest quota
# (--cpu-quota: 1 ms). The article's period, Docker's default with --cpus, is 100 ms.
MIN_PERIOD_MS, MAX_PERIOD_MS, DEFAULT_PERIOD_MS = 1.0, 1000.0, 100.0
MIN_QUOTA_US = 1000
# A cpuset as docker run --cpuset-cpus takes it: "0", "0-1", "0,2", "0-1,3".
CPUSET = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
# CPU shares of a task without a quota: ECS gives a task cgroup its cpu units, 1024 per vCPU.
SHARES_PER_VCPU = 1024
# The knobs against CFS throttling (docs/method.md, "Knobs against throttling"): condition fields whose
# default is the article's setting. At the default a knob is absent from the id and from as_dict(), so
# that every condition without knobs keeps its id and its rerun fingerprint.
KNOBS = (
    "cpu_period_ms",
    "cpu_burst_pct",
    "cpu_quota",
    "cpuset",
    "gomaxprocs",
    "uv_threadpool_size",
    "node_semi_space_mb",
    "topology",
    "app_cpu_units",
    "sidecar_cpu_units",
)
KNOB_DEFAULTS: dict[str, Any] = {
    "cpu_period_ms": None,
    "cpu_burst_pct": None,
    "cpu_quota": True,
    "cpuset": None,
    "gomaxprocs": None,
    "uv_threadpool_size": None,
    "node_semi_space_mb": None,
    "topology": "process",
    "app_cpu_units": None,
    "sidecar_cpu_units": None,
}
# How a task is laid out in cgroups (docs/method.md, "The task topology"): process - one container, the app and
# its sidecars processes of one cgroup (the article's); task - ECS's layout, a task cgroup with the quota and one
# container per role under it, each with its own CPU weight.
TOPOLOGIES = ("process", "task")
# A topology in the knobs' label ("task topology"); the summary's knobs column holds it.
TOPOLOGY_WORD = "topology"
TASK_TOPOLOGY_LABEL = f"task {TOPOLOGY_WORD}"
# ECS container cpu units -> CPUShares: 2 when unset (0 and 1 become 2), at most 262144.
MIN_SHARES, MAX_SHARES = 2, 262144


def cpuset_cpus(text: str) -> list[int]:
    """'0-1,3' -> [0, 1, 3]; ConfigError if it is not a cpuset."""
    if not CPUSET.match(text):
        raise ConfigError(f"cpuset: {text!r} is not a CPU list like 0, 0-1 or 0,2")
    cpus: set[int] = set()
    for part in text.split(","):
        low, _, high = part.partition("-")
        if high and int(high) < int(low):
            raise ConfigError(f"cpuset: {text!r} has a range that runs backwards ({part})")
        cpus.update(range(int(low), int(high or low) + 1))
    return sorted(cpus)


class ConfigError(ValueError):
    """A bad value in the experiment's configuration; the message names it."""


def _number_text(value: float) -> str:
    """Shortest decimal text that reads back as the same number: 0.25 -> '0.25', 2.0 -> '2', 1/3 ->
    '0.3333333333333333'; never an exponent (the workflow's id pattern is digits and a point).

    `:g` kept 6 digits: 0.1234564 and 0.1234565 shared an id, a run file and a matrix slot."""
    text = format(Decimal(repr(float(value))), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


@functools.total_ordering
@dataclass(frozen=True)
class Condition:
    """One task configuration: app, CPU and memory limits, sidecars and their load."""

    app: str
    vcpu: float
    memory_mb: int
    sidecar_count: int
    sidecar_load_pct: float
    proxy: str = DEFAULT_PROXY
    # Knobs (KNOBS); None / True: the article's setting.
    cpu_period_ms: float | None = None  # CFS period (docker run --cpu-period); None: 100 ms
    cpu_burst_pct: float | None = (
        None  # CFS burst in % of one period's quota (cpu.cfs_burst_us, cpu.max.burst)
    )
    cpu_quota: bool = True  # False: no quota, CPU shares = vcpu x 1024 (weights only)
    cpuset: str | None = None  # docker run --cpuset-cpus
    gomaxprocs: int | None = None  # Go: GOMAXPROCS in the app's environment
    uv_threadpool_size: int | None = None  # Next.js: UV_THREADPOOL_SIZE
    node_semi_space_mb: int | None = None  # Next.js: NODE_OPTIONS=--max-semi-space-size
    topology: str = "process"  # TOPOLOGIES
    app_cpu_units: int | None = (
        None  # task topology: the app container's CPU shares (ECS cpu units); None: 2
    )
    sidecar_cpu_units: int | None = (
        None  # task topology: each sidecar container's CPU shares; None: 2
    )
    # Load model axis (open loop): defaults keep a closed condition's id and as_dict() unchanged.
    load_model: str = "closed"
    rate_share: float = 0.0  # open: the rate as a share of the setup's capacity; closed: 0
    arrivals: str = DEFAULT_ARRIVALS  # open: poisson or constant; closed: unused

    def __post_init__(self) -> None:
        if self.app not in APPS:
            raise ConfigError(f"app: {self.app!r} is not one of {', '.join(APPS)}")
        if not self.vcpu > 0:
            raise ConfigError(f"vcpu: {self.vcpu!r} is not > 0")
        if not (isinstance(self.memory_mb, int) and self.memory_mb >= 6):
            # Docker refuses memory limits under 6 MB.
            raise ConfigError(f"memory_mb: {self.memory_mb!r} is not a whole number >= 6")
        if not (isinstance(self.sidecar_count, int) and 0 <= self.sidecar_count <= MAX_SIDECARS):
            raise ConfigError(
                f"sidecar_count: {self.sidecar_count!r} is not a whole number from 0 to {MAX_SIDECARS}"
            )
        if not 0 <= self.sidecar_load_pct <= 100:
            raise ConfigError(f"sidecar_load_pct: {self.sidecar_load_pct!r} is not within 0..100")
        if self.proxy not in PROXIES:
            raise ConfigError(f"proxy: {self.proxy!r} is not one of {', '.join(PROXIES)}")
        if self.proxy != DEFAULT_PROXY and self.sidecar_count < 1:
            raise ConfigError(
                f"proxy: {self.proxy!r} needs sidecar_count >= 1 (the proxy is the first sidecar), "
                f"got {self.sidecar_count}"
            )
        self._check_load_model()
        # Plain floats, so that 1 and 1.0 make one condition, one id and one repr.
        object.__setattr__(self, "vcpu", float(self.vcpu))
        object.__setattr__(self, "sidecar_load_pct", float(self.sidecar_load_pct))
        object.__setattr__(self, "rate_share", float(self.rate_share))
        self._check_knobs()
        if self.is_open and self.topology != "process":
            # The task topology's containers (TaskMeasurement) have no open-loop generator yet.
            raise ConfigError(
                f"load_model: {self.load_model!r} runs only in the process topology, not with "
                f"topology {self.topology!r}"
            )

    def _check_load_model(self) -> None:
        if self.load_model not in LOAD_MODELS:
            raise ConfigError(
                f"load_model: {self.load_model!r} is not one of {', '.join(LOAD_MODELS)}"
            )
        if self.arrivals not in ARRIVALS:
            raise ConfigError(f"arrivals: {self.arrivals!r} is not one of {', '.join(ARRIVALS)}")
        if isinstance(self.rate_share, bool) or not isinstance(self.rate_share, (int, float)):
            raise ConfigError(f"rate_share: {self.rate_share!r} is not a number")
        if self.load_model == "open" and not 0 < self.rate_share <= 1:
            # Above capacity the queue grows for the whole window: its latencies measure the window's length.
            raise ConfigError(
                f"rate_share: {self.rate_share!r} is not within (0, 1] (a share of the setup's "
                "closed-loop capacity, e.g. 0.5)"
            )
        if self.load_model == "closed" and (
            self.rate_share != 0 or self.arrivals != DEFAULT_ARRIVALS
        ):
            raise ConfigError(
                f"rate_share: {self.rate_share!r} / arrivals: {self.arrivals!r} are set, but "
                "load_model is closed: they apply to load_model open only"
            )

    def _check_knobs(self) -> None:
        """Validate the knobs and bring each to one form: the article's setting written out (period 100 ms,
        burst 0) becomes the default, so that it is the article's condition, with its id."""
        period = self.cpu_period_ms
        if period is not None:
            if (
                isinstance(period, bool)
                or not isinstance(period, (int, float))
                or not MIN_PERIOD_MS <= period <= MAX_PERIOD_MS
            ):
                raise ConfigError(
                    f"cpu_period_ms: {period!r} is not a number from {MIN_PERIOD_MS:g} to "
                    f"{MAX_PERIOD_MS:g} (the CFS periods Docker accepts)"
                )
            if round(period * 1000) != period * 1000:
                raise ConfigError(
                    f"cpu_period_ms: {period!r} is not a whole number of microseconds"
                )
            object.__setattr__(
                self, "cpu_period_ms", None if period == DEFAULT_PERIOD_MS else float(period)
            )
        burst = self.cpu_burst_pct
        if burst is not None:
            if (
                isinstance(burst, bool)
                or not isinstance(burst, (int, float))
                or not 0 <= burst <= 100
            ):
                raise ConfigError(
                    f"cpu_burst_pct: {burst!r} is not within 0..100 (% of one period's quota; the "
                    "kernel refuses a burst above the quota)"
                )
            object.__setattr__(self, "cpu_burst_pct", None if burst == 0 else float(burst))
        if not isinstance(self.cpu_quota, bool):
            raise ConfigError(f"cpu_quota: {self.cpu_quota!r} is not true or false")
        if not self.cpu_quota and self.cpu_period_ms is not None:
            raise ConfigError(
                f"cpu_period_ms: {self.cpu_period_ms:g} with cpu_quota false: a period means nothing "
                "without a quota"
            )
        if not self.cpu_quota and self.cpu_burst_pct is not None:
            raise ConfigError(
                f"cpu_burst_pct: {self.cpu_burst_pct:g} with cpu_quota false: a burst means nothing "
                "without a quota"
            )
        if self.cpu_period_ms is not None and self.quota_us < MIN_QUOTA_US:
            raise ConfigError(
                f"cpu_period_ms: {self.period_us / 1000:g} at vcpu {self.vcpu:g} makes a quota of "
                f"{self.quota_us} us, below the {MIN_QUOTA_US} us the kernel accepts; lengthen the period"
            )
        if self.cpuset is not None:
            if not isinstance(self.cpuset, str):
                object.__setattr__(self, "cpuset", str(self.cpuset))
            cpus = cpuset_cpus(self.cpuset)
            if self.cpu_quota and self.vcpu > len(cpus):
                raise ConfigError(
                    f"cpuset: {self.cpuset!r} has {len(cpus)} CPU(s), fewer than vcpu {self.vcpu:g}: the "
                    "quota could never be used; set cpu_quota false to make the cpuset the budget"
                )
        if self.topology not in TOPOLOGIES:
            raise ConfigError(f"topology: {self.topology!r} is not one of {', '.join(TOPOLOGIES)}")
        for name in ("app_cpu_units", "sidecar_cpu_units"):
            value = getattr(self, name)
            if value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, int)
                or not 0 <= value <= MAX_SHARES
            ):
                raise ConfigError(
                    f"{name}: {value!r} is not a whole number from 0 to {MAX_SHARES} (ECS cpu units)"
                )
            if self.topology != "task":
                raise ConfigError(
                    f"{name}: {value} needs topology task: in the process topology the app and its "
                    "sidecars share one cgroup, there is no weight between them"
                )
            # As ECS: 0 and 1 become 2, and 2 is what an unset value gets.
            object.__setattr__(self, name, None if value <= MIN_SHARES else value)
        if self.topology == "task" and self.cpuset is not None:
            raise ConfigError(
                f"cpuset: {self.cpuset!r} is not supported with topology task (a cpuset on the task "
                "cgroup is not built); use it with topology process"
            )
        for name, app, low, high in (
            ("gomaxprocs", "go", 1, 1024),
            ("uv_threadpool_size", "next", 1, 1024),
            ("node_semi_space_mb", "next", 1, 1024),
        ):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise ConfigError(f"{name}: {value!r} is not a whole number from {low} to {high}")
            if self.app != app:
                raise ConfigError(
                    f"{name}: {value} is a setting of the {app} app, not of {self.app}"
                )

    def sort_key(self) -> tuple[Any, ...]:
        """The article's fields in order, then the knobs' id parts ("" at the article's settings first), then the
        load model (closed first)."""
        return (
            self.app,
            self.vcpu,
            self.memory_mb,
            self.sidecar_count,
            self.sidecar_load_pct,
            self.proxy_suffix,
            self.id_parts(),
            self.load_model,
            self.rate_share,
            self.arrivals,
        )

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Condition):
            return NotImplemented
        return self.sort_key() < other.sort_key()

    @property
    def period_us(self) -> int:
        return round((self.cpu_period_ms or DEFAULT_PERIOD_MS) * 1000)

    @property
    def quota_us(self) -> int:
        """The CFS quota the condition sets (-1 without one)."""
        return round(self.vcpu * self.period_us) if self.cpu_quota else -1

    @property
    def burst_us(self) -> int:
        return round(self.quota_us * (self.cpu_burst_pct or 0) / 100) if self.cpu_quota else 0

    @property
    def cpu_shares(self) -> int | None:
        """CPU shares without a quota (vcpu x 1024, at least 2); None: Docker's default."""
        return None if self.cpu_quota else max(2, round(self.vcpu * SHARES_PER_VCPU))

    @property
    def knobs(self) -> dict[str, Any]:
        """The knobs that differ from the article's settings."""
        return {
            name: getattr(self, name)
            for name in KNOBS
            if getattr(self, name) != KNOB_DEFAULTS[name]
        }

    @property
    def knobs_text(self) -> str:
        """'period 5 ms, burst 50 %' (empty at the article's settings): the summary's and tables' label."""
        words = {
            "cpu_period_ms": lambda v: f"period {v:g} ms",
            "cpu_burst_pct": lambda v: f"burst {v:g} %",
            "cpu_quota": lambda v: "no quota",
            "cpuset": lambda v: f"cpuset {v}",
            "gomaxprocs": lambda v: f"GOMAXPROCS {v}",
            "uv_threadpool_size": lambda v: f"UV_THREADPOOL_SIZE {v}",
            "node_semi_space_mb": lambda v: f"semi-space {v} MB",
            "topology": lambda v: f"{v} {TOPOLOGY_WORD}",
            "app_cpu_units": lambda v: f"app cpu {v}",
            "sidecar_cpu_units": lambda v: f"sidecar cpu {v}",
        }
        return ", ".join(words[name](value) for name, value in self.knobs.items())

    @property
    def id(self) -> str:
        load = self.sidecar_load_pct
        load_text = f"{int(load):02d}" if load == int(load) else _number_text(load)
        base = (
            f"{self.app}_cpu{_number_text(self.vcpu)}_mem{self.memory_mb}"
            f"_sc{self.sidecar_count}_load{load_text}"
        )
        return (
            base
            + self.proxy_suffix
            + "".join(f"_{part}" for part in self.id_parts())
            + self.load_model_suffix
        )

    def id_parts(self) -> list[str]:
        """The knobs' parts of the id, in KNOBS order; none at the article's settings."""
        parts = []
        if self.cpu_period_ms is not None:
            parts.append(f"period{_number_text(self.cpu_period_ms)}ms")
        if self.cpu_burst_pct is not None:
            parts.append(f"burst{_number_text(self.cpu_burst_pct)}")
        if not self.cpu_quota:
            parts.append("noquota")
        if self.cpuset is not None:
            parts.append("cpuset" + self.cpuset.replace("-", "to").replace(",", "and"))
        if self.gomaxprocs is not None:
            parts.append(f"gomaxprocs{self.gomaxprocs}")
        if self.uv_threadpool_size is not None:
            parts.append(f"uvpool{self.uv_threadpool_size}")
        if self.node_semi_space_mb is not None:
            parts.append(f"semispace{self.node_semi_space_mb}")
        if self.topology != "process":
            parts.append(self.topology)
        if self.app_cpu_units is not None:
            parts.append(f"appcpu{self.app_cpu_units}")
        if self.sidecar_cpu_units is not None:
            parts.append(f"sccpu{self.sidecar_cpu_units}")
        return parts

    def role_shares(self, role: str) -> int:
        """The task topology's CPU shares of a role's container (ECS: the container's cpu units, 2 when unset)."""
        units = self.app_cpu_units if role == "app" else self.sidecar_cpu_units
        return MIN_SHARES if units is None else units

    @property
    def proxy_suffix(self) -> str:
        """'' for the article's busy-loop proxy (so no existing id changes), else '_px-<proxy>'."""
        return "" if self.proxy == DEFAULT_PROXY else f"_px-{self.proxy}"

    @property
    def real_proxy(self) -> bool:
        return self.proxy != DEFAULT_PROXY

    @property
    def load_model_suffix(self) -> str:
        """'' (closed), '_open50' (Poisson arrivals at 50 % of capacity), '_open50c' (constant arrivals)."""
        if self.load_model == "closed":
            return ""
        constant = "c" if self.arrivals == "constant" else ""
        return f"_open{_number_text(round(self.rate_share * 100, 6))}{constant}"

    @property
    def is_open(self) -> bool:
        return self.load_model == "open"

    @property
    def capacity_condition(self) -> "Condition":
        """The closed-loop condition whose throughput is this setup's capacity: same app, vCPU, memory, sidecar
        count, proxy and knobs, sidecars idle (load 0)."""
        return replace(
            self,
            sidecar_load_pct=0.0,
            load_model="closed",
            rate_share=0.0,
            arrivals=DEFAULT_ARRIVALS,
        )

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
        """The condition as params and run files hold it; a knob, a real proxy or the open loop's fields only when
        they are not the article's setting (so that a condition without them has the same params, hence rerun
        fingerprint, as before they existed)."""
        values = asdict(self)
        plain = {
            name: value
            for name, value in values.items()
            if name not in KNOBS and name != "proxy" and name not in OPEN_AXES
        }
        if self.real_proxy:
            plain["proxy"] = self.proxy
        if self.is_open:
            plain.update({name: values[name] for name in OPEN_AXES})
        return {
            "id": self.id,
            **plain,
            "total_sidecar_load_pct": self.total_sidecar_load_pct,
            **self.knobs,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Condition":
        optional = set(KNOBS) | {"proxy"} | set(OPEN_AXES)
        return cls(
            **{
                f.name: data[f.name]
                for f in fields(cls)
                if f.name in data or f.name not in optional
            }
        )


def _app_warmups(value: Any) -> tuple[tuple[str, float], ...]:
    """load.app_warmup_s as sorted (app, seconds) pairs (hashable, as the settings are), every app known and every
    value a number >= 0."""
    if value is None:
        return ()
    if isinstance(value, tuple):
        value = dict(value)
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"load.app_warmup_s: {value!r} is not a mapping of app to seconds (e.g. {{next: 30}})"
        )
    out = {}
    for app, seconds in value.items():
        if app not in APPS:
            raise ConfigError(f"load.app_warmup_s: {app!r} is not one of {', '.join(APPS)}")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not seconds >= 0:
            raise ConfigError(f"load.app_warmup_s.{app}: {seconds!r} is not a number >= 0")
        out[app] = seconds
    return tuple(sorted(out.items()))


@dataclass(frozen=True)
class LoadSettings:
    """How each condition is loaded: hey -z duration -c concurrency, after warm-up.

    The defaults here are the article's method (30 s from a cold start), for the library's callers; the
    workflow's are the schema's, which config.yaml states (10 s after 5 s of warm-up).
    """

    duration_s: float = 30
    concurrency: int = 10
    warmup_s: float = 0
    ready_timeout_s: float = 120
    # How sidecars measure their busy time: "wall" (the article) or "cpu".
    sidecar_burn: str = "wall"
    # Warm-up until steady (load.warmup, warmup.py): None or mode fixed keeps warmup_s.
    warmup: Any = None
    # A fixed warm-up per app in place of warmup_s, e.g. {"next": 30} (docs/method.md, "Measured here: the warm-up
    # study"); empty: warmup_s for every app. A run gets its app's settings only (for_app).
    app_warmup_s: Any = None

    def __post_init__(self) -> None:
        # Warm-up until steady: the mapping from config.yaml as a WarmupSettings.
        from .warmup import as_warmup

        object.__setattr__(self, "warmup", as_warmup(self.warmup))
        object.__setattr__(self, "app_warmup_s", _app_warmups(self.app_warmup_s))
        if not self.duration_s > 0:
            raise ConfigError(f"load.duration_s: {self.duration_s!r} is not > 0")
        if not (isinstance(self.concurrency, int) and self.concurrency >= 1):
            raise ConfigError(f"load.concurrency: {self.concurrency!r} is not a whole number >= 1")
        if not self.warmup_s >= 0:
            raise ConfigError(f"load.warmup_s: {self.warmup_s!r} is not >= 0")
        if not self.ready_timeout_s > 0:
            raise ConfigError(f"load.ready_timeout_s: {self.ready_timeout_s!r} is not > 0")
        if self.sidecar_burn not in BURNS:
            raise ConfigError(
                f"load.sidecar_burn: {self.sidecar_burn!r} is not one of {', '.join(BURNS)}"
            )

    def as_dict(self) -> dict[str, Any]:
        settings = asdict(self)
        if not self.warmup.until_steady:
            del settings["warmup"]  # warmup_s says it all (warm-up until steady)
        if self.app_warmup_s:
            settings["app_warmup_s"] = dict(self.app_warmup_s)
        else:
            del settings["app_warmup_s"]  # so that settings without it keep every run's trigger
        return settings

    def for_app(self, app: str) -> "LoadSettings":
        """The settings one run of app gets: its own warm-up from app_warmup_s, or warmup_s. A run's trigger
        (measured()) is then today's for every app that app_warmup_s does not name."""
        return replace(
            self, warmup_s=dict(self.app_warmup_s).get(app, self.warmup_s), app_warmup_s=None
        )

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
# Optional axes of a set (load model; absent: closed).
OPEN_AXES = ("load_model", "rate_share", "arrivals")
# Optional axes of a set: the proxy, each knob and the load model, as a list of values (absent: the article's
# setting, closed).
OPTIONAL_AXES = ("proxy",) + KNOBS + OPEN_AXES


def check_startable(condition: Condition, where: str = "") -> None:
    """Refuse limits under which the engine or the task cannot start (config checks; the
    runner API itself still takes them, so that tests can make an app run out of memory)."""
    if condition.vcpu < MIN_VCPU:
        raise ConfigError(
            f"{where}vcpu: {condition.vcpu:g} is below {MIN_VCPU:g}, the smallest CPU limit Docker "
            "accepts"
        )
    minimum = MIN_MEMORY_MB[condition.app]
    if condition.memory_mb < minimum:
        raise ConfigError(
            f"{where}memory_mb: {condition.memory_mb} is below {minimum} MB, the least a {condition.app} "
            'task needs to start with up to 3 sidecars (docs/operations.md, "Bad input")'
        )


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
    axes = _with_load_model_axes(name, axes)
    used = AXES + tuple(axis for axis in OPTIONAL_AXES if axis in axes)
    conditions: dict[str, Condition] = {}
    for values in itertools.product(*(axes[axis] for axis in used)):
        params = dict(zip(used, values))
        params.setdefault("proxy", DEFAULT_PROXY)
        if params["sidecar_count"] == 0:
            # No sidecar, no proxy: one condition, the app alone.
            params["sidecar_load_pct"] = 0
            params["proxy"] = DEFAULT_PROXY
        elif params["proxy"] != DEFAULT_PROXY and params["sidecar_count"] == 1:
            # A real proxy alone: no busy-loop sidecar is left for the load to mean anything.
            params["sidecar_load_pct"] = 0
        if params["load_model"] == "closed":
            # A closed loop has no rate: one closed condition, not one per share or arrival process.
            params["rate_share"], params["arrivals"] = 0.0, DEFAULT_ARRIVALS
        try:
            condition = Condition(**params)
        except ConfigError as err:
            raise ConfigError(f"sets.{name}.{err}") from None
        check_startable(condition, f"sets.{name}.")
        conditions.setdefault(condition.id, condition)
    return list(conditions.values())


def _with_load_model_axes(name: str, axes: Mapping[str, Iterable[Any]]) -> dict[str, list[Any]]:
    """A set's axes with the load model's filled in (closed; no share), checked: a set that asks for open
    names its rate_share, and one that is only closed names none."""
    filled = {axis: list(values) for axis, values in axes.items() if values is not None}
    filled.setdefault("load_model", ["closed"])
    filled.setdefault("arrivals", [DEFAULT_ARRIVALS])
    if "rate_share" not in filled:
        if "open" in filled["load_model"]:
            raise ConfigError(
                f"sets.{name}: load_model open needs rate_share (e.g. [0.5, 0.75]: shares of the "
                "setup's closed-loop capacity)"
            )
        filled["rate_share"] = [0.0]
    elif "open" not in filled["load_model"]:
        raise ConfigError(
            f"sets.{name}.rate_share: {filled['rate_share']!r} is set, but load_model is "
            f"{filled['load_model']!r}: rate_share applies to load_model open only"
        )
    return filled


def with_capacity_conditions(conditions: Iterable[Condition]) -> list[Condition]:
    """The conditions plus the closed-loop capacity condition of every open one (its rate's source)."""
    chosen = {condition.id: condition for condition in conditions}
    for condition in list(chosen.values()):
        if condition.is_open:
            capacity = condition.capacity_condition
            chosen.setdefault(capacity.id, capacity)
    return sorted(chosen.values())


def expand_matrix(
    sets: Mapping[str, Mapping[str, Iterable[Any]]], names: Iterable[str]
) -> list[Condition]:
    """The de-duplicated union of the named sets, in a stable order."""
    chosen: dict[str, Condition] = {}
    for name in names:
        if name not in sets:
            raise ConfigError(f"sets: no set named {name!r} (known: {', '.join(sorted(sets))})")
        for condition in expand_set(name, sets[name]):
            chosen.setdefault(condition.id, condition)
    return sorted(chosen.values())

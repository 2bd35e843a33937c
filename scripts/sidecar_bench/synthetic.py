"""Synthetic run files, written per the run file format (record.py), with the keys of the version it writes.

For tests and for bench_analysis.py: analysis must be exercised on files shaped
like the runner's without a Docker engine. `write_run` takes explicit samples
(for hand-computed tests); `model_samples` makes plausible ones (CFS-period
steps at 100 / 200 ms included) for a condition. Repetitions go to
`<dir>/<condition id>/rep<N>.parquet` with `repeat` N in the metadata.
"""

from __future__ import annotations

import json
import zlib
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .conditions import ROLES, Condition
from .record import FORMAT_VERSION, METADATA_KEY as META_KEY, SCHEMA

PERIOD_US = 100_000


def _merge(base: dict, extra: Mapping | None) -> dict:
    for key, value in (extra or {}).items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def make_meta(
    condition: Condition,
    *,
    rows: int,
    non_2xx: int = 0,
    failed: int = 0,
    wall_s: float = 30.0,
    load_s: float | None = None,
    repeat: int = 1,
    time_coverage: float = 1.0,
    throttled_share: float = 0.5,
    app_cpu_s: float | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Metadata as the runner writes it; `overrides` are merged in (nested dicts key by key)."""
    start = datetime(2025, 1, 1, tzinfo=timezone.utc)
    nr_periods = int(round(wall_s * 1e6 / PERIOD_US))
    quota_us = int(round(condition.vcpu * PERIOD_US))
    processes = [
        {
            "role": "app",
            "target_pct": None,
            "cpu_s": app_cpu_s
            if app_cpu_s is not None
            # Sidecars set above the quota leave the app none of it (never less than none).
            else wall_s * max(condition.vcpu - condition.total_sidecar_load_pct / 100, 0.0) * 0.95,
        }
    ]
    processes += [
        {
            "role": role,
            "target_pct": condition.sidecar_load_pct,
            "cpu_s": wall_s * condition.sidecar_load_pct / 100 * 0.98,
        }
        for role in condition.roles
    ]
    load_s = wall_s if load_s is None else load_s
    meta = {
        "format_version": FORMAT_VERSION,
        "repeat": repeat,
        "condition": condition.as_dict(),
        "load": {
            "duration_s": wall_s,
            "concurrency": 10,
            "warmup_s": 0,
            "url": "http://127.0.0.1:8080/work",
        },
        "window": {
            "start": start.isoformat(),
            "end": (start + timedelta(seconds=wall_s)).isoformat(),
            "wall_s": wall_s,
            "load_s": load_s,
            "time_coverage": time_coverage,
        },
        "requests": {
            "rows": rows,
            "non_2xx": non_2xx,
            "failed": failed,
            "failed_source": "hey-summary",
            "error_distribution": {"connection refused": failed} if failed else {},
            "cap_reached": False,
        },
        "cgroup": {
            "source": "cgroup-v1",
            "nr_periods": nr_periods,
            "nr_throttled": int(round(nr_periods * throttled_share)),
            "throttled_s": nr_periods * throttled_share * 0.05,
            "usage_s": wall_s * condition.vcpu * 0.97,
            "period_us": PERIOD_US,
            "quota_us": quota_us,
            "wall_s": wall_s,  # the cgroup snapshot window; the runner's brackets hey's and is slightly longer
        },
        "limits": {
            "cpu_quota_us": quota_us,
            "cpu_period_us": PERIOD_US,
            "vcpu": quota_us / PERIOD_US,
            "memory_limit_bytes": condition.memory_mb * 2**20,
            "swap_limit_bytes": 0,
        },
        "knobs": condition.knobs,
        # A 2-CPU host busy with the task's quota plus the load generator's share.
        "host": {
            "cpus": 2,
            "busy_s": wall_s * min(2.0, condition.vcpu * 0.97 + 0.3),
            "total_s": wall_s * 2,
        },
        "loadgen": {"cpu_s": wall_s * 0.3},
        "processes": processes,
        "container": {
            "exit_code": 0,
            "oom_killed": False,
            "restart_count": 0,
            "peak_memory_bytes": 150 * 2**20,
        },
        "environment": {
            "hostname": "synthetic",
            "cpu_model": "synthetic CPU",
            "cpu_count": 2,
            "kernel": "6.1.0",
            "cgroup_version": 1,
            "docker_version": "20.10.24",
            "docker_host": "unix:///var/run/docker.sock",
            "engine_id": "SYNTHETIC",
            "image_id": "sha256:synthetic",
            "image_variant": condition.variant,
            "loadgen_image_id": "sha256:loadgen",
            "hey_version": "0.1.4",
        },
    }
    return _merge(meta, overrides)


def write_run(
    path: str | Path,
    condition: Condition,
    response_time_s: Iterable[float],
    status_code: Iterable[int] | None = None,
    *,
    offset_s: Iterable[float] | None = None,
    meta_overrides: Mapping[str, Any] | None = None,
    **meta_kwargs: Any,
) -> Path:
    """One run file with the given samples; other columns are filled consistently.

    offset_s: request start times; by default spread at random over the load
    window (load_s, default wall_s) so that every response ends inside it.
    time_coverage is computed from the samples unless given.
    """
    rt = np.asarray(
        list(response_time_s) if not isinstance(response_time_s, np.ndarray) else response_time_s,
        dtype="float64",
    )
    n = len(rt)
    codes = (
        np.full(n, 200, dtype="int64")
        if status_code is None
        else np.asarray(list(status_code), dtype="int64")
    )
    if len(codes) != n:
        raise ValueError(f"status_code has {len(codes)} values for {n} response times")
    wall_s = float(meta_kwargs.get("wall_s", 30.0))
    load_s = float(meta_kwargs.get("load_s") or wall_s)
    if offset_s is not None:
        offset = np.asarray(list(offset_s), dtype="float64")
        if len(offset) != n:
            raise ValueError(f"offset_s has {len(offset)} values for {n} response times")
    else:
        offset = (
            np.random.default_rng(n).uniform(0, 1, n) * np.maximum(load_s - rt, 0)
            if n
            else np.zeros(0)
        )
    if "time_coverage" not in meta_kwargs:
        concurrency = ((meta_overrides or {}).get("load") or {}).get("concurrency", 10)
        meta_kwargs["time_coverage"] = (
            round(float(rt.sum()) / (concurrency * load_s), 6) if n else 0.0
        )
    values = condition.as_dict()
    columns = {
        "condition_id": pa.array([condition.id] * n, pa.string()),
        "app": pa.array([condition.app] * n, pa.string()),
        "vcpu": np.full(n, condition.vcpu),
        "memory_mb": np.full(n, condition.memory_mb, dtype="int64"),
        "sidecar_count": np.full(n, condition.sidecar_count, dtype="int64"),
        "sidecar_load_pct": np.full(n, condition.sidecar_load_pct),
        "total_sidecar_load_pct": np.full(n, values["total_sidecar_load_pct"]),
        "response_time_s": rt,
        "dns_dialup_s": np.zeros(n),
        "dns_s": np.zeros(n),
        "request_write_s": np.full(n, 1e-4),
        "response_delay_s": np.maximum(rt - 2e-4, 0),
        "response_read_s": np.full(n, 1e-4),
        "status_code": codes,
        "offset_s": offset,
    }
    table = pa.Table.from_pydict(columns, schema=SCHEMA)
    meta = make_meta(
        condition,
        rows=n,
        non_2xx=int(((codes < 200) | (codes > 299)).sum()),
        overrides=meta_overrides,
        **meta_kwargs,
    )
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta).encode()})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path


def model_samples(
    condition: Condition,
    *,
    duration_s: float = 30.0,
    max_rows: int | None = None,
    seed: int | None = None,
    rows: int | None = None,
) -> np.ndarray:
    """Plausible response times (s) for a condition: a lognormal body plus a
    throttled tail that waits one or two CFS periods (the article's 100 / 200 ms steps).

    rows: exactly this many samples (e.g. a published run's `successful`) instead of RPS x duration_s."""
    rng = np.random.default_rng(seed if seed is not None else zlib.crc32(condition.id.encode()))
    cost_ms = 0.6 if condition.app == "go" else 2.0
    free = max(
        condition.vcpu * 100 - condition.total_sidecar_load_pct * 0.6, 3.0
    )  # % of one core left
    rps = (
        free / 100 * 1000 / cost_ms * (2.3 if condition.app == "go" else 3.0)
    )  # ~ the article's RPS at 2 vCPU
    n = int(rps * duration_s) if rows is None else int(rows)
    if max_rows is not None:
        n = min(n, max_rows)
    body_ms = rng.lognormal(np.log(cost_ms * 10 / max(free / 25, 1)), 0.5, n)
    tail_share = 0.02 if condition.vcpu < 1 else 0.005
    tail = rng.random(n) < tail_share
    # Past ~16 % total load per 0.25 vCPU, throttled requests wait a second period.
    steps = 1 + int(condition.total_sidecar_load_pct > 16 * condition.vcpu / 0.25)
    period_ms = PERIOD_US / 1000
    waits = rng.integers(1, steps + 1, n) * period_ms - rng.uniform(0, 15, n)
    latency_ms = np.where(tail, np.maximum(waits, body_ms), body_ms)
    return np.round(latency_ms / 1000, 4)  # hey's 0.1 ms resolution


def run_path(directory: str | Path, condition_id: str, repeat: int) -> Path:
    """results/<preset>/runs/<condition id>/rep<N>.parquet"""
    return Path(directory) / condition_id / f"rep{repeat}.parquet"


def write_model_run(
    directory: str | Path,
    condition: Condition,
    *,
    duration_s: float = 30.0,
    max_rows: int | None = None,
    repeat: int = 1,
    rows: int | None = None,
    app_cpu_s: float | None = None,
) -> Path:
    """One modelled repetition; repetitions differ by seed, as real ones differ by run.

    rows: exactly this many responses (model_samples); app_cpu_s: the app's CPU (make_meta's default else)."""
    seed = zlib.crc32(f"{condition.id}/{repeat}".encode())
    rt = model_samples(condition, duration_s=duration_s, max_rows=max_rows, seed=seed, rows=rows)
    share = min(1.0, 0.3 + condition.total_sidecar_load_pct / (condition.vcpu * 100))
    return write_run(
        run_path(directory, condition.id, repeat),
        condition,
        rt,
        wall_s=duration_s,
        throttled_share=share,
        repeat=repeat,
        time_coverage=0.98,
        app_cpu_s=app_cpu_s,
    )


def article_matrix() -> list[Condition]:
    """The article preset's conditions (grid + fine steps + memory), without reading config.yaml."""
    conditions: dict[str, Condition] = {}

    def add(apps, vcpus, mems, counts, loads):
        for app in apps:
            for vcpu in vcpus:
                for mem in mems:
                    for sc in counts:
                        for load in loads:
                            c = Condition(app, vcpu, mem, sc, 0 if sc == 0 else load)
                            conditions.setdefault(c.id, c)

    add(["go", "next"], [0.25, 0.5, 1, 2], [2048], [0, 1, 2, 3], [0, 5, 15, 25, 35])
    add(["go"], [0.25], [2048], [3], range(6, 15))
    add(["next"], [0.25], [2048], [3], [1, 2, 3, 4])
    add(["next"], [0.5], [2048], [3], range(6, 15))
    add(["next"], [0.25], [2048], [1], [1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14])
    add(["go", "next"], [0.25, 0.5, 1], [256, 512, 1024, 2048, 4096], [3], [15])
    return sorted(conditions.values())


__all__ = [
    "SCHEMA",
    "ROLES",
    "make_meta",
    "write_run",
    "run_path",
    "model_samples",
    "write_model_run",
    "article_matrix",
]


def two_mode_samples(fast_ms: float, slow_ms: float, n: int = 100, slow: int = 2) -> np.ndarray:
    """n response times: n - slow at fast_ms, slow at slow_ms (so P50 = fast, P99 = slow for n = 100, slow >= 2)."""
    return np.r_[np.full(n - slow, fast_ms), np.full(slow, slow_ms)] / 1000.0


# A small hand-made matrix: (condition, fast ms, slow ms, responses in a 10 s window).
SMALL_SET = (
    (Condition("go", 0.25, 2048, 0, 0), 2.0, 100.0, 3000),
    (Condition("go", 0.25, 2048, 3, 0), 2.5, 104.0, 2900),
    (Condition("go", 0.25, 2048, 3, 5), 3.5, 108.0, 2500),
    (Condition("go", 0.25, 2048, 3, 6), 3.5, 190.0, 2400),
    (Condition("go", 0.25, 2048, 1, 5), 3.0, 105.0, 3100),
    (Condition("go", 0.25, 2048, 1, 15), 3.0, 106.0, 2700),
    (Condition("next", 0.25, 2048, 3, 0), 7.0, 290.0, 2300),
    (Condition("next", 0.25, 2048, 3, 5), 100.0, 500.0, 700),
    (Condition("go", 1, 512, 3, 15), 1.0, 80.0, 14000),
    (Condition("go", 1, 2048, 3, 15), 1.0, 80.0, 13900),
)


def write_small_set(directory: str | Path) -> list[Path]:
    """Write SMALL_SET as run files (10 s windows); returns their paths."""
    paths = []
    for condition, fast, slow, responses in SMALL_SET:
        samples = np.resize(two_mode_samples(fast, slow), responses)
        paths.append(
            write_run(
                Path(directory) / f"{condition.id}.parquet",
                condition,
                samples,
                wall_s=10.0,
                throttled_share=min(1.0, 0.4 + condition.total_sidecar_load_pct / 100),
            )
        )
    return paths


def benchmark_matrix(count: int = 228) -> list[Condition]:
    """The article preset's conditions, topped up with more fine steps to `count` (the article ran 228)."""
    conditions = {c.id: c for c in article_matrix()}
    extra = [
        Condition(app, vcpu, 2048, sc, load)
        for app in ("go", "next")
        for vcpu in (0.5, 1.0, 2.0)
        for sc in (3, 1)
        for load in range(6, 15)
    ]
    for condition in extra:
        if len(conditions) >= count:
            break
        conditions.setdefault(condition.id, condition)
    return sorted(conditions.values())[:count]

"""The run file: one Parquet file per repetition of a condition, raw samples plus run-level metadata.

Format version 3 (docs/run-file-format.md), at results/<preset>/runs/<id>/rep<N>.parquet: one row
per request hey recorded, with the condition's parameters repeated on every row so that all run
files read as one dataset (pandas, pyarrow.dataset, DuckDB); run-level values are JSON under the
file's key-value metadata key b"sidecar_bench". Version 2 added to version 1's metadata: repeat,
window.load_s (the load window, the RPS divisor), limits (read back from the task's cgroup), host
(host-wide CPU over the window), loadgen (the load generator's CPU) and requests.cap_reached.
Version 3 adds knobs (the knobs against throttling the condition sets, and what was read back of
them), and optional keys of limits and cgroup (burst, shares, weight, cpuset, nr_bursts).
Readers accept all three; a version 1 file is repetition 1.

A run record is a value: RunRecord validates rows and metadata on creation, and
write_run() replaces the file atomically, so a reader never sees half a run
and an interrupted job leaves no file.

A failure record (on_failure: record) stands at a run file's path when the run
failed because a process of the task died (docs/operations.md, "Failed runs"): a Parquet
file with the run file's schema and no rows, whose metadata is under
b"sidecar_bench_failure", never b"sidecar_bench". Readers that need samples
refuse it (read_run_meta / read_run raise FailedRunError); dataset readers over
every run file read no row of it; the summaries list it as failed
(read_failure).
"""

from __future__ import annotations

import functools
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from . import jobserver
from .signals import Interrupted

# pandas and pyarrow are imported where a run file is made or read, not with this module: a run job
# imports this module at its start and needs them only after its load (preload.py makes them then).
if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

FORMAT_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
METADATA_KEY = b"sidecar_bench"
FAILURE_KEY = b"sidecar_bench_failure"
FAILURE_VERSION = 1
# What a failure record holds (write_failure): the run it stands for, the error, and what died how.
FAILURE_KEYS = (
    "failure_version",
    "status",
    "condition",
    "repeat",
    "load",
    "error",
    "process",
    "exit_status",
    "signal",
    "oom_killed",
    "phase",
    "container_status",
    "container_exit_code",
    "host_name",
    "time",
)

# The rows' columns and Arrow types (SCHEMA: a pyarrow.Schema, made on first use).
SCHEMA_FIELDS = (
    ("condition_id", "string"),
    ("app", "string"),
    ("vcpu", "float64"),
    ("memory_mb", "int64"),
    ("sidecar_count", "int64"),
    ("sidecar_load_pct", "float64"),
    ("total_sidecar_load_pct", "float64"),
    ("response_time_s", "float64"),
    ("dns_dialup_s", "float64"),
    ("dns_s", "float64"),
    ("request_write_s", "float64"),
    ("response_delay_s", "float64"),
    ("response_read_s", "float64"),
    ("status_code", "int64"),
    ("offset_s", "float64"),
)


@functools.cache
def schema() -> pa.Schema:
    """The run file's Arrow schema (SCHEMA)."""
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, kind)()) for name, kind in SCHEMA_FIELDS])


def __getattr__(name: str) -> Any:
    # record.SCHEMA, as importers name it, made when first asked for.
    if name == "SCHEMA":
        return schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


CONDITION_COLUMNS = (
    "condition_id",
    "app",
    "vcpu",
    "memory_mb",
    "sidecar_count",
    "sidecar_load_pct",
    "total_sidecar_load_pct",
)
META_SECTIONS = (
    "format_version",
    "condition",
    "load",
    "window",
    "requests",
    "cgroup",
    "processes",
    "container",
    "environment",
)
CONDITION_KEYS = (
    "id",
    "app",
    "vcpu",
    "memory_mb",
    "sidecar_count",
    "sidecar_load_pct",
    "total_sidecar_load_pct",
)
REQUEST_KEYS = ("rows", "non_2xx", "failed", "failed_source", "error_distribution")
CGROUP_KEYS = (
    "source",
    "nr_periods",
    "nr_throttled",
    "throttled_s",
    "usage_s",
    "period_us",
    "quota_us",
)
CONTAINER_KEYS = ("exit_code", "oom_killed", "restart_count", "peak_memory_bytes")
ENVIRONMENT_KEYS = (
    "hostname",
    "cpu_model",
    "cpu_count",
    "kernel",
    "cgroup_version",
    "docker_version",
    "docker_host",
    "engine_id",
    "image_id",
    "image_variant",
    "loadgen_image_id",
    "hey_version",
)
# What version 2 adds, as (section, key); section "" is the top level.
V2_KEYS = (
    ("", "repeat"),
    ("window", "load_s"),
    ("", "limits"),
    ("", "host"),
    ("", "loadgen"),
    ("requests", "cap_reached"),
)
# What version 3 adds: the knobs against throttling the condition set and what was read back of them
# (docs/run-file-format.md); limits and cgroup gain optional keys (burst, shares, weight, cpuset, nr_bursts).
V3_KEYS = (("", "knobs"),)
LIMITS_KEYS = ("cpu_quota_us", "cpu_period_us", "vcpu", "memory_limit_bytes", "swap_limit_bytes")
HOST_KEYS = ("cpus", "busy_s", "total_s")
LOADGEN_KEYS = ("cpu_s",)


class RunFileError(ValueError):
    """A run record or run file that does not follow format version 1, 2 or 3."""


class FailedRunError(RunFileError):
    """The file is a failure record (the run failed and on_failure was record), not a measured run."""


@dataclass(frozen=True)
class RunRecord:
    """One condition's run: its request rows (SCHEMA) and its metadata (JSON-able dict)."""

    rows: pa.Table
    meta: Mapping[str, Any]

    def __post_init__(self) -> None:
        if not self.rows.schema.equals(schema()):
            raise RunFileError(
                f"rows do not have the run file schema:\n{self.rows.schema}\nexpected:\n{schema()}"
            )
        validate_meta(self.meta)
        if self.meta["requests"]["rows"] != self.rows.num_rows:
            raise RunFileError(
                f"meta requests.rows is {self.meta['requests']['rows']}, the table has {self.rows.num_rows} rows"
            )
        condition_id = self.meta["condition"]["id"]
        ids = set(self.rows.column("condition_id").unique().to_pylist())
        if ids - {condition_id}:
            raise RunFileError(
                f"rows carry condition ids {sorted(ids)}, meta says {condition_id!r}"
            )

    @classmethod
    def from_samples(cls, samples: pd.DataFrame, meta: Mapping[str, Any]) -> "RunRecord":
        """hey samples (hey.SAMPLE_COLUMNS) + meta -> record, with the condition columns added from meta."""
        condition = meta["condition"]
        frame = samples.copy()
        frame.insert(0, "condition_id", condition["id"])
        for column in CONDITION_COLUMNS[1:]:
            frame.insert(CONDITION_COLUMNS.index(column), column, condition[column])
        return cls(to_table(frame), meta)


def to_table(frame: pd.DataFrame) -> pa.Table:
    """A data frame with exactly the run file's columns -> Arrow table with the exact schema."""
    import pyarrow as pa

    names = schema().names
    missing = [name for name in names if name not in frame.columns]
    extra = [name for name in frame.columns if name not in names]
    if missing or extra:
        raise RunFileError(f"run rows: missing columns {missing}, unexpected columns {extra}")
    try:
        return pa.Table.from_pandas(
            frame[names], schema=schema(), preserve_index=False
        ).replace_schema_metadata(None)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise RunFileError(f"run rows do not convert to the run file schema: {err}") from err


def validate_meta(meta: Mapping[str, Any]) -> None:
    """Raise RunFileError naming the first thing that is not format version 1, 2 or 3 (as the file says)."""
    missing = [key for key in META_SECTIONS if key not in meta]
    if missing:
        raise RunFileError(f"run metadata lacks {', '.join(missing)}")
    version = meta["format_version"]
    if isinstance(version, bool) or version not in READABLE_VERSIONS:
        raise RunFileError(
            f"run metadata format_version is {version!r}, this code reads "
            f"{' and '.join(map(str, READABLE_VERSIONS))}"
        )
    if version >= 2:
        _validate_v2(meta)
    if version >= 3:
        lacking = [key for section, key in V3_KEYS if key not in meta]
        if lacking or not isinstance(meta.get("knobs"), dict):
            raise RunFileError("run metadata (format_version 3) lacks knobs (a mapping)")
    for section, keys in (
        ("condition", CONDITION_KEYS),
        ("requests", REQUEST_KEYS),
        ("cgroup", CGROUP_KEYS),
        ("container", CONTAINER_KEYS),
        ("environment", ENVIRONMENT_KEYS),
    ):
        if not isinstance(meta[section], dict):
            raise RunFileError(f"run metadata {section} is {meta[section]!r}, not a mapping")
        lacking = [key for key in keys if key not in meta[section]]
        if lacking:
            raise RunFileError(f"run metadata {section} lacks {', '.join(lacking)}")
    for key in ("start", "end", "wall_s"):
        if key not in meta["window"]:
            raise RunFileError(f"run metadata window lacks {key}")
    if not isinstance(meta["processes"], list) or not all(
        {"role", "target_pct", "cpu_s"} <= set(proc) for proc in meta["processes"]
    ):
        raise RunFileError("run metadata processes must be a list of {role, target_pct, cpu_s}")
    try:
        json.dumps(meta, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise RunFileError(f"run metadata is not plain JSON: {err}") from err


def _validate_v2(meta: Mapping[str, Any]) -> None:
    lacking = [
        f"{section}.{key}" if section else key
        for section, key in V2_KEYS
        if key not in (meta[section] if section else meta)
    ]
    if lacking:
        raise RunFileError(f"run metadata (format_version 2) lacks {', '.join(lacking)}")
    repeat = meta["repeat"]
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise RunFileError(f"run metadata repeat is {repeat!r}, not a whole number >= 1")
    load_s = meta["window"]["load_s"]
    if isinstance(load_s, bool) or not isinstance(load_s, (int, float)) or not load_s > 0:
        raise RunFileError(f"run metadata window.load_s is {load_s!r}, not a number of seconds > 0")
    if not isinstance(meta["requests"]["cap_reached"], bool):
        raise RunFileError(
            f"run metadata requests.cap_reached is {meta['requests']['cap_reached']!r}, not true/false"
        )
    for section, keys in (("limits", LIMITS_KEYS), ("host", HOST_KEYS), ("loadgen", LOADGEN_KEYS)):
        value = meta[section]
        # host / loadgen may be null when the engine hid the counters; limits never is.
        if value is None and section != "limits":
            continue
        if not isinstance(value, Mapping):
            raise RunFileError(
                f"run metadata {section} is {value!r}, not an object with {', '.join(keys)}"
            )
        lacking = [key for key in keys if key not in value]
        if lacking:
            raise RunFileError(f"run metadata {section} lacks {', '.join(lacking)}")


def write_run(path: str | os.PathLike, rows_df: pd.DataFrame, meta: Mapping[str, Any]) -> Path:
    """Write one run file atomically: temp file in the same directory, fsync, os.replace.

    rows_df: either hey samples (hey.SAMPLE_COLUMNS; condition columns are added
    from meta) or complete rows with all SCHEMA columns.
    """
    if set(CONDITION_COLUMNS) <= set(rows_df.columns):
        record = RunRecord(to_table(rows_df), meta)
    else:
        record = RunRecord.from_samples(rows_df, meta)
    return write_record(path, record)


def write_record(path: str | os.PathLike, record: RunRecord) -> Path:
    table = record.rows.replace_schema_metadata(
        {METADATA_KEY: json.dumps(record.meta, sort_keys=True).encode()}
    )
    return _write_atomically(path, table)


def _write_atomically(path: str | os.PathLike, table: Any) -> Path:
    """Write a Parquet table to a temporary name beside path, fsync, rename: never a partial file."""
    import pyarrow.parquet as pq

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            pq.write_table(table, handle)
            handle.flush()
            os.fsync(handle.fileno())
        if jobserver.orphaned():
            # A run forked for a job that was killed meanwhile: Snakemake has given its outputs up.
            raise Interrupted("the run's job was killed before its file was in place")
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)
    return path


def failure_record(
    condition: Mapping[str, Any],
    repeat: int,
    load: Mapping[str, Any],
    error: str,
    failure: Mapping[str, Any],
    host_name: str | None,
    time: str,
) -> dict[str, Any]:
    """A failure record's metadata: the condition (Condition.as_dict()), repetition and load settings, the
    error text, and from failure (runner.AppStopped.failure) the process (role, pid), its exit status and
    signal, OOM-killed, the phase (start / window) and the container's status and exit code."""
    return {
        "failure_version": FAILURE_VERSION,
        "status": "failed",
        "condition": dict(condition),
        "repeat": repeat,
        "load": dict(load),
        "error": error,
        "process": {"role": failure.get("role"), "pid": failure.get("pid")},
        "exit_status": failure.get("exit_status"),
        "signal": failure.get("signal"),
        "oom_killed": bool(failure.get("oom_killed")),
        "phase": failure.get("phase"),
        "container_status": failure.get("container_status"),
        "container_exit_code": failure.get("container_exit_code"),
        "host_name": host_name,
        "time": time,
    }


def validate_failure(failure: Mapping[str, Any]) -> None:
    lacking = [key for key in FAILURE_KEYS if key not in failure]
    if lacking:
        raise RunFileError(f"failure record lacks {', '.join(lacking)}")
    if failure["status"] != "failed" or failure["failure_version"] != FAILURE_VERSION:
        raise RunFileError(
            f"failure record has status {failure['status']!r}, version {failure['failure_version']!r}"
        )
    lacking = [key for key in CONDITION_KEYS if key not in failure["condition"]]
    if lacking:
        raise RunFileError(f"failure record condition lacks {', '.join(lacking)}")
    repeat = failure["repeat"]
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise RunFileError(f"failure record repeat is {repeat!r}, not a whole number >= 1")
    try:
        json.dumps(failure, allow_nan=False)
    except (TypeError, ValueError) as err:
        raise RunFileError(f"failure record is not plain JSON: {err}") from err


def write_failure(path: str | os.PathLike, failure: Mapping[str, Any]) -> Path:
    """Write a failure record (failure_record()) at a run file's path, atomically like a run file."""
    validate_failure(failure)
    table = (
        schema()
        .empty_table()
        .replace_schema_metadata({FAILURE_KEY: json.dumps(failure, sort_keys=True).encode()})
    )
    return _write_atomically(path, table)


def read_failure(path: str | os.PathLike) -> dict[str, Any] | None:
    """The failure record's metadata if path is one, None if it is a run file (or anything else)."""
    import pyarrow.parquet as pq

    return failure_in(pq.read_schema(path).metadata or {})


def failure_in(metadata: Mapping[bytes, bytes]) -> dict[str, Any] | None:
    """read_failure on a file's schema metadata already read (analysis reads a file's footer once)."""
    if FAILURE_KEY not in metadata:
        return None
    failure = json.loads(metadata[FAILURE_KEY])
    validate_failure(failure)
    return failure


def failure_text(failure: Mapping[str, Any]) -> str:
    """One line: "go_cpu1_... rep 2 failed: app (pid 7) killed by SIGKILL, OOM-killed False"."""
    process = failure.get("process") or {}
    role = process.get("role")
    if role is None:
        who = (
            "another process of the task"
            if failure.get("container_status") == "running"
            else f"the task (exit code {failure.get('container_exit_code')})"
        )
    else:
        who = f"{'app' if role == 'app' else 'sidecar ' + role} (pid {process.get('pid')})"
        if failure.get("signal"):
            who += f" killed by {failure['signal']}"
        elif failure.get("exit_status") is not None:
            who += f" exited with status {failure['exit_status']}"
        else:
            who += " gone"
    where = (
        " inside the measured window"
        if failure.get("phase") == "window"
        else " before the measured window"
    )
    return (
        f"{failure['condition']['id']} rep {failure['repeat']} failed{where}: {who}, "
        f"OOM-killed {bool(failure.get('oom_killed'))}"
    )


def read_run_meta(path: str | os.PathLike) -> dict[str, Any]:
    """A run file's metadata (the b"sidecar_bench" JSON), without reading the rows.

    Raises FailedRunError for a failure record: it holds no measurement."""
    import pyarrow.parquet as pq

    return run_meta_in(path, pq.read_schema(path).metadata or {})


def run_meta_in(path: str | os.PathLike, metadata: Mapping[bytes, bytes]) -> dict[str, Any]:
    """read_run_meta on the schema metadata of the file at path, already read."""
    if FAILURE_KEY in metadata:
        failure = json.loads(metadata[FAILURE_KEY])
        what = (
            failure_text(failure) if isinstance(failure, dict) and "condition" in failure else "?"
        )
        raise FailedRunError(
            f"{path}: a failure record, not a measured run ({what}); delete it (or rerun with "
            "--forcerun) to measure the run again"
        )
    if METADATA_KEY not in metadata:
        raise RunFileError(
            f"{path}: no {METADATA_KEY.decode()} metadata: not a sidecar-bench run file"
        )
    meta = json.loads(metadata[METADATA_KEY])
    validate_meta(meta)
    return meta


def read_run(path: str | os.PathLike) -> tuple[pd.DataFrame, dict[str, Any]]:
    """A run file -> (rows as a data frame, metadata)."""
    import pyarrow.parquet as pq

    meta = read_run_meta(path)
    table = pq.read_table(path)
    return table.replace_schema_metadata(None).to_pandas(), meta


def _fsync_dir(directory: Path) -> None:
    # The rename itself is durable only once the directory entry is on disk.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

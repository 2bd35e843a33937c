"""Reading run files (results/<preset>/runs/<id>/rep<N>.parquet, format_version 3; 1 and 2 read too) for analysis.

The runner's record.py owns the format; analysis only needs two things from a
run file: its JSON metadata and a few per-request columns. Reading through
here keeps every statistic on the raw samples while touching only the columns
a statistic needs (a run holds up to a million rows).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import record
from .record import RunFileError

# For callers: a failure record read here raises it.
from .record import FailedRunError as FailedRunError


class RunFile:
    """One run file, its footer read once: its metadata, its failure record and its columns come from that one
    read (the analysis reads every run; opening each file once per question was a fifth of the summary's time).

        with RunFile(path) as run:
            failure = run.failure()
            ...
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: pq.ParquetFile | None = None
        self._error: Exception | None = None
        self._metadata: dict[bytes, bytes] = {}
        try:
            self._file = pq.ParquetFile(self.path)
            self._metadata = self._file.schema_arrow.metadata or {}
        except (OSError, pa.ArrowInvalid) as err:
            self.close()
            self._error = err

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "RunFile":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def meta(self) -> dict[str, Any]:
        """The run's metadata (the JSON object under the Parquet key b"sidecar_bench"), validated by
        record.run_meta_in (format_version included); errors name the file."""
        if self._error is not None:
            raise RunFileError(
                f"{self.path}: not a readable Parquet run file ({self._error}); rerun its condition"
            ) from None
        try:
            return record.run_meta_in(self.path, self._metadata)
        except RunFileError as err:
            text = str(err)
            # The same class: a failure record stays a FailedRunError.
            raise type(err)(
                text if text.startswith(str(self.path)) else f"{self.path}: {text}"
            ) from None

    def columns(self, names: Sequence[str]) -> dict[str, np.ndarray]:
        """Only the named per-request columns, as numpy arrays (nulls would be a runner bug)."""
        if self._file is None:
            raise RunFileError(
                f"{self.path}: cannot read columns {list(names)} ({self._error})"
            ) from None
        # ParquetFile.read leaves out a name the file does not have, without a word: asked here first.
        missing = [name for name in names if name not in self._file.schema_arrow.names]
        if missing:
            raise RunFileError(
                f"{self.path}: cannot read columns {list(names)} (no column {', '.join(missing)})"
            )
        try:
            table = self._file.read(columns=list(names), use_threads=False)
        except (OSError, ValueError, KeyError) as err:
            raise RunFileError(f"{self.path}: cannot read columns {list(names)} ({err})") from None
        return {name: table.column(name).to_numpy() for name in names}

    def failure(self) -> dict[str, Any] | None:
        """The failure record's metadata when the file is one (on_failure: record), else None.

        An unreadable file is None here: meta() then says what is wrong with it."""
        if self._error is not None:
            return None
        try:
            return record.failure_in(self._metadata)
        except RunFileError as err:
            raise RunFileError(f"{self.path}: {err}") from None


def read_meta(path: str | Path) -> dict[str, Any]:
    """RunFile.meta of the file at path."""
    with RunFile(path) as run:
        return run.meta()


def read_columns(path: str | Path, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """RunFile.columns of the file at path."""
    with RunFile(path) as run:
        return run.columns(columns)


def read_failure(path: str | Path) -> dict[str, Any] | None:
    """RunFile.failure of the file at path."""
    with RunFile(path) as run:
        return run.failure()

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
from .record import RunFileError, read_run_meta

# For callers: a failure record read here raises it.
from .record import FailedRunError as FailedRunError


def read_meta(path: str | Path) -> dict[str, Any]:
    """The run's metadata (the JSON object under the Parquet key b"sidecar_bench"), validated by
    record.read_run_meta (format_version included); errors name the file."""
    path = Path(path)
    try:
        meta = read_run_meta(path)
    except (OSError, pa.ArrowInvalid) as err:
        raise RunFileError(
            f"{path}: not a readable Parquet run file ({err}); rerun its condition"
        ) from None
    except RunFileError as err:
        text = str(err)
        # The same class: a failure record stays a FailedRunError.
        raise type(err)(text if text.startswith(str(path)) else f"{path}: {text}") from None
    return meta


def read_columns(path: str | Path, columns: Sequence[str]) -> dict[str, np.ndarray]:
    """Only the named per-request columns, as numpy arrays (nulls would be a runner bug)."""
    path = Path(path)
    try:
        table = pq.read_table(path, columns=list(columns))
    except (OSError, ValueError, KeyError) as err:
        raise RunFileError(f"{path}: cannot read columns {list(columns)} ({err})") from None
    return {name: table.column(name).to_numpy() for name in columns}


def read_failure(path: str | Path) -> dict[str, Any] | None:
    """The failure record's metadata when path is one (on_failure: record), else None.

    An unreadable file is None here: read_meta then says what is wrong with it."""
    path = Path(path)
    try:
        return record.read_failure(path)
    except (OSError, pa.ArrowInvalid):
        return None
    except RunFileError as err:
        raise RunFileError(f"{path}: {err}") from None

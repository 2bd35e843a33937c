"""loadmodel: which rows of a summary are closed-loop cells (the article's tables, charts and model read
only those; open-loop cells go to openloop_report). Apart from openloop_report so that the closed-loop
analysis does not depend on the comparison's code."""

from __future__ import annotations

import pandas as pd


def is_open(frame: pd.DataFrame) -> pd.Series:
    """Rows of open-loop conditions (none in a summary written before the load model axis)."""
    if "load_model" not in frame.columns:
        return pd.Series(False, index=frame.index)
    # An empty cell (a closed cell's) is not "open"; no fill value, so a column of floats stays one.
    return frame["load_model"].eq("open")


def closed_loop(frame: pd.DataFrame) -> pd.DataFrame:
    """The closed-loop rows of a summary (all of one written before the load model axis)."""
    return frame[~is_open(frame)]

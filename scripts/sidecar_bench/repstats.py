"""Statistics of repetitions: a condition's value and 95 % interval from its runs' values.

A condition is measured in R repetitions (runs); each run yields one value of
every statistic (RPS, P99, a tail share, a cost per request). The runs are the
independent units: a new container, a new placement on the host's CPUs, a new
warm-up. Requests inside one run are not independent (a throttled period
delays a burst of them together), so pooling requests across runs and
resampling them understates how much a new run can differ.

- Value of a condition = the mean of its runs' values.
- Interval (R >= 2) = Student's t interval of that mean:
  mean +- t(1 - a/2, R - 1) x s / sqrt(R), s the runs' sample standard
  deviation. It carries the run-to-run variation with the small-sample penalty
  (t with 1 degree of freedom is 12.7 at 95 %, with 2 it is 4.3), and its
  coverage is checked by simulation with a known truth
  (tests/test_repstats.py).
- Ratio of two conditions (retention, memory gain, Go vs Next.js) = the ratio
  of their runs' geometric means; interval = Welch's t interval of the
  difference of the runs' mean log values, exponentiated: both sides'
  run-to-run variation counts, a ratio interval never crosses zero, and it
  always holds its own value. (The geometric and the arithmetic mean of runs
  that differ by a CV of 15 % differ by about 1 %.) Against a published number without
  uncertainty (the article's), the same with the denominator taken as exact.
- Ratio of two ratios (Next.js's retention over Go's: four conditions) = the
  same over the signed sum of the four conditions' mean log values, Welch's
  degrees of freedom over all four.
- With one repetition there is no run-to-run variation to measure: these
  functions return no interval (method "single"), and callers fall back to the
  within-run interval of intervals.py, labelled as within-run only.
- Run-to-run CV = s / mean (R >= 2), shown per condition so a reader sees how
  much runs differ.

scipy supplies the t quantiles (scipy.special.stdtrit, the function scipy.stats.t
takes them from: the tests check t_interval against scipy.stats.t.interval bit for
bit, and the ratio's interval against scipy.stats.ttest_ind's Welch test, whose
Welch-Satterthwaite degrees of freedom ratio_interval writes out).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
from scipy import special

CONFIDENCE = 0.95
# Methods an Estimate can come from.
T_MEAN = "t"  # t interval over the runs' values
WELCH_LOG = "welch-log"  # Welch t interval of a log ratio
ONE_SAMPLE_LOG = "t-log"  # t interval of a log ratio against an exact denominator
SINGLE = "single"  # one repetition: no run-to-run interval
NONE = "none"  # nothing to estimate from (no finite value)


@dataclass(frozen=True)
class Estimate:
    """A value with its 95 % interval; lo and hi are NaN when the method gives none."""

    value: float
    lo: float
    hi: float
    n: int  # repetitions behind the value (numerator's, for a ratio)
    method: str

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    def contains(self, x: float) -> bool:
        return self.has_interval and self.lo <= x <= self.hi


@functools.lru_cache(maxsize=4096)
def as_float(value: Any) -> float:
    """A cell's value as a float; NaN when it is missing (None) or not a number."""
    try:
        return math.nan if value is None else float(value)
    except (TypeError, ValueError):
        return math.nan


def _t_ends(confidence: float, df: float) -> tuple[float, float]:
    """The ends of scipy.stats.t's central interval at loc 0 and scale 1: its quantiles at
    (1 - confidence) / 2 and (1 + confidence) / 2, which `t.interval` takes from `t._ppf`, that is
    scipy.special.stdtrit, bit for bit (also NaN for a degree of freedom <= 0). Called directly:
    `t.interval` checks and broadcasts its arguments for 0.13 ms a call, stdtrit takes 3 µs, and
    Welch's degrees of freedom are rarely the same twice, so the cache seldom spares the call."""
    return float(special.stdtrit(df, (1.0 - confidence) / 2)), float(
        special.stdtrit(df, (1.0 + confidence) / 2)
    )


def t_interval(confidence: float, df: float, loc: float, scale: float) -> tuple[float, float]:
    """scipy.stats.t.interval(confidence, df, loc=loc, scale=scale), bit for bit: scipy computes
    each end as the standard end x scale + loc, as here."""
    lo, hi = _t_ends(confidence, df)
    return lo * scale + loc, hi * scale + loc


def _finite(values: Iterable[float]) -> np.ndarray:
    array = np.asarray(
        list(values) if not isinstance(values, np.ndarray) else values, dtype="float64"
    )
    finite = np.isfinite(array)
    return array if finite.all() else array[finite]


def mean_of(x: np.ndarray) -> float:
    """x.mean() of a non-empty float array, bit for bit (numpy divides the same sum by the count), without
    numpy's per-call overhead: a coverage simulation asks for hundreds of thousands of means of 2-5 values."""
    return float(x.sum()) / len(x)


def var_of(x: np.ndarray, ddof: int = 1) -> float:
    """x.var(ddof=ddof) of a float array longer than ddof, bit for bit (numpy's own steps: the sum over
    the count, the squared deviations summed, over count - ddof), without numpy's per-call overhead,
    for the same reason as mean_of."""
    deviation = x - float(x.sum()) / len(x)
    return float((deviation * deviation).sum()) / (len(x) - ddof)


def std_of(x: np.ndarray, ddof: int = 1) -> float:
    """x.std(ddof=ddof), bit for bit: the square root of var_of."""
    return math.sqrt(var_of(x, ddof))


def run_cv(values: Iterable[float]) -> float:
    """Run-to-run coefficient of variation: sample standard deviation / mean (NaN below 2 runs)."""
    x = _finite(values)
    if len(x) < 2:
        return math.nan
    mean = mean_of(x)
    if mean == 0:
        return math.nan
    return std_of(x) / abs(mean)


def mean_interval(values: Iterable[float], confidence: float = CONFIDENCE) -> Estimate:
    """The mean of the runs' values and its t interval (NaN interval with fewer than 2 runs)."""
    x = _finite(values)
    if len(x) == 0:
        return Estimate(math.nan, math.nan, math.nan, 0, NONE)
    mean = mean_of(x)
    if len(x) < 2:
        return Estimate(mean, math.nan, math.nan, 1, SINGLE)
    se = std_of(x) / math.sqrt(len(x))
    if se == 0:
        return Estimate(mean, mean, mean, len(x), T_MEAN)
    lo, hi = t_interval(confidence, len(x) - 1, mean, se)
    return Estimate(mean, float(lo), float(hi), len(x), T_MEAN)


def clipped(estimate: Estimate, low: float = 0.0, high: float = math.inf) -> Estimate:
    """The estimate with its interval's ends held to [low, high]: a rate, a latency or a CPU cost is never
    below 0 and a share never above 1, yet the t interval of a few scattered runs can reach past them
    (a P50 of [-23–421] ms). Clipping an end only narrows what cannot be, so coverage cannot fall."""
    if not estimate.has_interval:
        return estimate
    return dataclasses.replace(
        estimate,
        lo=min(max(estimate.lo, low), high),
        hi=min(max(estimate.hi, low), high),
    )


def _logs(values: Iterable[float]) -> np.ndarray | None:
    x = _finite(values)
    if len(x) == 0 or (x <= 0).any():
        return None  # a ratio of values that can be zero or negative has no log interval
    return np.log(x)


def ratio_interval(
    numerator: Iterable[float], denominator: Iterable[float], confidence: float = CONFIDENCE
) -> Estimate:
    """Ratio of two conditions' geometric means, with Welch's t interval of their runs' log values.

    Both sides need 2 or more runs for an interval; otherwise the ratio comes without one
    (method "single"). Values <= 0 give a NaN ratio interval (method "none")."""
    num, den = _finite(numerator), _finite(denominator)
    if len(num) == 0 or len(den) == 0 or den.mean() == 0:
        return Estimate(math.nan, math.nan, math.nan, len(num), NONE)
    log_num, log_den = _logs(num), _logs(den)
    if log_num is None or log_den is None:
        return Estimate(float(num.mean() / den.mean()), math.nan, math.nan, len(num), NONE)
    diff = mean_of(log_num) - mean_of(log_den)
    value = math.exp(diff)
    if len(num) < 2 or len(den) < 2:
        return Estimate(value, math.nan, math.nan, len(num), SINGLE)
    v_num, v_den = var_of(log_num) / len(num), var_of(log_den) / len(den)
    se = math.sqrt(v_num + v_den)
    if se == 0:
        return Estimate(value, value, value, len(num), WELCH_LOG)
    # Welch-Satterthwaite degrees of freedom (what scipy.stats.ttest_ind(equal_var=False) uses).
    df = (v_num + v_den) ** 2 / (v_num**2 / (len(num) - 1) + v_den**2 / (len(den) - 1))
    lo, hi = t_interval(confidence, df, diff, se)
    return Estimate(value, math.exp(lo), math.exp(hi), len(num), WELCH_LOG)


def contrast_interval(
    terms: Sequence[tuple[Iterable[float], int]], confidence: float = CONFIDENCE
) -> Estimate:
    """The product of several conditions' geometric means, each to the power +1 or -1, with Welch's t
    interval of the signed sum of their runs' mean log values: a ratio of two ratios, such as Next.js's
    retention over Go's, (next_L / next_0) / (go_L / go_0).

    Its variance is the sum of each condition's s^2 / n (log values), its degrees of freedom the
    Welch-Satterthwaite ones over all the conditions; with two terms, +1 and -1, it is ratio_interval.
    Every condition needs 2 or more runs for an interval (else method "single"); values <= 0 give no
    log interval (method "none"). n is the first term's run count."""
    groups = [(_finite(values), int(sign)) for values, sign in terms]
    if any(sign not in (1, -1) for _, sign in groups):
        raise ValueError("contrast_interval: every term's sign is +1 or -1")
    n_first = len(groups[0][0]) if groups else 0
    if not groups or any(len(x) == 0 for x, _ in groups):
        return Estimate(math.nan, math.nan, math.nan, n_first, NONE)
    logs = [(_logs(x), sign) for x, sign in groups]
    if any(log is None for log, _ in logs):
        return Estimate(math.nan, math.nan, math.nan, n_first, NONE)
    diff = sum(sign * mean_of(log) for log, sign in logs)
    value = math.exp(diff)
    if any(len(log) < 2 for log, _ in logs):
        return Estimate(value, math.nan, math.nan, n_first, SINGLE)
    parts = [var_of(log) / len(log) for log, _ in logs]
    variance = sum(parts)
    if variance == 0:
        return Estimate(value, value, value, n_first, WELCH_LOG)
    df = variance**2 / sum(part**2 / (len(log) - 1) for part, (log, _) in zip(parts, logs))
    lo, hi = t_interval(confidence, df, diff, math.sqrt(variance))
    return Estimate(value, math.exp(lo), math.exp(hi), n_first, WELCH_LOG)


def ratio_to_exact(
    numerator: Iterable[float], denominator: float, confidence: float = CONFIDENCE
) -> Estimate:
    """Ratio of a condition's geometric mean to a number without uncertainty (a published value):
    the t interval of the runs' log values, less log(denominator), exponentiated."""
    num = _finite(numerator)
    if len(num) == 0 or not math.isfinite(denominator) or denominator <= 0:
        return Estimate(math.nan, math.nan, math.nan, len(num), NONE)
    logs = _logs(num)
    if logs is None:
        return Estimate(float(num.mean() / denominator), math.nan, math.nan, len(num), NONE)
    value = math.exp(mean_of(logs)) / denominator
    if len(num) < 2:
        return Estimate(value, math.nan, math.nan, 1, SINGLE)
    se = std_of(logs) / math.sqrt(len(logs))
    if se == 0:
        return Estimate(value, value, value, len(num), ONE_SAMPLE_LOG)
    lo, hi = t_interval(confidence, len(logs) - 1, mean_of(logs), se)
    return Estimate(
        value, math.exp(lo) / denominator, math.exp(hi) / denominator, len(num), ONE_SAMPLE_LOG
    )

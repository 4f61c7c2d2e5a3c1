"""How sure a comparison over seeds is: a mean's 95% interval, Holm's correction for a family of tests, and how
many seeds a difference needs to be told apart.

A configuration's mean over seeds gets Student's t interval below BOOTSTRAP_FROM seeds and a BCa bootstrap
interval (scipy.stats.bootstrap) from there on. The bootstrap of a mean of 3-5 values has only 10-126 distinct
resamples and its percentile interval is about mean ± 1.96 s/sqrt(n) x sqrt((n-1)/n): at 3 seeds it covers
a normal mean about 80% of the time, not 95%. The t interval is exact for normally distributed seed-to-seed
noise and is what the rest of fedbench's tests assume (Welch in `compare` and the reproduction verdicts); with
ten seeds or more the bootstrap no longer needs that assumption.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

CONFIDENCE = 0.95
BOOTSTRAP_FROM = 10
"""Seeds from which a mean's interval is a bootstrap's rather than Student's t."""
BOOTSTRAP_RESAMPLES = 9999
BOOTSTRAP_SEED = 0
"""The bootstrap's random state is fixed: the same runs give the same table."""
POWER = 0.8
"""The chance of telling two configurations apart that `seeds_needed` plans for (Cohen 1988's convention)."""


@dataclass(frozen=True)
class Interval:
    """A 95% interval for a mean and how it was made (`t`, `bootstrap BCa`, or `none` for one seed)."""

    low: float
    high: float
    kind: str


def natural_bounds(metric: str) -> tuple[float, float]:
    """The values `metric` can take: [0, 1] for an accuracy or a share (`final.acc_test_time`, `unrecovered_share`),
    unbounded otherwise (a loss, seconds, bytes, rounds)."""
    name = metric.rsplit(".", 1)[-1]
    return (0.0, 1.0) if name.startswith("acc") or name.endswith("_share") else (-math.inf, math.inf)


def mean_interval(
    values: Sequence[float], confidence: float = CONFIDENCE, bounds: tuple[float, float] = (-math.inf, math.inf)
) -> Interval:
    """The `confidence` interval of the mean of `values` (one per seed); NaN bounds for fewer than two.

    Args:
        bounds: the values the metric can take (`natural_bounds`): a t interval of accuracies near 1 would reach past
            1, and is cut there.
    """
    data = np.asarray([v for v in values if not math.isnan(v)], dtype=float)
    n = len(data)
    if n < 2:
        return Interval(math.nan, math.nan, "none")
    mean = float(data.mean())
    kind = "t" if n < BOOTSTRAP_FROM else "bootstrap BCa"
    if np.ptp(data) == 0:  # every seed gave the same value: nothing varies, and BCa cannot be computed
        return Interval(mean, mean, kind)
    if n < BOOTSTRAP_FROM:
        low, high = stats.t.interval(confidence, n - 1, loc=mean, scale=stats.sem(data))
    else:
        result = stats.bootstrap(
            (data,),
            np.mean,
            confidence_level=confidence,
            n_resamples=BOOTSTRAP_RESAMPLES,
            method="BCa",
            rng=np.random.default_rng(BOOTSTRAP_SEED),
        )
        low, high = result.confidence_interval
    return Interval(max(float(low), bounds[0]), min(float(high), bounds[1]), kind)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values, in the order given: the i-th smallest p times (m - i + 1), made
    non-decreasing and capped at 1. Rejecting where the adjusted p is below alpha keeps the chance of any false
    rejection among the m tests below alpha, whatever their dependence."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for position, index in enumerate(order):
        running = max(running, min(1.0, (m - position) * p_values[index]))
        adjusted[index] = running
    return adjusted


def seeds_needed(
    difference: float, spread: float, alpha: float = 0.05, power: float = POWER, most: int = 10_000
) -> int | None:
    """Seeds per configuration for a two-sided two-sample t-test at `alpha` to find a true difference of means
    `difference` with probability `power`, when each configuration's seeds have standard deviation `spread`
    (the power of the t-test from the noncentral t distribution, as G*Power computes it). None: more than `most`;
    2 where there is no spread to overcome.
    """
    if spread < 0 or not math.isfinite(spread):
        raise ValueError(f"spread must be a finite non-negative number, not {spread}")
    if difference == 0:
        return None
    if spread == 0:
        return 2
    effect = abs(difference) / spread

    def enough(n: int) -> bool:
        df = 2 * n - 2
        critical = stats.t.ppf(1 - alpha / 2, df)
        shift = effect * math.sqrt(n / 2)
        return float(stats.nct.sf(critical, df, shift) + stats.nct.cdf(-critical, df, shift)) >= power

    low, high = 2, 2
    while not enough(high):  # power grows with n: double, then bisect
        if high >= most:
            return None
        low, high = high, min(2 * high, most)
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle + 1, high)
    return high

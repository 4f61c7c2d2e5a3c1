"""Whether a cell reproduces its published number: a rule about means, not about single draws.

Both numbers are means over seeds, so what can be tested is the difference of two means. Its 95% interval is
Welch's: d ± t(0.975, df) x se, with se² = s_ours² / n_ours + s_paper² / n_paper and df by Welch-Satterthwaite
(Welch 1947; it does not assume the two spreads are equal, and ours and the paper's often are not). Then:

- `beyond`: the interval lies wholly outside ± the tolerance: a difference larger than the tolerance, at 95%.
- `not testable`: not beyond, but the interval is wider than ± the resolution: these seeds could not tell a
  reproduction from a method `resolution` away, so calling it "within" would claim what was not tested.
- `within`: the interval reaches the tolerance band and is no wider than ± the resolution.

The tolerance stands in for rounding and the published numbers' own precision; the resolution is the largest
difference a report may call "not found" (default 10 points of a percentage: a smaller interval than that is what
3-5 seeds of a stable cell give). With one seed of ours there is no spread of ours: it is taken to be the paper's
where the paper prints one (stated in the legend); where neither side has a spread the cell is not testable.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

WITHIN, BEYOND, NOT_TESTABLE = "within", "beyond", "not testable"
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Verdict:
    """One cell's comparison: the verdict, the difference of means and the half-width of its 95% interval."""

    kind: str
    diff: float
    half_width: float
    """inf where no spread is known (one seed of ours, no published std)."""
    assumed_spread: bool = False
    """True where ours has one seed and its spread is taken to be the paper's."""

    @property
    def interval(self) -> tuple[float, float]:
        return self.diff - self.half_width, self.diff + self.half_width


def compare(
    ours: Sequence[float],
    published: float,
    published_std: float | None,
    published_seeds: int | None,
    tolerance: float,
    resolution: float,
) -> Verdict:
    """The verdict on ours (one value per seed) against a published mean over `published_seeds` seeds with sample
    std `published_std` (None where the paper prints none), all on the paper's scale."""
    n = len(ours)
    if n == 0:
        raise ValueError("no value of ours to compare")
    diff = float(sum(ours) / n - published)
    parts: list[tuple[float, int]] = []  # (variance of a mean, its degrees of freedom)
    paper = published_std is not None and published_seeds is not None and published_seeds > 1
    assumed = n == 1 and paper
    if paper:
        assert published_std is not None and published_seeds is not None
        # one draw of ours with the paper's spread: one variance estimate, s^2 (1 + 1/n), on the paper's df
        share = (1 + 1 / published_seeds) if assumed else 1 / published_seeds
        parts.append((published_std**2 * share, published_seeds - 1))
    if n > 1:
        mean = sum(ours) / n
        parts.append((sum((v - mean) ** 2 for v in ours) / (n - 1) / n, n - 1))
    if not parts:
        return Verdict(NOT_TESTABLE, diff, math.inf, assumed)
    half = half_width(parts)
    if abs(diff) > tolerance + half + 1e-9:
        kind = BEYOND
    elif half > resolution:
        kind = NOT_TESTABLE
    else:
        kind = WITHIN
    return Verdict(kind, diff, half, assumed)


def half_width(parts: Sequence[tuple[float, int]]) -> float:
    """t(0.975, Welch-Satterthwaite df) x the standard error of a sum of independent means' (variance, df)."""
    variance = sum(v for v, _ in parts)
    if variance == 0:
        return 0.0
    df = variance**2 / sum(v**2 / d for v, d in parts if v > 0)
    return float(stats.t.ppf(0.5 + CONFIDENCE / 2, df)) * math.sqrt(variance)


@dataclass(frozen=True)
class Pattern:
    """A row or column of a table whose every compared difference has one sign (no single cell need show it)."""

    axis: str
    """`row` or `column`."""
    key: str
    count: int
    sign: int
    mean_diff: float
    p_value: float
    """Two-sided sign test: the chance that `count` independent differences centred on 0 all share a sign."""


def one_sign_patterns(lines: dict[tuple[str, str], Sequence[float]], least: int = 3) -> list[Pattern]:
    """The rows and columns (`(axis, key)` -> their cells' differences) with at least `least` differences, all of
    one sign; sorted by p-value."""
    found = []
    for (axis, key), diffs in lines.items():
        signs = {math.copysign(1, d) for d in diffs if d != 0}
        if len(diffs) >= least and len(signs) == 1 and all(d != 0 for d in diffs):
            k = len(diffs)
            found.append(Pattern(axis, key, k, int(signs.pop()), sum(diffs) / k, min(1.0, 2 * 0.5**k)))
    return sorted(found, key=lambda p: (p.p_value, p.axis, p.key))

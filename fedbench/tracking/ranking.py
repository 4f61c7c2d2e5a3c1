"""Methods ranked across the scenarios of a task, as a claim such as "method X is best under drift" is made.

Each scenario is a data set in Demšar's (JMLR 2006) sense, its seeds averaged within it. Over the scenarios:

- average ranks and the Friedman test (with Iman and Davenport's F, which Demšar recommends as less
  conservative), scipy.stats.friedmanchisquare;
- every pair by the Wilcoxon signed-rank test on the scenario means, Holm-corrected over all pairs (Benavoli,
  Corani and Mangili, JMLR 2016, rather than the Nemenyi test, whose verdict on two methods depends on which
  others were compared), scipy.stats.wilcoxon; the groups no test tells apart are the bars of the
  critical-difference diagram;
- an aggregate score: the interquartile mean over every (scenario, seed) of a per-scenario normalised score, with
  a 95% stratified-bootstrap interval (Agarwal et al., NeurIPS 2021, rliable): seeds are resampled within each
  scenario, scipy.stats.bootstrap with one sample per scenario;
- the probability of improvement of each pair: the chance that a seed of one beats a seed of the other in a
  scenario (Mann-Whitney's U over n_a x n_b, ties half), averaged over scenarios, with the same bootstrap.

The normalised score is min-max over the methods' seed means within a scenario: 0 is the worst method's mean,
1 the best's. It makes every scenario weigh the same whatever its difficulty (a 2-point gap on an easy cell and
a 20-point gap on a hard one both span [0, 1]), which is what ranking across scenarios asks; like ranks, it
depends on which methods are compared.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.tracking.intervals import BOOTSTRAP_SEED, CONFIDENCE, holm
from fedbench.tracking.leaderboard import DEFAULT_METRIC, group_and_configuration, latest_finished
from fedbench.tracking.store import is_metric

ALPHA = 0.05
BOOTSTRAP_RESAMPLES = 2000
"""Stratified-bootstrap resamples of the aggregate and the probabilities of improvement (rliable uses 2,000)."""


@dataclass(frozen=True)
class Friedman:
    """The Friedman test over N scenarios and k methods, and Iman and Davenport's F from it."""

    statistic: float
    p_value: float
    f_statistic: float
    f_p_value: float


@dataclass
class Ranking:
    """Methods ranked across scenarios: what `fedbench rank` prints, draws and writes."""

    metric: str
    mode: str
    seeds: dict[tuple[str, str], np.ndarray]
    """(scenario, method) -> the metric of each seed."""
    means: pd.DataFrame
    """Scenario x method: the mean over seeds."""
    ranks: pd.DataFrame
    """Scenario x method: its rank in the scenario (1 = best, ties averaged)."""
    friedman: Friedman | None
    """None with fewer than three methods (the Wilcoxon test is the whole answer then)."""
    pairwise: pd.DataFrame
    """One row per pair: a, b (a ranked better), Wilcoxon statistic, p, Holm's p, significant."""
    aggregate: pd.DataFrame
    """Per method, best first: average rank, IQM of the normalised score and its interval."""
    improvement: pd.DataFrame
    """Per pair (a ranked better): P(a > b) and its interval."""
    left_out: list[str] = field(default_factory=list)
    """What was not ranked and why (a method missing from some scenario, a scenario with one method)."""

    @property
    def methods(self) -> list[str]:
        """Best average rank first."""
        return list(self.aggregate["method"])

    @property
    def scenarios(self) -> list[str]:
        return list(self.means.index)

    def cliques(self) -> list[list[str]]:
        """The maximal runs of methods, in rank order, no pair of which differs significantly: the bars of a
        critical-difference diagram. A method different from all others is a clique of one."""
        methods = self.methods
        different = {frozenset((r.a, r.b)) for r in self.pairwise.itertuples(index=False) if bool(r.significant)}
        runs = []
        for start in range(len(methods)):
            end = start
            while end + 1 < len(methods) and all(
                frozenset((m, methods[end + 1])) not in different for m in methods[start : end + 1]
            ):
                end += 1
            runs.append((start, end))
        maximal = [r for r in runs if not any(o != r and o[0] <= r[0] and r[1] <= o[1] for o in runs)]
        return [methods[s : e + 1] for s, e in maximal]

    def smallest_p(self) -> float:
        """The smallest two-sided p-value the Wilcoxon signed-rank test can give with this many scenarios."""
        return 2 / 2 ** len(self.scenarios)


def rank_runs(
    runs: pd.DataFrame,
    metric: str = DEFAULT_METRIC,
    mode: str = "max",
    across: Sequence[str] = ("dataset", "scenario"),
) -> Ranking:
    """Rank the configurations of `runs` (the methods) across the groups `across` forms (the scenarios).

    Raises:
        ConfigError: an unknown metric or group-by field, or fewer than two methods over two scenarios in common.
    """
    metric = M.canonical(metric)
    finished = latest_finished(runs)
    if not is_metric(metric) or metric not in finished or finished[metric].isna().all():
        raise ConfigError("--metric", metric, "a metric the finished runs report")
    try:
        scenario, method = group_and_configuration(finished, across)
    except ConfigError as exc:  # the leaderboard's option is --group-by; ranking's is --across
        raise ConfigError("--across", exc.value, exc.allowed) from exc
    frame = pd.DataFrame({"scenario": scenario, "method": method, "value": finished[metric].astype(float)})
    frame = frame.dropna(subset=["value"])
    frame, left_out = common_methods(frame)
    sign = 1.0 if mode == "max" else -1.0
    seeds = {key: rows["value"].to_numpy() for key, rows in frame.groupby(["scenario", "method"], sort=True)}
    means = frame.groupby(["scenario", "method"])["value"].mean().unstack("method")
    ranks = (-sign * means).rank(axis=1, method="average")
    order = list(ranks.mean().sort_values(kind="stable").index)
    means, ranks = means[order], ranks[order]
    pairwise = wilcoxon_holm(means, order, sign)
    normalised = normalise(seeds, means, sign)
    aggregate = aggregate_scores(normalised, ranks, order)
    improvement = improvement_table(seeds, order, list(means.index), sign)
    return Ranking(metric, mode, seeds, means, ranks, friedman_test(means), pairwise, aggregate, improvement, left_out)


def common_methods(frame: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The rows of the scenarios with two methods or more and of the methods present in every one of them: the
    Friedman and Wilcoxon tests compare methods within a scenario, so each needs them all."""
    left_out = []
    per_scenario = frame.groupby("scenario")["method"].nunique()
    alone = sorted(per_scenario[per_scenario < 2].index)
    if alone:
        left_out.append(f"{len(alone)} scenario(s) with a single method: " + "; ".join(alone))
    frame = frame[~frame["scenario"].isin(alone)]
    scenarios = frame["scenario"].nunique()
    present = frame.groupby("method")["scenario"].nunique()
    partial = sorted(present[present < scenarios].index)
    if partial:
        left_out.append("method(s) missing from some scenario: " + "; ".join(partial))
    frame = frame[~frame["method"].isin(partial)]
    if frame["method"].nunique() < 2 or frame["scenario"].nunique() < 2:
        raise ConfigError(
            "runs",
            f"{frame['method'].nunique()} method(s) in {frame['scenario'].nunique()} scenario(s) in common",
            "at least two methods run in each of at least two scenarios"
            + (f" ({'; '.join(left_out)})" if left_out else ""),
        )
    return frame, left_out


def friedman_test(means: pd.DataFrame) -> Friedman | None:
    """Friedman's chi-square over the scenarios (rows) and methods (columns), and Iman and Davenport's
    F = (N - 1) chi2 / (N (k - 1) - chi2) on (k - 1, (k - 1)(N - 1)) degrees of freedom."""
    n, k = means.shape
    if k < 3:
        return None
    statistic, p = stats.friedmanchisquare(*(means[c].to_numpy() for c in means.columns))
    return Friedman(float(statistic), float(p), *iman_davenport(float(statistic), n, k))


def iman_davenport(statistic: float, n: int, k: int) -> tuple[float, float]:
    """Iman and Davenport's F from Friedman's chi-square over `n` scenarios and `k` methods, and its p-value."""
    denominator = n * (k - 1) - statistic
    if denominator <= 0:  # every scenario ranks the methods alike: chi2 at its maximum, F unbounded
        return math.inf, 0.0
    f = (n - 1) * statistic / denominator
    return float(f), float(stats.f.sf(f, k - 1, (k - 1) * (n - 1)))


def wilcoxon_holm(means: pd.DataFrame, order: list[str], sign: float) -> pd.DataFrame:
    """Every pair's Wilcoxon signed-rank test on its scenario means (two-sided; a zero difference's rank split
    between the signs, as Demšar does), then Holm over all pairs. The statistic is the sum of ranks of the
    scenarios where `a` (the better-ranked) wins."""
    rows = []
    for a, b in itertools.combinations(order, 2):
        diff = sign * (means[a].to_numpy() - means[b].to_numpy())
        if np.all(diff == 0):
            rows.append({"a": a, "b": b, "a_wins": 0.0, "p": 1.0})
            continue
        result = stats.wilcoxon(diff, zero_method="zsplit", alternative="two-sided")
        ranks = stats.rankdata(np.abs(diff))
        wins = float(ranks[diff > 0].sum() + ranks[diff == 0].sum() / 2)
        rows.append({"a": a, "b": b, "a_wins": wins, "p": float(result.pvalue)})
    table = pd.DataFrame(rows, columns=["a", "b", "a_wins", "p"])
    table["p_holm"] = holm(list(table["p"]))
    table["significant"] = table["p_holm"] < ALPHA
    return table


def normalise(seeds: dict[tuple[str, str], np.ndarray], means: pd.DataFrame, sign: float) -> dict:
    """(scenario, method) -> each seed's score scaled so that the scenario's worst method mean is 0 and its best 1
    (0.5 for every seed where all methods' means are equal); larger is better whatever the mode."""
    out = {}
    for (scenario, method), values in seeds.items():
        row = sign * means.loc[scenario].to_numpy()
        worst, best = row.min(), row.max()
        out[(scenario, method)] = (
            (sign * values - worst) / (best - worst) if best > worst else np.full(len(values), 0.5)
        )
    return out


def interquartile_mean(values: np.ndarray, axis: int = -1) -> np.ndarray:
    """The mean of the middle 50% (scipy.stats.trim_mean cutting 25% at each end), rliable's aggregate."""
    return stats.trim_mean(values, 0.25, axis=axis)


def stratified_interval(samples: list[np.ndarray], statistic) -> tuple[float, float]:
    """The 95% percentile interval of `statistic` (vectorised over a leading resample axis) when each sample (a
    scenario's seeds) is resampled within itself; the point itself where nothing varies."""
    if any(len(s) < 2 for s in samples):  # a scenario with one seed cannot be resampled
        return math.nan, math.nan
    if all(np.ptp(s) == 0 for s in samples):
        point = float(statistic(*samples, axis=-1))
        return point, point
    result = stats.bootstrap(
        tuple(samples),
        statistic,
        n_resamples=BOOTSTRAP_RESAMPLES,
        confidence_level=CONFIDENCE,
        method="percentile",
        paired=False,
        vectorized=True,
        rng=np.random.default_rng(BOOTSTRAP_SEED),
    )
    low, high = result.confidence_interval
    return float(low), float(high)


def aggregate_scores(normalised: dict, ranks: pd.DataFrame, order: list[str]) -> pd.DataFrame:
    """Per method (best average rank first): average rank, the IQM of its normalised scores and its interval."""
    rows = []
    for method in order:
        samples = [normalised[(scenario, method)] for scenario in ranks.index]

        def iqm(*xs, axis=-1):
            return interquartile_mean(np.concatenate(xs, axis=axis), axis=axis)

        low, high = stratified_interval(samples, iqm)
        point = float(iqm(*samples))
        rows.append(
            {"method": method, "average_rank": float(ranks[method].mean()), "iqm": point, "low": low, "high": high}
        )
    return pd.DataFrame(rows)


def improvement_probability(xs: Sequence[np.ndarray], ys: Sequence[np.ndarray], axis: int = -1) -> np.ndarray:
    """P(X > Y): per scenario, the share of (seed of X, seed of Y) pairs X wins (ties half), averaged over the
    scenarios; `xs` and `ys` hold a scenario each, vectorised over leading axes."""
    shares = []
    for x, y in zip(xs, ys, strict=True):
        wins = np.expand_dims(x, -1) > np.expand_dims(y, -2)
        ties = np.expand_dims(x, -1) == np.expand_dims(y, -2)
        shares.append((wins + 0.5 * ties).mean(axis=(-1, -2)))
    return np.mean(shares, axis=0)


def improvement_table(
    seeds: dict[tuple[str, str], np.ndarray], order: list[str], scenarios: list[str], sign: float
) -> pd.DataFrame:
    """Each pair (a ranked better than b): P(a > b) over scenarios, with its stratified-bootstrap interval."""
    rows = []
    count = len(scenarios)
    for a, b in itertools.combinations(order, 2):
        samples = [sign * seeds[(s, a)] for s in scenarios] + [sign * seeds[(s, b)] for s in scenarios]

        def probability(*xs, axis=-1):
            return improvement_probability(xs[:count], xs[count:])

        low, high = stratified_interval(samples, probability)
        rows.append({"a": a, "b": b, "probability": float(probability(*samples)), "low": low, "high": high})
    return pd.DataFrame(rows, columns=["a", "b", "probability", "low", "high"])

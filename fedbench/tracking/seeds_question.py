"""How many runs a question needs before they run (`fedbench sweep --dry-run --detect D`): the seeds per configuration
that would tell two of the task's configurations apart when their means differ by D, from the seed spread measured in
the store (or stated), and the runs that makes for the task's grid."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fedbench.config.task import count_data_configurations
from fedbench.core.runspec import RunSpec
from fedbench.tracking.intervals import POWER, seeds_needed
from fedbench.tracking.leaderboard import TIE_ALPHA, group_and_configuration, latest_finished


@dataclass(frozen=True)
class SeedsQuestion:
    """The answer: seeds per configuration at the leaderboard's test, and the runs for the whole grid."""

    metric: str
    difference: float
    spread: float
    spread_source: str
    """Where the spread came from: stated, or measured on which runs."""
    configurations: int
    """Configurations of the grid (seeds pooled)."""
    comparisons: int
    """Configurations each is compared with in its group (against the group's best): Holm's first step is alpha
    over this many."""
    seeds_asked: int
    per_configuration: int | None
    """None: more than 10,000 (a difference this small against this spread is out of reach)."""

    def lines(self) -> list[str]:
        head = (
            f"to tell two configurations {self.difference:g} apart in {self.metric} (seed std {self.spread:.4g}, "
            f"{self.spread_source}) at {POWER:.0%} power, by the leaderboard's test (two-sided, alpha "
            f"{TIE_ALPHA}/{self.comparisons}, Holm's first step over a group's {self.comparisons} comparison(s)):"
        )
        if self.per_configuration is None:
            return [head, "  more than 10,000 seeds per configuration: out of reach; a larger difference is not"]
        runs = self.per_configuration * self.configurations
        asked = self.seeds_asked * self.configurations
        verdict = "enough" if self.seeds_asked >= self.per_configuration else "not enough"
        return [
            head,
            f"  {self.per_configuration} seeds per configuration: {runs} runs for the grid's {self.configurations} "
            f"configurations (the task asks for {self.seeds_asked} seeds, {asked} runs: {verdict})",
        ]


def pooled_spread(runs: pd.DataFrame, metric: str) -> tuple[float, int] | None:
    """The seed standard deviation of `metric` pooled over the configurations with two finished seeds or more
    (each configuration's variance weighted by its degrees of freedom), and how many there were; None: none."""
    finished = latest_finished(runs)
    if metric not in finished or finished[metric].isna().all():
        return None
    group, configuration = group_and_configuration(finished, ("dataset", "scenario"))
    frame = pd.DataFrame({"group": group, "configuration": configuration, "value": finished[metric].astype(float)})
    stats = frame.dropna().groupby(["group", "configuration"])["value"].agg(["var", "count"])
    stats = stats[stats["count"] >= 2]
    if stats.empty:
        return None
    freedom = stats["count"] - 1
    return float(np.sqrt((stats["var"] * freedom).sum() / freedom.sum())), len(stats)


def seeds_question(
    specs: Sequence[RunSpec], metric: str, difference: float, spread: float, spread_source: str
) -> SeedsQuestion:
    """The seeds each of the grid's configurations needs to tell a `difference` apart against `spread`."""
    seeds = {s.seed for s in specs}
    configurations = math.ceil(len(specs) / max(1, len(seeds)))
    per_group = configurations / max(1, count_data_configurations(specs))
    comparisons = max(1, round(per_group) - 1)
    needed = seeds_needed(difference, spread, alpha=TIE_ALPHA / comparisons)
    return SeedsQuestion(metric, difference, spread, spread_source, configurations, comparisons, len(seeds), needed)

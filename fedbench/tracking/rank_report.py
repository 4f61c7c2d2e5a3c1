"""`fedbench rank`'s files: ranking.md (average ranks and the aggregate, the Friedman test, every pair's Wilcoxon
test and probability of improvement, with what each means) beside the critical-difference diagram and the
aggregate figure."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from fedbench.tracking.intervals import holm
from fedbench.tracking.leaderboard import DEFAULT_METRIC, fedbench_runs
from fedbench.tracking.rank_figures import aggregate_figure, cd_diagram
from fedbench.tracking.ranking import ALPHA, BOOTSTRAP_RESAMPLES, Ranking, rank_runs

CD_DIAGRAM = "cd_diagram.png"
AGGREGATE = "aggregate.png"
MARKDOWN = "ranking.md"
ARTIFACT_FOLDER = "ranking"
"""Where a sweep parent run keeps the files."""


@dataclass
class RankedExperiment:
    """A ranking, the files it was written to and the sweep parent run they were logged under (None: none)."""

    ranking: Ranking
    files: list[Path] = field(default_factory=list)
    parent_run_id: str | None = None


def rank_experiment(
    experiment: str,
    uri: str,
    out: Path,
    metric: str = DEFAULT_METRIC,
    mode: str = "max",
    across: Sequence[str] = ("dataset", "scenario"),
    log_artifacts: bool = True,
) -> RankedExperiment:
    """Rank the experiment's methods across its scenarios, write the files into `out` and log them under its latest
    sweep parent run (folder `ranking/`).

    Raises:
        ConfigError: unknown experiment, metric or field, or too few methods and scenarios in common.
    """
    from fedbench.tracking.mlflow_store import MlflowStore

    store = MlflowStore(uri)
    ranking = rank_runs(fedbench_runs(store, experiment), metric, mode, across)
    ranked = RankedExperiment(ranking, write_ranking(ranking, out, experiment))
    parent = store.sweep_parent(experiment)
    ranked.parent_run_id = parent.run_id if parent is not None else None
    if log_artifacts and ranked.parent_run_id is not None:
        store.attach(ranked.parent_run_id, ranked.files, ARTIFACT_FOLDER)
    return ranked


def write_ranking(ranking: Ranking, out: Path, title: str) -> list[Path]:
    """ranking.md, cd_diagram.png and aggregate.png under `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    figures = [cd_diagram(ranking, out / CD_DIAGRAM, title), aggregate_figure(ranking, out / AGGREGATE, title)]
    markdown = out / MARKDOWN
    markdown.write_text(ranking_markdown(ranking, title))
    return [markdown, *figures]


def ranking_markdown(ranking: Ranking, title: str, figures: bool = True) -> str:
    """The ranking as markdown; `figures` links the two PNGs written beside it."""
    seeds = sorted({len(v) for v in ranking.seeds.values()})
    k, n = len(ranking.methods), len(ranking.scenarios)
    lines = [
        f"# {title}: methods ranked across scenarios",
        "",
        f"{k} methods over {n} scenarios by `{ranking.metric}` ({ranking.mode} is better), "
        f"{'/'.join(map(str, seeds))} seed(s) per scenario, averaged within it.",
        "",
    ]
    if ranking.left_out:
        lines += ["Not ranked: " + "; ".join(ranking.left_out) + ".", ""]
    lines += [friedman_text(ranking), ""]
    if figures:
        lines += [f"![critical-difference diagram]({CD_DIAGRAM})", "", f"![aggregate]({AGGREGATE})", ""]
    lines += ["## Average rank and aggregate score", "", "| method | average rank | IQM (normalised) | 95% interval |"]
    lines.append("|---|---|---|---|")
    for row in ranking.aggregate.itertuples(index=False):
        lines.append(f"| {row.method} | {row.average_rank:.2f} | {row.iqm:.3f} | {bounds(row.low, row.high, 3)} |")
    lines += [
        "",
        "Rank 1 is the best in a scenario (ties share the mean of their ranks). The normalised score puts each "
        "scenario's worst method mean at 0 and its best at 1, so every scenario weighs the same whatever its "
        "difficulty; the IQM is the mean of the middle 50% of every (scenario, seed) score (Agarwal et al. 2021); "
        f"its interval is a 95% percentile interval from {BOOTSTRAP_RESAMPLES:,} stratified-bootstrap resamples "
        "(seeds resampled within each scenario).",
        "",
        "## Pairs",
        "",
        "| a | b | P(a > b) | 95% interval | Wilcoxon p | Holm p | differ |",
        "|---|---|---|---|---|---|---|",
    ]
    merged = ranking.pairwise.merge(ranking.improvement, on=["a", "b"])
    for row in merged.itertuples(index=False):
        differ = "yes" if row.significant else "no"
        lines.append(
            f"| {row.a} | {row.b} | {row.probability:.2f} | {bounds(row.low, row.high, 2)} | {row.p:.3g} | "
            f"{row.p_holm:.3g} | {differ} |"
        )
    lines += ["", pairs_note(ranking), ""]
    lines += ["## Scenario means", "", "| scenario | " + " | ".join(ranking.methods) + " |"]
    lines.append("|---|" + "---|" * k)
    for scenario, row in ranking.means.iterrows():
        ranks = ranking.ranks.loc[scenario]
        cells = [f"{row[m]:.4f} ({ranks[m]:g})" for m in ranking.methods]
        lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
    lines += ["", "Each cell: the mean over seeds (its rank in the scenario)."]
    return "\n".join(lines) + "\n"


def bounds(low: float, high: float, digits: int) -> str:
    """An interval as `[low, high]`, or why there is none: a scenario with one seed cannot be resampled."""
    if math.isnan(low):
        return "– (a scenario has one seed)"
    return f"[{low:.{digits}f}, {high:.{digits}f}]"


def friedman_text(ranking: Ranking) -> str:
    test = ranking.friedman
    if test is None:
        return "Two methods: the Wilcoxon signed-rank test below is the whole comparison (Friedman needs three)."
    verdict = "the methods' ranks differ" if test.f_p_value < ALPHA else "no difference among the ranks is shown"
    return (
        f"Friedman test over {len(ranking.scenarios)} scenarios: χ² = {test.statistic:.2f}, p = {test.p_value:.3g}; "
        f"Iman-Davenport F = {test.f_statistic:.2f}, p = {test.f_p_value:.3g}: {verdict} at α = {ALPHA} "
        "(Demšar 2006)."
    )


def pairs_note(ranking: Ranking) -> str:
    """What the pair table's columns mean, and what this many scenarios can show at all."""
    pairs = len(ranking.pairwise)
    note = (
        "P(a > b): the chance that a seed of a beats a seed of b in a scenario (ties count half), averaged over "
        "scenarios, with its stratified-bootstrap interval; 0.5 is a coin. Wilcoxon p: the signed-rank test on the "
        f"scenario means (two-sided, zero differences split, Demšar 2006); Holm p: corrected over all {pairs} pairs "
        f"(Benavoli et al. 2016); differ: Holm p < {ALPHA}."
    )
    floor = ranking.smallest_p()
    if holm([floor] * pairs)[0] >= ALPHA:
        note += (
            f" With {len(ranking.scenarios)} scenarios the smallest p-value a Wilcoxon test can give is {floor:.3g}, "
            f"which Holm's correction over {pairs} pairs lifts above {ALPHA}: no pair can be shown to differ here, "
            "whatever the results; more scenarios can."
        )
    return note

"""Methods ranked across scenarios: Demšar's (2006) worked example, scipy's documented statistics, and synthetic
cases whose answer is known by construction."""

import time

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from scipy import stats

from fedbench.cli import main
from fedbench.core.errors import ConfigError
from fedbench.tracking.mlflow_callback import experiment_id_for
from fedbench.tracking.ranking import (
    friedman_test,
    iman_davenport,
    improvement_probability,
    interquartile_mean,
    rank_runs,
    wilcoxon_holm,
)
from fedbench.tracking.tags import SWEEP_TAG
from tests.tracking.test_plots import log_run

# Demšar (2006), Table 6: AUC of C4.5 with and without curtailing (m) and tuning of confidence (cf) on 14 data sets.
# The table prints three digits; its ranks put C4.5+cf above C4.5+m+cf on voting, which both print as .975.
DEMSAR = pd.DataFrame(
    [
        [0.763, 0.768, 0.771, 0.798],
        [0.599, 0.591, 0.590, 0.569],
        [0.954, 0.971, 0.968, 0.967],
        [0.628, 0.661, 0.654, 0.657],
        [0.882, 0.888, 0.886, 0.898],
        [0.936, 0.931, 0.916, 0.931],
        [0.661, 0.668, 0.609, 0.685],
        [0.583, 0.583, 0.563, 0.625],
        [0.775, 0.838, 0.866, 0.875],
        [1.000, 1.000, 1.000, 1.000],
        [0.940, 0.962, 0.965, 0.962],
        [0.619, 0.666, 0.614, 0.669],
        [0.972, 0.981, 0.9755, 0.975],
        [0.957, 0.978, 0.946, 0.970],
    ],
    columns=["C4.5", "C4.5+m", "C4.5+cf", "C4.5+m+cf"],
)


def runs_of(table: dict[tuple[str, str], list[float]]) -> pd.DataFrame:
    """Runs as the store reads them back: one per (scenario, method, seed)."""
    rows = [
        {
            "status": "FINISHED",
            "start_time": len(rows_so_far),
            "run_hash": f"{scenario}-{method}-{seed}",
            "algorithm.name": method,
            "scenario.preset": scenario,
            "seed": str(seed),
            "final.acc_test_time": value,
        }
        for rows_so_far in [[]]
        for (scenario, method), values in table.items()
        for seed, value in enumerate(values)
        if not rows_so_far.append(0)
    ]
    return pd.DataFrame(rows)


def test_demsars_worked_example_average_ranks_friedman_and_iman_davenport():
    """Demšar 2006, Sec. 3.2.2: average ranks 3.143, 2.000, 2.893 and 1.964; chi2_F = 9.28 (computed from the
    average ranks, without a correction for ties), F_F = 3.69, above F(3, 39)'s critical 2.85 at alpha 0.05."""
    table = {(f"d{i}", method): [DEMSAR.loc[i, method]] for i in DEMSAR.index for method in DEMSAR.columns}
    ranking = rank_runs(runs_of(table), "final.acc_test_time")
    ranks = dict(zip(ranking.aggregate["method"], ranking.aggregate["average_rank"], strict=True))
    assert ranks == pytest.approx({"C4.5": 3.143, "C4.5+m": 2.000, "C4.5+cf": 2.893, "C4.5+m+cf": 1.964}, abs=5e-4)
    k, n = 4, 14
    uncorrected = 12 * n / (k * (k + 1)) * (sum(r**2 for r in ranks.values()) - k * (k + 1) ** 2 / 4)
    assert uncorrected == pytest.approx(9.28, abs=0.01)
    f, p = iman_davenport(uncorrected, n, k)
    assert f == pytest.approx(3.69, abs=0.01) and f > stats.f.ppf(0.95, 3, 39) == pytest.approx(2.85, abs=0.01)
    assert p < 0.05
    # scipy corrects the statistic for the ties (mushroom, iris, primary tumor): larger, never smaller
    assert ranking.friedman is not None and ranking.friedman.statistic > uncorrected


def test_demsars_wilcoxon_example_c45_against_c45_with_curtailing():
    """Demšar 2006, Sec. 3.1.3: R+ = 93, R- = 12 (the zero difference on mushroom split between them), T = 12 below
    the critical 21 for 14 data sets: C4.5+m is better at alpha 0.05."""
    means = DEMSAR[["C4.5+m", "C4.5"]]
    pair = wilcoxon_holm(means, ["C4.5+m", "C4.5"], sign=1.0).iloc[0]
    assert pair["a_wins"] == 93.0
    assert stats.wilcoxon(means["C4.5+m"] - means["C4.5"], zero_method="zsplit").statistic == 12.0
    assert pair["p"] < 0.05 and pair["significant"]


def test_friedman_without_ties_is_demsars_formula_and_scipys():
    rng = np.random.default_rng(0)
    means = pd.DataFrame(rng.uniform(size=(9, 5)), columns=list("abcde"))
    ranks = (-means).rank(axis=1)
    n, k = means.shape
    formula = 12 * n / (k * (k + 1)) * ((ranks.mean() ** 2).sum() - k * (k + 1) ** 2 / 4)
    test = friedman_test(means)
    assert test is not None and test.statistic == pytest.approx(formula)
    assert test.p_value == pytest.approx(stats.chi2.sf(formula, k - 1))
    assert friedman_test(means[["a", "b"]]) is None  # two methods: Wilcoxon is the whole comparison


def synthetic(margins: dict[str, float], scenarios: int, seeds: int, noise: float = 0.01, seed: int = 0) -> dict:
    """Each method's seeds: a scenario's difficulty plus the method's margin plus seed noise."""
    rng = np.random.default_rng(seed)
    table = {}
    for s in range(scenarios):
        level = rng.uniform(0.5, 0.9)
        for method, margin in margins.items():
            table[(f"s{s}", method)] = list(level + margin + rng.normal(0, noise, size=seeds))
    return table


def test_a_method_better_by_a_margin_everywhere_ranks_first_and_differs_once_the_scenarios_are_enough():
    margins = {"best": 0.05, "b": 0.0, "c": 0.0, "d": 0.0}
    ranking = rank_runs(runs_of(synthetic(margins, scenarios=9, seeds=3)), "final.acc_test_time")
    assert ranking.methods[0] == "best" and ranking.aggregate["average_rank"].iloc[0] == 1.0
    pairs = ranking.pairwise[ranking.pairwise["a"] == "best"]
    assert len(pairs) == 3 and pairs["significant"].all()  # 9 scenarios: p = 2/512 each, 0.023 after Holm over 6
    assert ranking.friedman is not None and ranking.friedman.f_p_value < 0.05
    improvement = ranking.improvement[ranking.improvement["a"] == "best"]
    assert (improvement["probability"] == 1.0).all() and (improvement["low"] == 1.0).all()
    assert ranking.cliques()[0] == ["best"]
    # 4 scenarios: the smallest p-value the test can give (2/16) cannot pass Holm, whatever the results
    few = rank_runs(runs_of(synthetic(margins, scenarios=4, seeds=3)), "final.acc_test_time")
    assert few.methods[0] == "best" and not few.pairwise["significant"].any()
    assert "no pair can be shown to differ here" in write_ranking_text(few)


def test_equal_methods_are_not_told_apart():
    holds_a_coin = []
    for seed in range(5):
        ranking = rank_runs(
            runs_of(synthetic({"a": 0.0, "b": 0.0, "c": 0.0}, scenarios=12, seeds=5, noise=0.02, seed=seed)),
            "final.acc_test_time",
        )
        assert not ranking.pairwise["significant"].any()
        assert ranking.cliques() == [ranking.methods]
        holds_a_coin += list((ranking.improvement["low"] < 0.5) & (0.5 < ranking.improvement["high"]))
    assert sum(holds_a_coin) >= 13  # 95% intervals: of 15, one or two may miss 0.5 by chance


def test_the_probability_of_improvement_is_mann_whitneys_u_over_the_pairs_averaged_over_scenarios():
    rng = np.random.default_rng(2)
    xs = [rng.normal(0.6, 0.1, size=5), rng.normal(0.5, 0.1, size=3)]
    ys = [rng.normal(0.5, 0.1, size=4), np.array([xs[1][0], 0.2, 0.9])]  # a tie counts half
    expected = np.mean([stats.mannwhitneyu(x, y).statistic / (len(x) * len(y)) for x, y in zip(xs, ys, strict=True)])
    assert improvement_probability(xs, ys) == pytest.approx(expected)


def test_the_aggregate_is_the_iqm_of_scores_normalised_between_each_scenarios_worst_and_best_mean():
    table = {
        ("easy", "a"): [0.98, 0.99],
        ("easy", "b"): [0.96, 0.97],
        ("hard", "a"): [0.40, 0.50],
        ("hard", "b"): [0.60, 0.70],
    }
    ranking = rank_runs(runs_of(table), "final.acc_test_time")
    # easy: b's mean 0.965 -> 0, a's 0.985 -> 1; hard: a's 0.45 -> 0, b's 0.65 -> 1; seeds at +-0.5 around them
    scores = {"a": [0.75, 1.25, -0.25, 0.25], "b": [-0.25, 0.25, 0.75, 1.25]}
    for row in ranking.aggregate.itertuples(index=False):
        assert row.iqm == pytest.approx(interquartile_mean(np.array(scores[row.method])))
        assert row.low <= row.iqm <= row.high
    # the middle half of 0, 1, 2, 3, 5, 6, 7, 100 is 2, 3, 5, 6: an outlying seed does not move it
    assert interquartile_mean(np.array([0.0, 1, 2, 3, 100, 5, 6, 7])) == pytest.approx(4.0)


def test_a_minimised_metric_ranks_the_smallest_first():
    table = synthetic({"low": -0.1, "high": 0.0, "mid": -0.05}, scenarios=6, seeds=2)
    ranking = rank_runs(runs_of(table), "final.acc_test_time", mode="min")
    assert ranking.methods == ["low", "mid", "high"]


def test_methods_missing_from_a_scenario_are_left_out_and_said():
    table = synthetic({"a": 0.1, "b": 0.0, "c": 0.05}, scenarios=4, seeds=2)
    del table[("s0", "c")]
    table[("alone", "a")] = [0.9, 0.91]
    ranking = rank_runs(runs_of(table), "final.acc_test_time")
    assert ranking.methods == ["a", "b"] and "alone" not in ranking.scenarios
    assert any("single method" in note for note in ranking.left_out)
    assert any("missing from some scenario: c" in note for note in ranking.left_out)
    with pytest.raises(ConfigError, match="at least two methods run in each of at least two scenarios"):
        rank_runs(runs_of({("s0", "a"): [0.5], ("s0", "b"): [0.6]}), "final.acc_test_time")
    with pytest.raises(ConfigError, match="--metric"):
        rank_runs(runs_of(table), "final.acc_nothing")
    with pytest.raises(ConfigError, match="--across: got 'nothing'"):
        rank_runs(runs_of(table), "final.acc_test_time", across=["nothing"])


def write_ranking_text(ranking) -> str:
    from fedbench.tracking.rank_report import ranking_markdown

    return ranking_markdown(ranking, "t", figures=False)


def test_fedbench_rank_writes_the_diagram_and_tables_and_logs_them_under_the_sweep(
    mlflow_store, isolated_results, capsys, monkeypatch
):
    uri = f"sqlite:///{mlflow_store}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    experiment = experiment_id_for(client, "ranked")
    parent = client.create_run(experiment, start_time=int(time.time() * 1000), tags={SWEEP_TAG: "ranked-1"})
    rng = np.random.default_rng(0)
    for alpha in ("0.1", "0.3", "1.0", "3.0", "10.0"):
        for algorithm, margin in (("fedavg", 0.1), ("local", 0.0), ("fedprox", 0.05)):
            for seed in range(3):
                params = {
                    "run_hash": f"{algorithm}{alpha}{seed}",
                    "algorithm.name": algorithm,
                    "scenario.alpha": alpha,
                    "seed": seed,
                }
                log_run(client, experiment, parent.info.run_id, params, {1: 0.5 + margin + rng.normal(0, 0.01)})
    out = isolated_results / "ranked"
    assert main(["rank", "--experiment", "ranked", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "fedavg" in printed and "Friedman test over 5 scenarios" in printed
    assert sorted(p.name for p in out.iterdir()) == ["aggregate.png", "cd_diagram.png", "ranking.md"]
    markdown = (out / "ranking.md").read_text()
    assert "| fedavg | 1.00 |" in markdown and "| fedavg | fedprox | 1.00 |" in markdown
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "ranking")}
    assert logged == {"ranking/ranking.md", "ranking/cd_diagram.png", "ranking/aggregate.png"}
    assert main(["rank", "--experiment", "ranked", "--metric", "final.nothing"]) == 2
    assert "--metric" in capsys.readouterr().out

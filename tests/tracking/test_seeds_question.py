"""How many seeds a question needs: the spread pooled from the store, the grid's comparisons, and the dry run."""

import numpy as np
import pytest

from fedbench.cli import main
from fedbench.config.task import task_from_dict
from fedbench.tracking.intervals import seeds_needed
from fedbench.tracking.seeds_question import pooled_spread, seeds_question
from tests.tracking.test_leaderboard import synthetic_runs


def test_the_spread_is_pooled_over_configurations_weighted_by_their_degrees_of_freedom():
    rows = []
    values = {"fedavg": [0.80, 0.82, 0.84], "local": [0.50, 0.56], "ditto": [0.7]}  # ditto: one seed, no spread
    for name, seeds in values.items():
        rows += [
            {"run_hash": f"{name}{i}", "algorithm.name": name, "final.acc_local_mean": v} for i, v in enumerate(seeds)
        ]
    spread, configurations = pooled_spread(synthetic_runs(rows), "final.acc_local_mean")
    expected = np.sqrt((2 * np.var(values["fedavg"], ddof=1) + 1 * np.var(values["local"], ddof=1)) / 3)
    assert configurations == 2 and spread == pytest.approx(expected)
    assert pooled_spread(synthetic_runs(rows), "final.acc_system") is None


def test_the_seeds_a_grid_needs_use_the_leaderboards_test_over_its_groups_comparisons():
    task = task_from_dict(
        {
            "name": "q",
            "dataset": "digits",
            "model": "mlp",
            "scenario": {"partition": "dirichlet", "alpha": 0.5, "num_clients": 4},
            "rounds": 2,
            "grid": {"algorithm": ["fedavg", "local", "fedprox"], "scenario.alpha": [0.1, 1.0]},
            "seeds": [0, 1, 2],
        }
    )
    question = seeds_question(task.expand(), "final.acc_local_mean", 0.02, 0.02, "as stated")
    assert question.configurations == 6 and question.comparisons == 2 and question.seeds_asked == 3
    assert question.per_configuration == seeds_needed(1.0, 1.0, alpha=0.05 / 2) == 21
    assert "126 runs for the grid's 6 configurations" in question.lines()[1] and "not enough" in question.lines()[1]


def test_the_dry_run_says_how_many_runs_a_question_needs_and_refuses_what_it_cannot_answer(capsys):
    args = ["sweep", "tasks/quickstart.yaml", "--dry-run", "--detect", "0.05"]
    assert main([*args, "--spread", "0.05"]) == 0
    printed = capsys.readouterr().out
    assert "to tell two configurations 0.05 apart in final.acc_local_mean" in printed
    assert "runs for the grid's 6 configurations" in printed
    assert main(args) == 2  # a fresh store has no seeds to measure a spread from
    assert "--spread" in capsys.readouterr().out
    assert main(["sweep", "tasks/quickstart.yaml", "--detect", "0.05"]) == 2
    assert "--detect: got 0.05; allowed: with --dry-run" in capsys.readouterr().out
    assert main(["sweep", "tasks/quickstart.yaml", "--dry-run", "--spread", "0.05"]) == 2
    assert main([*args[:-1], "0", "--spread", "0.05"]) == 2
    assert "a positive difference of means" in capsys.readouterr().out

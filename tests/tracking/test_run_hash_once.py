"""A RunSpec run twice is one seed, not two, wherever runs are counted: the results table, the leaderboard, the
plots and the reproduction report (issue 33, item 1; a search's and a resumed sweep's are in tests/tuning)."""

from fedbench import api
from fedbench.config import load_task
from fedbench.tracking.console import results_table
from tests.tracking.test_reproduction import REFERENCE, row, run, write_task


def test_a_runspec_run_twice_counts_once_everywhere(tmp_path, mlflow_store):
    reference = [{**REFERENCE[0], "cells": [{"algorithm": "fedavg", "optimizer.lr": 0.05, "value": 90.0}]}]
    path = write_task(
        tmp_path, "twice", reference=reference, grid={"algorithm": ["fedavg"]}, optimizer={"name": "sgd", "lr": 0.05}
    )
    specs = load_task(path).expand()
    assert len(specs) == 2  # two seeds
    results = run(specs) + run(specs)  # every run again: four runs of two run hashes
    assert [r.status for r in results] == ["FINISHED"] * 4

    assert results_table(results).columns[-1]._cells == ["2"]  # the table `fedbench run` prints
    board = api.leaderboard(str(path))
    assert board["n"].tolist() == [2]
    plots = api.plot(str(path), out=tmp_path / "plots")
    assert set(plots.curves["n"]) == {2}
    api.report(str(path), out=tmp_path / "report")
    assert row((tmp_path / "report" / "report.md").read_text(), "fedavg")[1].split(" vs ")[0].endswith("(n=2)")

"""Figures of drift: accuracy aligned on drift events, and the drift rounds marked on the curves."""

import pandas as pd

from fedbench.runtime import run_spec
from fedbench.tracking.drift_plots import aligned_on_drifts, draw_aligned, drift_rounds
from fedbench.tracking.mlflow_callback import MlflowCallback
from fedbench.tracking.plots import plot_experiment
from tests.conftest import tiny_spec
from tests.runtime.test_drift_records import DRIFTING


def long_table() -> pd.DataFrame:
    """Two runs of one configuration: client 0 drifts at round 3 in run a; nothing drifts in run b."""
    rows = []
    for run, held, accuracy in (
        ("a", {0: [0, 0, 1, 1], 1: [2, 2, 2, 2]}, {0: [0.9, 0.9, 0.5, 0.8], 1: [0.7, 0.7, 0.7, 0.7]}),
        ("b", {0: [0, 0, 0, 0], 1: [2, 2, 2, 2]}, {0: [0.6, 0.6, 0.6, 0.6], 1: [0.6, 0.6, 0.6, 0.6]}),
    ):
        for client in held:
            for r in range(4):
                rows.append(
                    {
                        "run_hash": run,
                        "group": "g",
                        "configuration": "fedavg",
                        "round": r + 1,
                        "client": client,
                        "distribution": held[client][r],
                        "acc_local": accuracy[client][r],
                    }
                )
    return pd.DataFrame(rows)


def test_accuracy_is_aligned_on_each_drift_from_the_round_before_it():
    aligned = aligned_on_drifts(long_table())
    assert list(aligned["offset"]) == [-1, 0, 1] and list(aligned["accuracy"]) == [0.9, 0.5, 0.8]
    assert set(aligned["run_hash"]) == {"a"}
    assert drift_rounds(long_table()) == {"g": [3]}
    assert aligned_on_drifts(long_table().drop(columns="distribution")).empty  # runs from before the column


def test_plot_draws_the_aligned_figure_for_a_drifting_experiment_only(mlflow_store, isolated_results):
    uri = f"sqlite:///{mlflow_store}"
    for algorithm in ("fedavg", "local"):
        run_spec(tiny_spec(task="drifting", algorithm=algorithm, rounds=4, **DRIFTING), [MlflowCallback(uri)])
        run_spec(tiny_spec(task="static", algorithm=algorithm, rounds=3), [MlflowCallback(uri)])
    drifting = plot_experiment("drifting", uri, isolated_results / "drifting", log_artifacts=False)
    assert "drift_aligned_acc_local.png" in {p.name for p in drifting.files}
    static = plot_experiment("static", uri, isolated_results / "static", log_artifacts=False)
    assert "drift_aligned_acc_local.png" not in {p.name for p in static.files}


def test_the_per_client_export_carries_the_distribution_and_stage(mlflow_store):
    from fedbench.tracking.per_client import per_client_runs

    uri = f"sqlite:///{mlflow_store}"
    run_spec(tiny_spec(task="mixed", rounds=2), [MlflowCallback(uri)])
    assert {"distribution", "stage"} <= set(per_client_runs("mixed", uri).table)


def test_the_aligned_figure_draws_only_offsets_enough_drifts_reach():
    """Three drifts reach 1 round after the drift, one reaches 2: the line ends at 1. With a single drift in all,
    its points are drawn."""
    rows = [("g", "fedavg", f"r{i}", offset, 0.5) for i in range(3) for offset in (-1, 0, 1)]
    rows.append(("g", "fedavg", "r0", 2, 0.9))
    aligned = pd.DataFrame(rows, columns=["group", "configuration", "run_hash", "offset", "accuracy"])
    [line] = draw_aligned(aligned, "t").axes[0].get_lines()[:1]
    assert list(line.get_xdata()) == [-1, 0, 1]
    single = aligned[aligned["run_hash"] == "r0"]
    [line] = draw_aligned(single, "t").axes[0].get_lines()[:1]
    assert list(line.get_xdata()) == [-1, 0, 1, 2]

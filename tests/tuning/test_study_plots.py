"""Optuna's views of a search, drawn from its study; a view that would say nothing is skipped with why."""

import optuna
import pytest
from mlflow.tracking import MlflowClient
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

import fedbench
from fedbench.cli import main
from fedbench.runtime import run_spec
from fedbench.tracking.mlflow_callback import MlflowCallback
from fedbench.tracking.sweep_runs import SweepRuns
from fedbench.tuning.study_plots import VIEWS, plot_study, study_journal
from tests.conftest import tiny_spec

PNG = b"\x89PNG\r\n\x1a\n"


def searched(sweep: str, complete: int, failed: int = 1) -> optuna.Study:
    """A study kept as a search keeps it, of a conditional space as `SearchSpace.sample` draws one: the algorithm
    first, then only its own parameter; `failed` samples end without a score."""
    journal = study_journal(sweep)
    journal.parent.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(
        study_name=sweep,
        storage=JournalStorage(JournalFileBackend(str(journal))),
        direction="maximize",
        sampler=optuna.samplers.RandomSampler(seed=0),
    )
    for _ in range(complete):
        trial = study.ask()
        if trial.suggest_categorical("algorithm.name", ["fedprox", "fedavg"]) == "fedprox":
            study.tell(trial, 0.8 - trial.suggest_float("algorithm.mu", 0.001, 1.0, log=True) / 10)
        else:
            study.tell(trial, 0.7 + trial.suggest_float("algorithm.client_fraction", 0.5, 1.0) / 10)
    for _ in range(failed):
        trial = study.ask()
        trial.suggest_categorical("algorithm.name", ["fedprox", "fedavg"])
        study.tell(trial, state=TrialState.FAIL)
    return study


def test_the_four_views_of_a_conditional_search_with_a_failed_sample(tmp_path):
    study = searched("prox_or_avg-0123abcd", complete=8)
    assert {frozenset(t.params) for t in study.trials if t.state == TrialState.COMPLETE} == {
        frozenset({"algorithm.name", "algorithm.mu"}),
        frozenset({"algorithm.name", "algorithm.client_fraction"}),
    }
    plots = plot_study("prox_or_avg-0123abcd", tmp_path / "optuna", metric="final.acc_local_mean")
    assert plots.skipped == {}
    assert plots.files == [tmp_path / "optuna" / f"{view}.png" for view in VIEWS]
    for path in plots.files:
        assert path.read_bytes().startswith(PNG) and path.stat().st_size > 5000
    # the metric is kept in the study: a later `fedbench plot`, which does not know it, names the axis the same
    assert optuna.load_study(study_name="prox_or_avg-0123abcd", storage=study._storage).metric_names == [
        "final.acc_local_mean"
    ]


def test_importances_of_one_score_are_skipped_with_why_and_the_other_views_drawn(tmp_path):
    searched("once-0123abcd", complete=1)
    (tmp_path / "param_importances.png").write_bytes(PNG)  # an earlier search's, drawn into the same folder
    with pytest.warns(
        UserWarning,
        match="parameter importances of once-0123abcd not drawn: importances need at "
        "least 2 complete trials, the study has 1",
    ):
        plots = plot_study("once-0123abcd", tmp_path)
    assert set(plots.skipped) == {"param_importances"} and not (tmp_path / "param_importances.png").exists()
    assert [p.stem for p in plots.files] == ["optimization_history", "parallel_coordinate", "slice"]


def test_a_study_without_a_score_draws_nothing_and_says_so(tmp_path):
    searched("failing-0123abcd", complete=0, failed=2)
    with pytest.warns(UserWarning, match="no complete trial"):
        plots = plot_study("failing-0123abcd", tmp_path)
    assert plots.files == [] and set(plots.skipped) == set(VIEWS)


def story(uri: str, search: str) -> str:
    """Experiment `story`: two finished runs, a search's parent run and, started after it, a grid's; the search's
    parent run id."""
    runs = SweepRuns(uri, "story")
    parent = runs.start_parent(search, 4).run_id
    runs.start_parent("story-grid", 2)
    for algorithm in ("fedavg", "local"):
        run_spec(tiny_spec(task="story", algorithm=algorithm), [MlflowCallback(uri)])
    return parent


def test_fedbench_plot_draws_the_latest_search_and_logs_it_on_that_search_parent_run(mlflow_store, isolated_results):
    uri = f"sqlite:///{mlflow_store}"
    search = story(uri, "story-0123abcd")
    searched("story-0123abcd", complete=5)
    searched("story-reduced-0123abcd", complete=5)  # another experiment's search (the task's reduced profile)
    plots = fedbench.plot("story")
    folder = isolated_results / "plots" / "story" / "optuna"
    assert [p for p in plots.files if p.parent == folder] == [folder / f"{view}.png" for view in VIEWS]
    assert plots.parent_run_id != search  # the figures of the runs go on the latest sweep, the grid
    logged = {a.path for a in MlflowClient(uri).list_artifacts(search, "plots/optuna")}
    assert logged == {f"plots/optuna/{view}.png" for view in VIEWS}


def test_fedbench_plot_of_a_search_ranks_by_the_metric_it_optimised(mlflow_store, capsys):
    """`fedbench plot` on a search of acc_test_time ranked by acc_local_mean (issue 47, item 11)."""
    from fedbench.tuning.study_plots import searched_metric

    uri = f"sqlite:///{mlflow_store}"
    story(uri, "story-0123abcd")
    searched("story-0123abcd", complete=3)
    plot_study("story-0123abcd", mlflow_store.parent / "views", metric="final.acc_local_min")  # as the search records
    assert searched_metric(uri, "story") == "final.acc_local_min"
    assert fedbench.plot("story").heatmap_metric == "final.acc_local_min"
    assert fedbench.plot("story", metric="acc_local_mean").heatmap_metric == "final.acc_local_mean"
    assert searched_metric(uri, "nothing") is None


def test_fedbench_plot_says_why_a_view_of_a_search_is_missing(mlflow_store, capsys):
    story(f"sqlite:///{mlflow_store}", "story-0123abcd")
    searched("story-0123abcd", complete=1)
    assert main(["plot", "--experiment", "story"]) == 0
    out, err = capsys.readouterr()
    assert (
        "warning: Optuna's parameter importances of story-0123abcd not drawn: importances need at least 2 "
        "complete trials, the study has 1" in " ".join(err.split())
    )
    assert "optuna/slice.png" in out and "Traceback" not in out + err


def test_the_parallel_coordinates_lowest_trials_are_visible_and_the_colour_bar_clears_the_labels():
    """Optuna drew the lowest-scoring trials near-white and its colour bar over the last axis's labels (issue 47,
    item 11)."""
    from matplotlib.collections import LineCollection

    from fedbench.tuning.study_plots import _legible_lines

    study = searched("paper-0000000a", complete=6, failed=0)
    ax = optuna.visualization.matplotlib.plot_parallel_coordinate(study)
    _legible_lines(ax)
    [lines] = [c for c in ax.collections if isinstance(c, LineCollection) and c.get_array() is not None]
    red, green, blue, _ = lines.cmap(0.0)
    assert 0.299 * red + 0.587 * green + 0.114 * blue < 0.8  # Blues at 0 is 0.97: white on white
    assert lines.colorbar.ax.get_position().x0 > ax.get_position().x1 + 0.1
    ax.figure.clf()

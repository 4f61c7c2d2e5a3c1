"""Leaderboards read back from MLflow: numbers equal the per-run metrics, failures listed apart."""

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from scipy import stats

from fedbench.cli import main
from fedbench.config.task import task_from_dict
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.runtime.session import run_specs
from fedbench.tracking.intervals import seeds_needed
from fedbench.tracking.leaderboard import build_leaderboard, read_runs, to_markdown
from fedbench.tracking.mlflow_callback import MlflowCallback
from fedbench.tracking.store import metric_columns
from tests.conftest import TINY, tiny_spec


@pytest.fixture
def recorded(mlflow_store):
    """Two algorithms x two Dirichlet alphas x two seeds on digits, plus one diverging run, in MLflow."""
    raw = {
        **TINY,
        "name": "board",
        "rounds": 2,
        "grid": {"algorithm": ["fedavg", "local"], "scenario.alpha": [0.3, 3.0]},
        "seeds": [0, 1],
    }
    raw.pop("task")
    specs = task_from_dict(raw).expand()
    bad = task_from_dict({**raw, "grid": {}, "seeds": [5], "optimizer": {"lr": 1e30}}).expand()
    run_specs(specs + bad, lambda i, spec: [MlflowCallback()])
    return f"sqlite:///{mlflow_store}", specs


def test_leaderboard_numbers_equal_the_runs_metrics_read_back(recorded):
    uri, specs = recorded
    board = build_leaderboard(read_runs("board", uri), group_by=["scenario"])
    assert len(board.table) == 4 and set(board.table["n"]) == {2}
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("board").experiment_id
    for row in board.table.to_dict("records"):
        algorithm = row["configuration"].split(",")[0]
        alpha = float(row["group"].split("scenario.alpha=")[1])
        values = [
            r.data.metrics["final.acc_local_mean"]
            for r in client.search_runs([experiment])
            if r.data.params.get("algorithm.name") == algorithm
            and float(r.data.params["scenario.alpha"]) == alpha
            and r.info.status == "FINISHED"
        ]
        assert len(values) == 2
        assert row["mean"] == pytest.approx(np.mean(values)) and row["std"] == pytest.approx(np.std(values, ddof=1))
    for _, group in board.table.groupby("group"):
        assert sorted(group["rank"]) == [1, 2] and group.sort_values("rank")["mean"].is_monotonic_decreasing
    assert len(board.failed) == 1 and "ClientDivergedError" in board.failed["reason"][0]


def test_leaderboard_cli_writes_markdown_and_parquet(recorded, isolated_results, capsys):
    assert main(["leaderboard", "--experiment", "board", "--group-by", "scenario", "--format", "csv"]) == 0
    out = capsys.readouterr().out
    assert "not finished" in out and "ClientDivergedError" in out
    folder = isolated_results / "leaderboards"
    assert "| group | rank |" in (folder / "board.md").read_text()
    assert len(pd.read_parquet(folder / "board.parquet")) == 4 and (folder / "board.csv").exists()


def test_the_task_file_may_be_given_as_the_argument(recorded, isolated_results, tmp_path, capsys):
    """`fedbench leaderboard tasks/x.yaml`, as a user first types it, reads the task's experiment like --task."""
    import yaml

    task = tmp_path / "board.yaml"
    task.write_text(yaml.safe_dump({**{k: v for k, v in TINY.items() if k != "task"}, "name": "board"}))
    assert main(["leaderboard", str(task), "--group-by", "scenario"]) == 0
    assert "board:" in capsys.readouterr().out
    assert main(["leaderboard", str(task), "--experiment", "board"]) == 2  # a clear error, before any work
    assert "allowed: exactly one" in capsys.readouterr().out


def test_a_metric_no_run_reports_is_refused_naming_the_known_ones(recorded):
    uri, _ = recorded
    with pytest.raises(ConfigError) as err:
        build_leaderboard(read_runs("board", uri), metric="final.acc_nope")
    assert "final.acc_local_mean" in str(err.value)


def test_an_unknown_group_by_is_refused_naming_what_is_allowed():
    """It used to group every run as "all" and rank across datasets and scenarios without a word."""
    runs = pd.DataFrame(
        {
            "status": ["FINISHED"] * 4,
            "final.acc_local_mean": [0.5, 0.6, 0.7, 0.8],
            "algorithm.name": ["fedavg", "local"] * 2,
            "scenario.alpha": ["0.3", "0.3", "3.0", "3.0"],
            "dataset.name": ["digits"] * 4,
        }
    )
    with pytest.raises(ConfigError) as err:
        build_leaderboard(runs, group_by=["scenery"])
    assert err.value.field == "--group-by" and err.value.value == "scenery"
    assert "scenario" in err.value.allowed and "scenario.alpha" in err.value.allowed
    board = build_leaderboard(runs, group_by=["dataset.name"])  # a recorded field that does not vary: one group
    assert set(board.table["group"]) == {"all"} and len(board.table) == 4


def synthetic_runs(rows: list[dict]) -> pd.DataFrame:
    """Runs as the store reads them back (`fedbench.tracking.store`): fields a run does not have are NaN."""
    return pd.DataFrame([{"status": "FINISHED", "start_time": i, **row} for i, row in enumerate(rows)])


def test_labels_show_only_what_varies_and_applies_to_each_algorithm():
    runs = synthetic_runs(
        [
            {
                "run_hash": "a",
                "algorithm.name": "fedavg",
                "algorithm.client_fraction": "1.0",
                "final.acc_local_mean": 0.5,
            },
            {
                "run_hash": "b",
                "algorithm.name": "fedprox",
                "algorithm.client_fraction": "1.0",
                "algorithm.mu": "0.1",
                "final.acc_local_mean": 0.6,
            },
            {
                "run_hash": "c",
                "algorithm.name": "feroma",
                "algorithm.client_fraction": "1.0",
                "algorithm.tau": "mean",
                "algorithm.epsilon": "0.1",
                "final.acc_local_mean": 0.7,
            },
        ]
    )
    board = build_leaderboard(runs, group_by=[])
    # parameters at the method's default (client_fraction 1.0) say nothing; those set away from it do
    assert sorted(board.table["configuration"]) == ["fedavg", "fedprox mu=0.1", "feroma epsilon=0.1 tau=mean"]
    assert not board.table["configuration"].str.contains("nan").any()


def test_a_protocol_field_at_its_default_is_left_out_of_labels_unless_nothing_else_tells_runs_apart():
    """feroma_drift's ranking grid scores FedAvg at its lowest-validation-loss round and the others at the last
    round (the default): the others read as their names, FedAvg with its scored round."""
    runs = synthetic_runs(
        [
            {"run_hash": "a", "algorithm.name": "ifca", "scored_round": "last", "final.acc_local_mean": 0.8},
            {"run_hash": "b", "algorithm.name": "fedavg", "scored_round": "lowest_validation_loss"},
            {"run_hash": "c", "algorithm.name": "feroma", "scored_round": "last", "test_time": "index"},
            {"run_hash": "d", "algorithm.name": "feroma", "scored_round": "last", "test_time": "own"},
        ]
    )
    board = build_leaderboard(runs.fillna({"final.acc_local_mean": 0.5}), group_by=[])
    assert sorted(board.table["configuration"]) == [
        "fedavg, scored_round=lowest_validation_loss",
        "feroma",
        "feroma, test_time=index",
        "ifca",
    ]
    # the same fields alone: the run at the defaults keeps them rather than reading as "all"
    alone = synthetic_runs(
        [
            {"run_hash": "a", "algorithm.name": "fedavg", "scored_round": "last", "final.acc_local_mean": 0.8},
            {"run_hash": "b", "algorithm.name": "fedavg", "scored_round": "lowest_validation_loss"},
        ]
    )
    board = build_leaderboard(alone.fillna({"final.acc_local_mean": 0.5}), group_by=[])
    assert sorted(board.table["configuration"]) == ["scored_round=last", "scored_round=lowest_validation_loss"]
    # a run from before a field (NaN there) with the other at its default: the default is said, not "all"
    older = synthetic_runs(
        [
            {"run_hash": "a", "scored_round": "last", "final.acc_local_mean": 0.8},
            {"run_hash": "b", "scored_round": "lowest_validation_loss", "test_time": "index"},
        ]
    )
    board = build_leaderboard(older.fillna({"final.acc_local_mean": 0.5}), group_by=[])
    assert sorted(board.table["configuration"]) == [
        "scored_round=last",
        "scored_round=lowest_validation_loss, test_time=index",
    ]


def test_a_metric_some_configurations_lack_is_shown_missing_not_a_crash():
    runs = synthetic_runs(
        [
            {"run_hash": "a", "algorithm.name": "fedavg", "final.acc_system": 0.8},
            {"run_hash": "b", "algorithm.name": "local", "final.acc_system": np.nan},
        ]
    )
    board = build_leaderboard(runs, metric="final.acc_system", group_by=[])
    local = board.table[board.table["configuration"] == "local"].iloc[0]
    assert pd.isna(local["mean"]) and pd.isna(local["rank"])
    assert "| all | – | local | – | – | 0 |" in to_markdown(board)  # no run of it reports the metric


def test_a_rerun_of_the_same_runspec_is_one_seed_not_two():
    runs = synthetic_runs(
        [
            {"run_hash": "a", "algorithm.name": "fedavg", "final.acc_local_mean": 0.5},
            {
                "run_hash": "a",
                "algorithm.name": "fedavg",
                "final.acc_local_mean": 0.7,
            },  # the rerun
            {"run_hash": "b", "algorithm.name": "fedavg", "final.acc_local_mean": 0.6},
        ]
    )
    [row] = build_leaderboard(runs, group_by=[]).table.to_dict("records")
    assert row["n"] == 2 and row["mean"] == pytest.approx(0.65)  # the latest run of hash a, and hash b


def test_a_missing_store_is_named_and_not_created(tmp_path):
    store = tmp_path / "elsewhere" / "mlflow.db"
    with pytest.raises(ConfigError) as info:
        read_runs("board", f"sqlite:///{store}")
    assert str(store) in str(info.value) and "does not exist" in str(info.value)
    assert not store.exists()


def test_a_trial_stopped_early_neither_ranks_nor_replaces_the_complete_run():
    runs = synthetic_runs(
        [
            {"run_hash": "a", "algorithm.name": "fedavg", "final.acc_local_mean": 0.9},
            {
                "run_hash": "a",
                "algorithm.name": "fedavg",
                "final.acc_local_mean": 0.3,
                "tag:fedbench.stopped_early": "after round 1",
            },  # a later ASHA sweep of the same RunSpec
        ]
    )
    [row] = build_leaderboard(runs, group_by=[]).table.to_dict("records")
    assert row["n"] == 1 and row["mean"] == pytest.approx(0.9)


def test_what_run_skips_is_what_the_leaderboard_counts(mlflow_store):
    from fedbench.runtime import run_spec
    from fedbench.tracking.leaderboard import finished_run_hashes

    uri = f"sqlite:///{mlflow_store}"
    assert finished_run_hashes("skips", uri) == set()  # no such experiment yet
    done, stopped = tiny_spec(task="skips", rounds=1), tiny_spec(task="skips", rounds=1, seed=1)
    run_spec(done, [MlflowCallback(uri)])
    callback = MlflowCallback(uri)
    run_spec(stopped, [callback])
    callback.set_tags({"fedbench.stopped_early": "after round 1"})  # as a sweep marks a trial ASHA stopped
    assert finished_run_hashes("skips", uri) == {done.run_hash}


def test_reading_a_store_leaves_the_process_recording_where_fedbench_results_says(mlflow_store, monkeypatch, tmp_path):
    """`fedbench.run` reads the store to skip finished runs; MLflow's search would otherwise leave
    MLFLOW_TRACKING_URI set to that store, and a notebook's later FEDBENCH_RESULTS would be ignored."""
    from fedbench.tracking.leaderboard import finished_run_hashes
    from fedbench.tracking.paths import tracking_uri

    first = tracking_uri()
    assert finished_run_hashes("no_such_experiment", first) == set()
    assert finished_run_hashes("no_such_experiment", first) == set()  # twice: the restored URI is set again
    monkeypatch.setenv("FEDBENCH_RESULTS", str(tmp_path / "elsewhere"))
    assert tracking_uri() != first and tracking_uri().endswith("elsewhere/mlflow.db")


def test_a_search_reads_like_a_search_its_samples_by_what_was_sampled_and_its_reference_marked():
    """Issue 33, item 3: sampled values with 17 digits and every method's parameters made the board unreadable."""
    from fedbench.tracking.leaderboard import to_table

    runs = synthetic_runs(
        [
            {
                "run_hash": "a",
                "algorithm.name": "feroma",
                "algorithm.tau": "0.11236203565420874",
                "algorithm.warmup_rounds": "3",
                "final.acc_local_mean": 0.81,
            },
            {
                "run_hash": "b",
                "algorithm.name": "feroma",
                "algorithm.tau": "0.04680559213273095",
                "algorithm.warmup_rounds": "2",
                "final.acc_local_mean": 0.86,
            },
            {
                "run_hash": "c",
                "algorithm.name": "fedavg",
                "tag:fedbench.search_reference": "true",
                "final.acc_local_mean": 0.78,
            },
        ]
    )
    board = build_leaderboard(runs, group_by=[])
    markdown = to_markdown(board)
    assert "| all | 1 | feroma tau=0.0468 warmup_rounds=2 | 0.8600 ± 0.0000 | – | 1 |" in markdown
    assert (
        "| all | 2 | feroma tau=0.112 warmup_rounds=3 |" in markdown and "| all | 3 | fedavg (reference) |" in markdown
    )
    assert "None" not in markdown
    assert board.table["configuration"].str.contains("tau=0.11236203565420874").any()  # the CSV keeps the full value
    from rich.console import Console

    console = Console(width=140, record=True)
    console.print(to_table(board, "search"))
    text = console.export_text()
    assert "feroma tau=0.0468 warmup_rounds=2" in text and "…" not in text  # readable in a terminal


def test_labels_cut_to_three_digits_only_while_they_stay_apart():
    from fedbench.tracking.leaderboard import readable

    assert readable(["fedprox mu=0.012345678", "fedprox mu=0.5"]) == ["fedprox mu=0.0123", "fedprox mu=0.5"]
    assert readable(["fedprox mu=0.012341", "fedprox mu=0.012349"]) == ["fedprox mu=0.012341", "fedprox mu=0.012349"]


def test_the_markdown_format_prints_markdown(recorded, capsys):
    assert main(["leaderboard", "--experiment", "board", "--format", "markdown"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("| group | rank | configuration |") and "┃" not in printed


def test_a_searchs_results_table_names_its_samples_and_ranks_by_its_metric(tmp_path):
    import yaml
    from rich.console import Console

    from fedbench.config import load_task
    from fedbench.core.callbacks import RunResult
    from fedbench.tracking.console import results_table
    from fedbench.tuning import load_search_space, make_plan

    (tmp_path / "task.yaml").write_text(yaml.safe_dump({**{k: v for k, v in TINY.items() if k != "task"}, "name": "s"}))
    (tmp_path / "space.yaml").write_text(
        yaml.safe_dump(
            {"name": "mu", "space": {"algorithm": {"fedprox": {"mu": {"loguniform": [0.001, 1.0]}}, "fedavg": {}}}}
        )
    )
    plan = make_plan(
        load_task(tmp_path / "task.yaml"), load_search_space(tmp_path / "space.yaml"), 2, "final.acc_system"
    )
    samples = [
        ({"algorithm.name": "fedprox", "algorithm.mu": 0.0123456789}, 0.7),
        ({"algorithm.name": "fedprox", "algorithm.mu": 0.5}, 0.9),
        ({"algorithm.name": "fedavg"}, 0.8),
    ]
    results = [
        RunResult(
            plan.spec_of({**config, "seed": 0}),
            "FINISHED",
            [],
            {"final.acc_system": score, "final.acc_local_mean": 0.1},
        )
        for config, score in samples
    ]
    console = Console(width=120, record=True)
    console.print(results_table(results, plan.metric, plan.mode, plan.space.references))
    text = console.export_text()
    rows = [line for line in text.splitlines() if "fedprox" in line or "fedavg" in line]
    assert [row.split("│")[1].strip() for row in rows] == ["fedprox mu=0.5", "fedavg (reference)", "fedprox mu=0.0123"]
    assert "acc_system mean" in text


def searched_runs(samples: list[tuple[dict, list[float]]]) -> pd.DataFrame:
    """A conditional search's child runs as `read_runs` returns them: every field of each method recorded as a param
    (None as "None", another method's fields NaN), the sampled ones as `search.*` tags, a reference tagged as one."""
    rows = []
    for algorithm, scores in samples:
        for seed, score in enumerate(scores):
            spec = tiny_spec(algorithm=algorithm, seed=seed, rounds=6)
            tags = (
                {f"tag:search.algorithm.{k}": str(v) for k, v in algorithm.items()}
                if len(algorithm) > 1
                else {"tag:fedbench.search_reference": "true"}
            )
            rows.append(
                {
                    **{k: str(v) for k, v in spec.flat().items()},
                    "run_hash": spec.run_hash,
                    **tags,
                    "final.acc_test_time": score,
                }
            )
    return synthetic_runs(rows)


def test_a_conditional_search_ranks_its_samples_by_what_was_sampled_beside_its_reference():
    """Issue 33, item 3: FEROMA's tau and warm-up, FedProx's mu and FedAvg as the reference, every method's every
    parameter recorded: one readable label per configuration, no column of parameters, best first, seeds pooled."""
    from rich.console import Console

    from fedbench.tracking.leaderboard import to_table

    runs = searched_runs(
        [
            ({"name": "feroma", "tau": 0.11236203565420874, "warmup_rounds": 3}, [0.80, 0.82]),
            ({"name": "feroma", "tau": 0.04680559213273095, "warmup_rounds": 2}, [0.84, 0.88]),
            ({"name": "fedprox", "mu": 0.0123456789}, [0.70, 0.70]),
            ({"name": "fedprox", "mu": 0.5}, [0.75, 0.77]),
            ({"name": "fedavg"}, [0.78, 0.78]),
        ]
    )
    board = build_leaderboard(runs, metric="final.acc_test_time", group_by=["dataset", "scenario"])
    assert list(board.table.columns) == [
        "group",
        "rank",
        "configuration",
        "mean",
        "std",
        "ci_low",
        "ci_high",
        "ci_kind",
        "n",
        "vs_best",
        "seeds_needed",
        "compute_s",
        "wall_s",
        "startup_s",
        "mb_up",
        "mb_down",
    ]
    assert list(board.table["configuration"]) == [  # the full values stay in CSV and parquet
        "feroma tau=0.04680559213273095 warmup_rounds=2",
        "feroma tau=0.11236203565420874 warmup_rounds=3",
        "fedavg (reference)",
        "fedprox mu=0.5",
        "fedprox mu=0.0123456789",
    ]
    assert list(board.table["n"]) == [2] * 5 and list(board.table["rank"]) == [1, 2, 3, 4, 5]
    markdown = to_markdown(board)
    assert "| all | 1 | feroma tau=0.0468 warmup_rounds=2 | 0.8600 ± 0.0283 | [0.6059, 1.0000] | 2 |" in markdown
    assert "| all | 3 | fedavg (reference) | 0.7800 ± 0.0000 | [0.7800, 0.7800] | 2 |" in markdown
    assert "| all | 5 | fedprox mu=0.0123 | 0.7000 ± 0.0000 | [0.7000, 0.7000] | 2 |" in markdown
    console = Console(width=120, record=True)
    console.print(to_table(board, "search"))
    text = console.export_text()
    assert "fedprox mu=0.5" in text and "None" not in text and "algori" not in text and "…" not in text


def test_configurations_the_seeds_cannot_tell_from_the_best_are_marked():
    """FedProx ranked above FedAvg at 0.880 vs 0.872 with std 0.08 and nothing said they were tied (issue 31, item
    3)."""
    rows = []
    for name, values in (
        ("fedprox", [0.80, 0.88, 0.96]),
        ("fedavg", [0.79, 0.87, 0.956]),
        ("local", [0.50, 0.52, 0.51]),
        ("ditto", [0.9]),
    ):
        rows += [
            {"run_hash": f"{name}{i}", "algorithm.name": name, "final.acc_local_mean": v} for i, v in enumerate(values)
        ]
    board = build_leaderboard(synthetic_runs(rows), group_by=[])
    marks = dict(zip(board.table["configuration"], board.table["vs_best"], strict=True))
    assert marks["ditto"] == "best"  # the highest mean, from one seed
    assert marks["fedprox"] == "? n=3" and marks["fedavg"] == "? n=3"  # nothing to test the best's one seed against
    board = build_leaderboard(synthetic_runs([r for r in rows if r["algorithm.name"] != "ditto"]), group_by=[])
    marks = dict(zip(board.table["configuration"], board.table["vs_best"], strict=True))
    assert marks["fedprox"] == "best" and marks["fedavg"].startswith("≈ p=") and marks["local"].startswith("worse p=")
    markdown = to_markdown(board)
    assert "| all | 2 | fedavg | 0.8720 ± 0.0830 | [0.6658, 1.0000] | 3 | ≈ p=0.9" in markdown
    assert "Welch's t-test" in markdown and "Holm" in markdown


def test_a_store_written_before_the_dot_ranks_beside_new_runs_and_old_metric_names_still_work():
    """Stores from before the summaries' rename hold `final/acc_local_mean`: read back, those runs carry
    `final.acc_local_mean` like new ones, and `--metric final/acc_local_mean` names the same column."""
    from fedbench.tracking.mlflow_store import fedbench_columns

    runs = pd.DataFrame(
        {
            "metrics.final/acc_local_mean": [0.5, np.nan],
            "metrics.final.acc_local_mean": [np.nan, 0.7],
            "metrics.total/comm_up_bytes": [10.0, np.nan],
            "metrics.acc_local_mean": [0.5, 0.7],
        }
    )
    read = fedbench_columns(runs)
    assert sorted(c for c in read if c in metric_columns(read)) == [
        "acc_local_mean",
        "final.acc_local_mean",
        "total.comm_up_bytes",
    ]
    assert read["final.acc_local_mean"].tolist() == [0.5, 0.7]
    assert M.canonical("final/acc_test_time") == "final.acc_test_time" == M.canonical("final.acc_test_time")


def test_wall_time_leaves_out_the_worker_start_up_which_gets_its_own_column():
    """The first run on a new pool paid the workers' start-up inside its wall time (13.7 s against 2.1 s for
    the same configuration): `wall_s` now leaves it out and `startup_s` shows it, so two seeds of one
    configuration cost alike whichever ran first."""
    runs = pd.DataFrame(
        {
            "run_hash": ["a", "b"],
            "seed": ["0", "1"],
            "algorithm.name": ["fedavg"] * 2,
            "status": ["FINISHED"] * 2,
            "start_time": pd.to_datetime([1, 2], unit="s"),
            "final.acc_local_mean": [0.8, 0.8],
            "total.time_run_s": [13.7, 2.1],
            "total.time_startup_s": [11.6, 0.0],
        }
    )
    board = build_leaderboard(runs, group_by=())
    (row,) = board.table.to_dict("records")
    assert row["wall_s"] == pytest.approx(2.1) and row["startup_s"] == pytest.approx(5.8)
    old = runs.drop(columns="total.time_startup_s")  # a store from before the start-up was recorded
    assert build_leaderboard(old, group_by=()).table["wall_s"][0] == pytest.approx((13.7 + 2.1) / 2)


def test_tie_marks_correct_for_the_number_of_comparisons_and_say_how_many_seeds_a_tie_needs():
    """Issue 44: five configurations against the best are five tests; uncorrected, a p of 0.03 among them reads as a
    difference by chance one time in four. Alone it is one test and stays a difference; first in Holm's order of
    five it is multiplied by five."""
    from scipy.stats import ttest_ind

    best = [0.90, 0.91, 0.92]
    close = [0.875, 0.885, 0.895]  # Welch p about 0.03 against the best
    rows = [{"run_hash": f"best{i}", "algorithm.name": "best", "final.acc_local_mean": v} for i, v in enumerate(best)]
    rows += [
        {"run_hash": f"close{i}", "algorithm.name": "close", "final.acc_local_mean": v} for i, v in enumerate(close)
    ]
    raw = float(ttest_ind(close, best, equal_var=False).pvalue)
    assert 0.01 < raw < 0.05
    alone = build_leaderboard(synthetic_runs(rows), group_by=[])
    assert alone.table.set_index("configuration").loc["close", "vs_best"] == f"worse p={raw:.3g}"
    for k in range(4):  # four more configurations the seeds cannot tell from the best
        rows += [
            {"run_hash": f"tie{k}{i}", "algorithm.name": f"tie{k}", "final.acc_local_mean": v - 0.001 * (k + 1)}
            for i, v in enumerate(best)
        ]
    board = build_leaderboard(synthetic_runs(rows), group_by=[]).table.set_index("configuration")
    assert board.loc["close", "vs_best"] == f"≈ p={min(1.0, 5 * raw):.3g}"  # first of five in Holm's order
    # the tie says how many seeds would tell it apart: the observed difference, the pooled std, alpha / 5
    spread = float(np.sqrt((np.var(close, ddof=1) + np.var(best, ddof=1)) / 2))
    assert board.loc["close", "seeds_needed"] == max(4, seeds_needed(0.025, spread, alpha=0.05 / 5))
    assert pd.isna(board.loc[board["vs_best"] == "best"].iloc[0]["seeds_needed"])
    interval = board.loc["close", ["ci_low", "ci_high"]].to_numpy(dtype=float)
    half = stats.t.ppf(0.975, 2) * np.std(close, ddof=1) / np.sqrt(3)
    assert interval == pytest.approx([0.885 - half, 0.885 + half]) and board.loc["close", "ci_kind"] == "t"


def test_a_run_still_in_progress_is_listed_as_not_finished_not_as_failed_with_no_reason():
    from fedbench.tracking.leaderboard import failed_runs
    from fedbench.tracking.store import RUN_HASH, RUN_LABEL, STATUS

    runs = pd.DataFrame(
        {STATUS: ["RUNNING", "FINISHED", "KILLED"], RUN_LABEL: ["a-s1", "a-s2", "b-s1"], RUN_HASH: ["h1", "h2", "h3"]}
    )
    listed = failed_runs(runs)
    assert list(listed["run"]) == ["a-s1", "b-s1"]
    assert (
        listed["reason"][0].startswith("not finished: still running")
        and listed["reason"][1] == "killed before it finished"
    )

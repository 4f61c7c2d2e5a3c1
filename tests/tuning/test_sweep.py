"""Sweeps on Ray Tune: trials in their own placement groups, several at once, one MLflow child run each."""

import io
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import yaml
from rich.console import Console

import fedbench.cli
from fedbench.cli import print_sweep
from fedbench.config import load_task
from fedbench.tuning import make_plan, run_sweep
from tests.conftest import TINY

pytestmark = pytest.mark.ray


def write_task(tmp_path, **changes):
    task = {
        **TINY,
        "name": "sweep_test",
        "resources": {"client_cpus": 0.5},
        "rounds": 2,
        "grid": {"algorithm": ["fedavg", "local"], "scenario.alpha": [0.3, 1.0, 3.0]},
        "seeds": [0],
        **changes,
    }
    task.pop("task")
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    return path


def test_a_grid_runs_as_concurrent_trials_each_inside_its_own_placement_group(tmp_path, mlflow_store, ray_session):
    import mlflow

    plan = make_plan(load_task(write_task(tmp_path)))
    specs = plan.specs
    assert len(specs) == 6
    outcome = run_sweep(plan, max_concurrent=2)
    assert sorted(r.status for r in outcome.results) == ["FINISHED"] * 6

    mlflow.set_tracking_uri(f"sqlite:///{mlflow_store}")
    runs = mlflow.search_runs(experiment_names=["sweep_test"])
    children = runs[runs["tags.mlflow.parentRunId"] == outcome.parent_run_id]
    assert len(children) == 6 and set(children["params.run_hash"]) == {s.run_hash for s in specs}
    assert (children["status"] == "FINISHED").all()
    groups = children["tags.trial.placement_group"]
    # two trials at once hold two groups; Tune hands a finished trial's process and group to the next trial
    assert groups.nunique() >= 2 and "None" not in set(groups)
    assert (
        children["tags.trial.worker_placement_groups"] == groups
    ).all()  # every client actor inside its trial's group
    assert set(children["tags.trial.client_cpus"]) == {"0.5"}
    assert children["metrics.final.acc_local_mean"].notna().all()
    from fedbench.tracking.mlflow_store import MlflowStore
    from fedbench.tracking.per_client import read_per_client  # each trial's per-client table, logged by the driver

    per_client = read_per_client(MlflowStore(f"sqlite:///{mlflow_store}"), children["run_id"].iloc[0])
    assert per_client is not None and len(per_client) == 2 * 4  # 2 rounds x 4 clients

    spans = sorted(zip(pd.to_datetime(children["start_time"]), pd.to_datetime(children["end_time"]), strict=True))
    assert any(
        later_start < end for (_, end), (later_start, _) in zip(spans, spans[1:], strict=True)
    )  # trials overlapped


SPACE = {
    "name": "prox_or_avg",
    "space": {
        "algorithm": {
            "fedprox": {"mu": {"loguniform": [0.001, 0.1]}},
            "fedavg": {"client_fraction": {"uniform": [0.5, 1.0]}},
        }
    },
}


@pytest.mark.mlflow_server
def test_an_optuna_search_logs_one_child_per_sample_and_its_study_views_to_a_real_mlflow_server(
    tmp_path, mlflow_server, monkeypatch, ray_session
):
    from mlflow.tracking import MlflowClient

    from fedbench.tuning import execute_sweep, load_search_space
    from fedbench.tuning.study_plots import VIEWS

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    task = load_task(write_task(tmp_path, grid={}))
    space_path = tmp_path / "space.yaml"
    space_path.write_text(yaml.safe_dump(SPACE))
    plan = make_plan(task, load_search_space(space_path), num_samples=4, metric="final.acc_local_mean")
    outcome = execute_sweep(task, plan, max_concurrent=2)

    client = MlflowClient(mlflow_server)
    experiment = client.get_experiment_by_name("sweep_test")
    children = client.search_runs([experiment.experiment_id], f"tags.mlflow.parentRunId = '{outcome.parent_run_id}'")
    assert len(children) == 4 and all(c.info.status == "FINISHED" for c in children)
    own = {"fedprox": {"search.algorithm.mu"}, "fedavg": {"search.algorithm.client_fraction"}}
    for child in children:
        algorithm = child.data.params["algorithm.name"]
        searched = {k for k in child.data.tags if k.startswith("search.")}
        assert searched == {"search.algorithm.name"} | own[algorithm]  # only the active algorithm's parameters
    best_value = max(c.data.metrics["final.acc_local_mean"] for c in children)
    assert outcome.best_value == pytest.approx(best_value)
    best = load_task(outcome.best_task)  # the best sample, as a task file that loads
    assert best.expand()[0].algorithm.name == outcome.best["algorithm.name"]
    views = {f"plots/optuna/{view}.png" for view in VIEWS}  # Optuna's views of the study, on the parent run
    assert views <= set(outcome.reported)
    assert {a.path for a in client.list_artifacts(outcome.parent_run_id, "plots/optuna")} == views


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_sweep_resumes_without_running_or_logging_finished_trials_twice(
    tmp_path, mlflow_store, ray_session, stop, monkeypatch
):
    """Ctrl-C and SIGTERM to the sweep's process group (`kill -- -PGID`, what `timeout`, systemd and Slurm send) both
    stop the sweep gracefully within seconds, and `--resume` finishes it (issue 32, item 7). SIGTERM once made Ray's
    handler exit at once with a stack dump; sent to the group it killed the local Ray's servers beside the sweep,
    which then waited a minute for its GCS and died without marking anything (issue 47, item 5)."""
    import mlflow

    # trials of 15 rounds (seconds each): a trial of 2 rounds now takes a fraction of a second in a warm sweep,
    # and all six could end before the interrupt below lands
    task_path = write_task(tmp_path, rounds=15)
    env = {**os.environ, "FEDBENCH_RESULTS": str(mlflow_store.parent), "RAY_AUTH_MODE": "disabled"}
    cli = subprocess.Popen(
        [sys.executable, "-m", "fedbench", "sweep", str(task_path), "--max-concurrent", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    mlflow.set_tracking_uri(f"sqlite:///{mlflow_store}")
    deadline = time.time() + 400
    while time.time() < deadline and cli.poll() is None:
        runs = mlflow.search_runs(experiment_names=["sweep_test"])
        if len(runs) and (runs["status"] == "FINISHED").sum() >= 2:  # two trials done, a third under way
            break
        time.sleep(1)
    assert cli.poll() is None, cli.stderr.read().decode()[-3000:]
    os.killpg(cli.pid, stop)  # to the group of the sweep this test started
    assert cli.wait(timeout=45) == 130, cli.stderr.read().decode()[-3000:]  # Ray waits 60 s for a lost GCS
    assert "SIGTERM received" not in cli.stderr.read().decode()
    before = mlflow.search_runs(experiment_names=["sweep_test"])
    finished_before = set(before.loc[(before["status"] == "FINISHED") & before["tags.fedbench.sweep"].isna(), "run_id"])

    plan = make_plan(load_task(task_path))
    outcome = run_sweep(plan, max_concurrent=2, resume=True)
    assert not outcome.interrupted and outcome.resumed_done >= 2
    runs = mlflow.search_runs(experiment_names=["sweep_test"])
    children = runs[runs["tags.mlflow.parentRunId"] == outcome.parent_run_id]
    assert len(runs[runs["tags.fedbench.sweep"].notna()]) == 1  # one parent, reused
    assert len(children) == 6 and sorted(children["params.run_hash"]) == sorted(s.run_hash for s in plan.specs)
    assert (children["status"] == "FINISHED").all() and children["metrics.final.acc_local_mean"].notna().all()
    assert finished_before <= set(children["run_id"])  # trials done before the interrupt kept their runs
    assert len(outcome.results) == 6 - outcome.resumed_done  # and were not run again
    said = io.StringIO()
    monkeypatch.setattr(fedbench.cli, "console", Console(file=said, width=200))
    print_sweep(plan, outcome)
    # its table has this attempt's runs only: the console says so and where every run is
    assert f"this attempt's {6 - outcome.resumed_done}" in said.getvalue()
    assert "fedbench leaderboard --experiment sweep_test" in said.getvalue()


def test_asha_schedules_on_the_per_round_metric_when_given_the_final_name(tmp_path, mlflow_store, ray_session):
    """`--metric final.acc_local_mean` is what the leaderboard ranks by; the rounds report `acc_local_mean`, which
    is what ASHA must compare (with the final name it never saw it and Tune failed the trials)."""
    import mlflow

    task = write_task(tmp_path, rounds=3, eval_every=2, grid={"optimizer.lr": [0.05, 0.0001]}, seeds=[0, 1])
    plan = make_plan(load_task(task), metric="final.acc_local_mean", scheduler="asha")
    outcome = run_sweep(plan, max_concurrent=2)
    assert len(outcome.results) == 4 and not outcome.interrupted
    mlflow.set_tracking_uri(f"sqlite:///{mlflow_store}")
    runs = mlflow.search_runs(experiment_names=["sweep_test"])
    children = runs[runs["tags.mlflow.parentRunId"] == outcome.parent_run_id]
    assert len(children) == 4 and (children["status"] == "FINISHED").all()
    assert children["metrics.final.acc_local_mean"].notna().all()


def test_two_sweeps_of_one_task_write_into_their_own_tune_folders(tmp_path, mlflow_store, ray_session):
    """Two sweeps of a task started together have the same name and attempt; each needs its own Tune folder."""
    plan = make_plan(load_task(write_task(tmp_path, grid={})))
    first, second = run_sweep(plan), run_sweep(plan)
    assert first.name == second.name and first.parent_run_id != second.parent_run_id
    assert first.storage != second.storage
    for outcome in (first, second):
        assert os.path.isdir(outcome.storage) and len(outcome.results) == 1


def test_a_resumed_search_continues_its_study_and_never_repeats_a_sample(tmp_path, mlflow_store, ray_session):
    """Interrupted after two of six samples, the resumed search draws four new ones (it used to re-seed TPE and
    run the same two again)."""
    import mlflow

    task_path = write_task(tmp_path, rounds=15, grid={})
    space_path = tmp_path / "space.yaml"
    space_path.write_text(yaml.safe_dump(SPACE))
    search = ["--search", str(space_path), "--num-samples", "6", "--metric", "final.acc_local_mean"]
    env = {**os.environ, "FEDBENCH_RESULTS": str(mlflow_store.parent), "RAY_AUTH_MODE": "disabled"}
    cli = subprocess.Popen(
        [sys.executable, "-m", "fedbench", "sweep", str(task_path), *search, "--max-concurrent", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    mlflow.set_tracking_uri(f"sqlite:///{mlflow_store}")
    deadline = time.time() + 400
    while time.time() < deadline and cli.poll() is None:
        runs = mlflow.search_runs(experiment_names=["sweep_test"])
        if len(runs) and (runs["status"] == "FINISHED").sum() >= 2:
            break
        time.sleep(1)
    assert cli.poll() is None, cli.stderr.read().decode()[-3000:]
    os.killpg(cli.pid, signal.SIGINT)
    assert cli.wait(timeout=120) == 130, cli.stderr.read().decode()[-3000:]

    from fedbench.tuning import load_search_space

    plan = make_plan(load_task(task_path), load_search_space(space_path), num_samples=6, metric="final.acc_local_mean")
    outcome = run_sweep(plan, max_concurrent=1, resume=True)
    assert not outcome.interrupted and outcome.resumed_done >= 2
    runs = mlflow.search_runs(experiment_names=["sweep_test"])
    children = runs[runs["tags.mlflow.parentRunId"] == outcome.parent_run_id]
    sampled = [c for c in children.columns if c.startswith("tags.search.")]
    samples = {tuple(row) for row in children[sampled].astype(str).itertuples(index=False)}
    assert len(children) == 6 and (children["status"] == "FINISHED").all()
    assert len(samples) == 6  # every sample distinct: none of the interrupted attempt's was drawn again


@pytest.mark.timeout(120)
def test_a_trial_the_cluster_could_never_hold_is_refused_before_it_starts(tmp_path, mlflow_store, ray_session):
    from fedbench.core.errors import ConfigError

    plan = make_plan(load_task(write_task(tmp_path, resources={"client_cpus": 100})))
    with pytest.raises(ConfigError, match=r"resources.client_cpus: got 100.*needs 100.5 CPU, 0 GPU.*has 2 CPU"):
        run_sweep(plan)


def test_a_search_runs_references_scores_samples_over_seeds_and_never_trains_a_configuration_twice(
    tmp_path, mlflow_store, ray_session
):
    """Issue 33, items 1, 2 and 6, through Tune: FedAvg (nothing to tune) runs once per seed as the reference, each
    sample runs on both seeds and is scored by their mean, and a second search answers what the first ran from the
    store."""
    import mlflow
    import optuna

    from fedbench.tracking.leaderboard import build_leaderboard, read_runs
    from fedbench.tuning import load_search_space
    from fedbench.tuning.study_plots import study_journal

    task = load_task(write_task(tmp_path, grid={}, seeds=[0, 1]))
    space_path = tmp_path / "space.yaml"
    space_path.write_text(
        yaml.safe_dump(
            {"name": "mu", "space": {"algorithm": {"fedprox": {"mu": {"categorical": [0.01, 0.1]}}, "fedavg": {}}}}
        )
    )
    plan = make_plan(task, load_search_space(space_path), num_samples=3, metric="final.acc_local_mean")
    first = run_sweep(plan, max_concurrent=2)
    assert not first.interrupted and all(r.status == "FINISHED" for r in first.results)

    mlflow.set_tracking_uri(f"sqlite:///{mlflow_store}")
    runs = mlflow.search_runs(experiment_names=["sweep_test"])
    children = runs[runs["tags.mlflow.parentRunId"] == first.parent_run_id]
    assert children["params.run_hash"].is_unique  # no configuration trained twice on one seed
    references = children[children["tags.fedbench.search_reference"] == "true"]
    assert sorted(references["params.seed"]) == ["0", "1"] and set(references["params.algorithm.name"]) == {"fedavg"}
    samples = children[children["tags.fedbench.search_reference"].isna()]
    assert set(samples["params.algorithm.name"]) == {"fedprox"} and len(samples) % 2 == 0  # each on both seeds
    study = optuna.load_study(
        study_name=plan.name,
        storage=optuna.storages.JournalStorage(
            optuna.storages.journal.JournalFileBackend(str(study_journal(plan.name)))
        ),
    )
    for trial in study.trials:  # each proposal's value is the mean of its configuration's two seeds
        mine = samples[samples["params.algorithm.mu"].astype(float) == trial.params["algorithm.mu"]]
        assert trial.value == pytest.approx(mine["metrics.final.acc_local_mean"].mean())

    again = make_plan(task, load_search_space(space_path), num_samples=4, metric="final.acc_local_mean")
    second = run_sweep(again, max_concurrent=2)  # a new study: its first proposals are the first search's
    assert second.reused >= 1
    everything = mlflow.search_runs(experiment_names=["sweep_test"])
    trained = everything[everything["tags.fedbench.sweep"].isna()]
    assert trained["params.run_hash"].is_unique  # across both searches
    board = build_leaderboard(read_runs("sweep_test", f"sqlite:///{mlflow_store}"), group_by=[]).table
    assert set(board["n"]) == {2}  # every configuration counted once per seed


def test_skip_finished_trains_only_what_the_store_holds_no_finished_run_of(
    tmp_path, mlflow_store, ray_session, monkeypatch
):
    """A grid partly run elsewhere (here by `fedbench run`; from another machine, by `fedbench unbundle`) goes on
    from there under --skip-finished, in a sweep of its own; a plain sweep would train it all again."""
    import fedbench

    plan = make_plan(load_task(write_task(tmp_path, grid={"algorithm": ["fedavg", "local"]})))
    elsewhere, left = plan.specs
    fedbench.run(elsewhere)
    outcome = run_sweep(plan, max_concurrent=2, skip_finished=True)
    assert outcome.skipped_finished == 1 and outcome.resumed_done == 0 and not outcome.interrupted
    assert [r.spec.run_hash for r in outcome.results] == [left.run_hash]
    said = io.StringIO()
    monkeypatch.setattr(fedbench.cli, "console", Console(file=said, width=200))
    print_sweep(plan, outcome)
    assert "already held a finished run of 1 of the configurations" in said.getvalue()


def test_skip_finished_is_refused_for_a_search_before_ray_starts(tmp_path):
    from fedbench.core.errors import ConfigError
    from fedbench.tuning import load_search_space

    space_path = tmp_path / "space.yaml"
    space_path.write_text(yaml.safe_dump(SPACE))
    plan = make_plan(
        load_task(write_task(tmp_path, grid={})),
        load_search_space(space_path),
        num_samples=2,
        metric="final.acc_local_mean",
    )
    with pytest.raises(ConfigError, match="--skip-finished"):
        run_sweep(plan, skip_finished=True)

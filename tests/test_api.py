"""The Python API (`fedbench.run`, `fedbench.sweep`, `fedbench.leaderboard`), as a notebook uses it."""

import subprocess
import sys

import pytest
from mlflow.tracking import MlflowClient

import fedbench
from fedbench.core.errors import ConfigError
from tests.conftest import TINY, tiny_spec

TASK = {**{k: v for k, v in TINY.items() if k != "task"}, "name": "api_task"}


def test_import_fedbench_loads_neither_torch_ray_nor_mlflow():
    code = "import sys, fedbench; print(sorted({'torch', 'ray', 'mlflow', 'pandas'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_run_records_the_users_algorithm_under_the_name_as_written_and_ranks_it(isolated_results, mlflow_store):
    results = fedbench.run("examples/my_algorithm.yaml", backend="serial", optimizer__lr=0.1)
    assert [r.status for r in results] == ["FINISHED", "FINISHED"]

    client = MlflowClient(f"sqlite:///{mlflow_store}")
    runs = client.search_runs([client.get_experiment_by_name("my_algorithm").experiment_id])
    assert {r.data.params["algorithm.name"] for r in runs} == {"fedavg", "examples.my_algorithm:ServerLrFedAvg"}
    assert {r.data.params["optimizer.lr"] for r in runs} == {"0.1"}

    board = fedbench.leaderboard("examples/my_algorithm.yaml")
    assert set(board["configuration"]) == {"fedavg", "examples.my_algorithm:ServerLrFedAvg server_lr=0.5"}
    assert list(board["n"]) == [1, 1] and board.attrs["failed"].empty
    assert board.equals(fedbench.leaderboard("my_algorithm", group_by="dataset,scenario"))


def test_run_of_a_runspec_gives_its_one_result_and_track_false_records_nothing(isolated_results):
    result = fedbench.run(tiny_spec(), track=False, overrides=["rounds=1"])
    assert result.status == "FINISHED" and result.spec.rounds == 1
    assert not (isolated_results / "mlflow.db").exists()


def test_run_of_a_task_mapping_takes_task_keys_as_keywords(isolated_results):
    results = fedbench.run(TASK, track=False, seeds=[0, 1], rounds=1, grid__algorithm=["local"])
    assert [(r.spec.algorithm.name, r.spec.seed) for r in results] == [("local", 0), ("local", 1)]


def test_bad_input_raises_a_config_error_naming_the_field_before_anything_runs(isolated_results):
    with pytest.raises(ConfigError, match="algorithm.name: got 'fedsgd'"):
        fedbench.run(TASK, algorithm__name="fedsgd")
    with pytest.raises(ConfigError, match="task: got 42"):
        fedbench.run(42)


def test_sweep_goes_through_the_function_the_command_uses(tmp_path, monkeypatch, capsys):
    """The API and `fedbench sweep` plan the same sweep and hand it to the same function."""
    import yaml

    from fedbench.cli import main
    from fedbench.tuning import launch
    from fedbench.tuning.sweep import SweepOutcome

    plans = []

    def fake_run_sweep(
        plan, max_concurrent=None, address=None, resume=False, max_failures=None, checkpoint_every=None, **rest
    ):
        plans.append((plan, max_concurrent, resume, max_failures, checkpoint_every))
        return SweepOutcome(plan.name, "parent", "storage")

    monkeypatch.setattr(launch, "run_sweep", fake_run_sweep)
    reports = []
    monkeypatch.setattr(launch, "report_sweep", lambda uri, experiment, parent, *rest: reports.append(parent) or [])
    path = tmp_path / "api_task.yaml"
    path.write_text(yaml.safe_dump({**TASK, "grid": {"algorithm": ["fedavg", "local"]}, "max_failures": 2}))
    outcome = fedbench.sweep(path, max_concurrent=2, resume=True, rounds=3)
    assert main(["sweep", str(path), "--max-concurrent", "2", "--resume", "--set", "rounds=3"]) == 0
    assert main(["sweep", str(path), "--max-failures", "0", "--checkpoint-every", "3", "--set", "rounds=3"]) == 0
    (api_plan, *api_options), (cli_plan, *cli_options), (_, *flag_options) = plans
    assert api_plan == cli_plan and api_options == cli_options == [2, True, 2, 5]  # the task's max_failures
    assert flag_options == [None, False, 0, 3]  # --max-failures wins over the task's
    assert reports == ["parent", "parent", "parent"]  # each leaves the task, leaderboard and plots on the parent run
    assert outcome.name == api_plan.name and len(api_plan.specs) == 2 and api_plan.specs[0].rounds == 3

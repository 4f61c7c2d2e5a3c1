"""A sweep's plan and its surroundings are checked before any trial starts."""

from pathlib import Path

import pytest

from fedbench.cli import main
from fedbench.core.errors import ConfigError
from fedbench.tracking.paths import check_tracking_uri
from fedbench.tracking.ui import free_port
from fedbench.tuning.sweep import check_ray_address
from tests.conftest import tiny_spec


def test_an_unreachable_tracking_server_is_refused_at_once():
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(ConfigError) as info:
        check_tracking_uri(uri)
    assert "MLFLOW_TRACKING_URI" in str(info.value) and uri in str(info.value)
    check_tracking_uri("sqlite:////tmp/anything.db")  # a local store needs no server


def test_a_search_dry_run_checks_the_space_and_runs_nothing(capsys):
    code = main(
        [
            "sweep",
            "tasks/feddrm_tune.yaml",
            "--search",
            "search_spaces/feddrm_lambda.yaml",
            "--num-samples",
            "8",
            "--metric",
            "final.acc_system",
            "--dry-run",
        ]
    )
    assert code == 0 and "8 Optuna samples of feddrm_lambda" in capsys.readouterr().out


def test_a_search_without_a_metric_exits_with_the_reason(capsys):
    code = main(
        ["sweep", "tasks/feddrm_tune.yaml", "--search", "search_spaces/feddrm_lambda.yaml", "--num-samples", "8"]
    )
    assert code == 2 and "--metric: got None" in capsys.readouterr().out


def test_an_unreachable_ray_address_is_refused_before_any_trial(capsys):
    address = f"127.0.0.1:{free_port()}"  # nothing listens there; ray.init would wait for minutes
    code = main(["sweep", "tasks/quickstart.yaml", "--address", address])
    out = capsys.readouterr().out
    assert code == 2 and "--address" in out and address in out, out
    with pytest.raises(ConfigError, match="HOST:PORT"):
        check_ray_address("no-port-here")
    check_ray_address("auto")  # left to Ray, which answers at once


def test_a_trial_is_told_grid_or_search_by_its_plan_alone(tmp_path):
    import yaml

    from fedbench.config import load_task
    from fedbench.tuning import load_search_space, make_plan

    task = load_task("tasks/quickstart.yaml")
    grid = make_plan(task).spec_of
    spec = task.expand()[0]
    assert grid.trial_key({"run": spec.to_dict()}, "trial_1") == spec.run_hash  # the same in every attempt
    assert grid.sampled({"run": spec.to_dict()}) == {}
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump({"name": "lr", "space": {"optimizer.lr": {"loguniform": [0.001, 0.1]}}}))
    search = make_plan(task, load_search_space(space), num_samples=2, metric="final.acc_local_mean").spec_of
    sample = {"optimizer.lr": 0.01, "seed": 1}
    assert search.trial_key(sample, "trial_1") == search(sample).run_hash  # a sample is its run, in any attempt
    assert search.sampled(sample) == {"optimizer.lr": 0.01}  # the seed is the task's, not sampled
    assert search(sample).optimizer.lr == 0.01 and search(sample).seed == 1
    named = search({"optimizer.lr": 0.012345678, "seed": 1})  # named by its sample, not its hash (issue 47, item 10)
    assert named.label == f"{task.expand()[0].algorithm.name}-lr0.0123-s1"


@pytest.mark.parametrize("value", ["0", "-1"])
def test_max_concurrent_below_one_is_refused_naming_the_option(capsys, value):
    code = main(["sweep", "tasks/quickstart.yaml", "--max-concurrent", value, "--dry-run"])
    out = capsys.readouterr().out
    assert code == 2 and f"--max-concurrent: got {value}" in out, out


def test_max_failures_below_zero_is_refused_naming_the_option_or_the_task_field(tmp_path, capsys):
    code = main(["sweep", "tasks/quickstart.yaml", "--max-failures", "-1", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 2 and "--max-failures: got -1" in out and "an integer >= 0" in out, out
    task = tmp_path / "task.yaml"
    task.write_text(Path("tasks/quickstart.yaml").read_text() + "\nmax_failures: two\n")
    code = main(["sweep", str(task), "--dry-run"])
    out = capsys.readouterr().out
    assert code == 2 and "max_failures: got 'two'" in out, out


def test_a_search_space_reaching_lr_zero_is_refused_by_the_fields_own_check(tmp_path, capsys):
    space = tmp_path / "zero.yaml"
    space.write_text("name: zero\nspace:\n  optimizer.lr: {uniform: [0, 0.1]}\n")
    code = main(
        [
            "sweep",
            "tasks/quickstart.yaml",
            "--search",
            str(space),
            "--num-samples",
            "2",
            "--metric",
            "final.acc_local_mean",
            "--dry-run",
        ]
    )
    out = capsys.readouterr().out
    assert code == 2 and "optimizer.lr" in out and "learning rate > 0" in out, out


def test_a_bad_checkpoint_interval_is_refused_before_anything_runs(capsys):
    from fedbench.cli import main

    assert main(["sweep", "tasks/quickstart.yaml", "--checkpoint-every", "-2", "--dry-run"]) == 2
    assert (
        "--checkpoint-every: got -2; allowed: a whole number of rounds >= 0 (0: no checkpoints)"
        in capsys.readouterr().out
    )
    assert main(["run", "tasks/quickstart.yaml", "--checkpoint-every", "-1"]) == 2


def test_a_max_concurrent_the_cpus_cannot_hold_is_named_with_the_setting_that_would_fit_it():
    from fedbench.tuning.resources import concurrency_note, for_trial, trials_at_once

    spec = for_trial(tiny_spec())  # 0.5 CPU for the driver, one client worker of 1 CPU: 1.5 a trial
    assert trials_at_once([spec], cpus=2) == 1 and trials_at_once([spec], cpus=3) == 2
    note = concurrency_note(2, [spec], cpus=2)
    assert note.startswith("--max-concurrent 2: 1 trial at a time fits 2 CPUs") and "resources.client_cpus" in note
    assert concurrency_note(2, [spec], cpus=3) is None and concurrency_note(None, [spec], cpus=2) is None
    assert concurrency_note(4, [spec], cpus=2, trials=1) is None  # one trial: nothing runs beside it anyway
    assert concurrency_note(4, [spec], cpus=2, trials=3).startswith("--max-concurrent 4: 1 trial")
    halved = for_trial(tiny_spec(resources={"client_cpus": 0.5}))
    assert concurrency_note(2, [halved], cpus=2) is None  # the setting it names does fit two

"""The `fedbench` command end to end, in a subprocess as a user runs it."""

import os
import subprocess
import sys

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.conftest import TINY


def fedbench(*args, env_results):
    env = {**os.environ, "FEDBENCH_RESULTS": str(env_results)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "fedbench.cli", *args], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["serial", pytest.param("ray", marks=pytest.mark.ray)])
def test_run_continues_past_a_failing_run_and_prints_a_table(tmp_path, isolated_results, mlflow_store, backend):
    task = {k: v for k, v in TINY.items() if k != "task"}
    task.update(name="cli_task", seeds=[0], grid={"optimizer.lr": [1.0e30, 0.05]})
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    proc = fedbench("run", str(path), "--set", "rounds=2", "--backend", backend, env_results=isolated_results)
    assert proc.returncode == 1, proc.stderr  # one run failed
    assert "fedbench results" in proc.stdout and "failed runs" in proc.stdout
    assert "ClientDivergedError" in proc.stdout
    client = MlflowClient(f"sqlite:///{isolated_results / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("cli_task")
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.status for r in runs) == ["FAILED", "FINISHED"]  # the failure came first
    assert {r.data.params["resources.backend"] for r in runs} == {backend}


def test_bad_input_exits_2_with_the_field_named(tmp_path, isolated_results):
    proc = fedbench("run", "tasks/quickstart.yaml", "--set", "algorithm.name=fedsgd", env_results=isolated_results)
    assert proc.returncode == 2
    assert "algorithm.name: got 'fedsgd'" in proc.stdout and "fedavg" in proc.stdout


def test_list_shows_every_registry(isolated_results):
    proc = fedbench("list", env_results=isolated_results)
    assert proc.returncode == 0, proc.stderr
    for name in ("digits", "synthetic", "mnist", "cifar100", "lenet5", "resnet18", "fedavg", "local", "dirichlet"):
        assert name in proc.stdout


@pytest.mark.slow
def test_scenario_show_prints_tables_and_writes_a_png(tmp_path, isolated_results):
    task = {
        "name": "show_task",
        "dataset": "digits",
        "model": {"name": "mlp", "hidden": [16]},
        "scenario": {"partition": "dirichlet", "alpha": 0.5, "num_clients": 6},
        "rounds": 3,
        "seeds": [0, 1],
    }
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    out = tmp_path / "heat.png"
    proc = fedbench(
        "scenario", "show", str(path), "--rounds", "1,3", "--run", "1", "--out", str(out), env_results=isolated_results
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 runs; showing run 1" in proc.stdout
    assert "round 1" in proc.stdout and "round 3" in proc.stdout and "6 clients" in proc.stdout
    assert "Jensen-Shannon" in proc.stdout and str(out) in proc.stdout.replace("\n", "")
    assert out.read_bytes().startswith(b"\x89PNG")


def test_scenario_show_rejects_rounds_and_runs_out_of_range(tmp_path, capsys):
    from fedbench.cli import main

    task = {"dataset": "digits", "model": "mlp", "scenario": {"partition": "dirichlet", "num_clients": 6}, "rounds": 3}
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    assert main(["scenario", "show", str(path), "--rounds", "1,4"]) == 2
    out = capsys.readouterr().out
    assert "--rounds: got 4" in out and "1..3" in out
    assert main(["scenario", "show", str(path), "--run", "1"]) == 2
    out = capsys.readouterr().out
    assert "--run: got 1" in out and "0..0" in out and "the task has 1 run)" in out


def test_sweep_dry_run_lists_the_configurations_and_their_count(capsys):
    from fedbench.cli import main

    assert main(["sweep", "tasks/feroma_drift.yaml", "--dry-run", "--set", "seeds=[42]"]) == 0
    out = capsys.readouterr().out
    assert "468 configurations, 36 data configurations" in out  # 12 presets x 3 drift frequencies x 13 algorithms
    assert "... 408 more (--all lists every run)" in out  # the first 50 rows and the last 10
    assert "│ 200 " not in out and "│ 467 " in out  # a middle row left out, the last one listed
    assert main(["sweep", "tasks/feroma_drift.yaml", "--dry-run", "--all", "--set", "seeds=[42]"]) == 0
    out = capsys.readouterr().out
    assert "│ 200 " in out and "more (--all" not in out
    assert main(["sweep", "tasks/feroma_drift.yaml", "--all"]) == 2  # nothing to list: refused before anything runs
    assert "--all" in capsys.readouterr().out


def test_profile_picks_a_task_files_scale_and_an_unknown_one_is_refused(tmp_path, capsys):
    from fedbench.cli import main

    task = {k: v for k, v in TINY.items() if k != "task"}
    task.update(name="suite", seeds=[0, 1], grid={"algorithm": ["fedavg", "local"]}, profiles={"smoke": {"seeds": [0]}})
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(task))
    assert main(["run", str(path), "--dry-run"]) == 0
    assert main(["sweep", str(path), "--dry-run", "--profile", "smoke"]) == 0
    out = capsys.readouterr().out
    assert "task suite: 4 runs" in out and "task suite-smoke: 2 configurations" in out
    assert main(["run", str(path), "--dry-run", "--profile", "huge"]) == 2
    assert "profile" in capsys.readouterr().out


def test_list_shows_what_each_method_can_do_beyond_the_core(capsys):
    from fedbench.cli import main

    assert main(["list", "algorithms", "fedrep"]) == 0  # its heads stay on the clients: no test-time rule
    assert "capabilities: StreamedAggregation, SystemVote, PersonalModels" in capsys.readouterr().out
    assert main(["list", "algorithms", "local"]) == 0
    assert "capabilities: FunctionalFit\n" in capsys.readouterr().out  # only the vectorised fit beyond the core
    assert main(["list", "algorithms", "gossip"]) == 0
    assert "capabilities: TestTimeAssignment, SystemVote, PersonalModels, PeerRelay" in capsys.readouterr().out
    assert main(["list", "algorithms"]) == 0
    assert "┃ capabilities " in capsys.readouterr().out  # a column of the table


def test_list_shows_each_parameter_with_its_default_and_paper_section(capsys):
    from fedbench.cli import main

    assert main(["list", "algorithms", "feroma"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "warmup_rounds" in out and "002 App. B.5" in out and "client_fraction" in out
    assert main(["list", "partition", "dirichlet"]) == 0  # singular kinds work too
    out = " ".join(capsys.readouterr().out.split())
    assert "alpha" in out and "0.5" in out and "004 Sec. 5: 0.3" in out
    assert main(["list", "datasets", "digits"]) == 0
    assert "share of each class marked 'test'" in " ".join(capsys.readouterr().out.split())
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "scenario presets" in out and "test_fraction" in out
    assert main(["list", "algorithms", "nosuch"]) == 2


def test_run_refuses_an_unreachable_tracking_server_at_once(tmp_path, isolated_results):
    """MLflow retries an unreachable server for minutes; `run` checks it before any run, as `sweep` does."""
    uri = "http://127.0.0.1:1"
    env = {**os.environ, "FEDBENCH_RESULTS": str(isolated_results), "MLFLOW_TRACKING_URI": uri}
    task = {**{k: v for k, v in TINY.items() if k != "task"}, "name": "cli_unreachable", "rounds": 1}
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    proc = subprocess.run(
        [sys.executable, "-m", "fedbench.cli", "run", str(path)], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "MLFLOW_TRACKING_URI" in proc.stdout and uri in proc.stdout


def test_run_skips_runs_already_finished_unless_rerun_and_has_a_dry_run(
    tmp_path, isolated_results, mlflow_store, capsys
):
    from fedbench.cli import main

    task = {
        **{k: v for k, v in TINY.items() if k != "task"},
        "name": "cli_again",
        "rounds": 1,
        "grid": {"optimizer.lr": [0.05, 0.1]},
    }
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    assert main(["run", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "2 runs, 2 data configurations" in out and "fedavg-l0.05-s0" in out  # the name says what varies
    assert main(["run", str(path)]) == 0
    client = MlflowClient(f"sqlite:///{isolated_results / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("cli_again").experiment_id
    assert len(client.search_runs([experiment])) == 2
    capsys.readouterr()
    path.write_text(yaml.safe_dump({**task, "grid": {"optimizer.lr": [0.05, 0.2]}}))
    assert main(["run", str(path)]) == 0  # one done, one new
    out = capsys.readouterr().out
    assert "skipping 1 of 2 runs already finished" in out
    assert "[1/1] fedavg-l0.2-s0" in out  # counted among the runs that run, not the task's
    assert len(client.search_runs([experiment])) == 3
    assert main(["run", str(path), "--rerun"]) == 0
    assert len(client.search_runs([experiment])) == 5


def test_a_warning_reads_as_one_line_without_pythons_source_location(tmp_path, capsys):
    from fedbench.cli import main

    task = {k: v for k, v in TINY.items() if k != "task"}
    task.update(name="warned", algorithm="pfedme")  # TINY trains with momentum 0.9, which pFedMe ignores
    path = tmp_path / "warned.yaml"
    path.write_text(yaml.safe_dump(task))
    assert main(["run", str(path), "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert err.count("warning: pFedMe ignores optimizer.momentum = 0.9") == 1
    assert "UserWarning" not in err and "parse.py" not in err
    # beside other methods the momentum is the task's for them: no warning (issue 47, item 11), others still said
    task.update(algorithm="fedavg", grid={"algorithm": ["pfedme", "fedavg", {"name": "feroma", "warmup_rounds": 2}]})
    path.write_text(yaml.safe_dump(task))
    assert main(["run", str(path), "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "pFedMe ignores" not in err and err.count("warning: ") == 1 and "warmup_rounds" in err, err


def test_an_error_quoting_brackets_prints_them_as_written(capsys):
    """The error printer escapes what it quotes: rich markup in a value neither crashes it ('[/bold]' closed no
    tag: MarkupError) nor vanishes from the message ('[nan]' printed as nothing) (issue 32, item 2)."""
    from fedbench.cli import main

    assert main(["run", "tasks/quickstart.yaml", "--dry-run", "--set", "name='[/bold]'"]) == 2
    assert "error: name: got '[/bold]'; allowed:" in capsys.readouterr().out
    normalize = "normalize={mode: values, mean: [0.5], std: [-1.0]}"
    assert main(["run", "tasks/quickstart.yaml", "--dry-run", "--set", normalize]) == 2
    assert "error: normalize.std: got [-1.0]; allowed: standard deviations > 0" in capsys.readouterr().out

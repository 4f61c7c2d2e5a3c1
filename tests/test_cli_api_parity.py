"""Each `fedbench` command and its twin in `fedbench.api` do the same work: both run on the same tiny task, each
into a results folder (and MLflow store) of its own, and what they recorded, skipped and wrote is compared."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from fedbench import api
from fedbench.cli import main
from fedbench.core.errors import ConfigError
from tests.conftest import TINY

TASK = {
    **{k: v for k, v in TINY.items() if k != "task"},
    "name": "parity",
    "rounds": 1,
    "grid": {"optimizer.lr": [0.05, 0.1]},
}

TIMES = ("compute_s", "wall_s", "startup_s")
"""Leaderboard columns in seconds: never the same twice."""


@pytest.fixture(scope="module")
def stores(tmp_path_factory, migrated_store) -> tuple[Path, dict[str, Path]]:
    """The task file, run once by `fedbench run` into folder "cli" and once by `fedbench.run` into folder "api"."""
    root = tmp_path_factory.mktemp("parity")
    task = root / "parity.yaml"
    task.write_text(yaml.safe_dump(TASK))
    folders = {"cli": root / "cli", "api": root / "api"}
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FEDBENCH_CACHE", str(root / "cache"))
        for folder in folders.values():
            folder.mkdir()
            shutil.copy(migrated_store, folder / "mlflow.db")
        use(patch, folders["cli"])
        assert main(["run", str(task), "--backend", "serial"]) == 0
        use(patch, folders["api"])
        assert [r.status for r in api.run(task, backend="serial")] == ["FINISHED", "FINISHED"]
    return task, folders


def use(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Commands and API calls from now on read and write `folder` and its store."""
    monkeypatch.setenv("FEDBENCH_RESULTS", str(folder))


def recorded(folder: Path) -> list[tuple[str, str, dict[str, float]]]:
    """(run hash, status, metrics other than timings) of every run in the folder's store, by run hash."""
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(TASK["name"]).experiment_id])
    return sorted(
        (
            (r.data.params["run_hash"], r.info.status, {k: v for k, v in r.data.metrics.items() if "time_" not in k})
            for r in runs
        ),
        key=lambda r: r[:2],
    )


def test_run_records_the_same_runs_and_metrics(stores):
    _, folders = stores
    cli, from_api = recorded(folders["cli"]), recorded(folders["api"])
    assert [(h, s) for h, s, _ in cli] == [(h, s) for h, s, _ in from_api]
    assert len({h for h, _, _ in cli}) == 2 and {s for _, s, _ in cli} == {"FINISHED"}
    for (_, _, cli_metrics), (_, _, api_metrics) in zip(cli, from_api, strict=True):
        assert cli_metrics.keys() == api_metrics.keys() and "final.acc_local_mean" in cli_metrics
        assert cli_metrics == api_metrics  # the same seeds: the same numbers, bit for bit


def test_a_second_run_skips_the_finished_runs_and_rerun_runs_them_again(stores, monkeypatch, capsys):
    task, folders = stores
    before = {side: len(recorded(folder)) for side, folder in folders.items()}
    use(monkeypatch, folders["cli"])
    assert main(["run", str(task)]) == 0
    cli_out = capsys.readouterr().out
    use(monkeypatch, folders["api"])
    assert api.run(task) == []
    api_out = capsys.readouterr().out
    for out, folder in ((cli_out, folders["cli"]), (api_out, folders["api"])):
        assert f"skipping 2 of 2 runs already finished in sqlite:///{folder}" in " ".join(out.split())
    assert {side: len(recorded(folder)) for side, folder in folders.items()} == before
    use(monkeypatch, folders["cli"])
    assert main(["run", str(task), "--rerun"]) == 0
    use(monkeypatch, folders["api"])
    assert len(api.run(task, rerun=True)) == 2
    assert {side: len(recorded(folder)) for side, folder in folders.items()} == {
        "cli": before["cli"] + 2,
        "api": before["api"] + 2,
    }
    assert [h for h, _, _ in recorded(folders["cli"])] == [h for h, _, _ in recorded(folders["api"])]


def test_dry_run_lists_the_runs_the_api_plans(stores, capsys):
    task, _ = stores
    assert main(["run", str(task), "--dry-run"]) == 0
    out = capsys.readouterr().out
    specs = api.plan_run(task).expand()
    assert "task parity: 2 runs" in out and all(s.run_name in out for s in specs)


def test_leaderboard_ranks_the_same_rows_and_writes_the_same_files(stores, monkeypatch):
    task, folders = stores
    use(monkeypatch, folders["cli"])
    assert main(["leaderboard", str(task), "--format", "csv"]) == 0
    use(monkeypatch, folders["api"])
    board = api.leaderboard(task, fmt="csv")
    names = {side: sorted(p.name for p in (folder / "leaderboards").iterdir()) for side, folder in folders.items()}
    assert names["cli"] == names["api"] == ["parity.csv", "parity.md", "parity.parquet"]
    assert sorted(p.name for p in board.attrs["files"]) == names["api"]
    tables = {
        side: pd.read_parquet(folder / "leaderboards" / "parity.parquet").drop(columns=list(TIMES))
        for side, folder in folders.items()
    }
    pd.testing.assert_frame_equal(tables["cli"], tables["api"])
    assert list(tables["api"]["rank"]) == [1, 2] and list(board["configuration"]) == list(
        tables["cli"]["configuration"]
    )


def test_export_writes_the_same_per_round_table(stores, monkeypatch):
    task, folders = stores
    use(monkeypatch, folders["cli"])
    assert main(["export", "--task", str(task)]) == 0
    use(monkeypatch, folders["api"])
    table = api.export(task)
    assert table.attrs["path"] == folders["api"] / "exports" / "parity-rounds.csv"
    tables = {}
    for side, folder in folders.items():
        written = pd.read_csv(folder / "exports" / "parity-rounds.csv")
        tables[side] = written[~written["metric"].str.contains("time_")].reset_index(drop=True)
    pd.testing.assert_frame_equal(tables["cli"], tables["api"])
    assert set(tables["api"]["run_hash"]) == {h for h, _, _ in recorded(folders["api"])}


def test_plot_draws_the_same_figures_and_heatmap(stores, monkeypatch, capsys):
    task, folders = stores
    use(monkeypatch, folders["cli"])
    assert main(["plot", str(task)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    use(monkeypatch, folders["api"])
    plots = api.plot(task)
    names = {side: sorted(p.name for p in (folder / "plots" / "parity").iterdir()) for side, folder in folders.items()}
    assert names["cli"] == names["api"] == sorted(p.name for p in plots.files)
    assert all(f"{value:.4f}" in out for value in plots.heatmap.to_numpy().ravel())


def test_list_shows_what_the_api_lists(capsys):
    assert main(["list"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    listing = api.listing()
    assert list(listing)[-1] == "presets" and all(
        entry.name in out for entries in listing.values() for entry in entries
    )
    assert main(["list", "algorithm", "fedprox"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    [(kind, [entry])] = api.listing("algorithm", "fedprox").items()
    assert kind == "algorithms" and entry.parameters and all(p.name in out for p in entry.parameters)


def test_scenario_show_draws_the_same_heatmap(stores, tmp_path, capsys):
    task, _ = stores
    assert main(["scenario", "show", str(task), "--run", "1", "--out", str(tmp_path / "cli.png")]) == 0
    assert "showing run 1" in capsys.readouterr().out
    view = api.show_scenario(task, run_index=1, out=tmp_path / "api.png")
    assert view.index == 1 and view.runs == 2 and view.rounds == [1]
    assert (tmp_path / "cli.png").read_bytes() == view.path.read_bytes()


@pytest.mark.parametrize(
    "argv, call",
    [
        (["plot", "--experiment", "x", "--dpi", "0"], lambda task: api.plot("x", dpi=0)),
        (["plot", "--experiment", "x", "--format", "png,gif"], lambda task: api.plot("x", formats="png,gif")),
        (
            ["sweep", "{task}", "--max-concurrent", "0", "--dry-run"],
            lambda task: api.plan_sweep(task, max_concurrent=0),
        ),
        (["scenario", "show", "{task}", "--rounds", "1,4"], lambda task: api.show_scenario(task, rounds="1,4")),
        (["scenario", "show", "{task}", "--run", "2"], lambda task: api.show_scenario(task, run_index=2)),
        (["leaderboard", "--experiment", "nosuch"], lambda task: api.leaderboard("nosuch")),
    ],
)
def test_bad_input_is_refused_with_the_same_message(argv, call, tmp_path, capsys):
    task = tmp_path / "parity.yaml"
    task.write_text(yaml.safe_dump(TASK))
    assert main([a.format(task=task) for a in argv]) == 2
    out = " ".join(capsys.readouterr().out.split())
    with pytest.raises(ConfigError) as error:
        call(task)
    assert f"error: {error.value}" in out

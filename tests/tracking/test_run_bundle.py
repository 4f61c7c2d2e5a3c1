"""A bundle carries an experiment's finished runs from one real MLflow store to another: whole (statuses, params, tags,
metric histories, per-client artifacts, the same leaderboard), once, under the destination's sweep parent, and naming
no path of the store it came from."""

from __future__ import annotations

import io
import json
import lzma
import shutil
import tarfile
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from fedbench import api
from fedbench.cli import main
from fedbench.core.errors import ConfigError
from fedbench.runtime import run_spec
from fedbench.tracking.mlflow_callback import MlflowCallback
from fedbench.tracking.run_bundle import DROPPED_TAGS, PATH_PARAMS
from fedbench.tracking.sweep_runs import SweepRuns
from fedbench.tracking.tags import BUNDLED_FROM_TAG, LEASE_TAG, PARENT_RUN_TAG, SWEEP_TAG, TRIAL_KEY_TAG
from tests.conftest import tiny_spec

EXPERIMENT = "bundled"
TIMES = ("compute_s", "wall_s", "startup_s")


def store(folder: Path, migrated_store: Path) -> str:
    """An empty, migrated sqlite store in `folder`; its URI."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(migrated_store, folder / "mlflow.db")
    return f"sqlite:///{folder / 'mlflow.db'}"


@pytest.fixture(scope="module")
def source(tmp_path_factory, migrated_store) -> tuple[str, Path]:
    """A store holding three finished runs of a tiny task (their data folder inside it) and one that diverged
    (FAILED), and the bundle of it."""
    root = tmp_path_factory.mktemp("bundle_source")
    uri = store(root / "results", migrated_store)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FEDBENCH_CACHE", str(root / "cache"))
        data = {"name": "digits", "data_root": str(root / "data")}  # a path of this machine, kept out of the bundle
        specs = [tiny_spec(task=EXPERIMENT, seed=s, dataset=data) for s in (0, 1, 2)]
        specs.append(tiny_spec(task=EXPERIMENT, optimizer={"name": "sgd", "lr": 1.0e30, "momentum": 0.9}))
        statuses = [run_spec(spec, [MlflowCallback(uri)]).status for spec in specs]
    assert statuses == ["FINISHED", "FINISHED", "FINISHED", "FAILED"]
    bundle = root / "out" / f"{EXPERIMENT}.tar.xz"
    assert api.bundle(EXPERIMENT, out=bundle, uri=uri).runs == 3
    return uri, bundle


def runs_of(uri: str) -> list:
    client = MlflowClient(uri)
    return client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id])


def by_hash(uri: str) -> dict[str, tuple]:
    """Each run hash's status, params (those naming a path blank, as bundled), tags (less those a bundle drops or adds)
    and every metric's history."""
    client = MlflowClient(uri)
    found = {}
    for run in runs_of(uri):
        tags = {k: v for k, v in run.data.tags.items() if k not in DROPPED_TAGS | {BUNDLED_FROM_TAG}}
        histories = {
            key: sorted((m.step, m.value, m.timestamp) for m in client.get_metric_history(run.info.run_id, key))
            for key in run.data.metrics
        }
        times = (run.info.start_time, run.info.end_time)
        params = {k: "None" if k in PATH_PARAMS else v for k, v in run.data.params.items()}
        found[run.data.params["run_hash"]] = (run.info.status, times, params, tags, histories)
    return found


@pytest.mark.slow
def test_a_bundle_brings_the_finished_runs_whole_into_another_store(
    source, tmp_path, migrated_store, monkeypatch, capsys
):
    uri, _ = source
    home = tmp_path / "home"
    there = store(home, migrated_store)
    bundle = tmp_path / "cli.tar.xz"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert main(["bundle", "--experiment", EXPERIMENT, "--out", str(bundle)]) == 0
    assert f"3 runs of experiment {EXPERIMENT} written: {bundle}" in " ".join(capsys.readouterr().out.split())
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.setenv("FEDBENCH_RESULTS", str(home))
    assert main(["unbundle", str(bundle)]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert f"3 runs added to experiment {EXPERIMENT} in {there}; 0 already there" in said

    finished = {h: run for h, run in by_hash(uri).items() if run[0] == "FINISHED"}
    assert len(finished) == 3 and by_hash(there) == finished  # the failed run stays behind
    assert {r.data.tags[BUNDLED_FROM_TAG] for r in runs_of(there)} == {
        r.info.run_id for r in runs_of(uri) if r.info.status == "FINISHED"
    }
    clients = [
        api.export(EXPERIMENT, per_client=True, uri=u, out=tmp_path / f"clients{n}.csv")
        for n, u in enumerate([uri, there])
    ]
    assert clients[0].attrs["without"] == clients[1].attrs["without"] == 0 and len(clients[0])
    pd.testing.assert_frame_equal(clients[0], clients[1])
    boards = [api.leaderboard(EXPERIMENT, uri=u) for u in (uri, there)]
    pd.testing.assert_frame_equal(boards[0], boards[1])
    assert len(boards[0].attrs["failed"]) == 1 and len(boards[1].attrs["failed"]) == 0


@pytest.mark.slow
def test_unbundling_twice_adds_nothing_the_second_time(source, tmp_path, migrated_store):
    uri, bundle = source
    there = store(tmp_path / "home", migrated_store)
    first = api.unbundle(bundle, uri=there)
    assert (first.added, first.already) == (3, 0)
    again = api.unbundle(bundle, uri=there)
    assert (again.experiment, again.added, again.already) == (EXPERIMENT, 0, 3) and len(runs_of(there)) == 3
    back = api.bundle(EXPERIMENT, out=tmp_path / "back.tar.xz", uri=there)  # home's runs, by their new ids
    assert (api.unbundle(back.path, uri=uri).added, len(runs_of(uri))) == (0, 4)


@pytest.mark.slow
def test_the_bundle_names_no_path_of_the_store_it_came_from(source):
    uri, bundle = source
    folder = uri.removeprefix("sqlite:///").rpartition("/results/")[0]
    with tarfile.open(bundle, "r:xz") as tar:
        assert tar.getnames()[:2] == ["manifest.json", "runs.jsonl"]
        assert all(not m.name.startswith("/") and ".." not in m.name and not m.uname for m in tar.getmembers())
        texts = [
            tar.extractfile(m).read().decode()
            for m in tar.getmembers()
            if m.isfile() and m.name.endswith((".json", ".jsonl", ".yaml", ".md", ".txt"))
        ]
        manifest = json.load(tar.extractfile("manifest.json"))
    assert len(texts) >= 2 and not any(folder in text or "file://" in text for text in texts)
    assert folder.encode() not in lzma.decompress(bundle.read_bytes())  # nor in the parquet files
    assert manifest == {"format": "fedbench-run-bundle", "version": 1, "experiment": EXPERIMENT, "runs": 3}
    line = json.loads(texts[1].splitlines()[0])
    assert {"artifact_uri", "artifact_location"}.isdisjoint(line) and line["experiment"] == EXPERIMENT


def sweep_store(uri: str, children: dict[str, str], sweep: str = "grid-1a2b") -> str:
    """A sweep's parent run (interrupted: KILLED) in the store at `uri`, with a child per trial key in the status
    given, as `fedbench sweep` tags them; the parent's id."""
    runs = SweepRuns(uri, EXPERIMENT)
    parent = runs.start_parent(sweep, len(children))
    for key, status in children.items():
        tags = {PARENT_RUN_TAG: parent.run_id, TRIAL_KEY_TAG: key}
        run_id = runs.client.create_run(runs.experiment_id, tags=tags, run_name=f"trial {key}").info.run_id
        runs.client.log_param(run_id, "run_hash", f"hash-{key}")
        runs.client.log_metric(run_id, "acc_local_mean", 0.5, step=1)
        if status != "RUNNING":
            runs.client.set_terminated(run_id, status)
    runs.end_parent(parent.run_id, interrupted=True)
    return parent.run_id


def test_a_sweeps_children_join_the_destinations_latest_parent_so_resume_skips_them(tmp_path, migrated_store):
    uri = store(tmp_path / "gpu", migrated_store)
    source = sweep_store(uri, {"a": "FINISHED", "b": "FINISHED", "c": "FAILED", "d": "RUNNING"})
    sweep_store(uri, {"z": "FAILED"}, sweep="nothing-finished")
    bundle = api.bundle(EXPERIMENT, out=tmp_path / "sweep.tar.xz", uri=uri)
    assert bundle.runs == 3  # the parent with finished children and those children; not the other sweep's parent

    empty = store(tmp_path / "empty", migrated_store)
    assert api.unbundle(bundle.path, uri=empty).added == 3
    parent = SweepRuns(empty, EXPERIMENT).latest_parent("grid-1a2b")
    assert parent.status == "KILLED" and LEASE_TAG not in parent.tags and parent.tags[BUNDLED_FROM_TAG] == source
    assert SweepRuns(empty, EXPERIMENT).finished_trials(parent.run_id) == {"a", "b"}

    home = store(tmp_path / "home", migrated_store)
    mine = sweep_store(home, {"a": "FINISHED", "e": "FINISHED", "f": "RUNNING"})
    added = api.unbundle(bundle.path, uri=home)
    assert (added.added, added.already) == (1, 2)  # "a" ran in both stores (same run hash); the parent is home's
    runs = SweepRuns(home, EXPERIMENT)
    assert runs.latest_parent("grid-1a2b").run_id == mine
    assert len([r for r in runs_of(home) if SWEEP_TAG in r.data.tags]) == 1
    assert runs.finished_trials(mine) == {"a", "b", "e"}


def test_a_store_moved_from_where_it_wrote_its_artifacts_is_bundled_with_a_warning(tmp_path, migrated_store):
    """MLflow lists no artifact under a location that does not exist, rather than failing: a store copied from the
    machine that wrote it would go without its per-client tables, unsaid."""
    uri = store(tmp_path / "there", migrated_store)
    MlflowClient(uri).log_text(sweep_store(uri, {"a": "FINISHED"}), "a sweep's plot", "plots/note.txt")
    assert api.bundle(EXPERIMENT, out=tmp_path / "here.tar.xz", uri=uri).unreadable is None
    (tmp_path / "there").rename(tmp_path / "moved")
    moved = api.bundle(EXPERIMENT, out=tmp_path / "moved.tar.xz", uri=f"sqlite:///{tmp_path / 'moved' / 'mlflow.db'}")
    assert moved.runs == 2 and moved.unreadable is not None and str(tmp_path / "there") in moved.unreadable


def test_a_run_without_a_run_hash_is_told_by_its_source_id(tmp_path, migrated_store):
    """A finished run fedbench did not write (no run hash to match) is still added once: by its id, as it came back
    home (the id is a run there) or went out again (the id is a `bundled_from` there)."""
    uri = store(tmp_path / "gpu", migrated_store)
    client = MlflowClient(uri)
    note = client.create_run(SweepRuns(uri, EXPERIMENT).experiment_id, run_name="notes").info.run_id
    client.log_metric(note, "seen", 1.0)
    client.set_terminated(note)
    bundle = api.bundle(EXPERIMENT, out=tmp_path / "notes.tar.xz", uri=uri)
    home = store(tmp_path / "home", migrated_store)
    assert [api.unbundle(bundle.path, uri=home).added for _ in range(2)] == [1, 0]
    assert api.unbundle(bundle.path, uri=uri).added == 0
    back = api.bundle(EXPERIMENT, out=tmp_path / "back.tar.xz", uri=home)
    assert api.unbundle(back.path, uri=uri).added == 0 and len(runs_of(uri)) == 1


def test_bad_input_is_refused_naming_the_field_before_any_work(tmp_path, migrated_store, isolated_results):
    with pytest.raises(ConfigError, match="no such file") as missing:
        api.unbundle(tmp_path / "nosuch.tar.xz")
    not_a_bundle = tmp_path / "runs.tar.xz"
    not_a_bundle.write_text("name,value\n")
    with pytest.raises(ConfigError, match="not one") as text:
        api.unbundle(not_a_bundle)
    other_tar = tmp_path / "other.tar.xz"
    with tarfile.open(other_tar, "w:xz") as tar:
        tar.addfile(tarfile.TarInfo("runs.jsonl"), io.BytesIO())
    with pytest.raises(ConfigError, match="no bundle manifest") as tar_only:
        api.unbundle(other_tar)
    assert missing.value.field == text.value.field == tar_only.value.field == "bundle"
    assert not (isolated_results / "mlflow.db").exists()  # no store was made for a bad bundle

    uri = store(tmp_path / "store", migrated_store)
    sweep_store(uri, {"z": "FAILED"})
    with pytest.raises(ConfigError, match="finished runs to bundle") as unfinished:
        api.bundle(EXPERIMENT, out=tmp_path / "b.tar.xz", uri=uri)
    with pytest.raises(ConfigError) as unknown:
        api.bundle("nosuch", out=tmp_path / "b.tar.xz", uri=uri)
    with pytest.raises(ConfigError) as suffix:
        api.bundle(EXPERIMENT, out=tmp_path / "b.zip", uri=uri)
    fields = (unfinished.value.field, unknown.value.field, suffix.value.field)
    assert fields == ("--experiment", "--experiment", "--out")
    assert not (tmp_path / "b.tar.xz").exists()

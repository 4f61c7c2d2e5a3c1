"""A new embedded store made from the migrated template is the store MLflow would have made itself."""

import sqlite3
import threading

import pytest
from mlflow.tracking import MlflowClient

from fedbench.tracking.store_template import prepare_store, template


def tables_and_revision(path):
    """Each table's columns (name, type, not null, default, key), the index names and the alembic revision. Not
    the CREATE text: alembic's sqlite table rebuilds order constraints by hash, so it differs between processes."""
    db = sqlite3.connect(path)
    try:
        names = sorted(db.execute("select type, name from sqlite_master where name not like 'sqlite_%'"))
        columns = {
            name: sorted(row[1:] for row in db.execute(f"pragma table_info('{name}')"))
            for kind, name in names
            if kind == "table"
        }
        return names, columns, db.execute("select version_num from alembic_version").fetchall()
    finally:
        db.close()


def test_a_templated_store_has_mlflows_own_schema_and_revision_and_records_runs(isolated_results, migrated_store):
    target = isolated_results / "mlflow.db"
    prepare_store(f"sqlite:///{target}")
    assert tables_and_revision(target) == tables_and_revision(migrated_store)  # migrated_store: MLflow made it

    client = MlflowClient(f"sqlite:///{target}")
    assert [e.name for e in client.search_experiments()] == ["Default"]  # MLflow adds its default experiment
    experiment = client.create_experiment("x")
    run = client.create_run(experiment)
    client.log_metric(run.info.run_id, "acc", 0.5)
    assert client.get_run(run.info.run_id).data.metrics == {"acc": 0.5}
    assert template().is_file() and template().parent.parent == isolated_results.parent / "cache"


def test_an_existing_store_and_other_uris_are_left_alone(isolated_results, mlflow_store, tmp_path):
    client = MlflowClient(f"sqlite:///{mlflow_store}")
    client.create_experiment("kept")
    prepare_store(f"sqlite:///{mlflow_store}")
    assert "kept" in [e.name for e in client.search_experiments()]

    prepare_store("http://127.0.0.1:1")  # a tracking server: nothing to prepare, nothing touched
    prepare_store(f"postgresql://user@127.0.0.1/{tmp_path / 'db'}")
    assert not (tmp_path / "db").exists()


def test_threads_creating_one_store_leave_one_whole_store_and_no_partial_files(isolated_results):
    target = isolated_results / "mlflow.db"
    template()  # made once; the race is over the store's copy
    threads = [threading.Thread(target=prepare_store, args=(f"sqlite:///{target}",)) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [p.name for p in isolated_results.iterdir()] == ["mlflow.db"]
    assert MlflowClient(f"sqlite:///{target}").search_experiments()


def test_without_a_writable_cache_mlflow_builds_the_store_itself(isolated_results, monkeypatch, tmp_path):
    blocked = tmp_path / "not_a_folder"
    blocked.write_text("")
    monkeypatch.setenv("FEDBENCH_CACHE", str(blocked))  # mkdir under a file fails
    target = isolated_results / "mlflow.db"
    with pytest.warns(UserWarning, match="no MLflow store template"):
        prepare_store(f"sqlite:///{target}")
    assert not target.exists()
    assert MlflowClient(f"sqlite:///{target}").search_experiments()  # MLflow migrates it, as without fedbench

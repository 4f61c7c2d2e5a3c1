"""MLflow search filters: a value holding a quote finds exactly its runs in a real sqlite store."""

import pytest
from mlflow.tracking import MlflowClient

from fedbench.core.errors import ConfigError
from fedbench.tracking.search_filter import where

NAMES = ("plain", "O'Brien's study", 'the "tiny" task', "50%_done")


def test_names_with_quotes_round_trip_through_a_real_store(mlflow_store):
    client = MlflowClient(f"sqlite:///{mlflow_store}")
    experiment = client.create_experiment("filters", artifact_location=(mlflow_store.parent / "artifacts").as_uri())
    ids = {name: client.create_run(experiment, tags={"fedbench.sweep": name}).info.run_id for name in NAMES}
    client.create_run(experiment, tags={"other": "x"})

    for name, run_id in ids.items():
        found = client.search_runs([experiment], where({"tags.fedbench.sweep": name}))
        assert [run.info.run_id for run in found] == [run_id], name
    every = client.search_runs([experiment], where({"tags.fedbench.sweep": None}))
    assert {run.info.run_id for run in every} == set(ids.values())  # None: the tag is set, whatever its value
    both = client.search_runs([experiment], where({"tags.fedbench.sweep": "plain", "tags.other": None}))
    assert both == []  # the conditions are ANDed


def test_a_value_holding_both_quotes_is_refused_naming_it():
    with pytest.raises(ConfigError) as err:
        where({"tags.fedbench.sweep": "it's \"both\""})
    assert err.value.field == "tags.fedbench.sweep" and "not both" in str(err.value)

"""The sweep's driver gathers where every trial's workers trained and warns once of a GPU shared without MPS."""

import json
import warnings
from types import SimpleNamespace

from fedbench.runtime.gpu_sharing import SharedGpuWarning
from fedbench.runtime.placement import placement_tags
from fedbench.tracking.paths import tracking_uri
from fedbench.tuning.mlflow_bridge import MlflowBridge
from fedbench.tuning.plan import GRID_KEY, TrialSpecs
from fedbench.tuning.trial import EVENT, RUN_TAGS
from tests.conftest import tiny_spec


def ended_trial(bridge, trial_id, spec, pid):
    """A trial with one client worker (process `pid`) on GPU 0, no MPS, from its start to its final report."""
    trial = SimpleNamespace(
        trial_id=trial_id,
        config={GRID_KEY: spec.to_dict()},
        placement_group_factory=SimpleNamespace(bundles=[{"CPU": 1}, {"CPU": 1, "GPU": 0.25}]),
    )
    bridge.on_trial_start(0, [], trial)
    place = {"node": "n1", "gpu_ids": "0", "device": "cuda", "pid": str(pid), "mps": "no"}
    bridge.on_trial_result(
        0, [], trial, {EVENT: "end", "status": "FINISHED", RUN_TAGS: json.dumps(placement_tags([place], 4))}
    )


def test_workers_of_different_trials_on_one_gpu_are_warned_of_once(mlflow_store):
    import mlflow

    uri = tracking_uri()
    experiment = mlflow.MlflowClient(uri).create_experiment("sweep")
    parent = mlflow.MlflowClient(uri).create_run(experiment).info.run_id
    bridge = MlflowBridge(uri, "sweep", parent, TrialSpecs())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ended_trial(bridge, "a", tiny_spec(seed=0), pid=11)
        ended_trial(bridge, "b", tiny_spec(seed=1), pid=11)  # the same worker, reused by the next trial
        assert not caught
        ended_trial(bridge, "c", tiny_spec(seed=2), pid=12)  # a concurrent trial's worker on the same GPU
        ended_trial(bridge, "d", tiny_spec(seed=3), pid=13)
    assert [w.category for w in caught] == [SharedGpuWarning]
    assert "2 client workers share GPU 0 of node n1 without CUDA MPS" in str(caught[0].message)

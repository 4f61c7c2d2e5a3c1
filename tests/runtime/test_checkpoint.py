"""Resume inside a run (issue 31, item 2): a run killed mid-way goes on from its last checkpoint and ends with the
numbers of a run never interrupted, every method, on the serial and the Ray backend, and through `fedbench run`."""

from __future__ import annotations

import numpy as np
import pytest

from fedbench.core.callbacks import Callback
from fedbench.core.registry import ALGORITHMS
from fedbench.runtime import Federation
from fedbench.runtime.checkpoint import CheckpointFolder
from tests.algorithms.test_contract import CHANGES
from tests.algorithms.test_state_roundtrip import PAST_FIRST_PHASE
from tests.conftest import tiny_spec

ROUNDS, EVERY, KILLED_IN = 6, 2, 5


class Killed(BaseException):
    """What a SIGKILL leaves: no code after it runs (a BaseException, so the run cannot record itself FAILED)."""


class KillAfter(Callback):
    def __init__(self, round: int):
        self.round = round

    def on_round_end(self, spec, record):
        if record["round"] == self.round:
            raise Killed


class Seen(Callback):
    def __init__(self):
        self.rounds = []

    def on_round_end(self, spec, record):
        self.rounds.append(int(record["round"]))


def numbers(history):
    """Every record without its timings, NaN written out (NaN equals nothing, itself included)."""
    return [{k: "nan" if v != v else v for k, v in record.items() if "time_" not in k} for record in history]


def spec_for(name: str, **changes):
    return tiny_spec(
        **{"algorithm": name, "rounds": ROUNDS, **CHANGES.get(name, {}), **PAST_FIRST_PHASE.get(name, {}), **changes}
    )


def killed_then_resumed(spec, folder, backend: str):
    checkpoints = CheckpointFolder(folder, every=EVERY)
    with pytest.raises(Killed):
        Federation(spec, [KillAfter(KILLED_IN)], backend=backend, checkpoints=checkpoints).run()
    assert sorted(p.name for p in folder.iterdir()) == ["round-0002.npz", "round-0004.npz"]  # the last 2 kept
    seen = Seen()
    resumed = Federation(spec, [seen], backend=backend, checkpoints=CheckpointFolder(folder, every=EVERY))
    result = resumed.run()
    assert resumed.resumed_from == 4 and seen.rounds == list(range(1, ROUNDS + 1))  # callbacks got every round
    assert not folder.exists()  # the run ended: its checkpoints went
    return result


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_a_run_killed_mid_way_resumes_to_the_numbers_of_an_uninterrupted_one(name, tmp_path):
    spec = spec_for(name)
    whole = Federation(spec, backend="serial").run()
    resumed = killed_then_resumed(spec, tmp_path / "checkpoints", "serial")
    assert whole.status == resumed.status == "FINISHED", resumed.reason
    assert numbers(resumed.history) == numbers(whole.history)
    assert numbers([resumed.final]) == numbers([whole.final])
    for column, values in whole.per_client.items():
        np.testing.assert_array_equal(resumed.per_client[column], values)


@pytest.mark.ray
@pytest.mark.parametrize("name", ["ditto", "scaffold"])
def test_a_ray_run_killed_mid_way_resumes_to_the_serial_numbers(name, tmp_path, ray_session):
    spec = spec_for(name, resources={"backend": "ray", "num_workers": 2})
    whole = Federation(spec, backend="serial").run()
    resumed = killed_then_resumed(spec, tmp_path / "checkpoints", "ray")
    assert numbers(resumed.history) == numbers(whole.history)


def test_a_checkpoint_of_another_run_or_a_cut_short_file_is_not_resumed_from(tmp_path):
    folder = CheckpointFolder(tmp_path, every=2)
    spec = spec_for("fedavg")
    with pytest.raises(Killed):
        Federation(spec, [KillAfter(5)], backend="serial", checkpoints=folder).run()
    assert folder.latest("another-run") is None
    (tmp_path / "round-0004.npz").write_bytes(b"cut short")  # whatever happened to it: the one before is used
    assert folder.latest(spec.run_hash).round == 2
    assert not CheckpointFolder(tmp_path, every=2).due(6, 6) and CheckpointFolder(tmp_path, every=2).due(4, 6)


@pytest.mark.slow
def test_fedbench_run_killed_with_sigkill_goes_on_from_its_checkpoint_to_the_same_numbers(tmp_path):
    """The whole command as a user runs it: SIGKILL once round 4's checkpoint is on disk, then the same command."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml
    from mlflow.tracking import MlflowClient

    task = {
        **{k: v for k, v in spec_for("ditto").to_dict().items() if k in ("dataset", "model", "scenario", "optimizer")},
        "name": "resume",
        "algorithm": "ditto",
        "rounds": 12,
        "local_epochs": 8,
        "batch_size": 32,
        "seeds": [0],
    }
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    command = [sys.executable, "-m", "fedbench", "run", str(path), "--backend", "serial", "--checkpoint-every", "2"]

    def env(name):
        return {**os.environ, "FEDBENCH_RESULTS": str(tmp_path / name), "FEDBENCH_CACHE": str(tmp_path / "cache")}

    subprocess.run(command, env=env("whole"), check=True, capture_output=True)
    killed = subprocess.Popen(command, env=env("killed"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not list((tmp_path / "killed" / "checkpoints").glob("resume/*/round-0004.npz")):
        assert killed.poll() is None and time.monotonic() < deadline, "the run ended before its round-4 checkpoint"
        time.sleep(0.01)
    killed.send_signal(signal.SIGKILL)  # the process this test started, by its handle
    killed.wait()
    subprocess.run(command, env=env("killed"), check=True, capture_output=True)

    def finished_run(name):
        client = MlflowClient(f"sqlite:///{tmp_path / name / 'mlflow.db'}")
        runs = client.search_runs([client.get_experiment_by_name("resume").experiment_id])
        [run] = [r for r in runs if r.info.status == "FINISHED"]
        curves = {
            key: [
                (m.step, m.value) for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
            ]
            for key in run.data.metrics
            if "time_" not in key
        }
        return run, curves, len(runs)

    whole, whole_curves, _ = finished_run("whole")
    resumed, resumed_curves, attempts = finished_run("killed")
    assert attempts == 2 and int(resumed.data.tags["fedbench.resumed_from_round"]) >= 4  # the killed run stays RUNNING
    assert resumed_curves == whole_curves  # every round's numbers, the resumed ones and those replayed
    assert not list((tmp_path / "killed" / "checkpoints").rglob("*.npz"))

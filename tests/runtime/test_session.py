"""Several RunSpecs in a row: each with its own callbacks, a failed run does not stop the others."""

import pytest

from fedbench.core.callbacks import Callback
from fedbench.runtime.session import run_specs
from tests.conftest import tiny_spec


class Ended(Callback):
    def __init__(self, position: int, seen: list):
        self.position, self.seen = position, seen

    def on_run_end(self, result) -> None:
        self.seen.append((self.position, result.spec.seed, result.status))


def test_runs_go_on_past_a_failed_run_each_with_the_callbacks_made_for_it():
    specs = [tiny_spec(seed=5, optimizer={"name": "sgd", "lr": 1e30}), tiny_spec(seed=0)]
    seen = []
    results = run_specs(specs, lambda i, spec: [Ended(i, seen)])
    assert [r.status for r in results] == ["FAILED", "FINISHED"]
    assert seen == [(1, 5, "FAILED"), (2, 0, "FINISHED")]


def test_a_serial_run_asking_for_gpus_this_process_lacks_is_refused_before_any_run(monkeypatch):
    """The ray backend refuses a worker no node can hold; the serial one trained on CPU instead (issue 32, item 6)."""
    import pytest
    import torch

    from fedbench.core.errors import ConfigError

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    seen = []
    specs = [tiny_spec(seed=0), tiny_spec(seed=1, resources={"backend": "serial", "client_gpus": 1})]
    with pytest.raises(ConfigError, match="at most the 0 CUDA devices torch sees here") as err:
        run_specs(specs, lambda i, spec: [Ended(i, seen)])
    assert err.value.field == "resources.client_gpus" and seen == []  # not even the first run started
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)  # a machine with one GPU holds the request
    from fedbench.runtime.backends.serial import SerialBackend

    SerialBackend.check_fits(specs[1].resources)


def test_workers_sharing_a_gpu_without_mps_are_warned_of_once_before_the_first_round(monkeypatch):
    """Where each worker trains comes from the backend (two CUDA workers on GPU 0, no MPS daemon: what a GPU machine
    reports); the warning comes as the first run's workers start, once for the whole command."""
    import warnings

    from fedbench.runtime.backends.serial import SerialBackend
    from fedbench.runtime.gpu_sharing import SharedGpuWarning

    shared = [{"node": "local", "gpu_ids": "0", "device": "cuda", "pid": str(pid), "mps": "no"} for pid in (11, 12)]
    monkeypatch.setattr(SerialBackend, "worker_places", lambda self: shared)

    class RoundOne(Callback):
        def __init__(self):
            self.warned_by_round_one = None

        def on_round_end(self, spec, record):
            if self.warned_by_round_one is None:
                self.warned_by_round_one = len(caught)

    first = RoundOne()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = run_specs(
            [tiny_spec(seed=0, rounds=2), tiny_spec(seed=1, rounds=2)], lambda i, spec: [first] if i == 1 else []
        )
    assert [r.status for r in results] == ["FINISHED", "FINISHED"]
    assert [w.category for w in caught] == [SharedGpuWarning] and first.warned_by_round_one == 1
    assert "2 client workers share GPU 0 without CUDA MPS" in str(caught[0].message)
    assert results[0].tags["clients.device"] == "cuda: 4 clients on 2 workers (GPU 0, no MPS)"


def test_modules_imported_beside_a_body_are_imported_by_its_end_and_a_failed_one_is_left_to_its_user(tmp_path):
    import importlib
    import sys

    from fedbench.runtime.session import imported_beside

    (tmp_path / "prefetched_ok.py").write_text("VALUE = 1\n")
    (tmp_path / "prefetched_broken.py").write_text("raise ValueError('broken on import')\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with imported_beside(["prefetched_broken", "prefetched_ok"]):
            pass
        assert sys.modules["prefetched_ok"].VALUE == 1  # imported, the thread joined when the body ended
        assert "prefetched_broken" not in sys.modules
        with pytest.raises(ValueError, match="broken on import"):  # its user gets the error, with its traceback
            importlib.import_module("prefetched_broken")
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("prefetched_ok", "prefetched_broken"):
            sys.modules.pop(name, None)

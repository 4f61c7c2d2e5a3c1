"""Every method's states are typed and survive a checkpoint: after 2 rounds, the server state and every client's
state serialise (`fedbench.core.state_codec`) and load back equal, bit for bit, with shared objects still shared."""

import dataclasses

import numpy as np
import pytest
import torch

from fedbench.algorithms import make_algorithm
from fedbench.core.registry import ALGORITHMS
from fedbench.core.state_codec import dumps, loads
from fedbench.core.types import Payload
from fedbench.runtime import Federation
from tests.algorithms.test_contract import CHANGES
from tests.conftest import tiny_spec

PAST_FIRST_PHASE = {
    "feroma": {"algorithm": {"name": "feroma", "warmup_rounds": 1}},
    "made": {"algorithm": {"name": "made", "density_rounds": 1, "classifier_epochs": 2}},
}
"""Methods whose state only fills in after a first phase: shortened so that round 2 is past it (FEROMA's mapping
rounds keep each client's training split; MADE's weighting phase keeps its fitted classifier)."""


def assert_same(a, b, pairs: dict[int, int], path: str = "state") -> None:
    """`b` equals `a` in type and value (arrays bit for bit, NaN equal to NaN); `pairs` maps id(a's object) to
    id(b's) and must stay one-to-one, so an object shared in `a` is shared in `b` and nowhere else."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} became {type(b).__name__}"
    if isinstance(a, (np.ndarray, torch.Tensor, Payload, dict, list)) or dataclasses.is_dataclass(a):
        assert pairs.setdefault(id(a), id(b)) == id(b), f"{path}: a shared object came back as two"
    if isinstance(a, torch.Tensor):
        a, b = a.detach().numpy(), b.detach().numpy()
    if isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes(), path
    elif isinstance(a, np.generic):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes(), path
    elif dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert_same(getattr(a, f.name), getattr(b, f.name), pairs, f"{path}.{f.name}")
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for key in a:
            assert_same(a[key], b[key], pairs, f"{path}[{key!r}]")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, pairs, f"{path}[{i}]")
    elif isinstance(a, float) and a != a:
        assert b != b, path
    else:
        assert a == b, path


@pytest.mark.parametrize("name", ALGORITHMS.names())
def test_every_state_is_typed_and_loads_back_losslessly_after_two_rounds(name):
    spec = tiny_spec(**{"algorithm": name, "rounds": 2, **CHANGES.get(name, {}), **PAST_FIRST_PHASE.get(name, {})})
    federation = Federation(spec, backend="serial")
    result = federation.run()
    assert result.status == "FINISHED", result.reason
    algorithm = make_algorithm(spec, (64,), 10, 1)
    clients = [federation.store.get(cid) for cid in range(spec.scenario.num_clients)]
    assert isinstance(federation.state, algorithm.State)
    assert all(isinstance(state, algorithm.ClientState) for state in clients)
    for where, state in [("server", federation.state), *((f"client {cid}", s) for cid, s in enumerate(clients))]:
        assert dataclasses.is_dataclass(state), f"{where}'s state is a {type(state).__name__}, not a dataclass"
        assert_same(state, loads(dumps(state)), {}, where)

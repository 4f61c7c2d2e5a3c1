"""The state codec: what a checkpoint holds of an algorithm's state, written without pickle and read back whole."""

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from fedbench.core.state_codec import StateCodecError, dumps, loads
from fedbench.core.types import Payload


@dataclass(frozen=True)
class Example:
    models: tuple[Payload, ...]
    chosen: dict[int, int] = field(default_factory=dict)
    trained: frozenset[int] = frozenset()
    note: object = None


def test_values_of_every_kind_come_back_equal_and_of_the_same_type():
    weights = {"w": np.arange(6, dtype=np.float32).reshape(2, 3), "n": np.array([3], dtype=np.int64)}
    state = Example(
        (Payload(weights, models={2: Payload({"b": np.ones(1)})}),),
        {3: 1, 0: 2},
        frozenset({1, 4}),
        note={"nan": float("nan"), "t": torch.tensor([1.5, -2.0]), "s": np.float64(0.25), "k": (1, "a")},
    )
    back = loads(dumps(state))
    assert type(back) is Example and list(back.chosen) == [3, 0] and back.trained == frozenset({1, 4})
    model = back.models[0]
    assert model.weights["w"].dtype == np.float32 and np.array_equal(model.weights["w"], weights["w"])
    assert np.array_equal(model.models[2].weights["b"], np.ones(1))
    assert np.isnan(back.note["nan"]) and torch.equal(back.note["t"], torch.tensor([1.5, -2.0]))
    assert type(back.note["s"]) is np.float64 and back.note["k"] == (1, "a")


def test_an_object_shared_in_the_state_is_shared_after_loading():
    shared = Payload({"w": np.zeros(3)})
    back = loads(dumps(Example((shared, shared, Payload(shared.weights)))))
    assert back.models[0] is back.models[1] and back.models[2] is not back.models[0]
    assert back.models[2].weights is back.models[0].weights


def test_a_value_a_resumed_run_could_not_rebuild_is_refused_with_its_path():
    with pytest.raises(StateCodecError, match=r"state\.note\['f'\]: a function"):
        dumps(Example((), note={"f": lambda x: x}))
    with pytest.raises(StateCodecError, match=r"state\.chosen: a OrderedDict from collections"):
        dumps(Example((), chosen=OrderedDict()))  # it would come back a plain dict

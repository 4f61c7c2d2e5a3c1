"""Algorithm state to bytes and back, losslessly: what a checkpoint stores of a server or a client state.

A state is a tree of dataclasses (a method's `State`, `ClientState`, `Payload`, `ClientData`...), dicts, lists,
tuples, sets, numbers, strings, numpy arrays and torch tensors. `dumps` writes it as one `.npz`:
every array (and tensor) by number, and the tree as JSON beside them, so a checkpoint can be read without
unpickling code. An object met twice (one Payload handed to many clients, one array in two models) is written
once and comes back as one object, because the runtime ships and meters a shared payload once and the system
vote's bundle relies on it. Anything else (a function, a module, a dict subclass) is refused with its path in the
state, so a method cannot put something into its state that a resumed run would lack or get back changed.
Loading builds only dataclasses, of fedbench's own modules (imported where needed) or of a module the process has
already imported (a plugin method's, loaded when the run made its algorithm): a class name in the JSON never makes
it import anything else, so reading a checkpoint runs no code it names.
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import sys
from typing import Any

import numpy as np
import torch

TREE = "__tree__"
"""The npz entry holding the JSON tree."""
ALLOWED = "dataclasses, dicts, lists, tuples, sets, numbers, strings, numpy arrays and torch tensors"


class StateCodecError(TypeError):
    """A state holds a value the codec cannot write (its path in the state is in the message)."""


def dumps(state: Any) -> bytes:
    """The state as the bytes of one `.npz` file."""
    arrays: list[np.ndarray] = []
    tree = _Encoder(arrays).encode(state, "state")
    buffer = io.BytesIO()
    named = {
        TREE: np.frombuffer(json.dumps(tree).encode(), dtype=np.uint8),
        **{f"a{i}": a for i, a in enumerate(arrays)},
    }
    np.savez(buffer, **named)  # type: ignore[arg-type]  # numpy's stubs take **kwds as allow_pickle, not arrays
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    """The state `dumps` wrote."""
    with np.load(io.BytesIO(data), allow_pickle=False) as npz:
        tree = json.loads(npz[TREE].tobytes().decode())
        arrays = [npz[f"a{i}"] for i in range(len(npz.files) - 1)]
    return _Decoder(arrays).decode(tree)


class _Encoder:
    """One pass over a state; `memo` maps id(object) to its reference number, so shared objects stay shared."""

    def __init__(self, arrays: list[np.ndarray]):
        self.arrays = arrays
        self.memo: dict[int, int] = {}
        self.alive: list[Any] = []  # keeps every memoised object alive, so no id is reused during the pass

    def encode(self, value: Any, path: str) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, (int, float)) and type(value) in (int, float):
            return {"float": repr(value)} if isinstance(value, float) else value
        if id(value) in self.memo:
            return {"ref": self.memo[id(value)]}
        node = self._node(value, path)
        self.memo[id(value)] = len(self.memo)
        self.alive.append(value)
        return {"id": self.memo[id(value)], **node}

    def _node(self, value: Any, path: str) -> dict:
        if isinstance(value, np.generic):
            return {"scalar": self._array(np.asarray(value))}
        if isinstance(value, np.ndarray):
            return {"array": self._array(value)}
        if isinstance(value, torch.Tensor):
            return {"tensor": self._array(value.detach().cpu().numpy()), "grad": value.requires_grad}
        if type(value) is dict:
            return {
                "dict": [[self.encode(k, f"{path} key"), self.encode(v, f"{path}[{k!r}]")] for k, v in value.items()]
            }
        if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
            return {type(value).__name__: [self.encode(v, f"{path}[{i}]") for i, v in enumerate(value)]}
        if type(value) in (set, frozenset):
            items = sorted(value, key=repr)
            return {type(value).__name__: [self.encode(v, f"{path} item") for v in items]}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            cls = type(value)
            fields = {
                f.name: self.encode(getattr(value, f.name), f"{path}.{f.name}") for f in dataclasses.fields(value)
            }
            return {"class": f"{cls.__module__}:{cls.__qualname__}", "fields": fields}
        kind = type(value)
        raise StateCodecError(
            f"{path}: a {kind.__qualname__} from {kind.__module__} ({value!r:.60}); a state holds only {ALLOWED}"
        )

    def _array(self, array: np.ndarray) -> int:
        if array.dtype == object:
            raise StateCodecError("an array of Python objects cannot be stored")
        self.arrays.append(array)
        return len(self.arrays) - 1


class _Decoder:
    def __init__(self, arrays: list[np.ndarray]):
        self.arrays = arrays
        self.objects: dict[int, Any] = {}

    def decode(self, node: Any) -> Any:
        if not isinstance(node, dict):
            return node
        if "float" in node:
            return float(node["float"])
        if "ref" in node:
            return self.objects[node["ref"]]
        value = self._build(node)
        self.objects[node["id"]] = value
        return value

    def _build(self, node: dict) -> Any:
        if "scalar" in node:
            return self.arrays[node["scalar"]][()]
        if "array" in node:
            return self.arrays[node["array"]]
        if "tensor" in node:
            return torch.from_numpy(self.arrays[node["tensor"]]).requires_grad_(node["grad"])
        if "dict" in node:
            return {self.decode(k): self.decode(v) for k, v in node["dict"]}
        for kind, build in (("list", list), ("tuple", tuple), ("set", set), ("frozenset", frozenset)):
            if kind in node:
                return build(self.decode(v) for v in node[kind])
        cls = state_class(node["class"])
        value: Any = object.__new__(cls)
        for name, field in node["fields"].items():
            object.__setattr__(value, name, self.decode(field))
        return value


def state_class(reference: str) -> type:
    """The dataclass a tree names (`module:Qual.Name`): fedbench's own, or one of a module already imported.

    Raises:
        StateCodecError: anything else, naming it (the module is not imported to find out).
    """
    module, _, qualname = reference.partition(":")
    own = module == "fedbench" or module.startswith("fedbench.")
    if not own and module not in sys.modules:
        raise StateCodecError(
            f"class {reference}: a state's classes are fedbench's or a loaded plugin's; {module!r} is neither "
            "(this process never imported it), and reading a checkpoint imports nothing else"
        )
    found: Any = importlib.import_module(module) if own else sys.modules[module]
    for name in qualname.split("."):
        found = getattr(found, name, None)
    if not (isinstance(found, type) and dataclasses.is_dataclass(found)):
        raise StateCodecError(f"class {reference}: not a dataclass, and a state is built only of dataclasses")
    return found

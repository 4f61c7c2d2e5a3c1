"""MADE reweighting's cache on disk: density phases and client weightings, content-addressed.

Why and when it is used: `fedbench.algorithms.made`'s module docstring.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import numpy as np
import torch

from fedbench.core.types import Arrays


@dataclass(frozen=True)
class Weighting:
    """A client's fitted density-ratio weighting: what its loss weights are computed with (its client state keeps
    it; the cache stores it)."""

    local: Arrays
    """The local MADE q_i's weights."""
    classifier: Arrays
    """The ratio classifier h's weights, its feature standardisation included."""
    scale: np.ndarray
    """The rescaling constants over the client's images: [mean ratio] (`mean_clip`) or [min, max] (`minmax`)."""


def digest(*parts: object) -> str:
    """A 20-hex-digit content hash of arrays, weight dicts (in key order) and plain values."""
    h = hashlib.blake2b(digest_size=10)
    for part in parts:
        if isinstance(part, dict):
            for name in sorted(part):
                h.update(name.encode())
                h.update(digest(part[name]).encode())
        elif isinstance(part, (np.ndarray, torch.Tensor)):
            array = np.ascontiguousarray(part.detach().cpu().numpy() if isinstance(part, torch.Tensor) else part)
            h.update(f"{array.dtype}{array.shape}".encode())
            h.update(array.tobytes())
        else:
            h.update(repr(part).encode())
        h.update(b"|")
    return h.hexdigest()


class DensityCache:
    """Density phases and client weightings on disk, content-addressed (see the module docstring).

    Layout under `root`: `phase/<key>.json` -> the id of the final global MADE; `final/<id>/global.npz` and
    `final/<id>/losses.json` (per `round:client` MADE loss); `final/<id>/w-<key>.npz` client weightings.
    Files are written to a temporary name and renamed, and a phase's index last, so a reader never sees a
    partial entry and concurrent runs writing the same entry write the same bytes.
    """

    def __init__(self, root: Path):
        self.root = root

    def find_phase(self, key: str) -> tuple[str, Arrays] | None:
        index = self.root / "phase" / f"{key}.json"
        if not index.exists():
            return None
        final_id = json.loads(index.read_text())["final"]
        return final_id, load_npz(self.root / "final" / final_id / "global.npz")

    def put_phase(self, key: str, final_id: str, made: Arrays, losses: dict[tuple[int, int], float]) -> None:
        """Store a finished density phase: its final MADE and each job's loss by (round, client)."""
        folder = self.root / "final" / final_id
        by_name = {f"{round}:{client}": loss for (round, client), loss in losses.items()}  # JSON keys are strings
        # numpy's stubs take **kwds as allow_pickle, not arrays
        self._write(folder / "global.npz", lambda f: np.savez(f, **made))  # type: ignore[arg-type]
        self._write(folder / "losses.json", lambda f: f.write(json.dumps(by_name).encode()))
        self._write(self.root / "phase" / f"{key}.json", lambda f: f.write(json.dumps({"final": final_id}).encode()))

    def losses(self, final_id: str) -> dict[tuple[int, int], float]:
        """A stored density phase's MADE loss of each job, by (round, client)."""
        path = self.root / "final" / final_id / "losses.json"
        if not path.exists():
            raise FileNotFoundError(
                f"made: the server replays cached density phase {final_id} but {path} is missing "
                "here; the cache folder (FEDBENCH_CACHE) must be shared by the driver and workers"
            )
        by_name = json.loads(path.read_text())
        return {job_of(name): loss for name, loss in by_name.items()}

    def find_weighting(self, final_id: str, key: str) -> Weighting | None:
        path = self.root / "final" / final_id / f"w-{key}.npz"
        return unpack(load_npz(path)) if path.exists() else None

    def put_weighting(self, final_id: str, key: str, weighting: Weighting) -> None:
        path = self.root / "final" / final_id / f"w-{key}.npz"
        self._write(path, lambda f: np.savez(f, **pack(weighting)))  # type: ignore[arg-type]  # as in `put_phase`

    @staticmethod
    def _write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            write(f)
        os.replace(tmp, path)


def job_of(name: str) -> tuple[int, int]:
    """The (round, client) a key of `losses.json` names (`round:client`, as `put_phase` writes it)."""
    round, client = (int(part) for part in name.split(":"))
    return round, client


def load_npz(path: Path) -> Arrays:
    with np.load(path) as arrays:
        return dict(arrays)


def pack(weighting: Weighting) -> Arrays:
    """A weighting as the flat arrays of one `.npz`: `local/<name>`, `classifier/<name>` and `scale/value`."""
    groups = {"local": weighting.local, "classifier": weighting.classifier, "scale": {"value": weighting.scale}}
    return {f"{group}/{name}": v for group, weights in groups.items() for name, v in weights.items()}


def unpack(flat: Arrays) -> Weighting:
    """The weighting `pack` wrote."""
    groups: dict[str, Arrays] = {}
    for key, value in flat.items():
        group, name = key.split("/", 1)
        groups.setdefault(group, {})[name] = value
    return Weighting(groups["local"], groups["classifier"], groups["scale"]["value"])

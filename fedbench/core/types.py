"""The objects that cross layer boundaries: what travels, what stays, what comes back.

A `Payload` is what crosses the simulated network: named sections of numpy arrays (the wire format; numpy
moves through Ray's object store zero-copy). Its `weights` section is the model a method federates, the
only section FedAvg-style averages read; every other section is an extra the method declares by name (a
sample count, a profile, latent bounds, a cluster id, a second model such as FEROMA's extractor), metered like
the weights and never averaged by accident. Several models go in `Payload.models` by an int index (K cluster
models), a relayed peer's payload in `Payload.peers` by its sender. Only Payloads are counted as
communication. An algorithm's client state never travels in the simulated system: it lives in the runtime's
state store between rounds.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from fedbench.core.errors import ConfigError

Arrays = dict[str, np.ndarray]
"""Named numpy arrays: a model's state dict, or one section of a Payload."""
Metrics = dict[str, float]

WEIGHTS = "weights"
"""The Payload section averages read: the model the method federates."""


@dataclass(frozen=True, eq=False, init=False, repr=False)
class Payload:
    """What crosses the simulated network: sections of named numpy arrays, `weights` among them, plus indexed
    models and relayed peers' payloads.

    `Payload(weights, {PROFILE: {...}})`: the model averages read, and the method's extras by section name.
    `Payload(models={k: Payload(w_k)})`: several models indexed by an int (IFCA's cluster k, FedEM's component m).
    `Payload(peers={sender: sent})`: what each peer sent this receiver through the relay (Gossip, DAC); the byte
    meter charges each to the sender's uplink and the receiver's downlink.
    Immutable and compared by identity: a server hands one object to every client that gets the same
    content, and the runtime ships that object once. Arrays are shared, never copied, so a payload is never
    changed in place (`replace` builds a new one).
    """

    sections: dict[str, Arrays]
    models: dict[int, Payload]
    peers: dict[int, Payload]

    def __init__(
        self,
        weights: Arrays | None = None,
        extras: Mapping[str, Arrays] | None = None,
        *,
        models: Mapping[int, Payload] | None = None,
        peers: Mapping[int, Payload] | None = None,
    ):
        """Args:
        weights: the `weights` section; None: the payload carries no model to average.
        extras: the other sections by name, never averaged (a `weights` entry here is the weights section).
        models: indexed models, by an int the method gives them (a cluster's, a mixture component's).
        peers: relayed payloads, by the id of the client that sent each.
        """
        sections = {} if weights is None else {WEIGHTS: weights}
        object.__setattr__(self, "sections", {**sections, **(extras or {})})
        object.__setattr__(self, "models", dict(models or {}))
        object.__setattr__(self, "peers", dict(peers or {}))

    @property
    def weights(self) -> Arrays:
        """The `weights` section (empty where the payload carries none)."""
        return self.sections.get(WEIGHTS, {})

    @property
    def is_empty(self) -> bool:
        """Whether nothing travels: no section, no indexed model, no peer's payload."""
        return not (self.sections or self.models or self.peers)

    def __getitem__(self, section: str) -> Arrays:
        return self.sections[section]

    def __contains__(self, section: str) -> bool:
        return section in self.sections

    def merged(self, other: Payload) -> Payload:
        """A new payload with `other`'s arrays added to this one's, section by section, and its indexed models and
        peers added to this one's (`other` wins a clash)."""
        names = {**self.sections, **other.sections}
        return Payload(
            extras={s: {**self.sections.get(s, {}), **other.sections.get(s, {})} for s in names},
            models={**self.models, **other.models},
            peers={**self.peers, **other.peers},
        )

    def replace(self, sections: Mapping[str, Arrays]) -> Payload:
        """A new payload with `sections` added or replaced (`weights` too); the rest is shared with this one."""
        return Payload(extras={**self.sections, **sections}, models=self.models, peers=self.peers)

    def arrays(self) -> Iterator[np.ndarray]:
        """Every array of every section, indexed model and peer's payload."""
        for arrays in self.sections.values():
            yield from arrays.values()
        for part in (*self.models.values(), *self.peers.values()):
            yield from part.arrays()

    @property
    def nbytes(self) -> int:
        """Bytes on the wire: the sum of numel * element size of every array (`arrays`)."""
        return int(sum(np.asarray(v).nbytes for v in self.arrays()))

    def __repr__(self) -> str:
        parts = [f"{name}: {len(arrays)} arrays" for name, arrays in self.sections.items()]
        parts += [f"models {sorted(self.models)}"] * bool(self.models) + [f"peers {sorted(self.peers)}"] * bool(
            self.peers
        )
        return f"Payload({', '.join(parts)}; {self.nbytes} bytes)"


def derive_seed(*parts: int | str) -> int:
    """A 63-bit seed from (run seed, round, client id, purpose...), identical on every process and host.

    Python's `hash` is salted per process, so a cryptographic hash of the parts is used instead.
    """
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


@dataclass(frozen=True)
class OptimizerSpec:
    """The client optimizer. Defaults are FEROMA's (002 Sec. 5: SGD, lr 0.005, momentum 0.9)."""

    name: Literal["sgd", "adam"] = "sgd"
    lr: float = 0.005
    momentum: float = 0.9
    """SGD's momentum (ignored by adam)."""
    weight_decay: float = 0.0
    schedule: Literal["constant", "cosine"] = "constant"
    """The learning rate over rounds: constant, or cosine from `lr` in round 1 towards 0 after the last
    (004's schedule, docs/methods.md: 0.01 to 0 over 800 rounds)."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ConfigError("lr", self.lr, "a learning rate > 0 (at 0 nothing trains)")
        if not 0.0 <= self.momentum < 1.0:
            raise ConfigError("momentum", self.momentum, "a number in [0, 1)")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ConfigError("weight_decay", self.weight_decay, "a number >= 0")


@dataclass(frozen=True)
class LocalTraining:
    """The run's training settings (from the RunSpec), for a server half that trains a model itself
    (001's pooled protocol); clients get the same settings in their RoundContext."""

    local_epochs: int
    batch_size: int
    optimizer: OptimizerSpec


@dataclass(frozen=True)
class RoundContext:
    """Everything a client half needs to know about the job it is running, besides payload, state and data."""

    round: int
    client_id: int
    seed: int
    local_epochs: int
    batch_size: int
    optimizer: OptimizerSpec
    num_classes: int
    device: str = "cpu"
    num_threads: int = 1
    distribution_id: int = -1
    """The client's ground-truth distribution id this round, for a method that declares `ReadsGroundTruth` (001 Sec.
    IV's Oracle); -1 for every other method, and where unknown."""
    rounds: int = 1
    """The run's number of rounds, for the learning-rate schedule."""
    local_steps: int | None = None
    """Mini-batch steps per job instead of `local_epochs` epochs (004: 10 steps a round); None: epochs."""

    def rng_seed(self, purpose: str) -> int:
        """A seed for one use of randomness in this job (shuffling, masks...), distinct per purpose."""
        return derive_seed(self.seed, self.round, self.client_id, purpose)


@dataclass
class ClientResult:
    """What a client job returns to the server: its uplink Payload plus metrics that are not communication."""

    client_id: int
    uplink: Payload
    metrics: Metrics = field(default_factory=dict)
    compute_s: float = 0.0
    gpu_peak_bytes: int = 0
    """GPU memory the worker's torch held at most during the job (its caching allocator's reserve); 0 on CPU."""

"""DAC (Listo Zec, Ekblom, Willbo, Mogren, Girdzijauskas 2022, "Decentralized adaptive clustering of deep nets is
beneficial for client collaboration", arXiv:2206.08839; code github edvinli/DAC; 001's baseline [13]).

Peer-to-peer learning in which each client learns whom to ask. Client i keeps a similarity vector s_i over all
clients (0: unknown) and each round:

1. receives the models of the n neighbours it asked for, each with the neighbour's sample count and its own
   similarity vector s_k;
2. measures s_ik = 1 / (loss of k's model on i's training data) for each of them (a client without training
   data measures nothing: its s_i keeps what it had);
3. approximates the similarity of every client j it never measured itself through the 2-hop rule: among the
   neighbours just heard from that know j (s_kj > 0), the one most similar to i lends its value, s_ij = s_kj;
4. averages its own and the received models by sample count (DAC adapts whom it samples, not the weights);
5. trains locally;
6. samples next round's n neighbours without replacement from p_i = softmax(tau * s_i) over the other clients
   (successive draws, as numpy's `choice` in the released code; drawn here with the Gumbel-top-n trick, the same
   distribution, which stays exact where p_i underflows), and sends that request with its model.

Round 1 is local training alone (the released code trains every client once before its first exchange); its
request is uniform (s_i = 0, the released code's round-0 rule). Relay simulation (`peer_relay`): the request is
parked with the model and the relay delivers the requested peers' parked models next round: what they held
after their last job (a synchronous round; the released code updates clients one after another). A requested
peer that never trained (possible only with client_fraction < 1) does not answer.

001 Sec. IV-C describes DAC as "weighting by cosine similarity of model parameters"; fedbench follows DAC's own
paper and code (loss-based similarity driving the sampling, sample-count averaging). docs/methods.md has the
details and the other differences from the released code.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fedbench.algorithms.base import SAMPLES, AlgorithmConfig, counted, samples_of
from fedbench.algorithms.peer_relay import Decentralized, DecentralizedClientState, DecentralizedState
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.types import WEIGHTS, Arrays, Metrics, Payload, RoundContext
from fedbench.training import ClientData, average_weights, get_weights, train_local, training_loss

SIMILARITY = "similarity"
"""Uplink section `{"s": float64 [clients]}`: the client's similarity vector s_i, which the neighbours it answers
read for their 2-hop approximation."""
REQUEST = "request"
"""Uplink section `{"ids": int64 [n]}`: the neighbours the client asks for their models next round."""
MIN_LOSS = 1e-12
"""Floor on a measured loss, so that a model fitting i's data perfectly has a large, finite similarity."""


def two_hop(similarity: np.ndarray, contacted: np.ndarray, heard: dict[int, np.ndarray], client: int) -> np.ndarray:
    """s_i with every client j that i never measured, but some neighbour k in `heard` knows (s_kj > 0), set to
    s_kj of the k most similar to i (the released code's rule). Measured entries and i itself are kept."""
    out = similarity.copy()
    if not heard:
        return out
    senders = sorted(heard)
    known = np.stack([heard[k] for k in senders])  # [neighbours, clients]
    closeness = np.where(known > 0, similarity[senders][:, None], -np.inf)
    lender = closeness.argmax(axis=0)
    fill = (known > 0).any(axis=0) & ~contacted
    fill[client] = False
    out[fill] = known[lender, np.arange(len(out))][fill]
    return out


def temperature(tau: float, schedule: str, exchange: int) -> float:
    """tau in the `exchange`-th exchange round (0 for the first): constant, or the released code's `tau_function`
    2 tau / (1 + exp(-0.2 r)) - tau + 1, rising from 1 towards tau + 1."""
    if schedule == "sigmoid":
        return 2.0 * tau / (1.0 + math.exp(-0.2 * exchange)) - tau + 1.0
    return tau


def sample_neighbours(similarity: np.ndarray, client: int, tau: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """n distinct other clients drawn successively with probabilities p_i = softmax(tau * s_i) (renormalised over
    those not yet drawn): the n largest of tau * s_ij + Gumbel noise, which is that distribution exactly."""
    keys = tau * similarity + rng.gumbel(size=len(similarity))
    keys[client] = -np.inf
    return np.sort(np.argsort(-keys)[:n]).astype(np.int64)


@dataclass(frozen=True)
class DACClientState(DecentralizedClientState):
    """The client's own model, its similarity vector s_i and which clients it measured itself; None before its
    first job (s_i = 0, nobody measured)."""

    similarity: np.ndarray | None = None
    """float64 [clients]: s_i, 0 where unknown."""
    contacted: np.ndarray | None = None
    """bool [clients]: the clients whose similarity this client measured itself (the rest are 2-hop or unknown)."""


@register_algorithm("dac")
class DAC(Decentralized["DAC.Config", DACClientState]):
    """Similarity-driven neighbour sampling, sample-count averaging with the sampled neighbours, local training."""

    ClientState = DACClientState
    SHARED = (WEIGHTS, SAMPLES, SIMILARITY)

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        neighbours: int = 5
        """n, the peers a client asks for their models each round (released code: `--n_sampled`, default 5, and 5
        in its README's command; 001 does not say). Capped at the number of other clients."""
        tau: float = 30.0
        """Temperature of p_i = softmax(tau * s_i) (the README's command: `--tau 30`; 001 does not say). 0 samples
        uniformly: random gossip with n neighbours."""
        tau_schedule: Literal["constant", "sigmoid"] = "constant"
        """constant: DAC; sigmoid: the released code's DAC_var (`--DAC_var`, used in its README's command), tau
        rising from 1 in the first exchange towards tau + 1 (`temperature`)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            if self.neighbours < 1:
                raise ConfigError("neighbours", self.neighbours, "an integer >= 1")
            if not (math.isfinite(self.tau) and self.tau >= 0):
                raise ConfigError("tau", self.tau, "a number >= 0 (0: uniform sampling)")
            if self.tau_schedule not in ("constant", "sigmoid"):
                raise ConfigError("tau_schedule", self.tau_schedule, "constant or sigmoid")

    # -- server half ---------------------------------------------------------------------------------
    def configure(self, round: int, state: DecentralizedState, sampled: Sequence[int]) -> dict[int, Payload]:
        """Each client gets what the neighbours it asked for last parked (nothing before its first job)."""
        parked = state.parked
        downlinks = {}
        for cid in sampled:
            asked = [int(j) for j in parked[cid][REQUEST]["ids"]] if cid in parked else []
            downlinks[cid] = Payload(peers={j: self.sent(state, j) for j in asked if j in parked})
        return downlinks

    # -- client half ---------------------------------------------------------------------------------
    def exchange(
        self, payload: Payload, state: DACClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Arrays, np.ndarray, np.ndarray]:
        """Steps 2-4 with the neighbours' answers: (the averaged model, s_i, the contacted mask)."""
        similarity = state.similarity if state.similarity is not None else np.zeros(self.num_clients)
        contacted = state.contacted if state.contacted is not None else np.zeros(self.num_clients, dtype=bool)
        own = self.own_weights(state)
        peers = payload.peers
        if not peers:
            return own, similarity, contacted
        similarity, contacted = similarity.copy(), contacted.copy()
        senders = sorted(peers)
        for k in senders:
            loss = training_loss(self.model_with(peers[k].weights), data, ctx.device)
            if math.isfinite(loss):  # else (no training rows) nothing was measured: s_ik stays as it was
                similarity[k] = 1.0 / max(loss, MIN_LOSS)
                contacted[k] = True
        similarity = two_hop(similarity, contacted, {k: peers[k][SIMILARITY]["s"] for k in senders}, ctx.client_id)
        counts = [data.num_train, *(samples_of(peers[k]) for k in senders)]
        return average_weights([own, *(peers[k].weights for k in senders)], counts), similarity, contacted

    def client_update(
        self, payload: Payload, state: DACClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, DACClientState, Metrics]:
        weights, similarity, contacted = self.exchange(payload, state, data, ctx)
        model = self.model_with(weights)
        metrics = train_local(model, data, ctx)
        # p_i computed in round t >= 2 serves round t + 1: exchange round t - 2 of the released code's loop
        tau = temperature(self.config.tau, self.config.tau_schedule, max(ctx.round - 2, 0))
        n = min(self.config.neighbours, self.num_clients - 1)
        request = sample_neighbours(
            similarity, ctx.client_id, tau, n, np.random.default_rng(ctx.rng_seed("neighbours"))
        )
        trained = get_weights(model)
        uplink = counted(trained, data.num_train, {SIMILARITY: {"s": similarity}, REQUEST: {"ids": request}})
        return uplink, dataclasses.replace(state, model=trained, similarity=similarity, contacted=contacted), metrics

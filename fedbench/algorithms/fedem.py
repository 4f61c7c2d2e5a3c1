"""FedEM (Marfoq, Neglia, Bellet, Kameni, Vidal 2021, "Federated Multi-Task Learning under a Mixture of
Distributions", NeurIPS; Algorithm 1, federated surrogate optimisation): every client's data is a mixture of
M underlying distributions. Each distribution has a component model shared by all clients. Each client keeps
its own mixture weights pi_t and predicts with sum_m pi_tm softmax(h_m(x)).

Each round every sampled client downloads all M components and:
- E-step: for each training sample i, q(z_i = m) is proportional to pi_m exp(-loss(h_m(x_i), y_i)) (the
  received components, in eval mode);
- sets pi_m to the mean of q(z_i = m) over its samples (client state);
- trains each component from the received model with FedAvg's local training, on the loss weighted by the
  responsibilities, mean_i q(z_i = m) loss_i (the loop's `sample_weight`, looked up by training row);
- uploads the M trained components and its sample count.
The server averages component m over the round's uploads by sample count (Algorithm 1: n_t / n; the
released code averages by sample count too, never by pi).

Choices where the paper is silent or fedbench differs:
- M (`components`) defaults to 3, the paper's setting. Component 0 starts from the run's usual initial model,
  component m > 0 from `ModelBuilder.initial(derive_seed(seed, "fedem", m))`; the released code seeds
  learner m with seed + m. With M = 1, q is 1 for every sample and FedEM is FedAvg.
- pi starts uniform, as in the released code (Algorithm 1 takes pi^0 as an input).
- The uplink also carries the client's pi (M float64, metered). Algorithm 1 never sends pi, and the server
  never uses it to average. fedbench sends it only because the round metrics and the test-time rule below
  need each component's mixture mass at the server.
- Partial participation: each component is averaged over the round's uploads, as in FedRC's code (from which
  002 ran FedEM). The released FedEM code averages over all clients, and an unsampled client contributes
  last round's model unchanged. With client_fraction 1 (002's setting) the two are the same.
- Local accuracy: each client's mixture with its own pi (uniform for a client never sampled). System
  accuracy: 004's majority vote of these mixtures. The server holds the components but not the pi, so after
  the last round each client uploads its pi once (`PersonalModels`), which with the components the server holds
  makes its predictor.
  This is metered as evaluation traffic.
- Test time: the paper's rule for a client unseen in training (learn its pi by EM on its labelled data, the
  components fixed) needs labels; it is not implemented. Each test client predicts with the ensemble of the
  components, component m weighted by its mixture mass sum_t pi_tm over the clients' last pi. For soft
  clusters this is the number of clients behind each model, 002 App. I.3's rule for baselines without one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from fedbench.algorithms.base import Algorithm, AlgorithmConfig, counted, sample_counts
from fedbench.algorithms.capabilities import Assignment, PersonalModels, RoundReport, SystemVote, TestTimeAssignment
from fedbench.core import metrics as M
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.types import Arrays, ClientResult, Metrics, Payload, RoundContext
from fedbench.training import (
    ClientData,
    TrainHooks,
    average_weights,
    evaluate,
    get_weights,
    predict,
    set_weights,
    train_local,
    training_losses,
)

MIXTURE = "mixture"
"""Payload section `{"pi": float64 [M]}`: a client's mixture weights (its uplink and its shared mixture)."""
ENTROPY = "fedem_pi_entropy_mean"
"""Round metric: mean entropy (nats) of this round's clients' pi; 0 when each uses one component, log M
when all are uniform."""
MASS = "fedem_component_mass_{}"
"""Round metric, one per component m: the sum of pi_m over this round's clients (a soft count of clients)."""
MAIN = "fedem_component_of_{}"
"""Round metric, one per client that has reported: the argmax of its last pi."""


def e_step(pi: np.ndarray, losses: torch.Tensor) -> tuple[torch.Tensor, np.ndarray]:
    """Algorithm 1's client update of q and pi from the components' per-sample losses ([M, n]).

    Returns:
        q: float64 [M, n], q[m, i] proportional to pi_m exp(-losses[m, i]), each column summing to 1;
        the new pi (float64 [M]): q's mean over the samples (the old pi for a client without samples).
    """
    log_q = torch.log(torch.from_numpy(np.array(pi, dtype=np.float64)))[:, None] - losses.double()
    q = torch.softmax(log_q, dim=0)
    return q, (q.mean(dim=1).numpy() if q.shape[1] else np.asarray(pi, dtype=np.float64))


def entropy(pi: np.ndarray) -> float:
    """Entropy (nats) of a probability vector; 0 log 0 = 0."""
    p = pi[pi > 0]
    return float(-(p * np.log(p)).sum())


def row_weights(w: torch.Tensor) -> Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]:
    """The `sample_weight` hook of one component's job: each training row's responsibility `w[rows]`."""

    def sample_weight(x: torch.Tensor, y: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        return w[rows].to(x.device)

    return sample_weight


class Mixture(nn.Module):
    """A client's predictor as logits: log sum_m pi_m softmax(h_m(x)), whose softmax is the mixture (with one
    component, exactly its log-softmax)."""

    log_pi: torch.Tensor

    def __init__(self, components: Sequence[nn.Module], pi: np.ndarray):
        super().__init__()
        self.components = nn.ModuleList(components)
        self.register_buffer("log_pi", torch.log(torch.from_numpy(np.array(pi, dtype=np.float32))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        log_probs = torch.stack([F.log_softmax(h(x), dim=1) for h in self.components])
        return torch.logsumexp(self.log_pi.view(-1, 1, 1) + log_probs, dim=0)


@dataclass(frozen=True)
class FedEMState:
    """The M component models, the pi each client last sent, and who uploaded this round."""

    components: tuple[Arrays, ...]
    """Component m's weights, by m."""
    pi: dict[int, np.ndarray] = field(default_factory=dict)
    """Each client that uploaded: the pi (float64 [M]) it last sent."""
    round_clients: tuple[int, ...] = ()
    """This round's uploading clients, for the round metrics."""


@dataclass(frozen=True)
class FedEMClientState:
    """A client's mixture weights pi_t (float64 [M]); None before its first job."""

    pi: np.ndarray | None = None


@register_algorithm("fedem")
class FedEM(
    Algorithm["FedEM.Config", FedEMState, FedEMClientState],
    RoundReport[FedEMState],
    TestTimeAssignment[FedEMState],
    SystemVote[FedEMState, FedEMClientState],
    PersonalModels[FedEMClientState],
):
    """M shared component models; each client mixes them with its own pi, learnt by EM. Component m travels as
    `Payload.models[m]` (downlink, uplink, and a client's shared mixture)."""

    State = FedEMState
    ClientState = FedEMClientState

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        components: int = 3
        """M, the number of component models. 3, as in the paper's experiments (Sec. 5) and its released
        scripts (`--n_learners 3` for every dataset), also the default of FedRC's code, from which 002 ran FedEM
        (002 does not state M)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            if isinstance(self.components, bool) or not isinstance(self.components, int) or self.components < 1:
                raise ConfigError("components", self.components, "an integer >= 1")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.count = self.config.components
        self.uniform = np.full(self.count, 1.0 / self.count)
        self._components: list[nn.Module] = []

    # -- server half ---------------------------------------------------------------------------------
    def init_state(self) -> FedEMState:
        return FedEMState(tuple(self.initial_models(self.count, "fedem")))

    def configure(self, round: int, state: FedEMState, sampled: Sequence[int]) -> dict[int, Payload]:
        """All M components, one shared payload."""
        offer = self.offer(state)
        return {cid: offer for cid in sampled}

    def aggregate(self, round: int, state: FedEMState, results: Sequence[ClientResult]) -> FedEMState:
        counts = sample_counts(results)
        components = tuple(
            average_weights([r.uplink.models[m].weights for r in results], counts) for m in range(self.count)
        )
        pi = {**state.pi, **{r.client_id: r.uplink[MIXTURE]["pi"] for r in results}}
        return dataclasses.replace(
            state, components=components, pi=pi, round_clients=tuple(r.client_id for r in results)
        )

    def round_metrics(self, state: FedEMState) -> Metrics:
        latest = [state.pi[c] for c in state.round_clients]
        if not latest:
            return {}
        mass = np.sum(latest, axis=0)
        return {
            ENTROPY: float(np.mean([entropy(p) for p in latest])),
            **{MASS.format(m): float(v) for m, v in enumerate(mass)},
            **{MAIN.format(c): float(np.argmax(p)) for c, p in sorted(state.pi.items())},
        }

    def evaluation_payloads(self, state: FedEMState, clients: Sequence[int]) -> dict[int, Payload]:
        """All M components: each client mixes them with its own pi."""
        offer = self.offer(state)
        return {cid: offer for cid in clients}

    def assign(self, state: FedEMState, descriptions: dict[int, Payload]) -> Assignment:
        """The components' ensemble, each weighted by its mixture mass over the clients (002 App. I.3)."""
        mass = np.sum(list(state.pi.values()), axis=0) if state.pi else np.zeros(self.count)
        models = {m: Payload(state.components[m]) for m in range(self.count) if mass[m] > 0}
        return Assignment.size_weighted(models, {m: float(mass[m]) for m in models}, list(descriptions))

    def offer(self, state: FedEMState) -> Payload:
        """One payload with every component, component m as `models[m]`."""
        return Payload(models={m: Payload(w) for m, w in enumerate(state.components)})

    # -- client half ---------------------------------------------------------------------------------
    def client_update(
        self, payload: Payload, state: FedEMClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, FedEMClientState, Metrics]:
        models = self.components(payload)
        q, pi = e_step(self.pi_of(state), torch.stack([training_losses(h, data, ctx.device) for h in models]))
        uploads, loss, steps = {}, 0.0, 0.0
        for m, model in enumerate(models):
            weights = q[m].float()
            if bool((weights == 1).all()):  # the plain loss, in FedAvg's exact arithmetic (always so when M = 1)
                hooks = TrainHooks()
            else:
                hooks = TrainHooks(sample_weight=row_weights(weights))
            metrics = train_local(model, data, ctx, hooks)
            uploads[m] = Payload(get_weights(model))
            loss, steps = loss + metrics[M.TRAIN_LOSS], steps + metrics[M.TRAIN_STEPS]
        # The weighted losses of the M jobs add up to the mixture's expected loss (q sums to 1 per sample).
        metrics = {M.TRAIN_LOSS: loss, M.TRAIN_STEPS: steps, M.TRAIN_SAMPLES: float(data.num_train)}
        uplink = counted(None, data.num_train, {MIXTURE: {"pi": pi}}).merged(Payload(models=uploads))
        return uplink, dataclasses.replace(state, pi=pi), metrics

    def client_evaluate(
        self, payload: Payload, state: FedEMClientState, data: ClientData, ctx: RoundContext
    ) -> Metrics:
        """The client's mixture of the payload's components, with its own pi."""
        return evaluate(self.mixture(payload, self.pi_of(state)), data, device=ctx.device)

    def client_share(self, payload: Payload, state: FedEMClientState) -> Payload:
        """The client's pi, which with the components the server holds is its predictor for system accuracy's vote."""
        return Payload(extras={MIXTURE: {"pi": self.pi_of(state)}})

    def client_predict(
        self, payload: Payload, state: FedEMClientState, data: ClientData, ctx: RoundContext
    ) -> dict[str, np.ndarray]:
        """Predictions of a shared mixture (`client_share`): its owner's pi, not this client's."""
        return {M.PRED: predict(self.mixture(payload, payload[MIXTURE]["pi"]), data, device=ctx.device).numpy()}

    # -- helpers -------------------------------------------------------------------------------------
    def components(self, payload: Payload) -> list[nn.Module]:
        """This process's M component models with the payload's components loaded (built once per process,
        outside the job's random stream, as `model_with`)."""
        while len(self._components) < self.count:
            with torch.random.fork_rng(devices=[]):
                self._components.append(self.builder())
        for m, model in enumerate(self._components):
            set_weights(model, payload.models[m].weights)
        return self._components

    def pi_of(self, state: FedEMClientState) -> np.ndarray:
        """The client's pi; uniform for a client never sampled."""
        return state.pi if state.pi is not None else self.uniform

    def mixture(self, payload: Payload, pi: np.ndarray) -> Mixture:
        return Mixture(self.components(payload), pi)

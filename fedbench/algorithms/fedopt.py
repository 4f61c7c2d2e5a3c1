"""FedOpt (Reddi et al. 2021, "Adaptive Federated Optimization", ICLR; Algorithms 1 and 2): FedAvg's clients,
and a server that treats the clients' average change as a gradient for an optimizer of its own.

Round t: every sampled client trains the global model x_t locally and sends its model back (FedAvg's client
half, so the downlink and uplink are FedAvg's). The server forms the pseudo-gradient

    Delta_t = sum_i n_i / n (x_i - x_t)  = (FedAvg's average) - x_t

and steps, elementwise (Algorithm 2; m and v live in the server state and are never sent):

    m_t     = beta1 m_{t-1} + (1 - beta1) Delta_t
    v_t     = v_{t-1} + Delta_t^2                                        FedAdagrad
    v_t     = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)  FedYogi
    v_t     = beta2 v_{t-1} + (1 - beta2) Delta_t^2                      FedAdam
    x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau)

Where Algorithm 2 leaves room, or fedbench departs from it (each also in docs/methods.md):
- Initial state: m_{-1} = 0 and v_{-1} = tau^2, the smallest value Algorithm 2 allows (v_{-1} >= tau^2).
  No bias correction: Algorithm 2 has none. (The authors' released code differs: v starts at 0 and its
  Adam and Yogi correct the bias.)
- Weighting: Algorithm 2 writes the plain mean over the sampled clients; fedbench weighs by sample count, as
  FedAvg does (the released code, by examples processed), so a server optimizer that reduces to FedAvg's
  returns FedAvg's model.
- What the optimizer steps: the model's parameters, which is what the clients' optimizer trains, so Delta
  is a pseudo-gradient of them. Buffers (BatchNorm's running statistics and its integer counter) are
  statistics, not weights of the objective: they take FedAvg's average. An adaptive or momentum step on a
  running variance could drive it negative.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TypeVar

import numpy as np

from fedbench.algorithms.base import AlgorithmConfig, ConfigT, GlobalState, NoClientState, average_uplinks
from fedbench.algorithms.fedavg import FedAvg
from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_algorithm
from fedbench.core.types import Arrays, ClientResult, Payload


@dataclass(frozen=True)
class ServerOptimizerState(GlobalState):
    """The global model and the server optimizer's slots: parameter name -> its arrays (float64, never sent)."""

    slots: dict[str, Arrays] = field(default_factory=dict)


class ServerOptimizer(FedAvg[ConfigT, ServerOptimizerState, NoClientState]):
    """Reddi et al.'s Algorithm 1: FedAvg's client half; the server moves each parameter by `step` of its
    pseudo-gradient. Subclasses give `initial_slots` and `step`; FedAvgM and FedOpt are two of them."""

    State = ServerOptimizerState

    def initial_slots(self, parameter: np.ndarray) -> Arrays:
        """The optimizer's arrays for one parameter before round 1."""
        raise NotImplementedError

    def step(self, delta: np.ndarray, slots: Arrays) -> tuple[np.ndarray, Arrays]:
        """(how far the parameter moves, its new slots) for pseudo-gradient `delta` (float64)."""
        raise NotImplementedError

    def init_state(self) -> ServerOptimizerState:
        return self.initial_state(self.initial_weights(), self.parameter_names)

    def initial_state(self, weights: Arrays, parameters: Iterable[str]) -> ServerOptimizerState:
        """The state before round 1 for a model's `weights`: the entries named in `parameters` get slots (the
        optimizer steps them), the others (buffers) will take FedAvg's average."""
        return ServerOptimizerState(Payload(weights), {name: self.initial_slots(weights[name]) for name in parameters})

    def aggregate(
        self, round: int, state: ServerOptimizerState, results: Sequence[ClientResult]
    ) -> ServerOptimizerState:
        average = average_uplinks(results)
        current = state.global_model.weights
        model, slots = dict(average), {}
        for name, old in state.slots.items():
            delta = average[name] - current[name].astype(np.float64)
            update, slots[name] = self.step(delta, old)
            # x_t + update, written from the average: where update == delta (FedAvg's server) this is the
            # average bit for bit, which x_t + delta need not be after rounding.
            model[name] = (average[name] + (update - delta)).astype(current[name].dtype)
        return replace(state, global_model=Payload(model), slots=slots)


def require_positive(field: str, value: float) -> None:
    """A learning rate or tau: finite and > 0, else ConfigError naming `field`."""
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(field, value, "a number > 0")


def require_decay(field: str, value: float) -> None:
    """A decay (beta1, beta2, momentum): in [0, 1), else ConfigError naming `field`."""
    if not 0.0 <= value < 1.0:
        raise ConfigError(field, value, "a number in [0, 1)")


OptConfigT = TypeVar("OptConfigT", bound="FedOpt.Config")
"""The Config of a FedOpt method (`FedOpt.Config` or one that extends it)."""


class FedOpt(ServerOptimizer[OptConfigT]):
    """Algorithm 2's server: momentum m, a second-moment estimate v whose rule each subclass gives, and the
    step eta m / (sqrt(v) + tau)."""

    @dataclass(frozen=True)
    class Config(AlgorithmConfig):
        server_lr: float = 0.01
        """Server learning rate eta (Algorithm 2). 10^-2: for FedAdam and FedYogi the best on Shakespeare and
        Stack Overflow NWP, and the lower median of the six tasks' best (10^-2.5 to 10^0), in the grid of
        Reddi et al. App. D (published with their code, optimization/docs/hyperparameters.md)."""
        beta1: float = 0.9
        """Momentum decay beta1 (Reddi et al. Sec. 5 fix 0.9 for FedAdam and FedYogi). 0: no momentum, m = Delta."""
        tau: float = 1e-3
        """Adaptivity tau, added to sqrt(v): 10^-3, which the authors found to do well across tasks and optimizers
        (Reddi et al. Sec. 5; their code's README recommends it), in a grid of 10^-5 to 10^-1. Smaller is more
        adaptive. v starts at tau^2 (Algorithm 2: v_{-1} >= tau^2)."""

        def __post_init__(self) -> None:
            super().__post_init__()
            require_positive("server_lr", self.server_lr)
            require_decay("beta1", self.beta1)
            require_positive("tau", self.tau)

    def second_moment(self, v: np.ndarray, square: np.ndarray) -> np.ndarray:
        """v_t from v_{t-1} and Delta_t^2 (the line of Algorithm 2 that names the method)."""
        raise NotImplementedError

    def initial_slots(self, parameter: np.ndarray) -> Arrays:
        return {"m": np.zeros(parameter.shape), "v": np.full(parameter.shape, self.config.tau**2)}

    def step(self, delta: np.ndarray, slots: Arrays) -> tuple[np.ndarray, Arrays]:
        c = self.config
        m = c.beta1 * slots["m"] + (1 - c.beta1) * delta
        v = self.second_moment(slots["v"], delta**2)
        return c.server_lr * m / (np.sqrt(v) + c.tau), {"m": m, "v": v}


@dataclass(frozen=True)
class AdamConfig(FedOpt.Config):
    """FedOpt's fields and the second-moment decay of FedAdam and FedYogi."""

    beta2: float = 0.99
    """Second-moment decay beta2 (Reddi et al. Sec. 5 fix 0.99 for FedAdam and FedYogi; the released code
    leaves Keras's 0.999). 0: v = Delta^2, and FedAdam's step is eta m / (|Delta| + tau)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require_decay("beta2", self.beta2)


@register_algorithm("fedadam")
class FedAdam(FedOpt[AdamConfig]):
    """FedOpt with Adam's second moment, an exponential average of Delta^2."""

    Config = AdamConfig

    def second_moment(self, v: np.ndarray, square: np.ndarray) -> np.ndarray:
        b2 = self.config.beta2
        return b2 * v + (1 - b2) * square


@register_algorithm("fedyogi")
class FedYogi(FedOpt[AdamConfig]):
    """FedOpt with Yogi's second moment: v moves towards Delta^2 by (1 - beta2) Delta^2, a step set by Delta^2
    alone (Adam's is (1 - beta2)(v - Delta^2)), so a large v decays slowly when Delta shrinks."""

    Config = AdamConfig

    def second_moment(self, v: np.ndarray, square: np.ndarray) -> np.ndarray:
        return v - (1 - self.config.beta2) * square * np.sign(v - square)


@register_algorithm("fedadagrad")
class FedAdagrad(FedOpt["FedAdagrad.Config"]):
    """FedOpt with Adagrad's second moment, the sum of every Delta^2 so far (v only grows)."""

    @dataclass(frozen=True)
    class Config(FedOpt.Config):
        server_lr: float = 0.1
        """Server learning rate eta (Algorithm 2). 10^-1: the best on CIFAR-100 and EMNIST CR and the median
        of the six tasks' best values (10^-1.5 to 10^1) for FedAdagrad in the grid of Reddi et al. App. D
        (published with their code, optimization/docs/hyperparameters.md)."""
        beta1: float = 0.0
        """Momentum decay beta1. 0: Reddi et al. fix beta1 = 0.9 only for FedAdam and FedYogi (Sec. 5); their
        FedAdagrad analysis (Theorem 1) and their released code (Keras Adagrad) have no momentum."""

    def second_moment(self, v: np.ndarray, square: np.ndarray) -> np.ndarray:
        return v + square

"""The scenario artifact: per stage and client, sample indices plus small descriptors, never image copies."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from fedbench.scenarios.transforms import Op


@dataclass(frozen=True, eq=False)
class ClientView:
    """What one client holds during one stage of the run.

    Attributes:
        train: indices into the base dataset used for local training.
        test: indices of the client's local test split (same distribution as `train`).
        distribution_id: ground-truth id of the distribution (methods never see it; evaluation and Oracle do).
        transform: feature-transform ops applied on the worker when a batch is formed (empty: none).
        label_map: array mapping original label -> label seen by the client (concept shift), or None.
        description: short human-readable summary of the distribution (for `fedbench scenario show`).
    """

    train: np.ndarray
    test: np.ndarray
    distribution_id: int = 0
    transform: tuple[Op, ...] = ()
    label_map: np.ndarray | None = None
    description: str = ""


@dataclass(frozen=True, eq=False)
class TestClient:
    """A test-time client: data it is evaluated on, never trained on.

    Attributes:
        view: its samples (`view.test`; `view.train` is empty), transform, label map and distribution id.
        labelled: the few indices of `view.test` whose labels a method may use to pick a model (002 App. E);
            empty when test clients are fully unlabelled.
        origin: the training client whose distribution it takes, or -1 for an unseen distribution.
        seen: whether its distribution occurred in some training round.
    """

    __test__ = False  # not a pytest test class, whatever its name

    view: ClientView
    labelled: np.ndarray
    origin: int
    seen: bool


@dataclass(frozen=True, eq=False)
class Scenario:
    """A federation over rounds: `stages[s][client]` and which stage each round uses.

    A static federation has one stage; drifting scenarios add stages and a `round_stage` table
    (round r, 1-based, uses stage `round_stage[r - 1]`).

    Attributes:
        input_shape: shape of one sample as models see it, after transforms (colour makes grayscale RGB).
        duplicated: True when the scenario deliberately lets one sample occur more than once in a stage: held by
            several clients (dataset duplication for 50-100 clients, 002 I.3) or repeated within a client's part
            (002's label-skew data scaling); otherwise training indices of a stage are distinct.
        distributions: distribution id -> its description (ids index this tuple).
    """

    key: str
    num_clients: int
    num_classes: int
    input_shape: tuple[int, ...]
    stages: tuple[tuple[ClientView, ...], ...]
    round_stage: tuple[int, ...] = ()
    test_clients: tuple[TestClient, ...] = field(default=())
    duplicated: bool = False
    distributions: tuple[str, ...] = ()

    def stage_of(self, round: int) -> int:
        return self.round_stage[round - 1] if self.round_stage else 0

    def view(self, round: int, client_id: int) -> ClientView:
        return self.stages[self.stage_of(round)][client_id]

    def train_sizes(self, round: int) -> list[int]:
        return [len(self.view(round, c).train) for c in range(self.num_clients)]

    def distribution_ids(self, rounds: int) -> np.ndarray:
        """Ground truth [rounds, clients]: the distribution id of every client in every round (1-based rows)."""
        return np.array(
            [[self.view(r, c).distribution_id for c in range(self.num_clients)] for r in range(1, rounds + 1)]
        )

    def trained_distributions(self, rounds: int) -> int:
        """How many distinct distributions the clients train on in `rounds` rounds: the true number of clusters
        that clustering methods are given (001 Sec. IV-C: "we provide the true number of clusters K")."""
        return len(np.unique(self.distribution_ids(rounds)))

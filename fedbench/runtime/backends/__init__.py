"""Where client jobs run: a registry of backends (`resources.backend`), each a `BackendKind` that starts a `Backend`.

Built in: `serial` (every job in the driver process) and `ray` (a pool of Ray actors). A backend takes a round's
per-client payloads and the state store, runs the jobs, puts new client states back into the store and returns
results in client-id order (so aggregation sums in the same order everywhere): `run` as a list, `stream` one at a
time (for an aggregation that folds them as they come). Users may register their own (`module:attribute`, or an
entry point in the group `fedbench.backends`), as they register methods.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from fedbench.core.registry import BACKENDS
from fedbench.core.runspec import ResourceSpec, RunSpec
from fedbench.core.types import ClientResult, Payload
from fedbench.data import BaseDataset
from fedbench.runtime.jobs import Job
from fedbench.runtime.placement import WorkerPlace
from fedbench.runtime.state_store import StateStore
from fedbench.scenarios import Scenario

if TYPE_CHECKING:
    from fedbench.runtime.ray_pool import RayWorkerPool


class Backend(Protocol):
    """What the round loop and the evaluation protocols ask of a running backend."""

    def run(self, job: Job, round: int, payloads: Mapping[int, Payload], store: StateStore) -> list[ClientResult]: ...

    def stream(
        self, job: Job, round: int, payloads: Mapping[int, Payload], store: StateStore
    ) -> Iterator[ClientResult]: ...

    def client_states(self, store: StateStore) -> dict[int, Any]: ...

    def worker_pids(self) -> list[int]: ...

    def worker_places(self) -> list[WorkerPlace]: ...

    def close(self) -> None: ...


class BackendKind(Protocol):
    """A registered backend, as `BACKENDS.get(name)` returns it: what a session asks before a task's runs, and how
    one run starts it."""

    @property
    def uses_ray(self) -> bool:
        """Its workers are Ray actors: the session starts Ray and a task's runs share one `RayWorkerPool`."""
        ...

    @property
    def exact(self) -> bool:
        """Its runs give the serial backend's numbers bit for bit; else within `training.functional`'s tolerance."""
        ...

    def check_fits(self, resources: ResourceSpec) -> None:
        """Raise ConfigError, before any run starts, where `resources` cannot be given here (GPUs this machine or
        cluster lacks); called once Ray is up for a kind that `uses_ray`."""
        ...

    def __call__(
        self, dataset: BaseDataset, scenario: Scenario, spec: RunSpec, pool: RayWorkerPool | None = None
    ) -> Backend:
        """The backend started for one run; `pool`: Ray actors shared with the task's other runs (None: its own)."""
        ...


def backend_kind(name: str) -> BackendKind:
    """The registered backend called `name`; UnknownNameError (naming `resources.backend`) for any other."""
    kind: BackendKind = BACKENDS.get(name, field="resources.backend")
    return kind


def make_backend(
    name: str, dataset: BaseDataset, scenario: Scenario, spec: RunSpec, pool: RayWorkerPool | None = None
) -> Backend:
    """The backend called `name`, started for this run.

    Args:
        pool: a `RayWorkerPool` to run on (shared by several runs) where the backend `uses_ray`; None starts one for
            this run only.
    """
    return backend_kind(name)(dataset, scenario, spec, pool)

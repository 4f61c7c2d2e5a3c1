"""The `batched` backend: the Ray backend's actors, training many clients of a `FunctionalFit` method in one
vectorised pass (`fedbench.runtime.batched`, imported only when a run asks for it); and `auto`, which picks it where
clients train on GPUs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedbench.core.registry import register_backend
from fedbench.core.runspec import RunSpec
from fedbench.data import BaseDataset
from fedbench.runtime.backends.ray_actors import RayActors
from fedbench.scenarios import Scenario

if TYPE_CHECKING:
    from fedbench.runtime.backends import Backend
    from fedbench.runtime.ray_pool import RayWorkerPool


class BatchedActors(RayActors):
    """The `batched` backend: the ray backend's actors, training the clients of a FedAvg-family method (`FunctionalFit`)
    `resources.clients_per_pass` at a time in one vectorised pass; numbers within docs/backends.md's tolerance.

    The `BackendKind` of `batched.BatchedBackend`, checked as the ray backend's are; a vectorised pass sums in another
    order than one client's training (`training.functional.WEIGHT_TOLERANCE`)."""

    exact = False

    def __call__(
        self, dataset: BaseDataset, scenario: Scenario, spec: RunSpec, pool: RayWorkerPool | None = None
    ) -> Backend:
        from fedbench.runtime.batched import BatchedBackend

        return BatchedBackend(dataset, scenario, spec, pool)


class AutoActors(RayActors):
    """The `auto` backend: Ray actors that train clients together where they train on GPUs (`client_gpus` > 0: the
    batched backend) and one at a time on CPUs (the ray backend), where a vectorised pass is slower
    (bench/results/batched_cpu.md)."""

    exact = False

    def __call__(
        self, dataset: BaseDataset, scenario: Scenario, spec: RunSpec, pool: RayWorkerPool | None = None
    ) -> Backend:
        if spec.resources.client_gpus > 0:
            return BATCHED(dataset, scenario, spec, pool)
        return super().__call__(dataset, scenario, spec, pool)


BATCHED = BatchedActors()
register_backend("batched")(BATCHED)
register_backend("auto")(AutoActors())

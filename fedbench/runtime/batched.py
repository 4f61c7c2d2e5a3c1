"""The batched backend: the Ray backend's pool of actors, where a method whose fit is declared (`FunctionalFit`)
has its clients' FIT jobs trained together, `resources.clients_per_pass` at a time, in one vectorised pass per call
(`ClientWorker.fit_together`). Every other job, and every job of another method, runs as on the ray backend.

A pass's clients are consecutive in the round's dispatch order (client ids when the round streams, largest first
otherwise), so which clients share a pass depends on the run alone, not on how many workers there are: a run's
numbers are the same on any number of workers (but not bit for bit those of the per-client path: docs/backends.md).
"""

from __future__ import annotations

import warnings

import ray

from fedbench.core.runspec import RunSpec
from fedbench.data import BaseDataset
from fedbench.runtime.jobs import FIT, Job
from fedbench.runtime.placement import WorkerPlace
from fedbench.runtime.ray_pool import RayBackend, RayWorkerPool
from fedbench.scenarios import Scenario


class BatchedBackend(RayBackend):
    """`RayBackend` with FIT jobs of capable methods trained `clients_per_pass` clients to a call."""

    def __init__(self, dataset: BaseDataset, scenario: Scenario, spec: RunSpec, pool: RayWorkerPool | None = None):
        super().__init__(dataset, scenario, spec, pool)
        self.pass_size = spec.resources.clients_per_pass
        self.together = ray.get(self.workers[0].vectorises_fits.remote())
        if not self.together:
            warnings.warn(
                f"resources.backend is batched, but {spec.algorithm.name} trains its clients one at a time: its fit "
                "is its own (not FunctionalFit's) or its model's training step changes buffers or draws random "
                "numbers (BatchNorm, dropout); it runs as on the ray backend",
                RuntimeWarning,
                stacklevel=2,
            )

    def worker_places(self) -> list[WorkerPlace]:
        """Where each worker trains; where clients train together, its numerics say so (their sums run in another
        order than one client's)."""
        if not self.together:
            return super().worker_places()
        passes = f"up to {self.pass_size}" if self.pass_size else "all of a round's"
        return [
            {**place, "numerics": f"{place.get('numerics', '')}, {passes} clients per vectorised pass"}
            for place in super().worker_places()
        ]

    def _clients_per_call(self, job: Job, remaining: int) -> int:
        if job is FIT and self.together:
            return min(self.pass_size or remaining, remaining)
        return super()._clients_per_call(job, remaining)

    def _worker_method(self, job: Job, clients: list[int]) -> str:
        if job is FIT and self.together:
            return "fit_together"
        return super()._worker_method(job, clients)

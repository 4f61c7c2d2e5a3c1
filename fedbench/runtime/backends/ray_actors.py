"""The `ray` backend: client jobs on a pool of Ray actors (`fedbench.runtime.ray_pool`, imported only when a run
asks for it, so that naming the backend in a task costs no Ray import)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fedbench.core.registry import register_backend
from fedbench.core.runspec import ResourceSpec, RunSpec
from fedbench.data import BaseDataset
from fedbench.scenarios import Scenario

if TYPE_CHECKING:
    from fedbench.runtime.backends import Backend
    from fedbench.runtime.ray_pool import RayWorkerPool


class RayActors:
    """The `ray` backend: client jobs on a pool of Ray actors (`resources.client_cpus` / `client_gpus` each), reused by
    a task's runs; the serial backend's numbers bit for bit.

    The `BackendKind` of `ray_pool.RayBackend`."""

    uses_ray = True
    exact = True

    def check_fits(self, resources: ResourceSpec) -> None:
        """A worker no node can hold would wait forever: refused before the first run."""
        from fedbench.runtime.ray_resources import check_worker_fits, node_resources

        check_worker_fits(resources, node_resources())

    def __call__(
        self, dataset: BaseDataset, scenario: Scenario, spec: RunSpec, pool: RayWorkerPool | None = None
    ) -> Backend:
        from fedbench.runtime.ray_pool import RayBackend

        return RayBackend(dataset, scenario, spec, pool)


register_backend("ray")(RayActors())

"""The `serial` backend: every job in the driver process, in client-id order."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_backend
from fedbench.core.runspec import ResourceSpec, RunSpec
from fedbench.core.types import ClientResult, Payload
from fedbench.data import BaseDataset
from fedbench.runtime.jobs import Job
from fedbench.runtime.placement import WorkerPlace
from fedbench.runtime.state_store import StateStore
from fedbench.runtime.worker import ClientWorker
from fedbench.scenarios import Scenario

if TYPE_CHECKING:
    from fedbench.runtime.ray_pool import RayWorkerPool


@register_backend("serial")
class SerialBackend:
    """The `serial` backend (the default): every job in the driver process, in client-id order; the reference numbers.

    The class is its own `BackendKind`."""

    uses_ray: ClassVar[bool] = False
    exact: ClassVar[bool] = True

    def __init__(self, dataset: BaseDataset, scenario: Scenario, spec: RunSpec, pool: RayWorkerPool | None = None):
        """`pool` is never used: a serial run has no Ray actors."""
        self.worker = ClientWorker()
        self.places = [self.worker.load(dataset, scenario, spec)]

    @staticmethod
    def check_fits(resources: ResourceSpec) -> None:
        """Refuse GPUs this process does not have, as the ray backend refuses a worker no node holds, rather than
        train on CPU what the task asked to train on a GPU."""
        import torch

        found = torch.cuda.device_count()
        if resources.client_gpus > found:
            raise ConfigError(
                "resources.client_gpus",
                resources.client_gpus,
                f"at most the {found} CUDA device{'s' * (found != 1)} torch sees here: the serial backend "
                "trains in this process (0 trains on CPU)",
            )

    def run(self, job: Job, round: int, payloads: Mapping[int, Payload], store: StateStore) -> list[ClientResult]:
        return list(self.stream(job, round, payloads, store))

    def stream(
        self, job: Job, round: int, payloads: Mapping[int, Payload], store: StateStore
    ) -> Iterator[ClientResult]:
        """The jobs' results one at a time, in client-id order, each computed when asked for."""
        for cid in sorted(payloads):
            result = self.worker.run(job, round, cid, payloads[cid], store.get(cid))
            if job.keeps_state:
                result, new_state = result
                store.put(cid, new_state)
            yield result

    def client_states(self, store: StateStore) -> dict[int, Any]:
        """Every client's state itself (a checkpoint's)."""
        return dict(store.items())

    def worker_pids(self) -> list[int]:
        return [self.worker.pid()]

    def worker_places(self) -> list[WorkerPlace]:
        return self.places

    def close(self) -> None:
        pass

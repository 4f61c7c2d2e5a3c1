"""Where client jobs run: in this process (serial) or on a pool of Ray actors (ray).

Both take a round's per-client payloads and the state store, run the jobs, put new client states back
into the store and return results in client-id order (so aggregation sums in the same order everywhere):
`run` as a list, `stream` one at a time (for an aggregation that folds them as they come).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from fedbench.core.errors import ConfigError
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


class Backend(Protocol):
    """What the round loop and the evaluation protocols ask of a backend (`SerialBackend`, `RayBackend`)."""

    def run(self, job: Job, round: int, payloads: Mapping[int, Payload], store: StateStore) -> list[ClientResult]: ...

    def stream(
        self, job: Job, round: int, payloads: Mapping[int, Payload], store: StateStore
    ) -> Iterator[ClientResult]: ...

    def client_states(self, store: StateStore) -> dict[int, Any]: ...

    def worker_pids(self) -> list[int]: ...

    def worker_places(self) -> list[WorkerPlace]: ...

    def close(self) -> None: ...


class SerialBackend:
    """Runs every job in the driver process, in client-id order."""

    name = "serial"

    def __init__(self, dataset: BaseDataset, scenario: Scenario, spec: RunSpec):
        self.worker = ClientWorker()
        self.places = [self.worker.load(dataset, scenario, spec)]

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


def check_serial_fits(resources: ResourceSpec) -> None:
    """Refuse GPUs this process does not have for a serial run, as the ray backend refuses a worker no node holds,
    rather than train on CPU what the task asked to train on a GPU."""
    import torch

    found = torch.cuda.device_count()
    if resources.client_gpus > found:
        raise ConfigError(
            "resources.client_gpus",
            resources.client_gpus,
            f"at most the {found} CUDA device{'s' * (found != 1)} torch sees here: the serial backend "
            "trains in this process (0 trains on CPU)",
        )


def make_backend(
    name: str, dataset: BaseDataset, scenario: Scenario, spec: RunSpec, pool: RayWorkerPool | None = None
) -> Backend:
    """The backend called `name` (`serial` or `ray`), started for this run.

    Args:
        pool: a `RayWorkerPool` to run on (shared by several runs); None starts one for this run only.
    """
    if name == "ray":
        from fedbench.runtime.ray_pool import RayBackend  # Ray is imported only when asked for

        return RayBackend(dataset, scenario, spec, pool)
    return SerialBackend(dataset, scenario, spec)

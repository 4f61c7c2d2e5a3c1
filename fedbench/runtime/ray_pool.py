"""The Ray backend: a pool of ClientWorker actors fed largest-client-first.

The pool outlives a run: consecutive runs with the same resources reuse its actors. The base dataset is
`ray.put` once (again only when a run uses another dataset), the scenario once per run; each
distinct payload of a round (usually one global model) is `ray.put` once, as numpy; updates come back as
numpy. Client states stay in the object store: `fit` has two returns and the driver fetches only the
result, keeping the new state's reference in the StateStore.
"""

from __future__ import annotations

import os
import secrets
from typing import Mapping

import ray

from fedbench.core.runspec import ResourceSpec, RunSpec
from fedbench.core.types import ClientResult, Payload
from fedbench.data import BaseDataset
from fedbench.runtime.ray_resources import check_worker_fits, get_reporting_waits
from fedbench.runtime.state_store import StateStore
from fedbench.runtime.worker import ClientWorker
from fedbench.scenarios import Scenario

RemoteClientWorker = ray.remote(ClientWorker)


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to (or start) Ray once per process.

    A local Ray's servers listen on every interface (Ray 2.60 has no option to bind them to 127.0.0.1), so
    one started here keeps Ray's default token auth, with a token only this process and the processes Ray
    starts for it know (nothing is written to ~/.ray); RAY_AUTH_MODE, when set, decides instead. Connecting
    to a cluster (`address`, RAY_ADDRESS) leaves auth as the cluster has it (README: Ray clusters).
    """
    if ray.is_initialized():
        return
    starts_local = address == "local" or (address is None and "RAY_ADDRESS" not in os.environ)
    if starts_local and "RAY_AUTH_MODE" not in os.environ:  # Ray turns token auth on: give it a token of its own
        os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    # "local", not None: ray.init(address=None) joins the last cluster `ray start` or a test's Cluster recorded
    # in /tmp/ray/ray_current_cluster on this host, anyone's, instead of starting one
    ray.init(address="local" if starts_local else address, num_cpus=num_cpus, include_dashboard=False,
             log_to_driver=True, configure_logging=False)


def pool_size(resources: ResourceSpec, available: Mapping[str, float], max_clients: int) -> int:
    """Workers to start: the explicit `resources.num_workers`, else as many as free resources allow."""
    if resources.num_workers is not None:
        return max(1, min(resources.num_workers, max_clients))
    fit = int(available.get("CPU", 1) // resources.client_cpus)
    if resources.client_gpus > 0:
        fit = min(fit, int(available.get("GPU", 0) // resources.client_gpus))
    return max(1, min(fit, max_clients))


class RayWorkerPool:
    """Long-lived ClientWorker actors with one resource shape, reused by consecutive runs."""

    def __init__(self, resources: ResourceSpec, max_clients: int):
        ensure_ray()
        check_worker_fits(resources, ray.cluster_resources())
        self.resources = resources
        n = pool_size(resources, ray.available_resources(), max_clients)
        options = {"num_cpus": resources.client_cpus, "num_gpus": resources.client_gpus}
        self.workers = [RemoteClientWorker.options(**options).remote() for _ in range(n)]
        self._dataset = None  # (dataset, ref) of the last dataset shipped: runs of a task usually share it

    def load(self, dataset: BaseDataset, scenario: Scenario, spec: RunSpec) -> None:
        """Point every worker at a run; the dataset is `ray.put` only when it changed since the last run."""
        if self._dataset is None or self._dataset[0] is not dataset:
            self._dataset = (dataset, ray.put(dataset))
        scenario_ref = ray.put(scenario)
        loads = [w.load.remote(self._dataset[1], scenario_ref, spec) for w in self.workers]
        get_reporting_waits(loads, "client workers to start", self.resources)

    def placement_groups(self) -> list[str | None]:
        """Each worker's placement group (a sweep's trial reserves one for its workers)."""
        return ray.get([w.placement_group.remote() for w in self.workers])

    def close(self) -> None:
        for worker in self.workers:
            ray.kill(worker)
        self.workers = []


class ReusedPool:
    """The one RayWorkerPool that consecutive runs share (a task's runs, or the trials a Tune process runs):
    kept while the resource shape stays the same, replaced when it changes, and dropped after a failed run,
    so a crashed actor cannot take later runs down with it."""

    def __init__(self) -> None:
        self.pool: RayWorkerPool | None = None

    def for_run(self, spec: RunSpec, max_clients: int | None = None) -> RayWorkerPool:
        """The pool for `spec`, started (sized for `max_clients`, default the run's clients) if needed."""
        if self.pool is None or self.pool.resources != spec.resources:
            self.close()
            self.pool = RayWorkerPool(spec.resources, max_clients or spec.scenario.num_clients)
        return self.pool

    def after(self, status: str) -> None:
        """Drop the pool after a FAILED run: a worker may be what failed."""
        if status == "FAILED":
            self.close()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None


class RayBackend:
    """Client jobs on a pool of `ClientWorker` actors; one dispatch loop for every kind of job."""

    name = "ray"

    def __init__(self, dataset: BaseDataset, scenario: Scenario, spec: RunSpec, pool: RayWorkerPool | None = None):
        self.owns_pool = pool is None
        self.pool = pool or RayWorkerPool(spec.resources, spec.scenario.num_clients)
        self.pool.load(dataset, scenario, spec)
        self.workers = self.pool.workers
        self.scenario = scenario

    def run(self, kind: str, round: int, payloads: Mapping[int, Payload], store: StateStore) -> list[ClientResult]:
        shipped: dict[int, ray.ObjectRef] = {}  # id(payload) -> ref: each distinct payload is put once
        for payload in payloads.values():
            if id(payload) not in shipped:
                shipped[id(payload)] = ray.put(payload)
        sizes = self._sizes(kind, round)
        queue = sorted(payloads, key=lambda cid: (-sizes[cid], cid))  # largest clients first
        idle = list(self.workers)
        pending: dict[ray.ObjectRef, tuple[int, object]] = {}
        results: dict[int, ClientResult] = {}
        while queue or pending:
            while idle and queue:
                cid, worker = queue.pop(0), idle.pop()
                args = (round, cid, shipped[id(payloads[cid])], store.get(cid))
                if kind == "fit":
                    result_ref, state_ref = worker.fit.options(num_returns=2).remote(*args)
                    store.put(cid, state_ref)
                else:
                    result_ref = getattr(worker, kind).remote(*args)
                pending[result_ref] = (cid, worker)
            [done], _ = ray.wait(list(pending), num_returns=1)
            cid, worker = pending.pop(done)
            results[cid] = ray.get(done)
            idle.append(worker)
        return [results[cid] for cid in sorted(results)]

    def _sizes(self, kind: str, round: int) -> list[int]:
        """Job sizes to hand out largest first: training rows, or a test-time client's samples."""
        if kind in ("describe", "test"):
            return [len(t.view.test) for t in self.scenario.test_clients]
        return self.scenario.train_sizes(round)

    def worker_pids(self) -> list[int]:
        return ray.get([w.pid.remote() for w in self.workers])

    def close(self) -> None:
        if self.owns_pool:
            self.pool.close()

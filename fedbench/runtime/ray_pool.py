"""The Ray backend: a pool of ClientWorker actors fed largest-client-first (client-id order when streamed).

The pool outlives a run: consecutive runs with the same resources reuse its actors. The base dataset is
`ray.put` once (again only when a run uses another dataset), the scenario once per run; each
distinct payload of a round (usually one global model) is `ray.put` once, as numpy; updates come back as
numpy. Client states stay in the object store: `fit` returns each new state as a return of its own and the
driver fetches only the results, keeping each new state's reference in the StateStore once the results are in.
Tiny clients go several to a call (`JOB_SECONDS_TARGET`), so a call's cost does not outweigh their training.

A worker whose process dies (killed, out of memory, its node lost) is replaced by a new one and its job runs
again from the client's last stored state, a bounded number of times; an exception a job raises is the job's
own failure and fails the run.
"""

from __future__ import annotations

import collections
import logging
import os
import secrets
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import ray

from fedbench.core.errors import WorkerLostError
from fedbench.core.runspec import ResourceSpec, RunSpec
from fedbench.core.types import ClientResult, Payload
from fedbench.data import BaseDataset
from fedbench.runtime.jobs import Job
from fedbench.runtime.placement import WorkerPlace
from fedbench.runtime.ray_resources import check_worker_fits, get_reporting_waits, node_resources
from fedbench.runtime.state_store import StateStore
from fedbench.runtime.worker import ClientWorker
from fedbench.scenarios import Scenario

RemoteClientWorker = ray.remote(ClientWorker)
log = logging.getLogger(__name__)

JOB_ATTEMPTS = 3
"""Workers one client job may run on before its run fails: a worker killed from outside is replaced and the job
run again, but a job that kills every worker it lands on (a client that runs out of memory) must not loop forever."""

WORKER_DEATHS = (ray.exceptions.RayActorError, ray.exceptions.OutOfMemoryError)
"""What `ray.get` of a job raises when its worker's process died (killed, lost with its node, or stopped by
Ray's memory monitor), as opposed to a `RayTaskError`: an exception the job itself raised."""

JOBS_IN_FLIGHT = 2
"""Calls handed to each worker at once: the next one waits in the actor's queue while the driver learns that the
last one ended, so a worker never idles for that round trip (each job is still seeded and computed alone)."""

JOB_SECONDS_TARGET = 0.2
"""About how much compute one call to a worker carries: clients whose jobs are shorter go several to a call
(`ClientWorker.jobs`), so the call's own cost (Ray's dispatch, its arguments and results, the driver's bookkeeping:
milliseconds) stays small beside the training of many tiny clients; longer jobs go one to a call, and so do
those of every client while none of its kind has been measured yet."""


def ensure_ray(address: str | None = None, num_cpus: int | None = None) -> None:
    """Connect to (or start) Ray once per process.

    A local Ray's servers listen on every interface (Ray 2.60 has no option to bind them to 127.0.0.1), so
    one started here keeps Ray's default token auth, with a token only this process and the processes Ray
    starts for it know (nothing is written to ~/.ray); RAY_AUTH_MODE, when set, decides instead. Connecting
    to a cluster (`address`, RAY_ADDRESS) leaves auth as the cluster has it (README: Ray clusters).
    """
    if ray.is_initialized():
        return
    if not sys.stderr.isatty():  # the prefix of the lines Ray relays from workers, uncoloured in a log file
        os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    starts_local = address == "local" or (address is None and "RAY_ADDRESS" not in os.environ)
    if starts_local and "RAY_AUTH_MODE" not in os.environ:  # Ray turns token auth on: give it a token of its own
        os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    # "local", not None: ray.init(address=None) joins the last cluster `ray start` or a test's Cluster recorded
    # in /tmp/ray/ray_current_cluster on this host, anyone's, instead of starting one
    ray.init(
        address="local" if starts_local else address,
        num_cpus=num_cpus,
        include_dashboard=False,
        log_to_driver=True,
        configure_logging=False,
    )


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
        check_worker_fits(resources, node_resources())
        self.resources = resources
        n = pool_size(resources, ray.available_resources(), max_clients)
        self._options = {"num_cpus": resources.client_cpus, "num_gpus": resources.client_gpus}
        self.workers = [RemoteClientWorker.options(**self._options).remote() for _ in range(n)]
        self._dataset: tuple[BaseDataset, Any] | None = (
            None  # (dataset, ref) of the last dataset shipped: runs of a task usually share it
        )
        self._loaded: tuple = ()  # the arguments of the last `load`: what a replacement worker is loaded with
        self.places: list = []  # each worker's WorkerPlace (node, GPU ids, device), from its last `load`

    def load(self, dataset: BaseDataset, scenario: Scenario, spec: RunSpec) -> None:
        """Point every worker at a run, keeping where each trains (`places`); the dataset is `ray.put` only when
        it changed since the last run."""
        if self._dataset is None or self._dataset[0] is not dataset:
            self._dataset = (dataset, ray.put(dataset))
            dataset.release_pages()  # a cached dataset's pages, read by the copy into the store, need not stay mapped
        scenario_ref = ray.put(scenario)
        self._loaded = (self._dataset[1], scenario_ref, spec)
        loads = [w.load.remote(self._dataset[1], scenario_ref, spec) for w in self.workers]
        self.places = get_reporting_waits(loads, "client workers to start", self.resources)

    def replace(self, dead: Any) -> Any:
        """A new worker in place of `dead` (its process died): the same resources, loaded with the same run.

        Inside a Tune trial, Ray captures it into the trial's placement group, in the bundle the dead one freed.
        """
        ray.kill(dead)  # a worker that is only unreachable must not come back beside its replacement
        worker = RemoteClientWorker.options(**self._options).remote()
        [place] = get_reporting_waits(
            [worker.load.remote(*self._loaded)], "a replacement client worker to start", self.resources
        )
        slot = self.workers.index(dead)
        self.workers[slot], self.places[slot] = worker, place
        return worker

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
    """Client jobs on a pool of `ClientWorker` actors; one dispatch loop for every kind of job.

    Clients whose jobs are short go several to a call (`ClientWorker.jobs`), sized from the jobs' measured seconds
    (`JOB_SECONDS_TARGET`) and shrinking as a round's last clients are handed out, so that workers end a round
    together; `clients_per_job` fixes the number instead. Numbers never depend on it: each job is seeded and
    computed alone, and results come back in the same order.
    """

    def __init__(
        self,
        dataset: BaseDataset,
        scenario: Scenario,
        spec: RunSpec,
        pool: RayWorkerPool | None = None,
        clients_per_job: int | None = None,
    ):
        self.owns_pool = pool is None
        self.pool = pool or RayWorkerPool(spec.resources, spec.scenario.num_clients)
        self.pool.load(dataset, scenario, spec)
        self.workers = self.pool.workers
        self.scenario = scenario
        self.clients_per_job = clients_per_job
        self._job_seconds: dict[str, float] = {}  # kind -> mean compute seconds of its last call's jobs

    def run(self, job: Job, round: int, payloads: Mapping[int, Payload], store: StateStore) -> list[ClientResult]:
        sizes = self._sizes(job, round)
        largest_first = sorted(payloads, key=lambda cid: (-sizes[cid], cid))  # the round ends soonest
        return list(self._results(job, round, payloads, store, largest_first))

    def stream(
        self, job: Job, round: int, payloads: Mapping[int, Payload], store: StateStore
    ) -> Iterator[ClientResult]:
        """The jobs' results in client-id order, each fetched once it and every lower id are done, for a consumer that
        folds and drops them. Jobs are handed out in client-id order too, so results arrive about as they are
        consumed and few wait for a lower id."""
        return self._results(job, round, payloads, store, sorted(payloads))

    def _results(
        self, job: Job, round: int, payloads: Mapping[int, Payload], store: StateStore, dispatch_order: list[int]
    ) -> Iterator[ClientResult]:
        """Hand the jobs out in `dispatch_order` to idle workers; yield the results in client-id order."""
        shipped: dict[int, ray.ObjectRef] = {}  # id(payload) -> ref: each distinct payload is put once
        for payload in payloads.values():
            if id(payload) not in shipped:
                shipped[id(payload)] = ray.put(payload)
        queue = collections.deque(dispatch_order)
        in_order, released = sorted(payloads), 0
        idle = list(self.workers) * JOBS_IN_FLIGHT  # a slot per call a worker may hold
        pending: dict[ray.ObjectRef, tuple[list[int], object, list | None]] = {}  # in dispatch order
        finished: dict[int, ClientResult] = {}
        lost: dict[int, int] = {}  # client id -> workers that died running its job in this call
        while True:
            while idle and queue:
                clients, worker = self._next_clients(job, queue, lost), idle.pop()
                result_ref, state_refs = self._submit(worker, job, round, clients, payloads, shipped, store)
                pending[result_ref] = (clients, worker, state_refs)
            while released < len(in_order) and in_order[released] in finished:
                yield finished.pop(in_order[released])
                released += 1
            if not pending:
                return
            [done], _ = ray.wait(list(pending), num_returns=1)
            clients, worker, state_refs = pending[done]
            try:
                results = ray.get(done)
            except WORKER_DEATHS as exc:  # the worker's process died, not an exception of the job
                idle = self._after_death(worker, exc, pending, queue, idle, lost, job, round)
                continue
            del pending[done]
            results = results if isinstance(results, list) else [results]  # `run` returns one, `jobs` a list
            for i, cid in enumerate(clients):
                finished[cid] = results[i]
                if state_refs is not None:  # stored only now: a dead worker's must not replace the last good state
                    store.put(cid, state_refs[i])
            self._job_seconds[job.name] = sum(r.compute_s for r in results) / len(results)
            idle.append(worker)

    def _next_clients(self, job: Job, queue: collections.deque, lost: dict[int, int]) -> list[int]:
        """The next call's clients, from the front of `queue`. A client whose worker died before runs alone, so
        that a client which kills its workers is found and its attempts counted on their own."""
        clients = [queue.popleft()]
        if lost.get(clients[0]):
            return clients
        size = self._clients_per_call(job, len(queue) + 1)
        while len(clients) < size and queue and not lost.get(queue[0]):
            clients.append(queue.popleft())
        return clients

    def _clients_per_call(self, job: Job, remaining: int) -> int:
        """`clients_per_job` when set; else as many jobs as take about `JOB_SECONDS_TARGET` by the last call's
        measure (one until a job of its kind has been measured), and no more than a share of the clients left that
        gives every call slot at least two more calls, so the round's last calls are short."""
        if self.clients_per_job is not None:
            return self.clients_per_job
        seconds = self._job_seconds.get(job.name)
        if seconds is None:
            return 1
        by_time = int(JOB_SECONDS_TARGET // seconds) if seconds > 0 else remaining
        by_balance = -(-remaining // (2 * JOBS_IN_FLIGHT * len(self.workers)))
        return max(1, min(by_time, by_balance))

    def _worker_method(self, job: Job, clients: list[int]) -> str:
        """The worker's method a call of `clients` goes to: `run` for one client, `jobs` for several."""
        return "run" if len(clients) == 1 else "jobs"

    def _submit(
        self,
        worker: Any,
        job: Job,
        round: int,
        clients: list[int],
        payloads: Mapping[int, Payload],
        shipped: dict,
        store: StateStore,
    ) -> tuple[ray.ObjectRef, list | None]:
        """One call of the worker's method for `clients`. Returns the ref of its result(s) and, where the job keeps
        state, a ref per new client state (each stays in the object store). `run` takes one client's payload and
        state; a call of several clients takes each distinct payload once, then each client's state."""
        name = self._worker_method(job, clients)
        if name == "run":
            [cid] = clients
            args: tuple = (job, round, cid, shipped[id(payloads[cid])], store.get(cid))
        else:
            slot_of: dict[int, int] = {}  # id(payload) -> its place among the call's distinct payloads
            slots = [slot_of.setdefault(id(payloads[cid]), len(slot_of)) for cid in clients]
            distinct = [shipped[key] for key in slot_of]
            args = (job, round, clients, slots, *distinct, *(store.get(cid) for cid in clients))
        method = getattr(worker, name)
        if not job.keeps_state:
            return method.remote(*args), None
        result_ref, *state_refs = method.options(num_returns=1 + len(clients)).remote(*args)
        return result_ref, state_refs

    def _after_death(
        self,
        dead: Any,
        exc: Exception,
        pending: dict,
        queue: collections.deque,
        idle: list,
        lost: dict,
        job: Job,
        round: int,
    ) -> list:
        """Put every call the dead worker held back at the front of the queue, in dispatch order, and give its
        slots to a replacement; returns the new idle slots. Only the clients of the call it was running (the first
        it was handed: an actor runs its calls one at a time) count an attempt: those queued behind did nothing."""
        calls = [(ref, clients) for ref, (clients, worker, _) in pending.items() if worker == dead]
        running = calls[0][1]
        for cid in running:
            lost[cid] = lost.get(cid, 0) + 1
        for ref, _ in calls:
            del pending[ref]
        queue.extendleft(cid for _, clients in reversed(calls) for cid in reversed(clients))
        replacement = self._replace(dead, job, round, running, max(lost[cid] for cid in running), exc)
        return [w for w in idle if w != dead] + [replacement] * JOBS_IN_FLIGHT

    def _replace(self, dead: Any, job: Job, round: int, clients: list[int], lost: int, exc: Exception) -> Any:
        """A new worker for the call whose worker died, or WorkerLostError once its job has taken down
        `JOB_ATTEMPTS` workers (a client that died with others runs alone after, so this names one client)."""
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        jobs = (
            f"client {clients[0]}'s {job.name} job"
            if len(clients) == 1
            else f"the {job.name} jobs of clients {clients}"
        )
        if lost >= JOB_ATTEMPTS:
            raise WorkerLostError(
                f"{jobs} of round {round} ran on {lost} client workers and each "
                f"one's process died ({type(exc).__name__}: {cause}); a job that kills every worker "
                "it runs on, e.g. out of memory, cannot finish"
            ) from exc
        log.warning(
            "a client worker died running %s of round %d (%s: %s): replaced, the job runs again, one client "
            "per call (attempt %d of %d)",
            jobs,
            round,
            type(exc).__name__,
            cause,
            lost + 1,
            JOB_ATTEMPTS,
        )
        return self.pool.replace(dead)

    def _sizes(self, job: Job, round: int) -> list[int]:
        """Job sizes to hand out largest first: training rows, or a test-time client's samples."""
        if job.on_test_clients:
            return [len(t.view.test) for t in self.scenario.test_clients]
        return self.scenario.train_sizes(round)

    def client_states(self, store: StateStore) -> dict[int, Any]:
        """Every client's state itself, fetched from the object store (a checkpoint's); a state a resumed run put
        back as a value is one already."""
        items = store.items()
        refs = [state for _, state in items if isinstance(state, ray.ObjectRef)]
        fetched = iter(ray.get(refs))
        return {cid: next(fetched) if isinstance(state, ray.ObjectRef) else state for cid, state in items}

    def worker_pids(self) -> list[int]:
        return ray.get([w.pid.remote() for w in self.workers])

    def worker_places(self) -> list[WorkerPlace]:
        return self.pool.places

    def close(self) -> None:
        if self.owns_pool:
            self.pool.close()

"""ClientWorker: runs client jobs (`fedbench.runtime.jobs`) against the base dataset and scenario it holds.

The same class runs in-process (serial backend) and as a Ray actor (ray backend), so both compute the
same numbers: every job seeds its own torch RNG from (run seed, round, client) and runs on one intra-op thread
(JOB_THREADS), whatever CPUs the run reserves per client: results differ with the thread count (measured on these
machines: a reduction split over more threads adds in another order), and a run's identity leaves its resources
out, so its numbers must not depend on them. What they still depend on, torch's version and the kernels it picks
for the machine's CPU, is recorded with the run (`numerics`).
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, cast

import torch

from fedbench.algorithms import make_algorithm
from fedbench.algorithms.capabilities import ReadsGroundTruth
from fedbench.algorithms.functional_fit import FunctionalFit
from fedbench.core import timeline
from fedbench.core.runspec import RunSpec
from fedbench.core.types import ClientResult, Payload, RoundContext, derive_seed
from fedbench.data import BaseDataset, normalization_values
from fedbench.runtime.allocator import keep_freed_memory
from fedbench.runtime.jobs import Job
from fedbench.runtime.placement import WorkerPlace, worker_place
from fedbench.scenarios import ClientView, Scenario
from fedbench.training import ClientData, materialize
from fedbench.training.functional import ClientRng, functional_model_problem, train_together
from fedbench.training.loop import make_optimizer

T = TypeVar("T")

JOB_THREADS = 1
"""Intra-op threads of every client job: fixed, so that a run's numbers do not depend on the CPUs it reserves."""


def numerics(device: str) -> str:
    """What a job's floating-point results depend on besides the run's spec: torch's version and the kernels it
    dispatches to on this CPU (`avx2`, `avx512`: each adds in its own order) or the GPU model."""
    where = torch.cuda.get_device_name() if device == "cuda" else f"cpu {torch.backends.cpu.get_cpu_capability()}"
    return f"torch {torch.__version__}, {where}, {JOB_THREADS} thread"


@contextlib.contextmanager
def torch_job_scope(seed: int, threads: int, device: str = "cpu") -> Iterator[None]:
    """Seeded torch RNG and a fixed thread count for one job, restoring both afterwards.

    A CPU job seeds only the CPU generator, which is all it draws from: `torch.manual_seed` also queues seeds
    for CUDA, XPU and MTIA, recording a stack trace each time (milliseconds per job, which tiny clients feel).
    """
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with torch.random.fork_rng(devices=[]):
            if device == "cpu":
                torch.default_generator.manual_seed(seed % (2**31))
            else:
                torch.manual_seed(seed % (2**31))
            yield
    finally:
        torch.set_num_threads(previous)


def trains_together(algorithm: object, architecture: torch.nn.Module) -> bool:
    """Whether a worker can train several of `algorithm`'s clients in one vectorised pass: its fit is the declared
    one (`FunctionalFit.fits_functionally`) and the model's training step is a pure function of its weights."""
    return (
        isinstance(algorithm, FunctionalFit)
        and type(algorithm).fits_functionally()
        and functional_model_problem(architecture) is None
    )


def client_device(client_gpus: float) -> str:
    """Where a worker's jobs run: CUDA when the run asks for GPUs and torch sees one; else CPU, with a warning
    naming the field when GPUs were asked for (a serial run on a machine without CUDA would otherwise train on
    CPU without a word)."""
    if client_gpus <= 0:
        return "cpu"
    if torch.cuda.is_available():
        return "cuda"
    warnings.warn(
        f"resources.client_gpus is {client_gpus} but torch sees no CUDA device here: clients train on CPU",
        RuntimeWarning,
        stacklevel=2,
    )
    return "cpu"


class ClientWorker:
    """Stateless between jobs: client state comes in with the job and goes back with the result.

    `load` points the worker at a run (dataset, scenario, RunSpec); a pool of workers is reused by every run
    of a task, so a Ray actor pays its start-up (Python, torch, first-kernel warm-up) once, not per run.
    """

    def load(self, dataset: BaseDataset, scenario: Scenario, spec: RunSpec) -> WorkerPlace:
        """Returns where this worker trains the run's clients (node, GPU ids, device), for the run's record."""
        timeline.mark("worker_loading", process_age=timeline.process_age())
        self.dataset = dataset
        self.scenario = scenario
        self.spec = spec
        self.algorithm = make_algorithm(
            spec, scenario.input_shape, dataset.num_classes, scenario.trained_distributions(spec.rounds)
        )
        self.device = client_device(spec.resources.client_gpus)
        self.threads = JOB_THREADS
        self.normalization = normalization_values(spec.normalize, dataset)
        keep_freed_memory()
        self._warm_up()
        self._architecture: torch.nn.Module | None = None  # built by the run's first `fit_together`
        timeline.mark("worker_warm", device=self.device)
        return {**worker_place(self.device), "numerics": numerics(self.device)}

    def _warm_up(self) -> None:
        """One optimizer step of a throwaway model on a zero batch, so that torch's first-call costs (the
        optimizer's lazy imports, thread pools, kernel selection) count as the run's start-up, not as the
        first client's compute. Its own seeded scope: no job's random draws or weights are touched."""
        with torch_job_scope(0, self.threads, self.device):
            model = self.algorithm.builder().to(self.device)
            optimizer = make_optimizer(list(model.parameters()), self.spec.optimizer, self.spec.optimizer.lr)
            x = torch.zeros((2, *self.scenario.input_shape), device=self.device)
            cond_dim = int(getattr(model, "cond_dim", 0))
            cond = torch.zeros((2, cond_dim), device=self.device) if cond_dim else None
            model(x, cond).float().sum().backward()
            optimizer.step()

    def _context(self, round: int, client_id: int, view: ClientView) -> RoundContext:
        return RoundContext(
            round=round,
            client_id=client_id,
            seed=self.spec.seed,
            local_epochs=self.spec.local_epochs,
            batch_size=self.spec.batch_size,
            optimizer=self.spec.optimizer,
            num_classes=self.dataset.num_classes,
            device=self.device,
            num_threads=self.threads,
            distribution_id=view.distribution_id if isinstance(self.algorithm, ReadsGroundTruth) else -1,
            rounds=self.spec.rounds,
            local_steps=self.spec.local_steps,
        )

    def run(self, job: Job, round: int, client_id: int, payload: Payload, state: Any) -> Any:
        """One client's job; `state` None is a client that never ran one (or a test-time client): the algorithm's
        fresh `ClientState`. On a GPU the result carries the most memory torch held during the job."""
        state = self.algorithm.ClientState() if state is None else state
        if self.device != "cuda":
            return job.run(self, round, client_id, payload, state)
        torch.cuda.reset_peak_memory_stats()
        output = job.run(self, round, client_id, payload, state)
        (output[0] if job.keeps_state else output).gpu_peak_bytes = torch.cuda.max_memory_reserved()
        return output

    def jobs(self, job: Job, round: int, client_ids: list[int], payload_slots: list[int], *objects: Any) -> list:
        """Several clients' jobs of one kind, run one after another as each would run alone (every job seeds its own
        scope), in one call: a tiny client's training costs less than a Ray call and its round trip.

        `objects` are the distinct payloads, then each client's state, as separate arguments so that Ray resolves
        those held in its object store; client i's payload is `objects[payload_slots[i]]`.
        Returns the results in `client_ids` order; where the job `keeps_state`, [those results, then each client's
        new state] (a Ray call with `num_returns=1 + len(client_ids)`, so each state stays in the object store on
        its own).
        """
        states = objects[len(objects) - len(client_ids) :]
        outputs = [
            self.run(job, round, cid, objects[slot], state)
            for cid, slot, state in zip(client_ids, payload_slots, states, strict=True)
        ]
        if not job.keeps_state:
            return outputs
        return [[result for result, _ in outputs], *(state for _, state in outputs)]

    def vectorises_fits(self) -> bool:
        """Whether `fit_together` trains this run's clients in a vectorised pass (`trains_together`). Builds, once per
        run, the model the pass calls with each client's weights."""
        if self._architecture is None:
            with torch_job_scope(0, self.threads, self.device):  # its initial weights are never read
                self._architecture = self.algorithm.builder()
        return trains_together(self.algorithm, self._architecture)

    def fit_together(
        self, job: Job, round: int, client_ids: list[int], payload_slots: list[int], *objects: Any
    ) -> list:
        """Several clients' FIT jobs in one vectorised pass (`train_together`), where the method and the model allow
        it (`trains_together`); else one after another as `jobs` runs them. Takes and returns what `jobs` does.

        Each client's result carries an equal share of the pass's seconds as its compute time. The model the pass calls
        with each client's weights is built once per run.
        """
        if not self.vectorises_fits():
            return self.jobs(job, round, client_ids, payload_slots, *objects)
        assert self._architecture is not None  # built by vectorises_fits
        algorithm = cast(FunctionalFit, self.algorithm)
        start = time.perf_counter()
        states = [
            self.algorithm.ClientState() if state is None else state
            for state in objects[len(objects) - len(client_ids) :]
        ]
        views = [self.scenario.view(round, cid) for cid in client_ids]
        datas = [
            materialize(self.dataset, v, self.scenario.input_shape, normalization=self.normalization) for v in views
        ]
        seeds = [derive_seed(self.spec.seed, round, cid, job.name) for cid in client_ids]
        if self.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        with torch_job_scope(seeds[0], self.threads, self.device):
            trained = train_together(
                self._architecture,
                [algorithm.fit_start(objects[slot], state) for slot, state in zip(payload_slots, states, strict=True)],
                datas,
                [self._context(round, cid, view) for cid, view in zip(client_ids, views, strict=True)],
                [ClientRng(seed, torch.device(self.device)) for seed in seeds],
                algorithm.fit_penalty(),
            )
        seconds = (time.perf_counter() - start) / len(client_ids)
        timeline.mark("job", kind="fit_together", clients=len(client_ids), seconds=seconds * len(client_ids))
        results, new_states = [], []
        for cid, state, data, (weights, metrics) in zip(client_ids, states, datas, trained, strict=True):
            uplink, new_state = algorithm.fit_finish(state, weights, data.num_train)
            results.append(ClientResult(cid, uplink, metrics, seconds))
            if self.device == "cuda":  # the pass's: every client of it held that much at once
                results[-1].gpu_peak_bytes = torch.cuda.max_memory_reserved()
            new_states.append(new_state)
        return [results, *new_states]

    def train_samples(self, round: int, client_id: int) -> int:
        """How many training rows the client holds in `round`."""
        return len(self.scenario.view(round, client_id).train)

    def on_data(
        self, job: Job, round: int, client_id: int, call: Callable[[ClientData, RoundContext], T]
    ) -> tuple[T, float]:
        """Run `call` on the client's data for `round` in a scope seeded by (run seed, round, client, job name) with
        a fixed thread count; returns (its output, seconds).

        A test-time client (`job.on_test_clients`) trains on nothing: its training rows are its few labelled samples.
        """
        purpose = job.name
        start, cpu_start, faults_start = time.perf_counter(), time.process_time(), timeline.page_faults()
        if job.on_test_clients:
            client = self.scenario.test_clients[client_id]
            view, labelled = client.view, client.labelled
        else:
            view, labelled = self.scenario.view(round, client_id), None
        ctx = self._context(round, client_id, view)
        data = materialize(
            self.dataset, view, self.scenario.input_shape, train=labelled, normalization=self.normalization
        )
        with torch_job_scope(derive_seed(self.spec.seed, round, client_id, purpose), self.threads, self.device):
            out = call(data, ctx)
        seconds = time.perf_counter() - start
        timeline.mark(
            "job",
            kind=purpose,
            seconds=seconds,
            cpu_s=time.process_time() - cpu_start,
            page_faults=timeline.page_faults() - faults_start,
        )
        return out, seconds

    def pid(self) -> int:
        return os.getpid()

    def placement_group(self) -> str | None:
        """The Ray placement group this worker was scheduled into (None outside Ray or outside a group)."""
        import ray

        return ray.get_runtime_context().get_placement_group_id() if ray.is_initialized() else None

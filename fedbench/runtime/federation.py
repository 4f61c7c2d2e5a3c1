"""Federation: one RunSpec, run round by round. The round loop lives here and nowhere else.

Each round: sample clients, let them describe their data where the method asks (`DescribedRound`), `configure`,
meter the downlink, run fit jobs, meter the uplink, `aggregate`
(or fold each result as it arrives: `StreamedAggregation`), evaluate on every client's local test split
when due (or on the round's sampled clients: `eval_clients`), build the round record, call the callbacks.
After the last round, system accuracy (unless the run turns it off) and the test-time clients are evaluated too
(`fedbench.runtime.evaluation` owns those protocols).
A run that raises (a diverging client, missing data) ends FAILED with its reason, and so does one whose final
local accuracy is NaN; it never raises to the caller, so the other runs of a task go on. The one exception is a
callback that can record nothing more (`ResultsUnwritableError`: a full disk), which stops the command.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from fedbench.algorithms import make_algorithm
from fedbench.algorithms.base import Algorithm
from fedbench.algorithms.capabilities import DescribedRound, PeerRelay, RoundReport, StreamedAggregation
from fedbench.core import metrics as M
from fedbench.core import timeline
from fedbench.core.callbacks import RESUMED_TAG, Callback, RunResult
from fedbench.core.errors import ResultsUnwritableError
from fedbench.core.runspec import RunSpec
from fedbench.core.types import ClientResult, Payload, derive_seed
from fedbench.data import load_dataset
from fedbench.runtime.backends import Backend, make_backend
from fedbench.runtime.byte_meter import ByteMeter
from fedbench.runtime.checkpoint import CheckpointFolder, RunCheckpoint
from fedbench.runtime.drift_records import round_drift_metrics, run_drift_metrics
from fedbench.runtime.evaluation import Evaluation
from fedbench.runtime.failures import failure_reason, failure_traceback
from fedbench.runtime.gpu_sharing import SharedGpuCheck
from fedbench.runtime.jobs import DESCRIBE_DATA, FIT
from fedbench.runtime.per_client import PerClientRecorder
from fedbench.runtime.placement import placement_tags
from fedbench.runtime.records import meaningless, summarize, training_metrics
from fedbench.runtime.scored_round import LOWEST_VALIDATION_LOSS, ScoredRound, keep_lowest
from fedbench.runtime.state_store import StateStore
from fedbench.scenarios import Scenario, build_scenario

if TYPE_CHECKING:
    from fedbench.runtime.ray_pool import RayWorkerPool


class Federation:
    """Runs one RunSpec on a registered backend (`fedbench.runtime.backends`) and reports to callbacks."""

    def __init__(
        self,
        spec: RunSpec,
        callbacks: Sequence[Callback] = (),
        backend: str | None = None,
        pool: RayWorkerPool | None = None,
        gpu_check: SharedGpuCheck | None = None,
        checkpoints: CheckpointFolder | None = None,
    ):
        """Args:
        spec: the run.
        callbacks: called at run start, after every round and at run end.
        backend: a registered backend's name; None uses `spec.resources.backend`.
        pool: a `RayWorkerPool` shared with other runs (a backend that `uses_ray`); None starts one for this run.
        gpu_check: told where the workers train once they have started, before the first round, to warn of
            workers sharing a GPU without MPS (a command's runs share one, so it warns once).
        checkpoints: where the run writes a checkpoint every few rounds and, when it finds one of this run
            there (it was killed), goes on from it; None: neither.
        """
        self.spec = spec
        self.callbacks = list(callbacks)
        self.backend_name = backend or spec.resources.backend
        self.pool = pool
        self.gpu_check = gpu_check
        self.checkpoints = checkpoints
        self.resumed_from = 0
        """The round of the checkpoint this run went on from (0: it started at round 1)."""
        self.earlier_wall_s = 0.0
        """Seconds the attempts before this one took to reach its checkpoint (0: it started at round 1)."""
        self.started = 0.0
        """`time.perf_counter()` when this attempt started."""
        self.worker_pids: list[int] = []
        self.state = None
        """The server state after the last round run (the algorithm's `State`)."""
        self.store = StateStore()
        """Every client's state after the last round run (on the ray backend, references to them)."""
        self.per_client = PerClientRecorder()
        """Every client's numbers at every evaluated round."""
        self.scored: ScoredRound | None = None
        """Under `scored_round: lowest_validation_loss`, the round of lowest validation loss so far and its state."""

    def run(self) -> RunResult:
        for cb in self.callbacks:
            cb.on_run_start(self.spec)
        timeline.mark("run_started")
        start = self.started = time.perf_counter()  # also the start-up's start: what comes before round 1
        history: list[dict[str, float]] = []
        backend, placement = None, {}
        try:
            dataset = load_dataset(self.spec.dataset.name, self.spec.dataset.data_root, **self.spec.dataset.kwargs)
            timeline.mark("dataset_loaded")
            scenario = build_scenario(dataset, self.spec.scenario, self.spec.seed, self.spec.rounds)
            timeline.mark("scenario_built")
            algorithm = make_algorithm(
                self.spec, scenario.input_shape, dataset.num_classes, scenario.trained_distributions(self.spec.rounds)
            )
            backend = make_backend(self.backend_name, dataset, scenario, self.spec, self.pool)
            timeline.mark("workers_loaded")
            self.worker_pids = backend.worker_pids()
            placement = placement_tags(backend.worker_places(), self.spec.scenario.num_clients)
            if self.gpu_check is not None:
                self.gpu_check.add(backend.worker_places())
            state, first = self._resume(algorithm, history)
            self._loop(algorithm, backend, scenario, history, time.perf_counter() - start, state, first)
            final = summarize(history, self.earlier_wall_s + time.perf_counter() - start)
            final.update(run_drift_metrics(self.per_client.table(), history))
            reason = meaningless(final)
            result = RunResult(self.spec, "FAILED" if reason else "FINISHED", history, final, reason)
            if self.spec.log_models and not reason:
                result.models = self._final_models(algorithm)
        except ResultsUnwritableError as stop:  # nothing more can be recorded: every later run would fail the same way
            self._stopped(len(history), f"the results cannot be written ({stop})")
            raise
        except (KeyboardInterrupt, SystemExit) as stop:  # Ctrl-C, or SIGTERM raised as it: the run says where it was
            self._stopped(len(history), "interrupted" if isinstance(stop, KeyboardInterrupt) else "stopped")
            raise
        except Exception as exc:  # a failed run is recorded, never propagated to the other runs
            final = summarize(history, self.earlier_wall_s + time.perf_counter() - start)
            result = RunResult(self.spec, "FAILED", history, final, failure_reason(exc), failure_traceback(exc))
            result.final[M.FAILED_ROUND] = float(len(history) + 1)
        finally:
            if backend is not None:
                backend.close()
        if self.checkpoints is not None:  # it ended, finished or failed, and its result is recorded below
            self.checkpoints.clear()
        result.tags.update(placement)
        if self.resumed_from:
            result.tags[RESUMED_TAG] = str(self.resumed_from)
        result.per_client = self.per_client.table()
        for cb in self.callbacks:
            cb.on_run_end(result)
        timeline.mark("run_end")
        return result

    def _stopped(self, rounds_done: int, reason: str) -> None:
        """Tell the callbacks the run stops before its end; a callback that cannot (the store is gone) is skipped."""
        for cb in self.callbacks:
            try:
                cb.on_run_stopped(self.spec, rounds_done, reason)
            except Exception:  # stopping anyway: one callback's failure must not hide the stop
                continue

    def _resume(self, algorithm: Algorithm[Any, Any, Any], history: list[dict[str, float]]) -> tuple[Any, int]:
        """The server state to start from and the first round to run: the algorithm's initial state and round 1, or,
        where a checkpoint of this run exists, its state, its clients' states, records and rows, and the round after
        it. The callbacks get the records of the rounds before, so a run's recorded curves are whole."""
        folder = self.checkpoints
        checkpoint = folder.latest(self.spec.run_hash, self.spec.rounds) if folder is not None else None
        if checkpoint is None:
            self.per_client = PerClientRecorder(algorithm.client_metrics)  # a column per metric it declares
            return algorithm.init_state(), 1
        for client_id, state in checkpoint.clients.items():
            self.store.put(client_id, state)
        history.extend(checkpoint.history)
        self.per_client = PerClientRecorder.from_table(checkpoint.per_client, algorithm.client_metrics)
        self.scored = checkpoint.scored
        self.earlier_wall_s = checkpoint.wall_s
        for record in checkpoint.history:
            for cb in self.callbacks:
                cb.on_round_end(self.spec, record)
        self.resumed_from = checkpoint.round
        timeline.mark("resumed", round=checkpoint.round)
        return checkpoint.server, checkpoint.round + 1

    def _loop(
        self,
        algorithm: Algorithm[Any, Any, Any],
        backend: Backend,
        scenario: Scenario,
        history: list[dict[str, float]],
        startup_s: float,
        state: Any,
        first: int,
    ) -> None:
        """Rounds `first`..R from server state `state`; `startup_s` (the time before round 1: data, scenario,
        method and workers) is reported with the first of them."""
        spec = self.spec
        clients = list(range(spec.scenario.num_clients))
        store, meter = self.store, ByteMeter()
        evaluation = Evaluation(spec, algorithm, backend, scenario, store, meter)
        self.state = state
        for round in range(first, spec.rounds + 1):
            round_start = time.perf_counter()
            sampled = self._sample(round, algorithm.config.clients_per_round(spec.scenario.num_clients))
            state, describe_s = self._describe(algorithm, backend, round, state, sampled, store, meter)
            payloads = algorithm.configure(round, state, sampled)
            meter.downlink(payloads)
            state, results, aggregate_s = self._fit(algorithm, backend, scenario, round, state, payloads, store, meter)
            self.state = state
            record = {
                M.ROUND: float(round),
                M.TIME_AGGREGATE_S: aggregate_s,
                M.TIME_STARTUP_S: startup_s if round == first else 0.0,
            }
            record.update(training_metrics(results, spec.algorithm.name, algorithm.client_metrics))
            record[M.TIME_CLIENT_COMPUTE_S] += describe_s
            if isinstance(algorithm, RoundReport):
                record.update(algorithm.round_metrics(state))
            if round % spec.eval_every == 0 or round == spec.rounds:
                evaluated = sampled if spec.eval_clients == "sampled" and round < spec.rounds else clients
                metrics, local = evaluation.local(round, state, evaluated)
                record.update(metrics)
                self.per_client.add(round, local.results, results, scenario)
                record.update(round_drift_metrics(self.per_client.table(), round))
                if spec.scored_round == LOWEST_VALIDATION_LOSS and evaluated is clients:
                    self.scored = keep_lowest(self.scored, round, metrics[M.LOSS_LOCAL_WEIGHTED], state)
            if round == spec.rounds:  # the last round evaluated every client: `local` is its evaluation
                record.update(self._final(evaluation, round, state, local, clients))
            record[M.TIME_CLIENT_COMPUTE_S] += evaluation.take_compute_s()
            record.update(meter.take_round())
            record[M.TIME_ROUND_S] = time.perf_counter() - round_start
            history.append(record)
            if self.checkpoints is not None and self.checkpoints.due(round, spec.rounds):  # before the callbacks,
                self.checkpoints.save(
                    RunCheckpoint(
                        spec.run_hash,
                        round,
                        state,
                        backend.client_states(store),
                        list(history),
                        self.per_client.table(),
                        self.scored,
                        self.earlier_wall_s + time.perf_counter() - self.started,
                    )
                )  # which may ship it
            stop = [cb.on_round_end(spec, record) for cb in self.callbacks]
            timeline.mark("round_end")
            if any(stop):
                break

    def _describe(
        self,
        algorithm: Algorithm[Any, Any, Any],
        backend: Backend,
        round: int,
        state: Any,
        sampled: list[int],
        store: StateStore,
        meter: ByteMeter,
    ) -> tuple[Any, float]:
        """A `DescribedRound` method's first exchange: the sampled clients describe this round's data and the server
        takes the descriptions into its state. Returns that state and the jobs' compute seconds (0 where none ran)."""
        if not isinstance(algorithm, DescribedRound):
            return state, 0.0
        requests = algorithm.round_describe_payloads(round, state, sampled)
        if not requests:
            return state, 0.0
        meter.downlink(requests)
        described = backend.run(DESCRIBE_DATA, round, requests, store)
        meter.uplink(described)
        return algorithm.receive_descriptions(round, state, described), sum(r.compute_s for r in described)

    def _fit(
        self,
        algorithm: Algorithm[Any, Any, Any],
        backend: Backend,
        scenario: Scenario,
        round: int,
        state: Any,
        payloads: dict[int, Payload],
        store: StateStore,
        meter: ByteMeter,
    ) -> tuple[Any, list[ClientResult], float]:
        """The round's fit jobs and their aggregation: (next server state, results, seconds spent aggregating).

        Where the algorithm folds results one at a time (`StreamedAggregation`), each is added as it arrives and kept
        without its uplink, so the round never holds every client's model; otherwise `aggregate` gets the list. A
        `PeerRelay` method's uplinks only park at the relay and are not metered.
        """
        metered = not isinstance(algorithm, PeerRelay)
        if not (isinstance(algorithm, StreamedAggregation) and algorithm.streams()):
            results = backend.run(FIT, round, payloads, store)
            if metered:
                meter.uplink(results)
            start = time.perf_counter()
            return algorithm.aggregate(round, state, results), results, time.perf_counter() - start
        sizes = {cid: len(scenario.view(round, cid).train) for cid in payloads}
        aggregator = algorithm.aggregator(round, state, sizes)
        results, seconds = [], 0.0
        for result in backend.stream(FIT, round, payloads, store):
            if metered:
                meter.uplink([result])
            start = time.perf_counter()
            aggregator.add(result)
            seconds += time.perf_counter() - start
            results.append(dataclasses.replace(result, uplink=Payload()))
        start = time.perf_counter()
        return aggregator.finish(), results, seconds + time.perf_counter() - start

    def _final(self, evaluation: Evaluation, round: int, state: Any, last: Any, clients: list[int]) -> dict[str, float]:
        """The final scores (`Evaluation.final`) from the last round's model, or, under `scored_round:
        lowest_validation_loss`, from the kept round's (its clients evaluated again for the vote); that round is
        recorded as `round_scored`."""
        if self.spec.scored_round != LOWEST_VALIDATION_LOSS:
            return evaluation.final(round, state, last)
        scored = self.scored if self.scored is not None else ScoredRound(round, float("nan"), state)
        if scored.round != round:
            _, last = evaluation.local(scored.round, scored.server, clients)
        return {**evaluation.final(scored.round, scored.server, last), M.SCORED_ROUND: float(scored.round)}

    def _final_models(self, algorithm: Algorithm[Any, Any, Any]) -> list[tuple[Any, list[int]]]:
        """Each distinct model the clients are sent to evaluate at the end (the scored round's state where one was
        kept), as a torch module of its own, with the clients it is for."""
        state = self.scored.server if self.scored is not None else self.state
        payloads = algorithm.evaluation_payloads(state, list(range(self.spec.scenario.num_clients)))
        distinct: dict[str, tuple[Any, list[int]]] = {}
        for client, payload in sorted(payloads.items()):
            key = weights_digest(payload.weights)  # by content: two clients sent equal weights are sent one model
            if key not in distinct:
                distinct[key] = (copy.deepcopy(algorithm.model_with(payload.weights)), [])
            distinct[key][1].append(client)
        return list(distinct.values())

    def _sample(self, round: int, m: int) -> list[int]:
        """Clients taking part in `round`: a seeded sample of m of the K clients (`clients_per_round`)."""
        k = self.spec.scenario.num_clients
        if m >= k:
            return list(range(k))
        rng = np.random.default_rng(derive_seed(self.spec.seed, round, "sample"))
        return sorted(int(c) for c in rng.choice(k, size=m, replace=False))


def weights_digest(weights: Mapping[str, np.ndarray]) -> str:
    digest = hashlib.sha1()
    for name in sorted(weights):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(weights[name]).tobytes())
    return digest.hexdigest()


def run_spec(spec: RunSpec, callbacks: Sequence[Callback] = (), backend: str | None = None) -> RunResult:
    """Run one RunSpec and return how it ended."""
    return Federation(spec, callbacks, backend).run()

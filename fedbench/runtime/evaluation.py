"""The evaluation protocols, in one place: local accuracy every evaluated round, and after the last round system
accuracy (004 Sec. 5) and the unseen test-time clients (002 Sec. 3.3), each given a model by the method's own rule
or, under `test_time: known`, by 002 App. E's known association.

Each protocol runs typed jobs (below) through the backend and asks the algorithm only what its capabilities
(`fedbench.algorithms.capabilities`) say it can answer: a method without `SystemVote` has no system accuracy, one
without `TestTimeAssignment` no test-time clients. What the jobs download is metered on the evaluation channels.
Adding a protocol means a job here, a step in `Evaluation`, and a capability the methods that support it inherit.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from fedbench.algorithms.base import Algorithm
from fedbench.algorithms.capabilities import (
    PersonalModels,
    SecondReading,
    SystemVote,
    TestTimeAssignment,
    TrainedOn,
    gets_given_association,
)
from fedbench.core import metrics as M
from fedbench.core.runspec import RunSpec
from fedbench.core.types import ClientResult, Payload, RoundContext
from fedbench.runtime.byte_meter import ByteMeter
from fedbench.runtime.jobs import Job
from fedbench.runtime.records import evaluation_metrics, test_time_metrics
from fedbench.runtime.state_store import StateStore
from fedbench.runtime.system_eval import (
    ENSEMBLE,
    bundle,
    ensemble_bundle,
    ensemble_metrics,
    pooled_accuracy,
    system_counts,
    system_metrics,
    unbundle,
)
from fedbench.scenarios import Scenario
from fedbench.training import ClientData

if TYPE_CHECKING:
    from fedbench.runtime.backends import Backend


# -- jobs --------------------------------------------------------------------------------------------------
class Evaluate(Job):
    """A training client's local accuracy: `client_evaluate` on its test split, with its training-set size."""

    name = "evaluate"

    def run(self, worker: Any, round: int, client_id: int, payload: Payload, state: Any) -> ClientResult:
        metrics, seconds = worker.on_data(
            self, round, client_id, lambda data, ctx: worker.algorithm.client_evaluate(payload, state, data, ctx)
        )
        train_samples = float(worker.train_samples(round, client_id))
        return ClientResult(client_id, Payload(), {**metrics, M.TRAIN_SAMPLES: train_samples}, seconds)


class Predict(Job):
    """System accuracy's share of one client: its test split answered by every client's model (the bundle)."""

    name = "predict"

    def run(self, worker: Any, round: int, client_id: int, payload: Payload, state: Any) -> ClientResult:
        models, owners = unbundle(payload)

        def count(data: ClientData, ctx: RoundContext) -> dict[str, float]:
            outputs = [worker.algorithm.client_predict(model, state, data, ctx) for model in models]
            return system_counts(outputs, owners, data.test_y.numpy(), client_id, ctx.num_classes)

        metrics, seconds = worker.on_data(self, round, client_id, count)
        return ClientResult(client_id, Payload(), metrics, seconds)


class Share(Job):
    """What a client adds to its system payload for the vote (`PersonalModels.client_share`); reads no data."""

    name = "share"

    def run(self, worker: Any, round: int, client_id: int, payload: Payload, state: Any) -> ClientResult:
        start = time.perf_counter()
        uplink = worker.algorithm.client_share(payload, state)
        return ClientResult(client_id, uplink, {}, time.perf_counter() - start)


class Describe(Job):
    """A test-time client's uplink for `assign` (FEROMA's label-free profile)."""

    name = "describe"
    on_test_clients = True

    def run(self, worker: Any, round: int, client_id: int, payload: Payload, state: Any) -> ClientResult:
        uplink, seconds = worker.on_data(
            self, round, client_id, lambda data, ctx: worker.algorithm.client_describe(payload, data, ctx)
        )
        return ClientResult(client_id, uplink, {}, seconds)


class Test(Job):
    """A test-time client's accuracy with the payload `assign` gave it, or with the size-weighted ensemble."""

    __test__ = False  # not a pytest test class, despite its name
    name = "test"
    on_test_clients = True

    def run(self, worker: Any, round: int, client_id: int, payload: Payload, state: Any) -> ClientResult:
        algorithm = worker.algorithm

        def score(data: ClientData, ctx: RoundContext) -> dict[str, float]:
            if ENSEMBLE not in payload:
                return algorithm.client_evaluate(payload, state, data, ctx)
            models, _ = unbundle(payload)
            outputs = [algorithm.client_probabilities(model, data, ctx) for model in models]
            return ensemble_metrics(outputs, payload, data.test_y.numpy())

        metrics, seconds = worker.on_data(self, round, client_id, score)
        return ClientResult(client_id, Payload(), metrics, seconds)


class KnownTest(Job):
    """A test-time client's accuracy with the personal model of the training client it is given: the one whose
    distribution it holds (002 App. E's known association) or the same-index one (`test_time: index`, 002's baseline
    code), answered as that model answers in system accuracy's vote (`client_predict`,
    which reads a personal model's uploaded part from the payload, not from a client state the test client lacks)."""

    name = "known_test"
    on_test_clients = True

    def run(self, worker: Any, round: int, client_id: int, payload: Payload, state: Any) -> ClientResult:
        def score(data: ClientData, ctx: RoundContext) -> dict[str, float]:
            labels = data.test_y.numpy()
            predicted = worker.algorithm.client_predict(payload, state, data, ctx)[M.PRED]
            accuracy = float((predicted == labels).mean()) if len(labels) else float("nan")
            return {M.ACCURACY: accuracy, M.TEST_SAMPLES: float(len(labels))}

        metrics, seconds = worker.on_data(self, round, client_id, score)
        return ClientResult(client_id, Payload(), metrics, seconds)


EVALUATE, PREDICT, SHARE, DESCRIBE, TEST, KNOWN_TEST = Evaluate(), Predict(), Share(), Describe(), Test(), KnownTest()


# -- protocols ---------------------------------------------------------------------------------------------
@dataclass
class Evaluation:
    """A run's evaluation protocols, over its algorithm, backend, training clients' state store and byte meter."""

    spec: RunSpec
    algorithm: Algorithm[Any, Any, Any]
    backend: Backend
    """The run's backend (`SerialBackend` or `RayBackend`)."""
    scenario: Scenario
    store: StateStore
    meter: ByteMeter
    compute_s: float = 0.0
    """Compute seconds of the jobs run since the last `take_compute_s`."""
    personal: dict[int, Payload] | None = None
    """The training clients' completed personal models after the last round, once gathered (`personal_models`)."""

    def take_compute_s(self) -> float:
        """The evaluation jobs' compute seconds since the last call."""
        seconds, self.compute_s = self.compute_s, 0.0
        return seconds

    def local(self, round: int, state: Any, clients: list[int]) -> tuple[dict[str, float], LocalResults]:
        """Local accuracy of `clients` on their test splits; returns the metrics and what each evaluated with."""
        payloads = self.algorithm.evaluation_payloads(state, clients)
        results = self._run(EVALUATE, round, payloads)
        return evaluation_metrics(results), LocalResults(payloads, results)

    def final(self, round: int, state: Any, last: LocalResults) -> dict[str, float]:
        """After the last round (whose local evaluation of every client is `last`): system accuracy where the run
        asks for it and the method has a vote, and the test-time clients where the method assigns them models."""
        record: dict[str, float] = {}
        if self.spec.system_accuracy and isinstance(self.algorithm, SystemVote):
            record.update(self.system_accuracy(round, state, last))
        if self.scenario.test_clients and isinstance(self.algorithm, TestTimeAssignment):
            record.update(self.score_test_clients(round, state))
        if isinstance(self.algorithm, SecondReading):
            record.update(self.both_readings(round, state, last))
        return record

    def both_readings(self, round: int, state: Any, last: LocalResults) -> dict[str, float]:
        """The last local accuracy under the name of its point, and the method's second reading (`SecondReading`),
        beside the run: its jobs are neither metered nor counted as the run's compute (their seconds stay in the
        round's wall time)."""
        algorithm = self.algorithm
        assert isinstance(algorithm, SecondReading)  # the caller asked
        metric, payloads = algorithm.second_reading(state, list(last.payloads))
        results = self._run(EVALUATE, round, payloads, beside=True)
        return {
            algorithm.first_reading(): evaluation_metrics(last.results)[M.ACC_LOCAL_MEAN],
            metric: evaluation_metrics(results)[M.ACC_LOCAL_MEAN],
        }

    def system_accuracy(self, round: int, state: Any, last: LocalResults) -> dict[str, float]:
        """`acc_system` (and `acc_routing`) from every training client's personal model. Where every client answers
        with the one model it was just evaluated with, the last evaluation already holds the answer (no job)."""
        algorithm = self.algorithm
        assert isinstance(algorithm, SystemVote)  # the caller asked
        held = algorithm.system_payloads(state, list(range(self.spec.scenario.num_clients)))
        if answered_by_evaluation(algorithm, held, last.payloads):
            return pooled_accuracy(last.results)
        personal = self.personal_models(round, state)
        if not personal:  # models living on clients: no answer
            return {}
        shared = bundle(personal)
        return system_metrics(self._run(PREDICT, round, {cid: shared for cid in personal}))

    def personal_models(self, round: int, state: Any) -> dict[int, Payload]:
        """Every training client's personal model as the server holds it (`system_payloads`), completed by what only
        the client holds (`PersonalModels`: each uploads its part once, metered as evaluation traffic); empty where
        part of them never reaches the server. Gathered once after the last round, for the vote and for the known
        association."""
        if self.personal is None:
            algorithm = self.algorithm
            assert isinstance(algorithm, SystemVote)  # only a voting method has personal models to gather
            personal = algorithm.system_payloads(state, list(range(self.spec.scenario.num_clients)))
            if isinstance(algorithm, PersonalModels) and personal:
                completed = self._run(SHARE, round, personal, downloaded=False)
                self.meter.uplink(completed, channel=M.COMM_EVAL_UP_BYTES)
                personal = {r.client_id: personal[r.client_id].merged(r.uplink) for r in completed}
            self.personal = {} if not personal or any(p.is_empty for p in personal.values()) else personal
        return self.personal

    def score_test_clients(self, round: int, state: Any) -> dict[str, float]:
        """The test-time clients: where the run's `test_time` gives the association (for a method without a rule of
        its own), each test client gets a training client's personal model: under `known` the one whose last-round
        distribution it holds (if any did), under `index` the one of its own index. The others describe themselves
        where the method asks, the server assigns each a model (or the size-weighted ensemble), and each is scored
        with what it got."""
        test_ids = list(range(len(self.scenario.test_clients)))
        given: dict[int, int] = {}
        personal = (
            self.personal_models(round, state)
            if gets_given_association(type(self.algorithm), self.spec.test_time)
            else {}
        )
        if personal and self.spec.test_time == "index":
            given = {tid: tid for tid in test_ids if tid in personal}
        elif personal:
            given = {tid: c.origin for tid, c in enumerate(self.scenario.test_clients) if c.origin >= 0}
        tested, matched = self._assigned(round, state, [tid for tid in test_ids if tid not in given])
        if given:
            tested += self._run(KNOWN_TEST, round, {tid: personal[o] for tid, o in given.items()}, StateStore())
            matched.update({tid: TrainedOn(o) for tid, o in given.items()})
        record = test_time_metrics(sorted(tested, key=lambda r: r.client_id), matched, self.scenario, round)
        if personal:
            record[M.ACC_TEST_TIME_INDEX] = self._same_index_reading(round, personal, given, tested, record)
        return record

    def _same_index_reading(
        self,
        round: int,
        personal: dict[int, Payload],
        given: dict[int, int],
        tested: list[ClientResult],
        record: dict[str, float],
    ) -> float:
        """`acc_test_time_index`: the test-time accuracy had each test client been given its own index's training
        client's model (002's baseline code), beside a run whose association is another, so that one run answers
        both protocols. Clients the run gave that model already, or none to give, keep their result; the others are
        scored again with it, neither metered nor counted as the run's compute (the protocol does not do this; its
        seconds stay in the last round's wall time)."""
        if self.spec.test_time == "index":
            return record[M.ACC_TEST_TIME]
        again = {
            r.client_id: personal[r.client_id]
            for r in tested
            if r.client_id in personal and given.get(r.client_id) != r.client_id
        }
        if not again:
            return record[M.ACC_TEST_TIME]
        rescored = {r.client_id: r for r in self._run(KNOWN_TEST, round, again, StateStore(), beside=True)}
        return float(np.mean([rescored.get(r.client_id, r).metrics[M.ACCURACY] for r in tested]))

    def _assigned(self, round: int, state: Any, test_ids: list[int]) -> tuple[list[ClientResult], dict[int, TrainedOn]]:
        """The method's own rule for `test_ids`: their results and what their models were trained on, where known."""
        if not test_ids:
            return [], {}
        algorithm = self.algorithm
        assert isinstance(algorithm, TestTimeAssignment)  # the caller asked
        no_state = StateStore()  # test-time clients never trained: they have no client state
        descriptions = {tid: Payload() for tid in test_ids}
        requests = algorithm.describe_payloads(state, test_ids)
        if requests:
            described = self._run(DESCRIBE, round, requests, no_state)
            descriptions.update({r.client_id: r.uplink for r in described})
        assignment = algorithm.assign(state, descriptions)
        payloads = assignment.payloads
        if assignment.ensemble is not None:  # one bundle of every model, downloaded whole by each test client
            shared = ensemble_bundle(assignment.ensemble.models, assignment.ensemble.weights)
            payloads = {tid: shared for tid in payloads}
        if not payloads:
            return [], {}
        return self._run(TEST, round, payloads, no_state), dict(assignment.matched)

    def _run(
        self,
        job: Job,
        round: int,
        payloads: Mapping[int, Payload],
        store: StateStore | None = None,
        downloaded: bool = True,
        beside: bool = False,
    ) -> list[ClientResult]:
        """`job` for every client of `payloads`; where the payloads travel (`downloaded`; not where they stand for
        what the server already holds, as for `SHARE`), metered on the evaluation channel, and the jobs' seconds
        counted as the run's compute. A reading `beside` the protocol (one the protocol does not do) is neither:
        its seconds stay in the round's wall time."""
        if downloaded and not beside:
            self.meter.downlink(payloads, channel=M.COMM_EVAL_DOWN_BYTES)
        results = self.backend.run(job, round, payloads, self.store if store is None else store)
        if not beside:
            self.compute_s += sum(r.compute_s for r in results)
        return results


@dataclass(frozen=True)
class LocalResults:
    """A local evaluation's payloads (what each client evaluated with) and results, which system accuracy reuses."""

    payloads: dict[int, Payload]
    results: list[ClientResult]


def answered_by_evaluation(
    algorithm: Algorithm[Any, Any, Any], system: Mapping[int, Payload], evaluated: Mapping[int, Payload]
) -> bool:
    """Whether system accuracy's vote would answer every sample as the last evaluation did, so that its pass can be
    skipped: one payload answers for every client (the vote of one model is its prediction), it is the payload
    each client was evaluated with, and the algorithm evaluates and predicts with that payload's model as the
    defaults do (the same model on the same batches, the same argmax), with no client part to upload."""
    kind = type(algorithm)
    return (
        bool(system)
        and not isinstance(algorithm, PersonalModels)
        and kind.client_evaluate is Algorithm.client_evaluate
        and getattr(kind, "client_predict", None) is SystemVote.client_predict
        and len({id(p) for p in system.values()}) == 1
        and all(evaluated.get(cid) is payload and not payload.is_empty for cid, payload in system.items())
    )

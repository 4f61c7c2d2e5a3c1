"""Turning a round's client results into the round record, and a run's records into its summary."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from fedbench.algorithms.capabilities import TrainedOn
from fedbench.core import metrics as M
from fedbench.core.callbacks import RoundRecord
from fedbench.core.errors import FedbenchError
from fedbench.core.types import ClientResult
from fedbench.scenarios import Scenario


def training_metrics(results: Sequence[ClientResult], method: str = "", declared: Sequence[str] = ()) -> RoundRecord:
    """Mean training loss, compute seconds, clients trained, on GPUs the most memory a worker held, and the mean of
    each client metric the method declares (`Algorithm.client_metrics`) as `client_<key>_mean`.

    Raises:
        UndeclaredClientMetricError: a client reported a key that is neither a fit's own nor declared: it would
            otherwise be dropped without a word.
    """
    allowed = {*M.FIT_KEYS, *declared}
    for result in results:
        unknown = sorted(set(result.metrics) - allowed)
        if unknown:
            raise UndeclaredClientMetricError(method, result.client_id, unknown, declared)
    record = {
        M.TRAIN_LOSS_MEAN: mean_of_finite([r.metrics[M.TRAIN_LOSS] for r in results]),
        M.TIME_CLIENT_COMPUTE_S: float(sum(r.compute_s for r in results)),
        M.CLIENTS_SAMPLED: float(len(results)),
    }
    for key in declared:
        record[client_metric(key)] = mean_of_finite([r.metrics[key] for r in results if key in r.metrics])
    peak = max((r.gpu_peak_bytes for r in results), default=0)
    if peak:
        record[M.GPU_PEAK_MB] = peak / 2**20
    return record


def client_metric(key: str) -> str:
    """The round key a declared client metric is recorded under."""
    return f"{M.CLIENT_METRIC_PREFIX}{key}_mean"


class UndeclaredClientMetricError(FedbenchError, ValueError):
    """A client half reported a metric its method does not declare in `client_metrics`."""

    def __init__(self, method: str, client: int, keys: Sequence[str], declared: Sequence[str]):
        super().__init__(
            f"{method or 'the method'}'s client {client} reported {', '.join(map(repr, keys))}, which "
            f"{method or 'it'} does not declare: add it to {method or 'the method'}'s `client_metrics` "
            f"(declared: {', '.join(declared) or 'none'}; every fit may report {', '.join(M.FIT_KEYS)}) to record it"
        )


def evaluation_metrics(results: Sequence[ClientResult]) -> RoundRecord:
    """Local test accuracy over clients: mean, std, min, and means weighted by test-set size and by the
    clients' shares of the training data (004's pi-weighted average accuracy); the local test loss weighted by
    test-set size (the validation loss 002's FedAvg picks its reported round by)."""
    acc = np.array([r.metrics[M.ACCURACY] for r in results], dtype=np.float64)
    return {
        M.ACC_LOCAL_MEAN: float(acc.mean()),
        M.ACC_LOCAL_STD: float(acc.std()),
        M.ACC_LOCAL_MIN: float(acc.min()),
        M.ACC_LOCAL_WEIGHTED: weighted_mean(acc, [r.metrics[M.TEST_SAMPLES] for r in results]),
        M.ACC_LOCAL_PI_WEIGHTED: weighted_mean(acc, [r.metrics[M.TRAIN_SAMPLES] for r in results]),
        M.LOSS_LOCAL_WEIGHTED: weighted_mean(
            np.array([r.metrics[M.LOSS] for r in results], dtype=np.float64),
            [r.metrics[M.TEST_SAMPLES] for r in results],
        ),
    }


def test_time_metrics(
    results: Sequence[ClientResult], matched: Mapping[int, TrainedOn], scenario: Scenario, round: int
) -> RoundRecord:
    """Mean accuracy over test-time clients and, for methods that pick a training client's model, how often that
    model was trained on the test client's distribution (002 Sec. 5's association accuracy; "known": over test
    clients whose distribution occurred in training). `round` is the last round, where a match names none."""
    if not results:
        return {}
    record = {M.ACC_TEST_TIME: float(np.mean([r.metrics[M.ACCURACY] for r in results]))}
    if matched:
        hits = {
            tid: scenario.view(round if on.round is None else on.round, on.client).distribution_id
            == scenario.test_clients[tid].view.distribution_id
            for tid, on in matched.items()
        }
        record[M.ACC_ASSOCIATION] = float(np.mean(list(hits.values())))
        known = [hit for tid, hit in hits.items() if scenario.test_clients[tid].seen]
        if known:
            record[M.ACC_ASSOCIATION_KNOWN] = float(np.mean(known))
    return record


def mean_of_finite(values: Sequence[float]) -> float:
    """Mean over clients that trained: a job that only profiles its data (FEROMA's first mapping round)
    reports a NaN loss and is left out; NaN when no client trained."""
    finite = [v for v in values if np.isfinite(v)]
    return float(np.mean(finite)) if finite else float("nan")


def weighted_mean(values: np.ndarray, weights: Sequence[float]) -> float:
    """The `weights`-weighted mean of `values`; a value of weight 0 (a client with no test samples: NaN) counts
    for nothing."""
    w = np.asarray(weights, dtype=np.float64)
    held = w > 0
    return float((values[held] * w[held]).sum() / w[held].sum()) if held.any() else float("nan")


def summarize(history: Sequence[RoundRecord], run_seconds: float) -> dict[str, float]:
    """`final.<key>` (last value seen) and `total.<key>` (sum over rounds), plus the run's wall time; the methods'
    declared client metrics (`client_<key>_mean`) get their `final.` too."""
    final: dict[str, float] = {}
    declared = sorted(
        {k for rec in history for k in rec if k.startswith(M.CLIENT_METRIC_PREFIX) and k.endswith("_mean")}
    )
    for key in [*M.LAST, *declared]:
        values = [rec[key] for rec in history if key in rec]
        if values:
            final[M.FINAL_PREFIX + key] = values[-1]
    for key in M.SUMMED:
        final[M.TOTAL_PREFIX + key] = float(sum(rec.get(key, 0.0) for rec in history))
    final[M.TOTAL_PREFIX + M.TIME_RUN_S] = run_seconds
    return final


def meaningless(final: Mapping[str, float]) -> str:
    """Why a run that went through its rounds still means nothing, or '' when it means something: its final
    local accuracy is NaN (some client held no local test sample), which would otherwise rank as a result."""
    key = M.FINAL_PREFIX + M.ACC_LOCAL_MEAN
    if key in final and math.isnan(final[key]):
        return (
            f"{key} is NaN: some client has no local test sample "
            "(fewer scenario.num_clients or a larger scenario.test_fraction would give each one)"
        )
    return ""

"""What a client reports is kept: a method declares its client metrics, the runtime records their mean per round
and each client's value in the per-client table, unmetered; a key not declared fails the run and says how to fix
it, instead of vanishing."""

from __future__ import annotations

import math

import numpy as np

from fedbench.algorithms.fedavg import FedAvg
from fedbench.core import metrics as M
from fedbench.core.registry import ALGORITHMS
from fedbench.runtime import run_spec
from fedbench.runtime.records import client_metric
from tests.conftest import tiny_spec


class ReportsItsData(FedAvg):
    """FedAvg whose client reports a statistic of its data (here its share of label 0), as a detector would."""

    def client_update(self, payload, state, data, ctx):
        uplink, state, metrics = super().client_update(payload, state, data, ctx)
        return uplink, state, {**metrics, "zero_share": float((data.train_y == 0).float().mean())}


class DeclaresIt(ReportsItsData):
    client_metrics = ("zero_share",)


def spec_of(cls: type) -> object:
    return tiny_spec(algorithm=f"{__name__}:{cls.__name__}", rounds=2)


def test_a_declared_client_metric_is_recorded_per_round_and_per_client_and_not_metered():
    declared, plain = run_spec(spec_of(DeclaresIt)), run_spec(tiny_spec(algorithm="fedavg", rounds=2))
    assert declared.status == "FINISHED", declared.reason
    table = declared.per_client
    assert "zero_share" in table
    for record in declared.history:
        rows = table["round"] == record[M.ROUND]
        assert record[client_metric("zero_share")] == np.mean(table["zero_share"][rows])  # every client trained
        assert 0.0 <= record[client_metric("zero_share")] <= 1.0
    for channel in (M.COMM_UP_BYTES, M.COMM_DOWN_BYTES):  # the same bytes as FedAvg's: a record, not an uplink
        assert [r[channel] for r in declared.history] == [r[channel] for r in plain.history]
    assert math.isfinite(declared.final[M.FINAL_PREFIX + client_metric("zero_share")])


def test_an_undeclared_client_metric_fails_the_run_naming_the_key_and_the_fix():
    result = run_spec(spec_of(ReportsItsData))
    assert result.status == "FAILED"
    assert "'zero_share'" in result.reason and "client_metrics" in result.reason


def test_no_registered_method_declares_a_key_that_shadows_the_runtimes():
    for name in ALGORITHMS.names():
        declared = set(ALGORITHMS.get(name).client_metrics)
        assert not declared & set(M.FIT_KEYS), name

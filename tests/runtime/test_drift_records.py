"""What a drift costs and how fast a method recovers, on per-client rows whose answer is known, and in a run."""

import math

import numpy as np
import pytest

from fedbench.core import metrics as M
from fedbench.runtime import run_spec
from fedbench.runtime.drift_records import drift_events, round_drift_metrics, run_drift_metrics
from tests.conftest import tiny_spec

DRIFTING = {  # label banks that change every 2 rounds: each client's distribution id changes at round 3
    "dataset": {"name": "synthetic_images", "size": 12, "train_samples": 600, "test_samples": 100},
    "scenario": {"partition": "class_bank", "banks": 4, "num_clients": 4, "drift_every": 2},
}
HELD = {0: [0, 0, 1, 1, 1], 1: [0, 0, 0, 0, 0], 2: [1, 1, 0, 1, 1]}
ACCURACY = {0: [0.9, 0.9, 0.5, 0.85, 0.92], 1: [0.8, 0.81, 0.82, 0.83, 0.84], 2: [0.9, 0.9, 0.3, 0.4, 0.95]}


def table(held=HELD, accuracy=ACCURACY) -> dict[str, np.ndarray]:
    rows = [(r + 1, c, held[c][r], accuracy[c][r]) for r in range(len(held[0])) for c in held]
    return {
        "round": np.array([r for r, *_ in rows]),
        "client": np.array([c for _, c, *_ in rows]),
        "distribution": np.array([d for *_, d, _ in rows]),
        "acc_local": np.array([a for *_, a in rows]),
    }


def test_drift_events_their_drop_and_the_rounds_to_recover():
    events = {(e.client, e.round): e for e in drift_events(table())}
    assert set(events) == {(0, 3), (2, 3), (2, 4)}
    # client 0: 0.9 before, 0.5 after; back within 0.01 of 0.9 two rounds later (0.92 at round 5; 0.85 is not)
    assert (events[(0, 3)].before, events[(0, 3)].after, events[(0, 3)].recovery_rounds) == (0.9, 0.5, 2)
    assert events[(2, 3)].recovery_rounds is None  # it drifted again before it was back: not recovered
    assert events[(2, 4)].recovery_rounds == 0  # 0.4 after against 0.3 before: no fall to recover from


def test_round_metrics_only_at_rounds_with_a_drift():
    rows = table()
    third = round_drift_metrics(rows, 3)
    assert third[M.DRIFT_ACC_DROP] == pytest.approx(((0.9 - 0.5) + (0.9 - 0.3)) / 2)
    assert third[M.ACC_DRIFTED] == pytest.approx((0.5 + 0.3) / 2) and third[M.ACC_STEADY] == pytest.approx(0.82)
    assert round_drift_metrics(rows, 2) == {} and round_drift_metrics(rows, 5) == {}


def test_run_summary_and_a_run_without_drift_reports_no_drift_metric():
    history = [{M.ACC_LOCAL_MEAN: 0.5}, {M.ACC_LOCAL_MEAN: 0.7}, {M.ACC_DRIFTED: 0.4, M.ACC_STEADY: 0.82}, {}]
    summary = run_drift_metrics(table(), history)
    assert summary[M.FINAL_PREFIX + M.ACC_OVER_TIME] == pytest.approx(0.6)
    assert summary[M.FINAL_PREFIX + M.DRIFT_ACC_DROP] == pytest.approx((0.4 + 0.6 - 0.1) / 3)
    assert summary[M.FINAL_PREFIX + M.RECOVERY_ROUNDS] == pytest.approx(1.0)  # 2 and 0; one not recovered
    assert summary[M.FINAL_PREFIX + M.UNRECOVERED] == pytest.approx(1 / 3)
    assert summary[M.FINAL_PREFIX + M.DRIFT_EVENTS] == 3.0
    static = run_drift_metrics(table(held={c: [c] * 5 for c in HELD}), history[:2])
    assert static == {M.FINAL_PREFIX + M.ACC_OVER_TIME: pytest.approx(0.6)}  # absent, not zero


def test_a_drifting_run_logs_the_drift_metrics_and_a_static_one_does_not():
    drifting = run_spec(tiny_spec(rounds=4, **DRIFTING))
    assert drifting.status == "FINISHED", drifting.reason
    assert M.DRIFT_ACC_DROP in drifting.history[2] and M.DRIFT_ACC_DROP not in drifting.history[1]  # drifts at round 3
    assert math.isfinite(drifting.final[M.FINAL_PREFIX + M.DRIFT_ACC_DROP])
    assert drifting.final[M.FINAL_PREFIX + M.DRIFT_EVENTS] >= 1
    static = run_spec(tiny_spec(rounds=3))
    assert not any(k.startswith(M.FINAL_PREFIX + "drift") for k in static.final)
    assert M.FINAL_PREFIX + M.RECOVERY_ROUNDS not in static.final
    assert static.final[M.FINAL_PREFIX + M.ACC_OVER_TIME] == pytest.approx(
        np.mean([r[M.ACC_LOCAL_MEAN] for r in static.history])
    )

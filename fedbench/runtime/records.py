"""Turning a round's client results into the round record, and a run's records into its summary."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from fedbench.core import metrics as M
from fedbench.core.callbacks import RoundRecord
from fedbench.core.types import ClientResult


def training_metrics(results: Sequence[ClientResult]) -> RoundRecord:
    return {
        M.TRAIN_LOSS_MEAN: float(np.mean([r.metrics["train_loss"] for r in results])) if results else float("nan"),
        M.TIME_CLIENT_COMPUTE_S: float(sum(r.compute_s for r in results)),
        M.CLIENTS_SAMPLED: float(len(results)),
    }


def evaluation_metrics(results: Sequence[ClientResult]) -> RoundRecord:
    """Local test accuracy over clients: mean, std, min, and the mean weighted by test-set size."""
    acc = np.array([r.metrics["accuracy"] for r in results], dtype=np.float64)
    n = np.array([r.metrics["test_samples"] for r in results], dtype=np.float64)
    return {
        M.ACC_LOCAL_MEAN: float(acc.mean()),
        M.ACC_LOCAL_STD: float(acc.std()),
        M.ACC_LOCAL_MIN: float(acc.min()),
        M.ACC_LOCAL_WEIGHTED: float((acc * n).sum() / n.sum()) if n.sum() else float("nan"),
    }


def summarize(history: Sequence[RoundRecord], run_seconds: float) -> dict[str, float]:
    """`final/<key>` (last value seen) and `total/<key>` (sum over rounds), plus the run's wall time."""
    final: dict[str, float] = {}
    for key in M.LAST:
        values = [rec[key] for rec in history if key in rec]
        if values:
            final[M.FINAL_PREFIX + key] = values[-1]
    for key in M.SUMMED:
        final[M.TOTAL_PREFIX + key] = float(sum(rec.get(key, 0.0) for rec in history))
    final[M.TOTAL_PREFIX + M.TIME_RUN_S] = run_seconds
    return final

"""Every client's numbers at every evaluated round: what fairness across clients is read from (the worst client,
percentiles, each client's gain over Local), kept as one compact table per run rather than thousands of metrics.

Columns: `round`, `client`, `distribution` (the ground-truth distribution id the client held that round) and `stage`
(the scenario's drift stage that round), both from the scenario on the driver, never from the client, `acc_local` (the
client's accuracy on its local test split), `test_samples`, `train_samples` (its rows in that round) and `train_loss`
(its training loss that round, NaN where it did not train), then one per client metric the method declares
(`Algorithm.client_metrics`: its value that round, NaN where the client did not train). 1,000 clients x 100 rounds is
100,000 rows, about 3 MB as arrays and less as the run's parquet artifact.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence

import numpy as np

from fedbench.core import metrics as M
from fedbench.core.types import ClientResult
from fedbench.scenarios import Scenario

COLUMNS = {
    "round": np.int32,
    "client": np.int32,
    "distribution": np.int32,
    "stage": np.int32,
    "acc_local": np.float64,
    "test_samples": np.int64,
    "train_samples": np.int64,
    "train_loss": np.float64,
}
PerClientTable = dict[str, np.ndarray]


class PerClientRecorder:
    """Collects a run's per-client rows as its rounds are evaluated."""

    def __init__(self, reported: Sequence[str] = ()) -> None:
        """`reported`: the client metrics the method declares, a column each."""
        self.reported = tuple(reported)
        self._columns: dict[str, list] = {name: [] for name in (*COLUMNS, *self.reported)}

    def add(
        self, round: int, evaluated: Sequence[ClientResult], trained: Sequence[ClientResult], scenario: Scenario
    ) -> None:
        """One row per evaluated client of `round`: the distribution it held and the stage (from `scenario`), its
        accuracy, and its training loss and declared metrics where it trained that round."""
        fits = {r.client_id: r.metrics for r in trained}
        for result in sorted(evaluated, key=lambda r: r.client_id):
            fit = fits.get(result.client_id, {})
            row = {
                "round": round,
                "client": result.client_id,
                "distribution": scenario.view(round, result.client_id).distribution_id,
                "stage": scenario.stage_of(round),
                "acc_local": result.metrics[M.ACCURACY],
                "test_samples": result.metrics[M.TEST_SAMPLES],
                "train_samples": result.metrics[M.TRAIN_SAMPLES],
                "train_loss": fit.get(M.TRAIN_LOSS, math.nan),
                **{key: fit.get(key, math.nan) for key in self.reported},
            }
            for name, value in row.items():
                self._columns[name].append(value)

    @classmethod
    def from_table(cls, table: PerClientTable, reported: Sequence[str] = ()) -> PerClientRecorder:
        """A recorder holding `table`'s rows (a resumed run's, from its checkpoint)."""
        recorder = cls(reported)
        rows = len(table.get("round", ()))
        for name in recorder._columns:  # a column a checkpoint from before it lacks reads as unknown: -1 or NaN
            missing = -1 if np.issubdtype(COLUMNS.get(name, np.float64), np.integer) else math.nan
            recorder._columns[name] = list(table[name]) if name in table else [missing] * rows
        return recorder

    def table(self) -> PerClientTable:
        return {name: np.asarray(values, dtype=COLUMNS.get(name, np.float64)) for name, values in self._columns.items()}


def encode(table: PerClientTable) -> str:
    """The table as text (base64 of a compressed .npz), for a sweep's trial to report to its driver."""
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **table)  # type: ignore[arg-type]  # numpy's stubs: **kwds as allow_pickle
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def decode(text: str) -> PerClientTable:
    with np.load(io.BytesIO(base64.b64decode(text)), allow_pickle=False) as arrays:
        return {name: arrays[name] for name in arrays.files}

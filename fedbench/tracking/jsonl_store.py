"""A second, write-only run store: each run's fields, per-round metrics and summary appended to a JSON-lines file.

It is a run callback like the MLflow one (`fedbench.core.callbacks.Callback`), so it records exactly what a run
reports to MLflow, in the names the store interface reads back (`fedbench.tracking.store`): RunSpec fields by their
dotted names and `run_hash`, metrics by key, the summary (`final.*`, `total.*`) at the end. Three kinds of line,
each a JSON object on one line, appended with a single write so that several processes can share one file:

    {"event": "run_start", "run": ID, "time": MS, "task": ..., "run_hash": ..., "fields": {"algorithm.name": ...}}
    {"event": "round", "run": ID, "time": MS, "round": 1, "metrics": {"acc_local_mean": 0.61, ...}}
    {"event": "run_end", "run": ID, "time": MS, "status": "FINISHED", "summary": {...}, "reason": "", "tags": {...}}

`run` is an id of this file's own (not MLflow's run id); `round` is the step MLflow logs the metrics at. Field values
are kept as JSON values (`rounds` an int, `model.hidden` a list), where the store interface reads MLflow's params back
as text (`str` of the same value). A value JSON cannot spell (NaN, an infinity) is written as null. A run resumed
from a checkpoint replays its earlier rounds: their lines come again under the new run id.

Plugging it in: give it to a run beside (or instead of) the MLflow callback, from Python:

    from fedbench.runtime import run_spec
    from fedbench.tracking.jsonl_store import JsonlStore
    from fedbench.tracking.mlflow_callback import MlflowCallback

    run_spec(spec, [MlflowCallback(), JsonlStore("results/runs.jsonl")])

or, for a task's runs as `fedbench run` makes them, add it to what `fedbench.tracking.run_callbacks.run_callbacks`
returns for each run (`run_specs(specs, lambda i, spec: [*make(i, spec), JsonlStore(path)])`). Read it back with
`pandas.read_json(path, lines=True)`.
"""

from __future__ import annotations

import json
import math
import os
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fedbench.core.callbacks import Callback, RoundRecord, RunResult
from fedbench.core.metrics import ROUND
from fedbench.core.runspec import RunSpec
from fedbench.tracking.store import RUN_HASH

DEFAULT_NAME = "runs.jsonl"
"""The file under `results/` when no path is given."""


def _json_value(value: Any) -> Any:
    """`value` as JSON holds it: a non-finite float as None, a list or mapping element-wise."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _json_value(v) for k, v in value.items()}
    return value


def _numbers(values: Mapping[str, float]) -> dict[str, float | None]:
    """Metric values as floats, a non-finite one as None."""
    return {k: (float(v) if math.isfinite(float(v)) else None) for k, v in values.items()}


class JsonlStore(Callback):
    """Appends every run it is given to the JSON-lines file `path` (`results/runs.jsonl` when None)."""

    def __init__(self, path: str | Path | None = None):
        if path is None:
            from fedbench.tracking.paths import results_path

            path = results_path(DEFAULT_NAME)
        self.path = Path(path)
        self.run: str | None = None

    def _append(self, event: str, **content: Any) -> None:
        line = {"event": event, "run": self.run, "time": int(time.time() * 1000), **content}
        data = (json.dumps(_json_value(line), allow_nan=False, default=str) + "\n").encode()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, data)  # one write of the whole line: lines of several processes never interleave
        finally:
            os.close(descriptor)

    def on_run_start(self, spec: RunSpec) -> None:
        self.run = uuid.uuid4().hex
        fields = {**spec.flat(), RUN_HASH: spec.run_hash}
        self._append("run_start", task=spec.task, run_hash=spec.run_hash, fields=fields)

    def on_round_end(self, spec: RunSpec, record: RoundRecord) -> None:
        metrics = {k: v for k, v in record.items() if k != ROUND}
        self._append("round", round=int(record[ROUND]), metrics=_numbers(metrics))

    def on_run_end(self, result: RunResult) -> None:
        self._append(
            "run_end",
            status=result.status,
            summary=_numbers(result.final),
            reason=result.reason,
            tags=dict(result.tags),
        )

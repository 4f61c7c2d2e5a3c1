"""The callbacks each run of `fedbench run` gets, and `fedbench.run` too, so both record runs the same way."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable

from rich.console import Console

from fedbench.core.callbacks import Callback
from fedbench.core.runspec import RunSpec
from fedbench.tracking.console import ProgressCallback, ResultLine
from fedbench.tracking.paths import check_results_writable, check_tracking_uri, tracking_uri


def check_tracking(track: bool = True) -> None:
    """Before anything reads or writes the store.

    Raises:
        ConfigError: results/ cannot be written, or the tracking server does not answer (checked now: MLflow
            itself retries for minutes).
    """
    if track:
        check_results_writable()
        check_tracking_uri(tracking_uri())


def run_callbacks(total: int, console: Console, track: bool = True) -> Callable[[int, RunSpec], list[Callback]]:
    """For the i-th of `total` runs (those that will run, counted after the finished ones are left out): MLflow
    (unless `track` is off), a progress bar and a result line on `console`.

    MLflow's client is imported in a thread from here on (a second of CPU that ran after Ray's start, before the
    first run's workers could load), so that it overlaps the session's start of Ray, which mostly waits for Ray's
    processes; the first run's `make` then waits for that import to end, and raises its error if it failed."""
    if track:
        threading.Thread(target=import_quietly, args=(MLFLOW_CALLBACK,), daemon=True).start()

    def make(i: int, spec: RunSpec) -> list[Callback]:
        from fedbench.tracking.mlflow_callback import MlflowCallback

        position = f"[{i}/{total}] "
        return [
            *([MlflowCallback()] if track else []),
            ProgressCallback(position=position, plain=console),
            ResultLine(console, position),
        ]

    return make


MLFLOW_CALLBACK = "fedbench.tracking.mlflow_callback"


def import_quietly(module: str) -> None:
    """Import `module` ahead of its use; an error is left for the importer that needs it to raise."""
    try:
        importlib.import_module(module)
    except Exception:  # noqa: S110 - raised again, with its traceback, by the import in `make`
        pass

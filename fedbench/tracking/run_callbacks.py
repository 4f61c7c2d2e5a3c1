"""The callbacks each run of `fedbench run` gets, and `fedbench.run` too, so both record runs the same way."""

from __future__ import annotations

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


TRACKING_IMPORTS = ("fedbench.tracking.mlflow_callback",)
"""What a tracked run's callbacks import (MLflow's client: about a second), for the session to import while Ray starts
(`runtime.session.imported_beside`)."""


def run_callbacks(total: int, console: Console, track: bool = True) -> Callable[[int, RunSpec], list[Callback]]:
    """For the i-th of `total` runs (those that will run, counted after the finished ones are left out): MLflow
    (unless `track` is off), a progress bar and a result line on `console`."""

    def make(i: int, spec: RunSpec) -> list[Callback]:
        from fedbench.tracking.mlflow_callback import MlflowCallback  # one of TRACKING_IMPORTS

        position = f"[{i}/{total}] "
        return [
            *([MlflowCallback()] if track else []),
            ProgressCallback(position=position, plain=console),
            ResultLine(console, position),
        ]

    return make

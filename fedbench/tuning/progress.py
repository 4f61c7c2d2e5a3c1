"""A sweep's progress on the console: a line per finished trial, whether or not there is a terminal.

Each line says which trial ended and how, where the sweep stands (done, running, failed, pending), the best
value so far of the ranked metric and an ETA from the mean time per finished trial. Hours-long grids are
never silent, and the lines read the same in a terminal, a log file or CI.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from ray import tune
from rich.console import Console
from rich.markup import escape

from fedbench.tuning.trial import EVENT


class SweepProgress(tune.Callback):
    """Tune callback printing one line per finished or failed trial.

    Args:
        total: trials the sweep will run this time (finished ones of a resumed sweep excluded), or what says so as
            it changes (a search's samples answered from the store run no trial).
        metric: the ranked metric, a final report's key (`final/acc_local_mean`).
        mode: `max` or `min`, which values are better.
        describe: a trial's config -> a short label (the run's name).
        console: where the lines go.
    """

    def __init__(self, total: int | Callable[[], int], metric: str, mode: str, describe: Callable[[dict[str, Any]], str],
                 console: Console):
        self.planned, self.metric, self.mode = total, metric, mode
        self.describe, self.console = describe, console
        self.done = self.failed = 0
        self.best: tuple[float, str] | None = None
        self.started = time.monotonic()

    def on_trial_result(self, iteration: int, trials: list, trial, result: dict, **info) -> None:
        if result.get(EVENT) != "end":
            return
        label = self.describe(trial.config)
        if result.get("status") == "FINISHED":
            self.done += 1
            value = result.get(self.metric, math.nan)
            self._remember(value, label)
            outcome = f"[green]ok[/] {escape(label)} {self.metric}={value:.4f}"
        else:
            self.failed += 1
            outcome = f"[red]FAILED[/] {escape(label)}: {escape(str(result.get('reason', '')))}"
        self._line(trials, trial, outcome)

    def on_trial_error(self, iteration: int, trials: list, trial, **info) -> None:
        """A trial whose process died (its run could not report an end)."""
        self.failed += 1
        self._line(trials, trial, f"[red]FAILED[/] {escape(self.describe(trial.config))}: the trial's process failed")

    def on_trial_recover(self, iteration: int, trials: list, trial, **info) -> None:
        """A trial whose process died and which Tune starts again (`max_failures`): not ended, said anyway."""
        self.console = self.console or Console(highlight=False, soft_wrap=True)
        self.console.print(f"[yellow]restarted[/] {escape(self.describe(trial.config))}: its process died "
                           f"(failure {trial.run_metadata.num_failures}); Tune runs it again from round 1", highlight=False)

    def __getstate__(self) -> dict[str, Any]:
        """Tune pickles its callbacks with the experiment; a console holds a lock and is made anew."""
        return {**self.__dict__, "console": None}

    def _remember(self, value: float, label: str) -> None:
        if math.isnan(value):
            return
        better = self.best is None or (value > self.best[0] if self.mode == "max" else value < self.best[0])
        if better:
            self.best = (value, label)

    @property
    def total(self) -> int:
        return self.planned() if callable(self.planned) else self.planned

    def _line(self, trials: list, ended_trial, outcome: str) -> None:
        ended = self.done + self.failed
        running = sum(1 for t in trials if t.status == "RUNNING" and t is not ended_trial)
        pending = max(0, self.total - ended - running)
        elapsed = time.monotonic() - self.started
        eta = elapsed / ended * (self.total - ended) if ended else math.nan
        best = f"best {self.best[0]:.4f} ({escape(self.best[1])})" if self.best else "best -"
        self.console = self.console or Console(highlight=False, soft_wrap=True)
        self.console.print(
            f"[{ended}/{self.total}] {outcome} | {running} running, {self.failed} failed, {pending} pending | "
            f"{best} | {clock(elapsed)} elapsed, ETA {clock(eta)}",
            highlight=False,
        )


def clock(seconds: float) -> str:
    """h:mm:ss, or '-' when unknown."""
    if math.isnan(seconds):
        return "-"
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


"""A sweep's progress on the console: a line per finished trial, whether or not there is a terminal.

Each line says which trial ended and how, where the sweep stands (done, running, failed, pending), the best
value so far of the ranked metric and an ETA. Between trials' ends, a status line every `status_every_s` says
which round each running trial is in (`fedprox-s0 round 7/20`), so a sweep of long trials is not silent for
minutes. The ETA counts rounds: the rounds still to run (those left in running trials, and a pending trial's
planned rounds) at the rate rounds have run since the first one did; before any round has, it is unknown.
Hours-long grids are never silent, and the lines read the same in a terminal, a log file or CI.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from ray import tune
from rich.console import Console
from rich.markup import escape

from fedbench.tuning.trial import EVENT

STATUS_EVERY_S = 30.0
"""Seconds between the status lines that say which round each running trial is in."""
STATUS_TRIALS_SHOWN = 6
"""Running trials a status line names; the others are counted."""


class SweepProgress(tune.Callback):
    """Tune callback printing one line per finished or failed trial, and between them the running trials' rounds.

    Args:
        total: trials the sweep will run this time (finished ones of a resumed sweep excluded), or what says so as
            it changes (a search's samples answered from the store run no trial).
        metric: the ranked metric, a final report's key (`final.acc_local_mean`).
        mode: `max` or `min`, which values are better.
        describe: a trial's config -> a short label (the run's name).
        console: where the lines go.
        rounds: a trial's config -> the rounds its run has.
        status_every_s: the least seconds between two status lines.
    """

    def __init__(
        self,
        total: int | Callable[[], int],
        metric: str,
        mode: str,
        describe: Callable[[dict[str, Any]], str],
        console: Console,
        rounds: Callable[[dict[str, Any]], int],
        status_every_s: float = STATUS_EVERY_S,
    ):
        self.planned, self.metric, self.mode = total, metric, mode
        self.describe, self.console = describe, console
        self.rounds_of, self.status_every_s = rounds, status_every_s
        self.done = self.failed = 0
        self.best: tuple[float, str] | None = None
        self.started = self.last_status = time.monotonic()
        self.rounds: dict[str, tuple[int, int]] = {}  # trial id -> (rounds run, rounds planned)
        self.ended: set[str] = set()
        self.rounds_run = 0
        self.first_round: tuple[float, int] | None = None  # (when, rounds run by then): the rate is timed from it

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        if result.get(EVENT) == "round":
            self._count_round(trial, int(result.get("round", 0)))
            if time.monotonic() - self.last_status >= self.status_every_s:
                self._status(trials)
            return
        if result.get(EVENT) != "end":
            return
        self._end(trial)
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

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """A trial that ended, with or without its final report (ASHA stops some early): no rounds left in it."""
        self._end(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """A trial whose process died (its run could not report an end)."""
        self._end(trial)
        self.failed += 1
        self._line(trials, trial, f"[red]FAILED[/] {escape(self.describe(trial.config))}: the trial's process failed")

    def on_trial_recover(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """A trial whose process died and which Tune starts again (`max_failures`): not ended, said anyway."""
        self.console = self.console or Console(highlight=False, soft_wrap=True)
        self.console.print(
            f"[yellow]restarted[/] {escape(self.describe(trial.config))}: its process died "
            f"(failure {trial.run_metadata.num_failures}); Tune runs it again from round 1",
            highlight=False,
        )

    def __getstate__(self) -> dict[str, Any]:
        """Tune pickles its callbacks with the experiment; a console holds a lock and is made anew."""
        return {**self.__dict__, "console": None}

    def _remember(self, value: float, label: str) -> None:
        if math.isnan(value):
            return
        better = self.best is None or (value > self.best[0] if self.mode == "max" else value < self.best[0])
        if better:
            self.best = (value, label)

    def _count_round(self, trial: Any, round: int) -> None:
        if trial.trial_id not in self.rounds:
            self.rounds[trial.trial_id] = (0, self.rounds_of(trial.config))
        done, planned = self.rounds[trial.trial_id]
        if round > done:  # a restarted trial reports its rounds again from 1: counted once
            self.rounds_run += round - done
            if self.first_round is None:
                self.first_round = (time.monotonic(), self.rounds_run)
            self.rounds[trial.trial_id] = (round, planned)

    def _end(self, trial: Any) -> None:
        if trial.trial_id not in self.ended:
            self.ended.add(trial.trial_id)
            self.rounds.setdefault(trial.trial_id, (0, self.rounds_of(trial.config)))

    def _eta(self, elapsed: float) -> float:
        """Seconds left: the rounds still to run at the rate rounds have run since the first one did (NaN before
        the first round). Timed from the first round, not the sweep's start: Ray's and the first workers' start
        (tens of seconds, once) made the first ETA of a short sweep read hours (issue 47, item 10)."""
        if not self.rounds_run or self.first_round is None:
            return math.nan
        since, rounds_then = self.first_round
        timed = (time.monotonic() - since, self.rounds_run - rounds_then)
        seconds, rounds = timed if timed[1] > 0 else (elapsed, self.rounds_run)  # one round so far: all there is
        left = sum(planned - done for tid, (done, planned) in self.rounds.items() if tid not in self.ended)
        unstarted = max(0, self.total - len(self.rounds))
        mean_planned = sum(planned for _, planned in self.rounds.values()) / len(self.rounds)
        return (left + unstarted * mean_planned) * seconds / rounds

    def _status(self, trials: list) -> None:
        """Which round each running trial is in, and the ETA."""
        self.last_status = time.monotonic()
        running = [t for t in trials if t.status == "RUNNING" and t.trial_id not in self.ended]
        shown = [
            f"{escape(self.describe(t.config))} round {self.rounds.get(t.trial_id, (0, 0))[0]}/"
            f"{self.rounds.get(t.trial_id, (0, self.rounds_of(t.config)))[1]}"
            for t in running[:STATUS_TRIALS_SHOWN]
        ]
        more = f", {len(running) - STATUS_TRIALS_SHOWN} more" if len(running) > STATUS_TRIALS_SHOWN else ""
        elapsed = time.monotonic() - self.started
        self.console = self.console or Console(highlight=False, soft_wrap=True)
        self.console.print(
            f"[{self.done + self.failed}/{self.total}] running: {', '.join(shown) or 'none'}{more} | "
            f"{clock(elapsed)} elapsed, ETA {clock(self._eta(elapsed))}",
            highlight=False,
        )

    @property
    def total(self) -> int:
        return self.planned() if callable(self.planned) else self.planned

    def _line(self, trials: list, ended_trial: Any, outcome: str) -> None:
        ended = self.done + self.failed
        running = sum(1 for t in trials if t.status == "RUNNING" and t is not ended_trial)
        pending = max(0, self.total - ended - running)
        elapsed = time.monotonic() - self.started
        eta = self._eta(elapsed)
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

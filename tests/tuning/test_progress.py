"""The sweep's line per finished trial: counts, best so far, ETA."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from fedbench.tuning.progress import SweepProgress, clock
from fedbench.tuning.trial import EVENT


def trial(name: str, status: str = "RUNNING"):
    return SimpleNamespace(config={"name": name}, status=status)


def test_a_line_per_ended_trial_with_counts_best_and_eta():
    out = io.StringIO()
    progress = SweepProgress(4, "final/acc_local_mean", "max", lambda config: config["name"], Console(file=out, width=300))
    a, b, c, d = trial("a"), trial("b"), trial("c", "PENDING"), trial("d", "PENDING")
    progress.on_trial_result(1, [a, b, c, d], a, {EVENT: "round", "acc_local_mean": 0.1})  # a round: no line
    assert out.getvalue() == ""
    progress.on_trial_result(2, [a, b, c, d], a, {EVENT: "end", "status": "FINISHED", "final/acc_local_mean": 0.8})
    a.status = "TERMINATED"
    progress.on_trial_result(3, [a, b, c, d], b, {EVENT: "end", "status": "FAILED", "reason": "ClientDivergedError: nan"})
    b.status, c.status = "TERMINATED", "RUNNING"
    progress.on_trial_result(4, [a, b, c, d], c, {EVENT: "end", "status": "FINISHED", "final/acc_local_mean": 0.9})
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("[1/4] ok a final/acc_local_mean=0.8000 | 1 running, 0 failed, 2 pending | best 0.8000 (a)")
    assert lines[1].startswith("[2/4] FAILED b: ClientDivergedError: nan | 0 running, 1 failed, 2 pending | best 0.8000 (a)")
    assert "best 0.9000 (c)" in lines[2] and "ETA" in lines[2]


def test_clock():
    assert clock(3725.2) == "1:02:05" and clock(float("nan")) == "-"

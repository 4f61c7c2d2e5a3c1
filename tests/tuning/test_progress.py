"""The sweep's line per finished trial: counts, best so far, ETA."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
from rich.console import Console

from fedbench.tuning.progress import SweepProgress, clock
from fedbench.tuning.trial import EVENT


def trial(name: str, status: str = "RUNNING"):
    return SimpleNamespace(config={"name": name, "rounds": 4}, status=status, trial_id=name)


def test_a_line_per_ended_trial_with_counts_best_and_eta():
    out = io.StringIO()
    progress = SweepProgress(
        4,
        "final.acc_local_mean",
        "max",
        lambda config: config["name"],
        Console(file=out, width=300),
        rounds=lambda config: config["rounds"],
        status_every_s=3600,
    )
    a, b, c, d = trial("a"), trial("b"), trial("c", "PENDING"), trial("d", "PENDING")
    progress.on_trial_result(
        1, [a, b, c, d], a, {EVENT: "round", "round": 1, "acc_local_mean": 0.1}
    )  # a round: no line
    assert out.getvalue() == ""
    progress.on_trial_result(2, [a, b, c, d], a, {EVENT: "end", "status": "FINISHED", "final.acc_local_mean": 0.8})
    a.status = "TERMINATED"
    progress.on_trial_result(
        3, [a, b, c, d], b, {EVENT: "end", "status": "FAILED", "reason": "ClientDivergedError: nan"}
    )
    b.status, c.status = "TERMINATED", "RUNNING"
    progress.on_trial_result(4, [a, b, c, d], c, {EVENT: "end", "status": "FINISHED", "final.acc_local_mean": 0.9})
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(
        "[1/4] ok a final.acc_local_mean=0.8000 | 1 running, 0 failed, 2 pending | best 0.8000 (a)"
    )
    assert lines[1].startswith(
        "[2/4] FAILED b: ClientDivergedError: nan | 0 running, 1 failed, 2 pending | best 0.8000 (a)"
    )
    assert "best 0.9000 (c)" in lines[2] and "ETA" in lines[2]


def test_clock():
    assert clock(3725.2) == "1:02:05" and clock(float("nan")) == "-"


def test_a_status_line_says_each_running_trials_round_and_the_eta_counts_rounds(monkeypatch):
    """Issue 31, item 4: during long trials the sweep says where each one is, and the ETA comes from rounds."""
    import fedbench.tuning.progress as progress_module

    now = [0.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    progress = SweepProgress(
        3,
        "final.acc_local_mean",
        "max",
        lambda config: config["name"],
        Console(file=out, width=300),
        rounds=lambda config: 20,
        status_every_s=30,
    )
    a, b, c = trial("fedprox-s0"), trial("fedavg-s1"), trial("local-s0", "PENDING")
    for round in range(1, 8):  # a runs 7 rounds, b 3, in 60 s: 10 rounds, 6 s a round
        now[0] = round * 60 / 7
        progress.on_trial_result(round, [a, b, c], a, {EVENT: "round", "round": round})
        if round <= 3:
            progress.on_trial_result(round, [a, b, c], b, {EVENT: "round", "round": round})
    [line] = out.getvalue().splitlines()  # one line in 60 s, after the first 30
    assert "running: fedprox-s0 round" in line and "fedavg-s1 round 3/20" in line
    now[0] = 60.0
    per_round = (60 - 60 / 7) / 9  # the 9 rounds after the first took the time since it
    assert progress._eta(60.0) == pytest.approx((13 + 17 + 20) * per_round)  # left in a and b, and all of c's


def test_the_eta_is_not_inflated_by_the_start_before_the_first_round(monkeypatch):
    """A sweep's first ETA read 5:16:58 for a sweep of 2:38 (issue 47, item 10): Ray's and the workers' start
    (here 40 s) was counted as if rounds took that long."""
    import fedbench.tuning.progress as progress_module

    now = [40.0]
    monkeypatch.setattr(progress_module.time, "monotonic", lambda: now[0])
    progress = SweepProgress(
        2,
        "final.acc_local_mean",
        "max",
        lambda config: config["name"],
        Console(file=io.StringIO()),
        rounds=lambda config: 10,
        status_every_s=3600,
    )
    progress.started = 0.0
    a, b = trial("a"), trial("b", "PENDING")
    for round in range(1, 5):  # the first round at 40 s, then one every 2 s
        progress.on_trial_result(round, [a, b], a, {EVENT: "round", "round": round})
        now[0] += 2
    now[0] -= 2
    assert progress._eta(now[0]) == pytest.approx((6 + 10) * 2.0)  # not (6 + 10) * 46 / 4

"""Fault injection for `fedbench sweep`: what survives a killed driver, a killed trial, and two sweeps at once.

Each case runs real `fedbench sweep` subprocesses (each starting its own local Ray) on a grid of 6 tiny trials
(digits, MLP, 2 algorithms x 3 Dirichlet alphas, `--rounds` rounds) in one temporary FEDBENCH_RESULTS folder,
and then reads MLflow back:
  (a) SIGKILL the sweep's driver (its whole process group) once 2 trials are done, then `--resume`: every
      trial must end with exactly one FINISHED child run, the ones done before the kill kept, none twice;
  (b) SIGKILL the process of a running trial with `--max-failures 0`: that trial's child run must end FAILED
      with a reason, the others FINISHED, and the sweep must end (exit 1: a trial failed) instead of hanging;
  (c) two sweeps of the same task started at once: each must finish its 6 trials under its own parent run
      and write into its own Tune folder;
  (d) SIGKILL the process of a running trial with the default `max_failures` (1): Tune restarts it, the sweep
      exits 0, every trial has one FINISHED child, the cut-short attempt is one FAILED child tagged
      `fedbench.retried`, and the leaderboard ranks 6 runs and lists no failed one.

    nice -n 10 python bench/fault_injection.py [--rounds 10]

Prints a table (expected vs observed) and writes it to bench/results/fault_injection.md.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml
from mlflow.tracking import MlflowClient

TRIALS = 6


def write_task(folder: Path, name: str, rounds: int) -> Path:
    task = {
        "name": name,
        "dataset": "digits",
        "model": {"name": "mlp", "hidden": [32]},
        "scenario": {"partition": "dirichlet", "alpha": 0.5, "num_clients": 4},
        "rounds": rounds,
        "local_epochs": 1,
        "batch_size": 32,
        "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
        "resources": {"client_cpus": 0.5},
        "grid": {"algorithm": ["fedavg", "local"], "scenario.alpha": [0.3, 1.0, 3.0]},
        "seeds": [0],
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(task))
    return path


def sweep(task: Path, env: dict, *extra: str) -> subprocess.Popen:
    """`fedbench sweep` in its own session (process group), so it and only it can be killed; its output goes to a
    log file beside the task (a pipe nobody reads while the case waits would fill and stall the sweep)."""
    log = open(task.parent / f"{task.stem}-{time.monotonic_ns()}.log", "w")
    return subprocess.Popen(
        [sys.executable, "-m", "fedbench", "sweep", str(task), "--max-concurrent", "1", *extra],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def children(client: MlflowClient, experiment: str) -> list:
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    return [r for r in client.search_runs([exp.experiment_id], max_results=1000) if "fedbench.sweep" not in r.data.tags]


def parents(client: MlflowClient, experiment: str) -> list:
    exp = client.get_experiment_by_name(experiment)
    return [r for r in client.search_runs([exp.experiment_id], max_results=1000) if "fedbench.sweep" in r.data.tags]


def wait_until(condition, timeout: float, proc: subprocess.Popen) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if condition():
            return True
        time.sleep(1)
    return False


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the sweep's process group and any process of its tree that left it (Ray's own sessions)."""
    tree = [proc.pid] + [p.pid for p in psutil.Process(proc.pid).children(recursive=True)]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    time.sleep(3)
    for pid in tree:
        try:
            psutil.Process(pid).kill()
        except psutil.NoSuchProcess:
            pass


def statuses(runs) -> str:
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.info.status] = counts.get(run.info.status, 0) + 1
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "none"


def killed_driver(folder: Path, client: MlflowClient, env: dict, rounds: int) -> list[tuple[str, str, str]]:
    task = write_task(folder, "fault_driver", rounds)
    proc = sweep(task, env)
    wait_until(lambda: sum(r.info.status == "FINISHED" for r in children(client, "fault_driver")) >= 2, 600, proc)
    done_before = {r.info.run_id for r in children(client, "fault_driver") if r.info.status == "FINISHED"}
    left_running = sum(r.info.status == "RUNNING" for r in children(client, "fault_driver"))
    kill_tree(proc)
    start = time.time()
    resumed = sweep(task, env, "--resume")
    resumed.communicate(timeout=900)
    runs = children(client, "fault_driver")
    hashes = [r.data.params.get("run_hash") for r in runs]
    return [
        (
            "(a) driver SIGKILLed after 2 trials",
            "2 or more FINISHED children before the kill",
            f"{len(done_before)} FINISHED, {left_running} RUNNING at the kill",
        ),
        (
            "(a) `--resume` after the kill",
            "exit 0; 6 children, 6 distinct run hashes, all FINISHED; 1 parent",
            f"exit {resumed.returncode} in {time.time() - start:.0f} s; {len(runs)} children, "
            f"{len(set(hashes))} distinct run hashes, {statuses(runs)}; {len(parents(client, 'fault_driver'))} parent",
        ),
        (
            "(a) trials done before the kill",
            "kept, not run again",
            f"{len(done_before & {r.info.run_id for r in runs})} of {len(done_before)} kept",
        ),
    ]


def trial_processes(proc: subprocess.Popen) -> list[psutil.Process]:
    """Tune's trial actors among the sweep's processes (Ray titles them `ray::ImplicitFunc...`)."""
    found = []
    for p in psutil.Process(proc.pid).children(recursive=True):
        try:
            if "ImplicitFunc" in " ".join(p.cmdline()) or "ImplicitFunc" in p.name():
                found.append(p)
        except psutil.NoSuchProcess:
            pass
    return found


def kill_a_running_trial(task: Path, experiment: str, client: MlflowClient, env: dict, *extra: str) -> tuple[int, str]:
    """Start a sweep of `task`, SIGKILL the process of its first running trial, let the sweep end; returns how
    many processes were killed and how the sweep ended."""
    proc = sweep(task, env, *extra)

    def running():
        return any(r.info.status == "RUNNING" for r in children(client, experiment)) and trial_processes(proc)

    wait_until(running, 600, proc)
    victims = trial_processes(proc)
    for victim in victims:
        victim.kill()
    start = time.time()
    try:
        proc.communicate(timeout=900)
        ended = f"exit {proc.returncode} {time.time() - start:.0f} s after the kill"
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        ended = "still running 900 s after the kill (killed)"
    return len(victims), ended


def killed_trial(folder: Path, client: MlflowClient, env: dict, rounds: int) -> list[tuple[str, str, str]]:
    task = write_task(folder, "fault_trial", rounds)
    victims, ended = kill_a_running_trial(task, "fault_trial", client, env, "--max-failures", "0")
    runs = children(client, "fault_trial")
    reasons = {r.data.tags.get("failure_reason", "")[:60] for r in runs if r.info.status == "FAILED"}
    return [
        (
            "(b) a running trial's process SIGKILLed, `--max-failures 0`",
            "the sweep ends (exit 1: a trial failed)",
            f"killed {victims} trial process(es); {ended}",
        ),
        (
            "(b) its child run and the others",
            "1 FAILED with a reason, 5 FINISHED, none RUNNING",
            f"{len(runs)} children: {statuses(runs)}; reason: {'; '.join(sorted(reasons)) or '-'}",
        ),
    ]


def two_at_once(
    folder: Path, client: MlflowClient, env: dict, rounds: int, results: Path
) -> list[tuple[str, str, str]]:
    task = write_task(folder, "fault_twice", rounds)
    start = time.time()
    first, second = sweep(task, env), sweep(task, env)
    codes = [p.wait(timeout=1200) for p in (first, second)]
    sweeps = parents(client, "fault_twice")
    runs = children(client, "fault_twice")
    per_parent = sorted(
        sum(r.data.tags.get("mlflow.parentRunId") == p.info.run_id and r.info.status == "FINISHED" for r in runs)
        for p in sweeps
    )
    folders = sorted(d.name for d in (results / "ray_results").iterdir() if d.name.startswith("fault_twice"))
    return [
        (
            "(c) two sweeps of one task at once",
            "both exit 0",
            f"exit {codes[0]} and {codes[1]}, {time.time() - start:.0f} s for both",
        ),
        (
            "(c) their MLflow runs",
            "2 parents, 6 FINISHED children each",
            f"{len(sweeps)} parents, FINISHED children per parent: {per_parent}",
        ),
        ("(c) their Tune folders", "2 distinct folders", f"{len(set(folders))}: {', '.join(folders)}"),
    ]


def retried_trial(
    folder: Path, client: MlflowClient, env: dict, rounds: int, results: Path
) -> list[tuple[str, str, str]]:
    task = write_task(folder, "fault_retry", rounds)
    victims, ended = kill_a_running_trial(task, "fault_retry", client, env)
    runs = children(client, "fault_retry")
    retried = [r for r in runs if "fedbench.retried" in r.data.tags]
    finished_keys = [r.data.tags.get("fedbench.trial_key") for r in runs if r.info.status == "FINISHED"]
    board = subprocess.run(
        [
            sys.executable,
            "-m",
            "fedbench",
            "leaderboard",
            "--experiment",
            "fault_retry",
            "--format",
            "markdown",
            "--out",
            str(folder / "fault_retry.md"),
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    table = (folder / "fault_retry.md").read_text() if board.returncode == 0 else board.stdout + board.stderr
    ranked = sum(
        int(line.split("|")[5])
        for line in table.splitlines()
        if line.startswith("| ") and line.split("|")[5].strip().isdigit()
    )
    return [
        (
            "(d) a running trial's process SIGKILLed, default `max_failures` (1)",
            "Tune restarts it; the sweep exits 0",
            f"killed {victims} trial process(es); {ended}",
        ),
        (
            "(d) its child runs and the others",
            "6 FINISHED (one per trial key), 1 FAILED tagged retried, none RUNNING",
            f"{len(runs)} children: {statuses(runs)}; {len(set(finished_keys))} distinct trial keys FINISHED; "
            f"{len(retried)} tagged retried: "
            f"{'; '.join(r.data.tags.get('failure_reason', '')[:60] for r in retried) or '-'}",
        ),
        (
            "(d) `fedbench leaderboard`",
            "ranks 6 runs, lists no failed run",
            f"exit {board.returncode}; {ranked} runs ranked; "
            f"{'a failed-run list' if 'Failed runs' in table else 'no failed-run list'}",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fedbench_faults_"))
    results = folder / "results"
    results.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ADDRESS", "MLFLOW_TRACKING_URI"))}
    env["FEDBENCH_RESULTS"] = str(results)
    client = MlflowClient(f"sqlite:///{results / 'mlflow.db'}")
    client.search_experiments()  # migrate the fresh store once, here, before any sweep touches it
    rows = killed_driver(folder, client, env, args.rounds)
    rows += killed_trial(folder, client, env, args.rounds)
    rows += two_at_once(folder, client, env, args.rounds, results)
    rows += retried_trial(folder, client, env, args.rounds, results)
    lines = ["| case | expected | observed |", "|---|---|---|", *(f"| {a} | {b} | {c} |" for a, b, c in rows)]
    header = (
        f"# Fault injection (bench/fault_injection.py)\n\n`fedbench sweep` subprocesses, 6 trials of {args.rounds} "
        f"rounds each (digits, MLP), `--max-concurrent 1`, one results folder ({folder}).\n"
    )
    text = header + "\n" + "\n".join(lines) + "\n"
    print(text)
    out = Path(__file__).parent / "results" / "fault_injection.md"
    out.write_text(text)
    print(f"written: {out}")


if __name__ == "__main__":
    main()

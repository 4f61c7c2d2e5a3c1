"""Scheduling overhead of `fedbench sweep`: a grid of tiny trials on Ray Tune against the same runs back-to-back.

The grid: digits, MLP hidden [16], `--clients` clients Dirichlet, `--rounds` round(s), algorithms fedavg and
local x alphas 0.3, 1.0, 3.0 x `--seeds` seeds (12 trials by default), `resources: {client_cpus: 0.5}` (a trial
then holds 0.5 CPU for its driver and 0.5 for its one client worker: two trials at once on 2 CPUs).
It measures, in one process and one temporary FEDBENCH_RESULTS folder:
  (a) the runs back-to-back with `fedbench.runtime.run_spec` on the serial backend, logged by `MlflowCallback`
      (what `fedbench run` does), and
  (b) `run_sweep(make_plan(load_task(path)), max_concurrent=K)`, Ray started just before it (as `fedbench sweep`
      starts it) and shut down after it, both inside the sweep's wall time;
and reports trials per minute, the time from the sweep's start to its first trial running (the earliest child
run's MLflow start time), and the overhead per trial
    (sweep wall time x K - sum of the trials' own `total.time_run_s`, read back from MLflow) / trials,
next to the serial runs' (wall - sum of their `total.time_run_s`) / runs. A sweep pays a fixed start-up once
(Ray, then per slot a trial process and a client worker, each importing torch, and a first run's warm-up) and
then a cost per trial; (c) a second sweep of `--large-seeds` seeds (48 trials by default) separates the two:
the overhead of each further trial is
    ((wall_large - wall_small) x K - (own_large - own_small)) / (trials_large - trials_small).
Target (issue): under 2 s of overhead per trial beyond its own work, which is that per-trial cost; the
fixed start-up is the issue's other number, the time to the first trial running.
Where the time goes: Ray start and shutdown, the driver's MLflow writes (the bridge's Tune callbacks, timed by
wrapping them), each trial's span outside its own run (child run start to end, less `time_run_s`: the trial
actor's and its client actor's start, imports, reports), the slots left idle between trials, and, measured
once on the warm Ray after the sweep, a placement group's creation and one client actor's start.

    nice -n 10 python bench/sweep_overhead.py [--seeds 2] [--large-seeds 8] [--clients 4] [--rounds 1] [--max-concurrent
    2]

Writes bench/results/sweep_overhead.{json,md}.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml
from tables import RESULTS, markdown_table

ALGORITHMS = ("fedavg", "local")
ALPHAS = (0.3, 1.0, 3.0)
TARGET_S = 2.0
BRIDGE_CALLBACKS = ("on_trial_start", "on_trial_result", "on_trial_complete", "on_trial_error")
"""The sweep's Tune callbacks that write MLflow, in the driver (they block Tune's control loop while they run)."""


def write_task(folder: Path, args: argparse.Namespace, seeds: int, name: str) -> Path:
    task = {
        "name": name,
        "dataset": "digits",
        "model": {"name": "mlp", "hidden": [16]},
        "scenario": {"partition": "dirichlet", "alpha": 0.5, "num_clients": args.clients},
        "rounds": args.rounds,
        "local_epochs": 1,
        "batch_size": 32,
        "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
        "resources": {"client_cpus": 0.5},
        "grid": {"algorithm": list(ALGORITHMS), "scenario.alpha": list(ALPHAS)},
        "seeds": list(range(seeds)),
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(task, sort_keys=False))
    return path


class Timer:
    """Sums the wall time spent in wrapped callables (the sweep driver's MLflow writes)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.first_call: dict[str, float] = {}  # epoch seconds of each callable's first call
        self.marks: dict[str, dict[str, float]] = {}

    def wrap(self, owner, name: str) -> None:
        original = getattr(owner, name)

        @functools.wraps(original)
        def timed(*a, **kw):
            self.first_call.setdefault(name, time.time())
            start = time.perf_counter()
            try:
                return original(*a, **kw)
            finally:
                self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start
                self.calls[name] = self.calls.get(name, 0) + 1

        setattr(owner, name, timed)

    def mark(self, owner, name: str, key) -> None:
        """Record `key(self_, *args)` -> epoch seconds of the first call of `owner.name` with that key."""
        original = getattr(owner, name)
        self.marks.setdefault(name, {})

        @functools.wraps(original)
        def marked(obj, *a, **kw):
            self.marks[name].setdefault(key(obj, *a), time.time())
            return original(obj, *a, **kw)

        setattr(owner, name, marked)


def serial(specs, experiment: str) -> dict:
    from fedbench.core import metrics as M
    from fedbench.runtime import run_spec
    from fedbench.tracking.mlflow_callback import MlflowCallback

    start = time.perf_counter()
    results = [run_spec(spec, [MlflowCallback(experiment=experiment)], backend="serial") for spec in specs]
    wall = time.perf_counter() - start
    own = [r.final[M.TOTAL_PREFIX + M.TIME_RUN_S] for r in results]
    return {
        "runs": len(specs),
        "finished": sum(r.status == "FINISHED" for r in results),
        "wall_s": wall,
        "sum_time_run_s": sum(own),
        "overhead_per_run_s": (wall - sum(own)) / len(specs),
        "runs_per_min": 60 * len(specs) / wall,
    }


def sweep(task_path: Path, max_concurrent: int, ray_address: str = "local") -> dict:
    """One timed sweep; `ray_address` "local" starts a 2-CPU Ray as `fedbench sweep` would, a cluster's
    address (bench/sweep_scale.py) connects to it; either way the driver's connect and disconnect are timed."""
    import ray
    from ray import tune
    from ray.tune.execution.tune_controller import TuneController

    from fedbench.config import load_task
    from fedbench.core import metrics as M
    from fedbench.tracking.paths import tracking_uri
    from fedbench.tracking.sweep_runs import SweepRuns
    from fedbench.tuning import make_plan, run_sweep
    from fedbench.tuning.mlflow_bridge import MlflowBridge

    timer = Timer()
    for name in BRIDGE_CALLBACKS:
        timer.wrap(MlflowBridge, name)
    timer.wrap(tune.Tuner, "fit")
    timer.mark(TuneController, "_schedule_trial_actor", lambda controller, trial: str(trial))  # Tune asks for its actor
    plan = make_plan(load_task(task_path))

    t0 = time.time()
    start = time.perf_counter()
    num_cpus = 2 if ray_address == "local" else None
    ray.init(
        address=ray_address, num_cpus=num_cpus, include_dashboard=False, configure_logging=False
    )  # as ensure_ray would
    ray_start = time.perf_counter() - start
    outcome = run_sweep(plan, max_concurrent=max_concurrent)
    warm = warm_ray_costs()
    before_shutdown = time.perf_counter()
    ray.shutdown()
    ray_shutdown = time.perf_counter() - before_shutdown
    wall = time.perf_counter() - start - warm["measuring_s"]  # the warm-Ray micro-measurements are not the sweep's

    runs = SweepRuns(tracking_uri(), plan.task)
    client, children = runs.client, runs.children(outcome.parent_run_id)
    requested = timer.marks["_schedule_trial_actor"]
    trials = []
    for c in (client.get_run(child.run_id) for child in children):  # the whole run: its name, end, metrics
        first_round = min(client.get_metric_history(c.info.run_id, M.TIME_ROUND_S), key=lambda m: m.step)
        trials.append(
            {
                "run": c.info.run_name,
                "status": c.info.status,
                "actor_requested_s": requested.get(c.info.run_name, t0) - t0,
                "start_s": c.info.start_time / 1000 - t0,
                "round1_logged_s": first_round.timestamp / 1000 - t0,
                "end_s": c.info.end_time / 1000 - t0,
                "time_round1_s": first_round.value,
                "time_run_s": c.data.metrics[M.TOTAL_PREFIX + M.TIME_RUN_S],
                "node": c.data.tags.get("trial.node"),
            }
        )
    trials.sort(key=lambda t: t["start_s"])
    n = len(trials)
    own = sum(t["time_run_s"] for t in trials)
    spans = [t["end_s"] - t["start_s"] for t in trials]
    outside = [s - t["time_run_s"] for s, t in zip(spans, trials, strict=True)]
    mlflow_s = sum(timer.seconds.get(k, 0.0) for k in BRIDGE_CALLBACKS)
    fit_s = timer.seconds.get("fit", 0.0)
    fit_began = timer.first_call.get("fit", t0) - t0
    # a trial's actor can start once a slot is free (an earlier trial ended) and Tune has asked for it
    ends = sorted(t["end_s"] for t in trials)
    handover = [
        t["start_s"] - max(t["actor_requested_s"], fit_began if i < max_concurrent else ends[i - max_concurrent])
        for i, t in enumerate(trials)
    ]
    return {
        "trials": n,
        "finished": sum(t["status"] == "FINISHED" for t in trials),
        "max_concurrent": max_concurrent,
        "wall_s": wall,
        "trials_per_min": 60 * n / wall,
        "first_trial_start_s": trials[0]["start_s"] if trials else None,
        "sum_time_run_s": own,
        "overhead_per_trial_s": (wall * max_concurrent - own) / n,
        "overhead_per_trial_without_ray_start_stop_s": ((wall - ray_start - ray_shutdown) * max_concurrent - own) / n,
        "breakdown_s": {
            "ray_start": ray_start,
            "ray_shutdown": ray_shutdown,
            "run_sweep outside Tuner.fit (parent run, Tuner set-up, wrap-up)": wall - ray_start - ray_shutdown - fit_s,
            "tuner_fit": fit_s,
            "driver_mlflow_writes (bridge callbacks)": mlflow_s,
            "trial_span_outside_own_run_mean": statistics.mean(outside) if outside else None,
            "trial_span_outside_own_run_max": max(outside) if outside else None,
            "slots_idle_between_trials": max_concurrent * fit_s - sum(spans),
            "slot free -> next trial's actor started, mean": statistics.mean(handover) if handover else None,
            "trial started -> its round 1 logged, mean": statistics.mean(
                t["round1_logged_s"] - t["start_s"] for t in trials
            ),
            "round 1 logged -> trial ended, mean": statistics.mean(t["end_s"] - t["round1_logged_s"] for t in trials),
            "own time_round_s of round 1, mean": statistics.mean(t["time_round1_s"] for t in trials),
            "own time_run_s, mean": own / n,
            "first_trial_start_after_fit_began": trials[0]["start_s"] - fit_began if trials else None,
        },
        "bridge_calls": timer.calls,
        "warm_ray": {k: v for k, v in warm.items() if k != "measuring_s"},
        "trial_timeline": trials,
        "parent_run_id": outcome.parent_run_id,
    }


def warm_ray_costs() -> dict:
    """On the sweep's still-running Ray: one trial-shaped placement group's creation, one client actor's start."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    from fedbench.core.runspec import ResourceSpec
    from fedbench.runtime.ray_pool import RayWorkerPool

    begin = time.perf_counter()
    pg = placement_group([{"CPU": 0.5}, {"CPU": 0.5}])
    ray.get(pg.ready(), timeout=120)
    pg_s = time.perf_counter() - begin
    remove_placement_group(pg)
    start = time.perf_counter()
    pool = RayWorkerPool(ResourceSpec(backend="ray", client_cpus=0.5, num_workers=1), 4)
    pool.placement_groups()  # returns once the actor is up (its process started, fedbench imported)
    actor_s = time.perf_counter() - start
    pool.close()
    return {
        "placement_group_ready_s": pg_s,
        "client_actor_start_s": actor_s,
        "measuring_s": time.perf_counter() - begin,
    }


def markdown(report: dict, command: str) -> str:
    s, a, large, per_trial = (
        report["serial"],
        report["sweep"],
        report["sweep_large"],
        report["overhead_per_added_trial_s"],
    )
    b = a["breakdown_s"]
    met = "met" if per_trial < TARGET_S else "MISSED"
    rows = [
        ("runs", s["runs"], a["trials"]),
        ("wall s", f"{s['wall_s']:.1f}", f"{a['wall_s']:.1f}"),
        ("runs (trials) per minute", f"{s['runs_per_min']:.1f}", f"{a['trials_per_min']:.1f}"),
        ("sum of own time_run_s", f"{s['sum_time_run_s']:.1f}", f"{a['sum_time_run_s']:.1f}"),
        (
            "overhead per run s",
            f"{s['overhead_per_run_s']:.2f}",
            f"{a['overhead_per_trial_s']:.2f} (K={a['max_concurrent']})",
        ),
        ("first run running after s", "-", f"{a['first_trial_start_s']:.1f}"),
    ]
    lines = [
        f"# Sweep scheduling overhead ({report['trials_desc']})",
        "",
        f"`{command}`",
        "",
        *markdown_table(["", "serial, back-to-back", "sweep"], rows),
        "",
        f"sweep wall / serial wall: {a['wall_s'] / s['wall_s']:.2f}. Overhead per trial (wall x K - sum of own run "
        f"times) / trials, start-up included: {a['overhead_per_trial_s']:.2f} s; without Ray's start and "
        f"shutdown: {a['overhead_per_trial_without_ray_start_stop_s']:.2f} s.",
        "",
        f"Larger sweep, {large['trials']} trials: {large['wall_s']:.1f} s wall, "
        f"{large['trials_per_min']:.1f} trials/min, "
        f"{large['overhead_per_trial_s']:.2f} s overhead per trial start-up included, first trial running after "
        f"{large['first_trial_start_s']:.1f} s.",
        "",
        f"**Overhead of each further trial** ((wall_large - wall_small) x K - (own_large - own_small)) / "
        f"({large['trials']} - {a['trials']}): **{per_trial:.2f} s** (target < {TARGET_S:.0f} s: {met}); the fixed "
        f"start-up, paid once per sweep, is about {report['fixed_startup_s']:.1f} s of wall time "
        f"(wall_small - trials_small x (own mean + per-trial overhead) / K).",
        "",
        f"Where the {a['trials']}-trial sweep's time goes (s):",
        "",
        *markdown_table(
            ["part", "s"],
            [
                *((k, f"{v:.2f}") for k, v in b.items() if v is not None),
                ("warm Ray: placement group (2 bundles) ready", f"{a['warm_ray']['placement_group_ready_s']:.2f}"),
                ("warm Ray: one client actor up", f"{a['warm_ray']['client_actor_start_s']:.2f}"),
            ],
        ),
        "",
        report.get("notes", ""),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=2, help="seeds per configuration (6 configurations)")
    parser.add_argument("--large-seeds", type=int, default=8, help="seeds of the second, larger sweep")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--max-concurrent", type=int, default=2, help="trials at once (K)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary results folder")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="fedbench_sweep_overhead_"))
    os.environ["FEDBENCH_RESULTS"] = str(folder / "results")
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    try:
        start = time.perf_counter()
        import ray.tune  # noqa: F401  what `fedbench sweep` imports before any trial: not scheduling, timed apart
        from mlflow.tracking import MlflowClient

        import fedbench.tuning  # noqa: F401
        from fedbench.config import load_task
        from fedbench.data import load_dataset
        from fedbench.tracking.paths import tracking_uri

        imports_s = time.perf_counter() - start
        start = time.perf_counter()
        MlflowClient(tracking_uri()).search_experiments()  # a fresh store's migrations, once, in the driver
        store_s = time.perf_counter() - start
        load_dataset("digits")  # warm the serial runs' first load like the later ones

        task_path = write_task(folder, args, args.seeds, "bench_sweep_overhead")
        large_path = write_task(folder, args, args.large_seeds, "bench_sweep_overhead_large")
        specs = load_task(task_path).expand()
        desc = (
            f"{len(specs)} trials: digits, mlp [16], {args.clients} clients, {args.rounds} round(s), "
            f"client_cpus 0.5, K={args.max_concurrent}"
        )
        print(
            f"{desc}; results in {folder}; imports {imports_s:.1f} s, MLflow store migration {store_s:.1f} s "
            "(both before and apart from what is measured)",
            flush=True,
        )
        load = {"before": os.getloadavg()}
        serial_report = serial(specs, "bench_sweep_overhead_serial")
        load["after serial"] = os.getloadavg()
        print(f"serial: {serial_report['wall_s']:.1f} s for {len(specs)} runs", flush=True)
        sweep_report = sweep(task_path, args.max_concurrent)
        load["after sweep"] = os.getloadavg()
        print(f"sweep: {sweep_report['wall_s']:.1f} s for {sweep_report['trials']} trials", flush=True)
        large_report = sweep(large_path, args.max_concurrent)
        load["after large sweep"] = os.getloadavg()
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)

    b = sweep_report["breakdown_s"]
    first = sweep_report["first_trial_start_s"]
    small, large, k = sweep_report, large_report, args.max_concurrent
    per_trial = ((large["wall_s"] - small["wall_s"]) * k - (large["sum_time_run_s"] - small["sum_time_run_s"])) / (
        large["trials"] - small["trials"]
    )
    fixed = small["wall_s"] - (small["sum_time_run_s"] + per_trial * small["trials"]) / k
    report = {
        "args": vars(args),
        "trials_desc": desc,
        "imports_s": imports_s,
        "store_migration_s": store_s,
        "load_average_1_5_15_min": load,
        "serial": serial_report,
        "sweep": sweep_report,
        "sweep_large": large_report,
        "overhead_per_added_trial_s": per_trial,
        "fixed_startup_s": fixed,
        "notes": "Load average (1, 5, 15 min) of the 2-core host, shared with other users: "
        + "; ".join(f"{k} {', '.join(f'{x:.1f}' for x in v)}" for k, v in load.items()),
    }
    command = " ".join(["nice -n 10 .venv/bin/python bench/sweep_overhead.py", *sys.argv[1:]])
    s, a = serial_report, sweep_report
    print(f"\n{'':34s}{'serial':>12s}{'sweep':>12s}")
    print(f"{'wall s':34s}{s['wall_s']:12.1f}{a['wall_s']:12.1f}")
    print(f"{'runs per minute':34s}{s['runs_per_min']:12.1f}{a['trials_per_min']:12.1f}")
    print(f"{'sum of own time_run_s':34s}{s['sum_time_run_s']:12.1f}{a['sum_time_run_s']:12.1f}")
    print(f"{'overhead per run s':34s}{s['overhead_per_run_s']:12.2f}{a['overhead_per_trial_s']:12.2f}")
    print(f"{'first trial running after s':34s}{'-':>12s}{first:12.1f}")
    print(
        f"sweep/serial wall {a['wall_s'] / s['wall_s']:.2f}; overhead per trial, start-up included "
        f"{a['overhead_per_trial_s']:.2f} s, {a['overhead_per_trial_without_ray_start_stop_s']:.2f} s without Ray "
        f"start/shutdown; {large['trials']} trials: {large['overhead_per_trial_s']:.2f} s"
    )
    print(
        f"overhead of each further trial {per_trial:.2f} s (target < {TARGET_S} s: "
        f"{'met' if per_trial < TARGET_S else 'MISSED'}); fixed start-up {fixed:.1f} s"
    )
    for key, value in {**b, **{f"warm Ray: {k}": v for k, v in a["warm_ray"].items()}}.items():
        if value is not None:
            print(f"  {key:52s}{value:8.2f} s")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sweep_overhead.json").write_text(json.dumps(report, indent=1, default=str))
    (RESULTS / "sweep_overhead.md").write_text(markdown(report, command))
    print(f"written: {RESULTS / 'sweep_overhead.json'}, {RESULTS / 'sweep_overhead.md'}")


if __name__ == "__main__":
    main()

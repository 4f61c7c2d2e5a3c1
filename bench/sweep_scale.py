"""Does a sweep's per-trial overhead stay flat from 12 to hundreds of trials on a two-node Ray cluster?

Starts its own two-node cluster on this machine (`ray.cluster_utils.Cluster`: a head and a worker node with
`--cpus-per-node` CPUs each, the worker also declaring 2 simulated GPUs; RAY_AUTH_MODE=disabled; shut down at
the end), then, in one run and one temporary FEDBENCH_RESULTS folder, sweeps the tiny grid of
bench/sweep_overhead.py twice on it: 12 trials (2 seeds), then `--trials` (default 500, rounded up to whole
seeds of its 6 configurations). Each sweep is `bench/sweep_overhead.sweep` (the same timing and the same
definition), connecting to the cluster instead of starting a local Ray:

    overhead per trial = (sweep wall time x K - sum of the trials' own total.time_run_s) / trials

Target (issue 12): the large sweep's overhead per trial <= 1.5x the 12-trial figure. Also reported: the
overhead of each further trial between the two sweeps (as bench/sweep_overhead.py does it), the 12-trial
figure of bench/results/sweep_overhead.md (one local node) for comparison, and the node each trial ran on
(its `trial.node` MLflow tag): both nodes must appear.

    nice -n 10 python bench/sweep_scale.py [--trials 500] [--cpus-per-node 1] [--max-concurrent 2]

Writes bench/results/sweep_scale.{json,md}.
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from sweep_overhead import ALGORITHMS, ALPHAS, sweep, write_task
from tables import RESULTS, markdown_table

TARGET_RATIO = 1.5
SMALL_SEEDS = 2
CONFIGURATIONS = len(ALGORITHMS) * len(ALPHAS)


def start_cluster(cpus_per_node: int):
    """A head and a worker node on this machine, on free ports; the worker declares 2 simulated GPUs."""
    from ray.cluster_utils import Cluster

    node = {"num_cpus": cpus_per_node, "object_store_memory": 200 * 2**20, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=node)
    cluster.add_node(**node, num_gpus=2)
    cluster.wait_for_nodes()
    return cluster


def reference_overhead() -> float | None:
    """The 12-trial, one-node figure of bench/sweep_overhead.py, when its results are there."""
    path = RESULTS / "sweep_overhead.json"
    return json.loads(path.read_text())["sweep"]["overhead_per_trial_s"] if path.is_file() else None


def summary(report: dict) -> dict:
    nodes = collections.Counter(t["node"] for t in report["trial_timeline"])
    return {
        k: report[k]
        for k in (
            "trials",
            "finished",
            "wall_s",
            "trials_per_min",
            "first_trial_start_s",
            "sum_time_run_s",
            "overhead_per_trial_s",
            "overhead_per_trial_without_ray_start_stop_s",
        )
    } | {"trials_per_node": dict(nodes), "breakdown_s": report["breakdown_s"]}


def markdown(report: dict, command: str) -> str:
    small, large = report["small"], report["large"]
    ratio, per_added, ref = (
        report["ratio"],
        report["overhead_per_added_trial_s"],
        report["reference_12_trials_one_node_s"],
    )
    met = "met" if ratio <= TARGET_RATIO else "MISSED"
    rows = [
        ("trials (finished)", f"{small['trials']} ({small['finished']})", f"{large['trials']} ({large['finished']})"),
        ("wall s", f"{small['wall_s']:.1f}", f"{large['wall_s']:.1f}"),
        ("trials per minute", f"{small['trials_per_min']:.1f}", f"{large['trials_per_min']:.1f}"),
        ("sum of own time_run_s", f"{small['sum_time_run_s']:.1f}", f"{large['sum_time_run_s']:.1f}"),
        ("**overhead per trial s**", f"{small['overhead_per_trial_s']:.2f}", f"{large['overhead_per_trial_s']:.2f}"),
        (
            "same, without the driver's connect/disconnect",
            f"{small['overhead_per_trial_without_ray_start_stop_s']:.2f}",
            f"{large['overhead_per_trial_without_ray_start_stop_s']:.2f}",
        ),
        ("first trial running after s", f"{small['first_trial_start_s']:.1f}", f"{large['first_trial_start_s']:.1f}"),
        (
            "trials per node",
            ", ".join(map(str, small["trials_per_node"].values())),
            ", ".join(map(str, large["trials_per_node"].values())),
        ),
    ]
    lines = [
        f"# Sweep overhead from 12 to {large['trials']} trials on a two-node local cluster",
        "",
        f"`{command}`",
        "",
        report["desc"],
        "",
        *markdown_table(["", f"{small['trials']} trials", f"{large['trials']} trials"], rows),
        "",
        f"**{large['trials']}-trial overhead per trial / 12-trial: {ratio:.2f}** (target <= {TARGET_RATIO}: {met}). "
        f"Overhead of each further trial ((wall_large - wall_small) x K - (own_large - own_small)) / "
        f"({large['trials']} - {small['trials']}): {per_added:.2f} s.",
        ""
        if ref is None
        else f"\nThe 12-trial figure of bench/results/sweep_overhead.md (one local node, Ray started "
        f"inside the sweep's wall time): {ref:.2f} s per trial.",
        "",
        f"Both nodes ran trials: {'yes' if report['both_nodes_used'] else 'NO'} (node ids: "
        + ", ".join(f"`{n[:12]}`" for n in report["nodes"])
        + ").",
        "",
        f"Whole run (cluster start, both sweeps, teardown): {report['run_wall_s']:.0f} s.",
        "",
        "Load average (1, 5, 15 min) of the 2-core host, shared with other users: "
        + "; ".join(f"{k} {', '.join(f'{x:.1f}' for x in v)}" for k, v in report["load_average_1_5_15_min"].items()),
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=500, help="trials of the large sweep (rounded up to whole seeds)")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--cpus-per-node", type=int, default=1, help="CPUs each of the two nodes declares")
    parser.add_argument("--max-concurrent", type=int, default=2, help="trials at once (K)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary results folder")
    args = parser.parse_args()

    run_start = time.perf_counter()
    folder = Path(tempfile.mkdtemp(prefix="fedbench_sweep_scale_"))
    os.environ["FEDBENCH_RESULTS"] = str(folder / "results")
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    os.environ["RAY_AUTH_MODE"] = "disabled"
    cluster = None
    import ray

    try:
        from mlflow.tracking import MlflowClient

        from fedbench.tracking.paths import tracking_uri

        MlflowClient(tracking_uri()).search_experiments()  # a fresh store's migrations, once, before any timing
        small_path = write_task(folder, args, SMALL_SEEDS, "bench_sweep_scale_small")
        large_path = write_task(folder, args, math.ceil(args.trials / CONFIGURATIONS), "bench_sweep_scale_large")
        cluster = start_cluster(args.cpus_per_node)
        desc = (
            f"Tiny trials as bench/sweep_overhead.py: digits, mlp [16], {args.clients} clients, {args.rounds} "
            f"round(s), client_cpus 0.5, K={args.max_concurrent}; two nodes of {args.cpus_per_node} CPU(s) each "
            f"(the worker node also 2 simulated GPUs), `ray.cluster_utils.Cluster` on one 2-core host."
        )
        print(f"{desc}\nresults in {folder}", flush=True)
        load = {"before": os.getloadavg()}
        small = sweep(small_path, args.max_concurrent, ray_address=cluster.address)
        load["after small sweep"] = os.getloadavg()
        print(f"small sweep: {small['wall_s']:.1f} s for {small['trials']} trials", flush=True)
        large = sweep(large_path, args.max_concurrent, ray_address=cluster.address)
        load["after large sweep"] = os.getloadavg()
        print(f"large sweep: {large['wall_s']:.1f} s for {large['trials']} trials", flush=True)
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)

    k = args.max_concurrent
    per_added = ((large["wall_s"] - small["wall_s"]) * k - (large["sum_time_run_s"] - small["sum_time_run_s"])) / (
        large["trials"] - small["trials"]
    )
    nodes = sorted({t["node"] for t in small["trial_timeline"] + large["trial_timeline"]} - {None})
    report = {
        "args": vars(args),
        "desc": desc,
        "small": summary(small),
        "large": summary(large),
        "ratio": large["overhead_per_trial_s"] / small["overhead_per_trial_s"],
        "overhead_per_added_trial_s": per_added,
        "reference_12_trials_one_node_s": reference_overhead(),
        "nodes": nodes,
        "both_nodes_used": len(nodes) == 2,
        "run_wall_s": time.perf_counter() - run_start,
        "load_average_1_5_15_min": load,
    }
    command = " ".join(["nice -n 10 .venv/bin/python bench/sweep_scale.py", *sys.argv[1:]])
    text = markdown(report, command)
    print("\n" + text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "sweep_scale.json").write_text(json.dumps(report, indent=1, default=str))
    (RESULTS / "sweep_scale.md").write_text(text)
    print(f"written: {RESULTS / 'sweep_scale.json'}, {RESULTS / 'sweep_scale.md'}")


if __name__ == "__main__":
    main()

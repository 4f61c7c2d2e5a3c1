"""The batched backend's vectorised pass against the per-client path on CPU (issue 46): one round's training of
every client, like for like, in one process.

Workload: bench/tasks/cli_overhead.yaml's federation (real MNIST from FEDBENCH_DATA, Dirichlet(0.5) label skew,
LeNet-5, FedAvg, batch 64, SGD with momentum) at each `--clients` count and `--epochs` local epochs. The same
ClientWorker runs the round's FIT jobs of every client from the same global model twice: one after another
(`ClientWorker.jobs`, what the serial and ray backends run) and in one vectorised pass (`ClientWorker.fit_together`,
what the batched backend runs), both on one torch thread (`JOB_THREADS`), alternating, best of `--repeat`. The
pass's trained weights are compared with the per-client path's (`WEIGHT_TOLERANCE`), and the process's peak RSS is
read after each; the per-client path runs once more on 2 threads, for the spread another summation order gives.

    FEDBENCH_DATA=/path/to/data python bench/batched_cpu.py [--clients 20,100] [--epochs 1] [--repeat 2]

Writes batched_cpu.json and batched_cpu.md in --out (bench/results).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml
from tables import RESULTS, markdown_table

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
TASK = BENCH / "tasks" / "cli_overhead.yaml"


def loaded_worker(clients: int, epochs: int):
    """A ClientWorker loaded with the workload at `clients` clients, and the round-1 FIT arguments of all of them."""
    from fedbench.config.task import task_from_dict
    from fedbench.core.types import Payload
    from fedbench.data import load_dataset
    from fedbench.runtime.jobs import FIT
    from fedbench.runtime.worker import ClientWorker
    from fedbench.scenarios import build_scenario

    task = yaml.safe_load(TASK.read_text())
    task["scenario"]["num_clients"] = clients
    task.update(local_epochs=epochs, rounds=1, resources={"backend": "serial"})
    spec = task_from_dict(task, default_name="batched_cpu").expand()[0]
    dataset = load_dataset(spec.dataset.name, spec.dataset.data_root)
    worker = ClientWorker()
    worker.load(dataset, build_scenario(dataset, spec.scenario, spec.seed, spec.rounds), spec)
    assert worker.vectorises_fits()
    ids = list(range(clients))
    return worker, (FIT, 1, ids, [0] * clients, Payload(worker.algorithm.initial_weights()), *[None] * clients)


def differences(per_client: list, other: list) -> list[float]:
    """Each client's relative difference of trained weights between two paths (`weight_difference`)."""
    from fedbench.training.functional import weight_difference

    return [weight_difference(a.uplink.weights, b.uplink.weights) for a, b in zip(per_client[0], other[0], strict=True)]


def max_difference(per_client: list, other: list) -> float:
    return max(differences(per_client, other))


def below(values: list[float], bound: float = 1e-6) -> str:
    return f"{sum(v < bound for v in values)} of {len(values)}"


def measure(clients: int, epochs: int, repeat: int) -> dict:
    worker, args = loaded_worker(clients, epochs)
    times: dict[str, list[float]] = {"per_client": [], "together": []}
    outputs = {}
    for _ in range(repeat):
        for path, call in (("per_client", worker.jobs), ("together", worker.fit_together)):
            began = time.perf_counter()
            outputs[path] = call(*args)
            times[path].append(time.perf_counter() - began)
    worker.threads = 2  # the per-client path's own spread: the same jobs summed in another order
    on_two_threads = worker.jobs(*args)
    best = {path: min(values) for path, values in times.items()}
    steps = sum(r.metrics["train_steps"] for r in outputs["per_client"][0])
    return {
        "clients": clients,
        "epochs": epochs,
        "steps_per_round": steps,
        "per_client_s": best["per_client"],
        "together_s": best["together"],
        "ratio": best["together"] / best["per_client"],
        "all_s": times,
        "max_weight_difference": max_difference(outputs["per_client"], outputs["together"]),
        "differences": differences(outputs["per_client"], outputs["together"]),
        "two_threads_max_difference": max_difference(outputs["per_client"], on_two_threads),
        "two_threads_differences": differences(outputs["per_client"], on_two_threads),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def report(data: dict) -> list[str]:
    lines = [
        "# The batched backend on CPU",
        "",
        f"`{data['command']}` at {data['commit']}, {data['date']}; {data['machine']}.",
        "",
        "One round's training of every client (LeNet-5 on MNIST, Dirichlet(0.5), batch 64, SGD with momentum), from "
        "the same global model, on one torch thread: one client after another (the serial and ray backends' path) "
        f"against one vectorised pass (the batched backend's), best of {data['repeat']}. Weight differences are "
        "||a - b|| / ||a|| per client after the round; beside them, how far the per-client path ends from itself on 2 "
        "threads instead of 1 (another summation order, as the pass's). On CPU a pass is expected to "
        "be slower (the issue's probe: 3.1x on one thread): `backend: auto` picks the batched backend only where "
        "clients train on GPUs.",
        "",
    ]
    rows = [
        [
            r["clients"],
            r["epochs"],
            int(r["steps_per_round"]),
            f"{r['per_client_s']:.2f}",
            f"{r['together_s']:.2f}",
            f"{r['ratio']:.2f}",
            f"{r['max_weight_difference']:.1e} ({below(r['differences'])} under 1e-6)",
            f"{r['two_threads_max_difference']:.1e} ({below(r['two_threads_differences'])} under 1e-6)",
        ]
        for r in data["rows"]
    ]
    lines += markdown_table(
        [
            "clients",
            "local epochs",
            "client steps",
            "one by one, s",
            "one pass, s",
            "pass / one by one",
            "one pass vs one by one: largest relative weight difference",
            "one by one on 2 threads vs 1: the same",
        ],
        rows,
    )
    return lines + ["", f"Peak RSS of the process: {max(r['peak_rss_mib'] for r in data['rows']):.0f} MiB.", ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--clients", default="20,100")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    import torch

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    data = {
        "command": "python bench/batched_cpu.py " + " ".join(sys.argv[1:]),
        "commit": commit.stdout.strip() or "unknown",
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores, {platform.python_version()}, torch {torch.__version__}",
        "repeat": args.repeat,
        "rows": [],
    }
    for clients in (int(n) for n in args.clients.split(",")):
        data["rows"].append(measure(clients, args.epochs, args.repeat))
        print({k: v for k, v in data["rows"][-1].items() if k != "all_s"}, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "batched_cpu.json").write_text(json.dumps(data, indent=1))
    (args.out / "batched_cpu.md").write_text("\n".join(report(data)))
    print("\n".join(report(data)))


if __name__ == "__main__":
    main()

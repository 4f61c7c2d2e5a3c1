"""Runtime overhead: fedbench's serial and Ray backends against a plain PyTorch loop, in one run.

FedAvg, LeNet-5, MNIST (the real files under FEDBENCH_DATA when present, otherwise synthetic data of
MNIST's shape, and it says which), 20 clients with Dirichlet(0.5) labels, 2 local epochs, batch 64,
5 rounds. It times
  (a) a plain PyTorch loop over the same clients and batches, in this process,
  (b) fedbench on the serial backend,
  (c) fedbench on the ray backend with 2 workers (Ray's start-up included in the whole-run time),
and prints b/a and c/a for the whole run and for the steady-state round (median of rounds 2..N), plus the
peak RSS of the process tree during each. These machines' speed drifts by tens of percent from minute to
minute (CPU steal), so the variants run interleaved, `--repeats` times, and the best of each is compared. Targets on a
2-core machine: b/a <= 1.10, c/a <= 0.70 (whole run)
and <= 0.55 (steady round).

    python bench/runtime_overhead.py [--rounds 5] [--clients 20] [--repeats 2] [--plain-threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
from process_tree import TreePeak

from fedbench.algorithms.base import ModelBuilder
from fedbench.config import parse_run
from fedbench.core import metrics as M
from fedbench.core.errors import DataMissingError
from fedbench.core.runspec import RunSpec
from fedbench.core.types import derive_seed
from fedbench.data import load_dataset
from fedbench.runtime import Federation
from fedbench.scenarios import build_scenario
from fedbench.tracking.paths import results_dir


def choose_dataset() -> tuple[dict, str]:
    try:
        load_dataset("mnist")
        return {"name": "mnist"}, "real MNIST (FEDBENCH_DATA)"
    except DataMissingError:
        return {"name": "synthetic_images"}, "synthetic data of MNIST's shape (real MNIST not found: set FEDBENCH_DATA)"


def make_spec(dataset: dict, backend: str, rounds: int, clients: int) -> RunSpec:
    return parse_run(
        {
            "task": "bench_runtime_overhead",
            "dataset": dataset,
            "model": "lenet5",
            "algorithm": "fedavg",
            "scenario": {"partition": "dirichlet", "alpha": 0.5, "num_clients": clients},
            "rounds": rounds,
            "local_epochs": 2,
            "batch_size": 64,
            "resources": {"backend": backend, "client_cpus": 1, "num_workers": 2},
        }
    )


def plain_pytorch(spec: RunSpec, threads: int) -> tuple[float, list[float]]:
    """The same federation written as one plain loop: the cost floor a framework is measured against."""
    start = time.perf_counter()
    torch.set_num_threads(threads)
    dataset = load_dataset(spec.dataset.name)
    scenario = build_scenario(dataset, spec.scenario, spec.seed)
    model = ModelBuilder("lenet5", dataset.input_shape, dataset.num_classes).initial(spec.seed)
    global_state = {k: v.clone() for k, v in model.state_dict().items()}
    x_all, y_all = torch.from_numpy(dataset.x.copy()), torch.from_numpy(dataset.y.copy())
    round_times = []
    for rnd in range(1, spec.rounds + 1):
        round_start = time.perf_counter()
        states, counts = [], []
        for cid in range(spec.scenario.num_clients):
            view = scenario.view(rnd, cid)
            x, y = x_all[view.train], y_all[view.train]
            model.load_state_dict(global_state)
            model.train()
            opt = torch.optim.SGD(model.parameters(), lr=spec.optimizer.lr, momentum=spec.optimizer.momentum)
            gen = torch.Generator().manual_seed(derive_seed(spec.seed, rnd, cid))
            for _ in range(spec.local_epochs):
                order = torch.randperm(len(y), generator=gen)
                for s in range(0, len(y), spec.batch_size):
                    idx = order[s : s + spec.batch_size]
                    loss = F.cross_entropy(model(x[idx].float() / 255.0), y[idx])
                    opt.zero_grad()
                    loss.backward()
                    opt.step()
            states.append({k: v.detach().clone() for k, v in model.state_dict().items()})
            counts.append(len(y))
        total = sum(counts)
        global_state = {k: sum(s[k] * (n / total) for s, n in zip(states, counts, strict=True)) for k in global_state}
        model.load_state_dict(global_state)
        model.eval()
        with torch.no_grad():  # evaluate on every client's local test split, as fedbench does each round
            for cid in range(spec.scenario.num_clients):
                view = scenario.view(rnd, cid)
                for s in range(0, len(view.test), 256):
                    idx = view.test[s : s + 256]
                    model(x_all[idx].float() / 255.0).argmax(1).eq(y_all[idx]).sum()
        round_times.append(time.perf_counter() - round_start)
    return time.perf_counter() - start, round_times


def fedbench_run(spec: RunSpec) -> tuple[float, list[float]]:
    start = time.perf_counter()
    if spec.resources.backend == "ray":
        from fedbench.runtime.ray_pool import ensure_ray

        ensure_ray(num_cpus=2)
    result = Federation(spec).run()
    total = time.perf_counter() - start
    if result.status != "FINISHED":
        raise RuntimeError(result.reason)
    return total, [r[M.TIME_ROUND_S] for r in result.history]


def steady(round_times: list[float]) -> float:
    return statistics.median(round_times[1:]) if len(round_times) > 1 else round_times[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repetitions (a, b, c, a, b, c...)")
    parser.add_argument(
        "--plain-threads",
        type=int,
        default=1,
        help="torch threads of the plain loop (1 was the faster plain loop on these 2-core machines)",
    )
    args = parser.parse_args()
    dataset, which = choose_dataset()
    print(
        f"data: {which}; FedAvg, LeNet-5, {args.clients} clients Dirichlet(0.5), 2 local epochs, batch 64, "
        f"{args.rounds} rounds; {args.repeats} interleaved repeats, best of each reported"
    )
    load_dataset(dataset["name"])  # reading the files is not what is measured: done once, up front
    variants = {
        "a": (
            f"plain PyTorch, {args.plain_threads} thread(s)",
            lambda: plain_pytorch(make_spec(dataset, "serial", args.rounds, args.clients), args.plain_threads),
        ),
        "b": ("fedbench serial", lambda: fedbench_run(make_spec(dataset, "serial", args.rounds, args.clients))),
        "c": ("fedbench ray, 2 workers", lambda: fedbench_run(make_spec(dataset, "ray", args.rounds, args.clients))),
    }
    default_threads = torch.get_num_threads()
    runs: dict[str, list[dict]] = {key: [] for key in variants}
    for repeat in range(args.repeats):
        for key, (label, run) in variants.items():
            with TreePeak() as rss:
                total, rounds = run()
            torch.set_num_threads(default_threads)
            _shutdown_ray()
            runs[key].append(
                {"total_s": total, "steady_round_s": steady(rounds), "rounds_s": rounds, "peak_rss_gb": rss.peak / 1e9}
            )
            print(
                f"{key} {label:28s} #{repeat + 1}: whole {total:7.2f} s  steady round {steady(rounds):6.2f} s  "
                f"rounds {[round(r, 1) for r in rounds]}  peak RSS {rss.peak / 1e9:4.2f} GB",
                flush=True,
            )
    best = {
        key: {
            "total_s": min(r["total_s"] for r in rs),
            "steady_round_s": min(r["steady_round_s"] for r in rs),
            "peak_rss_gb": max(r["peak_rss_gb"] for r in rs),
        }
        for key, rs in runs.items()
    }
    ratios = {
        "b/a whole": best["b"]["total_s"] / best["a"]["total_s"],
        "b/a steady": best["b"]["steady_round_s"] / best["a"]["steady_round_s"],
        "c/a whole": best["c"]["total_s"] / best["a"]["total_s"],
        "c/a steady": best["c"]["steady_round_s"] / best["a"]["steady_round_s"],
    }
    targets = {"b/a whole": 1.10, "b/a steady": 1.10, "c/a whole": 0.70, "c/a steady": 0.55}
    for key, value in ratios.items():
        print(
            f"{key:11s} {value:5.2f}   (target <= {targets[key]:.2f}: {'met' if value <= targets[key] else 'NOT met'})"
        )
    for key, b in best.items():
        print(f"peak RSS of the process tree, {variants[key][0]}: {b['peak_rss_gb']:.2f} GB")
    out = results_dir() / "bench_runtime_overhead.json"
    out.write_text(json.dumps({"data": which, "runs": runs, "best": best, "ratios": ratios}, indent=2))
    print(f"written to {out}")


def _shutdown_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


if __name__ == "__main__":
    main()

"""Many tiny clients: client updates per second of fedbench's Ray backend against a plain PyTorch loop.

1,000 clients of 48 training samples each (real MNIST, FEDBENCH_DATA: `chunks` of 60 samples from MNIST's training
split pooled twice, 80% for training), LeNet-5, FedAvg at full participation, 1 local epoch of batch 64 (one SGD step
per client), evaluation only in the last round. Each round's client updates per second (clients / round wall time)
over the steady rounds (all but the first and the last, which also evaluates), medians over `--repeats`, for:

- `ray-single`: fedbench's whole round loop, ray backend, 2 client workers x 1 thread, one client per call
  (`JOB_SECONDS_TARGET = 0`: the dispatch before batching);
- `ray-batched`: the same with tiny clients batched per call (the default);
- `plain-1`: a plain in-process loop doing the same updates (same model, same clients' rows, same epochs and
  batch, a fresh SGD optimizer per client, the weighted average) on 1 thread;
- `plain-2`: that loop split over 2 processes of 1 thread each (the "same cores" baseline of the two workers).

The plain loops' processes run at the niceness Ray gives its workers (15), so that background load takes the
same share from both.
Target: ray-batched >= 0.8x plain-2 (the same 2 cores). Every configuration runs in its own process, interleaved
within each repeat. For the ray runs, orchestration per job = (round wall - client compute / 2) / clients.

    FEDBENCH_DATA=/path/to/data python bench/many_clients.py [--repeats 3] [--rounds 4] [--note "..."]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tables import RESULTS, markdown_table

CLIENTS, SAMPLES, WORKERS, BATCH = 1000, 60, 2, 64
MODES = ("ray-single", "ray-batched", "plain-1", "plain-2")
TARGET = 0.8
RAY_WORKER_NICENESS = 15
"""Ray starts its worker processes at niceness 15: the plain loops run at it too, so that under other load
both get the same share of the cores (on a quiet machine it changes nothing)."""


def make_spec(rounds: int):
    from fedbench.config import parse_run

    return parse_run(
        {
            "task": "bench_many_clients",
            "dataset": {"name": "mnist"},
            "model": "lenet5",
            "algorithm": "fedavg",
            "scenario": {"partition": "chunks", "samples_per_client": SAMPLES, "copies": 2, "num_clients": CLIENTS},
            "rounds": rounds,
            "eval_every": rounds,
            "local_epochs": 1,
            "batch_size": BATCH,
            "resources": {"backend": "ray", "client_cpus": 1, "num_workers": WORKERS},
        }
    )


def run_ray(rounds: int, batched: bool) -> dict:
    from fedbench.runtime import Federation, ray_pool

    if not batched:
        ray_pool.JOB_SECONDS_TARGET = 0.0  # one client per call, as before batching
    ray_pool.ensure_ray(address="local", num_cpus=WORKERS)
    result = Federation(make_spec(rounds)).run()
    if result.status != "FINISHED":
        raise SystemExit(f"run failed: {result.reason}")
    return {"rounds": [{"wall_s": r["time_round_s"], "compute_s": r["time_client_compute_s"]} for r in result.history]}


def client_tensors(rounds: int, clients: list[int]):
    """Each client's training rows as the workers see them (standardised float tensors), and the model builder."""
    import torch

    from fedbench.algorithms import make_algorithm
    from fedbench.data import load_dataset
    from fedbench.scenarios import build_scenario
    from fedbench.training import materialize

    spec = make_spec(rounds)
    dataset = load_dataset("mnist")
    scenario = build_scenario(dataset, spec.scenario, spec.seed, spec.rounds)
    algorithm = make_algorithm(spec, scenario.input_shape, dataset.num_classes)
    data = {}
    for cid in clients:
        client = materialize(dataset, scenario.view(1, cid), scenario.input_shape)
        x, y = client.train_batch(torch.arange(client.num_train), "cpu")
        data[cid] = (x.float().contiguous(), y)
    return data, algorithm.builder, spec.optimizer


def plain_updates(model, data: dict, weights: dict, optimizer_spec, seed: int) -> tuple[dict, int]:
    """The clients' local updates from `weights`, summed weighted by their sample counts (what FedAvg averages)."""
    import torch
    import torch.nn.functional as F

    total, count = None, 0
    generator = torch.Generator().manual_seed(seed)
    for x, y in data.values():
        model.load_state_dict(weights)
        optimizer = torch.optim.SGD(model.parameters(), lr=optimizer_spec.lr, momentum=optimizer_spec.momentum)
        order = torch.randperm(len(y), generator=generator)
        for start in range(0, len(y), BATCH):
            rows = order[start : start + BATCH]
            optimizer.zero_grad()
            F.cross_entropy(model(x[rows]), y[rows]).backward()
            optimizer.step()
        with torch.no_grad():
            update = {k: v.detach() * len(y) for k, v in model.state_dict().items()}
        total = update if total is None else {k: total[k] + update[k] for k in total}
        count += len(y)
    return total, count


def plain_process(rounds: int, clients: list[int], inbox, outbox) -> None:
    """One process of `plain-2`: its clients' updates each round, from the weights it is sent."""
    import torch

    os.nice(RAY_WORKER_NICENESS - os.nice(0))
    torch.set_num_threads(1)
    data, builder, optimizer_spec = client_tensors(rounds, clients)
    model = builder()
    outbox.put("ready")
    while (message := inbox.get()) is not None:
        weights, seed = message
        total, count = plain_updates(model, data, weights, optimizer_spec, seed)
        outbox.put(({k: v.numpy() for k, v in total.items()}, count))


def run_plain(rounds: int, processes: int) -> dict:
    """`plain-1` (in this process) or `plain-N` (N processes, each with its share of the clients)."""
    import multiprocessing

    import torch

    torch.set_num_threads(1)
    builder = model_builder(rounds)
    weights = {k: v.clone() for k, v in builder().state_dict().items()}
    ids = list(range(CLIENTS))
    if processes == 1:
        os.nice(RAY_WORKER_NICENESS - os.nice(0))
        data, _, optimizer_spec = client_tensors(rounds, ids)
        model = builder()

        def updates(weights: dict, round: int) -> tuple[dict, int]:
            return plain_updates(model, data, weights, optimizer_spec, round)
    else:
        context = multiprocessing.get_context("spawn")
        pipes = [(context.Queue(), context.Queue()) for _ in range(processes)]
        procs = [
            context.Process(target=plain_process, args=(rounds, ids[i::processes], *pipes[i])) for i in range(processes)
        ]
        for proc in procs:
            proc.start()
        for _, outbox in pipes:
            assert outbox.get() == "ready"

        def updates(weights: dict, round: int) -> tuple[dict, int]:
            for inbox, _ in pipes:
                inbox.put((weights, round))
            parts = [outbox.get() for _, outbox in pipes]
            return {k: sum(torch.from_numpy(p[0][k]) for p in parts) for k in parts[0][0]}, sum(p[1] for p in parts)

    history = []
    for round in range(1, rounds + 1):
        start = time.perf_counter()
        total, count = updates(weights, round)
        weights = {k: (v / count).to(weights[k].dtype) for k, v in total.items()}
        history.append({"wall_s": time.perf_counter() - start})
    if processes > 1:
        for inbox, _ in pipes:
            inbox.put(None)
        for proc in procs:
            proc.join()
    return {"rounds": history}


def model_builder(rounds: int):
    """fedbench's LeNet-5 builder for MNIST's 1x28x28 images and 10 classes."""
    from fedbench.algorithms import make_algorithm

    return make_algorithm(make_spec(rounds), (1, 28, 28), 10).builder


def run_child(mode: str, rounds: int, out: Path) -> None:
    start = time.perf_counter()
    if mode.startswith("ray"):
        result = run_ray(rounds, batched=mode == "ray-batched")
    else:
        result = run_plain(rounds, processes=int(mode.split("-")[1]))
    result["total_s"] = time.perf_counter() - start
    out.write_text(json.dumps(result))


def measure(mode: str, rounds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        code = subprocess.call([sys.executable, __file__, "--child", mode, "--rounds", str(rounds), "--out", str(out)])
        if code != 0:
            raise SystemExit(f"{mode}: exited with {code}")
        run = json.loads(out.read_text())
    steady = run["rounds"][1:-1]
    measured = {
        "mode": mode,
        "rounds": run["rounds"],
        "total_s": run["total_s"],
        "updates_per_s": statistics.median(CLIENTS / r["wall_s"] for r in steady),
    }
    if mode.startswith("ray"):
        measured["orchestration_ms_per_job"] = statistics.median(
            1000 * (r["wall_s"] - r["compute_s"] / WORKERS) / CLIENTS for r in steady
        )
        measured["compute_ms_per_job"] = statistics.median(1000 * r["compute_s"] / CLIENTS for r in steady)
    return measured


def report(runs: list[dict], note: str) -> tuple[dict, list[str]]:
    medians = {}
    for mode in MODES:
        mine = [r for r in runs if r["mode"] == mode]
        if mine:
            keys = [k for k in ("updates_per_s", "orchestration_ms_per_job", "compute_ms_per_job") if k in mine[0]]
            medians[mode] = {key: statistics.median(r[key] for r in mine) for key in keys}
            medians[mode]["range"] = [min(r["updates_per_s"] for r in mine), max(r["updates_per_s"] for r in mine)]
    rows = [
        [
            mode,
            f"{m['updates_per_s']:.1f} ({m['range'][0]:.1f}-{m['range'][1]:.1f})",
            f"{m['compute_ms_per_job']:.1f}" if "compute_ms_per_job" in m else "-",
            f"{m['orchestration_ms_per_job']:.2f}" if "orchestration_ms_per_job" in m else "-",
        ]
        for mode, m in medians.items()
    ]
    repeats = max(sum(r["mode"] == mode for r in runs) for mode in medians)
    header = ["configuration", "client updates / s", "compute / job (ms)", "orchestration / job (ms)"]
    lines = [
        "# Many tiny clients: client updates per second",
        "",
        note,
        "",
        f"{CLIENTS} clients x 48 MNIST training samples, LeNet-5, FedAvg, 1 epoch of batch {BATCH}, "
        f"{WORKERS} Ray workers x 1 thread; steady rounds; medians of {repeats} interleaved repeats (range).",
        "",
        *markdown_table(header, rows),
        "",
    ]
    ratios = {}
    for mode in ("ray-single", "ray-batched"):
        for base in ("plain-1", "plain-2"):
            if mode in medians and base in medians:
                ratios[f"{mode} / {base}"] = medians[mode]["updates_per_s"] / medians[base]["updates_per_s"]
    lines += [f"- {name}: {value:.2f}" for name, value in ratios.items()]
    if "ray-batched / plain-2" in ratios:
        met = ratios["ray-batched / plain-2"] >= TARGET
        lines.append(f"- target ray-batched >= {TARGET}x plain-2 (the same 2 cores): {'met' if met else 'NOT met'}")
    return {"note": note, "medians": medians, "ratios": ratios, "runs": runs}, lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--rounds", type=int, default=4, help="rounds per run; the steady ones are all but the first and the last"
    )
    parser.add_argument("--only", default=",".join(MODES), help="configurations to run, comma-separated")
    parser.add_argument("--note", default="", help="a line for the report (e.g. the machine's load)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be >= 3: the first and the last round are not steady")
    if args.child:
        return run_child(args.child, args.rounds, args.out)
    runs = []
    for _ in range(args.repeats):
        for mode in args.only.split(","):
            runs.append(measure(mode, args.rounds))
            print(json.dumps({k: v for k, v in runs[-1].items() if k != "rounds"}), flush=True)
        saved, lines = report(runs, args.note)  # after every repeat: a run cut short keeps what it measured
        (RESULTS / "many_clients.json").write_text(json.dumps(saved, indent=1))
        (RESULTS / "many_clients.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()

"""The GPU benchmark (issue 28): client workers sharing one GPU with and without CUDA MPS, and a sweep's trial start-up.

One command on a lent GPU machine, a few minutes:
1. The steady round of bench/tasks/cli_overhead.yaml's workload (real MNIST from FEDBENCH_DATA, 20 Dirichlet(0.5)
   clients, LeNet-5, FedAvg, 2 local epochs, batch 64, SGD, every client evaluated every round; `--rounds` rounds,
   steady = median `time_round_s` of rounds 2..N) for 1, 8 and 16 client workers on the GPU (`client_gpus` 1/n),
   first without MPS, then with an MPS control daemon this script starts (and stops at the end), beside a
   hand-written sequential loop in one process with all data on the GPU (the same partition, model code, batches
   and optimizer; bench/handwritten_fedavg.py's LeNet-5).
2. The batched backend (issue 46): one worker on the whole GPU training every client of a round in one vectorised
   pass, at each `--batched` client count, beside the same run with clients one after another (one worker, the ray
   backend), and both on CPU at `--clients`; GPU memory per client, accuracy against the per-client run.
3. An 8-trial sweep (fedavg and fedprox x 4 seeds, 3 rounds x 1 epoch, 2 workers x 0.125 GPU per trial, 4 trials
   at once) under MPS, with Tune's actor reuse (fedbench's default: a trial's process and its client workers serve
   the next trial) and without it (each trial a new process with new workers); every trial's start-up split into
   phases from the FEDBENCH_TIMELINE marks of all processes (trial process start, dataset and scenario, worker
   process start and imports, CUDA context and warm-up, rounds).
The runs and sweeps share one local Ray in this process (its start is not in any number); the hand-written loop is a
subprocess, so that no CUDA context of this process outlives it. Without CUDA the script runs on a simulated GPU
(Ray's GPU resource, clients training on CPU) and skips MPS: a check of the script, not a measurement.
Targets (issue 28): 16 workers x 0.0625 under MPS at most 0.5 s a steady round; the sweep at most 25 s. Issue 46:
a batched 20-client round at most 0.25 s, a 100-client one at most 0.4 s, accuracy within 0.01 of the per-client run.

    FEDBENCH_DATA=/path/to/data python bench/gpu.py [--out bench/results] [--rounds 4] [--workers 1,8,16]
        [--batched 20,100]

Writes gpu.json and gpu.md in --out.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import yaml
from tables import RESULTS, markdown_table

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
sys.path.insert(0, str(REPO))
TASK = BENCH / "tasks" / "cli_overhead.yaml"
MPS_ENV = {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/nvidia-mps", "CUDA_MPS_LOG_DIRECTORY": "/tmp/nvidia-mps-log"}
TARGET_ROUND_S, TARGET_SWEEP_S = 0.5, 25.0
TARGET_BATCHED_S = {20: 0.25, 100: 0.4}
"""Issue 46: a steady round of the batched backend on one H200, by client count."""
TRIAL_PHASES = {
    "run_started": "imports, client workers asked for",
    "dataset_loaded": "dataset loaded",
    "scenario_built": "scenario built",
    "workers_loaded": "dataset and scenario shipped, workers started and warm",
}
"""A trial's marks up to its first round (fedbench.core.timeline), each closing the phase named here."""


def task_dict(args, **changes) -> dict:
    task = yaml.safe_load(TASK.read_text())
    task["scenario"]["num_clients"] = args.clients
    task.update(rounds=args.rounds, local_epochs=args.epochs, seeds=[0])
    task.update(changes)
    return task


def spec_for(args, workers: int, backend: str = "ray", clients: int | None = None, gpus: bool = True):
    """The workload on `workers` workers sharing the GPU (`gpus`; else on CPU) at `clients` clients (default
    `--clients`)."""
    from fedbench.config.task import task_from_dict

    resources = {
        "backend": backend,
        "client_cpus": args.client_cpus,
        "client_gpus": 1 / workers if gpus else 0,
        "num_workers": workers,
    }
    task = task_dict(args, resources=resources)
    task["scenario"]["num_clients"] = clients or args.clients
    return task_from_dict(task, default_name="gpu_bench").expand()[0]


# ---- CUDA MPS ----


def gpu_apps() -> list[str]:
    """PIDs with a CUDA context on the GPU (nvidia-smi), empty without nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return []
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"], capture_output=True, text=True
    ).stdout
    return [line.strip() for line in out.splitlines() if line.strip()]


def wait_gpu_idle(seconds: float = 20.0) -> None:
    """Until the last run's workers have let go of the GPU: MPS serves contexts created after it starts."""
    deadline = time.time() + seconds
    while gpu_apps() and time.time() < deadline:
        time.sleep(0.5)


def start_mps() -> str:
    """Start the MPS control daemon (the README's command); '' when it listens, else why not."""
    from fedbench.runtime.gpu_sharing import mps_daemon_listening

    binary = shutil.which("nvidia-cuda-mps-control")
    if binary is None:
        return "nvidia-cuda-mps-control is not on PATH"
    for folder in MPS_ENV.values():
        Path(folder).mkdir(parents=True, exist_ok=True)
    subprocess.run([binary, "-d"], env={**os.environ, **MPS_ENV}, check=True)
    deadline = time.time() + 10
    while not mps_daemon_listening(MPS_ENV):
        if time.time() > deadline:
            return "the MPS control daemon did not listen within 10 s"
        time.sleep(0.2)
    return ""


def stop_mps() -> None:
    binary = shutil.which("nvidia-cuda-mps-control")
    if binary:
        subprocess.run([binary], input="quit\n", text=True, env={**os.environ, **MPS_ENV}, timeout=30)


# ---- 1. steady rounds ----


def one_run(args, workers: int, backend: str = "ray", clients: int | None = None, gpus: bool = True) -> dict:
    """One fedbench run with `workers` workers sharing the GPU (on CPU where not `gpus`), in this process's Ray."""
    from fedbench.core import metrics as M
    from fedbench.runtime.session import run_specs

    spec = spec_for(args, workers, backend, clients, gpus)
    began = time.time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        [result] = run_specs([spec], lambda i, s: [])
    ended = time.time()
    rounds = [record[M.TIME_ROUND_S] for record in result.history]
    peaks = [record[M.GPU_PEAK_MB] for record in result.history if M.GPU_PEAK_MB in record]
    return {
        "workers": workers,
        "backend": backend,
        "clients": spec.scenario.num_clients,
        "on_gpu": gpus,
        "status": result.status,
        "reason": result.reason,
        "t_start": began,
        "t_end": ended,
        "round_s": rounds,
        "steady_round_s": statistics.median(rounds[1:]) if len(rounds) > 1 else None,
        "startup_s": result.history[0].get(M.TIME_STARTUP_S) if result.history else None,
        "run_wall_s": ended - began,
        "accuracy": result.final.get(M.FINAL_PREFIX + M.ACC_LOCAL_MEAN),
        "gpu_peak_mb": max(peaks) if peaks else None,
        "clients_device": result.tags.get("clients.device"),
        "workers_mps": sorted({v for k, v in result.tags.items() if k.endswith(".mps")}),
        "warnings": [str(w.message) for w in caught if "MPS" in str(w.message)],
    }


def handwritten_partition(args, folder: Path) -> Path:
    """The workload's federation (each client's train and test rows into MNIST train + test) as an .npz."""
    from fedbench.data import load_dataset
    from fedbench.scenarios import build_scenario

    spec = spec_for(args, 1)
    dataset = load_dataset(spec.dataset.name, spec.dataset.data_root)
    scenario = build_scenario(dataset, spec.scenario, spec.seed, spec.rounds)
    parts = {}
    for c in range(scenario.num_clients):
        view = scenario.view(1, c)
        parts[f"train_{c}"], parts[f"test_{c}"] = view.train, view.test
    path = folder / "partition.npz"
    np.savez(path, **parts)
    return path


def mnist_arrays(root: Path) -> tuple[np.ndarray, np.ndarray]:
    """MNIST train then test images and labels from torchvision's .gz layout, as fedbench numbers its rows."""

    def read(name: str, offset: int) -> np.ndarray:
        with gzip.open(root / "MNIST" / "raw" / name) as file:
            return np.frombuffer(file.read(), dtype=np.uint8, offset=offset)

    images = np.concatenate([read("train-images-idx3-ubyte.gz", 16), read("t10k-images-idx3-ubyte.gz", 16)])
    labels = np.concatenate([read("train-labels-idx1-ubyte.gz", 8), read("t10k-labels-idx1-ubyte.gz", 8)])
    return images.reshape(-1, 28, 28), labels.astype(np.int64)


def handwritten_loop(partition: Path, rounds: int, epochs: int, batch: int, lr: float, momentum: float) -> dict:
    """Sequential FedAvg in one process with every tensor on the device: what one writes by hand on a GPU."""
    import torch
    import torch.nn.functional as F
    from handwritten_fedavg import MEAN, STD, lenet5

    device = "cuda" if torch.cuda.is_available() else "cpu"
    images, labels = mnist_arrays(Path(os.environ["FEDBENCH_DATA"]))
    x_all = torch.from_numpy(images).to(device).float().div_(255).sub_(MEAN).div_(STD).unsqueeze(1)
    y_all = torch.from_numpy(labels).to(device)
    parts = np.load(partition)
    clients = sorted(int(k.split("_")[1]) for k in parts if k.startswith("train_"))
    train = {c: torch.from_numpy(parts[f"train_{c}"]).to(device) for c in clients}
    test = {c: torch.from_numpy(parts[f"test_{c}"]).to(device) for c in clients}
    torch.manual_seed(0)
    model = lenet5().to(device)
    global_weights = {k: v.clone() for k, v in model.state_dict().items()}
    round_s, accuracy = [], None
    for _ in range(1, rounds + 1):
        began = time.perf_counter()
        total, summed = 0, {k: torch.zeros_like(v, dtype=torch.float32) for k, v in global_weights.items()}
        for c in clients:
            model.load_state_dict(global_weights)
            optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
            model.train()
            for _ in range(epochs):
                order = train[c][torch.randperm(len(train[c]), device=device)]
                for start in range(0, len(order), batch):
                    rows = order[start : start + batch]
                    optimizer.zero_grad()
                    F.cross_entropy(model(x_all[rows]), y_all[rows]).backward()
                    optimizer.step()
            for k, v in model.state_dict().items():
                summed[k] += v.float() * len(train[c])
            total += len(train[c])
        global_weights = {k: (summed[k] / total).to(v.dtype) for k, v in global_weights.items()}
        model.load_state_dict(global_weights)
        model.eval()
        with torch.no_grad():
            correct = [float((model(x_all[test[c]]).argmax(1) == y_all[test[c]]).float().mean()) for c in clients]
        accuracy = float(np.mean(correct))
        if device == "cuda":
            torch.cuda.synchronize()
        round_s.append(time.perf_counter() - began)
    return {
        "round_s": round_s,
        "steady_round_s": statistics.median(round_s[1:]),
        "accuracy": accuracy,
        "device": device,
    }


def handwritten(args, folder: Path) -> dict:
    partition = handwritten_partition(args, folder)
    out = subprocess.run(
        [
            sys.executable,
            __file__,
            "--handwritten",
            str(partition),
            "--rounds",
            str(args.rounds),
            "--epochs",
            str(args.epochs),
        ],
        capture_output=True,
        text=True,
    )
    if out.returncode:
        return {"error": out.stderr[-2000:]}
    return json.loads(out.stdout.strip().splitlines()[-1])


# ---- what one new process costs ----

PROCESS_PROBES = {
    "python + import ray": "import ray",
    "python + import torch": "import torch",
    "python + import a client worker (fedbench.runtime.worker)": "import fedbench.runtime.worker",
    "python + import a trial (fedbench.tuning.trial)": "import fedbench.tuning.trial",
    "python + torch + CUDA context + first conv": "import torch; x = torch.zeros(2, 1, 28, 28, device='cuda'); "
    "torch.nn.Conv2d(1, 6, 5).cuda()(x).sum().item()",
}
"""Each timed as a fresh process from launch to exit, one after another on the idle machine: what each new trial
process and client worker pays before its first job, apart from Ray's own dispatch."""


def process_costs(cuda: bool) -> dict[str, float]:
    costs = {}
    for label, code in PROCESS_PROBES.items():
        if "cuda" in code and not cuda:
            continue
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])},
        )
        costs[label] = time.perf_counter() - began if done.returncode == 0 else None
    return costs


# ---- 2. the sweep ----


def one_sweep(args, folder: Path, reuse: bool, timeline: Path) -> dict:
    """The 8-trial sweep, with Tune's actor reuse as fedbench sets it, or with it turned off."""
    from ray import tune

    from fedbench.config.task import task_from_dict
    from fedbench.tuning import make_plan, run_sweep

    seeds = list(range(args.sweep_trials // 2))
    task = task_dict(
        args,
        rounds=3,
        local_epochs=1,
        seeds=seeds,
        name=f"gpu_sweep_{'reuse' if reuse else 'fresh'}",
        resources={"backend": "ray", "client_cpus": args.client_cpus, "client_gpus": 0.125, "num_workers": 2},
        grid={"algorithm": ["fedavg", "fedprox"]},
    )
    task.pop("algorithm")
    plan = make_plan(task_from_dict(task, default_name=task["name"]))
    os.environ["FEDBENCH_RESULTS"] = str(folder / f"results_{'reuse' if reuse else 'fresh'}")
    original = tune.TuneConfig
    if not reuse:
        tune.TuneConfig = lambda *a, **k: original(*a, **{**k, "reuse_actors": False})
    began = time.time()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            outcome = run_sweep(plan, max_concurrent=args.sweep_concurrent)
    finally:
        tune.TuneConfig = original
    ended = time.time()
    marks = [m for m in map(json.loads, timeline.read_text().splitlines()) if began <= m["t"] <= ended]
    (args.out / f"gpu_sweep_{'reuse' if reuse else 'fresh'}_timeline.jsonl").write_text(
        "\n".join(json.dumps({**m, "t": round(m["t"] - began, 4)}) for m in marks if m["phase"] != "job")
    )
    return {
        "reuse": reuse,
        "wall_s": ended - began,
        "trials": len(plan.specs),
        "finished": sum(r.status == "FINISHED" for r in outcome.results),
        "warnings": [str(w.message) for w in caught if "MPS" in str(w.message)],
        **startup_phases(marks, began),
    }


def startup_phases(marks: list[dict], began: float) -> dict:
    """Each trial's span split by the marks of its trial process and its workers' processes."""
    trials, seen_trial_pids, seen_worker_pids = [], set(), set()
    by_pid: dict[int, list[dict]] = {}
    for m in sorted(marks, key=lambda m: m["t"]):
        by_pid.setdefault(m["pid"], []).append(m)
    for pid, own in by_pid.items():
        for i, m in enumerate(own):
            if m["phase"] != "trial_started":
                continue
            after = own[i + 1 :]
            loaded = next((x["t"] for x in after if x["phase"] == "workers_loaded"), None)
            end = next((x["t"] for x in after if x["phase"] == "run_end"), None)
            new = pid not in seen_trial_pids
            seen_trial_pids.add(pid)
            phases = {}
            previous = m["t"]
            for x in after:  # the trial's own phases, each from the mark before it (Federation's marks)
                if x["phase"] in TRIAL_PHASES:
                    phases[x["phase"]], previous = x["t"] - previous, x["t"]
                if x["phase"] == "workers_loaded":
                    break
            trials.append(
                {
                    "new_process": new,
                    "process_start_to_trial_s": m["process_age"] if new else 0.0,
                    "trial_to_workers_loaded_s": (loaded - m["t"]) if loaded else None,
                    "rounds_s": (end - loaded) if loaded and end else None,
                    "start": m["t"],
                    "end": end,
                    **{f"phase.{k}": v for k, v in phases.items()},
                }
            )
    worker_loads = []
    for pid, own in by_pid.items():
        for i, m in enumerate(own):
            if m["phase"] != "worker_loading":
                continue
            warm = next((x["t"] for x in own[i + 1 :] if x["phase"] == "worker_warm"), None)
            new = pid not in seen_worker_pids
            seen_worker_pids.add(pid)
            worker_loads.append(
                {
                    "new_process": new,
                    "process_start_to_load_s": m["process_age"] if new else 0.0,
                    "load_and_warm_up_s": (warm - m["t"]) if warm else None,
                }
            )

    def median(rows, key, only_new=None):
        values = [r[key] for r in rows if r[key] is not None and (only_new is None or r["new_process"] == only_new)]
        return statistics.median(values) if values else None

    starts = sorted(t["start"] for t in trials)
    return {
        "trial_processes": len(seen_trial_pids),
        "worker_processes": len(seen_worker_pids),
        "first_trial_started_s": starts[0] - began if starts else None,
        "rounds_s_sum": sum(t["rounds_s"] or 0.0 for t in trials),
        "trial_process_start_s": median(trials, "process_start_to_trial_s", True),
        "trial_setup_s_new_process": median(trials, "trial_to_workers_loaded_s", True),
        "trial_setup_s_reused_process": median(trials, "trial_to_workers_loaded_s", False),
        "worker_process_start_s": median(worker_loads, "process_start_to_load_s", True),
        "worker_load_warm_s_new": median(worker_loads, "load_and_warm_up_s", True),
        "worker_load_warm_s_reused": median(worker_loads, "load_and_warm_up_s", False),
        "trial_rounds_s": median(trials, "rounds_s"),
        "trials_detail": trials,
        **{f"new_trial.{phase}_s": median(trials, f"phase.{phase}", True) for phase in TRIAL_PHASES},
        "first_worker_loading_s": min((m["t"] for m in marks if m["phase"] == "worker_loading"), default=began) - began,
    }


# ---- report ----


def cell(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def report(data: dict) -> list[str]:
    hand = data["handwritten"].get("steady_round_s")
    lines = [
        f"# GPU benchmark ({data['device']})",
        "",
        f"`{data['command']}` at {data['commit']}, {data['date']}; {data['machine']}.",
        "",
        "## Steady round, clients sharing one GPU",
        "",
        f"Workload: bench/tasks/cli_overhead.yaml ({data['clients']} clients, LeNet-5, FedAvg, {data['epochs']} local "
        f"epochs), {data['rounds']} rounds; steady = median round of rounds 2..N. Target: 16 workers under MPS "
        f"<= {TARGET_ROUND_S} s.",
        "",
    ]
    rows = [
        [
            "hand-written loop, one process, data on the GPU",
            "-",
            cell(hand),
            "1.00",
            cell(data["handwritten"].get("accuracy"), 3),
            "-",
            "-",
        ]
    ]
    for run in data["runs"]:
        if run.get("batched_section"):
            continue  # the batched rows and their per-client references have a table of their own
        ratio = run["steady_round_s"] / hand if hand and run["steady_round_s"] else None
        rows.append(
            [
                f"fedbench, {run['workers']} worker{'s' * (run['workers'] > 1)} x {1 / run['workers']:.4g} GPU",
                "yes" if run["mps"] else "no",
                cell(run["steady_round_s"]),
                cell(ratio),
                cell(run["accuracy"], 3),
                cell(run["gpu_peak_mb"], 0),
                run["clients_device"] or run["reason"],
            ]
        )
    lines += markdown_table(
        [
            "configuration",
            "MPS",
            "steady round s",
            "vs hand-written",
            "accuracy",
            "peak GPU MiB / worker",
            "clients.device tag",
        ],
        rows,
    )
    lines += batched_report(data, hand)
    warned = sorted({w for run in data["runs"] for w in run["warnings"]})
    lines += ["", "Shared-GPU warning printed: " + ("; ".join(f"`{w}`" for w in warned) if warned else "none"), ""]
    lines += sweep_report(data)
    costs = data.get("process_costs", {})
    if costs:
        labels = list(next(iter(costs.values())))
        lines += [
            "",
            "## What one new process costs",
            "",
            "Each a fresh Python process from launch to exit, one at a time on the idle machine.",
            "",
        ]
        lines += markdown_table(
            ["process", *(f"s, {name}" for name in costs)],
            [[label, *(cell(c.get(label)) for c in costs.values())] for label in labels],
        )
    return lines + [""]


def sweep_report(data: dict) -> list[str]:
    """The sweep's start-up phases, with and without Tune's actor reuse; nothing where no sweep ran."""
    if not data["sweeps"]:
        return []
    lines: list[str] = []
    lines += [
        "## The 8-trial sweep",
        "",
        f"fedavg and fedprox x {data['sweep_trials'] // 2} seeds, 3 rounds x 1 epoch, 2 workers x 0.125 GPU per "
        f"trial, {data['sweep_concurrent']} trials at once, MPS {'on' if data['mps_started'] else 'off'}, on a warm "
        f"Ray. Target: <= {TARGET_SWEEP_S} s. Phases are medians over trials (new: the first trial of a process).",
        "",
    ]
    keys = [
        ("wall_s", "sweep wall s"),
        ("finished", "trials finished"),
        ("first_trial_started_s", "sweep start to first trial s"),
        ("trial_processes", "trial processes"),
        ("worker_processes", "worker processes"),
        ("trial_process_start_s", "trial process start to trial s (new)"),
        ("trial_setup_s_new_process", "trial to workers loaded s (new process)"),
        ("trial_setup_s_reused_process", "trial to workers loaded s (reused process)"),
        *((f"new_trial.{phase}_s", f"  of which: {words} s (new)") for phase, words in TRIAL_PHASES.items()),
        ("first_worker_loading_s", "sweep start to first worker's load s"),
        ("worker_process_start_s", "worker process start to load s"),
        ("worker_load_warm_s_new", "worker load and warm-up s (new, CUDA context)"),
        ("worker_load_warm_s_reused", "worker load and warm-up s (reused)"),
        ("trial_rounds_s", "a trial's rounds s"),
        ("rounds_s_sum", "all trials' rounds s"),
    ]
    sweeps = data["sweeps"]
    lines += markdown_table(
        ["", *("with worker reuse" if s["reuse"] else "without reuse" for s in sweeps)],
        [[label, *(cell(s.get(key)) for s in sweeps)] for key, label in keys],
    )
    return lines


def batched_report(data: dict, hand: float | None) -> list[str]:
    """The batched backend's rows: each beside the per-client run (1 worker, the ray backend) at its client count."""
    batched = [run for run in data["runs"] if run.get("backend") == "batched"]
    if not batched:
        return []
    lines = [
        "",
        "## Many clients in one pass (the batched backend)",
        "",
        "One worker holding the whole GPU trains every client of a round in one vectorised pass (`resources.backend: "
        "batched`, docs/backends.md), beside the same run on the ray backend (one worker, clients one after another) "
        f"at the same client count. Targets: a steady 20-client round <= {TARGET_BATCHED_S[20]} s, a 100-client round "
        f"<= {TARGET_BATCHED_S[100]} s, accuracy within 0.01 of the per-client run.",
        "",
    ]
    rows = []
    for run in batched:
        reference = next(
            (
                r
                for r in data["runs"]
                if r.get("batched_section") and r["backend"] == "ray" and r["clients"] == run["clients"]
                and r["on_gpu"] == run["on_gpu"]
            ),
            None,
        )  # fmt: skip
        per_client = reference["steady_round_s"] if reference else None
        gap = (
            abs(run["accuracy"] - reference["accuracy"])
            if reference and run["accuracy"] is not None and reference["accuracy"] is not None
            else None
        )
        rows.append(
            [
                run["clients"],
                "GPU" if run["on_gpu"] else "CPU",
                cell(run["steady_round_s"]),
                cell(per_client),
                cell(per_client / run["steady_round_s"] if per_client and run["steady_round_s"] else None),
                cell(hand / run["steady_round_s"] if hand and run["steady_round_s"] and run["on_gpu"] else None),
                cell(run["accuracy"], 3),
                cell(gap, 4),
                cell(run["gpu_peak_mb"], 0),
                cell(run["gpu_peak_mb"] / run["clients"] if run["gpu_peak_mb"] else None, 1),
                run["status"] if run["status"] != "FINISHED" else "",
            ]
        )
    return lines + markdown_table(
        [
            "clients",
            "device",
            "steady round s, one pass",
            "s, one by one (1 worker)",
            "speed-up",
            "vs hand-written loop",
            "accuracy",
            "accuracy gap to one by one",
            "peak GPU MiB",
            "MiB per client",
            "",
        ],
        rows,
    )


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--workers", default="1,8,16")
    parser.add_argument("--client-cpus", type=float, default=1.0)
    parser.add_argument("--batched", default="20,100", help="client counts of the batched rows ('' for none)")
    parser.add_argument("--sweep-trials", type=int, default=8, help="0: no sweep")
    parser.add_argument("--sweep-concurrent", type=int, default=4)
    parser.add_argument("--handwritten", type=Path, help=argparse.SUPPRESS)  # the subprocess of the hand-written loop
    args = parser.parse_args()
    if args.handwritten:
        print(json.dumps(handwritten_loop(args.handwritten, args.rounds, args.epochs, 64, 0.01, 0.9)))
        return

    import ray
    import torch

    work = Path(tempfile.mkdtemp(prefix="fedbench-gpu-"))
    timeline = work / "timeline.jsonl"
    os.environ["FEDBENCH_TIMELINE"] = str(timeline)  # before Ray starts: its workers inherit it
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local Ray of this script only
    os.environ["FEDBENCH_RESULTS"] = str(work / "results")
    cuda = torch.cuda.is_available()
    data = {
        "device": torch.cuda.get_device_name(0) if cuda else "no CUDA: simulated GPU, clients on CPU",
        "command": "python bench/gpu.py " + " ".join(sys.argv[1:]),
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{os.cpu_count()} cores, {platform.python_version()}, torch {torch.__version__}",
        "rounds": args.rounds,
        "epochs": args.epochs,
        "clients": args.clients,
        "sweep_trials": args.sweep_trials,
        "sweep_concurrent": args.sweep_concurrent,
        "runs": [],
        "sweeps": [],
        "mps_started": False,
    }
    began = time.time()

    def save() -> None:  # after every step: a run cut short by its time limit still leaves what it measured
        data["total_s"] = time.time() - began
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gpu.json").write_text(json.dumps(data, indent=1))
        (args.out / "gpu.md").write_text("\n".join(report(data)))

    data["process_costs"] = {"no MPS": process_costs(cuda)}
    data["handwritten"] = handwritten(args, work)
    print("hand-written:", data["handwritten"], flush=True)
    save()
    ray.init(address="local", num_gpus=None if cuda else 1, include_dashboard=False, configure_logging=False)
    workers = [int(n) for n in args.workers.split(",")]
    data["mps_started"] = False
    try:
        for clients in [int(n) for n in args.batched.split(",") if n]:  # before MPS: one process on the GPU
            for backend in ("batched", "ray"):
                run = {**one_run(args, 1, backend, clients), "mps": False, "batched_section": True}
                data["runs"].append(run)
                print({k: v for k, v in run.items() if k not in ("round_s",)}, flush=True)
                save()
        if args.batched:  # the row on CPU: the batched pass against clients one by one, on one CPU worker each
            for backend in ("batched", "ray"):
                data["runs"].append({**one_run(args, 1, backend, gpus=False), "mps": False, "batched_section": True})
                save()
        for mps in (False, True):
            if mps:
                if not cuda:
                    break
                wait_gpu_idle()
                why_not = start_mps()
                data["mps_error"] = why_not
                if why_not:
                    print("MPS:", why_not, flush=True)
                    break
                data["mps_started"] = True
                data["process_costs"]["MPS"] = process_costs(cuda)
            for n in workers:
                run = {**one_run(args, n), "mps": mps}
                data["runs"].append(run)
                print({k: v for k, v in run.items() if k not in ("round_s",)}, flush=True)
                save()
        from fedbench.tracking.store_template import template

        # the migrated MLflow store every sweep's fresh store copies, made before timing (as by any earlier run)
        template()
        for reuse in (True, False) if args.sweep_trials else ():
            sweep = one_sweep(args, work, reuse, timeline)
            data["sweeps"].append(sweep)
            print({k: v for k, v in sweep.items() if k != "trials_detail"}, flush=True)
            save()
    finally:
        ray.shutdown()
        if data["mps_started"]:
            stop_mps()
    save()
    print("\n".join(report(data)))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

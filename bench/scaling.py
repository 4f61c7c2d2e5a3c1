"""Scaling with clients: does a round cost what its sampled clients cost, in time and in memory?

FedAvg, LeNet-5, real MNIST (FEDBENCH_DATA), the ray backend with 2 client workers (1 CPU each), 3 rounds,
1 local epoch, batch 64. Fixed total data: the clients share 10,000 samples (`chunks` of 10,000 / K, 80% for
training, 20% for the local test split) for K = 10, 100, 1,000 at full participation; the fourth configuration
registers 10,000 clients of 100 samples each (MNIST's training split pooled 17 times, `copies`) and samples 1%
a round, so each round trains the same 100 clients' worth of data as K = 100.

Each configuration runs in its own subprocess (its own Ray); this process samples the PSS of that subprocess
and all its descendants (GCS, raylet and object store, workers) every 0.2 s. Per round it reports wall time,
summed client compute, orchestration = wall - compute / workers, orchestration per client job, bytes moved
(the byte meter's four channels) and the tree's peak PSS over the whole run. Targets: peak PSS at 1,000
clients <= 1.2x that at 10; orchestration <= 2 ms per client job at 1,000 clients; 10,000 clients at 1%
within 1.2x of 100 clients at full participation (steady rounds' wall time, and peak PSS).

    FEDBENCH_DATA=/path/to/data python bench/scaling.py [--only 10,100] [--eval-clients all|sampled] [--tag before]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from process_tree import TreePeak
from tables import RESULTS, markdown_table

WORKERS = 2
TOTAL = 10_000
CONFIGS = {  # clients -> (client_fraction, samples per client, copies of the pool)
    10: (1.0, TOTAL // 10, 1),
    100: (1.0, TOTAL // 100, 1),
    1000: (1.0, TOTAL // 1000, 1),
    10000: (0.01, 100, 17),
}
STORE = RESULTS / "scaling.json"
"""Result sets by tag: a run of some client counts replaces those counts in its tag and keeps the others."""
CHANNELS = ("comm_up_bytes", "comm_down_bytes", "comm_eval_down_bytes", "comm_eval_up_bytes")


def make_spec(clients: int, eval_clients: str):
    from fedbench.config import parse_run

    fraction, chunk, copies = CONFIGS[clients]
    run = {
        "task": "bench_scaling",
        "dataset": {"name": "mnist"},
        "model": "lenet5",
        "algorithm": {"name": "fedavg", "client_fraction": fraction},
        "scenario": {"partition": "chunks", "samples_per_client": chunk, "copies": copies, "num_clients": clients},
        "rounds": 3,
        "local_epochs": 1,
        "batch_size": 64,
        "resources": {"backend": "ray", "client_cpus": 1, "num_workers": WORKERS},
    }
    if eval_clients != "all":
        run["eval_clients"] = eval_clients
    return parse_run(run)


def run_one(clients: int, eval_clients: str, out: Path, profile: Path | None = None) -> None:
    """The child: one run, its history written to `out` (and the driver's cProfile, by own time, to `profile`)."""
    from fedbench.data import load_dataset
    from fedbench.runtime import Federation
    from fedbench.runtime.ray_pool import ensure_ray

    spec = make_spec(clients, eval_clients)
    start = time.perf_counter()
    load_dataset("mnist")
    ensure_ray(address="local", num_cpus=WORKERS)  # never a cluster another process left on this host
    profiler = cProfile.Profile() if profile else None
    result = Federation(spec).run() if profiler is None else profiler.runcall(Federation(spec).run)
    if profiler is not None:
        stats = io.StringIO()
        pstats.Stats(profiler, stream=stats).sort_stats("tottime").print_stats(25)
        profile.write_text(stats.getvalue())
    if result.status != "FINISHED":
        raise SystemExit(f"run failed: {result.reason}")
    out.write_text(json.dumps({"history": result.history, "total_s": time.perf_counter() - start}))


def measure(clients: int, eval_clients: str, profile: Path | None = None) -> dict:
    """Run one configuration in a subprocess, sampling its tree's PSS."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "history.json"
        cmd = [sys.executable, __file__, "--child", str(clients), "--eval-clients", eval_clients, "--out", str(out)]
        cmd += ["--profile", str(profile)] if profile else []
        child = subprocess.Popen(cmd)
        with TreePeak(child.pid, measure="pss") as tree:
            code = child.wait()
        if code != 0:
            raise SystemExit(f"{clients} clients: the run exited with {code}")
        run = json.loads(out.read_text())
    fraction = CONFIGS[clients][0]
    sampled = max(1, int(fraction * clients + 0.5))
    evaluated = clients if eval_clients == "all" else sampled
    rounds = []
    for record in run["history"]:
        wall, compute = record["time_round_s"], record["time_client_compute_s"]
        jobs = sampled + evaluated
        orchestration = wall - compute / WORKERS
        rounds.append(
            {
                "round": int(record["round"]),
                "wall_s": wall,
                "compute_s": compute,
                "jobs": jobs,
                "orchestration_s": orchestration,
                "orchestration_ms_per_job": 1000 * orchestration / jobs,
                "bytes": sum(record[c] for c in CHANNELS),
                "startup_s": record["time_startup_s"],
            }
        )
    return {
        "clients": clients,
        "fraction": fraction,
        "eval_clients": eval_clients,
        "rounds": rounds,
        "peak_pss_gb": tree.peak / 1e9,
        "total_s": run["total_s"],
        "peak_pss_by_process_mb": {name: round(size / 1e6) for name, size in sorted(tree.peak_parts.items())},
    }


def steady(result: dict, key: str) -> float:
    """Median over the rounds before the last (the last also runs the final evaluation)."""
    return statistics.median(r[key] for r in result["rounds"][:-1])


def report(results: list[dict], tag: str) -> list[str]:
    rows = []
    for res in results:
        for r in res["rounds"]:
            rows.append(
                [
                    res["clients"],
                    res["fraction"],
                    res["eval_clients"],
                    r["round"],
                    r["jobs"],
                    f"{r['wall_s']:.2f}",
                    f"{r['compute_s']:.2f}",
                    f"{r['orchestration_s']:.2f}",
                    f"{r['orchestration_ms_per_job']:.2f}",
                    f"{r['bytes'] / 1e6:.1f}",
                    f"{res['peak_pss_gb']:.2f}",
                ]
            )
    lines = [
        f"### {tag}",
        "",
        *markdown_table(
            [
                "clients",
                "fraction",
                "evaluated",
                "round",
                "client jobs",
                "wall (s)",
                "client compute (s)",
                "orchestration (s)",
                "orchestration / job (ms)",
                "MB moved",
                "tree peak PSS (GB)",
            ],
            rows,
        ),
        "",
    ]
    by = {r["clients"]: r for r in results}
    if 10 in by and 1000 in by:
        ratio = by[1000]["peak_pss_gb"] / by[10]["peak_pss_gb"]
        lines.append(
            f"- peak PSS 1,000 / 10 clients: {ratio:.2f} (target <= 1.2: {'met' if ratio <= 1.2 else 'NOT met'})"
        )
    if 1000 in by:
        per_job = steady(by[1000], "orchestration_ms_per_job")
        lines.append(
            f"- orchestration per client job at 1,000 clients (steady rounds): {per_job:.2f} ms "
            f"(target <= 2: {'met' if per_job <= 2 else 'NOT met'})"
        )
    if 100 in by and 10000 in by:
        wall = steady(by[10000], "wall_s") / steady(by[100], "wall_s")
        pss = by[10000]["peak_pss_gb"] / by[100]["peak_pss_gb"]
        lines.append(
            f"- 10,000 at 1% / 100 at 100%: steady round wall {wall:.2f}, peak PSS {pss:.2f} "
            f"(target <= 1.2: {'met' if max(wall, pss) <= 1.2 else 'NOT met'})"
        )
    return lines + [""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=",".join(map(str, CONFIGS)), help="client counts to run, comma-separated")
    parser.add_argument(
        "--eval-clients",
        default="all",
        choices=["all", "sampled"],
        help="the task's eval_clients: local evaluation on every registered client, or on the round's sampled ones",
    )
    parser.add_argument("--tag", default="run", help="result set in bench/results/scaling.json to put these runs in")
    parser.add_argument("--profile", type=Path, help="folder for each run's driver profile (cProfile, by own time)")
    parser.add_argument("--report", action="store_true", help="print every saved result set as tables, run nothing")
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return run_one(args.child, args.eval_clients, args.out, args.profile)
    if args.report:
        return write_report()
    results = []
    for clients in (int(c) for c in args.only.split(",")):
        profile = args.profile / f"{args.tag}-{clients}.txt" if args.profile else None
        if profile:
            profile.parent.mkdir(parents=True, exist_ok=True)
        res = measure(clients, args.eval_clients, profile)
        results.append(res)
        print(json.dumps(res), flush=True)
    saved = json.loads(STORE.read_text()) if STORE.exists() else {}
    kept = [r for r in saved.get(args.tag, []) if r["clients"] not in {res["clients"] for res in results}]
    saved[args.tag] = sorted(kept + results, key=lambda r: r["clients"])
    STORE.write_text(json.dumps(saved, indent=1))
    print("\n".join(report(saved[args.tag], args.tag)))


def write_report() -> None:
    """Every result set of scaling.json as tables (for bench/results/scaling.md)."""
    saved = json.loads(STORE.read_text())
    print("\n".join(line for tag, results in saved.items() for line in report(results, tag)))


if __name__ == "__main__":
    main()

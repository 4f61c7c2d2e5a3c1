"""001's comparison set on its E1 label shift: Local, FedAvg, Gossip, Oracle, IFCA, DAC, Ditto and Conditional.

The scenario, model and optimiser are `conditional_e1.py`'s (preset `conditional/E1`, K clusters on disjoint
class groups, `cnn_mnist`, SGD lr 0.01 momentum 0.9, batch 64, 001 Sec. IV-D); every method runs the same
scenario and seed on the serial backend. Conditional is 001's pooled protocol (`centralized_pool`) with as many
epochs as the federated methods have rounds x local epochs. Reported per method: final local accuracy (each
client's own model on its own test split, 001's metric) as mean +- std over clients and its minimum, system
accuracy (004's majority vote), test-time accuracy, total client compute seconds, MB up and down, wall seconds,
beside 001 Table II's number for the dataset and K.

    FEDBENCH_DATA=... python bench/e1_baselines.py --rounds 5 [--dataset fmnist] \
        [--clusters 5] [--methods local fedavg ...]

Writes bench/results/e1_baselines.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import time

from conditional_e1 import POOLED, spec_for
from tables import RESULTS, markdown_table

from fedbench.core import metrics as M
from fedbench.runtime import run_spec

METHODS = ("local", "fedavg", "gossip", "oracle", "ifca", "dac", "ditto", POOLED)
TABLE_II = {
    "mnist": {
        "local": (0.991, 0.992, 0.997, 1.0),
        "fedavg": (0.986, 0.978, 0.933, 0.522),
        "gossip": (0.982, 0.983, 0.892, 0.560),
        "ditto": (0.993, 0.994, 0.996, 1.0),
        "ifca": (0.995, 0.995, 0.999, 1.0),
        "dac": (0.995, 0.995, 0.998, 1.0),
        "oracle": (0.996, 0.996, 0.999, 1.0),
        POOLED: (0.996, 0.996, 1.0, 1.0),
    },
    "fmnist": {
        "local": (0.908, 0.920, 0.945, 1.0),
        "fedavg": (0.902, 0.886, 0.745, 0.412),
        "gossip": (0.895, 0.899, 0.825, 0.560),
        "ditto": (0.910, 0.915, 0.933, 0.999),
        "ifca": (0.922, 0.932, 0.945, 1.0),
        "dac": (0.922, 0.931, 0.950, 1.0),
        "oracle": (0.937, 0.945, 0.962, 1.0),
        POOLED: (0.936, 0.942, 0.964, 1.0),
    },
}
"""001 Table II (E1 label shift, rich sparsity): accuracy for K = 2, 3, 5, 10."""
K_COLUMN = {2: 0, 3: 1, 5: 2, 10: 3}
MB = 1e6


def paper(dataset: str, clusters: int, method: str) -> float | None:
    column = K_COLUMN.get(clusters)
    return TABLE_II.get(dataset, {}).get(method, (None,) * 4)[column] if column is not None else None


def run_one(method: str, args: argparse.Namespace) -> dict:
    start = time.perf_counter()
    result = run_spec(spec_for(method, args))
    row = {"method": method, "status": result.status, "reason": result.reason, "wall_s": time.perf_counter() - start}

    def final(key):
        return result.final.get(M.FINAL_PREFIX + key)

    def total(key):
        return result.final.get(M.TOTAL_PREFIX + key, 0.0)

    row.update(
        {key: final(key) for key in (M.ACC_LOCAL_MEAN, M.ACC_LOCAL_STD, M.ACC_LOCAL_MIN, M.ACC_SYSTEM, M.ACC_TEST_TIME)}
    )
    row.update(
        compute_s=total(M.TIME_CLIENT_COMPUTE_S),
        mb_up=total(M.COMM_UP_BYTES) / MB,
        mb_down=total(M.COMM_DOWN_BYTES) / MB,
    )
    print(
        f"{method:>18}: {result.status} local {fmt(row[M.ACC_LOCAL_MEAN])} +- {fmt(row[M.ACC_LOCAL_STD])}  "
        f"({row['wall_s']:.0f} s) {result.reason}",
        flush=True,
    )
    return row


def fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown(args: argparse.Namespace, rows: list[dict]) -> str:
    command = (
        f"`FEDBENCH_DATA=... python bench/e1_baselines.py --rounds {args.rounds} "
        f"--local-epochs {args.local_epochs} --dataset {args.dataset} --clusters {args.clusters} "
        f"--sparsity {args.sparsity} --seed {args.seed}`"
    )
    header = [
        "method",
        "local acc mean +- std (clients)",
        "local acc min",
        "system acc",
        "test-time acc",
        f"001 Table II ({args.dataset}, K = {args.clusters})",
        "client compute s",
        "MB up",
        "MB down",
        "wall s",
    ]
    body = (
        [
            r["method"],
            f"{fmt(r[M.ACC_LOCAL_MEAN])} +- {fmt(r[M.ACC_LOCAL_STD])}",
            fmt(r[M.ACC_LOCAL_MIN]),
            fmt(r[M.ACC_SYSTEM]),
            fmt(r[M.ACC_TEST_TIME]),
            fmt(paper(args.dataset, args.clusters, r["method"])),
            f"{r['compute_s']:.0f}",
            f"{r['mb_up']:.1f}",
            f"{r['mb_down']:.1f}",
            f"{r['wall_s']:.0f}",
        ]
        for r in rows
    )
    lines = [
        f"# 001 E1 label shift: the comparison set ({args.dataset}, K = {args.clusters}, {args.sparsity})",
        "",
        command,
        "",
        *markdown_table(header, body),
        "",
    ]
    failed = [r for r in rows if r["status"] != "FINISHED"]
    lines += [f"{r['method']} {r['status']}: {r['reason']}" for r in failed]
    lines += [
        f"Reduced scale: {args.rounds} rounds x {args.local_epochs} local epoch(s), seed {args.seed}, one run per "
        f"method; {POOLED}: {args.pooled_epochs} epochs on the pooled data. The paper trains 20 epochs."
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--local-epochs", type=int, default=1)
    parser.add_argument("--clusters", type=int, default=5)
    parser.add_argument("--sparsity", default="rich")
    parser.add_argument("--dataset", default="fmnist", choices=("mnist", "fmnist"))
    parser.add_argument("--data-root", default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    args = parser.parse_args()
    args.pooled_epochs = args.rounds * args.local_epochs
    args.eval_every, args.backend, args.workers = args.rounds, "serial", 1

    rows = [run_one(m, args) for m in args.methods]
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "e1_baselines.json").write_text(json.dumps({"args": vars(args), "rows": rows}, indent=1))
    (RESULTS / "e1_baselines.md").write_text(markdown(args, rows))
    print(markdown(args, rows))


if __name__ == "__main__":
    main()

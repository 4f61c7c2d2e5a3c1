"""FedDRM's routed system accuracy against FedAvgFT's majority vote on colourised and gray MNIST / Fashion-MNIST
(004 Table 1's comparison, reduced), over several seeds.

The runs are `tasks/feddrm_lambda.yaml`'s `reduced` profile restricted to lambda 0.8 (004's best, Fig. 4) and
FedAvgFT (fine-tuning the last 5 of 40 rounds), in five settings: colourised and gray MNIST under `feddrm/dir0.3`,
colourised MNIST under `feddrm/spc` (5 shards per client), colourised and gray Fashion-MNIST under
`feddrm/dir0.3`. Each setting is the task file loaded with `--set` overrides, exactly as `fedbench run` would
expand it, so the runs are the task's. Runs go two at a time in separate processes (serial backend each).

Reported per setting and method: system accuracy, routing accuracy (FedDRM; chance 1/8), pi-weighted local
accuracy, mean ± sample std over the seeds, and FedDRM minus FedAvgFT per seed. Target (004 Table 1): FedDRM's
system accuracy above FedAvgFT's vote. Needs MNIST and Fashion-MNIST under FEDBENCH_DATA. Writes
bench/results/feddrm_colour.{json,md} and its provenance.

    FEDBENCH_DATA=... python bench/feddrm_colour.py [--seeds 2025 2026 2027] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import provenance
from tables import RESULTS, markdown_table

from fedbench.config.task import load_task
from fedbench.core import metrics as M
from fedbench.core.runspec import RunSpec

TASK = Path(__file__).resolve().parents[1] / "tasks" / "feddrm_lambda.yaml"
SETTINGS = {
    "colourised MNIST, Dir-0.3": ("{name: mnist, colourise: true}", "feddrm/dir0.3"),
    "gray MNIST, Dir-0.3": ("mnist", "feddrm/dir0.3"),
    "colourised MNIST, 5-SPC": ("{name: mnist, colourise: true}", "feddrm/spc"),
    "colourised Fashion-MNIST, Dir-0.3": ("{name: fmnist, colourise: true}", "feddrm/dir0.3"),
    "gray Fashion-MNIST, Dir-0.3": ("fmnist", "feddrm/dir0.3"),
}
METHODS = {"feddrm": "FedDRM (lambda 0.8)", "fedavg_ft": "FedAvgFT (vote)"}
ALGORITHMS = "[{name: feddrm, lam: 0.8}, {name: fedavg_ft, ft_rounds: 5}]"
KEYS = (M.ACC_SYSTEM, M.ACC_ROUTING, M.ACC_LOCAL_PI_WEIGHTED)


def overrides(dataset: str, preset: str, seeds: list[int]) -> list[str]:
    return [
        "profile=reduced",
        f"grid.dataset=[{dataset}]",
        f"grid.scenario.preset=[{preset}]",
        f"grid.algorithm={ALGORITHMS}",
        f"seeds={seeds}",
    ]


def specs_of(seeds: list[int]) -> list[tuple[str, RunSpec]]:
    """(setting, spec) for every run: the task file with each setting's overrides, expanded."""
    return [
        (setting, spec)
        for setting, (dataset, preset) in SETTINGS.items()
        for spec in load_task(TASK, overrides(dataset, preset, seeds)).expand()
    ]


def run_one(setting: str, spec: RunSpec) -> dict:
    import torch

    from fedbench.runtime import run_spec

    torch.set_num_threads(1)  # two runs share the two cores
    start = time.perf_counter()
    result = run_spec(spec)
    if result.status != "FINISHED":
        raise SystemExit(f"{setting} {spec.algorithm.name} seed {spec.seed} failed: {result.reason}")
    row = {
        "setting": setting,
        "method": spec.algorithm.name,
        "seed": spec.seed,
        "run_hash": spec.run_hash,
        "wall_s": time.perf_counter() - start,
        **{key: result.final.get(M.FINAL_PREFIX + key) for key in KEYS},
    }
    print(
        f"{setting:>34} {spec.algorithm.name:>9} seed {spec.seed}: system {row[M.ACC_SYSTEM]:.4f} "
        f"({row['wall_s']:.0f} s)",
        flush=True,
    )
    return row


def spread(values: list[float]) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.4f} ± {std:.4f}"


def markdown(rows: list[dict], seeds: list[int], command: str, commit: str) -> str:
    table = []
    for setting in SETTINGS:
        for method, label in METHODS.items():
            mine = [r for r in rows if r["setting"] == setting and r["method"] == method]
            table.append([setting, label, *(spread([r[key] for r in mine]) for key in KEYS), len(mine)])
    gaps = []
    for setting in SETTINGS:
        by_seed = {(r["method"], r["seed"]): r[M.ACC_SYSTEM] for r in rows if r["setting"] == setting}
        diffs = [100 * (by_seed[("feddrm", s)] - by_seed[("fedavg_ft", s)]) for s in seeds]
        gaps.append(
            [
                setting,
                *(f"{d:+.1f}" for d in diffs),
                f"{statistics.fmean(diffs):+.1f}",
                f"{sum(d > 0 for d in diffs)} of {len(diffs)}",
            ]
        )
    lines = [
        "# FedDRM routing vs FedAvgFT majority vote on colourised MNIST (004 Table 1's comparison, reduced)",
        "",
        f"`{command}` at {commit} (runs: provenance/feddrm_colour.json). The `reduced` profile of",
        "`tasks/feddrm_lambda.yaml` with lambda 0.8 and FedAvgFT (fine-tuning 5 of 40 rounds), seeds "
        f"{', '.join(map(str, seeds))}; see the script's docstring for the five settings.",
        "",
        "## Results (mean ± sample std over seeds)",
        "",
        *markdown_table(
            ["data, partition", "method", "system acc", "routing acc", "pi-weighted local acc", "n"], table
        ),
        "",
        "FedDRM system - FedAvgFT system, in points, per seed:",
        "",
        *markdown_table(["data, partition", *(f"seed {s}" for s in seeds), "mean", "FedDRM ahead"], gaps),
        "",
        "004 Table 1: FedDRM +9.0 points over FedAvgFT on CIFAR-10 Dir-0.3, +2.3 on 5-SPC. Routing chance is 1/8.",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[2025, 2026, 2027])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    commit = provenance.head_commit()  # the code that runs is the code of now, before anything is written
    runs = specs_of(args.seeds)
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(run_one, *zip(*runs, strict=True)))
    command = f"python bench/feddrm_colour.py --seeds {' '.join(map(str, args.seeds))} --workers {args.workers}"
    (RESULTS / "feddrm_colour.json").write_text(
        json.dumps({"command": command, "commit": commit, "runs": rows}, indent=1) + "\n"
    )
    text = markdown(rows, args.seeds, command, commit)
    print(text)
    report = RESULTS / "feddrm_colour.md"
    _, reading, written = (report.read_text() if report.exists() else "").partition("\n## Reading")
    report.write_text(text + reading + written)  # the hand-written reading after the tables is kept, to be revised
    provenance.record("feddrm_colour.md", command, [spec for _, spec in runs], commit)


if __name__ == "__main__":
    main()

"""The `fedbench` command: `run` a task's RunSpecs one after another, `list` what is registered."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fedbench.config import load_task
from fedbench.core.callbacks import RunResult
from fedbench.core.errors import FedbenchError
from fedbench.core.registry import ALGORITHMS, DATASETS, MODELS, PARTITIONS
from fedbench.core.runspec import RunSpec

console = Console(width=None if sys.stdout.isatty() else 140)


def run_specs(specs: Sequence[RunSpec]) -> list[RunResult]:
    """Run RunSpecs in order, each logged to MLflow; a failed run is reported and the others go on.

    Runs on the ray backend share one pool of client actors (started once, not per run); the pool is
    replaced after a failed run, so a crashed actor cannot take later runs down with it.
    """
    from fedbench.runtime import Federation
    from fedbench.tracking.console import ProgressCallback
    from fedbench.tracking.mlflow_callback import MlflowCallback

    ray_started_here, pool = False, None
    results = []
    try:
        for i, spec in enumerate(specs, 1):
            if spec.resources.backend == "ray" and (pool is None or pool.resources != spec.resources):
                import ray

                from fedbench.runtime.ray_pool import RayWorkerPool

                ray_started_here = ray_started_here or not ray.is_initialized()
                if pool is not None:
                    pool.close()
                pool = RayWorkerPool(spec.resources, max(s.scenario.num_clients for s in specs))
            callbacks = [MlflowCallback(), ProgressCallback(position=f"[{i}/{len(specs)}] ")]
            result = Federation(spec, callbacks, pool=pool if spec.resources.backend == "ray" else None).run()
            acc = result.final.get("final/acc_local_mean", float("nan"))
            status = "[green]ok" if result.status == "FINISHED" else f"[red]FAILED: {escape(result.reason)}"
            console.print(f"[{i}/{len(specs)}] {spec.label}: acc_local_mean={acc:.4f} {status}")
            results.append(result)
            if result.status == "FAILED" and pool is not None:
                pool.close()
                pool = None
    finally:
        if pool is not None:
            pool.close()
        if ray_started_here:
            import ray

            ray.shutdown()
    return results


def cmd_run(args: argparse.Namespace) -> int:
    from fedbench.tracking.console import failures_table, results_table
    from fedbench.tracking.paths import tracking_uri

    overrides = [*args.set, *([f"resources.backend={args.backend}"] if args.backend else [])]
    task = load_task(args.task, overrides)
    specs = task.expand()
    backends = ", ".join(sorted({s.resources.backend for s in specs}))
    console.print(f"task [bold]{task.name}[/]: {len(specs)} runs, backend {backends}, tracking {tracking_uri()}")
    results = run_specs(specs)
    console.print(results_table(results))
    failures = failures_table(results)
    if failures is not None:
        console.print(failures)
    return 1 if failures is not None else 0


def cmd_list(args: argparse.Namespace) -> int:
    for registry in (DATASETS, MODELS, ALGORITHMS, PARTITIONS):
        table = Table(title=f"{registry.kind}s", show_header=False)
        for name in registry.names():
            doc = (registry.get(name).__doc__ or "").strip().splitlines()
            table.add_row(name, escape(doc[0]) if doc else "")
        console.print(table)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedbench", description="Benchmark federated learning under shift and drift.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run every RunSpec of a task, one after another, and print a results table")
    run.add_argument("task", help="task YAML file, e.g. tasks/quickstart.yaml")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field (repeatable)")
    run.add_argument("--backend", choices=["serial", "ray"], default=None, help="where client jobs run")
    run.set_defaults(func=cmd_run)
    lst = sub.add_parser("list", help="list datasets, models, algorithms and partitions")
    lst.set_defaults(func=cmd_list)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except FedbenchError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())

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


def run_specs(specs: Sequence[RunSpec], backend: str | None = None) -> list[RunResult]:
    """Run RunSpecs in order, each logged to MLflow; a failed run is reported and the others go on."""
    from fedbench.runtime import Federation
    from fedbench.tracking.console import ProgressCallback
    from fedbench.tracking.mlflow_callback import MlflowCallback

    use_ray = (backend or specs[0].resources.backend) == "ray" if specs else False
    started_ray = False
    if use_ray:
        import ray

        from fedbench.runtime.ray_pool import ensure_ray

        started_ray = not ray.is_initialized()
        ensure_ray()
    results = []
    try:
        for i, spec in enumerate(specs, 1):
            callbacks = [MlflowCallback(), ProgressCallback(position=f"[{i}/{len(specs)}] ")]
            result = Federation(spec, callbacks, backend=backend).run()
            acc = result.final.get("final/acc_local_mean", float("nan"))
            status = "[green]ok" if result.status == "FINISHED" else f"[red]FAILED: {result.reason}"
            console.print(f"[{i}/{len(specs)}] {spec.label}: acc_local_mean={acc:.4f} {status}")
            results.append(result)
    finally:
        if started_ray:
            import ray

            ray.shutdown()
    return results


def cmd_run(args: argparse.Namespace) -> int:
    from fedbench.tracking.console import failures_table, results_table
    from fedbench.tracking.paths import tracking_uri

    task = load_task(args.task, args.set)
    specs = task.expand()
    console.print(f"task [bold]{task.name}[/]: {len(specs)} runs, backend {args.backend or specs[0].resources.backend}, tracking {tracking_uri()}")
    results = run_specs(specs, args.backend)
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

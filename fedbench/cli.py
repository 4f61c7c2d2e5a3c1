"""The `fedbench` command: `run` a task's RunSpecs one after another, `sweep` them on Ray Tune, rank them
(`leaderboard`) and `plot` them from MLflow, `list` what is registered, `scenario show` the federation a
task generates before spending compute on it.

Here are the arguments and what each command prints; the work is done by the layers it calls.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fedbench.config import load_task
from fedbench.core import metrics as M
from fedbench.core.callbacks import Callback
from fedbench.core.errors import ConfigError, FedbenchError
from fedbench.core.registry import ALGORITHMS, DATASETS, MODELS, PARTITIONS, SHIFTS
from fedbench.core.runspec import RunSpec

console = Console(width=None if sys.stdout.isatty() else 140)


def cmd_run(args: argparse.Namespace) -> int:
    from fedbench.runtime.session import run_specs
    from fedbench.tracking.console import ProgressCallback, ResultLine, failures_table, results_table
    from fedbench.tracking.mlflow_callback import MlflowCallback
    from fedbench.tracking.paths import check_tracking_uri, tracking_uri

    overrides = [*args.set, *([f"resources.backend={args.backend}"] if args.backend else [])]
    task = load_task(args.task, overrides)
    specs = task.expand()
    check_tracking_uri(tracking_uri())
    backends = ", ".join(sorted({s.resources.backend for s in specs}))
    console.print(f"task [bold]{task.name}[/]: {len(specs)} runs, backend {backends}, tracking {tracking_uri()}")

    def callbacks(i: int, spec: RunSpec) -> list[Callback]:
        position = f"[{i}/{len(specs)}] "
        return [MlflowCallback(), ProgressCallback(position=position), ResultLine(console, position)]

    results = run_specs(specs, callbacks)
    console.print(results_table(results))
    failures = failures_table(results)
    if failures is not None:
        console.print(failures)
    return 1 if failures is not None else 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from fedbench.tracking.console import configurations_table, failures_table, results_table
    from fedbench.tracking.paths import tracking_uri
    from fedbench.tuning import load_search_space, make_plan

    task = load_task(args.task, args.set)
    space = load_search_space(args.search) if args.search else None
    plan = make_plan(task, space, args.num_samples, args.metric, args.mode, args.scheduler)
    if args.dry_run:
        if space is None:
            console.print(configurations_table(plan.specs))
            console.print(f"task [bold]{task.name}[/]: {len(plan.specs)} configurations (nothing was run)")
        else:
            console.print(f"task [bold]{task.name}[/]: {plan.num_samples} Optuna samples of {space.name} on its first "
                          f"configuration, optimising {plan.metric} ({plan.mode}); the space checks out (nothing was run)")
        return 0
    from fedbench.tuning import run_sweep, write_best_task

    what = f"{plan.num_samples} Optuna samples of {space.name}" if space else f"{plan.trials} trials"
    console.print(f"task [bold]{task.name}[/]: sweeping {what} on Ray Tune, tracking {tracking_uri()}")
    outcome = run_sweep(plan, max_concurrent=args.max_concurrent, address=args.address, resume=args.resume)
    if outcome.resumed_done:
        console.print(f"resumed: {outcome.resumed_done} trials were already done and were not run again")
    if outcome.results:
        console.print(results_table(outcome.results))
    failures = failures_table(outcome.results)
    if failures is not None:
        console.print(failures)
    if outcome.best is not None:
        path = write_best_task(task, outcome.best, plan)
        console.print(f"best of {space.name}: {plan.metric} = {outcome.best_value:.4f} with {outcome.best}; "
                      f"as a task file: {path}")
    console.print(f"sweep {outcome.name}: MLflow parent run {outcome.parent_run_id}; Tune folder {outcome.storage}")
    if outcome.interrupted:
        console.print("[yellow]interrupted: continue it with the same command and --resume[/]")
        return 130
    return 1 if failures is not None else 0


def experiment_of(args: argparse.Namespace) -> str:
    """The MLflow experiment `--experiment` names, or the one of the task `--task` names (exactly one given)."""
    if (args.experiment is None) == (args.task is None):
        raise ConfigError("--experiment/--task", None, "exactly one of them")
    return args.experiment or load_task(args.task).name


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from fedbench.tracking.leaderboard import build_leaderboard, read_runs, to_table, write_leaderboard
    from fedbench.tracking.paths import results_dir, tracking_uri

    experiment = experiment_of(args)
    board = build_leaderboard(read_runs(experiment, tracking_uri()), args.metric, args.group_by.split(","), args.mode)
    console.print(to_table(board, f"{experiment}: {board.metric}, mean ± std over seeds, ranked per group"))
    for run, reason in board.failed.itertuples(index=False):
        console.print(f"[red]failed[/] {escape(str(run))}: {escape(str(reason))}")
    folder = results_dir() / "leaderboards"
    written = [write_leaderboard(board, folder / f"{experiment}.md", "markdown"),
               write_leaderboard(board, folder / f"{experiment}.parquet", "parquet")]
    if args.format != "table":
        suffix = {"markdown": "md"}.get(args.format, args.format)
        written.append(write_leaderboard(board, Path(args.out) if args.out else folder / f"{experiment}.{suffix}", args.format))
    console.print("written: " + ", ".join(str(p) for p in dict.fromkeys(written)))
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    from fedbench.tracking.paths import results_dir, tracking_uri
    from fedbench.tracking.plots import heatmap_console_table, plot_experiment

    experiment = experiment_of(args)
    out = Path(args.out) if args.out else results_dir() / "plots" / experiment
    plots = plot_experiment(experiment, tracking_uri(), out, args.metric, args.group_by.split(","))
    console.print(heatmap_console_table(plots, f"{experiment}: {plots.heatmap_metric}, mean over seeds"))
    if len(plots.failed):
        runs = f"{len(plots.failed)} run{'s' if len(plots.failed) != 1 else ''}"
        console.print(f"[red]left out {runs} that did not finish:[/]")
        for run, status, reason in plots.failed.itertuples(index=False):
            console.print(f"  {escape(str(run))} ({status}): {escape(str(reason))}")
    console.print("written: " + ", ".join(escape(str(p)) for p in plots.files))
    if plots.parent_run_id:
        console.print(f"logged as artifacts under '{escape('plots/')}' of sweep parent run {plots.parent_run_id}")
    else:
        console.print(f"no sweep parent run in experiment {escape(experiment)} (plain `fedbench run`): files written only")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from fedbench.scenarios import PRESETS

    entries = [(f"{r.kind}s", {name: r.get(name) for name in r.names()}) for r in (DATASETS, MODELS, ALGORITHMS, PARTITIONS, SHIFTS)]
    for title, named in entries + [("scenario presets", PRESETS)]:
        table = Table(title=title, show_header=False)
        for name, obj in sorted(named.items()):
            doc = (obj.__doc__ or "").strip().splitlines()
            table.add_row(name, escape(doc[0]) if doc else "")
        console.print(table)
    return 0


def parse_rounds(text: str, last: int) -> list[int]:
    """`--rounds 1,5,10` -> [1, 5, 10], each checked against 1..last (ConfigError naming the option)."""
    allowed = f"comma-separated round numbers in 1..{last} (the run has {last} rounds), e.g. --rounds 1,{last}"
    try:
        rounds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError("--rounds", text, allowed) from None
    bad = [r for r in rounds if not 1 <= r <= last]
    if not rounds or bad:
        raise ConfigError("--rounds", bad[0] if bad else text, allowed)
    return list(dict.fromkeys(rounds))


def cmd_scenario_show(args: argparse.Namespace) -> int:
    """Print one run's federation per round (and its test clients), a summary line, and save a heatmap PNG."""
    from fedbench.data import load_dataset
    from fedbench.scenarios import build_scenario
    from fedbench.scenarios.plot import plot_scenario
    from fedbench.scenarios.report import default_rounds, describe_scenario
    from fedbench.tracking.paths import results_dir

    task = load_task(args.task, args.set)
    specs = task.expand()
    runs = f"{len(specs)} run{'s' if len(specs) != 1 else ''}"
    if not 0 <= args.run < len(specs):
        raise ConfigError("--run", args.run, f"a run index in 0..{len(specs) - 1} (the task has {runs})")
    spec = specs[args.run]
    rounds = parse_rounds(args.rounds, spec.rounds) if args.rounds is not None else None
    console.print(f"task [bold]{escape(task.name)}[/]: {runs}; showing run {args.run} "
                  f"({escape(spec.label)}, seed {spec.seed}, {spec.rounds} rounds)"
                  + ("; pick another with --run N" if len(specs) > 1 else ""))

    dataset = load_dataset(spec.dataset.name, spec.dataset.data_root, **spec.dataset.kwargs)
    scenario = build_scenario(dataset, spec.scenario, spec.seed, spec.rounds)
    rounds = rounds or default_rounds(scenario, spec.rounds)
    for part in describe_scenario(dataset.y, scenario, rounds, spec.rounds, dataset.num_classes):
        console.print(part)
    out = Path(args.out) if args.out else results_dir() / "scenarios" / f"{task.name}-{spec.run_hash}.png"
    path = plot_scenario(dataset.y, scenario, rounds, dataset.num_classes, dataset.classes, out,
                         title=f"{task.name} run {args.run}: {spec.dataset.name}, {scenario.num_clients} clients, "
                               f"seed {spec.seed} ({spec.run_hash})")
    console.print(f"heatmap: {escape(str(path))}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedbench", description="Benchmark federated learning under shift and drift.")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run every RunSpec of a task, one after another, and print a results table")
    run.add_argument("task", help="task YAML file, e.g. tasks/quickstart.yaml")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field (repeatable)")
    run.add_argument("--backend", choices=["serial", "ray"], default=None, help="where client jobs run")
    run.set_defaults(func=cmd_run)
    sweep = sub.add_parser("sweep", help="run a task's RunSpecs as Ray Tune trials, several at once")
    sweep.add_argument("task", help="task YAML file, e.g. tasks/quickstart.yaml")
    sweep.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field (repeatable)")
    sweep.add_argument("--dry-run", action="store_true", help="list the configurations and their count, run nothing")
    sweep.add_argument("--max-concurrent", type=int, default=None, metavar="K", help="trials at once (default: as resources allow)")
    sweep.add_argument("--address", default=None, help="Ray cluster address (auto or HOST:PORT); default: a local Ray")
    sweep.add_argument("--search", default=None, metavar="SPACE.yaml", help="Optuna (TPE) search space, e.g. search_spaces/feroma_tau.yaml")
    sweep.add_argument("--num-samples", type=int, default=None, metavar="N", help="Optuna samples to run (with --search)")
    sweep.add_argument("--metric", default=None, help=f"metric to optimise (with --search or --scheduler), e.g. {M.FINAL_PREFIX}{M.ACC_TEST_TIME}")
    sweep.add_argument("--mode", choices=["max", "min"], default="max", help="whether larger metric values are better")
    sweep.add_argument("--scheduler", default=None, choices=["asha"], help="stop poor trials early (needs a per-round --metric)")
    sweep.add_argument("--resume", action="store_true", help="continue the interrupted sweep of this task and configuration")
    sweep.set_defaults(func=cmd_sweep)
    board = sub.add_parser("leaderboard", help="rank configurations from the runs recorded in MLflow")
    board.add_argument("--experiment", default=None, help="MLflow experiment name (a task's name)")
    board.add_argument("--task", default=None, help="or the task file whose experiment to read")
    ranked = M.FINAL_PREFIX + M.ACC_LOCAL_MEAN
    board.add_argument("--metric", default=ranked, help=f"metric to rank by (default {ranked})")
    board.add_argument("--mode", choices=["max", "min"], default="max", help="whether larger metric values are better")
    board.add_argument("--group-by", default="dataset,scenario",
                       help="comma-separated fields whose values form groups (dataset, scenario, or dotted fields)")
    board.add_argument("--format", choices=["table", "markdown", "csv", "parquet"], default="table",
                       help="also write this format (markdown and parquet are always written under results/leaderboards)")
    board.add_argument("--out", default=None, help="path for --format's file")
    board.set_defaults(func=cmd_leaderboard)
    plot = sub.add_parser("plot", help="plot a metric per round and a final-metric heatmap from the runs in MLflow")
    plot.add_argument("--experiment", default=None, help="MLflow experiment name (a task's name)")
    plot.add_argument("--task", default=None, help="or the task file whose experiment to read")
    plot.add_argument("--metric", default=M.ACC_LOCAL_MEAN,
                      help=f"per-round metric to plot (default {M.ACC_LOCAL_MEAN}); the heatmap shows {M.FINAL_PREFIX}<metric>")
    plot.add_argument("--group-by", default="scenario",
                      help="comma-separated fields whose values form the panels and heatmap columns (default scenario)")
    plot.add_argument("--out", default=None, metavar="DIR", help="folder for the PNGs (default: results/plots/<experiment>)")
    plot.set_defaults(func=cmd_plot)
    lst = sub.add_parser("list", help="list datasets, models, algorithms and partitions")
    lst.set_defaults(func=cmd_list)
    scenario = sub.add_parser("scenario", help="inspect the federation a task generates")
    scenario_sub = scenario.add_subparsers(dest="scenario_command", required=True)
    show = scenario_sub.add_parser(
        "show", help="print each client's data per round and save a heatmap PNG of the class mix",
        description="Print per-round client tables (sizes, ground-truth distribution, class counts as the "
                    "client sees them), the test clients and a label-skew summary; save a heatmap PNG.")
    show.add_argument("task", help="task YAML file, e.g. tasks/quickstart.yaml")
    show.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a field (repeatable)")
    show.add_argument("--rounds", default=None, metavar="R1,R2,...",
                      help="rounds to show (default: 1, the first round of each of the first 4 drift stages, the last)")
    show.add_argument("--run", type=int, default=0, metavar="N", help="which of the task's runs, 0-based (default 0)")
    show.add_argument("--out", default=None, metavar="PATH",
                      help="PNG path (default: results/scenarios/<task>-<run hash>.png)")
    show.set_defaults(func=cmd_scenario_show)
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

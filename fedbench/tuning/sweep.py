"""`fedbench sweep`: a task's RunSpecs (or Optuna samples) as Ray Tune trials, many at once.

The sweep is one MLflow parent run in the task's experiment; every trial is a nested child run written by
this process (the one writer). MLflow is also what `--resume` trusts: a trial counts as done when its
child run ended (FINISHED or FAILED); children left RUNNING by an interrupted sweep are deleted and their
trials run again, so every trial ends with exactly one child run (`tracking.sweep_runs` keeps those
runs; nothing here imports MLflow). A running sweep holds a lease on its parent run, so a `--resume` while it
lives is refused instead of deleting its live children (`tracking.sweep_lease`). A trial whose process dies is restarted
by Tune up to `max_failures` times;
the attempt it cut short stays as a FAILED child marked retried, which neither the leaderboard nor `--resume`
counts (`MlflowBridge.on_trial_recover`). Tune's own folders live under
`results/ray_results/<sweep>-<attempt>-<start time>-<random suffix>`, one per invocation, so two sweeps of one task
started at once never write into the same folder (`--resume` needs none of them); an Optuna search keeps its study in
`results/optuna/<sweep>.log`, so a resumed search goes on with what
TPE learnt.
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fedbench.config.task import DEFAULT_MAX_FAILURES, check_max_failures
from fedbench.core import metrics as M
from fedbench.core.callbacks import RunResult
from fedbench.core.errors import ConfigError
from fedbench.runtime.checkpoint import CHECKPOINT_EVERY
from fedbench.tracking.leaderboard import finished_scores
from fedbench.tracking.paths import check_results_writable, check_tracking_uri, results_path, tracking_uri
from fedbench.tracking.sweep_runs import SweepParent, SweepRuns
from fedbench.tuning.mlflow_bridge import MlflowBridge
from fedbench.tuning.plan import GRID_KEY, SweepPlan, TrialSpecs, check_skip_finished
from fedbench.tuning.resources import DRIVER_CPUS, check_trial_fits, concurrency_note, for_trial, trials_at_once
from fedbench.tuning.study_plots import study_journal

if TYPE_CHECKING:
    import optuna
    from optuna.storages import BaseStorage, JournalStorage

    from fedbench.tuning.seed_averaged_search import SeedAveragedSearch


@dataclass
class SweepOutcome:
    """What a sweep did: its parent run, Tune's folder, this invocation's trials, and a search's best sample
    (with the task file `fedbench.tuning.launch` writes for it)."""

    name: str
    parent_run_id: str
    storage: str
    results: list[RunResult] = field(default_factory=list)
    resumed_done: int = 0
    skipped_finished: int = 0
    """Configurations not run because the store held a finished run of them from elsewhere (`skip_finished`): another
    sweep, `fedbench run`, or `fedbench unbundle`."""
    interrupted: bool = False
    best: dict[str, Any] | None = None
    best_value: float | None = None
    best_task: Path | None = None
    reused: int = 0
    """A search's samples whose configuration had already run on every seed (in the store, or earlier in the
    search): answered with its scores, with no trial."""
    reported: list[str] = field(default_factory=list)
    """What the parent run got after the sweep: task params, description, leaderboard, plots."""


def run_sweep(
    plan: SweepPlan,
    max_concurrent: int | None = None,
    address: str | None = None,
    driver_cpus: float | None = None,
    resume: bool = False,
    max_failures: int = DEFAULT_MAX_FAILURES,
    checkpoint_every: int = CHECKPOINT_EVERY,
    skip_finished: bool = False,
) -> SweepOutcome:
    """Run the plan's trials on Tune, logging to MLflow from here; `resume` continues an interrupted sweep;
    `skip_finished` leaves out the configurations the experiment holds a finished run of, whatever recorded it;
    a trial whose process dies is restarted up to `max_failures` times, from its last checkpoint (one every
    `checkpoint_every` rounds; 0: none)."""
    import ray

    from fedbench.runtime.ray_pool import ensure_ray
    from fedbench.runtime.ray_resources import node_resources

    check_skip_finished(skip_finished, plan.space is not None)
    check_max_failures("max_failures", max_failures)
    check_results_writable()
    uri = tracking_uri()
    check_tracking_uri(uri)
    check_ray_address(address)
    started_here = not ray.is_initialized()
    try:
        ensure_ray(address)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise ConfigError("--address", address, f"a reachable Ray cluster (auto or HOST:PORT): {exc}") from exc
    try:
        for spec in plan.specs or (plan.spec_of({}),):
            check_trial_fits(for_trial(spec), node_resources(), driver_cpus or DRIVER_CPUS)
        runs = SweepRuns(uri, plan.task)
        elsewhere = finished_elsewhere(plan, uri) if skip_finished else set()  # read before a parent run is made
        parent, done = _parent_run(runs, plan, resume)
        stored = elsewhere - done
    except BaseException:
        if started_here:
            ray.shutdown()
        raise
    bridge = MlflowBridge(uri, plan.task, parent.run_id, plan.spec_of)
    storage = str(results_path("ray_results"))
    folder = tune_folder_name(plan.name, parent.attempt)
    outcome = SweepOutcome(
        plan.name,
        parent.run_id,
        str(results_path("ray_results", folder)),
        resumed_done=len(done),
        skipped_finished=len(stored),
    )
    try:
        recorded: dict[str, float | None] = {}
        if plan.space is not None:
            recorded.update(finished_scores(plan.task, uri, plan.metric))
        tuner, ending = _tuner(
            plan,
            done | stored,
            recorded,
            max_concurrent,
            driver_cpus,
            bridge,
            storage,
            folder,
            max_failures,
            checkpoint_every,
        )
        if tuner is not None:
            with runs.heartbeat(parent.run_id), sigterm_as_ctrl_c():
                tuner.fit()  # returns after Ctrl-C too (Tune stops gracefully): count what ended
            outcome.interrupted = (len(bridge.outcomes) < ending) if isinstance(ending, int) else not ending.finished
        if not isinstance(ending, int):  # a search
            outcome.reused = ending.reused
        runs.end_parent(parent.run_id, interrupted=outcome.interrupted)
    except BaseException:
        runs.end_parent(parent.run_id, interrupted=True)
        raise
    finally:
        if started_here:
            ray.shutdown()
    outcome.results = list(bridge.outcomes.values())
    if plan.space is not None:
        outcome.best, outcome.best_value = _best_sample(plan)
    return outcome


@contextlib.contextmanager
def sigterm_as_ctrl_c() -> Iterator[None]:
    """While open, SIGTERM (`kill`, a batch scheduler's time limit) stops the sweep as Ctrl-C does: Tune ends the
    trials, the parent run is marked interrupted and `--resume` continues it. Ray's own handler exits at once, with
    a stack dump, leaving the parent run for `--resume` to guess about."""
    if threading.current_thread() is not threading.main_thread():  # signal handlers belong to the main thread
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: os.kill(os.getpid(), signal.SIGINT))
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def tune_folder_name(sweep: str, attempt: int) -> str:
    """This invocation's own Tune folder: the sweep and attempt, then the start time and a random suffix,
    since two sweeps (or resumes) of one task started together have the same sweep name and attempt."""
    return f"{sweep}-{attempt}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def check_ray_address(address: str | None) -> None:
    """Fail before any trial when a HOST:PORT Ray address does not accept connections (`ray.init` waits for
    minutes on one). None, `auto` and `local` are left to Ray, which answers at once."""
    if address in (None, "auto", "local"):
        return
    import socket

    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError("--address", address, "auto, local or HOST:PORT (e.g. 10.0.0.5:6379)")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except OSError as exc:
        raise ConfigError("--address", address, f"a reachable Ray cluster (auto or HOST:PORT): {exc}") from exc


def _parent_run(runs: SweepRuns, plan: SweepPlan, resume: bool) -> tuple[SweepParent, set[str]]:
    """The sweep's parent run and the keys of trials already done. Resuming deletes unfinished children."""
    if not resume:
        return runs.start_parent(plan.name, plan.trials), set()
    parent = runs.reopen_parent(plan.name)
    if parent is None:
        raise ConfigError(
            "--resume",
            plan.name,
            "an interrupted sweep of this task and configuration: none is recorded "
            "in this tracking store (run it once without --resume)",
        )
    done = runs.finished_trials(parent.run_id)
    runs.drop_unfinished_children(parent.run_id)
    return parent, done


def finished_elsewhere(plan: SweepPlan, uri: str) -> set[str]:
    """The run hashes of the plan's configurations the experiment holds a finished run of, whatever recorded it: a
    grid partly run by another sweep or machine (`fedbench unbundle`) goes on from there."""
    from fedbench.tracking.leaderboard import finished_run_hashes

    stored = finished_run_hashes(plan.task, uri)
    return {spec.run_hash for spec in plan.specs if spec.run_hash in stored}


def _tuner(
    plan: SweepPlan,
    done: set,
    recorded: dict[str, float | None],
    max_concurrent: int | None,
    driver_cpus: float | None,
    bridge: MlflowBridge,
    storage: str,
    folder: str,
    max_failures: int,
    checkpoint_every: int,
) -> tuple[Any, int | SeedAveragedSearch]:
    """The Tune experiment for the trials not done yet (None: nothing left), and what says whether they all ended:
    a grid's count of trials, or a search's searcher."""
    import ray
    from ray import tune
    from ray.tune.search import ConcurrencyLimiter
    from rich.console import Console
    from rich.markup import escape

    from fedbench.runtime.checkpoint import CHECKPOINTS_KEPT
    from fedbench.tuning.progress import SweepProgress
    from fedbench.tuning.resources import placement
    from fedbench.tuning.seed_averaged_search import SeedAveragedSearch
    from fedbench.tuning.trial import run_trial

    spec_of, console = plan.spec_of, Console(highlight=False, soft_wrap=True)
    cpus = ray.cluster_resources().get("CPU", 1)
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, spec_of=spec_of, checkpoint_every=checkpoint_every),
        lambda config: placement(spec_of(config), driver_cpus or DRIVER_CPUS),
    )
    # Tune snapshots the experiment each time a trial has reported as many checkpoints as it keeps (2) and warned,
    # in a paragraph each time, that the snapshots come often: they do by design here (a checkpoint every few
    # rounds), and a snapshot of a local experiment is a small file write
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    if plan.metric is not None:
        # not every report carries the metric: rounds between evaluations (eval_every) have no accuracy, and
        # only the last report has the final.* values. The scheduler and the searcher skip such reports.
        os.environ["TUNE_DISABLE_STRICT_METRIC_CHECKING"] = "1"
    scheduler = None
    if plan.scheduler == "asha":
        from ray.tune.schedulers import ASHAScheduler

        # rounds report the bare name (acc_local_mean), the run's end final.acc_local_mean; time is the report
        # count: one per round plus the final report
        assert plan.metric is not None, "a scheduler is planned with its metric"
        scheduler = ASHAScheduler(
            metric=plan.metric.removeprefix(M.FINAL_PREFIX), mode=plan.mode, max_t=plan.max_rounds() + 1, grace_period=1
        )
    ending: int | SeedAveragedSearch
    total: int | Callable[[], int]
    if plan.space is None:
        remaining = [s for s in plan.specs if s.run_hash not in done]
        if not remaining:
            return None, len(remaining)
        param_space = {GRID_KEY: tune.grid_search([s.to_dict() for s in remaining])}
        search_alg, samples, ending, total = None, 1, len(remaining), len(remaining)
    else:
        search = SeedAveragedSearch(plan, _study(plan), recorded, say=console.print)
        if search.finished:
            return None, search
        param_space, samples, ending, total = {}, -1, search, search.trials_planned  # -1: until the searcher ends
        # a search's default concurrency: its trials are the base run with their own samples
        search_alg = ConcurrencyLimiter(
            search, max_concurrent=max_concurrent or trials_at_once([spec_of({})], cpus, driver_cpus or DRIVER_CPUS)
        )
    note = concurrency_note(
        max_concurrent,
        [for_trial(s) for s in plan.specs or (spec_of({}),)],
        cpus,
        driver_cpus or DRIVER_CPUS,
        trials=total() if callable(total) else total,
    )
    if note is not None:
        console.print(f"note: {escape(note)}")
    tune_config = tune.TuneConfig(
        search_alg=search_alg,
        scheduler=scheduler,
        num_samples=samples,
        max_concurrent_trials=max_concurrent if search_alg is None else None,
        reuse_actors=True,  # a trial's process and client workers serve the next trial
        trial_name_creator=_trial_name(spec_of),
        trial_dirname_creator=_trial_name(spec_of),
    )
    ranked = M.FINAL_PREFIX + (plan.metric or M.ACC_LOCAL_MEAN).removeprefix(M.FINAL_PREFIX)
    progress = SweepProgress(
        total,
        ranked,
        plan.mode,
        lambda config: spec_of(config).label,
        console,
        rounds=lambda config: spec_of(config).rounds,
    )
    # Tune's own console reporter would print its trial table and a TensorBoard hint (TensorBoard is not a
    # dependency); the lines of SweepProgress say what a user needs, one per ended trial
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    run_config = tune.RunConfig(
        name=folder,
        storage_path=storage,
        callbacks=[bridge, progress],
        verbose=0,
        failure_config=tune.FailureConfig(max_failures=max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=CHECKPOINTS_KEPT),
    )
    tuner = tune.Tuner(trainable, param_space=param_space, tune_config=tune_config, run_config=run_config)
    return tuner, ending


def _study(plan: SweepPlan) -> optuna.Study:
    """The search's Optuna study (TPE), kept on disk: a resumed search continues it."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = _study_storage(plan)
    sampler = optuna.samplers.TPESampler(seed=_sampler_seed(plan, storage))
    return optuna.create_study(
        study_name=plan.name,
        storage=storage,
        sampler=sampler,
        load_if_exists=True,
        direction="maximize" if plan.mode == "max" else "minimize",
    )


def _sampler_seed(plan: SweepPlan, storage: BaseStorage) -> int:
    """The task's seed for a new study; for a study that already holds trials (a resumed search), the seed
    shifted by their count: TPE starts with random samples, and the same seed would draw the samples the
    interrupted attempt already ran."""
    seed = int((plan.base or {}).get("seed", 0))
    try:
        study_id = storage.get_study_id_from_name(plan.name)
    except KeyError:
        return seed
    return seed + len(storage.get_all_trials(study_id, deepcopy=False))


def _study_storage(plan: SweepPlan) -> JournalStorage:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    journal = study_journal(plan.name)
    journal.parent.mkdir(parents=True, exist_ok=True)
    return JournalStorage(JournalFileBackend(str(journal)))


def _best_sample(plan: SweepPlan) -> tuple[dict[str, Any] | None, float | None]:
    import optuna

    study = optuna.load_study(study_name=plan.name, storage=_study_storage(plan))
    complete = [
        t
        for t in study.trials
        if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None and math.isfinite(t.value)
    ]
    if not complete:
        return None, None
    best = (max if plan.mode == "max" else min)(complete, key=lambda t: float(t.value or 0.0))  # all have values
    assert plan.space is not None
    return plan.space.complete(best.params), float(best.value or 0.0)


def _trial_name(spec_of: TrialSpecs) -> Callable[[Any], str]:
    def name(trial: Any) -> str:
        spec = spec_of(trial.config)
        return f"{spec.label}-{spec.run_hash[:6]}" if spec.run_name else spec.label  # trial folders must differ

    return name

"""The trainable every trial runs: one Federation on the ray backend, reporting each round to Tune.

Nothing here writes to MLflow: the trial reports, and the sweep's driver is the one writer (an sqlite store
then never sees concurrent writers).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray import tune

from fedbench.core import metrics as M
from fedbench.core import timeline
from fedbench.core.callbacks import Callback, RoundRecord, RunResult
from fedbench.core.runspec import RunSpec
from fedbench.runtime import per_client
from fedbench.runtime.checkpoint import CheckpointFolder

EVENT = "fedbench_event"
"""Key telling a round report ("round") from the run's final report ("end")."""
RUN_TAGS = "fedbench_run_tags"
"""Key of the final report's run tags (`RunResult.tags`: where the workers trained, a resumed run's round), as JSON,
which the driver writes on the run as they are."""
PER_CLIENT = "fedbench_per_client"
"""Key of the final report's per-client table (`fedbench.runtime.per_client.encode`), which the driver logs."""


class TuneReporter(Callback):
    """Every round's record to `tune.report` (so ASHA can stop poor trials), then the run's outcome.

    Args:
        checkpoints: the run's checkpoint folder (one file at a time: Tune copies the folder it is given).
        tags: strings about where the trial ran (placement groups, node), sent with the final report; asked
            for only then, so the trial does not wait for its client workers to start before it builds its run.
    """

    def __init__(self, tags: Callable[[], dict[str, str]], checkpoints: CheckpointFolder | None = None):
        self.tags, self.checkpoints = tags, checkpoints

    def on_round_end(self, spec: RunSpec, record: RoundRecord) -> None:
        """The round's record, with the run's checkpoint when one was written after this round: Tune keeps it
        (`CheckpointConfig`) and hands it back to the trial if its process dies and Tune starts it again."""
        written = self.checkpoints.written(int(record[M.ROUND])) if self.checkpoints is not None else None
        checkpoint = tune.Checkpoint.from_directory(str(written.parent)) if written is not None else None
        tune.report({**record, EVENT: "round"}, checkpoint=checkpoint)

    def on_run_end(self, result: RunResult) -> None:
        last = result.history[-1] if result.history else {}
        tune.report(
            {
                **last,
                **result.final,
                **self.tags(),
                EVENT: "end",
                "status": result.status,
                "reason": result.reason,
                "traceback": result.traceback,
                RUN_TAGS: json.dumps(result.tags),
                PER_CLIENT: per_client.encode(result.per_client),
            }
        )


_pools = None
"""This trial process's client workers (a `ReusedPool`). Tune reuses a trial's process (and its placement
group) for the next trial with the same resources (`reuse_actors`), so the workers it started inside that
group are reused too: starting a Python process with torch costs seconds per trial, more than a tiny
trial's own work (bench/sweep_overhead.py)."""


def run_trial(config: dict[str, Any], spec_of: Callable[[dict[str, Any]], RunSpec], checkpoint_every: int) -> None:
    """Tune function trainable: `spec_of(config)` is the run (a grid point or an Optuna sample), checkpointed every
    `checkpoint_every` rounds (0: never)."""
    global _pools
    import ray

    from fedbench.runtime import Federation
    from fedbench.runtime.ray_pool import ReusedPool

    timeline.mark("trial_started", process_age=timeline.process_age())
    # Ray Train logs a line per checkpoint a trial reports (every few rounds of every trial), which flooded the
    # sweep's console; a checkpoint that fails still warns
    logging.getLogger("ray.train._internal.storage").setLevel(logging.WARNING)
    spec = spec_of(config)
    _pools = _pools or ReusedPool()
    pool = _pools.for_run(spec)

    def tags() -> dict[str, str]:
        try:
            workers = ",".join(map(str, pool.placement_groups()))
        except ray.exceptions.RayError as exc:  # the run failed because a worker died: still report the run
            workers = f"unknown ({type(exc).__name__})"
        return {
            "trial.node": ray.get_runtime_context().get_node_id(),
            "trial.placement_group": str(ray.get_runtime_context().get_placement_group_id()),
            "trial.worker_placement_groups": workers,
        }

    # in the trial's own folder (Tune's working directory for it), one checkpoint at a time: Tune keeps its copies
    checkpoints = (
        CheckpointFolder(Path.cwd() / "fedbench-checkpoints", every=checkpoint_every, keep=1)
        if checkpoint_every
        else None
    )
    restored = tune.get_checkpoint()  # the last one this trial reported, when its process died and Tune restarted it
    if restored is not None and checkpoints is not None:
        with restored.as_directory() as folder:
            checkpoints.adopt(Path(folder))
    result = Federation(spec, callbacks=[TuneReporter(tags, checkpoints)], pool=pool, checkpoints=checkpoints).run()
    _pools.after(result.status)  # a worker may be what failed: the next trial starts fresh ones

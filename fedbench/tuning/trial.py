"""The trainable every trial runs: one Federation on the ray backend, reporting each round to Tune.

Nothing here writes to MLflow: the trial reports, and the sweep's driver is the one writer (an sqlite store
then never sees concurrent writers).
"""

from __future__ import annotations

from typing import Any

from ray import tune

from fedbench.core.callbacks import Callback, RoundRecord, RunResult
from fedbench.core.runspec import RunSpec

EVENT = "fedbench_event"
"""Key telling a round report ("round") from the run's final report ("end")."""


class TuneReporter(Callback):
    """Every round's record to `tune.report` (so ASHA can stop poor trials), then the run's outcome.

    Args:
        tags: strings about where the trial ran (placement groups, node), sent with the final report.
    """

    def __init__(self, tags: dict[str, str]):
        self.tags = tags

    def on_round_end(self, spec: RunSpec, record: RoundRecord) -> None:
        tune.report({**record, EVENT: "round"})

    def on_run_end(self, result: RunResult) -> None:
        last = result.history[-1] if result.history else {}
        tune.report({**last, **result.final, **self.tags, EVENT: "end", "status": result.status, "reason": result.reason,
                     "traceback": result.traceback})


def run_trial(config: dict[str, Any]) -> None:
    """Tune function trainable: `config["run"]` is a RunSpec as a plain mapping."""
    import ray

    from fedbench.runtime import Federation
    from fedbench.runtime.ray_pool import RayWorkerPool

    spec = RunSpec.from_dict(config["run"])
    pool = RayWorkerPool(spec.resources, spec.scenario.num_clients)  # captured into this trial's placement group
    try:
        tags = {
            "trial.node": ray.get_runtime_context().get_node_id(),
            "trial.placement_group": str(ray.get_runtime_context().get_placement_group_id()),
            "trial.worker_placement_groups": ",".join(map(str, pool.placement_groups())),
        }
        Federation(spec, callbacks=[TuneReporter(tags)], pool=pool).run()
    finally:
        pool.close()

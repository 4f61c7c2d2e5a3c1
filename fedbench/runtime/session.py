"""Running several RunSpecs one after another, as `fedbench run` does with a task's runs.

Runs on the ray backend share one pool of client actors (started once, not per run, since starting a
Python process with torch costs seconds); the pool is replaced after a failed run, so a crashed actor
cannot take later runs down with it. Workers that share a GPU without MPS are warned of once, as the first
run that has them starts its rounds. A Ray started here is shut down here, one left running by the
caller is left running.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence

from fedbench.core import timeline
from fedbench.core.callbacks import Callback, RunResult
from fedbench.core.runspec import RunSpec
from fedbench.runtime.backends import check_serial_fits
from fedbench.runtime.checkpoint import CheckpointFolder
from fedbench.runtime.federation import Federation
from fedbench.runtime.gpu_sharing import SharedGpuCheck


def run_specs(
    specs: Sequence[RunSpec],
    callbacks: Callable[[int, RunSpec], Sequence[Callback]],
    checkpoints: Callable[[RunSpec], CheckpointFolder | None] = lambda spec: None,
    claim: Callable[[RunSpec], contextlib.AbstractContextManager[bool]] = lambda spec: contextlib.nullcontext(True),
) -> list[RunResult]:
    """Run `specs` in order, the i-th (from 1) with the callbacks `callbacks(i, spec)` makes for it and the checkpoint
    folder `checkpoints(spec)` gives it (a run killed before goes on from its last checkpoint there); a failed
    run is reported in its result and the others go on. A run is trained inside `claim(spec)`, and skipped where
    that says False (another process trains it: `run_lock`)."""
    ray_started_here, pools = False, None
    results, gpu_check = [], SharedGpuCheck()
    try:
        for resources in {spec.resources for spec in specs if spec.resources.backend == "serial"}:
            check_serial_fits(resources)
        on_ray = {spec.resources for spec in specs if spec.resources.backend == "ray"}
        if on_ray:
            import ray

            from fedbench.runtime.ray_pool import ReusedPool, ensure_ray
            from fedbench.runtime.ray_resources import check_worker_fits, node_resources

            ray_started_here = not ray.is_initialized()
            ensure_ray()
            timeline.mark("ray_started")
            for resources in on_ray:  # before the first run: a worker no node can hold would wait forever
                check_worker_fits(resources, node_resources())
            pools = ReusedPool()
        for i, spec in enumerate(specs, 1):
            with claim(spec) as mine:
                if not mine:
                    continue
                pool = None
                if spec.resources.backend == "ray":
                    assert pools is not None  # made above, before the first of the task's Ray runs
                    pool = pools.for_run(spec, max(s.scenario.num_clients for s in specs))
                result = Federation(
                    spec, callbacks(i, spec), pool=pool, gpu_check=gpu_check, checkpoints=checkpoints(spec)
                ).run()
            results.append(result)
            if pool is not None and pools is not None:
                pools.after(result.status)
    finally:
        if pools is not None:
            pools.close()
        if ray_started_here:
            import ray

            ray.shutdown()
    return results

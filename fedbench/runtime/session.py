"""Running several RunSpecs one after another, as `fedbench run` does with a task's runs.

Runs on the ray backend share one pool of client actors (started once, not per run, since starting a
Python process with torch costs seconds); the pool is replaced after a failed run, so a crashed actor
cannot take later runs down with it. A Ray started here is shut down here, one left running by the
caller is left running.
"""

from __future__ import annotations

from typing import Callable, Sequence

from fedbench.core.callbacks import Callback, RunResult
from fedbench.core.runspec import RunSpec
from fedbench.runtime.federation import Federation


def run_specs(specs: Sequence[RunSpec], callbacks: Callable[[int, RunSpec], Sequence[Callback]]) -> list[RunResult]:
    """Run `specs` in order, the i-th (from 1) with the callbacks `callbacks(i, spec)` makes for it; a failed
    run is reported in its result and the others go on."""
    ray_started_here, pools = False, None
    results = []
    try:
        for i, spec in enumerate(specs, 1):
            pool = None
            if spec.resources.backend == "ray":
                import ray

                from fedbench.runtime.ray_pool import ReusedPool

                ray_started_here = ray_started_here or not ray.is_initialized()
                pools = pools or ReusedPool()
                pool = pools.for_run(spec, max(s.scenario.num_clients for s in specs))
            result = Federation(spec, callbacks(i, spec), pool=pool).run()
            results.append(result)
            if pools is not None:
                pools.after(result.status)
    finally:
        if pools is not None:
            pools.close()
        if ray_started_here:
            import ray

            ray.shutdown()
    return results

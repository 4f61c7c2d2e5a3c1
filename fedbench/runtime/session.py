"""Running several RunSpecs one after another, as `fedbench run` does with a task's runs.

Runs on the ray backend share one pool of client actors (started once, not per run, since starting a
Python process with torch costs seconds); the pool is replaced after a failed run, so a crashed actor
cannot take later runs down with it. A Ray started here is shut down here, one left running by the
caller is left running.

Start-up overlaps: while Ray starts, a thread makes the first run's callbacks (MLflow opens its store: a fresh
sqlite store runs its migrations for seconds), then loads its dataset; the client actors then come up while
the run builds its scenario. Callbacks that fail to be made fail `run_specs` before any run starts, as they
did one after the other; a dataset that fails to load fails its run, as it did.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from fedbench.core.callbacks import Callback, RunResult
from fedbench.core.runspec import RunSpec
from fedbench.data import load_dataset
from fedbench.runtime.federation import Federation

MakeCallbacks = Callable[[int, RunSpec], Sequence[Callback]]


def prefetch_dataset(spec: RunSpec) -> None:
    """Load the run's dataset into this process's cache (`load_dataset` keeps it), where the run finds it. An error
    is left for the run's own load to meet: it fails that run with its reason, as it always did, not the task."""
    try:
        load_dataset(spec.dataset.name, spec.dataset.data_root, **spec.dataset.kwargs)
    except Exception:  # noqa: BLE001 - reported by the run that needs the dataset
        pass


def run_specs(specs: Sequence[RunSpec], callbacks: MakeCallbacks) -> list[RunResult]:
    """Run `specs` in order, the i-th (from 1) with the callbacks `callbacks(i, spec)` makes for it; a failed
    run is reported in its result and the others go on."""
    ray_started_here, pools = False, None
    results = []
    made = {}  # run index -> its callbacks, made ahead of time
    try:
        on_ray = {spec.resources for spec in specs if spec.resources.backend == "ray"}
        if on_ray:
            import ray

            from fedbench.runtime.ray_pool import ReusedPool, ensure_ray
            from fedbench.runtime.ray_resources import check_worker_fits, node_resources

            ray_started_here = not ray.is_initialized()
            with ThreadPoolExecutor(2, thread_name_prefix="fedbench-ahead") as ahead:  # both done when Ray is up
                first = ahead.submit(callbacks, 1, specs[0])
                ahead.submit(prefetch_dataset, specs[0])
                ensure_ray()
                made[1] = first.result()  # its error, if any, raised here: before any work
            for resources in on_ray:  # before the first run: a worker no node can hold would wait forever
                check_worker_fits(resources, node_resources())
            pools = ReusedPool()
        for i, spec in enumerate(specs, 1):
            pool = None
            if spec.resources.backend == "ray":
                pool = pools.for_run(spec, max(s.scenario.num_clients for s in specs))
            run_callbacks = made.pop(i) if i in made else callbacks(i, spec)
            result = Federation(spec, run_callbacks, pool=pool).run()
            results.append(result)
            if pool is not None:
                pools.after(result.status)
    finally:
        if pools is not None:
            pools.close()
        if ray_started_here:
            import ray

            ray.shutdown()
    return results

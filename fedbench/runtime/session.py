"""Running several RunSpecs one after another, as `fedbench run` does with a task's runs.

Runs on a backend of Ray actors (`BackendKind.uses_ray`) share one pool of client actors (started once, not per run,
since starting a Python process with torch costs seconds); the pool is replaced after a failed run, so a crashed
actor cannot take later runs down with it. Workers that share a GPU without MPS are warned of once, as the first
run that has them starts its rounds. A Ray started here is shut down here, one left running by the
caller is left running.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable, Iterator, Sequence

from fedbench.core import timeline
from fedbench.core.callbacks import Callback, RunResult
from fedbench.core.runspec import RunSpec
from fedbench.runtime.backends import backend_kind
from fedbench.runtime.checkpoint import CheckpointFolder
from fedbench.runtime.federation import Federation
from fedbench.runtime.gpu_sharing import SharedGpuCheck


def run_specs(
    specs: Sequence[RunSpec],
    callbacks: Callable[[int, RunSpec], Sequence[Callback]],
    checkpoints: Callable[[RunSpec], CheckpointFolder | None] = lambda spec: None,
    claim: Callable[[RunSpec], contextlib.AbstractContextManager[bool]] = lambda spec: contextlib.nullcontext(True),
    prefetch: Sequence[str] = (),
) -> list[RunResult]:
    """Run `specs` in order, the i-th (from 1) with the callbacks `callbacks(i, spec)` makes for it and the checkpoint
    folder `checkpoints(spec)` gives it (a run killed before goes on from its last checkpoint there); a failed
    run is reported in its result and the others go on. A run is trained inside `claim(spec)`, and skipped where
    that says False (another process trains it: `run_lock`). `prefetch`: modules the callbacks will import, imported
    in a thread while Ray starts (`imported_beside`)."""
    ray_started_here, pools = False, None
    results, gpu_check = [], SharedGpuCheck()
    kinds = {spec.resources: backend_kind(spec.resources.backend) for spec in specs}
    try:
        if any(kind.uses_ray for kind in kinds.values()):
            import ray

            from fedbench.runtime.ray_pool import ReusedPool, ensure_ray

            ray_started_here = not ray.is_initialized()
            with imported_beside(prefetch):
                ensure_ray()
            timeline.mark("ray_started")
            pools = ReusedPool()
        for resources, kind in kinds.items():  # before the first run: a worker no node can hold would wait forever
            kind.check_fits(resources)
        for i, spec in enumerate(specs, 1):
            with claim(spec) as mine:
                if not mine:
                    continue
                pool = None
                if kinds[spec.resources].uses_ray:
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


RAY_START_SHARES = ("click",)
"""What Ray's start imports (after `ray` and `ray_pool`) that MLflow's client imports too: imported before the prefetch
thread starts, so that the two threads never import one module at once (a circular import entered from both ends at
once is a deadlock Python can only report). `tests/test_cli_imports.py` keeps this list true."""


@contextlib.contextmanager
def imported_beside(modules: Sequence[str]) -> Iterator[None]:
    """Import `modules` in a thread while the body runs, and wait for it at the end. For Ray's start, which mostly
    waits for Ray's processes: MLflow's client (about a second of CPU, which ran after it while the first run's
    workers waited for their load) is then ready when the first run is created. A failed import is left for the
    importer that needs the module to raise."""
    if not modules:
        yield
        return
    for shared in RAY_START_SHARES:
        importlib.import_module(shared)
    thread = threading.Thread(target=import_quietly, args=(modules,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()


def import_quietly(modules: Sequence[str]) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: S110 - raised again, with its traceback, where the module is imported for use
            pass

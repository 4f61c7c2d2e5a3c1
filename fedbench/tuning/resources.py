"""What one trial reserves: a bundle for its driver plus one per client worker (Tune's placement groups, nested).

Tune places the trial's driver in bundle 0 and captures the client actors it creates into bundles 1..N;
an actor beyond the last bundle would wait forever, so the RunSpec's `num_workers` is set to exactly N.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from fedbench.core.runspec import RunSpec
from fedbench.runtime.backends import backend_kind
from fedbench.runtime.ray_resources import check_fits, check_worker_fits, cluster_total

if TYPE_CHECKING:
    from ray import tune

DRIVER_CPUS = 0.5
"""CPU of a trial's driver bundle: it only dispatches jobs and aggregates, the clients do the training."""

DEFAULT_WORKERS_PER_TRIAL = 1
"""Client workers per trial unless the task sets `resources.num_workers`: many small trials share a machine."""


def for_trial(spec: RunSpec) -> RunSpec:
    """The spec as a trial runs it: on Ray actors (its own backend where that uses Ray, the batched one; else the ray
    backend) with an explicit worker count (one per bundle)."""
    workers = min(spec.resources.num_workers or DEFAULT_WORKERS_PER_TRIAL, spec.scenario.num_clients)
    backend = spec.resources.backend if backend_kind(spec.resources.backend).uses_ray else "ray"
    return spec.replace(resources=dataclasses.replace(spec.resources, backend=backend, num_workers=workers))


def trial_workers(spec: RunSpec) -> int:
    """The client workers of a trial's RunSpec, which `for_trial` always sets."""
    assert spec.resources.num_workers is not None, "a trial's RunSpec comes from for_trial"
    return spec.resources.num_workers


def placement(spec: RunSpec, driver_cpus: float = DRIVER_CPUS) -> tune.PlacementGroupFactory:
    """One driver bundle, then one bundle per client worker with its CPU and GPU fraction."""
    from ray import tune

    worker = {"CPU": spec.resources.client_cpus}
    if spec.resources.client_gpus > 0:
        worker["GPU"] = spec.resources.client_gpus
    return tune.PlacementGroupFactory([{"CPU": driver_cpus}] + [worker] * trial_workers(spec))


def trials_at_once(specs: Sequence[RunSpec], cpus: float, driver_cpus: float = DRIVER_CPUS) -> int:
    """How many trials (specs as `for_trial` made them) `cpus` CPUs hold at once, each reserving what the largest
    of `specs` does: Tune runs no more than this, whatever `--max-concurrent` asks."""
    need = max(driver_cpus + spec.resources.client_cpus * trial_workers(spec) for spec in specs)
    return max(1, int(cpus // need))


def concurrency_note(
    asked: int | None,
    specs: Sequence[RunSpec],
    cpus: float,
    driver_cpus: float = DRIVER_CPUS,
    trials: int | None = None,
) -> str | None:
    """What to tell a user whose `--max-concurrent` the cluster's CPUs cannot hold for a sweep of `trials` (None
    when they can, or when there are no more trials than fit): Tune would quietly run fewer at a time."""
    fit = trials_at_once(specs, cpus, driver_cpus)
    if asked is None or min(asked, trials or asked) <= fit:
        return None
    largest = max(specs, key=lambda spec: spec.resources.client_cpus * trial_workers(spec)).resources
    return (
        f"--max-concurrent {asked}: {fit} trial{'s' if fit > 1 else ''} at a time fit{'' if fit > 1 else 's'} "
        f"{cpus:g} CPUs, each reserving {driver_cpus:g} for its driver and {largest.client_cpus:g} per client "
        f"worker ({largest.num_workers}); --set resources.client_cpus=<less> fits more (run ids do not change)"
    )


def check_trial_fits(spec: RunSpec, nodes: Sequence[Mapping[str, float]], driver_cpus: float = DRIVER_CPUS) -> None:
    """Refuse a trial (spec as `for_trial` made it) whose bundles together exceed the cluster's CPUs or GPUs,
    or whose client worker no single node (`nodes`) can hold: Tune would keep it pending forever."""
    need: dict[str, float] = {}
    for bundle in placement(spec, driver_cpus).bundles:
        for key, amount in bundle.items():
            need[key] = need.get(key, 0) + amount
    what = f"a trial ({driver_cpus:g} CPU for its driver and {spec.resources.num_workers} client workers)"
    check_fits(need, cluster_total(nodes), what, spec.resources)
    check_worker_fits(spec.resources, nodes)

"""Resource requests against what the Ray cluster has.

Ray keeps an actor (or a trial's placement group) that no node could ever hold pending forever, repeating
"No available node types can fulfill resource request"; and one that waits for busy resources waits in
silence. Requests are compared with the cluster's totals before anything starts, and a wait says so.
"""

from __future__ import annotations

import logging
import time
from typing import Mapping, Sequence

from fedbench.core.errors import ConfigError
from fedbench.core.runspec import ResourceSpec

log = logging.getLogger(__name__)

WAIT_NOTICE_S = 10.0
"""Seconds between two log lines while client workers wait for resources held by others."""

FIELD_OF = {"CPU": "resources.client_cpus", "GPU": "resources.client_gpus"}
"""The task field that asks for each Ray resource."""


def describe(resources: Mapping[str, float]) -> str:
    """`2 CPU, 0 GPU`: the CPUs and GPUs of a cluster or of a request."""
    return ", ".join(f"{resources.get(key, 0):g} {key}" for key in FIELD_OF)


def check_fits(need: Mapping[str, float], cluster: Mapping[str, float], what: str, value_of: ResourceSpec) -> None:
    """Refuse a request (`need`, for `what`) exceeding the cluster's total CPUs or GPUs: it could never start.

    Raises:
        ConfigError: naming the task field that asks for the missing resource, its value and what the cluster has.
    """
    for key, field in FIELD_OF.items():
        if need.get(key, 0) > cluster.get(key, 0):
            value = getattr(value_of, field.removeprefix("resources."))
            raise ConfigError(field, value, f"a request the Ray cluster can hold: {what} needs {describe(need)}, "
                                            f"the cluster has {describe(cluster)} in all")


def check_worker_fits(resources: ResourceSpec, cluster: Mapping[str, float]) -> None:
    """Refuse a client worker (`client_cpus`, `client_gpus`) larger than the whole cluster."""
    need = {"CPU": resources.client_cpus, "GPU": resources.client_gpus}
    check_fits(need, cluster, "one client worker", resources)


def get_reporting_waits(refs: Sequence, what: str, resources: ResourceSpec) -> list:
    """`ray.get(refs)`, logging every `WAIT_NOTICE_S` while some are still pending (their actors waiting for
    CPUs or GPUs that other work holds) instead of waiting in silence."""
    import ray

    start, pending = time.monotonic(), list(refs)
    while pending:
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=WAIT_NOTICE_S)
        if pending:
            log.warning("waited %.0f s for %d of %d %s (each needs %s); free in the cluster now: %s",
                        time.monotonic() - start, len(pending), len(refs), what,
                        describe({"CPU": resources.client_cpus, "GPU": resources.client_gpus}),
                        describe(ray.available_resources()))
    return ray.get(list(refs))

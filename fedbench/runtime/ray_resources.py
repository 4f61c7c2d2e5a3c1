"""Resource requests against what the Ray cluster has.

Ray keeps an actor (or a trial's placement group) that no node could ever hold pending forever, repeating
"No available node types can fulfill resource request"; and one that waits for busy resources waits in
silence. Requests are compared with the cluster's totals before anything starts, and a wait says so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

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
            raise ConfigError(
                field,
                value,
                f"a request the Ray cluster can hold: {what} needs {describe(need)}, "
                f"the cluster has {describe(cluster)} in all",
            )


def node_resources() -> list[dict[str, float]]:
    """The resources of each live node of the connected Ray cluster: a worker must fit on one of them."""
    import ray

    return [dict(node["Resources"]) for node in ray.nodes() if node["Alive"]]


def cluster_total(nodes: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """The CPUs and GPUs of all `nodes` together."""
    return {key: sum(node.get(key, 0) for node in nodes) for key in FIELD_OF}


def describe_nodes(nodes: Sequence[Mapping[str, float]]) -> str:
    """`2 nodes (2 CPU, 0 GPU; 3 CPU, 2 GPU)`."""
    return f"{len(nodes)} node{'s' * (len(nodes) != 1)} ({'; '.join(describe(node) for node in nodes)})"


def check_worker_fits(resources: ResourceSpec, nodes: Sequence[Mapping[str, float]]) -> None:
    """Refuse a client worker that no node of the cluster could ever hold: a GPU share Ray cannot give (more
    than one GPU but not a whole number), more than the cluster has, or more than any one node has (an
    actor lives on one node, so two 1-GPU nodes cannot hold a 2-GPU worker).

    Raises:
        ConfigError: naming `resources.client_gpus` or `resources.client_cpus`, its value and what the nodes have.
    """
    gpus = resources.client_gpus
    if gpus > 1 and not float(gpus).is_integer():
        raise ConfigError(
            FIELD_OF["GPU"],
            gpus,
            "0 (no GPU), a share of one GPU in (0, 1] or a whole number of "
            f"GPUs; the Ray cluster has {describe_nodes(nodes)}",
        )
    need = {"CPU": resources.client_cpus, "GPU": gpus}
    check_fits(need, cluster_total(nodes), "one client worker", resources)
    if any(all(need[key] <= node.get(key, 0) for key in need) for node in nodes):
        return
    short = "GPU" if not any(need["GPU"] <= node.get("GPU", 0) for node in nodes) else "CPU"
    value = getattr(resources, FIELD_OF[short].removeprefix("resources."))
    raise ConfigError(
        FIELD_OF[short],
        value,
        f"a request one Ray node can hold: one client worker needs {describe(need)}, "
        f"the cluster has {describe_nodes(nodes)}",
    )


def get_reporting_waits(refs: Sequence, what: str, resources: ResourceSpec) -> list:
    """`ray.get(refs)`, logging every `WAIT_NOTICE_S` while some are still pending (their actors waiting for
    CPUs or GPUs that other work holds) instead of waiting in silence."""
    import ray

    start, pending = time.monotonic(), list(refs)
    while pending:
        _, pending = ray.wait(pending, num_returns=len(pending), timeout=WAIT_NOTICE_S)
        if pending:
            log.warning(
                "waited %.0f s for %d of %d %s (each needs %s); free in the cluster now: %s",
                time.monotonic() - start,
                len(pending),
                len(refs),
                what,
                describe({"CPU": resources.client_cpus, "GPU": resources.client_gpus}),
                describe(ray.available_resources()),
            )
    return ray.get(list(refs))

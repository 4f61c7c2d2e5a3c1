"""Label partitions of a pool of samples over clients: which sample indices each client holds.

Every partition is `(labels, num_clients, rng, **params) -> list of index arrays`, registered by name; its
parameters are typed keyword arguments with defaults (the task's `scenario:` section fills them).
"""

from __future__ import annotations

import numpy as np

from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_partition


@register_partition("iid")
def iid(labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A uniform random split into near-equal shares (sizes differ by at most one)."""
    return [np.sort(part) for part in np.array_split(rng.permutation(len(labels)), num_clients)]


@register_partition("dirichlet")
def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    alpha: float = 0.5,
    min_samples: int = 10,
    max_attempts: int = 100,
) -> list[np.ndarray]:
    """Label skew: each class is split over clients with proportions ~ Dirichlet(alpha) (003 Sec. 3.1).

    Small alpha gives each client few classes and unequal sizes; large alpha approaches IID. Draws are
    repeated until every client holds at least `min_samples` samples, as the usual generators do.

    Args:
        alpha: concentration of the Dirichlet prior (003 uses beta in {0.1, 0.5, 1}; 004 Dir-0.3).
        min_samples: smallest acceptable client size.
        max_attempts: redraws before giving up with an error.
    """
    if alpha <= 0:
        raise ConfigError("scenario.alpha", alpha, "a number > 0")
    if min_samples * num_clients > len(labels):
        raise ConfigError(
            "scenario.min_samples", min_samples, f"at most {len(labels) // num_clients} for {num_clients} clients"
        )
    classes = np.unique(labels)
    for _ in range(max_attempts):
        shares: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for cls in classes:
            members = rng.permutation(np.flatnonzero(labels == cls))
            proportions = rng.dirichlet(np.full(num_clients, alpha))
            cuts = (np.cumsum(proportions)[:-1] * len(members)).astype(int)
            for client, part in enumerate(np.split(members, cuts)):
                shares[client].append(part)
        parts = [np.sort(np.concatenate(s)) for s in shares]
        if min(len(p) for p in parts) >= min_samples:
            return parts
    raise ConfigError(
        "scenario.alpha", alpha, f"a value for which every client gets >= {min_samples} samples (raise alpha or lower min_samples)"
    )

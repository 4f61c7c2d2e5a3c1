"""Drift events in a run's per-client rows: a client whose ground-truth distribution changed between two of its
evaluated rounds, what its accuracy was before and after, and how many rounds it took to recover. The runtime's drift
metrics (`fedbench.runtime.drift_records`) and the figures aligned on drifts (`fedbench.tracking.drift_plots`) both
read them from here, so that the two cannot count drifts differently."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

RECOVERY_MARGIN = 0.01
"""A client has recovered from a drift when its local accuracy is within this of its accuracy before the drift."""


@dataclass(frozen=True)
class DriftEvent:
    """A client whose distribution changed between two of its evaluated rounds."""

    client: int
    round: int
    before: float
    """Its accuracy at its previous evaluated round, on the distribution it held then."""
    after: float
    """Its accuracy at the round it drifted, on the new distribution."""
    recovery_rounds: int | None
    """Evaluated rounds until it was back within the margin; None: not by the time it drifted again or the run ended."""
    since: tuple[float, ...] = ()
    """Its accuracy at each evaluated round from the drift on, while it held the new distribution (`after` first)."""


def drift_events(table: Mapping[str, np.ndarray], margin: float = RECOVERY_MARGIN) -> list[DriftEvent]:
    """Every drift event in a run's per-client rows (clients with an unknown distribution, -1, have none)."""
    events = []
    rounds, clients = np.asarray(table["round"]), np.asarray(table["client"])
    for client in np.unique(clients):
        rows = np.flatnonzero(clients == client)
        rows = rows[np.argsort(rounds[rows], kind="stable")]
        held = np.asarray(table["distribution"])[rows]
        accuracy = np.asarray(table["acc_local"], dtype=float)[rows]
        for i in range(1, len(rows)):
            if held[i] == held[i - 1] or held[i] < 0 or held[i - 1] < 0:
                continue
            end = i + 1
            while end < len(rows) and held[end] == held[i]:  # until it drifts again or the run ends
                end += 1
            since = tuple(float(a) for a in accuracy[i:end])
            back = [k for k, a in enumerate(since) if a >= accuracy[i - 1] - margin]
            events.append(
                DriftEvent(
                    int(client), int(rounds[rows[i]]), accuracy[i - 1], accuracy[i], back[0] if back else None, since
                )
            )
    return sorted(events, key=lambda e: (e.round, e.client))

"""Callbacks: everything around the round loop (MLflow, progress bars, Tune reporting) hooks in here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from fedbench.core.runspec import RunSpec

RoundRecord = dict[str, float]

RESUMED_TAG = "fedbench.resumed_from_round"
"""The tag of a run that went on from a checkpoint (`fedbench.runtime.checkpoint`): the round it was written after."""
NUMERICS_TAG = "clients.numerics"
"""The run's workers' `numerics` (`fedbench.runtime.worker`), distinct values joined by ` | `: what its numbers depend
on besides its spec."""


@dataclass
class RunResult:
    """How a run ended: its status, the reason if it failed, every round's record and the summary."""

    spec: RunSpec
    status: Literal["FINISHED", "FAILED"]
    history: list[RoundRecord] = field(default_factory=list)
    final: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    traceback: str = ""
    tags: dict[str, str] = field(default_factory=dict)
    """Where the run ran, for its MLflow run's tags: each client worker's node, GPU ids and device."""
    per_client: dict[str, Any] = field(default_factory=dict)
    """Every client's numbers at every evaluated round, as columns (`fedbench.runtime.per_client`); empty when the
    run evaluated no round."""
    models: list[tuple[Any, list[int]]] = field(default_factory=list)
    """Under `RunSpec.log_models`, each distinct final model (a torch module) and the clients evaluated with it;
    empty otherwise, and for a failed run."""


class Callback:
    """No-op base; override what you need. `on_round_end` returning True asks the runner to stop early."""

    def on_run_start(self, spec: RunSpec) -> None:
        pass

    def on_round_end(self, spec: RunSpec, record: RoundRecord) -> bool | None:
        return None

    def on_run_end(self, result: RunResult) -> None:
        pass

    def on_run_stopped(self, spec: RunSpec, rounds_done: int, reason: str) -> None:
        """The run was stopped before it ended (Ctrl-C, SIGTERM, a store that can record nothing more): no
        `on_run_end` follows; `rounds_done` rounds were reported. Called best-effort, the process is stopping."""

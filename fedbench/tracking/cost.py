"""What a task's runs will cost before they run (`--dry-run`): how many the store already holds finished, and the
client compute the rest need, in CPU- (and GPU-) hours.

A run's cost is read off the store's finished runs of the same configuration, any seed (`kind_of`): their client
compute per round times the run's rounds. A configuration never run has no such measurement; a one-round probe
(`--dry-run --probe`) times one round of each. Client compute is what the clients' jobs took, each on its worker's
`resources.client_cpus` (and `client_gpus`): what a cluster is booked for, not the server's aggregation or start-up.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fedbench.core import metrics as M
from fedbench.core.runspec import RunSpec
from fedbench.tracking.tags import MAX_PARAM_LENGTH

if TYPE_CHECKING:
    import pandas as pd

KIND_LEFT_OUT = ("seed", "rounds", "run_name", "task", "log_models")
"""Fields a run's cost per round does not depend on (resources.* neither: they place the clients, the work is the
same)."""
COMPUTE = M.TOTAL_PREFIX + M.TIME_CLIENT_COMPUTE_S


def kind_of(spec: RunSpec) -> dict[str, str]:
    """`spec`'s fields as the store records them (text), those a run's cost per round depends on."""
    return {
        k: str(v)[:MAX_PARAM_LENGTH]
        for k, v in spec.flat().items()
        if v is not None and k not in KIND_LEFT_OUT and not k.startswith("resources.")
    }


@dataclass
class CostEstimate:
    """The runs a command would train, what the store says of them, and their client compute."""

    planned: int
    finished: int = 0
    """Runs the store holds a finished run of."""
    skips_finished: bool = True
    """Whether the command skips those (`fedbench run` does; a new sweep trains them again)."""
    cpu_s: float = 0.0
    gpu_s: float = 0.0
    measured: int = 0
    """Runs (of those to train) whose cost was measured, in the store or by a probe."""
    probed: int = 0
    """Of `measured`, those timed by a one-round probe of their configuration, not read off the store."""
    unmeasured: list[RunSpec] = field(default_factory=list)
    """Runs to train of configurations never measured: one of each is what a probe times."""

    def lines(self, store: str) -> list[str]:
        """What the dry run prints under its table."""
        to_train = self.planned - (self.finished if self.skips_finished else 0)
        said = f"store {store}: {self.finished} of {self.planned} runs finished already"
        if self.finished:
            said += (
                " (skipped)"
                if self.skips_finished
                else " (a new sweep trains them again: --skip-finished leaves them out, --resume its own)"
            )
        lines = [said]
        if self.measured:
            cost = amount(self.cpu_s, "CPU") + (f" and {amount(self.gpu_s, 'GPU')}" if self.gpu_s else "")
            cpus = os.cpu_count() or 1
            how = {
                0: "all from the store's runs of their configuration",
                self.measured: "all by a one-round probe",
            }.get(self.probed, f"{self.probed} by a one-round probe, the rest from the store's runs")
            lines.append(
                f"{self.measured} of the {to_train} to train ({how}): "
                f"about {cost} of client compute (at least {amount(self.cpu_s / cpus)} on this machine's {cpus} CPUs)"
            )
        if self.unmeasured:
            kinds = len({tuple(kind_of(s).items()) for s in self.unmeasured})
            lines.append(
                f"{len(self.unmeasured)} of the {to_train} to train ({kinds} configurations) were never run in this "
                "store, so not counted: `--dry-run --probe` times one round of each"
            )
        return lines


def amount(seconds: float, resource: str = "") -> str:
    """`3.1 CPU-hours`, `4.2 CPU-minutes`, `12 CPU-seconds` (without a resource: `3.1 hours`, ...)."""
    prefix = f"{resource}-" if resource else ""
    if seconds >= 360:
        return f"{seconds / 3600:.1f} {prefix}hours"
    if seconds >= 60:
        return f"{seconds / 60:.1f} {prefix}minutes"
    return f"{seconds:.0f} {prefix}seconds"


def estimate(
    specs: Sequence[RunSpec],
    runs: pd.DataFrame | None,
    skips_finished: bool = True,
    probe: Callable[[RunSpec], float] | None = None,
) -> CostEstimate:
    """The cost of `specs` given the store's `runs` of their experiment (fedbench's columns; None: the store holds
    none, and pandas is not imported); `probe(spec)`, when given, measures the seconds of client compute of one
    round of a configuration the store never ran."""
    finished_runs = runs[runs["status"] == "FINISHED"] if runs is not None and len(runs) else None
    done = set(finished_runs["run_hash"]) if finished_runs is not None else set()
    result = CostEstimate(len(specs), sum(s.run_hash in done for s in specs), skips_finished)
    per_round: dict[tuple, float] = {}
    probed: set[tuple] = set()
    for spec in specs:
        if skips_finished and spec.run_hash in done:
            continue
        kind = kind_of(spec)
        key = tuple(kind.items())
        if key not in per_round:
            per_round[key] = measured_per_round(finished_runs, kind)
            if math.isnan(per_round[key]) and probe is not None:
                per_round[key] = probe(spec)
                probed.add(key)
        if math.isnan(per_round[key]):
            result.unmeasured.append(spec)
            continue
        seconds = per_round[key] * spec.rounds
        result.measured += 1
        result.probed += key in probed
        result.cpu_s += seconds * spec.resources.client_cpus
        result.gpu_s += seconds * spec.resources.client_gpus
    return result


def measured_per_round(runs: pd.DataFrame | None, kind: Mapping[str, Any]) -> float:
    """The median client compute per round of the finished `runs` of configuration `kind`; NaN for none."""
    if runs is None or not len(runs) or COMPUTE not in runs or any(k not in runs for k in kind):
        return math.nan
    same = runs
    for name, value in kind.items():
        same = same[same[name].astype(str) == value]
    if not len(same):
        return math.nan
    return float((same[COMPUTE].astype(float) / same["rounds"].astype(float)).median())

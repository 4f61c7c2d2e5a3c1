"""The store interface every reader reads runs through: runs as a table in fedbench's own column names, a metric's
history, an artifact, a sweep's parent and children; `fedbench.tracking.mlflow_store` implements it over MLflow.

The leaderboards, plots, exports, reports and `--resume` never name MLflow's columns (`params.x`, `metrics.x`,
`tags.x`): a second store, or MLflow renaming its columns, is one implementation of `RunStore`, not an edit of
every reader.

The table `RunStore.runs` returns has one row per run and these columns:

- fixed: `run_id`, `status` (`RUNNING`, `FINISHED`, `FAILED`, `KILLED`), `start_time`, `end_time`, `run_label` (the
  run's name as recorded: the RunSpec's label);
- RunSpec fields by their dotted names, as text (`algorithm.name`, `scenario.alpha`, `seed`) and `run_hash`:
  missing (NaN) where a run does not have the field;
- metrics by key (`acc_local_mean` for its last logged value, `final.acc_local_mean`, `total.comm_up_bytes`), as
  floats, in today's spelling (a store written before the dot said `final/acc_local_mean`; it reads as
  `final.acc_local_mean`);
- tags as `tag:<name>` (`tag:fedbench.retried`, `tag:failure_reason`).

Why these names cannot collide:
- a tag column holds a colon, which no field (Python identifiers joined by dots) and no metric key (snake_case,
  joined by dots) holds;
- a field is `run_hash`, a top-level RunSpec field (`seed`, `rounds`) or starts with a RunSpec section
  (`algorithm.`, `scenario.`; `is_field` says which); a summary metric starts with `final.` or `total.`, which is
  no section, and no metric key of `fedbench.core.metrics` is a top-level field (tests/tracking/test_store.py
  holds them to it). An algorithm's own round metric could still be named like a field (`rounds`): a store refuses
  to read such a run (`NameClashError`) rather than let one column stand for both. A recorded param that today's
  RunSpec has no field for (a field since removed) reads as `param:<name>`, under a colon too;
- no field and no metric key is a fixed column's name (the same test).
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pandas as pd

from fedbench.core.errors import FedbenchError

RUN_ID = "run_id"
STATUS = "status"
START_TIME = "start_time"
END_TIME = "end_time"
RUN_LABEL = "run_label"
FIXED = (RUN_ID, STATUS, START_TIME, END_TIME, RUN_LABEL)
"""The columns every run has, whatever it recorded."""

RUN_HASH = "run_hash"
"""The field naming the RunSpec a run ran (recorded beside the RunSpec's own fields)."""

TAG_PREFIX = "tag:"
PARAM_PREFIX = "param:"
"""A recorded param that is no field of today's RunSpec."""

FINISHED = "FINISHED"
FAILED = "FAILED"


def tag(name: str) -> str:
    """The column of tag `name` (`tag("fedbench.retried")` is `tag:fedbench.retried`)."""
    return TAG_PREFIX + name


@functools.cache
def _runspec_names() -> tuple[frozenset[str], frozenset[str]]:
    """RunSpec's top-level scalar fields and its sections (the fields that hold a spec of their own)."""
    from fedbench.core.runspec import RunSpec

    hints = typing.get_type_hints(RunSpec)
    sections = {f.name for f in dataclasses.fields(RunSpec) if dataclasses.is_dataclass(hints[f.name])}
    top = {f.name for f in dataclasses.fields(RunSpec)} - sections
    return frozenset(top | {RUN_HASH}), frozenset(sections)


def is_field(name: str) -> bool:
    """Whether column `name` is a RunSpec field (or `run_hash`): a top-level field or a section's (`algorithm.mu`)."""
    top, sections = _runspec_names()
    return name in top or ("." in name and name.split(".", 1)[0] in sections)


def is_metric(name: str) -> bool:
    """Whether column `name` is a metric: neither fixed, nor a field, nor under a `prefix:` namespace."""
    return name not in FIXED and ":" not in name and not is_field(name)


def field_columns(runs: pd.DataFrame) -> list[str]:
    """The RunSpec fields `runs` records (`run_hash` included), in column order."""
    return [str(c) for c in runs.columns if is_field(str(c))]


def metric_columns(runs: pd.DataFrame) -> list[str]:
    """The metrics `runs` records, in column order."""
    return [str(c) for c in runs.columns if is_metric(str(c))]


class NameClashError(FedbenchError):
    """A run recorded a metric under a name that is a RunSpec field's or a fixed column's."""

    def __init__(self, run_id: str, key: str):
        super().__init__(
            f"run {run_id} recorded a metric named {key!r}, which is the name of a RunSpec field or of a run's "
            f"{', '.join(FIXED)}: rename the metric (an algorithm's `round_metrics`), or it would stand for both"
        )


def check_metric_keys(run_id: str, keys: Iterable[str]) -> None:
    """Refuse metric `keys` of run `run_id` that a field or a fixed column would answer to (`NameClashError`)."""
    for key in keys:
        if not is_metric(key):
            raise NameClashError(run_id, key)


@dataclass(frozen=True)
class MetricPoint:
    """One logged value of a metric: its step (the round, for a per-round metric), value and time (ms)."""

    step: int
    value: float
    timestamp: int


@dataclass(frozen=True)
class StoredRun:
    """A run of a sweep (its parent or a child): its id, status, start (ms since the epoch) and tags by their own
    names."""

    run_id: str
    status: str
    start_time: int
    tags: Mapping[str, str]


class RunStore(Protocol):
    """What readers ask of a store of runs. Every method waits out a store another process holds for a moment."""

    def runs(self, experiment: str) -> pd.DataFrame:
        """Every run of `experiment` (sweep parents included), a row each, in the columns this module describes.

        Raises:
            ConfigError: no such store, or no such experiment in it.
        """
        ...

    def metric_history(self, run_id: str, key: str) -> list[MetricPoint]:
        """Every value run `run_id` logged of metric `key` (today's spelling), in the order the store keeps them."""
        ...

    def has_artifact(self, run_id: str, path: str) -> bool:
        """Whether run `run_id` holds an artifact at `path` (`per_client.parquet`, `plots/curves.png`)."""
        ...

    def artifact(self, run_id: str, path: str, into: Path) -> Path:
        """Run `run_id`'s artifact at `path`, copied into folder `into`; where it now is."""
        ...

    def sweep_parent(self, experiment: str, sweep: str | None = None) -> StoredRun | None:
        """The most recently started parent run of sweep `sweep` (of any sweep when None) in `experiment`; None when
        there is none (or no such store or experiment)."""
        ...

    def sweep_children(self, experiment: str, parent_run_id: str) -> list[StoredRun]:
        """Every child run of sweep parent `parent_run_id`, one per trial that started."""
        ...

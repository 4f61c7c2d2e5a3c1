"""Search spaces (`search_spaces/*.yaml`): distributions over RunSpec fields, conditional on the algorithm.

    name: feroma_tau
    description: what it tunes and why
    space:
      optimizer.lr: {loguniform: [0.001, 0.05]}   # any RunSpec field, by dotted path, in every trial
      algorithm:                                  # algorithm.name is sampled from these keys; each lists
        feroma: {tau: {uniform: [0.01, 0.2]}}     #   only its own Config fields, so a trial carries
        fedavg: {}                                #   the active algorithm's parameters and no others

Distributions: `uniform: [low, high]`, `loguniform: [low, high]` (low > 0), `int: [low, high]` (both
inclusive), `categorical: [a, b, ...]`. A range's bound is a number, or a numeric run field by dotted path
with an optional `+ N` / `- N` (`int: [2, rounds - 1]`), evaluated on the run the search samples on, overrides
included, so a range follows `--set rounds=4` instead of outgrowing the run. A range that can sample a degenerate
run (`DegenerateRunWarning`, which a task only warns of: a warm-up as long as the run makes FEROMA FedAvg) is
refused, naming the field at fault. The space becomes an Optuna define-by-run function (TPE,
`seed_averaged_search`); every problem is found at load, before any trial starts.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from fedbench.config.task import TaskLoader, check_expanded_size, resolve_run, set_path
from fedbench.core.errors import ConfigError, DegenerateRunWarning
from fedbench.core.names import check_name
from fedbench.core.runspec import RunSpec

if TYPE_CHECKING:
    from optuna.trial import Trial

KINDS = ("uniform", "loguniform", "int", "categorical")
ALGORITHM = "algorithm"


BOUND = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?:([+-])\s*(\d+(?:\.\d+)?)\s*)?$")
"""A range bound that refers to a run field: `rounds`, `rounds - 1`, `local_epochs + 2`."""


def is_bound(value: Any) -> bool:
    """A finite number, or a run field with an optional offset (`BOUND`)."""
    if isinstance(value, str):
        return BOUND.match(value) is not None
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def bound_value(field: str, bound: Any, run: Mapping[str, Any]) -> int | float:
    """A bound's number: itself, or its run field's value (in the run the search samples on) plus its offset."""
    if not isinstance(bound, str):
        return bound
    match = BOUND.match(bound)
    assert match is not None, bound  # checked when the space loaded
    name, sign, offset = match.groups()
    value = run.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        numeric = sorted(k for k, v in run.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
        raise ConfigError(field, bound, f"a bound naming a numeric field of the run: {', '.join(numeric)}")
    number = (float(offset) if "." in offset else int(offset)) if offset else 0
    return value + number if sign != "-" else value - number


def check_range(field: str, kind: str, values: list, written: list | None = None) -> None:
    """[low, high] as `kind` takes it; `written`: the bounds as the file wrote them, quoted beside their values."""
    shown = values if written is None else f"{written} = {values}"
    low, high = values
    if low >= high:
        raise ConfigError(field, shown, f"low < high (got low={low}, high={high})")
    if kind == "loguniform" and low <= 0:
        raise ConfigError(field, shown, "low > 0 for loguniform")
    if kind == "int" and not all(isinstance(v, int) for v in values):
        raise ConfigError(field, shown, "integer bounds for int")


@dataclass(frozen=True)
class Distribution:
    """One sampled field. `values` is [low, high] for ranges, the choices for `categorical`."""

    path: str
    kind: str
    values: tuple[Any, ...]
    written: tuple[Any, ...] | None = None
    """The bounds as the file wrote them, where some name a run field (`rounds - 1`) and `values` are resolved."""

    @classmethod
    def parse(cls, where: str, path: str, raw: Any) -> Distribution:
        field = f"{where}.{path}"
        if not isinstance(raw, Mapping) or len(raw) != 1 or next(iter(raw)) not in KINDS:
            raise ConfigError(field, raw, "one of {" + ", ".join(f"{k}: [...]" for k in KINDS) + "}")
        kind, values = next(iter(raw.items()))
        if not isinstance(values, list) or not values:
            raise ConfigError(field, values, f"a non-empty list for {kind}")
        if kind != "categorical":
            if len(values) != 2 or not all(is_bound(v) for v in values):
                raise ConfigError(
                    field,
                    values,
                    f"[low, high] for {kind}: two finite numbers, or a run field with an "
                    "optional + or - a number (`rounds - 1`)",
                )
            if not any(isinstance(v, str) for v in values):
                check_range(field, kind, values)
        return cls(path, kind, tuple(values))

    def resolved(self, where: str, run: Mapping[str, Any]) -> Distribution:
        """This distribution with each bound that names a run field (`rounds - 1`) evaluated on `run` (a RunSpec's
        flat fields), and the range checked again."""
        if self.kind == "categorical" or not any(isinstance(v, str) for v in self.values):
            return self
        field = f"{where}.{self.path}"
        values = [bound_value(field, v, run) for v in self.values]
        check_range(field, self.kind, values, written=list(self.values))
        return Distribution(self.path, self.kind, tuple(values), written=self.values)

    def text(self) -> str:
        """`int [2, 8]` (`int [2, 'rounds'] = [2, 4]` where a bound names a run field), as a message quotes it."""
        shown = list(self.values) if self.written is None else f"{list(self.written)} = {list(self.values)}"
        return f"{self.kind} {shown}"

    def suggest(self, trial: Trial, name: str) -> Any:
        """Draw this field from an Optuna trial."""
        if self.kind == "categorical":
            return trial.suggest_categorical(name, list(self.values))
        if self.kind == "int":
            return trial.suggest_int(name, *self.values)
        return trial.suggest_float(name, *self.values, log=self.kind == "loguniform")

    def probes(self) -> tuple[Any, ...]:
        """Values that must all make a valid RunSpec: both ends of a range, every choice."""
        return self.values


@dataclass(frozen=True)
class SearchSpace:
    """Common distributions plus, per algorithm, that algorithm's own (empty branches: nothing to tune)."""

    name: str
    common: tuple[Distribution, ...]
    branches: tuple[tuple[str, tuple[Distribution, ...]], ...] = ()
    description: str = ""

    @property
    def references(self) -> tuple[str, ...]:
        """The algorithms listed with nothing to tune (FedAvg beside FEROMA's tau): each runs once per seed as the
        search's reference instead of being sampled, where TPE would pick it again and again. Where the space also
        samples common fields (a learning rate for every trial), every algorithm has something to tune."""
        return () if self.common else tuple(name for name, own in self.branches if not own)

    @property
    def tuned(self) -> tuple[tuple[str, tuple[Distribution, ...]], ...]:
        """The branches the sampler chooses among: all but the references."""
        return tuple((name, own) for name, own in self.branches if name not in self.references)

    @property
    def fixed(self) -> dict[str, Any]:
        """What every sample sets without sampling it: the algorithm, where one alone is tuned (a one-choice
        categorical would only add a useless axis to every view of the study)."""
        return {f"{ALGORITHM}.name": self.tuned[0][0]} if len(self.tuned) == 1 else {}

    def sample(self, trial: Trial) -> dict[str, Any]:
        """Optuna define-by-run: the algorithm first, then only its parameters (flat dotted names); returns the
        sample, `fixed` included."""
        for dist in self.common:
            dist.suggest(trial, dist.path)
        if self.branches:
            name = self.fixed.get(f"{ALGORITHM}.name") or trial.suggest_categorical(
                f"{ALGORITHM}.name", [n for n, _ in self.tuned]
            )
            for dist in dict(self.tuned)[name]:
                dist.suggest(trial, f"{ALGORITHM}.{dist.path}")
        return self.complete(trial.params)

    def complete(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """A trial's sampled parameters as a sample: `fixed` and them."""
        return {**self.fixed, **params}

    def resolved(self, base: dict[str, Any]) -> SearchSpace:
        """This space with every bound that names a run field evaluated on `base`'s run (`--set rounds=4` included)."""
        run = apply(base, {}).flat()
        common = tuple(d.resolved("space", run) for d in self.common)
        branches = tuple(
            (name, tuple(d.resolved(f"space.{ALGORITHM}.{name}", run) for d in own)) for name, own in self.branches
        )
        return dataclasses.replace(self, common=common, branches=branches)

    def check(self, base: dict[str, Any]) -> None:
        """Every probe value of every field must give a valid RunSpec on `base` (unknown fields and values
        out of a field's range raise here, naming the space and the field). A trial sets all of its fields at
        once, so each field is probed with the others at their first probe value, not at their defaults (a
        branch may fix a field whose default this task refuses, FedProxFT's `ft_rounds`)."""
        branches = self.branches or ((None, ()),)
        for algorithm, own in branches:
            dists = {d.path: d for d in self.common} | {f"{ALGORITHM}.{d.path}": d for d in own}
            fixed = {} if algorithm is None else {f"{ALGORITHM}.name": algorithm}
            fixed.update({path: dist.probes()[0] for path, dist in dists.items()})
            for path, dist in dists.items():
                for value in dist.probes():
                    _probe(self.name, base, {**fixed, path: value}, path, dists)
            if not dists:  # the algorithm alone
                _probe(self.name, base, fixed, f"{ALGORITHM}.name", dists)


def _probe(
    space: str, base: dict[str, Any], sample: Mapping[str, Any], path: str, dists: Mapping[str, Distribution]
) -> None:
    """`sample` (`path` at a probe value, the others at their first) must make a valid RunSpec on `base`, and not a
    degenerate one (`DegenerateRunWarning`): a task may ask for FEROMA with a warm-up as long as the run, but a
    search would spend trials on it unasked. The error names the field at fault where the space samples it (a
    warm-up's range, not the tau probed beside it), else `path`."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DegenerateRunWarning)
            apply(base, sample)
    except ConfigError as exc:
        at = exc.field if exc.field in dists else path
        if at == exc.field:  # the field at fault is the sampled one: its own error, said once
            raise ConfigError(f"search space {space}: {at}", exc.value, exc.allowed) from exc
        raise ConfigError(
            f"search space {space}: {at}", sample[at], f"a value that gives a valid run (here: {exc})"
        ) from exc
    except DegenerateRunWarning as exc:
        if exc.field not in dists:  # the task's value, or the method's default, in every trial
            raise ConfigError(
                f"search space {space}: {exc.field}",
                "not sampled",
                f"sampled, or set in the task, so that every trial trains the method: as it is, every trial has {exc}",
            ) from None
        raise ConfigError(
            f"search space {space}: {exc.field}",
            dists[exc.field].text(),
            "a range whose every value "
            f"trains the method this task runs; at {sample[exc.field]}: {exc} (a bound may name a run "
            "field: `rounds - 1`)",
        ) from None


def apply(base: dict[str, Any], sample: Mapping[str, Any]) -> RunSpec:
    """The RunSpec of `base` (a task's raw run) with sampled dotted paths set. A sampled algorithm name
    replaces the whole algorithm section, so the base's algorithm parameters do not leak into another one."""
    raw = copy.deepcopy(base)
    if f"{ALGORITHM}.name" in sample:
        raw[ALGORITHM] = {"name": sample[f"{ALGORITHM}.name"]}
    for path, value in sample.items():
        if path != f"{ALGORITHM}.name":
            set_path(raw, path, value)
    return resolve_run(raw)


def load_search_space(path: str | Path) -> SearchSpace:
    """Parse a search-space file; structure errors name the file's field."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("--search", str(path), "an existing search-space YAML file (see search_spaces/)")
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=TaskLoader) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError("--search", str(path), f"a UTF-8 text file (byte {exc.start} is not UTF-8)") from None
    except yaml.YAMLError as exc:
        raise ConfigError("--search", str(path), f"valid YAML ({' '.join(str(exc).split())})") from None
    if not isinstance(raw, Mapping):
        raise ConfigError("--search", str(path), "a YAML mapping with a `space:` key (see search_spaces/)")
    check_expanded_size("--search", str(path), raw)
    name = check_name(f"{path.name}: name", raw.get("name", path.stem))
    space = raw.get("space")
    if not isinstance(space, Mapping) or not space:
        raise ConfigError(f"{path.name}: space", space, "a mapping of field paths to distributions")
    common = tuple(Distribution.parse("space", p, d) for p, d in space.items() if p != ALGORITHM)
    branches: tuple = ()
    if ALGORITHM in space:
        algorithms = space[ALGORITHM]
        if not isinstance(algorithms, Mapping) or not algorithms:
            raise ConfigError("space.algorithm", algorithms, "a mapping: algorithm name -> {its field: distribution}")
        branches = tuple(
            (algo, tuple(Distribution.parse(f"space.algorithm.{algo}", p, d) for p, d in (params or {}).items()))
            for algo, params in algorithms.items()
        )
    found = SearchSpace(name, common, branches, raw.get("description", ""))
    if not found.common and not found.tuned:
        raise ConfigError(
            f"{path.name}: space",
            dict(space),
            "at least one distribution to sample: every algorithm listed has nothing to tune",
        )
    return found

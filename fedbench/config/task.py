"""TaskSpec: a task file (base fields, a grid over any fields, seeds) expanded into RunSpecs.

A task file is a RunSpec's fields at the top level plus task-level keys:

    name: quickstart            # the MLflow experiment
    seeds: [0, 1, 2]
    grid:                       # dotted paths -> lists of values; the Cartesian product is run
      algorithm: [fedavg, local]
      scenario.alpha: [0.1, 1.0]
    max_failures: 1             # `fedbench sweep`: restarts of a trial whose process died (default 1)
    max_runs: 20000             # the most runs the grid and seeds may expand to (the default; counted first)

`grid:` may also be a list of such mappings (blocks), for a suite whose experiments vary different axes
(001's E1 sweeps K and sparsity, its E4b the covariate clusters): each block is expanded on its own and the
runs are concatenated, a run two blocks share kept once.

`--set key=value` (value parsed as YAML) overrides a field in every expanded run; overriding a path that
is a grid axis replaces that axis. `--set seeds=[0]`, `--set name=...` and `--set grid.X=[...]` change
the task itself (`grid.X` sets axis X in every block).

A suite runs at several scales from one file: the fields as written are its `paper` profile, and
`profiles:` names smaller ones as overrides (the same dotted paths `--set` takes), applied before the
command line's. A profile other than `paper` gets its own experiment, `<name>-<profile>`, so a smoke run
never lands in the paper run's leaderboard:

    profiles:
      smoke: {rounds: 2, seeds: [42], grid.scenario.preset: [feroma/label_skew/medium]}

`reference:` holds the published numbers a reproduction report compares with (`fedbench.config.reference`);
its fields are checked against the paper profile's runs (a smaller profile need not have them all).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import math
import os
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fedbench.config.parse import components_parsed_once, parse_dataset, parse_run
from fedbench.config.reference import ReferenceTable, parse_reference
from fedbench.core.errors import ConfigError, IgnoredSettingWarning
from fedbench.core.names import check_name
from fedbench.core.runspec import RunSpec, changed_params

TASK_KEYS = ("name", "description", "seeds", "grid", "profile", "profiles", "reference", "max_failures", "max_runs")

DEFAULT_MAX_RUNS = 20_000
"""Runs a task may expand to unless it says `max_runs:`; the largest paper suite (feroma_drift) has 2,340, and a
grid of two long axes (300 x 300: 90,000 runs) would otherwise take minutes to validate before saying anything."""

MAX_TASK_BYTES = 4 * 2**20
"""The largest task file read (the largest suite's is 20 KB)."""

MAX_TASK_NODES_ENV = "FEDBENCH_MAX_TASK_NODES"
DEFAULT_MAX_TASK_NODES = 200_000
"""Values (mappings, lists, scalars) a task file may hold with its YAML aliases expanded (the largest suite: about
5,000): nine levels of nine aliases each write 9^9 values in a few lines (a "billion laughs"), which every later
step that walks the mapping would expand. Raised with the environment variable FEDBENCH_MAX_TASK_NODES."""

PAPER_PROFILE = "paper"
"""The profile a task file's fields describe as written: the publication's setting."""

DEFAULT_MAX_FAILURES = 1
"""Times a sweep restarts a trial whose process died (a node lost, a killed process) before it counts as FAILED.
A run that fails by itself (an exception, a diverging client) ends its trial normally and is never restarted:
the same seed would fail the same way."""

Override = str | tuple[str, Any]
"""`key.path=value` text (value parsed as YAML), or a (dotted path, value) pair."""

Grid = tuple[tuple[str, tuple[Any, ...]], ...]
"""One grid block: (dotted path, values) axes whose Cartesian product is run."""


@dataclass(frozen=True)
class TaskSpec:
    """A family of runs: shared base fields, grid axes, seeds and command-line overrides."""

    name: str
    base: dict[str, Any]
    grid: tuple[Grid, ...] = ((),)
    """The grid blocks, each expanded on its own (one block unless `grid:` is a list)."""
    seeds: tuple[int, ...] = (0,)
    overrides: tuple[tuple[str, Any], ...] = ()
    description: str = ""
    profile: str = PAPER_PROFILE
    profiles: tuple[str, ...] = (PAPER_PROFILE,)
    """Every profile the task file offers, `paper` first."""
    reference: tuple[ReferenceTable, ...] = ()
    """The published numbers the task's reproduction report compares with (its `reference:` tables)."""
    source: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    """The mapping the task was made from and the overrides it was given: what `with_overrides` starts again from."""
    given: tuple[tuple[str, Any], ...] = field(default=(), repr=False, compare=False)
    max_failures: int = DEFAULT_MAX_FAILURES
    runs: tuple[RunSpec, ...] = field(default=(), repr=False, compare=False)
    """The expansion `load_task` validated, kept: the sweep's plan reads the same runs again, thousands of
    configurations for a paper-scale suite."""

    def expand(self) -> list[RunSpec]:
        """Every point of every grid block times every seed, validated; duplicates (same run hash) kept once."""
        return list(self.runs or self._expansion())

    def _expansion(self) -> tuple[RunSpec, ...]:
        specs: dict[str, RunSpec] = {}
        with components_parsed_once(), warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always")
            for block, grid in enumerate(self.grid):
                for point in itertools.product(*(values for _, values in grid)):
                    for spec in self._seeded(resolve_run(self.run_dict(point, None, block))):
                        if spec.run_name is None:
                            axes = {axis: v for (axis, _), v in zip(grid, point, strict=True)}
                            spec = spec.replace(run_name=run_name(spec, axes))
                        specs.setdefault(spec.run_hash, spec)
        shared = len({spec.algorithm.name for spec in specs.values()}) > 1
        for warning in {(w.category, str(w.message)): w for w in said}.values():  # each said once
            if not (shared and issubclass(warning.category, IgnoredSettingWarning)):  # set for the other methods
                warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
        return tuple(specs.values())

    def _seeded(self, first: RunSpec) -> list[RunSpec]:
        """A grid point's run at every seed, parsed once: the seed is a plain integer that no check reads, so the
        other seeds' runs are copies with it replaced (a 2,340-run grid of 5 seeds parses 468 points). An explicit
        --set seed=N is the only seed."""
        if self.seed_overridden:
            return [first]
        return [first.replace(seed=seed) if seed != first.seed else first for seed in self.seeds]

    @property
    def seed_overridden(self) -> bool:
        """Whether an override sets `seed` (`--set seed=N`): it then wins over the seed list."""
        return any(path == "seed" for path, _ in self.overrides)

    def grid_fields(self) -> dict[str, list[Any]] | list[dict[str, list[Any]]]:
        """The grid as a task file writes it: one mapping, or a list of them for several blocks."""
        blocks = [{axis: list(values) for axis, values in grid} for grid in self.grid]
        return blocks[0] if len(blocks) == 1 else blocks

    def with_overrides(self, overrides: Sequence[Override]) -> TaskSpec:
        """This task with more overrides, applied after its own as if all had been given when it was loaded."""
        if not overrides:
            return self
        return task_from_dict(self.source, [*self.given, *parse_overrides(overrides)])

    def run_dict(self, point: Sequence[Any] | None = None, seed: int | None = None, block: int = 0) -> dict[str, Any]:
        """One run's raw mapping: the base, a point of grid block `block` (default: every axis's first value),
        the overrides and a seed (default: the first); what a search samples on top of."""
        grid = self.grid[block]
        point = [values[0] for _, values in grid] if point is None else point
        raw = copy.deepcopy(self.base)
        for (path, _), value in zip(grid, point, strict=True):
            set_path(raw, path, copy.deepcopy(value))
        for path, value in self.overrides:
            set_path(raw, path, copy.deepcopy(value))
        raw["task"] = self.name
        if not self.seed_overridden:
            raw["seed"] = self.seeds[0] if seed is None else seed
        return raw


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A key written twice in one YAML mapping."""


class TaskLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """PyYAML's safe loader (in C where it was built with libyaml: feroma_drift.yaml reads in 10 ms, not 110) that
    refuses a key written twice in one mapping, which YAML would silently resolve to the last value."""

    def construct_mapping(self, node, deep=False):
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
            try:
                if key in lines:
                    raise DuplicateKeyError(
                        None, None, f"the key {key!r} is written twice (lines {lines[key]} and {line})"
                    )
            except TypeError:  # an unhashable key: the base constructor says what is wrong with it
                break
            lines[key] = line
        return super().construct_mapping(node, deep)


LEARNER_FIELDS = ("algorithm", "scored_round", "seed", "run_name", "task", "resources", "log_models")
"""What a data configuration leaves out: how its federation is learnt (the algorithm and its parameters) and which
round of it is scored, the seed, and the run's name, task, placement and whether it logs its models."""


def data_configuration(spec: RunSpec) -> str:
    """What a run learns from, as a key: every field but `LEARNER_FIELDS` (dataset, scenario, model, training).
    A paper's 'configuration' count (001: 97) counts these: runs differing only in algorithm or seed share one."""
    kept = {k: v for k, v in spec.flat().items() if k.split(".")[0] not in LEARNER_FIELDS}
    return repr(sorted(kept.items()))


def count_data_configurations(specs: Sequence[RunSpec]) -> int:
    """How many data configurations `specs` cover (see `data_configuration`)."""
    return len({data_configuration(s) for s in specs})


def run_name(spec: RunSpec, point: dict[str, Any]) -> str:
    """A run's name from what varies in its task: the algorithm with the parameters it sets away from their
    defaults, each other grid axis's value (a number after the axis's initials), and the seed
    (`fedavg-cf0.5-a0.1-s0`, `feroma-feroma_label_skew_medium-de2-s42`)."""
    parts = [spec.algorithm.name] + [f"{initials(k)}{short(v)}" for k, v in changed_params(spec.algorithm).items()]
    for axis, value in point.items():
        if axis in ("seed", "seeds") or axis.split(".")[0] == "algorithm":
            continue
        parts.append(short(value) if isinstance(value, (str, dict)) else f"{initials(axis)}{short(value)}")
    parts.append(f"s{spec.seed}")
    return re.sub(r"[^A-Za-z0-9._=+-]", "_", "-".join(parts))


def initials(path: str) -> str:
    """`scenario.drift_every` -> `de`, `algorithm.client_fraction` -> `cf`."""
    return "".join(word[0] for word in path.rsplit(".", 1)[-1].split("_") if word)


def short(value: Any) -> str:
    """A grid value as part of a run's name: a list's items joined; a mapping (a component or a section) by its name
    or preset, then its other entries as initials and values (`conditional/E2b_c3`, `piid_nc30_snoise_s0.5_tcmnone`);
    anything else as written."""
    if isinstance(value, (list, tuple)):
        return "_".join(map(short, value))
    if isinstance(value, dict):
        head = [str(value[key]) for key in ("name", "preset") if key in value][:1]
        rest = [f"{initials(k)}{short(v)}" for k, v in value.items() if k not in ("name", "preset")]
        return "_".join(head + rest)
    return str(value)


def resolve_run(raw: dict[str, Any]) -> RunSpec:
    """One run's raw mapping -> RunSpec, with its scenario preset expanded and the scenario checked against
    the dataset's facts, so an impossible federation fails here, before any data is read."""
    from fedbench.data import dataset_facts
    from fedbench.models.base import check_model
    from fedbench.scenarios import check_scenario, expand_preset, preset_normalization

    if "dataset" not in raw:
        raise ConfigError("dataset", None, "a value is required")
    dataset = parse_dataset(raw["dataset"])
    facts = dataset_facts(dataset.name, **dataset.kwargs)
    scenario = raw.get("scenario")
    if isinstance(scenario, dict) and scenario.get("preset") is not None:  # a serialised spec writes preset: null
        raw = {**raw, "scenario": expand_preset(scenario, facts)}
        paper_normalization = preset_normalization(raw["scenario"]["preset"])
        if "normalize" not in raw and paper_normalization is not None:
            raw["normalize"] = paper_normalization
    spec = parse_run(raw)
    check_scenario(spec.scenario, facts)
    if facts.input_shape is not None:
        check_model(spec.model.name, spec.model.params, facts.input_shape, facts.num_classes)
    return spec


def load_task(path: str | Path, overrides: Sequence[Override] = ()) -> TaskSpec:
    """Read a task YAML and apply `--set key=value` overrides; bad input raises ConfigError."""
    return task_from_dict(read_task_file(path), overrides, default_name=Path(path).stem)


def read_task_file(path: str | Path) -> dict[str, Any]:
    """A task file's mapping as written, before any check of its fields."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("task", str(path), "a path to an existing task YAML file")
    if path.stat().st_size > MAX_TASK_BYTES:
        raise ConfigError(
            "task",
            str(path),
            f"a task file of at most {MAX_TASK_BYTES // 2**20} MiB "
            f"(this one has {path.stat().st_size / 2**20:.1f} MiB)",
        )
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=TaskLoader)
    except UnicodeDecodeError as exc:
        raise ConfigError("task", str(path), f"a UTF-8 text file (byte {exc.start} is not UTF-8)") from None
    except yaml.YAMLError as exc:
        raise ConfigError("task", str(path), f"valid YAML ({exc})") from None
    if not isinstance(raw, dict):
        raise ConfigError("task", str(path), "a YAML mapping of fields")
    check_expanded_size("task", str(path), raw)
    return raw


def max_task_nodes() -> int:
    """`DEFAULT_MAX_TASK_NODES`, or the environment's FEDBENCH_MAX_TASK_NODES."""
    text = os.environ.get(MAX_TASK_NODES_ENV, "")
    if not text:
        return DEFAULT_MAX_TASK_NODES
    if not text.isdigit() or int(text) < 1:
        raise ConfigError(MAX_TASK_NODES_ENV, text, "a positive integer: the values a task file may hold")
    return int(text)


def check_expanded_size(field: str, shown: Any, tree: Any) -> None:
    """Refuse a YAML value holding more than `max_task_nodes()` values once its aliases are expanded. YAML
    shares an aliased value, so the count is summed over shared subtrees, each walked once."""
    limit, sizes = max_task_nodes(), {}

    def size(node: Any) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        if id(node) not in sizes:
            sizes[id(node)] = None  # being counted: meeting it again inside itself is a recursive alias
            children = [*node.keys(), *node.values()] if isinstance(node, dict) else node
            total = 1
            for child in children:
                total += size(child)
                if total > limit:
                    break
            sizes[id(node)] = total
        if sizes[id(node)] is None:
            raise ConfigError(field, shown, "no value that contains itself (a recursive YAML alias, &a [*a])")
        return sizes[id(node)]

    found = size(tree)
    if found > limit:
        raise ConfigError(
            field,
            shown,
            f"at most {limit:,} values with YAML aliases expanded (this one holds more: "
            f"aliases nested in aliases?); set {MAX_TASK_NODES_ENV} to raise the limit",
        )


def task_from_dict(raw: dict[str, Any], overrides: Sequence[Override] = (), default_name: str = "task") -> TaskSpec:
    """A task from its mapping (as a task file writes it) and overrides: `key=value` text as `--set` takes
    it, or (dotted path, value) pairs as Python code has them."""
    source, given = {"name": default_name, **copy.deepcopy(raw)}, tuple(parse_overrides(overrides))
    raw = copy.deepcopy(source)
    profiles = raw.pop("profiles", None) or {}
    profile = dict(given).get("profile", raw.pop("profile", PAPER_PROFILE))
    run_overrides = []
    for path, value in [*profile_overrides(profiles, profile), *given]:
        if path == "profile":
            continue
        if path.startswith("grid."):  # the axis is the whole dotted rest: grid.scenario.preset; in every block
            axis, grid = path.removeprefix("grid."), raw.get("grid")
            blocks = grid if isinstance(grid, list) else [grid if isinstance(grid, dict) else {}]
            raw["grid"] = [{**b, axis: value} if isinstance(b, dict) else b for b in blocks]
        elif path in TASK_KEYS:
            set_path(raw, path, value)
        else:
            run_overrides.append((path, value))
    grid = parse_grid(raw.pop("grid", None) or {}, {p for p, _ in run_overrides})
    seeds = raw.pop("seeds", [0])
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        seeds = [seeds]
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**32 for s in seeds)
    ):
        raise ConfigError("seeds", seeds, "an integer or a non-empty list of integers in [0, 2^32)")
    if len(set(seeds)) < len(seeds):
        raise ConfigError("seeds", seeds, "distinct integers: a seed listed twice is the same run")
    name = check_name("name", raw.pop("name"))
    if profile != PAPER_PROFILE:
        name = check_name("profile", f"{name}-{profile}")
    description = raw.pop("description", "")
    raw_reference = raw.pop("reference", None)
    max_failures = check_max_failures("max_failures", raw.pop("max_failures", DEFAULT_MAX_FAILURES))
    check_run_count(
        grid,
        1 if any(path == "seed" for path, _ in run_overrides) else len(seeds),
        raw.pop("max_runs", DEFAULT_MAX_RUNS),
    )
    task = TaskSpec(
        name,
        raw,
        grid,
        tuple(seeds),
        tuple(run_overrides),
        str(description),
        profile,
        (PAPER_PROFILE, *profiles),
        (),
        source,
        given,
        max_failures,
    )
    runs = task._expansion()  # validate now, so bad input fails before anything runs
    known = {key for spec in runs for key in spec.flat()} if profile == PAPER_PROFILE else None
    return dataclasses.replace(task, reference=parse_reference(raw_reference, known), runs=runs)


def parse_grid(raw: Any, overridden: set[str]) -> tuple[Grid, ...]:
    """`grid:` (a mapping, or a list of them) as blocks of axes; an axis a run override sets is dropped."""
    blocks = raw if isinstance(raw, list) and raw else [raw]
    grids = []
    for i, block in enumerate(blocks):
        where = "grid" if len(blocks) == 1 and not isinstance(raw, list) else f"grid[{i}]"
        if not isinstance(block, dict):
            raise ConfigError(
                where, block, "a mapping of dotted field paths to lists of values, or a list of such mappings"
            )
        axes = []
        for axis, values in block.items():
            if not isinstance(values, list) or not values:
                raise ConfigError(f"{where}.{axis}", values, "a non-empty list of values")
            if axis not in overridden:
                axes.append((axis, tuple(values)))
        grids.append(tuple(axes))
    return tuple(grids)


def check_run_count(grid: tuple[Grid, ...], seeds: int, max_runs: Any) -> None:
    """Refuse a task whose grid and seeds would expand to more than `max_runs` runs, counted before any is built."""
    if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
        raise ConfigError("max_runs", max_runs, "a positive integer: the most runs this task may expand to")
    count = seeds * sum(math.prod(len(values) for _, values in block) for block in grid)
    if count > max_runs:
        sizes = " + ".join(" x ".join(str(len(v)) for _, v in block) or "1" for block in grid)
        raise ConfigError(
            "grid",
            f"{count:,} runs ({sizes} points x {seeds} seeds)",
            f"at most {max_runs:,} runs (max_runs); write max_runs: {count} in the task file, "
            f"or --set max_runs={count}, to run them all",
        )


def profile_overrides(profiles: Any, profile: Any) -> list[tuple[str, Any]]:
    """The overrides `profile` makes (none for `paper`), checked against the task file's `profiles:`."""
    if not isinstance(profiles, dict) or not all(isinstance(v, dict) for v in profiles.values()):
        raise ConfigError(
            "profiles",
            profiles,
            "a mapping of profile names to mappings of overrides (dotted field -> value, as --set takes them)",
        )
    if PAPER_PROFILE in profiles:
        raise ConfigError(
            f"profiles.{PAPER_PROFILE}",
            profiles[PAPER_PROFILE],
            "no entry: the task file's own fields are the paper profile",
        )
    if profile == PAPER_PROFILE:
        return []
    if profile not in profiles:
        raise ConfigError(
            "profile", profile, f"one of {', '.join([PAPER_PROFILE, *profiles])} (the task file's profiles)"
        )
    return list(profiles[profile].items())


def check_max_failures(field: str, value: Any) -> int:
    """`value` as a count of trial restarts; ConfigError naming `field` unless it is an integer >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(field, value, "an integer >= 0: restarts of a trial whose process died (0: none)")
    return value


def parse_override(text: str) -> tuple[str, Any]:
    """`key.path=value` -> (path, YAML-parsed value)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError("--set", text, "key=value, e.g. --set algorithm.client_fraction=0.5")
    try:
        parsed = yaml.load(value, Loader=TaskLoader) if value.strip() else None
    except DuplicateKeyError as exc:
        raise ConfigError("--set", text, f"a value without a key written twice ({exc.problem})") from None
    except yaml.YAMLError:  # not YAML: the text as written (a name, a path)
        parsed = value
    check_expanded_size("--set", text, parsed)
    return key.strip(), parsed


def parse_overrides(overrides: Sequence[Override]) -> list[tuple[str, Any]]:
    """Overrides as (dotted path, value) pairs, the texts among them parsed by `parse_override`."""
    return [parse_override(o) if isinstance(o, str) else o for o in overrides]


def set_path(tree: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted path, turning a name shorthand (`algorithm: fedavg`) into a mapping on the way."""
    keys = path.split(".")
    node = tree
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if isinstance(child, str):
            child = {"name": child}
        elif child is None:
            child = {}
        elif not isinstance(child, dict):
            raise ConfigError(".".join(keys[: i + 1]), child, f"a mapping, to set {path}")
        node[key] = child
        node = child
    node[keys[-1]] = value

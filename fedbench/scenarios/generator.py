"""Build the Scenario artifact for a dataset, a scenario spec and a seed (a pure, cached function).

Per drift stage: the partition gives each client its samples (bank-based partitions draw fresh ones every
stage), every shift gives each client a mode from its bank (random banks redraw every stage), and the
combination (partition group, shift modes) is the client's ground-truth distribution id. Then the local
test splits, then the test-time clients.
"""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from fedbench.core.errors import ConfigError
from fedbench.core.registry import DATASETS, PARTITIONS, SHIFTS
from fedbench.core.runspec import ScenarioSpec, digest, plain
from fedbench.core.types import derive_seed
from fedbench.data import BaseDataset, DatasetFacts, dataset_facts
from fedbench.scenarios.artifact import ClientView, Scenario
from fedbench.scenarios.partition import Partition
from fedbench.scenarios.pool import PoolContext, Split, allocate, class_queues, histogram, weights_demand
from fedbench.scenarios.shifts import Bank, Shift
from fedbench.scenarios.testtime import DistributionRecord, make_test_clients
from fedbench.scenarios.transforms import Canvas

CACHE_SIZE = 8
"""Scenarios kept per process. A reused Tune trial process runs many configurations one after another, so
the cache is bounded (least recently used first out) instead of growing with every scenario it meets."""
_CACHE: OrderedDict[str, Scenario] = OrderedDict()


def scenario_key(dataset: BaseDataset, spec: ScenarioSpec, seed: int, stages: int) -> str:
    """Everything the generator reads: the dataset (its name, loader options and a fingerprint of its labels,
    metadata and shape), the whole scenario spec, the seed and the number of drift stages."""
    identity = {"dataset": dataset.identity, "spec": plain(spec), "seed": seed, "stages": stages}
    return digest(identity)[:12]


def num_stages(spec: ScenarioSpec, rounds: int) -> int:
    """Stage s covers rounds s*k+1 .. (s+1)*k: 002 I.2's 'drifts every k rounds' (5, 10, 20 stages in 20 rounds)."""
    return 1 if spec.drift_every is None else math.ceil(rounds / spec.drift_every)


def build_scenario(dataset: BaseDataset, spec: ScenarioSpec, seed: int, rounds: int = 1) -> Scenario:
    """The federation for (dataset, spec, seed, rounds); identical inputs give identical indices on any process."""
    stages = num_stages(spec, rounds)
    key = scenario_key(dataset, spec, seed, stages)
    if key in _CACHE:
        _CACHE.move_to_end(key)
    else:
        _CACHE[key] = _generate(dataset, spec, seed, key, stages)
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
    return _CACHE[key]


def facts_of(dataset: BaseDataset) -> DatasetFacts:
    """The facts of a loaded dataset (its registered facts give superclasses, when they describe these classes)."""
    superclasses = None
    if dataset.name in DATASETS:
        declared = dataset_facts(dataset.name)
        if declared.num_classes == dataset.num_classes:
            superclasses = declared.superclasses
    image = dataset.x.ndim == 4
    split = dataset.meta["split"].to_numpy()
    return DatasetFacts(
        num_classes=dataset.num_classes,
        channels=int(dataset.x.shape[1]) if image else None,
        image_size=tuple(dataset.x.shape[2:]) if image else None,
        meta_columns=tuple(c for c in dataset.meta.columns if c != "split"),
        superclasses=superclasses,
        dataset=dataset.name,
        train_size=int((split == "train").sum()),
        test_size=int((split == "test").sum()),
    )


@dataclass(frozen=True)
class Parts:
    """The scenario's partition and shifts, instantiated from the spec.

    Partitions and shifts name their fields relative to themselves; here they are put where the task
    writes them: `scenario` for the partition (its parameters sit in the scenario section), and
    `scenario.shifts[i]` for shift i. A preset writes these sections for the user, so an error there
    names the preset too.
    """

    partition: Partition
    shifts: tuple[Shift, ...]

    @classmethod
    def of(cls, spec: ScenarioSpec) -> Parts:
        partition_type = PARTITIONS.get(spec.partition.name, field="scenario.partition")
        with _fields_under("scenario", spec.preset):
            partition = partition_type(**spec.partition.kwargs)
        shifts = []
        for i, s in enumerate(spec.shifts):
            shift_type = SHIFTS.get(s.name, field=f"scenario.shifts[{i}].name")
            with _fields_under(f"scenario.shifts[{i}]", spec.preset):
                shifts.append(shift_type(**s.kwargs))
        return cls(partition, tuple(shifts))

    def check(self, spec: ScenarioSpec, facts: DatasetFacts) -> None:
        """Reject an impossible scenario for this dataset before any data is read, saying what would work:
        the partition's and shifts' parameters, and every transform op a shift may produce."""
        with _fields_under("scenario", spec.preset):
            self.partition.check(facts, spec.num_clients)
            check_client_sizes(self.partition, spec, facts)
        canvas = self.canvas(facts)
        for i, shift in enumerate(self.shifts):
            with _fields_under(f"scenario.shifts[{i}]", spec.preset):
                shift.check(facts, spec.num_clients)
                if canvas is not None:
                    shift.check_ops(canvas, spec.num_clients)
        if spec.test_clients.unseen_rate > 0 and not (
            self.partition.offers_unseen or any(s.offers_unseen for s in self.shifts)
        ):
            raise ConfigError(
                "scenario.test_clients.unseen_rate",
                spec.test_clients.unseen_rate,
                "0 for this scenario, or a partition or shift with distributions outside training "
                "(class_bank, dirichlet, feature_bank, rotation, noise, label_permutation, "
                "conditional_transform)",
            )
        if spec.local_test == "official" and spec.source == "all":
            raise ConfigError(
                "scenario.local_test", "official", "split when source is all (no official test data is left over)"
            )

    def canvas(self, facts: DatasetFacts) -> Canvas | None:
        """The images the shifts' ops apply to (RGB once any shift colours them); None for vector data."""
        if facts.channels is None or facts.image_size is None:
            return None
        return Canvas(3 if any(s.rgb for s in self.shifts) else facts.channels, tuple(facts.image_size))

    def split(self, ctx: PoolContext, spec: ScenarioSpec, rng: np.random.Generator) -> Split:
        """The partition's draw; the checks that need the pool's size (`Dirichlet.min_samples`) fail here."""
        with _fields_under("scenario", spec.preset):
            return self.partition.split(ctx, spec.num_clients, rng)


def check_client_sizes(partition: Partition, spec: ScenarioSpec, facts: DatasetFacts) -> None:
    """Refuse a federation too large for the data: a client without a training or a test sample trains nothing
    or reports NaN accuracy, and the run would end 'FINISHED' meaning nothing. Fields are named relative to
    the scenario; skipped where the dataset's size is known only once it is read (FEMNIST).

    The bound assumes equal shares (an uneven partition may still leave a client short: such a run fails
    when its final accuracy is NaN).
    """
    if facts.train_size is None or (spec.source == "all" and facts.test_size is None):
        return
    pool = facts.train_size + (facts.test_size if spec.source == "all" else 0)
    data = (
        f"{facts.dataset or 'the dataset'} has {pool} "
        f"{'training' if spec.source == 'train' else 'training and test'} samples"
    )
    if spec.local_test == "split" and spec.test_fraction > 0:
        needed = smallest_split(spec.test_fraction)
        need = f"a client needs {needed} to keep a training and a test sample at test_fraction {spec.test_fraction}"
    else:
        needed, need = 1, "a client needs a training sample"
    most = pool * spec.copies // needed
    copies = f" x {spec.copies} copies" if spec.copies > 1 else ""
    if spec.num_clients > most:
        raise ConfigError("num_clients", spec.num_clients, f"at most {most}: {data}{copies} and {need}")
    if spec.local_test == "official" and facts.test_size is not None and spec.num_clients > facts.test_size:
        raise ConfigError(
            "num_clients",
            spec.num_clients,
            f"at most {facts.test_size}: local_test official draws each client's test samples from the "
            f"{facts.test_size} of {facts.dataset or 'the dataset'}'s official test split",
        )
    if partition.min_samples * spec.num_clients > pool:
        raise ConfigError(
            "min_samples",
            partition.min_samples,
            f"at most {pool // spec.num_clients} for {spec.num_clients} clients ({data})",
        )


def smallest_split(test_fraction: float) -> int:
    """The fewest samples whose local split (`_local_split`) keeps at least one for training and one for testing."""
    return next(n for n in itertools.count(2) if 1 <= round(test_fraction * n) <= n - 1)


@contextmanager
def _fields_under(path: str, preset: str | None) -> Iterator[None]:
    """Put a ConfigError's field, named relative to its section, under the section's path (and name the preset
    that may have written the section)."""
    try:
        yield
    except ConfigError as exc:
        error = exc.under(path)
        if preset:
            error = ConfigError(error.field, error.value, f"{error.allowed} (scenario preset {preset} may have set it)")
        raise error from None


def check_scenario(spec: ScenarioSpec, facts: DatasetFacts) -> None:
    """Reject an impossible scenario for this dataset (task-load time), saying what would work."""
    Parts.of(spec).check(spec, facts)


def _generate(dataset: BaseDataset, spec: ScenarioSpec, seed: int, key: str, stages: int) -> Scenario:
    facts = facts_of(dataset)
    parts = Parts.of(spec)
    parts.check(spec, facts)
    split_col = dataset.meta["split"].to_numpy()
    pool = np.arange(len(dataset)) if spec.source == "all" else np.flatnonzero(split_col == "train")
    ctx = PoolContext(
        pool,
        dataset.y[pool],
        dataset.meta.iloc[pool].reset_index(drop=True),
        facts,
        spec.copies,
        bank_seed=derive_seed(seed, "banks", key),
        stages=stages,
    )
    banks = [shift.bank(ctx, spec.num_clients) for shift in parts.shifts]
    official_test = np.flatnonzero(split_col == "test") if spec.source == "train" else np.zeros(0, dtype=np.int64)

    registry = _DistributionIds()
    stage_views, records, split = [], [], None
    for stage in range(stages + 1):  # one stage past the end: the clients' "next" distributions
        rng = np.random.default_rng(derive_seed(seed, "stage", stage, key))
        fresh = split is None or (split.redraws and stage > 0)
        if fresh:
            split = parts.split(ctx, spec, rng)
        modes = [
            bank.draw(spec.num_clients, rng) if stage == 0 or bank.drifts else previous
            for bank, previous in zip(banks, records[-1][1] if records else [None] * len(banks), strict=True)
        ]
        views = _stage_views(
            dataset, ctx, spec, split, banks, modes, registry, official_test, rng, None if fresh else stage_views[-1]
        )
        records.append(([DistributionRecord.of(v, dataset.y, dataset.num_classes) for v in views], modes))
        stage_views.append(tuple(views))

    rng = np.random.default_rng(derive_seed(seed, "test_clients", key))
    test_pool = (
        official_test if len(official_test) else np.concatenate([v.test for s in stage_views[:stages] for v in s])
    )
    trained_ids = {v.distribution_id for views in stage_views[:stages] for v in views}
    test_clients = make_test_clients(
        spec.test_clients,
        records[stages - 1][0],
        records[stages][0],
        split,
        banks,
        registry,
        dataset.y,
        dataset.num_classes,
        test_pool,
        _has_label_shift(split, banks),
        trained_ids,
        rng,
    )
    channels = 3 if any(m.rgb for b in banks for m in b.modes + b.unseen) else facts.channels
    input_shape = (channels, *dataset.x.shape[2:]) if facts.channels is not None else tuple(dataset.x.shape[1:])
    return Scenario(
        key=key,
        num_clients=spec.num_clients,
        num_classes=dataset.num_classes,
        input_shape=tuple(int(d) for d in input_shape),
        stages=tuple(stage_views[:stages]),
        round_stage=(
            () if spec.drift_every is None else tuple(s for s in range(stages) for _ in range(spec.drift_every))
        ),
        test_clients=test_clients,
        duplicated=spec.copies > 1 or split.resampled,
        distributions=tuple(registry.descriptions),
    )


class _DistributionIds:
    """Ground-truth ids: one per distinct (partition group, shift modes), numbered in order of appearance."""

    def __init__(self):
        self.ids: dict[tuple, int] = {}
        self.descriptions: list[str] = []

    def id_of(self, key: tuple, description: str) -> int:
        if key not in self.ids:
            self.ids[key] = len(self.descriptions)
            self.descriptions.append(description)
        return self.ids[key]


def _stage_views(
    dataset,
    ctx,
    spec,
    split: Split,
    banks: list[Bank],
    modes,
    registry,
    official_test,
    rng,
    kept: tuple[ClientView, ...] | None,
) -> list[ClientView]:
    """Every client's view in one stage; `kept`: the previous stage's views when the data stays (only shifts drift)."""
    views = []
    official = spec.local_test == "official"
    test_parts = _official_test_parts(dataset, ctx, split, official_test, rng) if official and kept is None else None
    for c in range(spec.num_clients):
        chosen = [bank.modes[m[c]] for bank, m in zip(banks, modes, strict=True)]
        label_map = split.label_maps[c] if split.label_maps else None
        for mode in chosen:
            if mode.label_map is not None:
                label_map = mode.label_map if label_map is None else mode.label_map[label_map]
        ops = tuple(op for mode in chosen for op in mode.ops)
        description = " | ".join([split.descriptions[c]] + [m.description for m in chosen if m.description])
        dist_id = registry.id_of((split.groups[c], *(m[c] for m in modes)), description)
        indices = ctx.indices[split.parts[c]]
        if kept is not None:
            train, test = kept[c].train, kept[c].test
        elif official:
            train, test = indices, test_parts[c]
        else:
            train, test = _local_split(indices, spec.test_fraction, rng)
        views.append(ClientView(train, test, dist_id, ops, label_map, description))
    return views


def _local_split(indices: np.ndarray, test_fraction: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A client's own random train/test split (002 Sec. 5: 20% of local data kept for evaluation), of its distinct
    samples: where a part repeats samples (002's data scaling) every copy stays on the side its sample fell on, so
    the local test never holds a training sample (002's client splits after duplicating, so its validation does)."""
    shuffled = rng.permutation(np.unique(indices))
    n_test = int(round(test_fraction * len(shuffled)))
    test = np.sort(shuffled[:n_test])
    return np.sort(indices[~np.isin(indices, test)]), test


def _official_test_parts(dataset, ctx: PoolContext, split: Split, official_test: np.ndarray, rng) -> list[np.ndarray]:
    """Each client's test samples from the official test split, with its class mix, disjoint across clients:
    001 Sec. IV-B splits test data identically to training data."""
    ratio = len(official_test) / max(len(ctx.labels), 1)
    test_labels = dataset.y[official_test]
    demand = np.stack(
        [weights_demand(histogram(ctx.labels[p], ctx.num_classes), int(round(len(p) * ratio))) for p in split.parts]
    )
    positions = allocate(demand, class_queues(test_labels, ctx.num_classes, rng))
    return [official_test[p] for p in positions]


def _has_label_shift(split: Split, banks: list[Bank]) -> bool:
    """Concept shift P(Y|X): some client sees relabelled classes (FEROMA then tests on the client's own)."""
    return any(m.label_map is not None for b in banks for m in b.modes) or bool(
        split.label_maps and any(lm is not None for lm in split.label_maps)
    )

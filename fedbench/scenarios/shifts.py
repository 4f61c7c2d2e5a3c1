"""Shifts: per-client feature transforms and label maps layered on a partition's data.

A shift builds a bank of modes (a transform, a label map, or both) once per scenario, and says how modes
reach clients: drawn at random in every drift stage (FEROMA's banks, 002 I.2), in contiguous cluster
blocks (001's clusters), or cycling over clients (003's noise levels, 004's 8 photometric combinations).
Modes outside the bank serve unseen test-time clients (002 I.7).

A shift names its fields relative to itself (`sigma`); `Parts.check` puts them under `scenario.shifts[i]`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

import numpy as np

from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_shift
from fedbench.data import DatasetFacts
from fedbench.scenarios.partition import second_concept, superclass_of
from fedbench.scenarios.pool import PoolContext
from fedbench.scenarios.transforms import Canvas, Colour, Op, Rotate, describe_ops
from fedbench.scenarios.transforms import Noise as NoiseOp
from fedbench.scenarios.transforms import Photometric as PhotometricOp

Assign = Literal["random", "blocks", "cycle"]
OpSource = tuple[str, object, Op]
"""(field, its value, an op that value makes): what `Shift.check_ops` blames when the op cannot apply."""


@dataclass(frozen=True, eq=False)
class Mode:
    """One entry of a shift's bank: what it does to a client's samples."""

    ops: tuple[Op, ...] = ()
    label_map: np.ndarray | None = None
    description: str = ""
    rgb: bool = False


@dataclass(frozen=True, eq=False)
class Bank:
    """A shift's modes, how they are assigned to clients, and modes kept out of training."""

    modes: list[Mode]
    assign: Assign
    unseen: list[Mode]

    def draw(self, num_clients: int, rng: np.random.Generator) -> list[int]:
        """Mode index per client for one stage."""
        if self.assign == "random":
            return [int(m) for m in rng.integers(len(self.modes), size=num_clients)]
        if self.assign == "blocks":
            return [int(m) for m in np.arange(num_clients) * len(self.modes) // num_clients]
        return [c % len(self.modes) for c in range(num_clients)]

    @property
    def drifts(self) -> bool:
        return self.assign == "random"


class Shift:
    """Base: subclasses are dataclasses of their parameters."""

    offers_unseen = True
    """Whether its bank has modes kept out of training (for unseen test-time clients)."""
    rgb = False
    """Whether its ops colour images, which makes the scenario's images RGB (3 output channels)."""

    def check(self, facts: DatasetFacts, num_clients: int) -> None:
        """Raise ConfigError, naming the shift's own field, when the shift cannot apply to the dataset."""

    def op_sources(self, num_clients: int) -> Iterator[OpSource]:
        """Every op value the bank's modes may hold, seen and unseen, with the field that sets it.

        Known from the parameters alone (no data, no random draw), so the ops are checked at task load.
        """
        return iter(())

    def check_ops(self, canvas: Canvas, num_clients: int) -> None:
        """Raise ConfigError when an op of the bank cannot apply to `canvas`, naming the field behind the op."""
        for field, value, op in self.op_sources(num_clients):
            try:
                op.check(canvas)
            except ConfigError as exc:
                raise ConfigError(field, value, f"{exc.allowed} (its op {op.words()!r})") from None

    def bank(self, ctx: PoolContext, num_clients: int) -> Bank:
        raise NotImplementedError


def _require_images(facts: DatasetFacts, name: str) -> None:
    if facts.channels not in (1, 3):
        holds = "feature vectors" if facts.channels is None else f"{facts.channels}-channel images"
        raise ConfigError(
            "name", name, f"image datasets with 1 or 3 channels ({facts.dataset or 'the dataset'} holds {holds})"
        )


def pattern_ops(angle: float, colour: int | None, classes: tuple[int, ...] | None = None) -> tuple[Op, ...]:
    """A (rotation, colour) pattern as ANDA draws them: rotate, then saturate one RGB channel (docs/methods.md)."""
    ops: list[Op] = []
    if angle % 360:
        ops.append(Rotate(float(angle), classes=classes))
    if colour is not None:
        ops.append(Colour(colour, classes=classes))
    return tuple(ops)


def pattern(angle: float, colour: int | None, classes: tuple[int, ...] | None = None) -> Mode:
    """The bank mode of a (rotation, colour) pattern: its ops, described as `fedbench scenario show` prints them."""
    ops = pattern_ops(angle, colour, classes)
    return Mode(ops, None, describe_ops(ops), rgb=colour is not None)


@register_shift("feature_bank")
@dataclass(frozen=True)
class FeatureBank(Shift):
    """FEROMA's feature skew P(X) (002 I.2, Table 12): a bank of (rotation, colour) patterns drawn per stage.

    Rotations are i * 360 / R; colours none or red/green/blue. Low 4 x none (4 patterns), medium 2 x 3 (6),
    high 4 x 3 (12).
    """

    rotations: int = 4
    """R, rotations in the bank (002 Table 12: 4 / 2 / 4 for low / medium / high)."""
    colours: bool = False
    """Whether patterns also saturate one of R, G, B (002 Table 12: medium and high)."""

    @property
    def rgb(self) -> bool:
        return self.colours

    def check(self, facts, num_clients):
        _require_images(facts, "feature_bank")
        if self.rotations < 1:
            raise ConfigError("rotations", self.rotations, "an integer >= 1")

    def _angles(self) -> tuple[list[float], list[float]]:
        """The bank's rotations, and the unseen half-steps between them."""
        angles = [i * 360 / self.rotations for i in range(self.rotations)]
        return angles, [a + 180 / self.rotations for a in angles]

    def _colours(self) -> list[int | None]:
        return list(range(3)) if self.colours else [None]

    def op_sources(self, num_clients):
        seen, unseen = self._angles()
        for angle in seen + unseen:
            yield "rotations", self.rotations, Rotate(float(angle))
        for colour in self._colours():
            if colour is not None:
                yield "colours", self.colours, Colour(colour)

    def bank(self, ctx, num_clients):
        angles, unseen_angles = self._angles()
        colours = self._colours()
        modes = [pattern(a, c) for a, c in itertools.product(angles, colours)]
        # Unseen: the half-step rotations between the bank's, with the same colours.
        unseen = [pattern(a, c) for a, c in itertools.product(unseen_angles, colours)]
        return Bank(modes, "random", unseen)


@register_shift("rotation")
@dataclass(frozen=True)
class Rotation(Shift):
    """Rotation covariate clusters (001 E2b): cluster k's images are rotated by k * 360 / K degrees."""

    clusters: int = 2
    """K (001 E2b: e.g. 0 vs 180 degrees for K = 2; 4 on Fashion-MNIST)."""

    def check(self, facts, num_clients):
        _require_images(facts, "rotation")
        if not 1 <= self.clusters <= num_clients:
            raise ConfigError("clusters", self.clusters, f"1..{num_clients} (num_clients)")

    def _angles(self) -> tuple[list[float], list[float]]:
        """Cluster k's rotation, and the unseen half-steps between them."""
        step = 360 / self.clusters
        return [k * step for k in range(self.clusters)], [k * step + step / 2 for k in range(self.clusters)]

    def op_sources(self, num_clients):
        seen, unseen = self._angles()
        for angle in seen + unseen:
            yield "clusters", self.clusters, Rotate(float(angle))

    def bank(self, ctx, num_clients):
        seen, unseen = self._angles()
        return Bank([pattern(a, None) for a in seen], "blocks", [pattern(a, None) for a in unseen])


@register_shift("noise")
@dataclass(frozen=True)
class Noise(Shift):
    """Noise-based feature imbalance (003 Sec. III-A): client i adds N(0, (sigma * i / N)^2), clipped to [0, 1]."""

    sigma: float = 0.5
    """sigma of the noisiest client (003 Sec. IV: 0.5)."""

    def check(self, facts, num_clients):
        _require_images(facts, "noise")

    def _levels(self, num_clients: int) -> tuple[list[float], list[float]]:
        """Client i (1-based) gets sigma * i / N, so the last client has the full sigma; unseen: the half-steps."""
        return (
            [self.sigma * i / num_clients for i in range(1, num_clients + 1)],
            [self.sigma * (i + 0.5) / num_clients for i in range(num_clients)],
        )

    def op_sources(self, num_clients):
        seen, unseen = self._levels(num_clients)
        for level in seen + unseen:
            yield "sigma", self.sigma, NoiseOp(round(level, 6))

    def bank(self, ctx, num_clients):
        def mode(level: float) -> Mode:
            ops = (NoiseOp(round(level, 6)),) if level > 0 else ()
            return Mode(ops, None, describe_ops(ops))

        seen, unseen = self._levels(num_clients)
        return Bank([mode(level) for level in seen], "cycle", [mode(level) for level in unseen])


@register_shift("photometric")
@dataclass(frozen=True)
class Photometric(Shift):
    """FedDRM's covariate shift (004 Sec. 5): the 8 combinations of gamma, hue and saturation, one per client."""

    gamma: tuple[float, ...] = (0.6, 1.4)
    """Gamma values (004: {0.6, 1.4})."""
    hue: tuple[float, ...] = (-0.1, 0.1)
    """Hue shifts in turns (004: {-0.1, 0.1})."""
    saturation: tuple[float, ...] = (0.5, 1.5)
    """Saturation factors (004: {0.5, 1.5})."""

    rgb = True

    def check(self, facts, num_clients):
        _require_images(facts, "photometric")

    def op_sources(self, num_clients):
        # Each value in an op of its own: a combination fails exactly when one of its values does.
        yield from (("gamma", list(self.gamma), PhotometricOp(gamma=g)) for g in self.gamma)
        yield from (("hue", list(self.hue), PhotometricOp(hue=h)) for h in self.hue)
        yield from (("saturation", list(self.saturation), PhotometricOp(saturation=k)) for k in self.saturation)

    def bank(self, ctx, num_clients):
        def mode(g, h, s) -> Mode:
            ops = (PhotometricOp(g, h, s),)
            return Mode(ops, None, describe_ops(ops), rgb=True)

        modes = [mode(g, h, s) for g, h, s in itertools.product(self.gamma, self.hue, self.saturation)]
        return Bank(modes, "cycle", [mode(1.0, 0.0, 1.0)])


@register_shift("label_permutation")
@dataclass(frozen=True)
class LabelPermutation(Shift):
    """Concept shift P(Y|X) by relabelling.

    FEROMA (002 I.2, Table 12): m classes chosen once, the bank is all m! permutations of them (identity
    included), drawn per stage; m = 3 / 4 / 5 (CIFAR-100: 40 / 60 / 80). 001 E3b: K random permutations of
    all classes, one per cluster (`classes: null, permutations: K, assign: blocks`).
    """

    classes: int | None = 3
    """m, the classes that swap (002 Table 12); None: all classes (001 E3b)."""
    permutations: int | None = None
    """Bank size; None: all m! permutations (002). Needed when m! is too large to list (m > 7)."""
    assign: Assign = "random"
    """random: drawn per client and stage (002); blocks: one permutation per cluster of clients (001 E3b)."""

    def check(self, facts, num_clients):
        m = self.classes if self.classes is not None else facts.num_classes
        if not 2 <= m <= facts.num_classes:
            raise ConfigError("classes", self.classes, f"2..{facts.num_classes} classes to permute")
        if self.permutations is None and m > 7:
            raise ConfigError("permutations", None, f"a bank size: {m}! permutations are too many to list")
        if self.permutations is not None and not 1 <= self.permutations <= math.factorial(min(m, 20)):
            raise ConfigError("permutations", self.permutations, f"1..{m}! distinct permutations")

    def bank(self, ctx, num_clients):
        rng = ctx.bank_rng(2)
        n = ctx.num_classes
        m = self.classes if self.classes is not None else n
        pool = np.sort(rng.choice(n, m, replace=False))
        if self.permutations is None:
            orders = [np.array(p) for p in itertools.permutations(pool)]
        else:
            orders = _distinct_permutations(pool, self.permutations, rng)
        modes = [_relabel_mode(pool, order, n) for order in orders]
        others = np.setdiff1d(np.arange(n), pool)
        if len(others) >= 2:  # unseen: a swap among classes the bank never touches
            unseen = [_relabel_mode(others[:2], others[:2][::-1], n)]
        else:
            extra = _distinct_permutations(pool, len(orders) + 4, rng)[len(orders) :]
            unseen = [_relabel_mode(pool, o, n) for o in extra if not any(np.array_equal(o, k) for k in orders)]
        return Bank(modes, self.assign, unseen)


@register_shift("relabel")
@dataclass(frozen=True)
class Relabel(Shift):
    """Semantic concept shift (001 E3a): clusters label the same images by different groupings, e.g. one MNIST
    cluster odd/even, another below-5/above-5. Groupings: parity, half, superclass, size (CIFAR-10), identity."""

    groupings: tuple[str, ...] = ("parity", "half")
    """One grouping per cluster, in cluster order (001 E3a)."""

    GROUPINGS = ("identity", "parity", "half", "superclass", "size")
    offers_unseen = False

    def check(self, facts, num_clients):
        for g in self.groupings:
            if g not in self.GROUPINGS:
                raise ConfigError("groupings", g, ", ".join(self.GROUPINGS))
        if "size" in self.groupings and facts.dataset != "cifar10":
            raise ConfigError("groupings", "size", "only on cifar10 (001 E4b's size classes)")
        if not 1 <= len(self.groupings) <= num_clients:
            raise ConfigError("groupings", list(self.groupings), f"1..{num_clients} groupings (one per cluster)")

    def bank(self, ctx, num_clients):
        n = ctx.num_classes
        maps = {
            "identity": np.arange(n),
            "parity": np.arange(n) % 2,
            "half": (np.arange(n) >= n / 2).astype(np.int64),
            "superclass": superclass_of(ctx.facts),
            "size": second_concept(ctx.facts),
        }
        return Bank([Mode((), maps[g], g) for g in self.groupings], "blocks", [])


@register_shift("conditional_transform")
@dataclass(frozen=True)
class ConditionalTransform(Shift):
    """FEROMA's concept shift P(X|Y) (002 I.2, Table 12): a bank of (targeted class set, pattern) pairs.

    Each entry targets `targeted` classes (8 of 10; 80 of 100) with one (rotation, colour) pattern from 4
    rotations x 3 colours; the other classes stay plain. Bank sizes 4 / 6 / 8.
    """

    banks: int = 4
    """Bank size (002 Table 12: 4 / 6 / 8 for low / medium / high)."""
    targeted: int | None = None
    """Classes each entry transforms; None: 80% of the classes (002 I.2: 8 of 10, 80 of 100)."""

    PATTERNS = tuple(itertools.product([0.0, 90.0, 180.0, 270.0], range(3)))
    """(rotation, colour) pairs an entry draws from (002 I.2: 4 rotations x 3 colours)."""
    rgb = True

    def check(self, facts, num_clients):
        _require_images(facts, "conditional_transform")
        if self.banks < 1:
            raise ConfigError("banks", self.banks, "an integer >= 1")
        if self.targeted is not None and not 1 <= self.targeted <= facts.num_classes:
            raise ConfigError("targeted", self.targeted, f"1..{facts.num_classes}")

    def op_sources(self, num_clients):
        # The patterns are fixed by the method, not by a field: the shift itself is what does not fit.
        for angle, colour in self.PATTERNS:
            for op in pattern_ops(angle, colour):
                yield "name", "conditional_transform", op

    def bank(self, ctx, num_clients):
        rng = ctx.bank_rng(3)
        n = ctx.num_classes
        targeted = self.targeted or round(0.8 * n)
        patterns = list(self.PATTERNS)

        def entry() -> Mode:
            classes = tuple(int(c) for c in np.sort(rng.choice(n, targeted, replace=False)))
            angle, colour = patterns[rng.integers(len(patterns))]
            return pattern(angle, colour, classes)

        modes = [entry() for _ in range(self.banks)]
        return Bank(modes, "random", [entry() for _ in range(self.banks)])


def _relabel_mode(pool: np.ndarray, order: np.ndarray, num_classes: int) -> Mode:
    label_map = np.arange(num_classes)
    label_map[pool] = order
    moved = [f"{a}->{b}" for a, b in zip(pool.tolist(), np.asarray(order).tolist(), strict=True) if a != b]
    return Mode((), label_map, "labels " + (" ".join(moved) if moved else "identity"))


def _distinct_permutations(pool: np.ndarray, count: int, rng: np.random.Generator) -> list[np.ndarray]:
    seen: set[tuple[int, ...]] = set()
    out = []
    while len(out) < count:
        order = rng.permutation(pool)
        if tuple(order) not in seen:
            seen.add(tuple(order))
            out.append(order)
    return out

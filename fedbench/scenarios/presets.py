"""The papers' scenarios by name: `scenario: {preset: feroma/label_skew/medium, drift_every: 2}`.

A preset is a function of the dataset's facts and its own parameters (e.g. `clusters`, `sparsity`) that
returns a plain `scenario:` section; keys the user sets next to `preset` override it. A preset refuses a
dataset it does not fit, saying which would.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, Literal

from fedbench.core.errors import ConfigError, UnknownNameError
from fedbench.core.fields import resolve_params
from fedbench.data import DatasetFacts

PRESETS: dict[str, Callable[..., dict[str, Any]]] = {}

Level = Literal["low", "medium", "high"]
Sparsity = Literal["rich", "medium", "sparse", "very_sparse", "super_sparse"]

SPARSITY_CLIENTS_PER_CLUSTER = {"rich": 5, "medium": 10, "sparse": 20, "very_sparse": 50, "super_sparse": 100}
"""001 Sec. IV-A: 5 clients per cluster ('rich', ~6,000 samples each on MNIST with K=2) to 100 ('super sparse',
~200-300); the three levels between are our reading of its five-level sweep."""

FEROMA_LEVELS = {
    # 002 Table 12 (and docs/methods.md, ANDA): per level, for each non-IID type.
    "feature_skew": {
        "low": dict(rotations=4, colours=False),
        "medium": dict(rotations=2, colours=True),
        "high": dict(rotations=4, colours=True),
    },
    "label_skew": {"low": 4, "medium": 6, "high": 8},
    "conditional_label_skew": {"low": 3, "medium": 4, "high": 5},
    "conditional_label_skew_cifar100": {"low": 40, "medium": 60, "high": 80},
    "conditional_feature_skew": {"low": 4, "medium": 6, "high": 8},
}

FEROMA_CIFAR100_PERMUTATIONS = 120
"""m! is beyond listing for CIFAR-100's 40-80 swapped classes; we bank 120 random permutations (5!, MNIST high)."""


PAPER_NORMALIZATION: dict[str, Any] = {
    "feroma": "none",  # FEROMA's released code feeds the images in [0, 1], unnormalised
    "feddrm": {"mode": "values", "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},  # 004's Normalize(0.5, 0.5)
}
"""A preset family's input normalisation, where its paper fixes one; other presets (001, 003, which do not
say) get the run's default, each dataset's published mean and std."""


def preset_normalization(name: str) -> Any | None:
    """The `normalize:` a run with scenario preset `name` defaults to (None: the run's own default)."""
    return PAPER_NORMALIZATION.get(name.partition("/")[0])


def preset(name: str):
    def register(fn):
        PRESETS[name] = fn
        return fn

    return register


def expand_preset(section: dict[str, Any], facts: DatasetFacts) -> dict[str, Any]:
    """A `scenario:` section with its preset (if any) filled in; the user's own keys win."""
    if section.get("preset") is None:
        return section
    section = dict(section)
    name = section.pop("preset")
    if name not in PRESETS:
        raise UnknownNameError("scenario preset", name, PRESETS, field="scenario.preset")
    fn = PRESETS[name]
    own = [p for p in inspect.signature(fn).parameters if p != "facts"]
    given = {k: section.pop(k) for k in own if k in section}
    params = dict(resolve_params("scenario", f"preset {name}", given, fn, skip=1))
    return {**fn(facts, **params), **section, "preset": name}


def _images(facts: DatasetFacts, name: str, classes: tuple[int, ...] = (10, 100)) -> None:
    if facts.channels is None or facts.num_classes not in classes:
        fits = " or ".join(str(c) for c in classes)
        raise ConfigError(
            "scenario.preset",
            name,
            f"an image dataset with {fits} classes (e.g. mnist, fmnist, cifar10, cifar100); "
            f"{facts.dataset or 'this dataset'} has {facts.num_classes} classes"
            f"{'' if facts.channels else ' and no images'}",
        )


def _feroma_common(num_clients: int, drift_every: int | None) -> dict[str, Any]:
    # 002 I.3: the pool is duplicated once for 50 clients and twice for 100.
    copies = 1 if num_clients <= 20 else 2 if num_clients <= 50 else 3
    return {"num_clients": num_clients, "drift_every": drift_every, "copies": copies, "test_fraction": 0.2}


def _feroma(kind: str, level: str):
    name = f"feroma/{kind}/{level}"

    def build(facts: DatasetFacts, num_clients: int = 20, drift_every: int | None = 4) -> dict[str, Any]:
        _images(facts, name)
        big = facts.num_classes == 100
        out = _feroma_common(num_clients, drift_every)
        if kind == "feature_skew":
            out.update(partition="chunks", shifts=[{"name": "feature_bank", **FEROMA_LEVELS[kind][level]}])
        elif kind == "label_skew":
            out.update(partition="class_bank", banks=FEROMA_LEVELS[kind][level], classes_per_client=20 if big else 2)
        elif kind == "conditional_label_skew":
            m = FEROMA_LEVELS[kind + ("_cifar100" if big else "")][level]
            shift = {"name": "label_permutation", "classes": m}
            if big:
                shift["permutations"] = FEROMA_CIFAR100_PERMUTATIONS
            # 002 App. E: 20 labelled samples per class let test clients be matched under P(Y|X).
            out.update(partition="chunks", shifts=[shift], test_clients={"mode": "feroma", "labelled_per_class": 20})
        else:
            out.update(
                partition="chunks", shifts=[{"name": "conditional_transform", "banks": FEROMA_LEVELS[kind][level]}]
            )
        return out

    build.__doc__ = (
        f"002 I.2 {FEROMA_KINDS[kind]}, level {level} ({_level_text(kind, level)}); 20 clients, "
        f"drift every 4 rounds unless drift_every says otherwise; I.3 duplication for 50-100 clients."
    )
    preset(name)(build)


FEROMA_KINDS = {
    "feature_skew": "feature skew P(X)",
    "label_skew": "label skew P(Y)",
    "conditional_label_skew": "concept shift P(Y|X)",
    "conditional_feature_skew": "concept shift P(X|Y)",
}


def _level_text(kind: str, level: str) -> str:
    if kind == "feature_skew":
        table = FEROMA_LEVELS[kind][level]
        return f"{table['rotations']} rotations x {'3 colours' if table['colours'] else 'no colour'}"
    if kind == "label_skew":
        return f"bank of {FEROMA_LEVELS[kind][level]} class subsets"
    if kind == "conditional_label_skew":
        return f"{FEROMA_LEVELS[kind][level]} swapped classes, {FEROMA_LEVELS[kind + '_cifar100'][level]} on CIFAR-100"
    return f"bank of {FEROMA_LEVELS[kind][level]} targeted-class patterns"


for _kind in ("feature_skew", "label_skew", "conditional_label_skew", "conditional_feature_skew"):
    for _level in ("low", "medium", "high"):
        _feroma(_kind, _level)


def _conditional_common(clusters: int, sparsity: str) -> dict[str, Any]:
    """001 Sec. IV-B: clients of a cluster hold disjoint shares; test data split the same way (official split)."""
    return {
        "num_clients": clusters * SPARSITY_CLIENTS_PER_CLUSTER[sparsity],
        "local_test": "official",
        "test_clients": {"mode": "own"},
    }


@preset("conditional/E1")
def conditional_e1(facts: DatasetFacts, clusters: int = 2, sparsity: Sparsity = "rich") -> dict[str, Any]:
    """001 E1 label shift: K clusters on disjoint class groups, K in {2, 3, 5, 10} (20 on CIFAR-100)."""
    _images(facts, "conditional/E1")
    return {**_conditional_common(clusters, sparsity), "partition": "class_clusters", "clusters": clusters}


@preset("conditional/E2a")
def conditional_e2a(facts: DatasetFacts, clusters: int = 2, sparsity: Sparsity = "rich") -> dict[str, Any]:
    """001 E2a subclass covariate shift: same superclass labels, different subclasses per cluster."""
    _images(facts, "conditional/E2a")
    return {**_conditional_common(clusters, sparsity), "partition": "subclass_clusters", "clusters": clusters}


@preset("conditional/E2b")
def conditional_e2b(facts: DatasetFacts, clusters: int = 4, sparsity: Sparsity = "rich") -> dict[str, Any]:
    """001 E2b rotation covariate shift: cluster k sees images rotated by k * 360 / K (Table I: FMNIST K=4)."""
    _images(facts, "conditional/E2b")
    return {
        **_conditional_common(clusters, sparsity),
        "partition": "iid",
        "shifts": [{"name": "rotation", "clusters": clusters}],
    }


@preset("conditional/E3a")
def conditional_e3a(facts: DatasetFacts, sparsity: Sparsity = "rich") -> dict[str, Any]:
    """001 E3a semantic concept shift: one cluster labels odd/even, the other below-5/above-5."""
    _images(facts, "conditional/E3a", (10,))
    return {
        **_conditional_common(2, sparsity),
        "partition": "iid",
        "shifts": [{"name": "relabel", "groupings": ["parity", "half"]}],
    }


@preset("conditional/E3b")
def conditional_e3b(facts: DatasetFacts, clusters: int = 2, sparsity: Sparsity = "rich") -> dict[str, Any]:
    """001 E3b label permutation: each of K clusters uses its own random permutation of all classes."""
    _images(facts, "conditional/E3b", (10,))
    shift = {"name": "label_permutation", "classes": None, "permutations": clusters, "assign": "blocks"}
    return {**_conditional_common(clusters, sparsity), "partition": "iid", "shifts": [shift]}


@preset("conditional/E4a")
def conditional_e4a(facts: DatasetFacts, sparsity: Sparsity = "rich") -> dict[str, Any]:
    """001 E4a domain shift: MNIST clients beside Fashion-MNIST clients (dataset `mixture`), one cluster each."""
    if "domain" not in facts.meta_columns:
        raise ConfigError(
            "scenario.preset",
            "conditional/E4a",
            "a dataset with a 'domain' column: {name: mixture, parts: [mnist, fmnist]}",
        )
    return {**_conditional_common(2, sparsity), "partition": "natural", "column": "domain"}


@preset("conditional/E4b")
def conditional_e4b(facts: DatasetFacts, covariate_clusters: int = 2, sparsity: Sparsity = "rich") -> dict[str, Any]:
    """001 E4b combined shift on CIFAR-10: 2 concept groups x C in {2, 3, 4} covariate clusters."""
    if facts.dataset != "cifar10":
        raise ConfigError(
            "scenario.preset", "conditional/E4b", "dataset cifar10 (its semantic and size label concepts)"
        )
    return {
        **_conditional_common(2 * covariate_clusters, sparsity),
        "partition": "concept_covariate",
        "covariate_clusters": covariate_clusters,
    }


def _feddrm(partition: dict[str, Any]) -> dict[str, Any]:
    """004 Sec. 5: train and test pooled, 8 clients from the 3 photometric bits, 70/30 split per client."""
    return {
        **partition,
        "num_clients": 8,
        "source": "all",
        "test_fraction": 0.3,
        "shifts": [{"name": "photometric"}],
        "test_clients": {"mode": "none"},
    }


@preset("feddrm/dir0.3")
def feddrm_dir(facts: DatasetFacts) -> dict[str, Any]:
    """004 Sec. 5: Dirichlet(0.3) label partition (unequal client sizes) with the 8 photometric clients."""
    _images(facts, "feddrm/dir0.3")
    return _feddrm({"partition": "dirichlet", "alpha": 0.3})


@preset("feddrm/shards5")
def feddrm_shards(facts: DatasetFacts) -> dict[str, Any]:
    """004 Sec. 5: 5 label-homogeneous shards per client (S-SPC) with the 8 photometric clients."""
    _images(facts, "feddrm/shards5")
    return _feddrm({"partition": "shards", "shards_per_client": 5})


@preset("feddrm/spc")
def feddrm_spc(facts: DatasetFacts) -> dict[str, Any]:
    """004 Table 1's S-SPC with S by the class count, so one task grids it over datasets: 5 shards per client
    on 10 classes (CIFAR-10, MNIST), 25 on CIFAR-100's 100, with the 8 photometric clients."""
    _images(facts, "feddrm/spc")
    return _feddrm({"partition": "shards", "shards_per_client": 5 if facts.num_classes <= 10 else 25})


@preset("made/writers_noise")
def made_writers_noise(facts: DatasetFacts, num_clients: int = 30, sigma: float = 0.5) -> dict[str, Any]:
    """003 Sec. III-A / IV: disjoint writer groups over 30 clients, plus noise sigma * i / N (sigma = 0.5)."""
    if "writer" not in facts.meta_columns:
        raise ConfigError(
            "scenario.preset",
            "made/writers_noise",
            "a dataset with a 'writer' column, e.g. femnist (LEAF JSON; digits_only: true for 003's EMNIST digits)",
        )
    return {
        "num_clients": num_clients,
        "partition": "natural",
        "column": "writer",
        "shifts": [{"name": "noise", "sigma": sigma}],
        "test_clients": {"mode": "none"},
    }


@preset("made/dirichlet")
def made_dirichlet(facts: DatasetFacts, beta: float = 0.5) -> dict[str, Any]:
    """003 Sec. III-B / IV: Dirichlet(beta) label shift over 5 clients, beta in {0.1, 0.3, 0.5, 0.7, 1.0}."""
    return {"num_clients": 5, "partition": "dirichlet", "alpha": beta, "test_clients": {"mode": "none"}}

"""Several datasets side by side as one, each sample tagged with the dataset ('domain') it came from.

Seed 001's E4a puts MNIST clients beside Fashion-MNIST clients: a domain shift in which both domains keep
their own 10-class task. A natural partition on meta['domain'] gives each client one domain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml

from fedbench.core.errors import ConfigError
from fedbench.core.registry import DATASETS, register_dataset
from fedbench.data.base import BaseDataset, DatasetFacts, dataset_facts, resolve_options, with_facts

FIELD = "dataset.parts"
SYNTAX = "a list of at least 2 dataset names, each optionally with options as 'name:key=value,key=value'"


def _parse(parts: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    """(name, options) of each part; option values are read as YAML scalars ('seed=1' gives the int 1)."""
    if len(parts) < 2:
        raise ConfigError(FIELD, parts, SYNTAX)
    parsed = []
    for part in parts:
        name, _, rest = part.partition(":")
        options = {}
        for item in filter(None, (s.strip() for s in rest.split(","))):
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise ConfigError(FIELD, part, SYNTAX)
            options[key.strip()] = yaml.safe_load(value)
        parsed.append((name.strip(), options))
    return parsed


def _facts(parts: tuple[str, ...]) -> DatasetFacts:
    """The parts' common facts plus the 'domain' column; parts of different shapes or class counts are refused."""
    found = []
    for i, (name, options) in enumerate(_parse(parts)):
        try:
            found.append(dataset_facts(name, **options))
        except ConfigError as exc:  # an error about the part's own field would not point at the task's line
            raise ConfigError(f"{FIELD}[{i}]", parts[i], f"{exc.field}: {exc.allowed}") from exc
    first = found[0]
    if any(f.num_classes != first.num_classes for f in found):
        raise ConfigError(FIELD, parts, f"parts with equal numbers of classes, got {[f.num_classes for f in found]}")
    if any((f.channels, f.image_size) != (first.channels, first.image_size) for f in found):
        shapes = [(f.channels, f.image_size) for f in found]
        raise ConfigError(FIELD, parts, f"parts with equal (channels, image size), got {shapes}")
    same_groups = all(f.superclasses == first.superclasses for f in found)
    return DatasetFacts(
        first.num_classes,
        first.channels,
        first.image_size,
        ("domain",),
        first.superclasses if same_groups else None,
        train_size=_total(f.train_size for f in found),
        test_size=_total(f.test_size for f in found),
    )


def _total(sizes) -> int | None:
    """The parts' rows together; None when a part's is unknown."""
    sizes = list(sizes)
    return None if None in sizes else sum(sizes)


@register_dataset("mixture")
@with_facts(_facts)
def mixture(root: Path, parts: tuple[str, ...] = ("mnist", "fmnist")) -> BaseDataset:
    """The named datasets concatenated, labels unchanged, meta 'split' kept and 'domain' = index of the part.

    Labels are not offset: as in 001 E4a, each domain is a 10-class task of its own, and a model shared by
    both has to tell the domains apart from the images. Rows are ordered as in every dataset, all train
    rows first (part by part), then all test rows. Class names are the parts' names where they agree,
    else each label's names joined by '|' ("0|T-shirt/top" for mnist + fmnist).

    Args:
        root: the data root every part is read from.
        parts: registered dataset names, each optionally with loader options as 'name:key=value,key=value'
            (values read as YAML scalars), e.g. ["synthetic_images:seed=1", "synthetic_images:seed=2"].

    Raises:
        ConfigError: naming `dataset.parts` when the parts differ in image shape or number of classes.
    """
    _facts(parts)
    # The loaders are called directly, past load_dataset's cache: a part is only needed until it is copied
    # into the mixture, which load_dataset caches in its turn.
    loaders = [(DATASETS.get(name), name, options) for name, options in _parse(parts)]
    loaded = [loader(root, **resolve_options(name, loader, options)) for loader, name, options in loaders]
    first = loaded[0]
    if any(d.num_classes != first.num_classes for d in loaded):
        raise ConfigError(FIELD, parts, f"parts with equal numbers of classes, got {[d.num_classes for d in loaded]}")
    if any((d.input_shape, d.x.dtype) != (first.input_shape, first.x.dtype) for d in loaded):
        raise ConfigError(FIELD, parts, f"parts with equal input shapes, got {[d.input_shape for d in loaded]}")

    def rows(split: str) -> dict[str, np.ndarray]:
        masks = [d.meta["split"].to_numpy() == split for d in loaded]
        return {
            "x": np.concatenate([d.x[m] for d, m in zip(loaded, masks, strict=True)]),
            "y": np.concatenate([d.y[m] for d, m in zip(loaded, masks, strict=True)]),
            "domain": np.concatenate([np.full(int(m.sum()), i, np.int64) for i, m in enumerate(masks)]),
        }

    names = list(zip(*(d.classes for d in loaded), strict=True))
    classes = [group[0] if len(set(group)) == 1 else "|".join(group) for group in names]
    return BaseDataset.from_splits("mixture", classes, rows("train"), rows("test"))

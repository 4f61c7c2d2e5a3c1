from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

from fedbench.core.errors import ConfigError
from fedbench.data import load_dataset
from fedbench.data.digits import digits


def test_shapes_dtypes_and_labels():
    ds = load_dataset("digits")
    assert ds.x.shape == (1797, 1, 8, 8) and ds.x.dtype == np.uint8
    assert ds.y.dtype == np.int64 and set(np.unique(ds.y)) == set(range(10))
    assert ds.num_classes == 10 and ds.is_image
    assert ds.x.min() == 0 and ds.x.max() == 255


def test_pixels_are_rescaled_from_0_16_and_every_image_appears_once():
    ds = load_dataset("digits")
    bunch = load_digits()
    rescaled = np.round(bunch.images * 255 / 16).astype(np.uint8)
    expected = sorted(img.tobytes() + bytes([label]) for img, label in zip(rescaled, bunch.target, strict=True))
    assert sorted(img.tobytes() + bytes([label]) for img, label in zip(ds.x[:, 0], ds.y, strict=True)) == expected


def test_split_is_stratified_and_train_first():
    ds = load_dataset("digits")
    split = ds.meta["split"].to_numpy()
    n_test = int((split == "test").sum())
    assert n_test == pytest.approx(0.2 * len(ds), abs=1)
    assert (split[: len(ds) - n_test] == "train").all()
    for c in range(10):
        in_class = ds.y == c
        assert (split[in_class] == "test").mean() == pytest.approx(0.2, abs=0.02)


def test_split_is_deterministic_and_follows_test_fraction():
    a, b = digits(Path(".")), digits(Path("."))
    assert a is not b
    assert np.array_equal(a.x, b.x) and a.meta.equals(b.meta)
    half = digits(Path("."), test_fraction=0.5)
    assert (half.meta["split"] == "test").sum() == pytest.approx(1797 / 2, abs=1)


def test_cache_returns_the_same_object():
    assert load_dataset("digits", test_fraction=0.25) is load_dataset("digits", test_fraction=0.25)


def test_test_fraction_out_of_range_is_rejected():
    with pytest.raises(ConfigError) as info:
        load_dataset("digits", test_fraction=1.0)
    assert info.value.field == "dataset.test_fraction"

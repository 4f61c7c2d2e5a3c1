from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fedbench.core.errors import ConfigError
from fedbench.data import load_dataset
from fedbench.data.synthetic import synthetic

HERE = Path(".")


def test_shapes_dtypes_and_columns():
    ds = load_dataset("synthetic", num_devices=5, samples_per_device=40)
    assert ds.x.shape == (200, 60) and ds.x.dtype == np.float32
    assert ds.y.dtype == np.int64 and ds.y.min() >= 0 and ds.y.max() < 10
    assert ds.num_classes == 10 and not ds.is_image
    assert list(ds.meta.columns) == ["split", "device"]
    assert sorted(ds.meta["device"].unique()) == [0, 1, 2, 3, 4]


def test_each_device_is_split_by_test_fraction_train_rows_first():
    ds = load_dataset("synthetic", num_devices=4, samples_per_device=50, test_fraction=0.2)
    split = ds.meta["split"].to_numpy()
    assert (split[:160] == "train").all() and (split[160:] == "test").all()
    per_device = ds.meta.groupby(["device", "split"]).size().unstack()
    assert per_device["test"].tolist() == [10] * 4 and per_device["train"].tolist() == [40] * 4


def test_default_sizes_follow_the_power_law():
    ds = load_dataset("synthetic")
    sizes = ds.meta["device"].value_counts()
    assert len(sizes) == 30 and sizes.min() >= 50
    assert sizes.max() > 5 * sizes.min()  # lognormal(4, 2): a few devices hold most samples


def test_same_seed_same_data_other_seed_other_data():
    a, b = synthetic(HERE, num_devices=3, seed=7), synthetic(HERE, num_devices=3, seed=7)
    assert a is not b
    assert np.array_equal(a.x, b.x) and np.array_equal(a.y, b.y) and a.meta.equals(b.meta)
    c = synthetic(HERE, num_devices=3, seed=8)
    assert len(c) != len(a) or not np.array_equal(a.x, c.x)


def test_does_not_touch_global_random_state():
    np.random.seed(123)
    expected = np.random.random()
    np.random.seed(123)
    synthetic(HERE, num_devices=2, samples_per_device=10)
    assert np.random.random() == expected


def test_cache_returns_the_same_object():
    first = load_dataset("synthetic", num_devices=3, samples_per_device=20, seed=1)
    assert load_dataset("synthetic", num_devices=3, samples_per_device=20, seed=1) is first
    assert load_dataset("synthetic", num_devices=3, samples_per_device=20, seed=1, alpha=1) is first  # int -> float


def _spread_of_device_means(beta: float) -> float:
    """Std across devices of each device's mean feature vector, averaged over the 60 features."""
    ds = synthetic(HERE, beta=beta, num_devices=40, samples_per_device=100)
    means = np.stack([ds.x[ds.meta["device"].to_numpy() == k].mean(axis=0) for k in range(40)])
    return float(means.std(axis=0).mean())


def test_larger_beta_spreads_device_feature_means_further():
    spreads = [_spread_of_device_means(beta) for beta in (0.0, 1.0, 4.0)]
    assert spreads[0] < spreads[1] < spreads[2]
    # v_k ~ N(B_k, 1) with B_k ~ N(0, beta): the spread grows like sqrt(1 + beta^2), 4.1x for beta = 4.
    assert spreads[2] > 2.5 * spreads[0]


def test_labels_come_from_per_device_models():
    ds = synthetic(HERE, num_devices=10, samples_per_device=300)
    histograms = np.stack([np.bincount(ds.y[ds.meta["device"].to_numpy() == k], minlength=10) for k in range(10)])
    assert (histograms.argmax(axis=1) != histograms.argmax(axis=1)[0]).any()  # devices disagree on the usual class


@pytest.mark.parametrize(
    "option, value",
    [("test_fraction", 0.0), ("num_devices", 0), ("samples_per_device", 1), ("beta", -1.0), ("alpha", -0.5)],
)
def test_bad_values_name_the_option(option, value):
    with pytest.raises(ConfigError) as info:
        load_dataset("synthetic", **{option: value})
    assert info.value.field == f"dataset.{option}"

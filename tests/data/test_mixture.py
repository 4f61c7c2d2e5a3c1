from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from fedbench.core.errors import ConfigError
from fedbench.data import DatasetFacts, dataset_facts, load_dataset

SMALL = "synthetic_images:train_samples=40,test_samples=10,num_classes=4"
PARTS = [f"{SMALL},seed=1", f"{SMALL},seed=2,noise=5"]


def test_parts_side_by_side_train_rows_first_with_domain():
    ds = load_dataset("mixture", parts=PARTS)
    a = load_dataset("synthetic_images", train_samples=40, test_samples=10, num_classes=4, seed=1)
    b = load_dataset("synthetic_images", train_samples=40, test_samples=10, num_classes=4, seed=2, noise=5.0)
    assert ds.x.shape == (100, 1, 28, 28) and ds.num_classes == 4
    assert list(ds.meta.columns) == ["split", "domain"]
    assert ds.meta["split"].tolist() == ["train"] * 80 + ["test"] * 20
    assert ds.meta["domain"].tolist() == [0] * 40 + [1] * 40 + [0] * 10 + [1] * 10
    order = np.r_[0:40, 50:90, 40:50, 90:100]  # positions in a followed by b
    assert np.array_equal(ds.x, np.concatenate([a.x, b.x])[order])
    assert np.array_equal(ds.y, np.concatenate([a.y, b.y])[order])  # labels are not offset
    assert ds.classes == a.classes
    assert load_dataset("mixture", parts=tuple(PARTS)) is ds


def test_facts_match_and_are_checked_before_loading():
    assert dataset_facts("mixture", parts=PARTS) == DatasetFacts(
        4, 1, (28, 28), ("domain",), None, "mixture", train_size=80, test_size=20
    )
    assert dataset_facts("mixture").meta_columns == ("domain",)  # the default mnist + fmnist, nothing read


@pytest.mark.parametrize(
    "parts, field, says",
    [
        (["mnist"], "dataset.parts", "at least 2"),
        (["mnist", "cifar10"], "dataset.parts", "equal (channels, image size)"),
        (["mnist", "synthetic_images:num_classes=5"], "dataset.parts", "equal numbers of classes"),
        (["mnist", "imagenet"], "dataset.parts[1]", "known datasets are"),
        (["mnist", "digits:test_fraction=2"], "dataset.parts[1]", "dataset.test_fraction"),
        (["mnist", "synthetic_images:seed"], "dataset.parts", "name:key=value"),
    ],
)
def test_bad_parts_name_the_field(tmp_path, parts, field, says):
    for check in (
        lambda: dataset_facts("mixture", parts=parts),
        lambda: load_dataset("mixture", tmp_path, parts=parts),
    ):
        with pytest.raises(ConfigError) as info:
            check()
        assert info.value.field == field and says in str(info.value)


def test_vector_parts_mix_too():
    part = "synthetic:num_devices=2,samples_per_device=10"
    ds = load_dataset("mixture", parts=[part, f"{part},seed=1"])
    assert ds.x.shape == (40, 60) and not ds.is_image and sorted(set(ds.meta["domain"])) == [0, 1]


@pytest.mark.real_data
def test_mnist_beside_fashion_mnist():
    root = os.environ.get("FEDBENCH_DATA")
    if not root or not all((Path(root) / f / "raw").is_dir() for f in ("MNIST", "FashionMNIST")):
        pytest.skip("set FEDBENCH_DATA to a folder holding MNIST/raw and FashionMNIST/raw")
    ds = load_dataset("mixture")
    assert ds.x.shape == (140000, 1, 28, 28) and ds.num_classes == 10
    assert ds.classes[0] == "0|T-shirt/top" and ds.classes[9] == "9|Ankle boot"
    counts = ds.meta.groupby(["split", "domain"]).size()
    assert counts[("train", 0)] == counts[("train", 1)] == 60000 and counts[("test", 0)] == counts[("test", 1)] == 10000
    mnist = load_dataset("mnist")
    assert np.array_equal(ds.x[:60000], mnist.x[:60000]) and np.array_equal(ds.y[120000:130000], mnist.y[60000:])

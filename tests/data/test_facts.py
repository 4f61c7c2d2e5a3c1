from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

from fedbench.core.errors import ConfigError, UnknownNameError
from fedbench.core.registry import DATASETS
from fedbench.data import BaseDataset, DatasetFacts, dataset_facts, load_dataset
from fedbench.data.cifar import CIFAR100_COARSE_OF_FINE
from tests.data.test_cifar import write_cifar10, write_cifar100
from tests.data.test_femnist import LEAF_FILES, write_leaf

GRAY_28 = DatasetFacts(10, 1, (28, 28), (), None, train_size=60000, test_size=10000)

# CIFAR-100's 20 superclasses in coarse-label order, each with its 5 fine classes (the dataset's own listing).
CIFAR100_SUPERCLASSES = {
    "aquatic_mammals": "beaver dolphin otter seal whale",
    "fish": "aquarium_fish flatfish ray shark trout",
    "flowers": "orchid poppy rose sunflower tulip",
    "food_containers": "bottle bowl can cup plate",
    "fruit_and_vegetables": "apple mushroom orange pear sweet_pepper",
    "household_electrical_devices": "clock keyboard lamp telephone television",
    "household_furniture": "bed chair couch table wardrobe",
    "insects": "bee beetle butterfly caterpillar cockroach",
    "large_carnivores": "bear leopard lion tiger wolf",
    "large_man-made_outdoor_things": "bridge castle house road skyscraper",
    "large_natural_outdoor_scenes": "cloud forest mountain plain sea",
    "large_omnivores_and_herbivores": "camel cattle chimpanzee elephant kangaroo",
    "medium_mammals": "fox porcupine possum raccoon skunk",
    "non-insect_invertebrates": "crab lobster snail spider worm",
    "people": "baby boy girl man woman",
    "reptiles": "crocodile dinosaur lizard snake turtle",
    "small_mammals": "hamster mouse rabbit shrew squirrel",
    "trees": "maple_tree oak_tree palm_tree pine_tree willow_tree",
    "vehicles_1": "bicycle bus motorcycle pickup_truck train",
    "vehicles_2": "lawn_mower rocket streetcar tank tractor",
}


@pytest.mark.parametrize("name", DATASETS.names())
def test_every_registered_dataset_declares_facts_at_its_defaults(name):
    assert isinstance(dataset_facts(name), DatasetFacts)


@pytest.mark.parametrize(
    "name, params, expected",
    [
        ("mnist", {}, dataclasses.replace(GRAY_28, mean_std=((0.1307,), (0.3081,)))),
        ("fmnist", {}, dataclasses.replace(GRAY_28, mean_std=((0.2860,), (0.3530,)))),
        ("emnist", {}, dataclasses.replace(GRAY_28, train_size=240000, test_size=40000)),
        (
            "cifar10",
            {},
            DatasetFacts(
                10,
                3,
                (32, 32),
                (),
                (0, 0, 1, 1, 1, 1, 1, 1, 0, 0),
                mean_std=((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
                train_size=50000,
                test_size=10000,
            ),
        ),
        (
            "cifar100",
            {"label": "coarse"},
            DatasetFacts(
                20,
                3,
                (32, 32),
                ("fine_label", "coarse_label"),
                None,
                mean_std=((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
                train_size=50000,
                test_size=10000,
            ),
        ),
        ("digits", {}, DatasetFacts(10, 1, (8, 8), (), None, train_size=1437, test_size=360)),
        (
            "synthetic",
            {"num_devices": 3},
            DatasetFacts(10, None, None, ("device",), None, train_size=366, test_size=91, features=60),
        ),
        (
            "synthetic_images",
            {"channels": 3, "size": 32, "num_classes": 7},
            DatasetFacts(7, 3, (32, 32), (), None, train_size=60000, test_size=10000),
        ),
        ("femnist", {}, DatasetFacts(62, 1, (28, 28), ("writer",), None)),
        ("femnist", {"digits_only": True}, DatasetFacts(10, 1, (28, 28), ("writer",), None)),
        ("mixture", {}, DatasetFacts(10, 1, (28, 28), ("domain",), None, train_size=120000, test_size=20000)),
    ],
)
def test_declared_values(name, params, expected, tmp_path, monkeypatch):
    monkeypatch.setenv("FEDBENCH_DATA", str(tmp_path))  # an empty root: facts never read files
    assert dataset_facts(name, **params) == dataclasses.replace(expected, dataset=name)


def test_cifar100_fine_labels_carry_the_official_superclasses():
    facts = dataset_facts("cifar100")
    assert facts.num_classes == 100 and facts.superclasses == CIFAR100_COARSE_OF_FINE
    coarse_of = {fine: c for c, members in enumerate(CIFAR100_SUPERCLASSES.values()) for fine in members.split()}
    assert list(CIFAR100_SUPERCLASSES) == sorted(CIFAR100_SUPERCLASSES)  # coarse labels number the sorted names
    fine_names = sorted(coarse_of)  # ... and so do the fine labels
    assert facts.superclasses == tuple(coarse_of[f] for f in fine_names)
    assert (facts.superclasses[0], facts.superclasses[1], facts.superclasses[19]) == (
        4,
        1,
        11,
    )  # apple, aquarium_fish, cattle
    assert np.bincount(facts.superclasses).tolist() == [5] * 20


def test_options_are_resolved_and_checked_like_the_loader_does():
    assert dataset_facts("synthetic_images", num_classes=3) == dataset_facts("synthetic_images", num_classes=3, size=28)
    with pytest.raises(ConfigError) as info:
        dataset_facts("synthetic_images", num_classes=1)
    assert info.value.field == "dataset.num_classes"
    with pytest.raises(ConfigError) as info:
        dataset_facts("cifar100", label="superclass")
    assert info.value.field == "dataset.label"
    with pytest.raises(ConfigError, match="options of mnist are: colour_seed, colourise"):
        dataset_facts("mnist", label="fine")
    with pytest.raises(ConfigError) as info:
        dataset_facts("digits", test_fraction=0.0)
    assert info.value.field == "dataset.test_fraction"
    with pytest.raises(ConfigError) as info:
        dataset_facts("synthetic", num_devices="many")
    assert info.value.field == "dataset.num_devices"
    with pytest.raises(UnknownNameError) as info:
        dataset_facts("imagenet")
    assert info.value.field == "dataset.name"


def test_superclasses_must_cover_every_class():
    with pytest.raises(ValueError, match="3 superclass ids for 2 classes"):
        DatasetFacts(2, 1, (8, 8), (), (0, 1, 1))


def assert_agrees(ds: BaseDataset, facts: DatasetFacts, full_size: bool = True) -> None:
    """A loaded dataset is what its facts promised: the promise task-load checks rely on.

    Args:
        full_size: the data is the real thing (or generated), not a smaller stand-in, so its split sizes count.
    """
    assert ds.num_classes == facts.num_classes and len(ds.classes) == facts.num_classes
    assert ds.y.min() >= 0 and ds.y.max() < facts.num_classes
    if facts.channels is None:
        assert not ds.is_image and facts.image_size is None
    else:
        assert ds.is_image and ds.input_shape == (facts.channels, *facts.image_size)
    assert tuple(c for c in ds.meta.columns if c != "split") == facts.meta_columns
    assert set(ds.meta["split"]) <= {"train", "test"}
    if full_size:
        for split, size in (("train", facts.train_size), ("test", facts.test_size)):
            assert size is None or size == int((ds.meta["split"] == split).sum()), (split, size)


OFFLINE = [
    ("digits", {}),
    ("digits", {"test_fraction": 0.5}),
    ("digits", {"colourise": True, "colour_seed": 3}),
    ("synthetic", {"num_devices": 4, "samples_per_device": 20}),
    ("synthetic_images", {"train_samples": 30, "test_samples": 10}),
    ("synthetic_images", {"channels": 3, "size": 16, "num_classes": 5, "train_samples": 30, "test_samples": 10}),
    (
        "mixture",
        {"parts": ["synthetic_images:train_samples=20,test_samples=5", "synthetic_images:seed=3,test_samples=2"]},
    ),
    ("femnist", {}),
    ("femnist", {"digits_only": True}),
    ("cifar10", {}),
    ("cifar100", {}),
    ("cifar100", {"label": "coarse"}),
]


@pytest.mark.parametrize("name, params", OFFLINE, ids=[f"{n}-{i}" for i, (n, _) in enumerate(OFFLINE)])
def test_loaded_dataset_agrees_with_its_facts(name, params, tmp_path):
    # Small stand-ins in the real layouts for the datasets whose files are not shipped.
    write_leaf(tmp_path / "femnist", LEAF_FILES)
    write_cifar10(tmp_path)
    write_cifar100(tmp_path)
    stand_in = name.startswith("cifar")  # 12 images in CIFAR's layout, not the archives' 60,000
    assert_agrees(load_dataset(name, tmp_path, **params), dataset_facts(name, **params), full_size=not stand_in)


@pytest.mark.real_data
@pytest.mark.parametrize(
    "name, params", [("mnist", {}), ("fmnist", {}), ("mixture", {}), ("mnist", {"colourise": True})]
)
def test_real_dataset_agrees_with_its_facts(name, params):
    root = os.environ.get("FEDBENCH_DATA")
    if not root or not all((Path(root) / f / "raw").is_dir() for f in ("MNIST", "FashionMNIST")):
        pytest.skip("set FEDBENCH_DATA to a folder holding MNIST/raw and FashionMNIST/raw")
    assert_agrees(load_dataset(name, **params), dataset_facts(name, **params))

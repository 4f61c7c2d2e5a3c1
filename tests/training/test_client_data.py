"""A client's batches: shift transforms first, then the run's normalisation."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

from fedbench.core.errors import ConfigError
from fedbench.core.runspec import Normalization
from fedbench.data import load_dataset, normalization_values
from fedbench.scenarios import ClientView
from fedbench.scenarios.transforms.ops import Colour
from fedbench.training import materialize


def view(transform=()) -> ClientView:
    return ClientView(np.arange(20), np.arange(20, 30), 0, tuple(transform), None, "")


def test_dataset_normalisation_standardises_after_the_transform():
    data = load_dataset("digits")
    mean, std = normalization_values(Normalization("dataset"), data)
    raw = materialize(data, view()).train_batch(torch.arange(20))[0]
    standardised = materialize(data, view(), normalization=(mean, std)).train_batch(torch.arange(20))[0]
    assert torch.allclose(standardised, (raw - mean[0]) / std[0])
    # a colour op sets the red channel to 1 everywhere: normalised afterwards, it reads (1 - mean) / std
    coloured = materialize(data, view([Colour(channel=0)]), (3, 8, 8), normalization=((0.5,), (0.25,)))
    red = coloured.train_batch(torch.arange(20))[0][:, 0]
    assert torch.allclose(red, torch.full_like(red, 2.0))


def test_the_training_split_statistics_are_exact():
    data = load_dataset("digits")
    train = data.x[data.meta["split"].to_numpy() == "train"] / 255.0
    (mean,), (std,) = data.train_channel_stats
    assert mean == pytest.approx(train.mean(), abs=1e-12) and std == pytest.approx(train.std(), abs=1e-12)


def test_what_each_mode_resolves_to():
    digits, synthetic = load_dataset("digits"), load_dataset("synthetic")
    assert normalization_values(Normalization("none"), digits) is None
    assert normalization_values(Normalization("values", (0.5,), (0.5,)), digits) == ((0.5,), (0.5,))
    assert normalization_values(Normalization("dataset"), digits) == digits.train_channel_stats
    assert normalization_values(Normalization("dataset"), synthetic) is None  # feature vectors stay as generated


@pytest.mark.real_data
def test_published_statistics_match_the_real_data():
    root = os.environ.get("FEDBENCH_DATA")
    if not root or not all((Path(root) / f / "raw").is_dir() for f in ("MNIST", "FashionMNIST")):
        pytest.skip("set FEDBENCH_DATA to a folder holding MNIST/raw and FashionMNIST/raw")
    for name in ("mnist", "fmnist"):
        data = load_dataset(name)
        (published_mean,), (published_std,) = normalization_values(Normalization("dataset"), data)
        (mean,), (std,) = data.train_channel_stats
        assert mean == pytest.approx(published_mean, abs=5e-4) and std == pytest.approx(published_std, abs=5e-4)


def test_means_that_fit_no_channel_count_are_refused():
    data = load_dataset("digits")
    with pytest.raises(ConfigError) as info:
        materialize(data, view(), normalization=((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)))
    assert info.value.field == "normalize.mean"

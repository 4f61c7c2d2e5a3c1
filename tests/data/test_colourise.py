"""colourise: gray images become RGB with a seeded, label-independent base colour per sample, so that 004's
hue and saturation shifts act on them (they do nothing on gray images), and the models take the result."""

from __future__ import annotations

import colorsys

import numpy as np
import pytest
import torch

from fedbench import run
from fedbench.core.errors import ConfigError
from fedbench.data import dataset_facts, load_dataset
from fedbench.data.colourise import HUE_BAND, SATURATION_BAND, base_colours, colourise_images
from fedbench.models import build_model
from fedbench.scenarios.transforms import BatchTransform, Photometric


def gray_images(n=40, size=28, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 1, size, size), dtype=np.uint8)


def test_colourised_digits_have_3_channels_and_keep_each_pixels_brightness():
    gray, rgb = load_dataset("digits"), load_dataset("digits", colourise=True)
    assert rgb.x.shape == (len(gray), 3, 8, 8) and rgb.x.dtype == np.uint8 and not rgb.x.flags.writeable
    assert dataset_facts("digits", colourise=True).channels == 3
    # HSV value 1: the brightest channel is the gray pixel itself (up to rounding), the background stays black.
    assert np.abs(rgb.x.max(axis=1).astype(int) - gray.x[:, 0].astype(int)).max() <= 1
    assert np.array_equal(rgb.y, gray.y) and rgb.meta.equals(gray.meta)


def test_the_same_seed_gives_the_same_colours_and_another_seed_others():
    x = gray_images()
    assert np.array_equal(colourise_images(x, 7), colourise_images(x, 7))
    assert not np.array_equal(colourise_images(x, 7), colourise_images(x, 8))
    assert not np.array_equal(
        load_dataset("digits", colourise=True).x, load_dataset("digits", colourise=True, colour_seed=1).x
    )


def test_base_colours_lie_in_the_documented_hue_and_saturation_bands():
    hsv = np.array([colorsys.rgb_to_hsv(*c) for c in base_colours(2000, 0)])
    assert HUE_BAND[0] <= hsv[:, 0].min() and hsv[:, 0].max() < HUE_BAND[1]
    assert SATURATION_BAND[0] - 1e-6 <= hsv[:, 1].min() and hsv[:, 1].max() <= SATURATION_BAND[1] + 1e-6
    assert np.allclose(hsv[:, 2], 1.0)


def test_a_samples_colour_depends_on_its_row_and_seed_only_not_its_label():
    data = load_dataset("digits", colourise=True, colour_seed=3)
    hues = np.array([colorsys.rgb_to_hsv(*c)[0] for c in base_colours(len(data), 3)])
    # The drawn colour is the one in the image (brightest pixel's channel ratios)...
    brightest = data.x.reshape(len(data), 3, -1).max(axis=1).argmax(axis=1)
    pixels = data.x.reshape(len(data), 3, -1)[np.arange(len(data)), :, brightest] / 255.0
    seen = np.array([colorsys.rgb_to_hsv(*p)[0] for p in pixels])
    assert np.abs(seen - hues).max() < 0.02
    # ...and every class gets the same spread of hues (uniform on [0, 1/2): mean 1/4, sd 0.14; ~180 per class).
    class_means = [hues[data.y == c].mean() for c in range(10)]
    assert max(abs(m - 0.25) for m in class_means) < 0.04


def test_hue_and_saturation_shifts_change_colourised_images_and_not_gray_ones():
    gray = torch.from_numpy(gray_images(8))
    rgb = torch.from_numpy(colourise_images(gray.numpy(), 0))
    y = torch.zeros(8, dtype=torch.int64)
    for op in (Photometric(hue=0.1), Photometric(hue=-0.1), Photometric(saturation=1.5), Photometric(saturation=0.5)):
        plain, shifted = BatchTransform((), 3), BatchTransform((op,), 3)
        assert torch.allclose(shifted(gray, y), plain(gray, y), atol=1e-6), op  # no chroma: the identity
        assert (shifted(rgb, y) - plain(rgb, y)).abs().max() > 0.05, op


@pytest.mark.parametrize("name, options", [("lenet5", {}), ("feddrm_net", {"backbone": "cnn", "num_clients": 8})])
def test_models_take_colourised_images(name, options):
    x = torch.from_numpy(colourise_images(gray_images(4), 0)).float() / 255.0
    model = build_model(name, tuple(x.shape[1:]), 10, **options)
    assert model(x).shape == (4, 10)


def test_feddrm_runs_on_colourised_digits_with_the_photometric_clients():
    task = {
        "name": "colour",
        "dataset": {"name": "digits", "colourise": True},
        "model": {"name": "feddrm_net", "backbone": "cnn"},
        "scenario": {"preset": "feddrm/dir0.3"},
        "algorithm": "feddrm",
        "rounds": 1,
        "local_steps": 2,
        "batch_size": 16,
    }
    [result] = run(task, track=False)
    assert result.status == "FINISHED" and 0.0 <= result.final["final.acc_system"] <= 1.0


@pytest.mark.parametrize(
    "options, field",
    [
        ({"colour_seed": 3}, "dataset.colour_seed"),  # a seed for colours that are not drawn
        ({"colourise": True, "colour_seed": -1}, "dataset.colour_seed"),
    ],
)
def test_bad_colour_options_are_refused_naming_the_option(options, field):
    with pytest.raises(ConfigError) as info:
        dataset_facts("mnist", **options)
    assert info.value.field == field


def test_colour_options_at_their_default_stay_out_of_the_spec_so_older_runs_keep_their_hash():
    from fedbench.config import load_task

    [gray] = load_task("tasks/quickstart.yaml", ["seeds=[0]", "algorithm=fedavg", "scenario.alpha=0.1"]).expand()
    assert dict(gray.dataset.params) == {"test_fraction": 0.2}
    assert gray.run_hash == "42039b5a57"  # as recorded before colourise existed
    [colour] = load_task(
        "tasks/quickstart.yaml", ["seeds=[0]", "algorithm=fedavg", "scenario.alpha=0.1", "dataset.colourise=true"]
    ).expand()
    assert dict(colour.dataset.params)["colourise"] is True and colour.run_hash != gray.run_hash
    # the dataset's options key its scenarios (and seed them): at their default the colour options are not among them
    assert load_dataset("digits").options == (("test_fraction", 0.2),)

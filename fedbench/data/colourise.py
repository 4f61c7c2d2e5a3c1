"""Colourised grayscale images: a seeded base colour per sample, so that colour shifts act on MNIST-family data.

004's covariate shift (gamma, hue, saturation; 8 clients) is written for colour images: on a gray image hue
and saturation changes are the identity (a gray pixel has no chroma), so on MNIST only gamma would tell the
clients apart. In the spirit of Colored MNIST (Arjovsky et al. 2019, "Invariant Risk Minimization", Sec.
5.2), which tints each digit red or green, `colourise` tints each sample with its own base colour: pixel
intensity v becomes v * rgb(h, s, 1), so the background stays black and the stroke takes the colour at
the gray image's brightness.

The colours are a dataset option (`dataset: {name: mnist, colourise: true, colour_seed: 0}`) rather than a
scenario transform, so that everything downstream sees a 3-channel dataset from the start: the facts
(hence scenario checks, model input shapes) and the per-channel normalisation statistics (computed from
the colourised training split, `BaseDataset.train_channel_stats`) agree, and every client and the pooled
test set see the same colours for the same sample.

Choices, none of which Colored MNIST or 004 pins down for this use:
- A sample's colour is drawn from `numpy.random.default_rng(colour_seed)` in row order (official train rows
  first), independently of its label: colour carries no class information, so a hue or saturation shift is
  a pure covariate shift P(x), as 004's photometric clients are (Colored MNIST instead correlates colour
  with the label on purpose, to plant a spurious feature; that is not what 004 studies).
- Hue uniform in [0, 1/2) turns (`HUE_BAND`), not the whole wheel: a hue rotation maps a uniform wheel onto
  itself, so 004's +-0.1 turn clients would have the same P(x) as the unshifted data; on half the wheel
  the -0.1 and +0.1 clients share 60% of their hue range, a shift a model can partly detect, as with
  natural images.
- Saturation uniform in [0.25, 0.75] (`SATURATION_BAND`): below 1 so that 004's factor 1.5 makes colours
  more vivid instead of clipping every pixel already at full saturation, and above 0 so hue is defined.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from fedbench.data.base import BaseDataset, DatasetFacts, require

HUE_BAND = (0.0, 0.5)
"""Base hues, in turns of the colour wheel (module docstring: why half the wheel)."""
SATURATION_BAND = (0.25, 0.75)
"""Base saturations, HSV's S (module docstring: why below 1)."""
_CHUNK = 8192
"""Rows colourised at a time, to bound the float working set (MNIST at once would be ~0.7 GB)."""


def colour_facts(facts: DatasetFacts, colourise: bool, colour_seed: int) -> DatasetFacts:
    """A gray dataset's facts with its `colourise` option: 3 channels, and no published mean/std (the
    colourised training split's own are computed); the options are checked here, when a task loads."""
    require(colour_seed >= 0, "colour_seed", colour_seed, "an integer >= 0")
    require(
        colourise or colour_seed == 0, "colour_seed", colour_seed, "0 unless colourise is true (it seeds the colours)"
    )
    if not colourise:
        return facts
    require(facts.channels == 1, "colourise", colourise, f"false: {facts.channels}-channel images are not gray")
    return dataclasses.replace(facts, channels=3, mean_std=None)


def base_colours(count: int, seed: int) -> np.ndarray:
    """float32 [count, 3] RGB in [0, 1] of HSV (hue in `HUE_BAND`, saturation in `SATURATION_BAND`, value 1),
    drawn in row order from `seed`."""
    rng = np.random.default_rng(seed)
    hue = rng.uniform(*HUE_BAND, size=count)
    saturation = rng.uniform(*SATURATION_BAND, size=count)
    # HSV -> RGB as f(n) = V - V S clamp(min(k, 4 - k), 0, 1), k = (n + 6 H) mod 6, n = 5, 3, 1 for R, G, B.
    k = (np.array([5.0, 3.0, 1.0])[None, :] + 6.0 * hue[:, None]) % 6.0
    return (1.0 - saturation[:, None] * np.clip(np.minimum(k, 4.0 - k), 0.0, 1.0)).astype(np.float32)


def colourise_images(x: np.ndarray, seed: int) -> np.ndarray:
    """uint8 [N, 1, H, W] gray images -> uint8 [N, 3, H, W]: each pixel v times its sample's base colour, rounded."""
    if x.dtype != np.uint8 or x.ndim != 4 or x.shape[1] != 1:
        raise ValueError(f"colourise needs uint8 [N, 1, H, W] gray images, got {x.dtype} {x.shape}")
    colours = base_colours(len(x), seed)[:, :, None, None]
    out = np.empty((len(x), 3, *x.shape[2:]), dtype=np.uint8)
    for start in range(0, len(x), _CHUNK):
        rows = slice(start, start + _CHUNK)
        np.rint(x[rows].astype(np.float32) * colours[rows], out=out[rows], casting="unsafe")
    return out


def colourised(dataset: BaseDataset, colourise: bool, colour_seed: int) -> BaseDataset:
    """`dataset` with its gray images colourised (unchanged when `colourise` is false), read-only like the rest."""
    if not colourise:
        return dataset
    x = colourise_images(dataset.x, colour_seed)
    x.flags.writeable = False
    return dataclasses.replace(dataset, x=x)

"""MADE: the autoregressive property (gradients and mask products), a normalised density, seeded masks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from fedbench.core.errors import ConfigError
from fedbench.models import build_model
from fedbench.models.made import MADE, made_masks


def seeded(torch_seed: int, shape=(1, 4, 4), **options) -> MADE:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(torch_seed)
        return build_model("made", shape, 10, **options)


def test_output_d_depends_only_on_earlier_inputs_by_gradients():
    made = seeded(0, hidden=[40, 30])
    x = torch.rand(16)
    jac = torch.autograd.functional.jacobian(lambda v: made(v.view(1, 1, 4, 4)).view(-1), x)
    assert jac.shape == (16, 16)
    assert torch.all(jac.triu() == 0)  # d/dx_j of output d is zero for j >= d
    assert torch.count_nonzero(jac.tril(-1)) > 0.5 * 16 * 15 / 2  # and most earlier inputs do matter


def test_mask_product_is_strictly_lower_triangular():
    masks = made_masks(20, (64, 64), seed=3)
    paths = masks[2] @ masks[1] @ masks[0]  # [out, in]: number of paths from input j to output d
    assert paths.shape == (20, 20)
    assert torch.all(paths.triu() == 0)
    assert paths[0].sum() == 0  # the first output has no inputs: the marginal q(x_1)


def test_probabilities_of_all_binary_vectors_sum_to_one():
    """An autoregressive product of Bernoulli conditionals is a normalised distribution over {0, 1}^D."""
    made = seeded(1, shape=(6,), hidden=[32])
    with torch.no_grad():
        for p in made.parameters():
            p.normal_(0.0, 1.0)  # far from the initialisation, so outputs are far from uniform
        grid = torch.tensor(list(itertools.product([0.0, 1.0], repeat=6)))
        total = torch.exp(-made.nll(grid)).sum().item()
    assert total == pytest.approx(1.0, abs=1e-5)


def test_nll_is_the_bernoulli_log_likelihood_with_soft_targets():
    made = seeded(2, shape=(3, 2), hidden=[8])
    x = torch.rand(4, 3, 2)
    with torch.no_grad():
        q = made(x).numpy().astype(np.float64)
        xs = x.flatten(1).numpy()
        expected = -(xs * np.log(q) + (1 - xs) * np.log(1 - q)).sum(1)
        assert made.nll(x).numpy() == pytest.approx(expected, rel=1e-4)
        assert made.log_conditionals(x).sum(1).numpy() == pytest.approx(-expected, rel=1e-4)


def test_masks_are_seeded_and_not_part_of_the_weights():
    a, b, c = seeded(0, seed=5), seeded(1, seed=5), seeded(0, seed=6)
    assert all(
        torch.equal(la.mask, lb.mask) for la, lb in zip(a.layers, b.layers, strict=True)
    )  # weights' seed: masks unchanged
    assert not all(torch.equal(la.mask, lc.mask) for la, lc in zip(a.layers, c.layers, strict=True))
    assert all("mask" not in name for name in a.state_dict())  # masks never travel in a Payload
    d = seeded(0, seed=5)
    assert all(torch.equal(a.state_dict()[k], d.state_dict()[k]) for k in a.state_dict())


def test_learns_a_simple_distribution():
    """Pixel 2 copies pixel 1: a trained MADE predicts it from pixel 1 with near certainty."""
    made = seeded(0, shape=(3,), hidden=[16])
    g = torch.Generator().manual_seed(0)
    first = (torch.rand(512, generator=g) < 0.5).float()
    x = torch.stack([first, first, torch.rand(512, generator=g).round()], dim=1)
    opt = torch.optim.Adam(made.parameters(), lr=0.1)
    for _ in range(80):
        opt.zero_grad()
        made.nll(x).mean().backward()
        opt.step()
    with torch.no_grad():
        q = made(torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]))
    assert q[0, 1] < 0.05 and q[1, 1] > 0.95
    assert 0.3 < q[0, 0] < 0.7  # the marginal of pixel 1


@pytest.mark.parametrize("options, field", [({"hidden": []}, "model.hidden"), ({"hidden": [0]}, "model.hidden")])
def test_bad_options_are_rejected(options, field):
    with pytest.raises(ConfigError) as err:
        build_model("made", (1, 4, 4), 10, **options)
    assert err.value.field == field


def test_one_dimensional_input_is_rejected():
    with pytest.raises(ConfigError, match="at least 2 dimensions"):
        build_model("made", (1,), 10)

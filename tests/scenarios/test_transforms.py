"""Batch transforms on inputs whose right answer is known: exact rotations, saturated channels, noise levels,
photometric identities and colour-wheel shifts, class restrictions, and each op's own checks."""

import colorsys
import dataclasses

import numpy as np
import pytest
import torch

from fedbench.core.errors import ConfigError
from fedbench.data.base import to_float_batch
from fedbench.scenarios.transforms import (
    OPS,
    BatchTransform,
    Canvas,
    Colour,
    Noise,
    Photometric,
    Rotate,
    describe_ops,
    shift_hue,
)


def gray_batch(n=6, size=28, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 1, size, size), generator=gen, dtype=torch.uint8)


def rgb_batch(n=6, size=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, size, size), generator=gen, dtype=torch.uint8)


def labels(n=6):
    return torch.arange(n, dtype=torch.int64) % 10


def apply(ops, x, channels=None, y=None):
    channels = channels if channels is not None else x.shape[1]
    return BatchTransform(tuple(ops), channels)(x, labels(len(x)) if y is None else y)


# ------------------------------------------------------------------------------------------ identity, dtype


@pytest.mark.parametrize("batch", [gray_batch(), rgb_batch()])
def test_no_ops_returns_to_float_batch_values(batch):
    out = apply((), batch)
    assert out.dtype == torch.float32 and out.shape == batch.shape
    assert torch.equal(out, to_float_batch(batch))


def test_gray_is_repeated_to_rgb_for_every_sample():
    x = gray_batch()
    out = apply((), x, channels=3)
    assert out.shape == (6, 3, 28, 28)
    for k in range(3):
        assert torch.equal(out[:, k], to_float_batch(x)[:, 0])


@pytest.mark.parametrize(
    "ops",
    [
        [Rotate(angle=45)],
        [Photometric(gamma=0.6, hue=-0.1, saturation=1.5)],
        [Rotate(angle=30), Photometric(gamma=1.4, hue=0.1), Colour(channel=1)],
        [Rotate(angle=90), Photometric(gamma=0.6, saturation=0.5, classes=(1, 2))],
    ],
)
def test_gray_data_in_a_colour_scenario_equals_its_rgb_repeat(ops):
    # Gray batches stay one channel until an op tells the channels apart; the result must not show it.
    x, y = gray_batch(), labels()
    out = apply(ops, x, channels=3, y=y)
    assert out.shape == (6, 3, 28, 28) and out.is_contiguous()
    assert torch.allclose(out, apply(ops, x.expand(-1, 3, -1, -1).contiguous(), channels=3, y=y), atol=1e-6)


def test_noise_on_gray_data_in_a_colour_scenario_is_drawn_per_channel():
    torch.manual_seed(0)
    out = apply([Rotate(angle=45), Noise(sigma=0.2)], gray_batch(), channels=3)
    assert not torch.equal(out[:, 0], out[:, 1]) and not torch.equal(out[:, 1], out[:, 2])


def test_float_input_is_accepted_and_never_edited():
    x = torch.full((2, 3, 4, 4), 0.25)
    before = x.clone()
    out = apply([Colour(channel=0), Photometric(gamma=0.5)], x)
    assert torch.equal(x, before)
    assert torch.allclose(out[:, 0], torch.ones(2, 4, 4)) and torch.allclose(out[:, 1:], torch.full((2, 2, 4, 4), 0.5))


# ------------------------------------------------------------------------------------------ rotations


def test_rotate_90_then_minus_90_restores_bit_for_bit():
    x = gray_batch()
    assert torch.equal(apply([Rotate(angle=90), Rotate(angle=-90)], x), to_float_batch(x))
    # also when the rotations run on floats, after another op
    ops = [Noise(sigma=0.0), Rotate(angle=270.0), Rotate(angle=90.0)]
    assert torch.equal(apply(ops, x), to_float_batch(x))


@pytest.mark.parametrize("angle, k", [(90, 1), (180.0, 2), (270, 3), (-90, 3), (450, 1)])
def test_quarter_turns_equal_rot90_of_the_float_image(angle, k):
    x = gray_batch()
    out = apply([Rotate(angle)], x)
    assert torch.equal(out, torch.rot90(to_float_batch(x), k, dims=(2, 3)))
    assert not torch.equal(out, to_float_batch(x))
    assert out.is_contiguous()


def test_rotate_90_is_counter_clockwise():
    x = torch.zeros(1, 1, 5, 5, dtype=torch.uint8)
    x[0, 0, 2, 4] = 255  # a dot at the right edge ...
    out = apply([Rotate(angle=90)], x)
    assert out[0, 0, 0, 2] == 1.0  # ... ends at the top


def disk(size=28, radius=8.0):
    yy, xx = torch.meshgrid(torch.arange(size) - (size - 1) / 2, torch.arange(size) - (size - 1) / 2, indexing="ij")
    r = (yy**2 + xx**2).sqrt()
    return (r <= radius).to(torch.uint8).mul(255).view(1, 1, size, size), r


def test_rotate_45_leaves_a_centred_disk_unchanged_inside_and_outside():
    x, r = disk()
    out = apply([Rotate(angle=45)], x)[0, 0]
    assert torch.allclose(out[r <= 6.5], torch.ones(()), atol=1e-5)
    assert torch.allclose(out[r >= 9.5], torch.zeros(()), atol=1e-5)


def test_two_45_degree_rotations_match_one_quarter_turn_in_the_centre():
    # A smooth image so that bilinear resampling twice stays close; checks the direction of non-right angles.
    yy, xx = torch.meshgrid(torch.linspace(-1, 1, 28), torch.linspace(-1, 1, 28), indexing="ij")
    img = (0.5 + 0.4 * torch.sin(2.0 * xx + 0.7) * torch.cos(1.3 * yy)) * 255
    x = img.round().to(torch.uint8).view(1, 1, 28, 28)
    twice = apply([Rotate(angle=45), Rotate(angle=45)], x)[0, 0]
    quarter = apply([Rotate(angle=90)], x)[0, 0]
    inside = (yy**2 + xx**2).sqrt() < 0.6
    assert (twice - quarter)[inside].abs().max() < 0.03
    assert (apply([Rotate(angle=-45), Rotate(angle=-45)], x)[0, 0] - quarter)[inside].abs().max() > 0.1


# ------------------------------------------------------------------------------------------ colour


@pytest.mark.parametrize("channel", [0, 1, 2])
def test_colour_saturates_one_channel_and_keeps_the_gray_values_elsewhere(channel):
    x = gray_batch()
    out = apply([Colour(channel)], x, channels=3)
    assert out.shape == (6, 3, 28, 28)
    assert torch.all(out[:, channel] == 1.0)
    for k in {0, 1, 2} - {channel}:
        assert torch.equal(out[:, k], to_float_batch(x)[:, 0])


def test_rotate_then_colour_is_the_anda_pattern():
    x = gray_batch()
    out = apply([Rotate(angle=90), Colour(channel=1)], x, channels=3)
    assert torch.all(out[:, 1] == 1.0)
    assert torch.equal(out[:, 0], torch.rot90(to_float_batch(x)[:, 0], 1, dims=(1, 2)))


# ------------------------------------------------------------------------------------------ noise


def test_noise_sigma_zero_is_identity():
    x = gray_batch()
    assert torch.equal(apply([Noise(sigma=0)], x), to_float_batch(x))


def test_noise_changes_the_batch_and_stays_in_the_unit_interval():
    x = gray_batch()
    torch.manual_seed(0)
    out = apply([Noise(sigma=0.5)], x)
    assert not torch.equal(out, to_float_batch(x))
    assert out.min() >= 0.0 and out.max() <= 1.0
    assert (out == 0).any() and (out == 1).any()  # clipped, not rescaled


def test_noise_has_the_asked_standard_deviation_and_follows_the_global_seed():
    x = torch.full((64, 1, 28, 28), 128, dtype=torch.uint8)  # mid-gray: sigma 0.1 is almost never clipped
    transform = BatchTransform((Noise(sigma=0.1),), 1)
    torch.manual_seed(3)
    out = transform(x, labels(64))
    delta = out - to_float_batch(x)
    assert abs(delta.std().item() - 0.1) < 0.003 and abs(delta.mean().item()) < 0.003
    torch.manual_seed(3)
    assert torch.equal(transform(x, labels(64)), out)
    assert not torch.equal(transform(x, labels(64)), out)  # fresh noise on the next batch


# ------------------------------------------------------------------------------------------ photometric


@pytest.mark.parametrize("op", [Photometric(), Photometric(gamma=1.0, hue=0.0, saturation=1.0)])
def test_photometric_identity_parameters_are_identity(op):
    x = rgb_batch()
    assert torch.equal(apply([op], x), to_float_batch(x))


def test_saturation_zero_gives_the_luma_gray():
    x = rgb_batch()
    out = apply([Photometric(saturation=0.0)], x)
    f = to_float_batch(x)
    luma = 0.299 * f[:, 0] + 0.587 * f[:, 1] + 0.114 * f[:, 2]
    for k in range(3):
        assert torch.allclose(out[:, k], luma, atol=1e-6)


def test_saturation_above_one_extrapolates_away_from_gray_and_clamps():
    x = rgb_batch()
    f = to_float_batch(x)
    gray = (0.299 * f[:, 0] + 0.587 * f[:, 1] + 0.114 * f[:, 2]).unsqueeze(1)
    out = apply([Photometric(saturation=1.5)], x)
    assert torch.allclose(out, (gray + 1.5 * (f - gray)).clamp(0, 1), atol=1e-6)


def test_hue_shift_by_half_twice_gives_back_the_original():
    x = rgb_batch()
    out = apply([Photometric(hue=0.5), Photometric(hue=0.5)], x)
    assert torch.allclose(out, to_float_batch(x), atol=1e-5)


def test_pure_red_shifted_by_a_third_is_green_and_back_by_a_third_is_blue():
    red = torch.zeros(1, 3, 2, 2)
    red[:, 0] = 1.0
    green = apply([Photometric(hue=0.3333333333333333)], red)
    blue = apply([Photometric(hue=-0.3333333333333333)], red)
    assert torch.allclose(green[0, :, 0, 0], torch.tensor([0.0, 1.0, 0.0]), atol=1e-6)
    assert torch.allclose(blue[0, :, 0, 0], torch.tensor([0.0, 0.0, 1.0]), atol=1e-6)


def test_hue_shift_matches_colorsys_pixel_by_pixel():
    x = rgb_batch(n=2, size=8, seed=4)
    out = apply([Photometric(hue=-0.1)], x)
    f = to_float_batch(x).permute(0, 2, 3, 1).reshape(-1, 3).double().numpy()
    expected = []
    for r, g, b in f:
        h, s, v = colorsys.rgb_to_hsv(r, g, b)
        expected.append(colorsys.hsv_to_rgb((h - 0.1) % 1.0, s, v))
    expected = torch.tensor(np.array(expected), dtype=torch.float32).view(2, 8, 8, 3).permute(0, 3, 1, 2)
    assert torch.allclose(out, expected, atol=1e-5)


def test_hue_shifts_wrap_around_the_wheel_and_leave_gray_gray():
    x = to_float_batch(rgb_batch())
    assert torch.allclose(shift_hue(x, 1.1), shift_hue(x, 0.1), atol=1e-5)
    assert torch.allclose(shift_hue(x, -0.5), shift_hue(x, 0.5), atol=1e-5)
    gray = to_float_batch(gray_batch()).expand(-1, 3, -1, -1).contiguous()
    assert torch.allclose(shift_hue(gray, 0.3), gray, atol=1e-6)


def test_gamma_half_on_a_quarter_gives_a_half():
    x = torch.full((1, 3, 2, 2), 0.25)
    assert torch.allclose(apply([Photometric(gamma=0.5)], x), torch.full((1, 3, 2, 2), 0.5))


@pytest.mark.parametrize("gamma", [0.1, 0.6, 1.4, 3.0])
def test_gamma_matches_pow_and_keeps_black_black(gamma):
    x = torch.linspace(0, 1, 101).view(1, 1, 1, 101).expand(1, 3, 1, 101).contiguous()
    out = apply([Photometric(gamma=gamma)], x)
    assert torch.allclose(out, x**gamma, atol=1e-6)
    assert out[..., 0].max() <= 1e-12 and out[..., -1].min() == 1.0


def test_photometric_order_is_saturation_then_hue_then_gamma():
    x = rgb_batch()
    together = apply([Photometric(gamma=0.6, hue=0.1, saturation=1.5)], x)
    steps = apply([Photometric(saturation=1.5), Photometric(hue=0.1), Photometric(gamma=0.6)], x)
    assert torch.equal(together, steps)
    assert together.min() >= 0 and together.max() <= 1


@pytest.mark.parametrize(
    "ops",
    [
        [Photometric(gamma=0.6, hue=-0.1, saturation=1.5)],
        [Photometric(hue=0.2)],
        [Photometric(saturation=0.5)],
    ],
)
def test_outputs_survive_later_batches_of_any_size(ops):
    # Temporaries are reused from batch to batch; what was handed out must never be among them.
    transform = BatchTransform(tuple(ops), 3)
    first, second, small = rgb_batch(seed=1), rgb_batch(seed=2), rgb_batch(n=3, seed=3)
    out = transform(first, labels())
    kept = out.clone()
    transform(second, labels())
    assert torch.equal(transform(small, labels(3)), BatchTransform(tuple(ops), 3)(small, labels(3)))
    assert torch.equal(out, kept)
    assert torch.equal(transform(first, labels()), kept)


# ------------------------------------------------------------------------------------------ classes


def test_class_conditional_ops_change_only_the_listed_classes():
    x = gray_batch(n=10)
    y = torch.arange(10)
    ops = [Rotate(angle=180, classes=(1, 3, 5)), Colour(channel=0, classes=(1, 3, 5))]
    out = apply(ops, x, channels=3, y=y)
    plain = to_float_batch(x).expand(-1, 3, -1, -1)
    full = apply([op for op in [Rotate(angle=180), Colour(channel=0)]], x, channels=3)
    for i in range(10):
        assert torch.equal(out[i], full[i] if i in (1, 3, 5) else plain[i])


@pytest.mark.parametrize("op", [Rotate(angle=30.0), Noise(sigma=0.3), Photometric(gamma=0.6, hue=0.2, saturation=0.5)])
def test_class_restriction_works_for_every_op_on_floats(op):
    x = rgb_batch(n=8)
    y = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])
    torch.manual_seed(0)
    out = apply([Noise(sigma=0.0), dataclasses.replace(op, classes=(2,))], x, y=y)
    hit = y == 2
    assert torch.equal(out[~hit], to_float_batch(x)[~hit])
    assert not torch.equal(out[hit], to_float_batch(x)[hit])


# ------------------------------------------------------------------------------------------ validation, text


@pytest.mark.parametrize(
    "op, canvas, field",
    [
        (Colour(channel=3), Canvas(3, (28, 28)), "channel"),
        (Colour(channel=0), Canvas(1, (28, 28)), "channel"),
        (Noise(sigma=-0.1), Canvas(1, (28, 28)), "sigma"),
        (Noise(sigma=float("nan")), Canvas(1, (28, 28)), "sigma"),
        (Photometric(gamma=0), Canvas(3, (32, 32)), "gamma"),
        (Photometric(gamma=float("inf")), Canvas(3, (32, 32)), "gamma"),
        (Photometric(hue=0.7), Canvas(3, (32, 32)), "hue"),
        (Photometric(gamma=0.6), Canvas(1, (28, 28)), "op"),
        (Rotate(angle=90), Canvas(1, (28, 32)), "angle"),
    ],
)
def test_an_op_check_names_its_own_field_and_what_is_allowed(op, canvas, field):
    # Relative to the op: the shift that made it names the task's path (tests/scenarios/test_generator.py).
    with pytest.raises(ConfigError) as err:
        op.check(canvas)
    assert err.value.field == field
    assert str(err.value).startswith(field) and "allowed" in str(err.value)


def test_valid_ops_pass_their_checks():
    Rotate(angle=180).check(Canvas(1, (28, 32)))  # half turns keep non-square shapes
    for op in [Rotate(angle=45), Colour(channel=2, classes=(0, 1)), Photometric(0.6, -0.1, 1.5)]:
        op.check(Canvas(3, (28, 28)))


def test_ops_are_small_hashable_values_with_a_plain_json_form():
    op = Rotate(angle=90.0, classes=(1, 2))
    assert op == Rotate(90.0, classes=(1, 2)) and hash(op) == hash(Rotate(90.0, classes=(1, 2)))
    assert op.to_dict() == {"op": "rotate", "angle": 90.0, "classes": [1, 2]}
    assert Photometric(0.6).to_dict() == {"op": "photometric", "gamma": 0.6, "hue": 0.0, "saturation": 1.0}
    assert OPS[op.to_dict()["op"]] is Rotate


@pytest.mark.parametrize(
    "ops, text",
    [
        ((), "identity"),
        ((Rotate(angle=90.0), Colour(channel=0)), "rot90 red"),
        ((Noise(sigma=0.25),), "noise 0.25"),
        ((Photometric(gamma=0.6, hue=-0.1, saturation=1.5),), "gamma 0.6 hue -0.1 sat 1.5"),
        ((Rotate(angle=180, classes=(1, 3, 5)),), "rot180 on classes 1,3,5"),
        ((Rotate(angle=270, classes=(2,)), Colour(channel=2, classes=(2,))), "rot270 blue on classes 2"),
        ((Rotate(angle=22.5),), "rot22.5"),
    ],
)
def test_describe_ops(ops, text):
    assert describe_ops(ops) == text

"""The transform ops: each one frozen class owning its parameters, its checks, its description and its batch apply.

A descriptor (`ClientView.transform`) is a tuple of these instances: small, hashable, readable in a repr
(`Rotate(angle=90.0)`) and plain JSON through `to_dict`. Shifts build them from the task's fields, and
`check` runs on every op a shift may produce when the task loads, so the worker trusts them.

Any op may carry `classes`, original labels it is restricted to: FEROMA's concept shift P(X|Y) (002 App.
I.2), where targeted classes get the pattern and the others stay plain, so the same image content means
different things to different clients.

On a batch, `apply(x, cache)` transforms every sample and `apply_masked(x, mask, keep, cache)` only those
with mask 1, where `mask` and `keep = 1 - mask` are 0/1 [B, 1, 1, 1] tensors in x's dtype. Selecting by
arithmetic (x * keep + out * mask, exact for 0/1 weights and finite values) instead of `torch.where`
avoids slow bool kernels and data-dependent shapes (no device sync on GPU). Both return a tensor the
transform owns; `x` may be edited in place once it is the transform's own float copy. `cache` is the
calling `BatchTransform`'s scratch for this op (grids, constants, buffers), so the op itself stays a value.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from numbers import Real
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from fedbench.core.errors import ConfigError
from fedbench.scenarios.transforms.kernels import (
    HueShift,
    adjust_gamma,
    adjust_saturation,
    rotation_grid,
    saturation_matrix,
)

OPS: dict[str, type[Op]] = {}
"""Op name (the `op` key of `to_dict`) -> its class."""

COLOUR_NAMES = ("red", "green", "blue")


def register_op(name: str):
    def register(cls: type[Op]) -> type[Op]:
        cls.name = name
        OPS[name] = cls
        return cls

    return register


@dataclass(frozen=True)
class Canvas:
    """The images a scenario's ops apply to, known from the dataset's facts before any data is read.

    Attributes:
        channels: the scenario's output channels (3 once any op colours images, else the data's).
        size: (height, width) of the images.
    """

    channels: int
    size: tuple[int, int]


@dataclass(frozen=True)
class Op:
    """Base of the ops; subclasses are frozen dataclasses of their parameters."""

    name: ClassVar[str]
    uint8_ok: ClassVar[bool] = False
    """Whether it may run before the float conversion (exact on uint8 and 4x fewer bytes to move)."""
    gray_ok: ClassVar[bool] = False
    """Whether it may run on one gray channel before the repeat to RGB, with the same result (less work)."""
    absorbs_scale: ClassVar[bool] = False
    """Whether `apply(x, cache, scale=s)` exists and may get the unscaled uint8 -> float conversion."""

    classes: tuple[int, ...] | None = field(default=None, kw_only=True)
    """Original labels the op is restricted to; None: every sample."""

    def check(self, canvas: Canvas) -> None:
        """Raise ConfigError, naming the op's own field, when the op cannot apply to these images."""

    def words(self) -> str:
        """The op in a few words, as `fedbench scenario show` prints it ("rot90", "noise 0.25")."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: {"op": name, parameters..., "classes": [...] when restricted}."""
        params = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "classes"}
        restricted = {"classes": list(self.classes)} if self.classes is not None else {}
        return {"op": self.name, **params, **restricted}

    def apply(self, x: torch.Tensor, cache: dict) -> torch.Tensor:
        raise NotImplementedError

    def apply_masked(self, x: torch.Tensor, mask: torch.Tensor, keep: torch.Tensor, cache: dict) -> torch.Tensor:
        return torch.addcmul(x * keep, self.apply(x.clone(), cache), mask)


def _finite(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def _num(value: float) -> str:
    return f"{float(value):g}"


def quarter_turns(angle: float) -> int | None:
    """k in 0..3 when `angle` is a multiple of 90 degrees, else None."""
    turns = float(angle) / 90.0
    return int(round(turns)) % 4 if turns == round(turns) else None


@register_op("rotate")
@dataclass(frozen=True)
class Rotate(Op):
    """Counter-clockwise by `angle` degrees. FEROMA/ANDA rotate by multiples of 360 / R (002 App. I.2);
    multiples of 90 are exact index permutations (`torch.rot90`, also on uint8), other angles (the unseen
    half-step rotations of 002 I.7, 001 E2b with K > 4) resample bilinearly with zero padding, on a grid
    built once per image size and device."""

    angle: float

    gray_ok = True

    @property
    def uint8_ok(self) -> bool:
        return quarter_turns(self.angle) is not None

    def check(self, canvas):
        if not _finite(self.angle):
            raise ConfigError("angle", self.angle, "a finite number of degrees")
        k = quarter_turns(self.angle)
        height, width = canvas.size
        if k is not None and k % 2 == 1 and height != width:
            raise ConfigError(
                "angle",
                self.angle,
                f"multiples of 180 or non-right angles: 90-degree rotations need square images, got {height}x{width}",
            )

    def words(self):
        return f"rot{_num(float(self.angle) % 360)}"

    def apply(self, x, cache):
        k = quarter_turns(self.angle)
        if k is not None:
            return torch.rot90(x, k, dims=(2, 3)) if k else x
        batch, _, height, width = x.shape
        key = (height, width, x.device, x.dtype)
        if key not in cache:
            cache[key] = rotation_grid(float(self.angle), height, width, x.device).to(x.dtype)
        grid = cache[key].expand(batch, height, width, 2)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)

    def apply_masked(self, x, mask, keep, cache):
        if quarter_turns(self.angle) == 0:
            return x
        return torch.addcmul(x * keep, self.apply(x, cache), mask)  # rot90 and grid_sample return new tensors


@register_op("colour")
@dataclass(frozen=True)
class Colour(Op):
    """Sets RGB channel `channel` to 1 everywhere: ANDA's saturated background (002 App. I.2; docs/methods.md
    "ANDA semantics")."""

    channel: int

    def check(self, canvas):
        if self.channel not in (0, 1, 2) or isinstance(self.channel, bool):
            raise ConfigError("channel", self.channel, "0, 1 or 2 (red, green, blue)")
        if canvas.channels != 3:
            raise ConfigError(
                "channel", self.channel, f"colour needs 3 output channels, the scenario has {canvas.channels}"
            )

    def words(self):
        return COLOUR_NAMES[self.channel]

    def apply(self, x, cache):
        x[:, self.channel] = 1.0
        return x

    def apply_masked(self, x, mask, keep, cache):
        x[:, self.channel].mul_(keep[:, 0]).add_(mask[:, 0])
        return x


@register_op("noise")
@dataclass(frozen=True)
class Noise(Op):
    """Additive N(0, sigma^2) noise per pixel, clipped to [0, 1] (003 Sec. II-A: client i of N gets
    sigma * i / N; the shift computes it); drawn from the global RNG, fresh on every batch."""

    sigma: float

    def check(self, canvas):
        if not (_finite(self.sigma) and self.sigma >= 0):
            raise ConfigError("sigma", self.sigma, "a finite standard deviation >= 0")

    def words(self):
        return f"noise {_num(self.sigma)}"

    def _noise(self, x):
        return torch.randn(x.shape, dtype=x.dtype, device=x.device)

    def apply(self, x, cache):
        if self.sigma == 0:
            return x
        return x.add_(self._noise(x), alpha=float(self.sigma)).clamp_(0.0, 1.0)

    def apply_masked(self, x, mask, keep, cache):
        # Noise is drawn for every sample either way, so the RNG stream does not depend on the classes.
        if self.sigma == 0:
            return x
        return x.addcmul_(self._noise(x), mask, value=float(self.sigma)).clamp_(0.0, 1.0)


@register_op("photometric")
@dataclass(frozen=True)
class Photometric(Op):
    """FedDRM's covariate bits (004 Sec. 5) in FedDRM's order: saturation, hue (in turns of the colour
    wheel), gamma; each skipped at its identity.

    On a gray image (one channel, still to be repeated to RGB) saturation and hue are the identity (the
    luma weights sum to 1, and a gray pixel has no chroma), so only gamma runs, on one channel.
    """

    gamma: float = 1.0
    hue: float = 0.0
    saturation: float = 1.0

    gray_ok = True

    @property
    def absorbs_scale(self) -> bool:
        """Whether the uint8 -> [0, 1] scaling can ride on the saturation matrix (one pass fewer)."""
        return self.saturation != 1.0 and self.classes is None

    def check(self, canvas):
        if canvas.channels != 3:
            raise ConfigError("op", self.name, f"3 output channels for photometric, the scenario has {canvas.channels}")
        if not (_finite(self.gamma) and self.gamma > 0):
            raise ConfigError("gamma", self.gamma, "a finite gamma > 0")
        if not (_finite(self.hue) and -0.5 <= self.hue <= 0.5):
            raise ConfigError("hue", self.hue, "a hue shift in turns, in [-0.5, 0.5]")
        if not (_finite(self.saturation) and self.saturation >= 0):
            raise ConfigError("saturation", self.saturation, "a finite saturation factor >= 0")

    def words(self):
        return f"gamma {_num(self.gamma)} hue {_num(self.hue)} sat {_num(self.saturation)}"

    def apply(self, x, cache, scale: float = 1.0):
        """Photometric change of `x`, in place (its buffer is what comes back); `scale` multiplies x first
        (the 1/255 of an unscaled uint8 conversion)."""
        saturation, gamma = float(self.saturation), float(self.gamma)
        shift = cache.get("hue")
        if shift is None:
            shift = cache["hue"] = HueShift(float(self.hue))
        rgb = x.shape[1] == 3
        hue = rgb and shift.turns != 0.0
        if rgb and saturation != 1.0:
            key = (x.device, x.dtype, scale)
            if key not in cache:
                cache[key] = saturation_matrix(saturation, x.device, x.dtype) * scale
            # With a hue change next, the saturated image is only its input: a workspace buffer will do.
            into = shift.workspace.get("saturated", x.shape, x) if hue else torch.empty_like(x)
            saturated = adjust_saturation(x, saturation, cache[key], out=into)
            x = shift(saturated, out=x, clamp=gamma == 1.0, consume=True) if hue else saturated
        else:
            if scale != 1.0:
                x = x.mul_(scale)
            if hue:
                x = shift(x, out=x, clamp=gamma == 1.0)
        if gamma != 1.0:
            x = adjust_gamma(x, gamma)
        return x


def describe_ops(ops: Sequence[Op]) -> str:
    """A short human summary, e.g. "rot90 red", "noise 0.25", "rot180 on classes 1,3,5"; "identity" if empty.

    Consecutive ops restricted to the same classes (an ANDA pattern on targeted classes) share one
    "on classes" suffix, so FEROMA's P(X|Y) modes read like the paper's tables.
    """
    if not ops:
        return "identity"
    groups: list[tuple[tuple[int, ...] | None, list[str]]] = []
    for op in ops:
        if groups and groups[-1][0] == op.classes:
            groups[-1][1].append(op.words())
        else:
            groups.append((op.classes, [op.words()]))
    parts = []
    for classes, words in groups:
        text = " ".join(words)
        parts.append(text if classes is None else f"{text} on classes {','.join(str(c) for c in classes)}")
    return "; ".join(parts)

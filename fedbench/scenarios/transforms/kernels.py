"""The tensor math behind the transform ops, vectorised over whole batches: hue, saturation, gamma, rotation grids.

Pure functions and small helpers with no notion of ops or scenarios, so `ops.py` reads as what each op does
and this module as how it is done fast (at 28x28 the photometric change is memory-bound: see `HueShift`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

LUMA = (0.299, 0.587, 0.114)
"""ITU-R 601 luma weights: the grayscale that saturation blends with (as torchvision and PIL compute it)."""


class Workspace:
    """Scratch tensors reused from batch to batch, one set per (name, shape, device, dtype).

    At 28x28 a photometric change is memory-bound, and writing into freshly allocated memory costs 2-3x
    what an in-place pass over a warm buffer does; so temporaries live here, and only the tensor handed back
    to the caller is new. Not thread-safe: one per transform, and a transform serves one client job.
    """

    MAX_ENTRIES = 32  # a few batch sizes (train, last partial batch, test) times a few names

    def __init__(self) -> None:
        self._tensors: dict[tuple, torch.Tensor] = {}

    def get(self, name: str, shape: Sequence[int], like: torch.Tensor) -> torch.Tensor:
        key = (name, tuple(shape), like.device, like.dtype)
        tensor = self._tensors.get(key)
        if tensor is None:
            if len(self._tensors) >= self.MAX_ENTRIES:
                self._tensors.clear()
            tensor = self._tensors[key] = torch.empty(tuple(shape), dtype=like.dtype, device=like.device)
        return tensor


class HueShift:
    """Rotates the hue of RGB batches [B, 3, H, W] in [0, 1] by a fixed fraction of a turn (004's hue jitter).

    RGB -> HSV -> RGB in closed form, vectorised over the batch. The hue is the hexcone hue of colorsys /
    torchvision: (g - b) / C where red is the maximum, 2 + (b - r) / C where green is, else 4 + (r - g) / C
    (sixths of a turn, C the chroma). HSV's saturation is C / value, but the inverse only needs
    value * saturation = C, so it is never formed. The inverse is f(n) = V - C * clamp(min(k, 4 - k), 0, 1),
    k = (n + H6) mod 6, n = 5, 3, 1 for R, G, B: one broadcast over the channels instead of a six-way
    sector select.

    Written for few passes over memory (at 28x28 the op is memory-bound, and the batch arrives with caches
    cold from training): every step but the first works in place on workspace buffers; branches are
    picked by `lerp` with 0/1 weights from comparisons written straight into float (exact, whereas
    `torch.where` and bool tensors run kernels several times slower on CPU); ties go to the first maximum
    as in colorsys; gray pixels (C = 0) get hue 0 through zero numerators; constants are built once per
    device.
    """

    _OFFSETS = (5.0, 3.0, 1.0)  # n of f(n) for R, G, B

    def __init__(self, turns: float):
        self.turns = float(turns) - round(float(turns))  # the colour wheel is periodic: kept in [-1/2, 1/2]
        self._offsets: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}
        self.workspace = Workspace()

    def offsets(self, like: torch.Tensor) -> torch.Tensor:
        """[1, 3, 1, 1] constants of `to_rgb` in turns: (n - 2) / 6 + this shift, + 3/2 to keep them positive."""
        key = (like.device, like.dtype)
        if key not in self._offsets:
            values = [(n - 2.0) / 6.0 + self.turns + 1.5 for n in self._OFFSETS]
            self._offsets[key] = torch.tensor(values, dtype=like.dtype, device=like.device).view(1, 3, 1, 1)
        return self._offsets[key]

    def hue_chroma_value(
        self, x: torch.Tensor, scratch: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Hue in thirds of a turn [B, H, W] (in [-1/2, 5/2)), chroma and value of RGB [B, 3, H, W].

        `x` is not modified. The results are workspace buffers, valid until the next call; the hue lives
        in `scratch` (any [B, 3, H, W] buffer free until the hue is used) when given, to keep the working
        set small. Chroma is floored at 1e-12: gray pixels get zero numerators, hence hue 0, and an output
        error of at most 1e-12 (a chroma this small only ever misplaces a hue whose effect is bounded by it).
        """
        batch, _, height, width = x.shape
        value, chroma, spare = self.workspace.get("hue_in", (3, batch, height, width), x).unbind(0)
        if scratch is None:
            scratch = self.workspace.get("hue_scratch", (batch, 3, height, width), x)
        red_not_max, green_not_max, numerator = scratch.unbind(1)
        r, g, b = x.unbind(1)
        torch.amax(x, 1, out=value)
        torch.amin(x, 1, out=chroma)
        torch.sub(value, chroma, out=chroma).clamp_min_(1e-12)
        torch.gt(value, r, out=red_not_max)  # 1.0 where red is not the maximum
        torch.gt(value, g, out=green_not_max)
        torch.sub(b, r, out=numerator).lerp_(torch.sub(r, g, out=spare), green_not_max)  # green's, else blue's
        numerator = torch.sub(g, b, out=spare).lerp_(numerator, red_not_max)  # red's first
        # In thirds of a turn (saves a scaling pass): the branch's base, 0 (red), 1 (green) or 2 (blue), is
        # red_not_max * (1 + green_not_max), plus half the sixths-numerator / C.
        hue = green_not_max.add_(1.0).mul_(red_not_max).addcdiv_(numerator, chroma, value=0.5)
        return hue, chroma, value

    def to_rgb(
        self,
        hue: torch.Tensor,
        chroma: torch.Tensor,
        value: torch.Tensor,
        out: torch.Tensor | None = None,
        clamp: bool = True,
        scratch: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """RGB [B, 3, H, W] from hue (thirds of a turn, > -3/2) + this shift, chroma and value [B, H, W].

        With t = (k - 2) / 6 wrapped into [-1/2, 1/2) (turns): min(k, 4 - k) = 2 - 6|t|, so
        f = (V - 2C) + 6C * clamp(|t|, 1/6, 1/3). The wrap is frac(t + 3/2) - 1/2, in place (t + 3/2 > 0);
        at |t| = 1/2 both sides of the wrap give the same 0 ramp. Consumes `value`. Rounding can leave
        V - C a hair outside [0, 1]: `clamp=False` leaves that to the caller (gamma clamps anyway).

        Args:
            out: where to write (a fresh tensor when None); may hold the hue or the image it came from.
            scratch: a free [B, 3, H, W] buffer for t (a workspace one when None); not `out`.
        """
        batch, height, width = hue.shape
        if scratch is None:
            scratch = self.workspace.get("to_rgb", (batch, 3, height, width), hue)
        t = torch.add(self.offsets(hue), hue.unsqueeze(1), alpha=1.0 / 3.0, out=scratch)
        t.frac_().sub_(0.5).abs_().clamp_(1.0 / 6.0, 1.0 / 3.0)
        base = value.add_(chroma, alpha=-2.0).unsqueeze(1)
        if out is None:
            out = torch.empty_like(t)
        torch.addcmul(base, chroma.unsqueeze(1), t, value=6.0, out=out)
        return out.clamp_(0.0, 1.0) if clamp else out

    def __call__(
        self, x: torch.Tensor, out: torch.Tensor | None = None, clamp: bool = True, consume: bool = False
    ) -> torch.Tensor:
        """Shifted RGB of `x`, written to `out` (a fresh tensor when None; may be `x`).

        Args:
            consume: `x` is a dead buffer the shift may scribble on (it then serves as scratch); else `x`
                is left unchanged unless it is `out`.
        """
        # Free buffers first: `out` until the end (if it is not the input), the input once read.
        hue_scratch = out if out is not None and out.data_ptr() != x.data_ptr() else None
        hue, chroma, value = self.hue_chroma_value(x, hue_scratch)
        return self.to_rgb(hue, chroma, value, out=out, clamp=clamp, scratch=x if consume else None)


def shift_hue(x: torch.Tensor, turns: float) -> torch.Tensor:
    """Rotate the hue of RGB [B, 3, H, W] in [0, 1] by `turns` of the colour wheel (see `HueShift`)."""
    return HueShift(turns)(x)


def saturation_matrix(
    factor: float, device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The 3x3 colour matrix of a saturation change: factor * I + (1 - factor) * (every row the luma weights)."""
    luma = torch.tensor(LUMA, dtype=torch.float64)
    matrix = factor * torch.eye(3, dtype=torch.float64) + (1.0 - factor) * luma.expand(3, 3)
    return matrix.to(device=device, dtype=dtype)


def adjust_saturation(
    x: torch.Tensor, factor: float, matrix: torch.Tensor | None = None, out: torch.Tensor | None = None
) -> torch.Tensor:
    """Blend RGB [B, 3, H, W] with its luma by `factor` (0: gray, 1: unchanged, > 1: more vivid), clamped.

    Same as torchvision's adjust_saturation, factor * x + (1 - factor) * gray clamped to [0, 1], done as
    one 3x3 colour matrix per pixel: a single batched matmul instead of five elementwise passes.

    Args:
        matrix: `saturation_matrix(factor)` on x's device (a multiple of it also scales x), when the
            caller caches it.
        out: where to write (not `x`); a fresh tensor when None.
    """
    if matrix is None:
        matrix = saturation_matrix(factor, x.device, x.dtype)
    batch, channels, height, width = x.shape
    flat = out.view(batch, channels, height * width) if out is not None else None
    mixed = torch.bmm(matrix.expand(batch, channels, channels), x.reshape(batch, channels, height * width), out=flat)
    return mixed.view(batch, channels, height, width).clamp_(0.0, 1.0)


_TINY = float(torch.finfo(torch.float32).tiny)  # smallest normal float32


def adjust_gamma(x: torch.Tensor, gamma: float) -> torch.Tensor:
    """x ** gamma, gamma > 0, in place; x is clamped to [0, 1] first (so the caller need not clamp).

    Computed as exp(gamma * log x): the same value as `x ** gamma` up to float rounding, but several
    times faster on CPU than torch.pow with a fractional exponent (which is not vectorised). log(0) = -inf
    and exp(-inf) take slow paths in the vectorised math library (30x slower per element), so x is first
    lifted to a floor eps whose power is at most 1e-12 (1e-30 for gamma >= 0.8, 1.6e-23 for FedDRM's 0.6):
    what a 0 pixel becomes, invisible next to the 1/255 steps of the data. Gammas below 0.32 have no such
    normal floor; there zeros are put back to exactly 0 by a 0/1 factor (two more passes).
    """
    gamma = float(gamma)
    eps = max(_TINY, 1e-30 ** (1.0 / gamma))
    if eps**gamma <= 1e-12:
        return x.clamp_(eps, 1.0).log_().mul_(gamma).exp_()
    positive = torch.gt(x, 0.0, out=torch.empty_like(x))
    return x.clamp_(eps, 1.0).log_().mul_(gamma).exp_().mul_(positive)


def rotation_grid(angle: float, height: int, width: int, device: torch.device) -> torch.Tensor:
    """affine_grid [1, H, W, 2] that rotates image content counter-clockwise (as displayed) by `angle`.

    The grid maps output to input positions, so it holds the inverse rotation; in y-down pixel
    coordinates that is [[c, -s], [s, c]]. Normalised coordinates scale x by W/2 and y by H/2, hence the
    aspect factors (a non-square image would otherwise shear).
    """
    rad = math.radians(angle)
    c, s = math.cos(rad), math.sin(rad)
    theta = torch.tensor([[c, -s * height / width, 0.0], [s * width / height, c, 0.0]], dtype=torch.float32)
    return F.affine_grid(theta.unsqueeze(0), [1, 1, height, width], align_corners=False).to(device)

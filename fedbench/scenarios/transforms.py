"""Per-client feature transforms, applied on the worker each time a batch is formed.

A scenario never stores transformed images: each client view carries a descriptor, a tuple of small op
dicts with plain JSON values (so artifacts stay tiny, hashable into run ids and readable in
`fedbench scenario show`), and the worker turns it into a `BatchTransform` once per client job. Every op
works on the whole batch at once (no Python loop over samples), so the transform costs a few percent of
a LeNet-5 epoch on 28x28 images, about 10% for the photometric change of RGB images, the costliest
(`bench/transform_cost.py` measures it).

Ops, in descriptor order; any op may carry `"classes": [...]`, original labels it is restricted to:

- `{"op": "rotate", "angle": a}`: counter-clockwise by `a` degrees. FEROMA/ANDA rotate by multiples of
  360 / R (002 App. I.2); multiples of 90 are exact index permutations (`torch.rot90`), other angles
  (the unseen half-step rotations of 002 I.7, 001 E2b with K > 4) resample bilinearly with zero padding.
- `{"op": "colour", "channel": k}`: sets RGB channel k to 1 everywhere, ANDA's saturated background
  (002 App. I.2; METHODS.md "ANDA semantics").
- `{"op": "noise", "sigma": s}`: additive N(0, s^2) noise per pixel, clipped to [0, 1] (003 Sec. II-A:
  client i of N gets s = sigma * i / N; the scenario computes s).
- `{"op": "photometric", "gamma": g, "hue": dh, "saturation": k}`: FedDRM's covariate bits (004 Sec. 5),
  applied in FedDRM's order saturation, hue, gamma.

The `classes` restriction is FEROMA's concept shift P(X|Y) (002 App. I.2): targeted classes get the
pattern, the others stay plain, so the same image content means different things to different clients.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any, Sequence

import torch
import torch.nn.functional as F

from fedbench.core.errors import ConfigError
from fedbench.data.base import to_float_batch

OPS = ("rotate", "colour", "noise", "photometric")
"""Op names a descriptor may use."""

_KEYS: dict[str, tuple[str, ...]] = {
    "rotate": ("angle",),
    "colour": ("channel",),
    "noise": ("sigma",),
    "photometric": ("gamma", "hue", "saturation"),
}
_REQUIRED: dict[str, tuple[str, ...]] = {
    "rotate": ("angle",), "colour": ("channel",), "noise": ("sigma",), "photometric": (),
}
COLOUR_NAMES = ("red", "green", "blue")
LUMA = (0.299, 0.587, 0.114)
"""ITU-R 601 luma weights: the grayscale that saturation blends with (as torchvision and PIL compute it)."""


# --------------------------------------------------------------------------------------------- validation


def validate_ops(ops: Sequence[dict], channels: int, image_shape: Sequence[int] | None = None) -> None:
    """Reject a descriptor the worker could not apply, before any run starts.

    Checked at the boundary (scenario build, task load) so that a typo fails with a message naming the
    field and what is allowed, instead of a shape error deep inside a worker after hours of training.

    Args:
        ops: the descriptor, a sequence of op dicts.
        channels: the scenario's output channel count (3 for colour scenarios).
        image_shape: one sample's shape, (C, H, W) or (H, W), as stored in the dataset; None skips the
            checks that need it (square images for 90-degree rotations, the input channel count).

    Raises:
        ConfigError: field `scenario.transform.<op>.<param>` (or `scenario.transform.op` for an unknown
            op), with the offending value and what is allowed.
    """
    if channels not in (1, 3):
        raise ConfigError("scenario.transform.channels", channels, "1 or 3 output channels")
    if image_shape is not None and len(image_shape) == 3 and not (
        image_shape[0] == channels or (image_shape[0] == 1 and channels == 3)
    ):
        raise ConfigError("scenario.transform.channels", channels,
                          f"{image_shape[0]} (the data's channels){' or 3' if image_shape[0] == 1 else ''}")
    for op in ops:
        if not isinstance(op, dict) or "op" not in op:
            raise ConfigError("scenario.transform", op, "a dict with key 'op' naming one of " + ", ".join(OPS))
        name = op["op"]
        if name not in _KEYS:
            raise ConfigError("scenario.transform.op", name, ", ".join(OPS))
        field = f"scenario.transform.{name}"
        unknown = sorted(set(op) - {"op", "classes", *_KEYS[name]})
        if unknown:
            raise ConfigError(f"{field}.{unknown[0]}", op[unknown[0]],
                              f"parameters of {name}: {', '.join((*_KEYS[name], 'classes'))}")
        for key in _REQUIRED[name]:
            if key not in op:
                raise ConfigError(f"{field}.{key}", None, f"{name} needs '{key}'")
        for key in _KEYS[name]:
            if key in op and not _is_number(op[key]):
                raise ConfigError(f"{field}.{key}", op[key], "a finite number")
        if "classes" in op:
            classes = op["classes"]
            if not isinstance(classes, (list, tuple)) or not classes or not all(
                isinstance(c, Integral) and not isinstance(c, bool) and c >= 0 for c in classes
            ):
                raise ConfigError(f"{field}.classes", classes, "a non-empty list of original class labels (ints >= 0)")
        if name == "rotate":
            quarter = _quarter_turns(op["angle"])
            if quarter is not None and quarter % 2 == 1 and image_shape is not None:
                h, w = image_shape[-2:]
                if h != w:
                    raise ConfigError(f"{field}.angle", op["angle"], "multiples of 180 or non-right angles: "
                                      f"90-degree rotations need square images, got {h}x{w}")
        elif name == "colour":
            if op["channel"] not in (0, 1, 2) or isinstance(op["channel"], bool):
                raise ConfigError(f"{field}.channel", op["channel"], "0, 1 or 2 (red, green, blue)")
            if channels != 3:
                raise ConfigError(f"{field}.channel", op["channel"],
                                  f"colour needs 3 output channels, the scenario has {channels}")
        elif name == "noise":
            if op["sigma"] < 0:
                raise ConfigError(f"{field}.sigma", op["sigma"], "a standard deviation >= 0")
        elif name == "photometric":
            if channels != 3:
                raise ConfigError(field, dict(op), f"photometric needs 3 output channels, the scenario has {channels}")
            if op.get("gamma", 1.0) <= 0:
                raise ConfigError(f"{field}.gamma", op["gamma"], "a gamma > 0")
            if not -0.5 <= op.get("hue", 0.0) <= 0.5:
                raise ConfigError(f"{field}.hue", op["hue"], "a hue shift in turns, in [-0.5, 0.5]")
            if op.get("saturation", 1.0) < 0:
                raise ConfigError(f"{field}.saturation", op["saturation"], "a saturation factor >= 0")


def _is_number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


def _quarter_turns(angle: float) -> int | None:
    """k in 0..3 when `angle` is a multiple of 90 degrees, else None."""
    turns = float(angle) / 90.0
    return int(round(turns)) % 4 if turns == round(turns) else None


# --------------------------------------------------------------------------------------------- description


def describe_ops(ops: Sequence[dict]) -> str:
    """A short human summary, e.g. "rot90 red", "noise 0.25", "rot180 on classes 1,3,5"; "identity" if empty.

    Consecutive ops restricted to the same classes (an ANDA pattern on targeted classes) share one
    "on classes" suffix, so FEROMA's P(X|Y) modes read like the paper's tables.
    """
    if not ops:
        return "identity"
    groups: list[tuple[tuple[int, ...] | None, list[str]]] = []
    for op in ops:
        classes = tuple(op["classes"]) if op.get("classes") is not None else None
        words = _describe_one(op)
        if groups and groups[-1][0] == classes:
            groups[-1][1].append(words)
        else:
            groups.append((classes, [words]))
    parts = []
    for classes, words in groups:
        text = " ".join(words)
        parts.append(text if classes is None else f"{text} on classes {','.join(str(c) for c in classes)}")
    return "; ".join(parts)


def _describe_one(op: dict) -> str:
    name = op.get("op")
    if name == "rotate":
        return f"rot{_num(float(op['angle']) % 360)}"
    if name == "colour":
        k = op["channel"]
        return COLOUR_NAMES[k] if k in (0, 1, 2) else f"colour {k}"
    if name == "noise":
        return f"noise {_num(op['sigma'])}"
    if name == "photometric":
        labels = (("gamma", "gamma"), ("hue", "hue"), ("saturation", "sat"))
        shown = [f"{label} {_num(op[key])}" for key, label in labels if key in op]
        return " ".join(shown) or "photometric identity"
    return str(name)


def _num(value: float) -> str:
    return f"{float(value):g}"


# --------------------------------------------------------------------------------------------- batch ops


class _Workspace:
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
        self.workspace = _Workspace()

    def offsets(self, like: torch.Tensor) -> torch.Tensor:
        """[1, 3, 1, 1] constants of `to_rgb` in turns: (n - 2) / 6 + this shift, + 3/2 to keep them positive."""
        key = (like.device, like.dtype)
        if key not in self._offsets:
            values = [(n - 2.0) / 6.0 + self.turns + 1.5 for n in self._OFFSETS]
            self._offsets[key] = torch.tensor(values, dtype=like.dtype, device=like.device).view(1, 3, 1, 1)
        return self._offsets[key]

    def hue_chroma_value(self, x: torch.Tensor, scratch: torch.Tensor | None = None
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

    def to_rgb(self, hue: torch.Tensor, chroma: torch.Tensor, value: torch.Tensor, out: torch.Tensor | None = None,
               clamp: bool = True, scratch: torch.Tensor | None = None) -> torch.Tensor:
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

    def __call__(self, x: torch.Tensor, out: torch.Tensor | None = None, clamp: bool = True,
                 consume: bool = False) -> torch.Tensor:
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


def saturation_matrix(factor: float, device: torch.device | str = "cpu",
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The 3x3 colour matrix of a saturation change: factor * I + (1 - factor) * (every row the luma weights)."""
    luma = torch.tensor(LUMA, dtype=torch.float64)
    matrix = factor * torch.eye(3, dtype=torch.float64) + (1.0 - factor) * luma.expand(3, 3)
    return matrix.to(device=device, dtype=dtype)


def adjust_saturation(x: torch.Tensor, factor: float, matrix: torch.Tensor | None = None,
                      out: torch.Tensor | None = None) -> torch.Tensor:
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


def _rotation_grid(angle: float, height: int, width: int, device: torch.device) -> torch.Tensor:
    """affine_grid [1, H, W, 2] that rotates image content counter-clockwise (as displayed) by `angle`.

    The grid maps output to input positions, so it holds the inverse rotation; in y-down pixel
    coordinates that is [[c, -s], [s, c]]. Normalised coordinates scale x by W/2 and y by H/2, hence the
    aspect factors (a non-square image would otherwise shear).
    """
    rad = math.radians(angle)
    c, s = math.cos(rad), math.sin(rad)
    theta = torch.tensor([[c, -s * height / width, 0.0], [s * width / height, c, 0.0]], dtype=torch.float32)
    return F.affine_grid(theta.unsqueeze(0), [1, 1, height, width], align_corners=False).to(device)


class _Step:
    """One compiled op: parameters parsed once (constants built once per device), applied on every batch.

    `apply` transforms every sample; `apply_masked` only those with mask 1, where `mask` and `keep = 1 - mask`
    are 0/1 [B, 1, 1, 1] tensors in x's dtype. Selecting by arithmetic (x * keep + out * mask, exact for
    0/1 weights and finite values) instead of `torch.where` avoids slow bool kernels and data-dependent
    shapes (no device sync on GPU). Both return a tensor the transform owns; `x` may be edited in place
    once it is the transform's own float copy.
    """

    uint8_ok = False
    """Whether it may run before the float conversion (exact on uint8 and 4x fewer bytes to move)."""
    gray_ok = False
    """Whether it may run on one gray channel before the repeat to RGB, with the same result (less work)."""
    absorbs_scale = False
    """Whether `apply(x, scale=s)` exists and may get the unscaled uint8 -> float conversion (`_Photometric`)."""

    def __init__(self, op: dict):
        self.op = op
        self.classes = tuple(int(c) for c in op["classes"]) if op.get("classes") is not None else None

    def apply(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def apply_masked(self, x: torch.Tensor, mask: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(x * keep, self.apply(x.clone()), mask)


class _QuarterTurn(_Step):
    """Rotation by a multiple of 90 degrees: an exact index permutation (torch.rot90, counter-clockwise)."""

    uint8_ok = True
    gray_ok = True

    def __init__(self, op: dict):
        super().__init__(op)
        self.k = _quarter_turns(op["angle"])

    def apply(self, x):
        return torch.rot90(x, self.k, dims=(2, 3)) if self.k else x

    def apply_masked(self, x, mask, keep):
        return torch.addcmul(x * keep, self.apply(x), mask) if self.k else x  # rot90 returns a new tensor


class _Rotate(_Step):
    """Rotation by any other angle: bilinear resampling on a grid built once per image size and device."""

    gray_ok = True

    def __init__(self, op: dict):
        super().__init__(op)
        self.angle = float(op["angle"])
        self._grids: dict[tuple[int, int, torch.device, torch.dtype], torch.Tensor] = {}

    def apply(self, x):
        batch, _, height, width = x.shape
        key = (height, width, x.device, x.dtype)
        if key not in self._grids:
            self._grids[key] = _rotation_grid(self.angle, height, width, x.device).to(x.dtype)
        grid = self._grids[key].expand(batch, height, width, 2)
        return F.grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False)

    def apply_masked(self, x, mask, keep):
        return torch.addcmul(x * keep, self.apply(x), mask)  # grid_sample returns a new tensor: no clone


class _Colour(_Step):
    """ANDA's colour: one RGB channel set to 1 everywhere (a saturated background)."""

    def __init__(self, op: dict):
        super().__init__(op)
        self.channel = int(op["channel"])

    def apply(self, x):
        x[:, self.channel] = 1.0
        return x

    def apply_masked(self, x, mask, keep):
        x[:, self.channel].mul_(keep[:, 0]).add_(mask[:, 0])
        return x


class _Noise(_Step):
    """Additive Gaussian noise, clipped to [0, 1]; drawn from the global RNG, fresh on every batch."""

    def __init__(self, op: dict):
        super().__init__(op)
        self.sigma = float(op["sigma"])

    def _noise(self, x):
        return torch.randn(x.shape, dtype=x.dtype, device=x.device)

    def apply(self, x):
        if self.sigma == 0:
            return x
        return x.add_(self._noise(x), alpha=self.sigma).clamp_(0.0, 1.0)

    def apply_masked(self, x, mask, keep):
        # Noise is drawn for every sample either way, so the RNG stream does not depend on the classes.
        if self.sigma == 0:
            return x
        return x.addcmul_(self._noise(x), mask, value=self.sigma).clamp_(0.0, 1.0)


class _Photometric(_Step):
    """FedDRM's covariate bits in FedDRM's order: saturation, hue, gamma (each skipped at its identity).

    On a gray image (one channel, still to be repeated to RGB) saturation and hue are the identity (the
    luma weights sum to 1, and a gray pixel has no chroma), so only gamma runs, on one channel.
    """

    gray_ok = True

    def __init__(self, op: dict):
        super().__init__(op)
        self.saturation = float(op.get("saturation", 1.0))
        self.hue = HueShift(float(op.get("hue", 0.0)))
        self.gamma = float(op.get("gamma", 1.0))
        self._matrices: dict[tuple[torch.device, torch.dtype, float], torch.Tensor] = {}

    @property
    def absorbs_scale(self) -> bool:
        """Whether the uint8 -> [0, 1] scaling can ride on the saturation matrix (one pass fewer)."""
        return self.saturation != 1.0 and self.classes is None

    def apply(self, x, scale: float = 1.0):
        """Photometric change of `x`, in place (its buffer is what comes back); `scale` multiplies x first
        (the 1/255 of an unscaled uint8 conversion)."""
        rgb = x.shape[1] == 3
        hue = rgb and self.hue.turns != 0.0
        if rgb and self.saturation != 1.0:
            key = (x.device, x.dtype, scale)
            if key not in self._matrices:
                self._matrices[key] = saturation_matrix(self.saturation, x.device, x.dtype) * scale
            # With a hue change next, the saturated image is only its input: a workspace buffer will do.
            into = self.hue.workspace.get("saturated", x.shape, x) if hue else torch.empty_like(x)
            saturated = adjust_saturation(x, self.saturation, self._matrices[key], out=into)
            x = self.hue(saturated, out=x, clamp=self.gamma == 1.0, consume=True) if hue else saturated
        else:
            if scale != 1.0:
                x = x.mul_(scale)
            if hue:
                x = self.hue(x, out=x, clamp=self.gamma == 1.0)
        if self.gamma != 1.0:
            x = adjust_gamma(x, self.gamma)
        return x


_STEPS: dict[str, type[_Step]] = {"rotate": _Rotate, "colour": _Colour, "noise": _Noise, "photometric": _Photometric}


def _compile(op: dict) -> _Step:
    if op["op"] == "rotate" and _quarter_turns(op["angle"]) is not None:
        return _QuarterTurn(op)
    return _STEPS[op["op"]](op)


class BatchTransform:
    """A client's feature transform: uint8 batch + original labels -> the float batch the model sees.

    Built once per client job from the view's descriptor (parsing and validating once) and called on every
    batch, on whatever device the batch lives. It replaces `to_float_batch` for image batches, so it always
    returns float32 in [0, 1], also with no ops (a gray dataset in a colour scenario still needs its 3
    channels: ANDA feeds every client RGB once any client is coloured).

    Order: leading quarter-turn rotations on the uint8 data (exact and 4x cheaper), then the float
    conversion, then the remaining ops in descriptor order. Gray data in a 3-channel scenario is repeated
    to RGB as if right after the conversion; in fact the repeat waits until the first op that tells the
    channels apart (colour, noise), since rotations and photometric changes of a gray image are the same
    on one channel as on three, at a third of the work.

    Args:
        ops: the descriptor (`ClientView.transform`).
        channels: the scenario's output channel count (`Scenario.input_shape[0]`).

    Raises:
        ConfigError: the descriptor is invalid (see `validate_ops`).
    """

    def __init__(self, ops: Sequence[dict], channels: int):
        ops = tuple(ops)
        validate_ops(ops, channels, None)
        self.ops = ops
        self.channels = channels
        steps = [_compile(op) for op in ops]
        lead = 0
        while lead < len(steps) and steps[lead].uint8_ok:
            lead += 1
        self._uint8_steps, self._float_steps = steps[:lead], steps[lead:]
        # Gray data: float steps before this index run on one channel, the repeat to RGB comes here.
        self._rgb_from = next((i for i, s in enumerate(self._float_steps) if not s.gray_ok), len(self._float_steps))
        self._class_sets: dict[tuple[tuple[int, ...], str], torch.Tensor] = {}
        self._needs_square = any(isinstance(s, _QuarterTurn) and s.k % 2 == 1 for s in steps)

    def __repr__(self) -> str:
        return f"BatchTransform({describe_ops(self.ops)!r}, channels={self.channels})"

    def __call__(self, x: torch.Tensor, y_orig: torch.Tensor) -> torch.Tensor:
        """Transform a batch.

        Args:
            x: uint8 [B, C, H, W] (C = 1 or 3), or float in [0, 1].
            y_orig: int64 [B] original labels (before any label map), which `classes` restrictions key on.

        Returns:
            float32 [B, channels, H, W] in [0, 1], contiguous, on x's device.
        """
        if x.ndim != 4:
            raise ValueError(f"expected an image batch [B, C, H, W], got shape {tuple(x.shape)}")
        if self._needs_square and x.shape[2] != x.shape[3]:
            raise ValueError(f"90-degree rotations need square images, got {x.shape[2]}x{x.shape[3]}")
        gray = x.shape[1] == 1 and self.channels == 3
        if x.shape[1] != self.channels and not gray:
            raise ValueError(f"cannot turn {x.shape[1]}-channel images into {self.channels} channels")
        masks: dict[tuple[tuple[int, ...], torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}
        for step in self._uint8_steps:
            x = self._apply(step, x, y_orig, masks)
        repeat_at = self._rgb_from if gray else -1
        if repeat_at == 0:
            x = x.expand(-1, 3, -1, -1)  # on the 1-byte data, materialised by contiguous() below
        # A leading saturation change multiplies by a 3x3 matrix anyway: it takes the 1/255 along.
        fold = (x.dtype == torch.uint8 and repeat_at <= 0 and bool(self._float_steps)
                and self._float_steps[0].absorbs_scale)
        x = self._to_float(x, scaled=not fold)
        for i, step in enumerate(self._float_steps):
            if i == repeat_at and i > 0:
                x = x.expand(-1, 3, -1, -1).contiguous()
            x = step.apply(x, scale=1.0 / 255.0) if fold and i == 0 else self._apply(step, x, y_orig, masks)
        if repeat_at == len(self._float_steps) and repeat_at > 0:
            x = x.expand(-1, 3, -1, -1)
        return x.contiguous()

    def _to_float(self, x: torch.Tensor, scaled: bool = True) -> torch.Tensor:
        """`to_float_batch`'s values, contiguous, in a tensor the transform owns (later steps work in place);
        `scaled=False` leaves uint8 data in [0, 255] for the first step to scale."""
        given, x = x, x.contiguous()  # a rot90 view would make every later op strided; an expand is materialised
        if x.dtype == torch.uint8:
            x = x.to(torch.float32)
            return x.div_(255.0) if scaled else x  # as to_float_batch, without its second temporary
        x = to_float_batch(x)
        if self._float_steps and x.data_ptr() == given.data_ptr():
            x = x.clone()  # float input: never edit the caller's tensor
        return x

    def _apply(self, step: _Step, x: torch.Tensor, y_orig: torch.Tensor, masks: dict) -> torch.Tensor:
        if step.classes is None:
            return step.apply(x)
        key = (step.classes, x.dtype)
        if key not in masks:
            hit = torch.isin(y_orig, self._class_tensor(step.classes, y_orig.device))
            mask = hit.to(device=x.device, dtype=x.dtype).view(-1, 1, 1, 1)
            masks[key] = (mask, 1 - mask)
        return step.apply_masked(x, *masks[key])

    def _class_tensor(self, classes: tuple[int, ...], device: torch.device) -> torch.Tensor:
        key = (classes, str(device))
        if key not in self._class_sets:
            self._class_sets[key] = torch.tensor(classes, dtype=torch.int64, device=device)
        return self._class_sets[key]

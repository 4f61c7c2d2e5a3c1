"""A client's feature transform on the worker: a descriptor of ops applied to whole batches at once."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch

from fedbench.data.base import to_float_batch
from fedbench.scenarios.transforms.ops import Op, describe_ops


@dataclass(frozen=True, repr=False)
class BatchTransform:
    """A client's feature transform: uint8 batch + original labels -> the float batch the model sees.

    Built once per client job from the view's descriptor and called on every batch, on whatever device the
    batch lives. It replaces `to_float_batch` for image batches, so it always returns float32 in [0, 1],
    also with no ops (a gray dataset in a colour scenario still needs its 3 channels: ANDA feeds every
    client RGB once any client is coloured). The ops were checked against the dataset's facts when the
    task loaded (`Shift.check_ops`: channels, square images for quarter turns, value ranges); here only
    the batch is checked against this transform's own contract (an image batch of `channels` channels, or
    gray ones to repeat), since a caller may hand in any tensor.

    Order: leading quarter-turn rotations on the uint8 data (exact and 4x cheaper), then the float
    conversion, then the remaining ops in descriptor order. Gray data in a 3-channel scenario is repeated
    to RGB as if right after the conversion; in fact the repeat waits until the first op that tells the
    channels apart (colour, noise), since rotations and photometric changes of a gray image are the same
    on one channel as on three, at a third of the work.

    Not thread-safe: each op's scratch (grids, constants, reused buffers) lives here, one set per client job, made
    on first use and never part of the transform's value: a transform is its fields, so a client state holding one
    serialises and loads back (`fedbench.core.state_codec`).

    Args:
        ops: the descriptor (`ClientView.transform`).
        channels: the scenario's output channel count (`Scenario.input_shape[0]`).
    """

    ops: tuple[Op, ...]
    channels: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(self.ops))

    @cached_property
    def _uint8_ops(self) -> tuple[Op, ...]:
        """The leading ops that run on the uint8 data."""
        lead = 0
        while lead < len(self.ops) and self.ops[lead].uint8_ok:
            lead += 1
        return self.ops[:lead]

    @cached_property
    def _float_ops(self) -> tuple[Op, ...]:
        return self.ops[len(self._uint8_ops) :]

    @cached_property
    def _rgb_from(self) -> int:
        """Gray data: float ops before this index run on one channel, the repeat to RGB comes here."""
        return next((i for i, op in enumerate(self._float_ops) if not op.gray_ok), len(self._float_ops))

    @cached_property
    def _caches(self) -> list[dict]:
        return [{} for _ in self.ops]

    @cached_property
    def _class_sets(self) -> dict[tuple[tuple[int, ...], str], torch.Tensor]:
        return {}

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
        gray = x.shape[1] == 1 and self.channels == 3
        if x.shape[1] != self.channels and not gray:
            raise ValueError(f"cannot turn {x.shape[1]}-channel images into {self.channels} channels")
        masks: dict[tuple[tuple[int, ...], torch.dtype], tuple[torch.Tensor, torch.Tensor]] = {}
        for i, op in enumerate(self._uint8_ops):
            x = self._apply(op, self._caches[i], x, y_orig, masks)
        lead = len(self._uint8_ops)
        repeat_at = self._rgb_from if gray else -1
        if repeat_at == 0:
            x = x.expand(-1, 3, -1, -1)  # on the 1-byte data, materialised by contiguous() below
        # A leading saturation change multiplies by a 3x3 matrix anyway: it takes the 1/255 along.
        fold = x.dtype == torch.uint8 and repeat_at <= 0 and bool(self._float_ops) and self._float_ops[0].absorbs_scale
        x = self._to_float(x, scaled=not fold)
        for i, op in enumerate(self._float_ops):
            if i == repeat_at and i > 0:
                x = x.expand(-1, 3, -1, -1).contiguous()
            cache = self._caches[lead + i]
            x = op.apply(x, cache, scale=1.0 / 255.0) if fold and i == 0 else self._apply(op, cache, x, y_orig, masks)
        if repeat_at == len(self._float_ops) and repeat_at > 0:
            x = x.expand(-1, 3, -1, -1)
        return x.contiguous()

    def _to_float(self, x: torch.Tensor, scaled: bool = True) -> torch.Tensor:
        """`to_float_batch`'s values, contiguous, in a tensor the transform owns (later ops work in place);
        `scaled=False` leaves uint8 data in [0, 255] for the first op to scale."""
        given, x = x, x.contiguous()  # a rot90 view would make every later op strided; an expand is materialised
        if x.dtype == torch.uint8:
            x = x.to(torch.float32)
            return x.div_(255.0) if scaled else x  # as to_float_batch, without its second temporary
        x = to_float_batch(x)
        if self._float_ops and x.data_ptr() == given.data_ptr():
            x = x.clone()  # float input: never edit the caller's tensor
        return x

    def _apply(self, op: Op, cache: dict, x: torch.Tensor, y_orig: torch.Tensor, masks: dict) -> torch.Tensor:
        if op.classes is None:
            return op.apply(x, cache)
        key = (op.classes, x.dtype)
        if key not in masks:
            hit = torch.isin(y_orig, self._class_tensor(op.classes, y_orig.device))
            mask = hit.to(device=x.device, dtype=x.dtype).view(-1, 1, 1, 1)
            masks[key] = (mask, 1 - mask)
        return op.apply_masked(x, *masks[key], cache)

    def _class_tensor(self, classes: tuple[int, ...], device: torch.device) -> torch.Tensor:
        key = (classes, str(device))
        if key not in self._class_sets:
            self._class_sets[key] = torch.tensor(classes, dtype=torch.int64, device=device)
        return self._class_sets[key]

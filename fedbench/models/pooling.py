"""2 x 2 max pooling with stride 2, the numbers torch's gives, in a fraction of its CPU time.

torch 2.14's CPU kernel for `max_pool2d` on NCHW tensors takes about 15 ns an output window: in torch's profile
of LeNet-5 training on MNIST, 1.1 ms of a 3.8 ms step, more than both convolutions' forward passes. Every CNN in
fedbench pools 2 x 2, so on CPU this layer replaces it (bench/results/pool_cost.md: LeNet-5's training step
0.92x, its evaluation pass 0.53x; cnn_mnist's 0.81x and 0.48x):

- forward: the elementwise maximum of the window's four strided quarters, the value torch takes (a maximum is
  exact). Where a window's maximum is a zero held with both signs, either zero may come out; sums and products,
  all these models compute, give the same numbers from either.
- backward: each output's gradient goes to the element torch sends it to, the first maximum of the window in
  row-major order (torch keeps the first of equal values). The indices are worked out from the saved input
  only in the backward pass (evaluation never pays for them) and handed to torch's own max-pool backward, so
  the gradients are torch's bit for bit. An input holding NaN or an infinity takes torch's kernel for the
  indices: its rule there is other (the last NaN wins) and the arithmetic below assumes finite numbers.

Elsewhere (`_pooled_here`) it is torch's `max_pool2d`. tests/models/test_pooling.py compares values and
gradients with torch's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_EXACT_INDEX = {torch.float32: 2**24, torch.float64: 2**53}
"""Input dtypes whose index arithmetic (done in the input's dtype) is exact, and the plane size (H x W) up to which."""

GRADIENT_BYTES_LIMIT = 8 * 2**20
"""The largest input (bytes) pooled here when a gradient will be wanted; larger ones take torch's kernel. Working out
the indices passes over the input several times, which stops paying once the input outgrows the caches: measured
here (fwd + bwd, 1 thread, batch 64) 0.33-0.47x torch's time up to 6 MiB, 0.76-0.89x at 8 MiB, 1.02x and 1.13x at
16 MiB (64 x 64 x 32 x 32, 64 x 256 x 16 x 16). Without a gradient (evaluation) every size measured was faster."""


def _quarters(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Each window's top-left, top-right, bottom-left and bottom-right elements, as strided views [..., H/2, W/2]."""
    h, w = x.shape[-2] // 2 * 2, x.shape[-1] // 2 * 2
    return x[..., 0:h:2, 0:w:2], x[..., 0:h:2, 1:w:2], x[..., 1:h:2, 0:w:2], x[..., 1:h:2, 1:w:2]


def _first_max_indices(x: torch.Tensor, top: torch.Tensor, bottom: torch.Tensor) -> torch.Tensor:
    """Flat index into each H x W plane of every window's first maximum (row-major), as torch's kernel returns it;
    `top` and `bottom` are the maxima of the window's rows.

    With finite numbers and gradual underflow (torch's default; `torch.set_flush_denormal(True)` breaks it),
    a - b > 0 exactly when a > b, so `sign` turns each comparison into 0 or 1 in float arithmetic, measured
    several times faster here than comparisons producing booleans. The maximum is in the bottom row when that
    row's maximum is strictly greater than the top row's; within a row it is the right element when that is
    strictly greater than the left one.
    """
    left_top, right_top, left_bottom, right_bottom = _quarters(x)
    width = x.shape[-1]
    in_bottom = torch.sub(bottom, top).sign_().clamp_min_(0)
    right_of_top = torch.sub(right_top, left_top).sign_().clamp_min_(0)
    right_of_bottom = torch.sub(right_bottom, left_bottom).sign_().clamp_min_(0)
    out_h, out_w = top.shape[-2:]
    corners = (torch.arange(out_h, dtype=x.dtype).mul_(2 * width).unsqueeze(1)
               + torch.arange(out_w, dtype=x.dtype).mul_(2))
    column = right_of_bottom.sub_(right_of_top).mul_(in_bottom).add_(right_of_top)
    return column.add_(in_bottom.mul_(width)).add_(corners).long()


class _MaxPool2x2(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        left_top, right_top, left_bottom, right_bottom = _quarters(x)
        top, bottom = torch.maximum(left_top, right_top), torch.maximum(left_bottom, right_bottom)
        ctx.save_for_backward(x, top, bottom)  # not the output: a caller may change that in place
        return torch.maximum(top, bottom)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        """torch's max-pool backward on the indices torch's kernel would have returned; differentiable again
        (torch knows that backward's derivative), so double backward works as with nn.MaxPool2d."""
        x, top, bottom = ctx.saved_tensors
        if torch.isfinite(x.sum()):
            indices = _first_max_indices(x, top, bottom)
        else:  # NaN or an infinity: torch's kernel, slow but with torch's rule for them
            indices = F.max_pool2d_with_indices(x, 2)[1]
        return torch.ops.aten.max_pool2d_with_indices_backward(grad, x, [2, 2], [2, 2], [0, 0], [1, 1], False,
                                                               indices)


def _pooled_here(x: torch.Tensor) -> bool:
    """Whether this module pools `x` itself: on the CPU (elsewhere torch's kernel is fast), a shape torch accepts
    (3-d or 4-d, channels, windows that fit: torch raises its own errors for the rest), a dtype whose index
    arithmetic is exact for this plane size, and no larger than `GRADIENT_BYTES_LIMIT` when a gradient is wanted."""
    if x.device.type != "cpu" or x.dim() not in (3, 4) or x.shape[-3] == 0 or min(x.shape[-2:]) < 2:
        return False
    if x.shape[-2] * x.shape[-1] > _EXACT_INDEX.get(x.dtype, 0):
        return False
    wants_gradient = x.requires_grad and torch.is_grad_enabled()
    return not wants_gradient or x.numel() * x.element_size() <= GRADIENT_BYTES_LIMIT


class MaxPool2x2(nn.Module):
    """`nn.MaxPool2d(2)`, faster on CPU (this module's docstring). Not supported here, unlike torch's: torch.func
    transforms (vmap, grad) and TorchScript; no fedbench method uses them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _MaxPool2x2.apply(x) if _pooled_here(x) else F.max_pool2d(x, 2)

    def extra_repr(self) -> str:
        return "kernel_size=2, stride=2"

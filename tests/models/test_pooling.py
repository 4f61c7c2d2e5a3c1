"""MaxPool2x2 gives torch's max_pool2d numbers: the pooled values, and gradients bit for bit, ties included."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedbench.core.registry import MODELS
from fedbench.models.pooling import GRADIENT_BYTES_LIMIT, MaxPool2x2


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bits: equal bits mean equal numbers, signed zeros and NaN payloads included."""
    return t.view({torch.float32: torch.int32, torch.float64: torch.int64}[t.dtype])


def pooled_and_grad(pool, x: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.detach().clone().requires_grad_()
    y = pool(x)
    (dx,) = torch.autograd.grad(y, x, grad)
    return y, dx


def cases():
    g = torch.Generator().manual_seed(0)
    small_ints = torch.randint(-2, 3, (5, 3, 9, 11), generator=g).float()  # odd sizes, ties in most windows
    signed_zeros = torch.zeros(4, 2, 8, 8)
    signed_zeros[torch.rand(signed_zeros.shape, generator=g) < 0.5] = -0.0
    with_nan = torch.randint(-2, 3, (4, 3, 8, 10), generator=g).float()
    with_nan[torch.rand(with_nan.shape, generator=g) < 0.1] = float("nan")
    with_inf = torch.randint(-2, 3, (4, 3, 8, 10), generator=g).float()
    with_inf[torch.rand(with_inf.shape, generator=g) < 0.1] = float("inf")
    with_inf[torch.rand(with_inf.shape, generator=g) < 0.1] = float("-inf")
    big = 0.75 * torch.finfo(torch.float32).max  # two of opposite signs differ by more than float32 holds

    def overflowing(row: list[float]) -> torch.Tensor:
        """One window with `row` on top, small values elsewhere: its difference overflows, the sum does not."""
        x = torch.full((1, 1, 4, 4), 5.0)
        x[0, 0, 0, :2] = torch.tensor(row)
        return x
    relu = torch.relu(torch.randn(16, 6, 28, 28, generator=g))
    return {
        "relu activations": relu,
        "channels last": relu.contiguous(memory_format=torch.channels_last),
        "transposed view": relu.transpose(-1, -2),
        "small integers, odd sizes": small_ints,
        "unbatched": small_ints[0],
        "constant": torch.full((2, 3, 6, 6), 0.5),
        "float64": torch.randn(3, 4, 10, 12, generator=g, dtype=torch.float64).round(),
        "signed zeros": signed_zeros,
        "NaN": with_nan,
        "infinities": with_inf,
        "a difference that overflows, left largest": overflowing([big, -big]),
        "a difference that overflows, right largest": overflowing([-big, big]),
        "a sum that overflows": overflowing([big, big]),
        "subnormals": small_ints * 1e-40,
        "empty batch": torch.zeros(0, 3, 8, 8),
    }


@pytest.mark.parametrize("name", list(cases()))
def test_values_and_gradients_are_torchs(name):
    x = cases()[name]
    grad = torch.randn(F.max_pool2d(x, 2).shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    want_y, want_dx = pooled_and_grad(lambda t: F.max_pool2d(t, 2), x, grad)
    got_y, got_dx = pooled_and_grad(MaxPool2x2(), x, grad)
    assert type(got_y.grad_fn).__name__ == "_MaxPool2x2Backward"  # the fast path, whatever it asks torch for
    if "difference that overflows" in name or name == "subnormals":  # for the sign arithmetic, not torch's indices
        assert torch.isfinite(x.sum())
    assert torch.equal(got_y.isnan(), want_y.isnan())
    assert torch.equal(got_y.nan_to_num(), want_y.nan_to_num())  # equal values (either zero of a tied +-0 window)
    assert torch.equal(bits(got_dx), bits(want_dx))  # each gradient on the element torch sends it to


def test_other_inputs_are_torchs_and_bad_shapes_fail_as_torchs_do():
    bf16 = torch.rand(2, 3, 8, 8).bfloat16()  # its index arithmetic would not be exact: torch's kernel
    assert torch.equal(MaxPool2x2()(bf16), F.max_pool2d(bf16, 2))
    large = torch.rand(GRADIENT_BYTES_LIMIT // 4 // (16 * 16) + 1, 1, 16, 16, requires_grad=True)
    assert type(MaxPool2x2()(large).grad_fn).__name__ == "MaxPool2DWithIndicesBackward0"
    assert type(MaxPool2x2()(large[:-1]).grad_fn).__name__ == "_MaxPool2x2Backward"
    for shape in [(2, 3, 1, 8), (1, 0, 8, 8)]:  # a window larger than the input; no channels
        with pytest.raises(RuntimeError):
            F.max_pool2d(torch.rand(shape), 2)
        with pytest.raises(RuntimeError):
            MaxPool2x2()(torch.rand(shape))


def test_output_changed_in_place_and_double_backward_work_as_with_torchs():
    x = torch.relu(torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(2))).round()
    grads = []
    for pool in (lambda t: F.max_pool2d(t, 2), MaxPool2x2()):
        leaf = x.clone().requires_grad_()
        upstream = torch.randn(4, 3, 4, 4, generator=torch.Generator().manual_seed(3), requires_grad=True)
        y = pool(leaf).sub_(1)  # an in-place op on the output (a following ReLU(inplace=True) does one)
        (dx,) = torch.autograd.grad(y, leaf, upstream, create_graph=True)
        (d_upstream,) = torch.autograd.grad((dx * torch.arange(dx.numel()).view(dx.shape)).sum(), upstream)
        grads.append((dx, d_upstream))
    assert all(torch.equal(bits(a), bits(b)) for a, b in zip(*grads))


def test_lenet5_trains_to_the_same_weights_as_with_torchs_pooling():
    """20 SGD steps on images with a blank border, as MNIST's: the same weights, bit for bit. End to end only: the
    tie rule is the test above's (in LeNet-5 a ReLU comes first, so tied windows hold zeros, which pass no gradient,
    or equal values over a blank patch, where the choice moves no weight)."""
    g = torch.Generator().manual_seed(0)
    x = torch.zeros(32, 1, 28, 28)
    x[:, :, 6:22, 6:22] = torch.rand(32, 1, 16, 16, generator=g)
    y = torch.randint(0, 10, (32,), generator=g)
    models = []
    for use_torchs in (False, True):
        torch.manual_seed(0)
        model = MODELS.get("lenet5")((1, 28, 28), 10)
        if use_torchs:
            for i, layer in enumerate(model.features):
                if isinstance(layer, MaxPool2x2):
                    model.features[i] = nn.MaxPool2d(2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for step in range(20):
            rows = torch.arange(step % 4 * 8, step % 4 * 8 + 8)
            optimizer.zero_grad()
            F.cross_entropy(model(x[rows]), y[rows]).backward()
            optimizer.step()
        models.append(model.state_dict())
    assert sum(isinstance(m, nn.MaxPool2d) for m in model.modules()) == 2  # the comparison really used torch's
    fast, torchs = models
    assert all(torch.equal(bits(fast[k]), bits(torchs[k])) for k in fast)

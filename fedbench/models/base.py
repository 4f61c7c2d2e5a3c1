"""The interface every fedbench model implements, and `build_model`, the one way to construct a model.

Methods need more than logits. MOON, FedRep, FedBABU and FedDRM work on the penultimate representation and
the final linear layer; FEROMA profiles the flattened input of the first fully connected layer (002 App.
B.4); Client-Conditional FL concatenates client statistics right before that layer (001 Sec. III-B). So
every model is the same three parts in sequence:

    x -> features -> fc_input -> [fc_input ; cond] -> body -> represent -> head -> logits

`features` is everything up to the first fully connected layer (conv stack and flatten, or just flatten),
`body` the fully connected layers before the classifier (empty where the head is the first FC layer), and
`head` the final `nn.Linear`. Parameter names follow the parts (`features.*`, `body.*`, `head.*`), which is
what methods with local heads select on.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any, TypeVar

import torch
from torch import nn

from fedbench.core.errors import ConfigError
from fedbench.core.fields import resolve_params
from fedbench.core.registry import MODELS

T = TypeVar("T")


class FedModel(nn.Module):
    """A classifier split into features, body and head, optionally conditioned on a per-client vector.

    Args:
        features: maps inputs [B, ...] to the flattened input of the first FC layer, [B, F].
        body: FC layers from [B, F + cond_dim] to the representation [B, P]; `nn.Sequential()` when the
            head is the first FC layer.
        head: the final classifier, P -> number of classes.
        cond_dim: width of the conditioning vector concatenated before the first FC layer (001 eq. 2-3);
            0 for an unconditioned model.
    """

    def __init__(self, features: nn.Module, body: nn.Module, head: nn.Linear, cond_dim: int = 0):
        super().__init__()
        self.features = features
        self.body = body
        self.head = head
        self.cond_dim = cond_dim

    def fc_input(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        """The flattened input of the first FC layer, before `cond` is appended (FEROMA's latents).

        `cond` is checked like in `forward` (so a wrong call fails the same way everywhere) but not used.
        """
        self._check_cond(x, cond)
        return self.features(x)

    def represent(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        """The penultimate representation [B, head.in_features]: the input of `head`."""
        h = self.fc_input(x, cond)
        if cond is not None:
            h = torch.cat([h, cond.to(h.dtype)], dim=1)
        return self.body(h)

    def forward(self, x: torch.Tensor, cond: torch.Tensor | None = None) -> torch.Tensor:
        """Logits [B, num_classes] = head(represent(x, cond))."""
        return self.head(self.represent(x, cond))

    def _check_cond(self, x: torch.Tensor, cond: torch.Tensor | None) -> None:
        if self.cond_dim == 0:
            if cond is not None:
                raise ValueError("this model is unconditioned (cond_dim=0): call it without cond")
            return
        if cond is None:
            raise ValueError(f"this model is conditioned: pass cond of shape [B, {self.cond_dim}]")
        if cond.shape != (x.shape[0], self.cond_dim):
            raise ValueError(f"cond must have shape [{x.shape[0]}, {self.cond_dim}], got {list(cond.shape)}")


def in_part(name: str, *parts: str) -> bool:
    """Whether state-dict entry `name` belongs to one of the model's named parts (`features`, `body`, `head`,
    or a model's own, such as FedDRM's `client_head`): what methods with local or frozen layers select on."""
    return name.split(".", 1)[0] in parts


def select_parts(weights: Mapping[str, T], *parts: str) -> dict[str, T]:
    """The entries of `weights` (a state dict or a Payload section) in the named parts."""
    return {k: v for k, v in weights.items() if in_part(k, *parts)}


def without_parts(weights: Mapping[str, T], *parts: str) -> dict[str, T]:
    """The entries of `weights` outside the named parts."""
    return {k: v for k, v in weights.items() if not in_part(k, *parts)}


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int, **options: Any) -> FedModel:
    """Build registered model `name` for inputs of `input_shape` (without batch) and `num_classes` classes.

    Options are checked against the factory's typed keyword parameters (unknown names and ill-typed values
    raise ConfigError listing what is allowed) and shapes a model cannot take raise ConfigError naming
    `model.name`. Weights get torch's default initialisation from the global generator; the caller seeds
    it (inside `torch.random.fork_rng()`), so this function never seeds anything.
    """
    factory = MODELS.get(name, field="model.name")
    shape = tuple(input_shape)
    if not shape or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape):
        raise ConfigError("input_shape", input_shape, "a non-empty tuple of positive integers")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
        raise ConfigError("num_classes", num_classes, "an integer >= 1")
    params = resolve_params("model", f"model {name}", options, factory, skip=2)
    return factory(shape, num_classes, **dict(params))


@functools.lru_cache(maxsize=256)
def check_model(
    name: str, options: tuple[tuple[str, Any], ...], input_shape: tuple[int, ...], num_classes: int
) -> None:
    """Build the model on torch's meta device (shapes, no memory) when a task loads, so that an option the model
    refuses (`hidden: [-5]`) fails before any run starts, and refuse a model whose parameters alone exceed this
    machine's memory (`hidden: [1000000000]`: a 296 GB layer), naming its size. A grid repeats a few models."""
    with torch.device("meta"):
        model = build_model(name, input_shape, num_classes, **dict(options))
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if size > memory:
        raise ConfigError(
            "model",
            {"name": name, **dict(options)},
            f"a model whose parameters fit in this machine's memory ({memory / 2**30:.0f} GiB): "
            f"this one has {count_parameters(model):,} parameters ({size / 2**30:,.1f} GiB) "
            f"for inputs {list(input_shape)}",
        )


def count_parameters(model: nn.Module) -> int:
    """Number of scalar parameters (what FedAvg communicates besides buffers such as BatchNorm statistics)."""
    return sum(p.numel() for p in model.parameters())


def image_shape(name: str, input_shape: tuple[int, ...], min_size: int = 1) -> tuple[int, int, int]:
    """`input_shape` as (C, H, W), or a ConfigError if it is not an image of at least min_size x min_size."""
    if len(input_shape) != 3 or min(input_shape[1:]) < min_size:
        raise shape_error(name, input_shape, f"images [C, H, W] with H, W >= {min_size}")
    c, h, w = input_shape
    return c, h, w


def shape_error(name: str, input_shape: tuple[int, ...], needs: str) -> ConfigError:
    """The error for a model that cannot take `input_shape`; `needs` says which shapes it takes."""
    return ConfigError("model.name", name, f"a model for input shape {tuple(input_shape)} ({name} takes {needs})")


def conv_bn_relu(in_channels: int, out_channels: int) -> nn.Sequential:
    """3x3 convolution (padding 1, size-preserving) -> BatchNorm -> ReLU, the unit of cnn_cifar and ResNet-9.

    The convolution keeps its bias (torch's default) as the papers' parameter counts imply (002 App. G).
    """
    return nn.Sequential(
        nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1),
        nn.BatchNorm2d(out_channels),
        nn.ReLU(),
    )

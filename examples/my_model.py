"""Your own model, outside the fedbench package: a small residual MLP. A task names it by `module:attribute`:

    model: {name: examples.my_model:residual_mlp, width: 64, blocks: 2}

A model function takes the input shape and the number of classes (fedbench passes both, from the dataset's facts)
and its options, and returns a `FedModel`: `features` (inputs to a flat vector), `body` (the layers up to the
representation) and `head` (the classifier). The split is what methods that treat parts differently read:
FedRep and FedBABU train the head apart from the body, FedDRM and the conditional models read the representation.
Options are the keyword parameters, checked when the task loads (a ConfigError names the field).
`python examples/my_model.py` builds it as fedbench does; `examples/my_dataset_and_model.py` runs it.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from fedbench.core.errors import ConfigError
from fedbench.models.base import FedModel


class Residual(nn.Module):
    """x + ReLU(Linear(x)): a block that keeps its width."""

    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.relu(self.linear(x))


def residual_mlp(input_shape: tuple[int, ...], num_classes: int, width: int = 64, blocks: int = 2) -> FedModel:
    """Flatten -> Linear to `width` -> `blocks` residual blocks -> head.

    Args:
        width: the width of every hidden layer.
        blocks: residual blocks after the first layer.
    """
    if width < 1:
        raise ConfigError("model.width", width, "an integer >= 1")
    if blocks < 0:
        raise ConfigError("model.blocks", blocks, "an integer >= 0")
    body = nn.Sequential(nn.Linear(math.prod(input_shape), width), nn.ReLU(), *(Residual(width) for _ in range(blocks)))
    return FedModel(nn.Flatten(), body, nn.Linear(width, num_classes))


if __name__ == "__main__":  # python examples/my_model.py: the model fedbench builds for two features, two classes
    from fedbench.models import build_model

    model = build_model("examples.my_model:residual_mlp", (2,), 2, width=32, blocks=2)
    outputs = tuple(model(torch.zeros(5, 2)).shape)
    print(f"residual_mlp: {sum(p.numel() for p in model.parameters())} parameters, output {outputs} for 5 points")

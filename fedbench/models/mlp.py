"""A multilayer perceptron on flattened inputs: the model for vector data (e.g. Synthetic(alpha, beta))."""

from __future__ import annotations

import math

from torch import nn

from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_model
from fedbench.models.base import FedModel


@register_model("mlp")
def mlp(input_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...] = (200,)) -> FedModel:
    """Flatten -> [Linear -> ReLU] per hidden width -> head. Takes any input shape.

    The flattened input is `fc_input`; the last hidden layer's output is `represent`. With `hidden=()`
    the model is multinomial logistic regression and both are the flattened input.

    Args:
        hidden: widths of the hidden layers, in order (default: one layer of 200, as SimpleNN in 003).
    """
    if any(h < 1 for h in hidden):
        raise ConfigError("model.hidden", list(hidden), "a list of positive integers")
    width = math.prod(input_shape)
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return FedModel(nn.Flatten(), nn.Sequential(*layers), nn.Linear(width, num_classes))

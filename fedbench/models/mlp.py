"""A multilayer perceptron on flattened inputs: the model for vector data (e.g. Synthetic(alpha, beta))."""

from __future__ import annotations

import math

from torch import nn

from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_model
from fedbench.models.base import FedModel


@register_model("mlp")
def mlp(
    input_shape: tuple[int, ...], num_classes: int, hidden: tuple[int, ...] = (200,), cond_dim: int = 0
) -> FedModel:
    """Flatten -> [Linear -> ReLU] per hidden width -> head. Takes any input shape.

    The flattened input is `fc_input`; the last hidden layer's output is `represent`. With `hidden=()`
    the model is multinomial logistic regression and both are the flattened input.

    Args:
        hidden: widths of the hidden layers, in order (default: one layer of 200, as SimpleNN in 003).
        cond_dim: width of a per-client vector concatenated to the flattened input (001 eq. 3); 0: none.
    """
    if any(h < 1 for h in hidden):
        raise ConfigError("model.hidden", list(hidden), "a list of positive integers")
    if cond_dim < 0:
        raise ConfigError("model.cond_dim", cond_dim, "an integer >= 0")
    width = math.prod(input_shape) + cond_dim
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return FedModel(nn.Flatten(), nn.Sequential(*layers), nn.Linear(width, num_classes), cond_dim=cond_dim)

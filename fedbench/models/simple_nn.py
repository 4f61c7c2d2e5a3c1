"""SimpleNN, the base model of 003 (Sec. II-B), for EMNIST-Digits."""

from __future__ import annotations

from fedbench.core.registry import register_model
from fedbench.models.base import FedModel
from fedbench.models.mlp import mlp


@register_model("simple_nn")
def simple_nn(input_shape: tuple[int, ...], num_classes: int) -> FedModel:
    """003 Sec. II-B: flatten the 28x28 image to 784 -> FC 200 + ReLU -> FC 10 (logits).

    Generalised to in = prod(input_shape) and out = num_classes; it is `mlp` with `hidden=(200,)`, kept
    under its own name so a task can say which paper's model it runs. 159,010 parameters on 1x28x28.
    """
    return mlp(input_shape, num_classes, hidden=(200,))

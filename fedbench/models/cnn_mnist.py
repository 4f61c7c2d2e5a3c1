"""The conditional CNN of Client-Conditional FL for 28x28 grayscale inputs (001 Sec. III-B, eq. 2)."""

from __future__ import annotations

from torch import nn

from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_model
from fedbench.models.base import FedModel, shape_error


@register_model("cnn_mnist")
def cnn_mnist(input_shape: tuple[int, ...], num_classes: int, cond_dim: int = 0) -> FedModel:
    """Conv(1->32, 3x3) ReLU MaxPool2 -> Conv(32->64, 3x3) ReLU MaxPool2 -> [f ; s] -> FC 128 ReLU -> FC C.

    Both convolutions use padding 1: eq. 2 states f is 3136-d (64 x 7 x 7), which unpadded convolutions
    (64 x 5 x 5 = 1600) would not give. With padding and cond_dim = 32 the first FC layer is 3168 -> 128
    and the model has 425,738 parameters at 10 classes, 4,096 of them (32 x 128) weights of s: both match
    the paper's "4,096 parameters out of ~426,000 total".

    Args:
        cond_dim: width of the client statistics s concatenated to f (001 uses the top l = 32 eigenvalues);
            0 for the unconditioned baseline.
    """
    if tuple(input_shape) != (1, 28, 28):
        raise shape_error("cnn_mnist", input_shape, "exactly (1, 28, 28), 001 eq. 2")
    if cond_dim < 0:
        raise ConfigError("model.cond_dim", cond_dim, "an integer >= 0")
    features = nn.Sequential(
        nn.Conv2d(1, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
    )
    body = nn.Sequential(nn.Linear(64 * 7 * 7 + cond_dim, 128), nn.ReLU())
    return FedModel(features, body, nn.Linear(128, num_classes), cond_dim=cond_dim)

"""The conditional CNN of Client-Conditional FL for 32x32 RGB inputs (001 Sec. III-B, eq. 3)."""

from __future__ import annotations

from torch import nn

from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_model
from fedbench.models.base import FedModel, conv_bn_relu, shape_error


@register_model("cnn_cifar")
def cnn_cifar(input_shape: tuple[int, ...], num_classes: int, cond_dim: int = 0) -> FedModel:
    """Conv(3->32)^2 -> MaxPool2 -> Conv(32->64)^2 -> MaxPool2 -> [f_4096 ; s] -> FC 256 ReLU -> FC C.

    "Four convolutional layers with batch normalization": each is 3x3 with padding 1 (so f is 64 x 8 x 8
    = 4096 as eq. 3 states), then BatchNorm and ReLU. With cond_dim = 32 the first FC layer is
    4128 -> 256; the model has 1,125,546 parameters at 10 classes (the paper gives no total).

    Args:
        cond_dim: width of the client statistics s concatenated to f (001 uses l = 32); 0 for none.
    """
    if tuple(input_shape) != (3, 32, 32):
        raise shape_error("cnn_cifar", input_shape, "exactly (3, 32, 32), 001 eq. 3")
    if cond_dim < 0:
        raise ConfigError("model.cond_dim", cond_dim, "an integer >= 0")
    features = nn.Sequential(
        conv_bn_relu(3, 32),
        conv_bn_relu(32, 32),
        nn.MaxPool2d(2),
        conv_bn_relu(32, 64),
        conv_bn_relu(64, 64),
        nn.MaxPool2d(2),
        nn.Flatten(),
    )
    body = nn.Sequential(nn.Linear(64 * 8 * 8 + cond_dim, 256), nn.ReLU())
    return FedModel(features, body, nn.Linear(256, num_classes), cond_dim=cond_dim)

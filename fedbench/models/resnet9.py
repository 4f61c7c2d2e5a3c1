"""ResNet-9, FEROMA's model for CIFAR-100, CheXpert and Office-Home (002 App. B.3)."""

from __future__ import annotations

import torch
from torch import nn

from fedbench.core.registry import register_model
from fedbench.models.base import FedModel, conv_bn_relu, image_shape


class Residual(nn.Module):
    """x + f(x): the skip connection around two size-preserving conv units."""

    def __init__(self, channels: int):
        super().__init__()
        self.branch = nn.Sequential(conv_bn_relu(channels, channels), conv_bn_relu(channels, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.branch(x)


@register_model("resnet9")
def resnet9(input_shape: tuple[int, ...], num_classes: int) -> FedModel:
    """The DAWNBench (Myrtle) ResNet-9 with FEROMA's 2048-d classifier input.

    prep conv 64 -> conv 128 + pool2 + residual(2 x conv 128) -> conv 256 + pool2 -> conv 512 + pool2 +
    residual(2 x conv 512) -> max pool to 2 x 2 -> flatten (512 x 2 x 2 = 2048, FEROMA's latent width,
    002 App. B.4) -> head. Each conv is 3x3 + BatchNorm + ReLU. On 3x32x32 with 100 classes this has
    6,775,140 parameters, exactly the count 002 App. G gives for CIFAR-100.

    The final pool is adaptive, so other input sizes keep the 2048-d FC input (on 32x32 it equals
    MaxPool(2)); below 16x16 the 2 x 2 grid repeats values. Takes any channel count and H, W >= 8.
    """
    channels, _, _ = image_shape("resnet9", input_shape, min_size=8)
    features = nn.Sequential(
        conv_bn_relu(channels, 64),
        conv_bn_relu(64, 128),
        nn.MaxPool2d(2),
        Residual(128),
        conv_bn_relu(128, 256),
        nn.MaxPool2d(2),
        conv_bn_relu(256, 512),
        nn.MaxPool2d(2),
        Residual(512),
        nn.AdaptiveMaxPool2d(2),
        nn.Flatten(),
    )
    return FedModel(features, nn.Sequential(), nn.Linear(512 * 2 * 2, num_classes))

"""torchvision's ResNet-18 as a FedModel, with the CIFAR stem and GroupNorm that FedDRM uses (004 Sec. 5)."""

from __future__ import annotations

from functools import partial
from typing import Literal

from torch import nn

from fedbench.core.registry import register_model
from fedbench.models.base import FedModel, image_shape

GROUPS = 16
"""GroupNorm groups: FedDRM's released code uses 16 (docs/methods.md); every ResNet-18 width (64..512) divides."""

NORMS = {"batch": nn.BatchNorm2d, "group": partial(nn.GroupNorm, GROUPS)}


@register_model("resnet18")
def resnet18(
    input_shape: tuple[int, ...],
    num_classes: int,
    cifar_stem: bool = False,
    norm: Literal["batch", "group"] = "batch",
) -> FedModel:
    """`torchvision.models.resnet18(weights=None)`, split into features (up to avgpool + flatten) and head.

    `represent` and `fc_input` are both the 512-d pooled features (the head is the only FC layer). About
    11.2M parameters at 10 classes. Takes any channel count (conv1 is rebuilt when it is not 3, with
    torchvision's initialisation) and any image size (the average pool is adaptive).

    Args:
        cifar_stem: 3x3 stride-1 conv1 and no max pool, the usual adaptation to 32x32 inputs (FedDRM's
            "CIFAR-style" ResNet-18).
        norm: "batch" for BatchNorm, or "group" for GroupNorm with 16 groups, as in FedDRM's code (batch
            statistics are ill-suited to averaging models trained on shifted clients).
    """
    channels, _, _ = image_shape("resnet18", input_shape)
    import torchvision.models  # imported here: it adds ~2.5 s to every process that merely lists models

    net = torchvision.models.resnet18(weights=None, num_classes=num_classes, norm_layer=NORMS[norm])
    if cifar_stem or channels != 3:
        kernel, stride, padding = (3, 1, 1) if cifar_stem else (7, 2, 3)
        net.conv1 = nn.Conv2d(channels, 64, kernel, stride, padding, bias=False)
        nn.init.kaiming_normal_(net.conv1.weight, mode="fan_out", nonlinearity="relu")
    if cifar_stem:
        net.maxpool = nn.Identity()
    features = nn.Sequential(
        net.conv1,
        net.bn1,
        net.relu,
        net.maxpool,
        net.layer1,
        net.layer2,
        net.layer3,
        net.layer4,
        net.avgpool,
        nn.Flatten(),
    )
    return FedModel(features, nn.Sequential(), net.fc)

"""FedDRM's two-path network (004 Sec. 2.3-3.1, Fig. 2): a shared backbone feeding a target (class) path and
a client path.

    x -> features (backbone, g(x)) -+-> body (hidden, LayerNorm, ReLU) -> head (-> C)      target path
                                    +-> client_head (hidden, LayerNorm, ReLU -> N)          client path

`features`, `body` and `head` are the FedModel parts, so `model(x)` is the class prediction every method
uses and `head.*` is the final target layer FedDRM keeps local. The client path reads the same shared
features ("deep sharing", 004 Fig. 6). With `num_clients = 0` there is no client path: that is the
baselines' architecture of 004 Sec. 3.1 (backbone -> 256 -> classifier), so FedAvgFT and FedProxFT can be
compared on the same target network.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import nn

from fedbench.core.errors import ConfigError
from fedbench.core.registry import register_model
from fedbench.models.base import FedModel, image_shape
from fedbench.models.resnet18 import resnet18


class FedDRMNet(FedModel):
    """A FedModel with an optional client path on the shared features.

    Args:
        features: the backbone, inputs -> [B, F].
        body: the target projection, [B, F] -> [B, P].
        head: the final target layer, P -> number of classes (client-local in FedDRM).
        client_head: [B, F] -> [B, num_clients] client logits; None for the baselines' network.
    """

    def __init__(self, features: nn.Module, body: nn.Module, head: nn.Linear, client_head: nn.Module | None):
        super().__init__(features, body, head)
        self.client_head = client_head

    @property
    def num_clients(self) -> int:
        """Outputs of the client path (0: no client path)."""
        return 0 if self.client_head is None else self.client_head[-1].out_features

    def both(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(class logits [B, C], client logits [B, N]) from one pass through the backbone."""
        if self.client_head is None:
            raise ValueError("this network has no client path (num_clients=0)")
        h = self.features(x)
        return self.head(self.body(h)), self.client_head(h)

    def client_logits(self, x: torch.Tensor) -> torch.Tensor:
        """Client logits [B, N]: scores of P(client = i | x) up to the clients' shares (004 Theorem 2.2)."""
        return self.both(x)[1]


def projection(width: int, hidden: int) -> nn.Sequential:
    """Linear -> LayerNorm -> ReLU, the first layer of both paths (docs/methods.md, FedDRM's released code)."""
    return nn.Sequential(nn.Linear(width, hidden), nn.LayerNorm(hidden), nn.ReLU())


def small_cnn(channels: int, h: int, w: int) -> tuple[nn.Sequential, int]:
    """Two conv(3x3) -> GroupNorm -> ReLU -> max-pool(2) blocks (16, 32 channels) and flatten; (module, width).

    A CPU-sized stand-in for ResNet-18 on MNIST- or digits-sized inputs (1568-d features on 28x28, 128-d on
    8x8). GroupNorm with 4 channels per group, as the first GroupNorm(16) of 004's ResNet-18 has (64 channels).
    """
    layers: list[nn.Module] = []
    for c_in, c_out in ((channels, 16), (16, 32)):
        layers += [nn.Conv2d(c_in, c_out, 3, padding=1), nn.GroupNorm(c_out // 4, c_out), nn.ReLU(), nn.MaxPool2d(2)]
    return nn.Sequential(*layers, nn.Flatten()), 32 * (h // 4) * (w // 4)


@register_model("feddrm_net")
def feddrm_net(
    input_shape: tuple[int, ...],
    num_classes: int,
    backbone: Literal["resnet18", "cnn"] = "resnet18",
    num_clients: int = 0,
    hidden: int = 256,
) -> FedDRMNet:
    """FedDRM's network: backbone, target path (hidden -> C) and client path (hidden -> N).

    Args:
        backbone: "resnet18": the CIFAR-stem ResNet-18 with GroupNorm(16) of `resnet18` (512-d features,
            004 Sec. 3.1); "cnn": `small_cnn`, for tests and CPU benchmarks on MNIST- or digits-sized images.
        num_clients: N, outputs of the client path; FedDRM sets it to the run's client count. 0: no client
            path (the baselines' network).
        hidden: width of both projections (004 Sec. 3.1: 256).
    """
    channels, h, w = image_shape("feddrm_net", input_shape, min_size=4 if backbone == "cnn" else 1)
    if num_clients < 0:
        raise ConfigError("model.num_clients", num_clients, "an integer >= 0 (0: no client path)")
    if hidden < 1:
        raise ConfigError("model.hidden", hidden, "an integer >= 1")
    if backbone == "resnet18":
        features, width = resnet18(input_shape, num_classes, cifar_stem=True, norm="group").features, 512
    else:
        features, width = small_cnn(channels, h, w)
    client_head = nn.Sequential(*projection(width, hidden), nn.Linear(hidden, num_clients)) if num_clients else None
    return FedDRMNet(features, projection(width, hidden), nn.Linear(hidden, num_classes), client_head)

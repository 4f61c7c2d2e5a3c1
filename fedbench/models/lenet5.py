"""LeNet-5 as FEROMA uses it for MNIST, Fashion-MNIST and CIFAR-10 (002 App. B.3)."""

from __future__ import annotations

from torch import nn

from fedbench.core.registry import register_model
from fedbench.models.base import FedModel, image_shape


@register_model("lenet5")
def lenet5(input_shape: tuple[int, ...], num_classes: int) -> FedModel:
    """conv(C->6, 5x5, pad 2) ReLU pool2 -> conv(6->16, 5x5) ReLU pool2 -> FC 120 -> FC 84 -> head.

    The flattened conv output (`fc_input`) is FEROMA's profile latent: 400-d on 28x28, 576-d on 32x32
    (002 App. B.4). On 1x28x28 with 10 classes this has 61,706 parameters; 002 App. G reports 62,006 for
    MNIST, which is this model with 3 input channels (conv1 has 300 more weights), so FEROMA's code
    apparently feeds MNIST as 3 channels. Takes any channel count and H, W >= 12.
    """
    channels, h, w = image_shape("lenet5", input_shape, min_size=12)
    flat = 16 * ((h // 2 - 4) // 2) * ((w // 2 - 4) // 2)
    features = nn.Sequential(
        nn.Conv2d(channels, 6, kernel_size=5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, kernel_size=5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
    )
    body = nn.Sequential(nn.Linear(flat, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU())
    return FedModel(features, body, nn.Linear(84, num_classes))

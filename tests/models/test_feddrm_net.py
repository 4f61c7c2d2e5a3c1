"""FedDRM's two-path network: the paper's ResNet-18 layout, the small CNN variant, and the baselines' network."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from fedbench.core.errors import ConfigError
from fedbench.models import build_model
from fedbench.models.feddrm_net import FedDRMNet


def seeded(shape, num_classes=7, seed=0, **options) -> FedDRMNet:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_model("feddrm_net", shape, num_classes, **options).eval()


def linear_shapes(module: nn.Module) -> list[tuple[int, int]]:
    return [(m.in_features, m.out_features) for m in module.modules() if isinstance(m, nn.Linear)]


def test_resnet18_layout_matches_004():
    model = seeded((3, 32, 32), num_classes=10, num_clients=8)
    norms = [m for m in model.features.modules() if isinstance(m, (nn.GroupNorm, nn.BatchNorm2d))]
    assert norms and all(isinstance(m, nn.GroupNorm) and m.num_groups == 16 for m in norms)
    conv1 = model.features[0]
    assert (conv1.kernel_size, conv1.stride) == ((3, 3), (1, 1)) and isinstance(model.features[3], nn.Identity)
    assert linear_shapes(model.body) == [(512, 256)] and isinstance(model.body[1], nn.LayerNorm)
    assert linear_shapes(model.head) == [(256, 10)]
    assert linear_shapes(model.client_head) == [(512, 256), (256, 8)] and isinstance(model.client_head[1], nn.LayerNorm)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        classes, clients = model.both(x)
        assert model.fc_input(x).shape == (2, 512)
        assert classes.shape == (2, 10) and clients.shape == (2, 8)
        assert torch.equal(classes, model(x)) and torch.equal(clients, model.client_logits(x))


@pytest.mark.parametrize("shape, width", [((1, 8, 8), 128), ((3, 28, 28), 1568)])
def test_cnn_backbone_paths_share_the_features(shape, width):
    model = seeded(shape, backbone="cnn", num_clients=4, hidden=16)
    assert model.num_clients == 4
    x = torch.randn(3, *shape)
    with torch.no_grad():
        h = model.fc_input(x)
        assert h.shape == (3, width)
        classes, clients = model.both(x)
        assert torch.equal(classes, model.head(model.body(h)))
        assert torch.equal(clients, model.client_head(h))
    assert linear_shapes(model.client_head) == [(width, 16), (16, 4)]


def test_only_head_is_the_final_target_layer():
    names = {n for n, _ in seeded((1, 8, 8), backbone="cnn", num_clients=3).named_parameters()}
    assert {n for n in names if n.startswith("head.")} == {"head.weight", "head.bias"}
    assert any(n.startswith("client_head.") for n in names) and any(n.startswith("body.") for n in names)


def test_without_clients_it_is_the_baselines_network():
    model = seeded((1, 8, 8), backbone="cnn")
    assert model.client_head is None and model.num_clients == 0
    assert not any(n.startswith("client_head.") for n, _ in model.named_parameters())
    with pytest.raises(ValueError, match="no client path"):
        model.both(torch.randn(1, 1, 8, 8))
    assert model(torch.randn(2, 1, 8, 8)).shape == (2, 7)


def test_same_seed_same_weights():
    a, b, c = (seeded((1, 8, 8), seed=s, backbone="cnn", num_clients=2).state_dict() for s in (1, 1, 2))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


@pytest.mark.parametrize(
    "shape, options, field",
    [
        ((1, 8, 8), {"num_clients": -1}, "model.num_clients"),
        ((1, 8, 8), {"hidden": 0}, "model.hidden"),
        ((1, 8, 8), {"backbone": "vgg"}, "model.backbone"),
        ((1, 3, 3), {"backbone": "cnn"}, "model.name"),
        ((60,), {}, "model.name"),
    ],
)
def test_bad_options_and_shapes_are_config_errors(shape, options, field):
    with pytest.raises(ConfigError) as err:
        build_model("feddrm_net", shape, 10, **options)
    assert err.value.field == field

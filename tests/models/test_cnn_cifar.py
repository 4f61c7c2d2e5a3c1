from torch import nn

from fedbench.models import build_model, count_parameters


def test_cnn_cifar_matches_eq_3():
    model = build_model("cnn_cifar", (3, 32, 32), 10, cond_dim=32)
    first_fc = model.body[0]
    assert (first_fc.in_features, first_fc.out_features) == (4128, 256)
    convs = [m for m in model.features.modules() if isinstance(m, nn.Conv2d)]
    norms = [m for m in model.features.modules() if isinstance(m, nn.BatchNorm2d)]
    assert [(c.in_channels, c.out_channels) for c in convs] == [(3, 32), (32, 32), (32, 64), (64, 64)]
    assert len(norms) == 4
    assert count_parameters(model) == 1_125_546

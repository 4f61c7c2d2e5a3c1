from torch import nn

from fedbench.models import build_model, count_parameters


def test_resnet18_parameter_count():
    assert count_parameters(build_model("resnet18", (3, 32, 32), 10)) == 11_181_642  # torchvision's
    assert count_parameters(build_model("resnet18", (3, 32, 32), 10, cifar_stem=True)) == 11_173_962


def test_resnet18_stem_norm_and_channels():
    model = build_model("resnet18", (1, 28, 28), 10, cifar_stem=True, norm="group")
    conv1 = model.features[0]
    assert (conv1.in_channels, conv1.kernel_size, conv1.stride) == (1, (3, 3), (1, 1))
    assert isinstance(model.features[3], nn.Identity)  # no max pool
    norms = [m for m in model.modules() if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm))]
    assert norms and all(isinstance(m, nn.GroupNorm) and m.num_groups == 16 for m in norms)
    plain = build_model("resnet18", (1, 28, 28), 10)
    assert (plain.features[0].in_channels, plain.features[0].kernel_size) == (1, (7, 7))
    assert isinstance(plain.features[3], nn.MaxPool2d)
    assert not any(isinstance(m, nn.GroupNorm) for m in plain.modules())

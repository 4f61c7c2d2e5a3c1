import torch

from fedbench.models import build_model, count_parameters


def test_resnet9_parameter_count_matches_feroma_cifar100():
    """002 App. G: "6 775 140 parameters (CIFAR-100)"."""
    assert count_parameters(build_model("resnet9", (3, 32, 32), 100)) == 6_775_140


def test_resnet9_latents_are_post_relu():
    model = build_model("resnet9", (3, 32, 32), 10).eval()
    with torch.no_grad():
        assert model.fc_input(torch.randn(2, 3, 32, 32)).min() >= 0

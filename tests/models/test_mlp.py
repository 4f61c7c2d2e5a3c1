from fedbench.models import build_model


def test_mlp_hidden_layers():
    model = build_model("mlp", (60,), 10, hidden=[32, 16])
    assert [m.out_features for m in model.body if hasattr(m, "out_features")] == [32, 16]
    assert model.head.in_features == 16
    assert build_model("mlp", (60,), 10, hidden=[]).head.in_features == 60


def test_a_conditioned_mlp_appends_the_vector_to_the_flattened_input():
    import torch

    from fedbench.models import build_model

    model = build_model("mlp", (1, 8, 8), 10, hidden=[16], cond_dim=4)
    assert model.body[0].in_features == 64 + 4
    x, cond = torch.randn(3, 1, 8, 8), torch.randn(3, 4)
    assert model(x, cond).shape == (3, 10)
    assert not torch.equal(model(x, cond), model(x, torch.zeros(3, 4)))  # the vector changes the output

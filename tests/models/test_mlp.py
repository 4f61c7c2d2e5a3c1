from fedbench.models import build_model


def test_mlp_hidden_layers():
    model = build_model("mlp", (60,), 10, hidden=[32, 16])
    assert [m.out_features for m in model.body if hasattr(m, "out_features")] == [32, 16]
    assert model.head.in_features == 16
    assert build_model("mlp", (60,), 10, hidden=[]).head.in_features == 60

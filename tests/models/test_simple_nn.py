from fedbench.models import build_model, count_parameters


def test_simple_nn_is_003s_784_200_10():
    model = build_model("simple_nn", (1, 28, 28), 10)
    assert (model.body[0].in_features, model.body[0].out_features, model.head.out_features) == (784, 200, 10)
    assert count_parameters(model) == 159_010

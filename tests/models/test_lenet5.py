from fedbench.models import build_model, count_parameters


def test_lenet5_parameter_count_matches_feroma():
    """61,706 on 1x28x28 (002 Table 11: "LeNet5 (62K)"); the 62,006 of 002 App. G is the 3-channel variant."""
    assert count_parameters(build_model("lenet5", (1, 28, 28), 10)) == 61_706
    assert count_parameters(build_model("lenet5", (3, 28, 28), 10)) == 62_006


def test_lenet5_layers():
    model = build_model("lenet5", (3, 32, 32), 10)
    assert [m.in_features for m in (model.body[0], model.body[2], model.head)] == [576, 120, 84]

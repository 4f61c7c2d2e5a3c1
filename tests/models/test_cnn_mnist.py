from fedbench.models import build_model, count_parameters


def test_cnn_mnist_matches_eq_2_and_the_papers_count():
    model = build_model("cnn_mnist", (1, 28, 28), 10, cond_dim=32)
    first_fc = model.body[0]
    assert (first_fc.in_features, first_fc.out_features) == (3168, 128)
    assert 32 * first_fc.out_features == 4_096  # weights of s (001 Sec. III-B)
    assert count_parameters(model) == 425_738  # "~426,000 total"
    assert count_parameters(build_model("cnn_mnist", (1, 28, 28), 10)) == 425_738 - 4_096

"""Scenario reports: class histograms as clients see them, table rows, label-skew divergence, default rounds."""

import math

import numpy as np
import pytest

from fedbench.scenarios import artifact, report
from fedbench.scenarios.artifact import ClientView, Scenario

#                 0  1  2  3  4  5  6  7  8  9 10 11
LABELS = np.array([0, 0, 1, 1, 2, 2, 0, 1, 2, 0, 1, 2])
SWAP = np.array([1, 0, 2])  # concept shift: the client calls 0 "1" and 1 "0"


def idx(*values):
    return np.array(values, dtype=np.int64)


def two_stage_scenario() -> Scenario:
    stage0 = (
        ClientView(idx(0, 1, 2), idx(9), 0, description="classes 0,1"),
        ClientView(idx(3, 4, 5), idx(10), 1, label_map=SWAP, description="swapped"),
    )
    stage1 = (
        ClientView(idx(4, 5, 8), idx(11), 2, description="class 2"),
        ClientView(idx(6, 7), idx(), 1, label_map=SWAP, description="swapped"),
    )
    test_clients = (
        artifact.TestClient(ClientView(idx(), idx(0, 1, 6, 2), 1, label_map=SWAP), labelled=idx(), origin=1, seen=True),
        artifact.TestClient(ClientView(idx(), idx(4, 5)), labelled=idx(4), origin=-1, seen=False),
    )
    return Scenario("k", 2, 3, (1, 2, 2), (stage0, stage1), round_stage=(0, 0, 1, 1), test_clients=test_clients)


def test_class_histograms_count_training_labels_after_the_label_map_per_stage():
    sc = two_stage_scenario()
    np.testing.assert_array_equal(report.class_histograms(LABELS, sc, 1, 3), [[2, 1, 0], [1, 0, 2]])
    np.testing.assert_array_equal(report.class_histograms(LABELS, sc, 2, 3), report.class_histograms(LABELS, sc, 1, 3))
    np.testing.assert_array_equal(report.class_histograms(LABELS, sc, 3, 3), [[0, 0, 3], [1, 1, 0]])


def test_test_client_histograms_use_the_test_split_and_label_map():
    sc = two_stage_scenario()
    np.testing.assert_array_equal(report.test_client_histograms(LABELS, sc, 3), [[1, 3, 0], [0, 0, 2]])
    empty = Scenario("k", 2, 3, (1,), sc.stages)
    assert report.test_client_histograms(LABELS, empty, 3).shape == (0, 3)


def test_round_summary_rows():
    rows = report.round_summary(LABELS, two_stage_scenario(), 3, 3)
    assert [(r.client, r.train, r.test, r.distribution_id, r.description, r.classes) for r in rows] == [
        (0, 3, 1, 2, "class 2", (2,)),
        (1, 2, 0, 1, "swapped", (0, 1)),
    ]


def test_default_rounds_first_round_of_each_stage_and_the_last():
    sc = two_stage_scenario()
    assert report.default_rounds(sc, 4) == [1, 3, 4]
    static = Scenario("k", 2, 3, (1,), sc.stages[:1])
    assert report.default_rounds(static, 10) == [1, 10]
    many = Scenario("k", 2, 3, (1,), sc.stages * 3, round_stage=(0, 1, 2, 3, 4, 5))
    assert report.default_rounds(many, 6) == [1, 2, 3, 4, 6]  # stages 0-3, then the last round


def test_mean_pairwise_js_bounds():
    same = np.array([[3, 1, 0], [6, 2, 0], [30, 10, 0]])
    assert report.mean_pairwise_js(same) == pytest.approx(0.0, abs=1e-12)
    disjoint = np.eye(4) * 7
    assert report.mean_pairwise_js(disjoint) == pytest.approx(math.log(2))
    half = np.array([[1, 1], [1, 0]])  # p = (.5, .5), q = (1, 0)
    expected = 0.5 * (0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)) + 0.5 * math.log(1 / 0.75)
    assert report.mean_pairwise_js(half) == pytest.approx(expected)
    assert math.isnan(report.mean_pairwise_js(np.array([[1, 2]])))
    assert report.mean_pairwise_js(np.array([[1, 0], [0, 0], [0, 1]])) == pytest.approx(
        math.log(2)
    )  # empty row left out


def test_histogram_text_is_compact():
    assert report.histogram_text(np.array([5, 0, 2])) == "0:5 2:2"
    assert report.histogram_text(np.zeros(3, dtype=int)) == "-"
    many = np.arange(20)
    text = report.histogram_text(many)
    assert text.startswith("19 cls, top 19:19 18:18") and text.endswith("+9 more")


def test_plot_scenario_writes_a_png(tmp_path):
    from fedbench.scenarios.plot import plot_scenario

    path = plot_scenario(LABELS, two_stage_scenario(), [1, 3], 3, ["a", "b", "c"], tmp_path / "s" / "x.png", "title")
    assert path == tmp_path / "s" / "x.png"
    assert path.read_bytes().startswith(b"\x89PNG")

import numpy as np
import pytest

from fedbench.core.errors import ConfigError
from fedbench.core.registry import PARTITIONS
from fedbench.data import load_dataset
from fedbench.scenarios import build_scenario
from tests.conftest import tiny_spec


def label_histograms(labels, parts, num_classes):
    return np.array([np.bincount(labels[p], minlength=num_classes) / len(p) for p in parts])


def mean_pairwise_js(hists):
    def kl(p, q):
        mask = p > 0
        return float(np.sum(p[mask] * np.log(p[mask] / q[mask])))

    values = []
    for i in range(len(hists)):
        for j in range(i + 1, len(hists)):
            m = (hists[i] + hists[j]) / 2
            values.append(0.5 * kl(hists[i], m) + 0.5 * kl(hists[j], m))
    return float(np.mean(values))


def test_iid_is_a_disjoint_cover_with_equal_sizes():
    labels = np.repeat(np.arange(10), 37)
    parts = PARTITIONS.get("iid")(labels, 7, np.random.default_rng(0))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(labels)))


def test_dirichlet_is_a_disjoint_cover_and_respects_min_samples():
    labels = np.repeat(np.arange(10), 100)
    parts = PARTITIONS.get("dirichlet")(labels, 10, np.random.default_rng(0), alpha=0.3, min_samples=20)
    assert np.array_equal(np.sort(np.concatenate(parts)), np.arange(len(labels)))
    assert min(map(len, parts)) >= 20


def test_dirichlet_label_skew_shrinks_as_alpha_grows():
    labels = np.repeat(np.arange(10), 500)
    divergences = []
    for alpha in (0.05, 0.5, 5.0, 500.0):
        parts = PARTITIONS.get("dirichlet")(labels, 10, np.random.default_rng(1), alpha=alpha)
        divergences.append(mean_pairwise_js(label_histograms(labels, parts, 10)))
    assert divergences == sorted(divergences, reverse=True), divergences
    assert divergences[-1] < 0.01 < divergences[0]


def test_dirichlet_rejects_impossible_requests():
    labels = np.repeat(np.arange(2), 10)
    with pytest.raises(ConfigError, match="scenario.min_samples"):
        PARTITIONS.get("dirichlet")(labels, 5, np.random.default_rng(0), min_samples=10)
    with pytest.raises(ConfigError, match="scenario.alpha"):
        PARTITIONS.get("dirichlet")(labels, 2, np.random.default_rng(0), alpha=0.0)


def test_scenario_is_deterministic_per_seed_and_splits_locally():
    dataset = load_dataset("digits")
    spec = tiny_spec().scenario
    a, b, c = (build_scenario(dataset, spec, seed) for seed in (0, 0, 1))
    views_a, views_b, views_c = a.stages[0], b.stages[0], c.stages[0]
    assert all(np.array_equal(x.train, y.train) and np.array_equal(x.test, y.test) for x, y in zip(views_a, views_b))
    assert any(not np.array_equal(x.train, y.train) for x, y in zip(views_a, views_c))
    train_rows = np.flatnonzero(dataset.meta["split"].to_numpy() == "train")
    held = np.concatenate([np.concatenate([v.train, v.test]) for v in views_a])
    assert np.array_equal(np.sort(held), train_rows)  # disjoint and exactly the official training split
    for v in views_a:
        n = len(v.train) + len(v.test)
        assert len(v.test) == round(0.2 * n)
        assert not set(v.train) & set(v.test)

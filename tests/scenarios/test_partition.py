"""Partitions on small pools where the right answer is known, and heterogeneity moving the right way."""

import numpy as np
import pandas as pd
import pytest

from fedbench.core.errors import ConfigError
from fedbench.core.registry import PARTITIONS
from fedbench.data import DatasetFacts as Facts
from fedbench.scenarios.pool import PoolContext, allocate
from tests.scenarios.helpers import histograms, make, mean_pairwise_js, run_spec

FACTS10 = Facts(num_classes=10, channels=1, image_size=(28, 28), dataset="test")


def pool(labels, facts=FACTS10, **meta):
    labels = np.asarray(labels)
    return PoolContext(
        np.arange(len(labels)) + 1000, labels, pd.DataFrame(meta or {"i": np.arange(len(labels))}), facts
    )


def split(name, labels, num_clients, seed=0, facts=FACTS10, meta=None, **params):
    ctx = pool(labels, facts, **(meta or {}))
    return PARTITIONS.get(name)(**params).split(ctx, num_clients, np.random.default_rng(seed))


def test_iid_is_a_disjoint_cover_with_equal_sizes():
    out = split("iid", np.repeat(np.arange(10), 37), 7)
    assert max(map(len, out.parts)) - min(map(len, out.parts)) <= 1
    assert np.array_equal(np.sort(np.concatenate(out.parts)), np.arange(370))
    assert set(out.groups) == {0}


def test_dirichlet_is_a_disjoint_cover_and_respects_min_samples():
    out = split("dirichlet", np.repeat(np.arange(10), 100), 10, alpha=0.3, min_samples=20)
    assert np.array_equal(np.sort(np.concatenate(out.parts)), np.arange(1000))
    assert min(map(len, out.parts)) >= 20 and out.groups == list(range(10))


def test_dirichlet_label_skew_shrinks_as_alpha_grows():
    labels = np.repeat(np.arange(10), 500)
    divergences = []
    for alpha in (0.05, 0.5, 5.0, 500.0):
        parts = split("dirichlet", labels, 10, seed=1, alpha=alpha).parts
        divergences.append(mean_pairwise_js(np.array([np.bincount(labels[p], minlength=10) / len(p) for p in parts])))
    assert divergences == sorted(divergences, reverse=True), divergences
    assert divergences[-1] < 0.01 < divergences[0]


def test_feroma_label_skew_divergence_grows_from_low_to_high():
    js = []
    for level in ("low", "medium", "high"):
        values = []
        for seed in range(10):  # the levels' means differ by about 0.02: a few seeds are within the noise
            data, s = make({"preset": f"feroma/label_skew/{level}", "drift_every": 1}, rounds=10, seed=seed)
            values += [mean_pairwise_js(histograms(data, stage, 10)) for stage in s.stages]
        js.append(np.mean(values))
    assert js == sorted(js) and js[0] < js[-1], js


def test_shards_are_label_homogeneous_and_cover_the_pool():
    labels = np.repeat(np.arange(10), 40)
    out = split("shards", labels, 8, shards_per_client=5)
    assert np.array_equal(np.sort(np.concatenate(out.parts)), np.arange(400))
    assert all(len(np.unique(labels[p])) <= 5 for p in out.parts)


def test_shards_that_do_not_divide_over_the_classes_are_rejected_at_load():
    with pytest.raises(ConfigError) as err:
        run_spec({"partition": "shards", "shards_per_client": 3, "num_clients": 7})
    assert "scenario.shards_per_client" in str(err.value) and "divisible" in str(err.value)


def test_quantity_skew_keeps_the_label_mix_and_varies_sizes():
    labels = np.tile(np.arange(10), 300)
    out = split("quantity", labels, 6, alpha=0.3)
    sizes = sorted(map(len, out.parts))
    assert sizes[-1] > 3 * sizes[0] and set(out.groups) == {0}


def test_class_clusters_use_superclasses_when_there_are_k_of_them():
    facts = Facts(
        num_classes=10, channels=3, image_size=(32, 32), superclasses=(0, 0, 1, 1, 1, 1, 1, 1, 0, 0), dataset="cifar10"
    )
    labels = np.repeat(np.arange(10), 20)
    out = split("class_clusters", labels, 4, facts=facts, clusters=2)
    vehicles = set(np.unique(labels[np.concatenate(out.parts[:2])]))
    assert vehicles == {0, 1, 8, 9} and out.groups == [0, 0, 1, 1]  # 001 E1 K=2: vehicles vs animals
    blocks = split("class_clusters", labels, 5, facts=facts, clusters=5)
    assert [sorted(np.unique(labels[p])) for p in blocks.parts] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]


def test_more_clusters_than_classes_is_rejected_at_load_saying_what_works():
    with pytest.raises(ConfigError) as err:
        run_spec({"partition": "class_clusters", "clusters": 11, "num_clients": 22})
    assert "scenario.clusters" in str(err.value) and "1..10" in str(err.value)


def test_subclass_clusters_relabel_to_superclasses():
    facts = Facts(
        num_classes=10, channels=3, image_size=(32, 32), superclasses=(0, 0, 1, 1, 1, 1, 1, 1, 0, 0), dataset="cifar10"
    )
    labels = np.repeat(np.arange(10), 20)
    out = split("subclass_clusters", labels, 2, facts=facts, clusters=2)
    a, b = (set(np.unique(labels[p])) for p in out.parts)
    assert a == {0, 8, 2, 4, 6} and b == {1, 9, 3, 5, 7}  # each cluster: half the vehicles, half the animals
    assert out.label_maps[0].tolist() == [0, 0, 1, 1, 1, 1, 1, 1, 0, 0]


def test_natural_split_gives_each_client_whole_writers():
    labels = np.tile(np.arange(10), 30)
    writers = np.repeat(np.arange(12), 25)
    out = split(
        "natural", labels, 4, facts=Facts(10, 1, (28, 28), ("writer",)), meta={"writer": writers}, column="writer"
    )
    owners = [set(writers[p]) for p in out.parts]
    assert all(len(o) == 3 for o in owners) and set().union(*owners) == set(range(12))
    assert sum(map(len, out.parts)) == 300


def test_natural_split_with_fewer_values_than_clients_makes_clusters():
    labels = np.tile(np.arange(10), 40)
    domain = np.repeat([0, 1], 200)
    out = split(
        "natural", labels, 6, facts=Facts(10, 1, (28, 28), ("domain",)), meta={"domain": domain}, column="domain"
    )
    assert out.groups == [0, 0, 0, 1, 1, 1] and set(domain[out.parts[0]]) == {0} and set(domain[out.parts[5]]) == {1}


def test_natural_split_needs_the_column():
    with pytest.raises(ConfigError) as err:
        run_spec({"partition": "natural", "column": "writer"})
    assert "writer" in str(err.value)


def test_allocate_shares_a_short_class_in_proportion():
    queues = [np.arange(10), np.arange(100, 200)]
    out = allocate(np.array([[10, 5], [10, 5], [0, 5]]), queues)
    assert [len(o) for o in out] == [5 + 5, 5 + 5, 5]
    assert len(np.unique(np.concatenate(out))) == 25

"""Every preset against the numbers its paper states (client counts, classes per client, level tables)."""

import math

import numpy as np
import pytest

from fedbench.core.errors import ConfigError, UnknownNameError
from fedbench.scenarios import PRESETS
from tests.scenarios.helpers import CIFAR100_LIKE, MNIST_LIKE, make, run_spec, seen_labels

LEVELS = ("low", "medium", "high")


def distinct_descriptions(scenario, what):
    return {what(v) for stage in scenario.stages for v in stage}


@pytest.mark.parametrize("level,banks", list(zip(LEVELS, (4, 6, 8), strict=True)))
def test_feroma_label_skew_two_classes_per_client_from_a_bank(level, banks):
    data, s = make({"preset": f"feroma/label_skew/{level}", "drift_every": 1}, rounds=20)
    assert s.num_clients == 20 and len(s.stages) == 20  # 002 I.2: 20 clients, drift every round in 20 rounds
    subsets = set()
    for stage in s.stages:
        for v in stage:
            classes = tuple(np.unique(data.y[v.train]))
            assert len(classes) == 2
            subsets.add(classes)
    assert len(subsets) == banks  # 20 stages x 20 clients draw every entry of the bank (Table 12: 4 / 6 / 8)


def test_feroma_label_skew_on_cifar100_uses_20_classes_per_client():
    data, s = make({"preset": "feroma/label_skew/low"}, dataset=CIFAR100_LIKE)
    assert {len(np.unique(data.y[v.train])) for v in s.stages[0]} == {20}


@pytest.mark.parametrize("level,patterns,rgb", list(zip(LEVELS, (4, 6, 12), (False, True, True), strict=True)))
def test_feroma_feature_skew_pattern_banks(level, patterns, rgb):
    spec = run_spec({"preset": f"feroma/feature_skew/{level}"})
    shift = spec.scenario.shifts[0]
    rotations, colours = shift.kwargs["rotations"], shift.kwargs["colours"]
    assert rotations * (3 if colours else 1) == patterns and colours == rgb
    _, s = make({"preset": f"feroma/feature_skew/{level}", "drift_every": 1}, rounds=20)
    assert len(distinct_descriptions(s, lambda v: repr(v.transform))) == patterns


@pytest.mark.parametrize("level,m", list(zip(LEVELS, (3, 4, 5), strict=True)))
def test_feroma_conditional_label_skew_bank_is_all_permutations_of_m_classes(level, m):
    _, s = make({"preset": f"feroma/conditional_label_skew/{level}", "drift_every": 1}, rounds=20)
    maps = {tuple(v.label_map) for stage in s.stages for v in stage}
    assert len(maps) <= math.factorial(m)
    moved = {c for lm in maps for c in np.flatnonzero(np.array(lm) != np.arange(10))}
    assert len(moved) == m
    assert all(t.labelled.size for t in s.test_clients)  # 002 App. E: labelled samples for P(Y|X)


@pytest.mark.parametrize("level,m", list(zip(LEVELS, (40, 60, 80), strict=True)))
def test_feroma_conditional_label_skew_cifar100_swaps_40_60_80(level, m):
    spec = run_spec({"preset": f"feroma/conditional_label_skew/{level}"}, dataset=CIFAR100_LIKE)
    assert spec.scenario.shifts[0].kwargs["classes"] == m


@pytest.mark.parametrize("level,banks", list(zip(LEVELS, (4, 6, 8), strict=True)))
def test_feroma_conditional_feature_skew_targets_8_of_10_classes(level, banks):
    _, s = make({"preset": f"feroma/conditional_feature_skew/{level}", "drift_every": 1}, rounds=20)
    entries = distinct_descriptions(s, lambda v: repr(v.transform))
    assert len(entries) <= banks
    for stage in s.stages:
        for v in stage:
            assert {len(op.classes) for op in v.transform} == {8}


@pytest.mark.parametrize("sparsity,per_cluster", [("rich", 5), ("super_sparse", 100)])
def test_conditional_e1_disjoint_class_groups_and_sparsity(sparsity, per_cluster):
    data, s = make({"preset": "conditional/E1", "clusters": 2, "sparsity": sparsity})
    assert s.num_clients == 2 * per_cluster
    first, last = s.stages[0][0], s.stages[0][-1]
    assert set(np.unique(data.y[first.train])).isdisjoint(np.unique(data.y[last.train]))
    for cluster in (s.stages[0][:per_cluster], s.stages[0][per_cluster:]):
        sizes = [len(v.train) for v in cluster]  # disjoint, equal shares of the cluster's data
        assert max(sizes) - min(sizes) <= 1 and len(np.unique(np.concatenate([v.train for v in cluster]))) == sum(sizes)
    assert np.mean([len(v.train) for v in s.stages[0]]) == pytest.approx(6000 / 2 / per_cluster, rel=0.01)


def test_conditional_e1_on_cifar100_uses_the_20_superclasses():
    data, s = make({"preset": "conditional/E1", "clusters": 20}, dataset={**CIFAR100_LIKE, "num_classes": 100})
    assert s.num_clients == 100 and len({v.distribution_id for v in s.stages[0]}) == 20


def test_conditional_e2a_same_superclass_labels_different_subclasses():
    data, s = make({"preset": "conditional/E2a", "clusters": 2})
    a, b = s.stages[0][0], s.stages[0][-1]
    assert set(np.unique(data.y[a.train])).isdisjoint(np.unique(data.y[b.train]))
    assert set(seen_labels(data, a)) == set(seen_labels(data, b)) == {0, 1}


def test_conditional_e3b_one_distinct_full_permutation_per_cluster():
    _, s = make({"preset": "conditional/E3b", "clusters": 3})
    maps = [tuple(s.stages[0][c].label_map) for c in (0, 7, 14)]
    assert len(set(maps)) == 3 and all(sorted(m) == list(range(10)) for m in maps)


def test_conditional_e2b_rotation_clusters():
    _, s = make({"preset": "conditional/E2b", "clusters": 4})
    angles = [v.transform[0].angle if v.transform else 0.0 for v in s.stages[0]]
    assert sorted(set(angles)) == [0.0, 90.0, 180.0, 270.0] and s.num_clients == 20


def test_feddrm_presets_eight_photometric_clients_pooled_70_30():
    for name in ("feddrm/dir0.3", "feddrm/shards5"):
        spec = run_spec({"preset": name}, dataset={**MNIST_LIKE, "channels": 3})
        assert spec.scenario.num_clients == 8 and spec.scenario.source == "all" and spec.scenario.test_fraction == 0.3
    data, s = make({"preset": "feddrm/dir0.3"}, dataset={**MNIST_LIKE, "channels": 3})
    combos = {(op.gamma, op.hue, op.saturation) for v in s.stages[0] for op in v.transform}
    assert combos == {(g, h, k) for g in (0.6, 1.4) for h in (-0.1, 0.1) for k in (0.5, 1.5)}


def test_feddrm_shards_are_label_homogeneous():
    data, s = make({"preset": "feddrm/shards5"}, dataset={**MNIST_LIKE, "channels": 3})
    assert all(len(np.unique(data.y[np.concatenate([v.train, v.test])])) <= 5 for v in s.stages[0])


@pytest.mark.parametrize("dataset, shards", [({**MNIST_LIKE, "channels": 3}, 5), (CIFAR100_LIKE, 25)])
def test_feddrm_spc_takes_004s_shard_count_for_the_class_count(dataset, shards):
    spec = run_spec({"preset": "feddrm/spc"}, dataset=dataset)
    assert spec.scenario.partition.kwargs["shards_per_client"] == shards and spec.scenario.num_clients == 8


def test_every_preset_is_listed_with_a_docstring():
    assert len([p for p in PRESETS if p.startswith("feroma/")]) == 12
    assert {"conditional/E1", "feddrm/dir0.3", "made/writers_noise", "feroma/label_skew/medium"} <= set(PRESETS)
    assert all(fn.__doc__ for fn in PRESETS.values())


@pytest.mark.parametrize(
    "section,dataset,words",
    [
        ({"preset": "feroma/label_skew/low"}, {"name": "synthetic"}, "image dataset"),
        ({"preset": "conditional/E4b"}, MNIST_LIKE, "cifar10"),
        ({"preset": "conditional/E4a"}, MNIST_LIKE, "domain"),
        ({"preset": "made/writers_noise"}, MNIST_LIKE, "writer"),
        ({"preset": "feroma/label_skew/lowest"}, MNIST_LIKE, "feroma/label_skew/low"),
        ({"preset": "conditional/E1", "sparsity": "dense"}, MNIST_LIKE, "rich"),
    ],
)
def test_a_preset_refuses_what_it_does_not_fit(section, dataset, words):
    with pytest.raises((ConfigError, UnknownNameError)) as err:
        run_spec(section, dataset=dataset)
    assert words in str(err.value)


def test_made_writers_noise_gives_disjoint_writer_groups_and_growing_noise(tmp_path):
    from tests.data.test_femnist import write_leaf

    writers = {f"f{w:04d}": [w % 10] * 6 + [(w + 1) % 10] * 4 for w in range(12)}
    write_leaf(tmp_path / "femnist", {"train/part_0.json": writers, "test/part_0.json": {"f0000": [0, 1]}})
    dataset = {"name": "femnist", "digits_only": True, "data_root": str(tmp_path)}
    data, s = make({"preset": "made/writers_noise", "num_clients": 4}, dataset=dataset)
    owners = [set(data.meta["writer"].to_numpy()[np.concatenate([v.train, v.test])]) for v in s.stages[0]]
    assert all(len(o) == 3 for o in owners) and len(set().union(*owners)) == 12  # 003: writers / clients each
    sigmas = [v.transform[0].sigma for v in s.stages[0]]
    assert sigmas == pytest.approx([0.125, 0.25, 0.375, 0.5])  # 003 Sec. III-A: sigma * i / N, sigma = 0.5


def test_bad_shift_parameters_are_refused_at_load():
    with pytest.raises(ConfigError) as err:
        run_spec({"partition": "iid", "num_clients": 8, "shifts": [{"name": "photometric", "hue": [0.7]}]})
    assert err.value.field == "scenario.shifts[0].hue"

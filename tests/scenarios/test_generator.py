"""The generator: determinism, validity of indices and label maps, drift stages, local test splits, and the
checks at task load naming the path the task wrote."""

import numpy as np
import pytest

from fedbench.core.errors import ConfigError
from fedbench.core.runspec import Component, ScenarioSpec
from fedbench.data import DatasetFacts
from fedbench.scenarios import check_scenario
from tests.scenarios.helpers import CIFAR100_LIKE, MNIST_LIKE, make, run_spec, seen_labels

DRIFTING = {"preset": "feroma/conditional_label_skew/medium", "drift_every": 2}


def fingerprint(scenario):
    out = []
    for stage in scenario.stages:
        for v in stage:
            lm = None if v.label_map is None else v.label_map.tolist()
            out.append((v.train.tolist(), v.test.tolist(), v.distribution_id, repr(v.transform), lm))
    for t in scenario.test_clients:
        out.append((t.view.test.tolist(), t.labelled.tolist(), t.origin, t.view.distribution_id))
    return out


@pytest.mark.parametrize(
    "section",
    [
        DRIFTING,
        {"preset": "feroma/label_skew/high", "drift_every": 1},
        {"preset": "feroma/feature_skew/medium", "drift_every": 2, "test_clients": {"unseen_rate": 0.5}},
        {"partition": "dirichlet", "alpha": 0.3, "num_clients": 8, "shifts": ["photometric"]},
    ],
)
def test_same_seed_same_scenario_and_other_seed_differs(section):
    _, a = make(section, rounds=6, seed=3, fresh=True)
    _, b = make(section, rounds=6, seed=3, fresh=True)
    _, c = make(section, rounds=6, seed=4, fresh=True)
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint(c)


@pytest.mark.parametrize(
    "section",
    [
        DRIFTING,
        {"preset": "feroma/label_skew/medium", "drift_every": 1},
        {"preset": "conditional/E1", "clusters": 5},
        {"partition": "shards", "shards_per_client": 5, "num_clients": 8},
        {"partition": "quantity", "alpha": 0.5, "num_clients": 7},
    ],
)
def test_indices_are_in_range_and_no_training_sample_is_held_twice_in_a_stage(section):
    data, scenario = make(section, rounds=4)
    for stage in scenario.stages:
        train = np.concatenate([v.train for v in stage])
        assert train.min() >= 0 and train.max() < len(data)
        distinct = np.concatenate([np.unique(v.train) for v in stage])
        assert len(np.unique(distinct)) == len(distinct)  # no sample held by two clients
        assert scenario.duplicated or len(distinct) == len(train)  # nor twice by one, unless resampled
        for v in stage:
            assert not np.intersect1d(v.train, v.test).size
            assert len(v.train) > 0


def test_label_skew_stages_grow_with_drift_frequency_from_a_fixed_share_as_002s_generator():
    """002 I.2 / FEROMA's ANDA: a client's share (N / clients) is scaled by max(1, stages x clients / 30) and each
    stage keeps its classes' samples: 20 clients over 20 rounds hold about 2x / 4x the samples at drift every 2 / 1
    as at drift every 4, from the same distinct samples (no stage takes samples outside the client's share)."""

    def sizes(drift_every: int):
        data, scenario = make({"preset": "feroma/label_skew/medium", "drift_every": drift_every}, rounds=20)
        return data, scenario, np.mean([len(v.train) + len(v.test) for stage in scenario.stages for v in stage])

    (data, every4, n4), (_, _, n2), (_, every1, n1) = sizes(4), sizes(2), sizes(1)
    assert n2 / n4 == pytest.approx(2, rel=0.1) and n1 / n4 == pytest.approx(4, rel=0.1)
    assert every1.duplicated and every4.duplicated
    share = int((data.meta["split"] == "train").sum()) // every1.num_clients + 1
    for scenario in (every4, every1):
        for c in range(scenario.num_clients):
            held = np.unique(np.concatenate([np.union1d(stage[c].train, stage[c].test) for stage in scenario.stages]))
            assert len(held) <= share  # every stage filters the client's one share, no fresh chunk


def test_duplication_is_declared_and_bounded_by_the_copies():
    data, scenario = make({"preset": "feroma/feature_skew/low", "num_clients": 100, "drift_every": 4}, rounds=4)
    assert scenario.duplicated and scenario.num_clients == 100
    train = np.concatenate([v.train for v in scenario.stages[0]])
    assert np.bincount(train).max() <= 3  # 002 I.3: the pool duplicated twice for 100 clients
    assert min(len(v.train) for v in scenario.stages[0]) > 0


def test_label_maps_of_permutations_are_bijections_that_move_only_the_pool():
    data, scenario = make(DRIFTING, rounds=4)
    moved = set()
    for stage in scenario.stages:
        for v in stage:
            assert sorted(v.label_map.tolist()) == list(range(10))
            moved |= set(np.flatnonzero(v.label_map != np.arange(10)).tolist())
    assert 2 <= len(moved) <= 4  # medium: a pool of 4 swapped classes (002 Table 12)


def test_drift_changes_distributions_every_k_rounds_and_records_ground_truth():
    _, scenario = make({"preset": "feroma/label_skew/high", "drift_every": 4}, rounds=20)
    assert len(scenario.stages) == 5  # 002 I.2: every 4 rounds in 20 rounds
    assert scenario.round_stage[:9] == (0, 0, 0, 0, 1, 1, 1, 1, 2)
    ids = scenario.distribution_ids(20)
    assert ids.shape == (20, 20)
    assert (ids[0] == ids[3]).all() and not (ids[3] == ids[4]).all()
    # a client's data is a fresh chunk in each stage
    assert not np.array_equal(scenario.view(1, 0).train, scenario.view(5, 0).train)


def test_static_data_with_drifting_shift_keeps_samples_and_redraws_transforms():
    _, scenario = make(
        {"partition": "iid", "num_clients": 10, "shifts": [{"name": "feature_bank", "rotations": 4}], "drift_every": 1},
        rounds=4,
    )
    assert all(np.array_equal(scenario.view(1, c).train, scenario.view(4, c).train) for c in range(10))
    transforms = {repr(scenario.view(r, c).transform) for r in range(1, 5) for c in range(10)}
    assert len(transforms) > 1


def test_colour_scenarios_turn_grayscale_into_rgb_for_every_client():
    _, gray = make({"preset": "feroma/feature_skew/low"})
    _, colour = make({"preset": "feroma/feature_skew/high"})
    assert gray.input_shape == (1, 28, 28) and colour.input_shape == (3, 28, 28)


def test_official_local_test_follows_the_clients_class_mix_and_is_disjoint():
    data, scenario = make({"preset": "conditional/E1", "clusters": 2})
    test_rows = np.flatnonzero(data.meta["split"].to_numpy() == "test")
    tests = np.concatenate([v.test for v in scenario.stages[0]])
    assert np.isin(tests, test_rows).all() and len(np.unique(tests)) == len(tests)
    for v in scenario.stages[0]:
        assert set(np.unique(data.y[v.test])) <= set(np.unique(data.y[v.train]))


def test_label_maps_reach_the_labels_clients_see():
    data, scenario = make({"preset": "conditional/E3a"})
    parity, half = scenario.stages[0][0], scenario.stages[0][-1]
    assert set(seen_labels(data, parity)) == {0, 1} and set(seen_labels(data, half)) == {0, 1}
    assert np.array_equal(seen_labels(data, parity), data.y[parity.train] % 2)
    assert np.array_equal(seen_labels(data, half), (data.y[half.train] >= 5).astype(int))


def test_loader_options_are_part_of_the_scenario_key():
    """Regression: digits with test_fraction 0.2 and 0.5 once shared one cached scenario (its key held only the
    dataset's name and length), so the 0.5 run's clients trained on rows of its official test split."""
    from fedbench.data import load_dataset
    from fedbench.scenarios import build_scenario
    from fedbench.scenarios.generator import scenario_key
    from tests.conftest import tiny_spec

    spec = tiny_spec().scenario
    for fraction in (0.2, 0.5):
        data = load_dataset("digits", test_fraction=fraction)
        scenario = build_scenario(data, spec, seed=0)
        train_rows = np.flatnonzero(data.meta["split"].to_numpy() == "train")
        for view in scenario.stages[0]:
            assert np.isin(view.train, train_rows).all() and np.isin(view.test, train_rows).all(), fraction
    keys = {scenario_key(load_dataset("digits", test_fraction=f), spec, 0, 1) for f in (0.2, 0.5)}
    assert len(keys) == 2


def test_same_name_and_length_but_other_labels_get_another_scenario():
    import dataclasses

    from fedbench.data import load_dataset
    from fedbench.scenarios.generator import scenario_key
    from tests.conftest import tiny_spec

    data = load_dataset("digits")
    relabelled = dataclasses.replace(data, y=(data.y + 1) % 10)
    spec = tiny_spec().scenario
    assert scenario_key(data, spec, 0, 1) != scenario_key(relabelled, spec, 0, 1)


def test_the_scenario_cache_is_bounded_and_keeps_the_most_recent():
    from fedbench.data import load_dataset
    from fedbench.scenarios import build_scenario, generator
    from tests.conftest import tiny_spec

    data = load_dataset("digits")
    spec = tiny_spec().scenario
    first = build_scenario(data, spec, seed=100)
    for seed in range(101, 101 + generator.CACHE_SIZE * 2):
        build_scenario(data, spec, seed=seed)
        assert build_scenario(data, spec, seed=100) is first or seed > 100 + generator.CACHE_SIZE
        assert len(generator._CACHE) <= generator.CACHE_SIZE
    assert build_scenario(data, spec, seed=100) is first  # used each time, so never the least recent


# ------------------------------------------------------------------------------------------ checks at task load


def load_error(scenario: dict, dataset=MNIST_LIKE) -> ConfigError:
    with pytest.raises(ConfigError) as err:
        run_spec(scenario, dataset)
    return err.value


def test_a_bad_value_of_the_second_shift_is_named_where_the_task_wrote_it():
    error = load_error({"partition": "iid", "shifts": ["rotation", {"name": "noise", "sigma": -0.5}]})
    assert error.field == "scenario.shifts[1].sigma" and error.value == -0.5


@pytest.mark.parametrize(
    "shift, field",
    [
        ({"name": "noise", "sigma": float("nan")}, "scenario.shifts[0].sigma"),
        ({"name": "photometric", "gamma": [0.6, float("inf")]}, "scenario.shifts[0].gamma"),
    ],
)
def test_an_op_the_worker_could_not_apply_is_refused_at_load_naming_the_shift_field(shift, field):
    # These values passed the shift's own checks and failed only on the worker, in the middle of a run.
    error = load_error({"partition": "iid", "num_clients": 8, "shifts": [shift]})
    assert error.field.startswith(field) and "finite" in error.allowed


def test_unseen_quarter_turns_on_non_square_images_are_refused_before_any_data_is_read():
    # Two rotations (0, 180) fit 28x32 images, but unseen test clients get the half-steps 90 and 270.
    spec = ScenarioSpec(shifts=(Component("feature_bank", (("rotations", 2),)),))
    with pytest.raises(ConfigError) as err:
        check_scenario(spec, DatasetFacts(num_classes=10, channels=1, image_size=(28, 32)))
    assert err.value.field == "scenario.shifts[0].rotations" and "square" in err.value.allowed


def test_a_bad_partition_value_is_named_in_the_scenario_section_where_the_task_wrote_it():
    error = load_error({"partition": "dirichlet", "alpha": -1.0})
    assert error.field == "scenario.alpha" and error.value == -1.0


def test_a_shift_error_under_a_preset_names_the_preset():
    error = load_error(
        {"preset": "feddrm/dir0.3", "shifts": [{"name": "photometric", "hue": [0.7]}]}, dataset=CIFAR100_LIKE
    )
    assert error.field == "scenario.shifts[0].hue" and "feddrm/dir0.3" in error.allowed

"""Test-time clients: FEROMA's default, own / next distributions, unseen rates, labelled few-shot samples."""

import numpy as np
import pytest

from fedbench.core.errors import ConfigError
from tests.scenarios.helpers import make, run_spec


def test_feroma_default_draws_from_all_clients_last_distributions():
    data, s = make({"preset": "feroma/label_skew/medium", "drift_every": 2}, rounds=6)
    last = {v.distribution_id for v in s.stages[-1]}
    assert len(s.test_clients) == 20
    assert {t.view.distribution_id for t in s.test_clients} <= last
    assert any(t.origin != i for i, t in enumerate(s.test_clients))  # possibly another client's distribution
    test_rows = np.flatnonzero(data.meta["split"].to_numpy() == "test")
    for t in s.test_clients:
        assert t.seen and len(t.view.train) == 0 and np.isin(t.view.test, test_rows).all()
        origin = s.stages[-1][t.origin]
        assert set(np.unique(data.y[t.view.test])) <= set(np.unique(data.y[origin.train]))


def test_concept_shift_tests_each_client_on_its_own_last_labelling():
    _, s = make({"preset": "feroma/conditional_label_skew/low", "drift_every": 2}, rounds=6)
    for i, t in enumerate(s.test_clients):
        assert t.origin == i and np.array_equal(t.view.label_map, s.stages[-1][i].label_map)


def test_labelled_few_shot_samples_per_class():
    data, s = make({"preset": "feroma/conditional_label_skew/low", "test_clients": {"labelled_per_class": 20}})
    for t in s.test_clients:
        counts = np.bincount(data.y[t.labelled], minlength=10)
        assert counts.max() <= 20 and np.isin(t.labelled, t.view.test).all()
        present = np.bincount(data.y[t.view.test], minlength=10)
        assert np.array_equal(counts, np.minimum(present, 20))


@pytest.mark.parametrize("rate,expected", [(0.0, 0), (0.4, 8), (1.0, 20)])
def test_unseen_rate_gives_that_share_of_never_trained_distributions(rate, expected):
    _, s = make(
        {"preset": "feroma/label_skew/medium", "drift_every": 4, "test_clients": {"unseen_rate": rate}}, rounds=8
    )
    trained = {v.distribution_id for stage in s.stages for v in stage}
    unseen = [t for t in s.test_clients if t.origin == -1]
    assert len(unseen) == expected
    assert all(not t.seen and t.view.distribution_id not in trained for t in unseen)


def test_next_mode_takes_each_clients_next_drifted_distribution():
    _, s = make({"preset": "feroma/feature_skew/high", "drift_every": 2, "test_clients": {"mode": "next"}}, rounds=4)
    assert [t.origin for t in s.test_clients] == list(range(20))
    last = [v.distribution_id for v in s.stages[-1]]
    assert [t.view.distribution_id for t in s.test_clients] != last  # 12 patterns: some clients drift


def test_no_test_clients_and_unseen_without_a_bank_is_refused():
    _, s = make({"partition": "iid", "test_clients": {"mode": "none"}})
    assert s.test_clients == ()
    with pytest.raises(ConfigError) as err:
        run_spec({"partition": "iid", "test_clients": {"unseen_rate": 0.5}})  # refused when the task is loaded
    assert "unseen_rate" in str(err.value)

"""A mean's interval, Holm's correction and the seeds a difference needs, against published values and
cases whose answer is known by construction."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from fedbench.tracking.intervals import BOOTSTRAP_FROM, holm, mean_interval, seeds_needed


@pytest.mark.parametrize("effect,published", [(0.2, 394), (0.5, 64), (0.8, 26), (1.0, 17)])
def test_seeds_needed_equal_the_published_sample_sizes_of_the_two_sample_t_test(effect, published):
    """Cohen's (1988) small, medium and large effects at alpha 0.05 two-sided and 80% power: n per group as G*Power
    computes it exactly (Faul et al. 2007): 394, 64, 26 and 17 for d = 1."""
    assert seeds_needed(effect, 1.0) == published
    assert seeds_needed(effect * 0.03, 0.03) == published  # only the ratio of difference to spread matters
    assert seeds_needed(-effect, 1.0) == published


def test_seeds_needed_at_the_edges():
    assert seeds_needed(0.0, 0.1) is None  # no difference: no number of seeds finds it
    assert seeds_needed(0.05, 0.0) == 2  # no spread: two seeds each tell any difference apart
    assert seeds_needed(1e-4, 1.0, most=1000) is None
    assert seeds_needed(0.5, 1.0, alpha=0.05 / 6) > seeds_needed(0.5, 1.0)  # Holm's first threshold asks more
    with pytest.raises(ValueError, match="spread"):
        seeds_needed(0.1, float("nan"))


def test_a_t_interval_below_ten_seeds_equals_students():
    values = [0.90, 0.91, 0.92]
    interval = mean_interval(values)
    half = stats.t.ppf(0.975, 2) * np.std(values, ddof=1) / np.sqrt(3)
    assert interval.kind == "t"
    assert interval.low == pytest.approx(0.91 - half) and interval.high == pytest.approx(0.91 + half)
    assert mean_interval([0.7]).kind == "none" and np.isnan(mean_interval([0.7]).low)
    assert mean_interval([0.5, 0.5, 0.5]) == mean_interval([0.5, 0.5, 0.5]).__class__(0.5, 0.5, "t")


def test_from_ten_seeds_the_interval_is_a_reproducible_bootstrap_close_to_t_on_normal_data():
    values = list(np.random.default_rng(3).normal(0.8, 0.05, size=BOOTSTRAP_FROM + 20))
    interval = mean_interval(values)
    assert interval.kind == "bootstrap BCa"
    assert mean_interval(values) == interval  # a fixed random state: the same runs give the same table
    t_low, t_high = stats.t.interval(0.95, len(values) - 1, loc=np.mean(values), scale=stats.sem(values))
    assert interval.low < np.mean(values) < interval.high
    assert (interval.high - interval.low) == pytest.approx(t_high - t_low, rel=0.2)


def test_at_three_seeds_the_t_interval_covers_95_percent_where_a_percentile_bootstrap_would_not():
    """Why three seeds get a t interval: over 2,000 draws of 3 normal values, the t interval holds the true mean
    about 95% of the time; a percentile bootstrap of the same values about 75%."""
    rng = np.random.default_rng(0)
    draws = rng.normal(0.0, 1.0, size=(2000, 3))
    covered_t = np.mean([mean_interval(list(d)).low <= 0 <= mean_interval(list(d)).high for d in draws[:500]])
    boot = stats.bootstrap((draws,), np.mean, axis=-1, method="percentile", n_resamples=999, rng=rng)
    low, high = boot.confidence_interval
    covered_boot = np.mean((low <= 0) & (0 <= high))
    assert 0.92 <= covered_t <= 0.98
    assert covered_boot < 0.85


def test_holm_adjusts_in_steps_and_keeps_the_given_order():
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> kept non-decreasing: 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5]) == [0.5] and holm([]) == []
    assert holm([0.9, 0.8]) == [1.0, 1.0]  # capped at 1


def test_holm_rejects_exactly_what_the_step_down_procedure_rejects():
    """Holm (1979): order the p-values; reject H(1..i) while p(j) <= alpha / (m - j + 1) for every j <= i."""
    rng = np.random.default_rng(1)
    for m, _ in itertools.product((2, 5, 12), range(50)):
        p = list(rng.uniform(0, 0.06, size=m))
        order = np.argsort(p)
        rejected = set()
        for position, index in enumerate(order):
            if p[index] > 0.05 / (m - position):
                break
            rejected.add(int(index))
        assert {i for i, q in enumerate(holm(p)) if q <= 0.05} == rejected


def test_an_accuracys_interval_stops_at_one_and_a_losss_does_not():
    from fedbench.tracking.intervals import natural_bounds

    accuracies = [0.999, 0.97, 0.995]  # t at 3 seeds reaches past 1
    assert mean_interval(accuracies).high > 1.0
    cut = mean_interval(accuracies, bounds=natural_bounds("final.acc_test_time"))
    assert cut.high == 1.0 and cut.low == mean_interval(accuracies).low
    assert natural_bounds("final.unrecovered_share") == (0.0, 1.0)
    assert natural_bounds("final.recovery_rounds") == natural_bounds("loss_local_weighted") == (-math.inf, math.inf)

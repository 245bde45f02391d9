"""Bootstrap intervals over subjects and rank stability."""

from __future__ import annotations

import math

import numpy as np
import pytest

from szbench_scoring import aggregate, score_events
from szbench_scoring.stats import (
    align_subjects,
    bootstrap_ci,
    bootstrap_metrics,
    bootstrap_ranks,
    paired_permutation_test,
    per_subject_ranks,
    smallest_p_value,
    subject_values,
)


def test_ci_is_seeded_and_contains_the_estimate():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, 40)
    a = bootstrap_ci(x, seed=5)
    assert a == bootstrap_ci(x, seed=5)
    assert a != bootstrap_ci(x, seed=6)
    assert a.low < a.estimate < a.high
    assert a.estimate == pytest.approx(x.mean())
    # The interval of a mean shrinks like 1/sqrt(n): four times the subjects, half the width.
    wide = bootstrap_ci(x[:10], seed=1, n_resamples=4000)
    narrow = bootstrap_ci(np.tile(x[:10], 4), seed=1, n_resamples=4000)
    ratio = (wide.high - wide.low) / (narrow.high - narrow.low)
    assert 1.6 < ratio < 2.5


def test_ci_coverage_of_a_known_mean():
    # For a normal sample the 95% percentile interval covers the true mean most of the time.
    rng = np.random.default_rng(1)
    covered = 0
    for i in range(100):
        x = rng.normal(0.3, 0.1, 30)
        ci = bootstrap_ci(x, seed=i, n_resamples=500)
        covered += ci.low <= 0.3 <= ci.high
    assert covered >= 85


def test_ci_nan_subjects_are_skipped_like_the_nanmean():
    ci = bootstrap_ci([0.5, float("nan"), 0.5], seed=0)
    assert (ci.estimate, ci.low, ci.high) == (0.5, 0.5, 0.5)
    none = bootstrap_ci([float("nan")] * 3)
    assert math.isnan(none.estimate)
    assert math.isnan(none.low)
    empty = bootstrap_ci([])
    assert empty.n_subjects == 0


def test_bootstrap_metrics_from_a_report():
    scores = {
        ("sub-01", "a"): score_events([(100, 200)], [(150, 160), (900, 910)], 3600),
        ("sub-02", "a"): score_events([(100, 200), (1000, 1100)], [(150, 160)], 3600),
        ("sub-03", "a"): score_events([(100, 200)], [], 3600),
    }
    rep = aggregate(scores)
    cis = bootstrap_metrics(rep.subjects, seed=2)
    assert set(cis) == {"f1", "sensitivity", "precision", "fp_rate"}
    assert cis["sensitivity"].estimate == pytest.approx(rep.event_mean.sensitivity)
    assert cis["fp_rate"].estimate == pytest.approx(rep.event_mean.fp_rate)
    for ci in cis.values():
        assert ci.low <= ci.estimate <= ci.high
    np.testing.assert_array_equal(subject_values(rep.subjects, "sensitivity"), [1.0, 0.5, 0.0])
    with pytest.raises(ValueError, match="same order"):
        bootstrap_metrics({"f1": [1, 2], "sensitivity": [1]}, metrics=["f1", "sensitivity"])


def test_rank_stability_separates_clear_and_close_algorithms():
    rng = np.random.default_rng(3)
    strong = rng.uniform(0.6, 0.9, 50)
    close_a = rng.uniform(0.2, 0.5, 50)
    close_b = close_a + rng.normal(0, 0.05, 50)
    values = np.vstack([close_a, strong, close_b])
    stab = bootstrap_ranks(values, seed=0, n_resamples=1000)
    assert stab[1].best_share == 1.0
    assert stab[1].histogram == (1000, 0, 0)
    # The two close ones swap places: each is 2nd in a sizeable share of resamples.
    for s in (stab[0], stab[2]):
        assert s.histogram[0] == 0
        assert 100 < s.histogram[1] < 900
        assert (s.low, s.high) == (2.0, 3.0)
    assert sum(stab[0].histogram) == 1000


def test_rank_ties_broken_by_sensitivity():
    f1 = [[0.5, 0.5], [0.5, 0.5]]
    sens = [[0.4, 0.4], [0.6, 0.6]]
    first, second = bootstrap_ranks(f1, sens, n_resamples=50)
    assert second.best_share == 1.0
    assert first.histogram == (0, 50)
    tied = bootstrap_ranks(f1, n_resamples=10)
    assert tied[0].best_share == tied[1].best_share == 1.0


def test_per_subject_ranks_and_alignment():
    names, m = align_subjects(
        [
            {"sub-01": 0.9, "sub-02": 0.1, "sub-03": None, "sub-04": 0.8},
            {"sub-01": 0.5, "sub-02": 0.5, "sub-04": 0.9},
        ]
    )
    assert names == ["sub-01", "sub-02", "sub-03", "sub-04"]
    a, b = per_subject_ranks(m)
    # sub-03 is NaN for both: skipped.
    assert a.histogram == (1, 2)
    assert b.histogram == (2, 1)
    assert a.best_share == pytest.approx(1 / 3)


def test_validation():
    with pytest.raises(ValueError, match="confidence_level"):
        bootstrap_ci([1.0], confidence_level=1.5)
    with pytest.raises(ValueError, match="n_resamples"):
        bootstrap_ci([1.0], n_resamples=0)
    with pytest.raises(ValueError, match="tiebreak"):
        bootstrap_ranks([[1.0, 2.0]], [[1.0]])


@pytest.mark.parametrize("n", [1, 2, 4, 7, 10])
def test_the_smallest_p_value_is_reached_and_never_beaten(n: int) -> None:
    """All differences of one sign reach 2/2**n; random differences never go below it."""
    floor = smallest_p_value(n)
    assert floor == 2 / 2**n
    same_sign = np.linspace(0.1, 0.5, n)
    assert paired_permutation_test(same_sign, np.zeros(n))[0] == pytest.approx(floor)
    rng = np.random.default_rng(n)
    for _ in range(20):
        p, exact = paired_permutation_test(rng.normal(size=n), rng.normal(size=n))
        assert exact
        assert p >= floor - 1e-12


def test_the_smallest_p_value_with_random_flips() -> None:
    n = 20
    floor = smallest_p_value(n, 999)
    assert floor == pytest.approx(1 / 1000)
    p, exact = paired_permutation_test(np.full(n, 0.5), np.zeros(n), n_resamples=999)
    assert not exact
    assert p >= floor
    assert np.isnan(smallest_p_value(0))
    with pytest.raises(ValueError, match="n_subjects must be >= 0"):
        smallest_p_value(-1)

"""The paired comparison of two algorithms over subjects: permutation test and bootstrap."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from szbench_scoring.stats import (
    EXACT_MAX_SUBJECTS,
    paired_comparison,
    paired_permutation_test,
)

values = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)


@st.composite
def pairs(draw: st.DrawFn, max_size: int = 10) -> tuple[list[float], list[float]]:
    n = draw(st.integers(1, max_size))
    a = draw(st.lists(values, min_size=n, max_size=n))
    b = draw(st.lists(values, min_size=n, max_size=n))
    return a, b


def brute_force_p(a: list[float], b: list[float]) -> float:
    d = [x - y for x, y in zip(a, b, strict=True)]
    observed = abs(sum(d) / len(d))
    hits = total = 0
    for signs in itertools.product((1, -1), repeat=len(d)):
        total += 1
        hits += abs(sum(s * x for s, x in zip(signs, d, strict=True)) / len(d)) >= observed - 1e-12
    return hits / total


@settings(max_examples=60, deadline=None)
@given(pairs(max_size=8))
def test_exact_p_value_is_the_share_of_sign_flips_as_extreme(ab: tuple[list, list]) -> None:
    a, b = ab
    p, exact = paired_permutation_test(a, b)
    assert exact
    assert p == pytest.approx(brute_force_p(a, b))


@settings(max_examples=60, deadline=None)
@given(pairs(max_size=12))
def test_properties_of_the_comparison(ab: tuple[list, list]) -> None:
    a, b = ab
    c = paired_comparison(a, b, n_resamples=200, seed=3)
    swapped = paired_comparison(b, a, n_resamples=200, seed=3)
    # A p-value is a probability and never 0 (the observed flip counts itself).
    assert 0 < c.p_value <= 1
    # Which algorithm is called A changes the sign of the difference, not the evidence.
    assert swapped.p_value == pytest.approx(c.p_value)
    assert swapped.mean_difference == pytest.approx(-c.mean_difference)
    assert c.low - 1e-12 <= c.mean_difference <= c.high + 1e-12
    assert c.mean_difference == pytest.approx(np.mean(np.subtract(a, b)))
    # A shift shared by both algorithms (an easier subject for everyone) changes nothing.
    shifted = paired_comparison(np.add(a, 0.25), np.add(b, 0.25), n_resamples=200, seed=3)
    assert shifted.p_value == pytest.approx(c.p_value)
    assert shifted.mean_difference == pytest.approx(c.mean_difference)


@settings(max_examples=30, deadline=None)
@given(pairs(max_size=10))
def test_an_algorithm_against_itself_shows_no_difference(ab: tuple[list, list]) -> None:
    a, _ = ab
    c = paired_comparison(a, a, n_resamples=100)
    assert c.p_value == 1.0
    assert c.mean_difference == 0.0
    assert c.low == 0.0
    assert c.high == 0.0


def test_incomplete_pairs_are_left_out() -> None:
    nan = math.nan
    c = paired_comparison([0.9, nan, 0.8, 0.7], [0.1, 0.5, nan, 0.2])
    assert c.n_subjects == 2
    assert c.mean_difference == pytest.approx(((0.9 - 0.1) + (0.7 - 0.2)) / 2)
    empty = paired_comparison([nan, 0.4], [0.3, nan])
    assert empty.n_subjects == 0
    assert math.isnan(empty.mean_difference)
    assert math.isnan(empty.p_value)


def test_mismatched_lengths_name_the_sizes() -> None:
    with pytest.raises(ValueError, match="got 3 and 2 values"):
        paired_comparison([0.1, 0.2, 0.3], [0.1, 0.2])


def test_a_clear_difference_over_many_subjects_is_significant_and_seeded() -> None:
    rng = np.random.default_rng(0)
    b = rng.uniform(0, 0.6, 40)
    a = b + 0.2 + rng.normal(0, 0.05, 40)
    c = paired_comparison(a, b, seed=1)
    assert not c.exact
    assert c.p_value < 0.001
    assert 0.15 < c.low < c.mean_difference < c.high < 0.25
    assert c == paired_comparison(a, b, seed=1)
    # No difference but noise: the p-value is far from significance.
    noise = paired_comparison(b + rng.normal(0, 0.05, 40), b, seed=1)
    assert noise.p_value > 0.05


def test_random_flips_agree_with_scipy_past_the_exact_size() -> None:
    stats = pytest.importorskip("scipy.stats")  # the worker extra has scipy; the web part not
    rng = np.random.default_rng(4)
    n = EXACT_MAX_SUBJECTS + 2
    b = rng.uniform(0, 1, n)
    a = b + rng.normal(0.08, 0.2, n)
    ours, exact = paired_permutation_test(a, b, n_resamples=40000, seed=2)
    theirs = stats.permutation_test(
        (a, b),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        permutation_type="samples",
        n_resamples=2**n,  # scipy enumerates every flip
        alternative="two-sided",
    ).pvalue
    assert not exact
    assert ours == pytest.approx(theirs, abs=0.01)

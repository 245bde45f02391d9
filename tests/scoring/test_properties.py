"""Property tests (hypothesis) over the whole SzCORE metric family."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from szbench_scoring import (
    Annotations,
    Counts,
    Metrics,
    RecordingResult,
    aggregate,
    format_annotations,
    parse_annotations,
    score_events,
    score_many,
    score_recording,
)
from tests.scoring.reference import rows_to_e2b, score_reference

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])

durations = st.one_of(
    st.integers(60, 2400).map(float),
    st.floats(60, 2400, allow_nan=False).map(lambda x: round(x, 2)),
)


@st.composite
def recording(draw, max_events: int = 8):
    dur = draw(durations)
    time = st.one_of(
        st.integers(0, int(dur)).map(float),
        st.floats(0, dur, allow_nan=False).map(lambda x: round(x, 2)),
    )
    length = st.one_of(
        st.sampled_from([0.0, 0.5, 1.0, 29.0, 30.0, 60.0, 89.0, 90.0, 91.0, 300.0, 301.0, 601.0]),
        st.floats(0, 700, allow_nan=False).map(lambda x: round(x, 1)),
    )

    def events():
        return st.lists(st.tuples(time, length), max_size=max_events).map(
            lambda xs: [(a, a + b) for a, b in xs]
        )

    return dur, draw(events()), draw(events())


def mask(events, dur):
    m = np.zeros(int(dur), dtype=bool)
    for a, b in events:
        m[int(a) : int(b)] = True
    return m


def in_unit(x: float) -> bool:
    return math.isnan(x) or 0.0 <= x <= 1.0


@SETTINGS
@given(recording())
def test_counts_are_consistent_and_metrics_bounded(rec):
    dur, ref, hyp = rec
    s = score_events(ref, hyp, dur)
    for c in (s.event, s.sample):
        assert 0 <= c.tp <= c.ref_true
        assert c.fp >= 0
        assert c.fn == c.ref_true - c.tp
        m = c.metrics
        assert in_unit(m.sensitivity)
        assert in_unit(m.precision)
        assert in_unit(m.f1)
        assert m.fp_rate >= 0
        assert math.isnan(m.f1) == (c.ref_true + c.fp == 0)
        if c.tp > 0:
            p, r = m.precision, m.sensitivity
            assert math.isclose(m.f1, 2 * p * r / (p + r), rel_tol=1e-12)
    assert s.sample.num_samples == int(dur)
    assert s.event.num_samples == 10 * int(dur)


@SETTINGS
@given(recording())
def test_sample_counts_equal_brute_force_masks(rec):
    dur, ref, hyp = rec
    r, h = mask(ref, dur), mask(hyp, dur)
    s = score_events(ref, hyp, dur).sample
    assert (s.tp, s.fp, s.ref_true) == (int((r & h).sum()), int((~r & h).sum()), int(r.sum()))


@SETTINGS
@given(recording())
def test_perfect_and_empty_hypotheses(rec):
    dur, ref, _ = rec
    perfect = score_events(ref, ref, dur)
    assert perfect.event.tp == perfect.event.ref_true
    assert perfect.event.fp == 0
    assert perfect.sample.tp == perfect.sample.ref_true
    assert perfect.sample.fp == 0
    if perfect.event.ref_true:
        assert perfect.event.metrics.f1 == 1.0
    empty = score_events(ref, [], dur)
    assert (empty.event.tp, empty.event.fp, empty.sample.tp, empty.sample.fp) == (0, 0, 0, 0)
    assert empty.event.ref_true == perfect.event.ref_true


@SETTINGS
@given(recording(), st.randoms(use_true_random=False))
def test_order_and_redundant_events_do_not_matter(rec, rnd):
    dur, ref, hyp = rec
    base = score_events(ref, hyp, dur)
    shuffled = list(hyp)
    rnd.shuffle(shuffled)
    # Cut each event in two touching halves and repeat it: the same union.
    mids = [min((a + b) / 2, dur) for a, b in ref]
    cut = [p for (a, b), m in zip(ref, mids, strict=True) for p in ((a, m), (m, b), (a, b))]
    assert score_events(cut, shuffled, dur) == base


@SETTINGS
@given(recording(max_events=6), st.lists(st.tuples(st.floats(0, 1), st.floats(0, 200)), max_size=3))
def test_more_detections_never_lose_true_positives(rec, extra):
    dur, ref, hyp = rec
    more = hyp + [(f * dur, min(dur, f * dur + d)) for f, d in extra]
    a, b = score_events(ref, hyp, dur), score_events(ref, more, dur)
    assert b.event.tp >= a.event.tp
    assert b.sample.tp >= a.sample.tp
    assert b.sample.fp >= a.sample.fp


@settings(max_examples=150, deadline=None)
@given(recording())
def test_matches_timescoring(rec):
    """The reference on the very same parsed values (complements the differential test)."""
    dur, ref, hyp = rec

    def rows(events):
        out = [(a, b - a, "sz", dur) for a, b in events]
        return out or [(0.0, dur, "bckg", dur)]

    expected = score_reference(rows_to_e2b(rows(ref)), rows_to_e2b(rows(hyp)))
    ours = score_recording(
        Annotations.from_events([(a, a + (b - a)) for a, b in ref], dur),
        Annotations.from_events([(a, a + (b - a)) for a, b in hyp], dur),
    )
    assert (ours.sample.tp, ours.sample.fp, ours.sample.ref_true, ours.sample.num_samples) == (
        expected.sample
    )
    assert (ours.event.tp, ours.event.fp, ours.event.ref_true, ours.event.num_samples) == (
        expected.event
    )


@SETTINGS
@given(st.lists(recording(max_events=4), min_size=1, max_size=6))
def test_batch_scoring_equals_one_by_one(recs):
    pairs = [(Annotations.from_events(r, d), Annotations.from_events(h, d)) for d, r, h in recs]
    assert score_many(pairs) == [score_recording(a, b) for a, b in pairs]


@pytest.mark.slow
@SETTINGS
@given(recording())
def test_write_read_round_trip_scores_the_same(rec):
    dur, ref, hyp = rec
    a = Annotations.from_events(ref, dur)
    text = format_annotations(a.events, dur)
    b = parse_annotations(text)
    h = Annotations.from_events(hyp, dur)
    assert score_recording(a, h) == score_recording(b, h)


counts = st.builds(
    lambda tp, extra, fp, n: Counts(tp, fp, tp + extra, n, 10),
    st.integers(0, 20),
    st.integers(0, 20),
    st.integers(0, 50),
    st.integers(1, 10**7),
)


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 5), counts, counts), min_size=1, max_size=20))
def test_aggregation(rows):
    from szbench_scoring import RecordingScore

    results = [
        RecordingResult(
            f"sub-{s}", f"r{i}", RecordingScore(e, Counts(x.tp, x.fp, x.ref_true, x.num_samples, 1))
        )
        for i, (s, e, x) in enumerate(rows)
    ]
    rep = aggregate(results)
    rev = aggregate(list(reversed(results)))
    assert rep.to_szcore_json() == rev.to_szcore_json()
    total = sum((r.score.event for r in results), Counts.zero(10))
    assert rep.pooled.event == total
    assert rep.pooled_event == Metrics.from_counts(total)
    for name in ("sensitivity", "precision", "f1", "fp_rate"):
        values = [getattr(s.event, name) for s in rep.subjects]
        finite = [v for v in values if not math.isnan(v)]
        mean, std = getattr(rep.event_mean, name), getattr(rep.event_std, name)
        if finite:
            assert min(finite) - 1e-9 <= mean <= max(finite) + 1e-9
            assert std >= 0
        else:
            assert math.isnan(mean)

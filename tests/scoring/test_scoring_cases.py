"""Golden cases by hand for SzCORE event and sample scoring (defaults: 30 s / 60 s tolerance,
merge below 90 s, split above 300 s, 1 Hz masks, 10 Hz event grid)."""

from __future__ import annotations

import math

import pytest

from szbench_scoring import (
    AnnotationError,
    Annotations,
    Counts,
    ScoringParams,
    score_events,
    score_recording,
)

DUR = 3600.0


def ev(ref, hyp, dur=DUR, **kw):
    s = score_events(ref, hyp, dur, ScoringParams(**kw) if kw else None)
    return s.event.tp, s.event.fp, s.event.ref_true


def sample(ref, hyp, dur=DUR):
    s = score_events(ref, hyp, dur)
    return s.sample.tp, s.sample.fp, s.sample.ref_true


@pytest.mark.parametrize(
    ("hyp", "expected"),
    [
        ([(60, 70)], (0, 1, 1)),  # ends exactly 30 s before the seizure: outside the window
        ([(60, 71)], (1, 0, 1)),  # one second into the window
        ([(69.5, 70.5)], (0, 1, 1)),  # floors to [69, 70): ends at the window start
        ([(220, 230)], (0, 1, 1)),  # starts exactly 60 s after the end: outside
        ([(219, 230)], (1, 0, 1)),  # last second of the window
        ([(219.9, 230)], (1, 0, 1)),  # floors to 219
        ([(120, 130)], (1, 0, 1)),  # inside the seizure
    ],
)
def test_tolerance_edges(hyp, expected):
    assert ev([(100, 160)], hyp) == expected


def test_events_at_recording_start_and_end():
    assert ev([(0, 10)], [(0, 1)]) == (1, 0, 1)
    assert ev([(3590, 3600)], [(3599, 3600)]) == (1, 0, 1)
    # A detection running past the end is cut at the end of the mask.
    assert ev([(3590, 3600)], [(3599, 3700)]) == (1, 0, 1)
    assert sample([(3590, 3600)], [(3599, 3700)]) == (1, 0, 10)
    # The window after an event at the end is clipped to the recording.
    assert ev([(3500, 3590)], [(3599, 3600)]) == (1, 0, 1)


def test_merge_gap_is_strict_below_90_s():
    assert ev([(100, 110), (199, 210)], [])[2] == 1  # gap 89 s: merged
    assert ev([(100, 110), (200, 210)], [])[2] == 2  # gap 90 s: two events
    # Hypotheses merge the same way: two detections 89 s apart are one FP.
    assert ev([], [(100, 110), (199, 210)]) == (0, 1, 0)
    assert ev([], [(100, 110), (200, 210)]) == (0, 2, 0)


@pytest.mark.parametrize(("length", "pieces"), [(300, 1), (301, 2), (600, 2), (601, 3), (3600, 12)])
def test_split_long_events(length, pieces):
    assert ev([(0, length)], [])[2] == pieces


def test_whole_recording_event():
    s = score_events([(0, DUR)], [(0, DUR)], DUR)
    assert (s.event.tp, s.event.fp, s.event.ref_true) == (12, 0, 12)
    assert (s.sample.tp, s.sample.fp, s.sample.ref_true) == (3600, 0, 3600)


def test_short_detection_in_a_long_seizure_finds_only_its_piece():
    # 601 s seizure -> pieces [100,400) [400,700) [700,701); the detection is in the first.
    assert ev([(100, 701)], [(100, 101)]) == (1, 0, 3)


def test_zero_length_and_sub_second_events_floor_to_1_hz():
    assert ev([(100, 100)], []) == (0, 0, 0)
    assert sample([(100.2, 100.7)], []) == (0, 0, 0)  # [100, 100): empty
    assert sample([(100.7, 101.2)], []) == (0, 0, 1)  # [100, 101)
    assert ev([(100.7, 101.2)], [(100.1, 100.9)]) == (0, 0, 1)  # hyp floors to nothing


def test_detection_spanning_two_seizures():
    s = score_events([(100, 110), (500, 510)], [(90, 520)], DUR)
    assert (s.event.tp, s.event.fp, s.event.ref_true) == (2, 0, 2)
    assert (s.sample.tp, s.sample.fp, s.sample.ref_true) == (20, 410, 20)


def test_no_reference_and_no_hypothesis():
    s = score_events([], [], DUR)
    m = s.event.metrics
    assert math.isnan(m.sensitivity)
    assert math.isnan(m.precision)
    assert math.isnan(m.f1)
    assert m.fp_rate == 0.0


def test_false_alarm_only():
    s = score_events([], [(10, 20)], DUR)
    m = s.event.metrics
    assert (s.event.tp, s.event.fp, s.event.fn) == (0, 1, 0)
    assert math.isnan(m.sensitivity)
    assert m.precision == 0.0
    assert m.f1 == 0.0
    assert m.fp_rate == pytest.approx(24.0)  # one FP in one hour


def test_missed_seizure_only():
    s = score_recording(Annotations.from_events([(10, 20)], DUR), None)
    m = s.event.metrics
    assert (s.event.tp, s.event.fp, s.event.fn) == (0, 0, 1)
    assert m.sensitivity == 0.0
    assert math.isnan(m.precision)
    assert m.f1 == 0.0


def test_num_samples_follow_the_masks():
    s = score_events([], [], 3599.99)
    assert s.sample == Counts(0, 0, 0, 3599, 1)
    assert s.event.num_samples == 35990
    assert s.event.fs_hz == 10


def test_fp_counts_pieces_of_long_detections():
    # A 700 s false detection splits into 3 pieces, each an FP.
    assert ev([], [(1000, 1700)]) == (0, 3, 0)
    # A long detection overlapping a seizure: only pieces touching a TP window are spared.
    assert ev([(1000, 1010)], [(1000, 1700)]) == (1, 2, 1)


def test_min_overlap_parameter():
    # Window [70, 220) is 150 s; a 10 s detection covers 1/15 of it.
    assert ev([(100, 160)], [(100, 110)], min_overlap=0.05)[0] == 1
    assert ev([(100, 160)], [(100, 110)], min_overlap=0.07)[0] == 0


def test_duration_mismatch_is_an_error_not_an_empty_hypothesis():
    ref = Annotations.from_events([(10, 20)], 3600, source="ref.tsv")
    hyp = Annotations.from_events([(10, 20)], 3000, source="hyp.tsv")
    with pytest.raises(AnnotationError) as exc:
        score_recording(ref, hyp)
    assert exc.value.path == "hyp.tsv"
    assert exc.value.row is None
    assert "3000.0" in exc.value.reason
    assert "3600.0" in exc.value.reason
    # Same mask length (int(3600.4) == 3600): scored, as the reference does.
    same = Annotations.from_events([(10, 20)], 3600.4)
    assert score_recording(ref, same).event.tp == 1


def test_recording_shorter_than_one_sample_is_an_error():
    with pytest.raises(AnnotationError, match="shorter than one mask sample"):
        score_events([], [], 0.5)


def test_in_memory_events_are_normalised():
    a = score_events([(50, 60), (0, 10), (5, 20)], [(55, 56)], 600)
    b = score_events([(0, 20), (50, 60)], [(55, 56)], 600)
    assert a == b


@pytest.mark.parametrize(
    "bad",
    [[(-1, 5)], [(5, 4)], [(float("nan"), 5)], [(700, 710)], [(0, 1, 2)]],
)
def test_in_memory_events_are_validated(bad):
    with pytest.raises(AnnotationError):
        score_events(bad, [], 600)


@pytest.mark.parametrize(
    "kw",
    [
        {"mask_fs_hz": 0},
        {"event_fs_hz": 2.5},
        {"tolerance_start_s": -1},
        {"max_event_duration_s": 0},
        {"min_overlap": 1.0},
        {"min_duration_between_events_s": float("inf")},
    ],
)
def test_params_are_validated(kw):
    with pytest.raises(ValueError, match=next(iter(kw))):
        ScoringParams(**kw)


def test_params_are_frozen():
    with pytest.raises(AttributeError):
        ScoringParams().tolerance_start_s = 1.0  # type: ignore[misc]

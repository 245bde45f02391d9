"""score_dataset and aggregate: layout, missing files, per-recording errors, empty subjects,
and the dataset numbers against the reference's own per-recording scores and formulas."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from timescoring import scoring as ts

from szbench_scoring import (
    AnnotationError,
    DatasetLayoutError,
    RecordingResult,
    RecordingScore,
    aggregate,
    score_dataset,
    score_events,
    write_annotations,
)
from tests.scoring.reference import score_reference_files

REL = "sub-{s}/ses-01/eeg/sub-{s}_ses-01_task-szMonitoring_run-{r}_events.tsv"


def rel(s: str, r: str) -> str:
    return REL.format(s=s, r=r)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    ref, hyp = tmp_path / "ref", tmp_path / "hyp"
    rng = np.random.default_rng(3)
    # sub-01 and sub-02: ordinary recordings with random events.
    for s, runs in (("01", 3), ("02", 2)):
        for r in range(runs):
            dur = float(rng.integers(1800, 3600))
            onsets = np.sort(rng.uniform(0, dur - 400, 3))
            ref_ev = [(o, o + rng.uniform(5, 350)) for o in onsets[: rng.integers(0, 4)]]
            hyp_ev = [(max(0.0, a + rng.uniform(-40, 40)), b) for a, b in ref_ev[:2]]
            hyp_ev += [(float(x), float(x) + 12) for x in rng.uniform(0, dur - 20, 2)]
            write_annotations(ref / rel(s, f"{r:02d}"), ref_ev, dur, decimals=2)
            write_annotations(hyp / rel(s, f"{r:02d}"), hyp_ev, dur, decimals=2)
    # sub-03: one recording without a hypothesis file.
    write_annotations(ref / rel("03", "00"), [(100, 150)], 3600)
    # sub-04: an empty subject folder.
    (ref / "sub-04" / "ses-01").mkdir(parents=True)
    # sub-05: a hypothesis of another recordingDuration, and one with a bad row.
    write_annotations(ref / rel("05", "00"), [(100, 150)], 3600)
    write_annotations(hyp / rel("05", "00"), [(100, 150)], 3000)
    write_annotations(ref / rel("05", "01"), [(100, 150)], 3600)
    (hyp / rel("05", "01")).write_text(
        "onset\tduration\teventType\trecordingDuration\n10\t-1\tsz\t3600\n"
    )
    # Files that are not sub-* folders are not subjects.
    (ref / "participants.tsv").write_text("participant_id\nsub-01\n")
    return tmp_path


def _reference_subject(paths: list[tuple[Path, Path]], kind: int) -> ts._Scoring:
    """Sum the reference's per-recording counts and let timescoring compute the ratios."""
    acc = ts._Scoring()
    acc.tp = acc.fp = acc.refTrue = acc.numSamples = 0
    acc.fs = (1, 10)[kind]
    for r, h in paths:
        c = score_reference_files(r, h)
        tp, fp, rt, ns = (c.sample, c.event)[kind]
        acc.tp += tp
        acc.fp += fp
        acc.refTrue += rt
        acc.numSamples += ns
    acc.computeScores()
    return acc


def test_dataset_report(tree: Path):
    ref, hyp = tree / "ref", tree / "hyp"
    rep = score_dataset(ref, hyp)
    assert [s.subject for s in rep.subjects] == ["sub-01", "sub-02", "sub-03", "sub-04", "sub-05"]
    assert len(rep.recordings) == 8
    assert rep.n_missing == 1
    assert not rep.complete
    errors = {r.recording: r.error for r in rep.errors}
    assert set(errors) == {rel("05", "00"), rel("05", "01")}
    assert "does not match the reference" in errors[rel("05", "00")].reason
    assert errors[rel("05", "01")].row == 2
    assert "negative duration" in errors[rel("05", "01")].reason
    assert rep.empty_subjects == ("sub-04", "sub-05")

    # Per subject: the reference's counts summed, ratios by timescoring's own formulas.
    per_subject = {}
    for s, runs in (("01", 3), ("02", 2)):
        files = [(ref / rel(s, f"{r:02d}"), hyp / rel(s, f"{r:02d}")) for r in range(runs)]
        per_subject[f"sub-{s}"] = [_reference_subject(files, k) for k in (0, 1)]
    for s in rep.subjects:
        if s.subject not in per_subject:
            continue
        for k, ours in ((0, s.sample), (1, s.event)):
            theirs = per_subject[s.subject][k]
            for a, b in (
                (ours.sensitivity, theirs.sensitivity),
                (ours.precision, theirs.precision),
                (ours.f1, theirs.f1),
                (ours.fp_rate, theirs.fpRate),
            ):
                assert (math.isnan(a) and math.isnan(b)) or a == b
    # sub-03 (no hypothesis): all of its seizures are missed.
    sub3 = rep.subjects[2]
    assert sub3.counts.event.fn == 1
    assert sub3.event.sensitivity == 0.0
    assert sub3.n_missing == 1

    # Across subjects: nan-mean and population nan-std of the per-subject values.
    f1 = [s.event.f1 for s in rep.subjects]
    assert rep.event_mean.f1 == pytest.approx(np.nanmean(f1), rel=1e-15)
    assert rep.event_std.f1 == pytest.approx(np.nanstd(f1), rel=1e-15)
    out = rep.to_szcore_json()
    assert set(out) == {"sample_results", "event_results"}
    assert set(out["event_results"]) == {
        "sensitivity",
        "precision",
        "f1",
        "fpRate",
        "sensitivity_std",
        "precision_std",
        "f1_std",
        "fpRate_std",
    }
    pooled = rep.to_szcore_json(pooled=True)["event_results"]
    assert set(pooled) == {"sensitivity", "precision", "f1", "fpRate"}
    ev = rep.pooled.event
    assert pooled["sensitivity"] == ev.tp / ev.ref_true


def test_strict_raises_the_first_error(tree: Path):
    with pytest.raises(AnnotationError, match="does not match the reference"):
        score_dataset(tree / "ref", tree / "hyp", strict=True)


def test_missing_hypothesis_folder_means_no_detections(tree: Path):
    rep = score_dataset(tree / "ref", tree / "nothing-here")
    assert rep.n_missing == len(rep.recordings)
    assert rep.complete
    assert rep.pooled.event.fp == 0


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_bad_reference_folder(tmp_path: Path, make: str):
    ref = tmp_path / "ref"
    if make == "empty":
        ref.mkdir()
        (ref / "x.tsv").write_text("")
    with pytest.raises(DatasetLayoutError):
        score_dataset(ref, tmp_path)


def test_csv_writers(tree: Path, tmp_path: Path):
    rep = score_dataset(tree / "ref", tree / "hyp")
    rec_csv, sub_csv, js = tmp_path / "r.csv", tmp_path / "s.csv", tmp_path / "o.json"
    rep.write_recordings_csv(rec_csv)
    rep.write_subjects_csv(sub_csv)
    rep.write_json(js)
    rows = list(csv.DictReader(rec_csv.open()))
    assert len(rows) == 8
    bad = [r for r in rows if r["status"] == "error"]
    assert len(bad) == 2
    assert all(r["error"] and r["event_tp"] == "" for r in bad)
    good = rows[0]
    assert int(good["event_fn"]) == int(good["event_ref_true"]) - int(good["event_tp"])
    subs = list(csv.DictReader(sub_csv.open()))
    assert [s["subject"] for s in subs][3] == "sub-04"
    assert subs[3]["event_f1"] == ""  # NaN is an empty cell
    loaded = json.loads(js.read_text())
    assert loaded == json.loads(json.dumps(rep.to_szcore_json()))


def test_aggregate_nan_handling_and_mapping_input():
    hit = score_events([(100, 200)], [(150, 160)], 3600)
    nothing = score_events([], [], 3600)
    rep = aggregate({("sub-01", "a"): hit, ("sub-02", "b"): nothing}, subjects=["sub-03"])
    # sub-02 has no seizure and no detection: F1 is NaN and does not count in the mean.
    assert rep.event_mean.f1 == 1.0
    assert rep.event_std.f1 == 0.0
    # FP/day of sub-02 is 0 and counts; sub-03 has no recording (NaN).
    assert rep.event_mean.fp_rate == 0.0
    assert rep.to_szcore_json()["event_results"]["sensitivity_std"] == 0.0
    all_nan = aggregate({("sub-01", "a"): nothing})
    assert all_nan.to_szcore_json()["event_results"]["f1"] is None


def test_recording_result_needs_score_or_error():
    with pytest.raises(ValueError, match="either a score or an error"):
        RecordingResult("sub-01", "a", None)
    with pytest.raises(ValueError, match="either a score or an error"):
        RecordingResult("sub-01", "a", RecordingScore.zero(), AnnotationError("p", None, "x"))


def test_dataset_path_equals_recording_by_recording(tmp_path: Path, monkeypatch):
    """The batched dataset path (several batches) gives each recording's own score."""
    from szbench_scoring import dataset, read_annotations, score_recording

    monkeypatch.setattr(dataset, "_BATCH_BYTES", 2000)
    rng = np.random.default_rng(9)
    ref, hyp = tmp_path / "ref", tmp_path / "hyp"
    for i in range(60):
        s = f"{i % 7:02d}"
        dur = float(rng.integers(300, 3600)) + float(rng.choice([0, 0.5]))
        on = np.sort(rng.uniform(0, dur - 1, rng.integers(0, 5)))
        r_ev = [(a, min(dur, a + rng.uniform(0, 400))) for a in on]
        on = rng.uniform(0, dur - 1, rng.integers(0, 12))
        h_ev = [(a, a + rng.uniform(0, 120)) for a in on]  # unsorted, overlapping
        write_annotations(ref / rel(s, f"{i:02d}"), r_ev, dur, decimals=int(rng.integers(1, 4)))
        if rng.random() < 0.85:
            write_annotations(hyp / rel(s, f"{i:02d}"), h_ev, dur, decimals=2)
    rep = score_dataset(ref, hyp)
    assert rep.complete
    assert len(rep.recordings) == 60
    for r in rep.recordings:
        h = hyp / r.recording
        expected = score_recording(
            read_annotations(ref / r.recording), read_annotations(h) if h.exists() else None
        )
        assert r.score == expected
        assert r.hypothesis_missing == (not h.exists())

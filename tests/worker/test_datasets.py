"""Datasets: check (writes nothing), prepare (layout, manifest), bad files, nothing lost."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import mne
import numpy as np
import pytest

from szbench_scoring import read_annotations
from szbench_worker import datasets, synth
from szbench_worker.datasets import DatasetError, check_dataset, load_manifest, prepare_dataset
from szbench_worker.eeg.labels import CHANNELS, OUTPUT_LABELS
from szbench_worker.eeg.standardise import file_checksum
from tests.worker.eeg_files import bids_recording

mne.set_log_level("ERROR")


def tree(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


@pytest.fixture
def good(tmp_path: Path) -> Path:
    """Three conforming recordings: 256 Hz, 500 Hz with TUH-style labels, one with a seizure."""
    root = tmp_path / "src"
    bids_recording(root, "01", "00", duration_s=40, seizures=[(10.5, 20.25)])
    bids_recording(root, "01", "01", duration_s=30, sfreq_hz=500, seed=1)
    alias = {"T3": "T7", "T4": "T8", "T5": "P7", "T6": "P8"}
    bids_recording(
        root, "02", "00", duration_s=30, labels=[alias.get(c, c) for c in CHANNELS], seed=2
    )
    return root


def test_prepare_writes_the_documented_layout(good: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    calls: list[tuple[int, int, str]] = []
    report = prepare_dataset(good, out, progress=lambda *a: calls.append(a))
    assert report.ok
    assert len(report.imported) == 3
    assert calls[0] == (0, 3, "sub-01_ses-01_task-szMonitoring_run-00")
    assert calls[-1] == (3, 3, "")

    doc = json.loads((out / "manifest.json").read_text())
    assert set(doc) == {"format", "name", "created", "channels", "sfreq_hz", "recordings"}
    assert doc["format"] == 1
    assert doc["name"] == "src"
    assert doc["channels"] == list(OUTPUT_LABELS)
    assert doc["sfreq_hz"] == 256
    first = doc["recordings"][0]
    assert first == {
        "id": "sub-01_ses-01_task-szMonitoring_run-00",
        "subject": "sub-01",
        "session": "ses-01",
        "run": "run-00",
        "eeg_path": "eeg/sub-01/ses-01/eeg/sub-01_ses-01_task-szMonitoring_run-00_eeg.edf",
        "annotations_path": (
            "annotations/sub-01/ses-01/eeg/sub-01_ses-01_task-szMonitoring_run-00_events.tsv"
        ),
        "duration_s": 40.0,
        "source_sfreq_hz": 256.0,
        "source_checksum": file_checksum(
            good / "sub-01/ses-01/eeg/sub-01_ses-01_task-szMonitoring_run-00_eeg.edf"
        ),
        "checksum": file_checksum(out / first["eeg_path"]),
        "flags": [],
    }
    assert doc["recordings"][1]["source_sfreq_hz"] == 500.0
    assert "resampled" in doc["recordings"][1]["flags"]

    # eeg/ holds standardised EDFs only; annotations live apart.
    assert sorted(p.suffix for p in (out / "eeg").rglob("*") if p.is_file()) == [".edf"] * 3
    assert (
        sorted(p.name[-11:] for p in (out / "annotations").rglob("*") if p.is_file())
        == ["_events.tsv"] * 3
    )
    for rec in doc["recordings"]:
        raw = mne.io.read_raw_edf(out / rec["eeg_path"])
        assert raw.ch_names == list(OUTPUT_LABELS)
        assert raw.info["sfreq"] == 256
        ann = read_annotations(out / rec["annotations_path"])
        assert ann.recording_duration_s == rec["duration_s"]
    ann = read_annotations(out / first["annotations_path"])
    assert ann.events.tolist() == [[10.5, 20.25]]


def test_load_manifest_gives_dataclasses(good: Path, tmp_path: Path) -> None:
    prepare_dataset(good, tmp_path / "out", name="demo")
    manifest = load_manifest(tmp_path / "out")
    assert manifest.name == "demo"
    assert manifest.channels == OUTPUT_LABELS
    assert [r.subject for r in manifest.recordings] == ["sub-01", "sub-01", "sub-02"]
    rec = manifest.recordings[0]
    assert isinstance(rec, datasets.ManifestRecording)
    assert manifest.eeg_file(rec).is_file()
    assert manifest.annotations_file(rec).is_file()
    assert file_checksum(manifest.eeg_file(rec)) == rec.checksum


def test_check_reports_and_writes_nothing(good: Path) -> None:
    before = tree(good)
    report = check_dataset(good)
    assert report.ok
    assert report.n_importable == 3
    assert [r.n_seizures for r in report.recordings] == [1, 0, 0]
    assert report.recordings[1].info is not None
    assert report.recordings[1].info.sfreq_hz == 500
    assert tree(good) == before


def _break(root: Path) -> dict[str, Path]:
    """Add one recording per kind of problem; return their offending files."""
    bad = {}
    # Truncated EDF.
    p = bids_recording(root, "03", "00", duration_s=30)
    p.write_bytes(p.read_bytes()[:-5000])
    bad["truncated"] = p
    # Annotation that disagrees with the recording's length.
    bids_recording(root, "03", "01", duration_s=30, annotation_duration_s=3600)
    bad["duration"] = root / "sub-03/ses-01/eeg/sub-03_ses-01_task-szMonitoring_run-01_events.tsv"
    # Missing electrodes.
    p = bids_recording(root, "03", "02", duration_s=30, labels=list(CHANNELS[:17]))
    bad["missing"] = p
    # An annotation file the scorer's parser rejects (negative duration on line 2).
    p = bids_recording(root, "03", "03", duration_s=30)
    events = p.with_name(p.name.replace("_eeg.edf", "_events.tsv"))
    events.write_text(events.read_text().splitlines()[0] + "\n5\t-2\tsz\tn/a\tn/a\tn/a\t30\n")
    bad["annotation"] = events
    # A recording without annotations.
    p = bids_recording(root, "03", "04", duration_s=30)
    p.with_name(p.name.replace("_eeg.edf", "_events.tsv")).unlink()
    bad["no events"] = p.with_name(p.name.replace("_eeg.edf", "_events.tsv"))
    return bad


def test_bad_recordings_are_named_and_skipped(good: Path, tmp_path: Path) -> None:
    bad = _break(good)
    check = check_dataset(good)
    assert not check.ok
    assert check.n_importable == 3
    messages = [str(p) for p in check.problems]
    assert any(str(bad["truncated"]) in m and "truncated file" in m for m in messages)
    assert any(
        str(bad["duration"]) in m and "recordingDuration is 3600 s" in m and "lasts 30 s" in m
        for m in messages
    )
    assert any(str(bad["missing"]) in m and "missing channels: T4, T6" in m for m in messages)
    assert any(str(bad["annotation"]) + " (line 2)" in m for m in messages)
    assert any(str(bad["no events"]) in m and "missing" in m for m in messages)

    out = tmp_path / "out"
    report = prepare_dataset(good, out)
    assert not report.ok
    assert len(report.problems) == 5
    assert len(report.imported) == 3
    assert [r.subject for r in load_manifest(out).recordings] == ["sub-01", "sub-01", "sub-02"]
    assert not list(out.rglob("*.partial"))
    assert not list(out.rglob("*.tmp"))
    assert not (out / "eeg" / "sub-03").exists()


def test_nothing_imported_is_lost_and_reruns_resume(good: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    prepare_dataset(good, out)
    first = tree(out / "eeg")
    # A later import with broken recordings keeps everything that was imported ...
    bad = _break(good)
    report = prepare_dataset(good, out)
    assert report.reused == (
        "sub-01_ses-01_task-szMonitoring_run-00",
        "sub-01_ses-01_task-szMonitoring_run-01",
        "sub-02_ses-01_task-szMonitoring_run-00",
    )
    assert report.imported == ()
    assert tree(out / "eeg") == first  # not rewritten
    # ... and once a file is fixed only that one is imported.
    shutil.copyfile(
        good / "sub-01/ses-01/eeg/sub-01_ses-01_task-szMonitoring_run-00_eeg.edf",
        bad["truncated"],
    )
    (
        bad["truncated"].with_name(bad["truncated"].name.replace("_eeg.edf", "_events.tsv"))
    ).write_text(
        (good / "sub-01/ses-01/eeg/sub-01_ses-01_task-szMonitoring_run-00_events.tsv").read_text()
    )
    report = prepare_dataset(good, out)
    assert report.imported == ("sub-03_ses-01_task-szMonitoring_run-00",)
    assert len(load_manifest(out).recordings) == 4


def test_a_source_turned_bad_keeps_its_earlier_import(good: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    prepare_dataset(good, out)
    src = good / "sub-02/ses-01/eeg/sub-02_ses-01_task-szMonitoring_run-00_eeg.edf"
    src.write_bytes(src.read_bytes()[:1000])
    report = prepare_dataset(good, out)
    assert [p.path for p in report.problems] == [src]
    ids = [r.id for r in load_manifest(out).recordings]
    assert "sub-02_ses-01_task-szMonitoring_run-00" in ids
    assert (out / "eeg/sub-02/ses-01/eeg/sub-02_ses-01_task-szMonitoring_run-00_eeg.edf").is_file()


def test_layout_problems(tmp_path: Path) -> None:
    root = tmp_path / "src"
    bids_recording(root, "01", "00", duration_s=20)
    stray = root / "sub-01" / "eeg" / "sub-01_task-x_eeg.edf"
    stray.parent.mkdir(parents=True)
    shutil.copyfile(next(root.rglob("*_eeg.edf")), stray)
    orphan = root / "sub-01/ses-01/eeg/sub-01_ses-01_task-szMonitoring_run-09_events.tsv"
    orphan.write_text("onset\tduration\teventType\trecordingDuration\n")
    report = check_dataset(root)
    messages = {str(p) for p in report.problems}
    assert f"{stray}: not in the layout sub-*/ses-*/eeg/<name>_eeg.<ext>" in messages
    assert f"{orphan}: annotations without a recording" in messages
    assert report.n_importable == 1


def test_empty_or_nested_output_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no recordings"):
        prepare_dataset(tmp_path / "empty", tmp_path / "out")
    root = tmp_path / "src"
    bids_recording(root, "01", "00", duration_s=20)
    with pytest.raises(DatasetError, match="outside the source"):
        prepare_dataset(root, root / "prepared")
    assert not (root / "prepared").exists()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(format=2), "unsupported manifest format 2"),
        (lambda d: d["recordings"][0].pop("checksum"), r"recordings\[0\]: bad or missing field"),
        (
            lambda d: d["recordings"][0].update(eeg_path="../../etc/passwd"),
            "leaves the dataset",
        ),
    ],
)
def test_load_manifest_names_what_is_wrong(good: Path, tmp_path: Path, change, message) -> None:
    out = tmp_path / "out"
    prepare_dataset(good, out)
    doc = json.loads((out / "manifest.json").read_text())
    change(doc)
    (out / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(DatasetError, match=message) as info:
        load_manifest(out)
    assert str(out / "manifest.json") in str(info.value)


def test_synthetic_dataset_prepares_unchanged_in_content(tmp_path: Path) -> None:
    ds = synth.generate_dataset(tmp_path / "syn", subjects=1, hours=1 / 6, recording_minutes=10)
    report = prepare_dataset(tmp_path / "syn", tmp_path / "out")
    assert report.ok
    rec = report.manifest.recordings[0]
    a = mne.io.read_raw_edf(ds.recordings[0].eeg_path, preload=True).get_data()
    b = mne.io.read_raw_edf(report.manifest.eeg_file(rec), preload=True).get_data()
    # Already standardised: re-referencing again changes nothing beyond quantisation.
    assert np.abs(a - b).max() * 1e6 < 0.2


def test_brainvision_dataset(tmp_path: Path) -> None:
    root = tmp_path / "src" / "sub-01" / "ses-01" / "eeg"
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    info = mne.create_info([f"EEG {c}-REF" for c in CHANNELS] + ["ECG"], 250.0, "eeg")
    raw = mne.io.RawArray(rng.standard_normal((20, 250 * 20)) * 2e-5, info)
    stem = "sub-01_ses-01_task-szMonitoring_run-00"
    mne.export.export_raw(root / f"{stem}_eeg.vhdr", raw, fmt="brainvision")
    head = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
    (root / f"{stem}_events.tsv").write_text(head + "2\t5\tsz\tn/a\tn/a\tn/a\t20\n")
    report = prepare_dataset(tmp_path / "src", tmp_path / "out")
    assert report.ok, report.problems
    rec = report.manifest.recordings[0]
    assert rec.source_sfreq_hz == 250
    assert rec.eeg_path.endswith(f"{stem}_eeg.edf")
    assert os.path.getsize(report.manifest.eeg_file(rec)) > 0

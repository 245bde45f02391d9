"""The bundled baseline detector, run as a plain local process on synthetic EEG."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import mne
import numpy as np
import pytest

from szbench_scoring import read_annotations, score_events
from szbench_worker import synth
from szbench_worker.eeg.edf_write import EdfStreamWriter
from szbench_worker.eeg.labels import OUTPUT_LABELS

pytestmark = pytest.mark.slow

DETECT = Path(__file__).resolve().parents[1] / "examples" / "baseline" / "detect.py"
HEADER = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration"


def run_detector(edf: Path, tsv: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(DETECT), "--input", str(edf), "--output", str(tsv)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> synth.SynthDataset:
    root = tmp_path_factory.mktemp("baseline")
    return synth.generate_dataset(
        root / "data", subjects=3, hours=1.0, recording_minutes=30, seed=5, seizures_per_hour=5
    )


def test_detector_needs_only_numpy_and_the_standard_library() -> None:
    tree = ast.parse(DETECT.read_text())
    modules = {
        (node.module if isinstance(node, ast.ImportFrom) else alias.name).split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert modules - set(sys.stdlib_module_names) == {"numpy"}


def test_finds_most_seizures_but_not_all(dataset: synth.SynthDataset, tmp_path: Path) -> None:
    tp = fp = ref = 0
    for rec in dataset.recordings:
        out = tmp_path / rec.events_path.name
        result = run_detector(rec.eeg_path, out)
        assert result.returncode == 0, result.stderr
        hyp = read_annotations(out)
        assert hyp.recording_duration_s == rec.duration_s
        truth = [(s.onset_s, s.onset_s + s.duration_s) for s in rec.seizures]
        score = score_events(truth, hyp.events, rec.duration_s)
        tp, fp, ref = tp + score.event.tp, fp + score.event.fp, ref + score.event.ref_true
    print(f"baseline on synth: tp={tp} fp={fp} ref={ref}")
    assert ref >= 10
    sensitivity = tp / ref
    # A real detector on realistic data: most seizures, not all, and some false alarms.
    assert 0.6 <= sensitivity <= 0.95, (tp, ref)
    assert tp < ref
    assert 1 <= fp <= 3 * ref, fp


def test_reader_matches_mne(dataset: synth.SynthDataset) -> None:
    sys.path.insert(0, str(DETECT.parent))
    try:
        import detect  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(DETECT.parent))
    path = dataset.recordings[0].eeg_path
    data, fs, labels, start = detect.read_edf(path)
    raw = mne.io.read_raw_edf(path, preload=True, verbose="error")
    assert fs == 256
    assert labels == list(OUTPUT_LABELS)
    assert start == raw.info["meas_date"].replace(tzinfo=None)
    np.testing.assert_allclose(data, raw.get_data() * 1e6, atol=1e-3)


def test_single_bckg_row_when_nothing_is_detected(tmp_path: Path) -> None:
    edf = tmp_path / "flat_eeg.edf"
    with EdfStreamWriter(
        edf, labels=OUTPUT_LABELS, physical_min=[-100] * 19, physical_max=[100] * 19, n_records=600
    ) as writer:
        writer.write(np.zeros((19, 600 * 256)))
        writer.close()
    result = run_detector(edf, tmp_path / "flat.tsv")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "flat.tsv").read_text().splitlines() == [
        HEADER,
        "0.00\t600.00\tbckg\tn/a\tn/a\t2000-01-01 00:00:00\t600.00",
    ]


def test_unreadable_input_fails_with_a_message(tmp_path: Path) -> None:
    (tmp_path / "bad.edf").write_bytes(b"not an edf")
    result = run_detector(tmp_path / "bad.edf", tmp_path / "bad.tsv")
    assert result.returncode == 1
    assert "bad.edf" in result.stderr
    assert not (tmp_path / "bad.tsv").exists()

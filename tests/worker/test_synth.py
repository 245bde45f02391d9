"""Synthetic EEG: layout, determinism, and that it looks like EEG with evolving seizures."""

from __future__ import annotations

from pathlib import Path

import mne
import numpy as np
import pytest

from szbench_scoring import read_annotations
from szbench_worker import synth
from szbench_worker.eeg.labels import CHANNELS, OUTPUT_LABELS
from szbench_worker.eeg.standardise import file_checksum

mne.set_log_level("ERROR")
FS = 256


def band_power(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    spec = np.abs(np.fft.rfft(x, axis=-1)) ** 2
    freqs = np.fft.rfftfreq(x.shape[-1], 1 / FS)
    return spec[..., (freqs >= lo) & (freqs < hi)].sum(axis=-1) / x.shape[-1]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[np.ndarray, tuple]:
    path = tmp_path_factory.mktemp("synth") / "rec_eeg.edf"
    seizures = synth.generate_recording(path, duration_s=900, seed=[7, 0, 0], seizures_per_hour=12)
    raw = mne.io.read_raw_edf(path, preload=True)
    assert raw.ch_names == list(OUTPUT_LABELS)
    assert raw.info["sfreq"] == FS
    return raw.get_data() * 1e6, seizures


def test_dataset_layout_and_annotations(tmp_path: Path) -> None:
    ds = synth.generate_dataset(
        tmp_path, subjects=2, hours=1 / 6, recording_minutes=10, seed=3, seizures_per_hour=9
    )
    assert len(ds.recordings) == 2
    assert (tmp_path / "dataset_description.json").is_file()
    assert (tmp_path / "participants.tsv").read_text().split() == [
        "participant_id",
        "sub-01",
        "sub-02",
    ]
    for rec in ds.recordings:
        stem = f"{rec.subject}_ses-01_task-szMonitoring_{rec.run}"
        assert rec.eeg_path == tmp_path / rec.subject / "ses-01" / "eeg" / f"{stem}_eeg.edf"
        assert rec.events_path == rec.eeg_path.with_name(f"{stem}_events.tsv")
        raw = mne.io.read_raw_edf(rec.eeg_path)
        assert raw.n_times == 600 * FS
        ann = read_annotations(rec.events_path)
        assert ann.recording_duration_s == 600
        expected = [[s.onset_s, s.onset_s + s.duration_s] for s in rec.seizures]
        np.testing.assert_allclose(ann.events, np.reshape(expected, (-1, 2)))
        if not rec.seizures:
            assert "\tbckg\t" in rec.events_path.read_text()
    assert ds.n_seizures > 0


@pytest.mark.slow
def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    kwargs = {"subjects": 1, "hours": 1 / 6, "recording_minutes": 10}
    a = synth.generate_dataset(tmp_path / "a", seed=11, **kwargs)
    b = synth.generate_dataset(tmp_path / "b", seed=11, **kwargs)
    c = synth.generate_dataset(tmp_path / "c", seed=12, **kwargs)
    for x, y in zip(a.recordings, b.recordings, strict=True):
        assert file_checksum(x.eeg_path) == file_checksum(y.eeg_path)
        assert x.events_path.read_bytes() == y.events_path.read_bytes()
    assert file_checksum(a.recordings[0].eeg_path) != file_checksum(c.recordings[0].eeg_path)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"recording_minutes": 5}, "at least 10"),
        ({"subjects": 0}, "subjects"),
        ({"hours": 0.1, "recording_minutes": 60}, "shorter than one recording"),
    ],
)
def test_bad_arguments(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        synth.generate_dataset(tmp_path, **kwargs)


def test_background_looks_like_eeg(recording: tuple[np.ndarray, tuple]) -> None:
    data, seizures = recording
    quiet = data[:, : 50 * FS]  # before any seizure (they start after 60 s)
    assert all(s.onset_s >= 60 for s in seizures)
    rms = quiet.std(axis=1)
    assert np.all((rms > 5) & (rms < 80))
    # Common average reference: the channels sum to zero (up to 16-bit quantisation).
    assert np.abs(data.sum(axis=0)).max() < 1.0
    # 1/f: more power at 1-4 Hz than at 15-30 Hz, everywhere.
    assert np.all(band_power(quiet, 1, 4) > 2 * band_power(quiet, 15, 30) / 3.75)
    # Posterior alpha: O1/O2 carry more 8-12 Hz power than the frontal and central electrodes.
    alpha = band_power(quiet, 8, 12)
    posterior = alpha[[CHANNELS.index("O1"), CHANNELS.index("O2")]].min()
    anterior = alpha[[CHANNELS.index(c) for c in ("Fp1", "Fp2", "F3", "F4", "Cz")]].max()
    assert posterior > 2 * anterior


def test_blinks_are_frontal_and_muscle_is_temporal(recording: tuple[np.ndarray, tuple]) -> None:
    data, _ = recording
    slow = band_power(data, 0.3, 2.5)
    assert slow[CHANNELS.index("Fp1")] > 3 * slow[CHANNELS.index("O1")]
    fast = band_power(data, 30, 90)
    temporal = fast[[CHANNELS.index(c) for c in ("T3", "T4", "F7", "F8")]].mean()
    central = fast[[CHANNELS.index(c) for c in ("C3", "Cz", "C4", "Pz")]].mean()
    assert temporal > 3 * central


def test_seizures_evolve_in_amplitude_and_frequency(recording: tuple[np.ndarray, tuple]) -> None:
    data, seizures = recording
    assert seizures
    sz = max(seizures, key=lambda s: s.peak_uv)
    focus = data[CHANNELS.index(sz.focus)]
    start, length = int(sz.onset_s * FS), int(sz.duration_s * FS)
    before = focus[start - 30 * FS : start]
    early = focus[start : start + length // 5]
    late = focus[start + length // 2 : start + length - 4 * FS]
    assert late.std() > 1.5 * early.std()  # rising amplitude
    assert band_power(late, 1.5, 10) > 5 * band_power(before, 1.5, 10)

    def dominant_hz(x: np.ndarray) -> float:
        spec = np.abs(np.fft.rfft(x - x.mean()))
        freqs = np.fft.rfftfreq(x.size, 1 / FS)
        band = (freqs > 1.5) & (freqs < 12)
        return float(freqs[band][spec[band].argmax()])

    first = focus[start + length // 10 : start + length // 3]
    last = focus[start + 2 * length // 3 : start + length - 4 * FS]
    assert dominant_hz(first) > dominant_hz(last) + 1.0  # the discharge slows down


def test_seizure_starts_focally_and_spreads() -> None:
    sz = synth.Seizure(
        onset_s=100.0,
        duration_s=60.0,
        focus="C3",
        peak_uv=100.0,
        start_hz=8.0,
        end_hz=3.0,
        spread_radius=2.0,
        spread_s_per_unit=4.0,
    )
    part = synth._seizure_signal(sz, t0=100 * FS, n=60 * FS)
    assert part is not None
    _, x = part
    onset = {c: np.flatnonzero(np.abs(x[CHANNELS.index(c)]) > 1e-9) for c in CHANNELS}
    assert onset["C3"][0] / FS < 0.1  # the focus fires first
    assert onset["Cz"][0] / FS == pytest.approx(4.0, abs=0.1)  # one grid unit away
    assert onset["T3"][0] / FS == pytest.approx(4.0, abs=0.1)
    assert onset["T4"].size == 0  # three units away: beyond the spread radius
    assert onset["Fz"][0] / FS == pytest.approx(4 * np.sqrt(2), abs=0.1)
    assert onset["O2"].size == 0  # beyond the spread radius
    assert onset["Fp2"].size == 0
    # The same samples come out whatever the chunking.
    a = synth._seizure_signal(sz, t0=100 * FS, n=13 * FS)
    assert a is not None
    np.testing.assert_allclose(a[1], x[:, : 13 * FS])

"""EEG I/O and standardisation: real files, aliases, resampling, bad files, bounded memory."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import mne
import numpy as np
import pytest
from scipy.signal import resample_poly

from szbench_worker.eeg.edf_write import EdfStreamWriter
from szbench_worker.eeg.errors import EEGError, MissingChannelsError
from szbench_worker.eeg.labels import CHANNELS, OUTPUT_LABELS, canonical_channel, match_channels
from szbench_worker.eeg.resample import resample, resample_ratio
from szbench_worker.eeg.standardise import file_checksum, inspect_recording, standardise_recording
from tests.worker.eeg_files import (
    PYEDFLIB_DATA,
    make_discontinuous,
    relabel,
    sine_signals,
    standard_edf,
    write_edf,
)

mne.set_log_level("ERROR")


def read(path: Path) -> tuple[np.ndarray, float, list[str]]:
    raw = mne.io.read_raw_edf(path, preload=True)
    return raw.get_data() * 1e6, float(raw.info["sfreq"]), raw.ch_names


# --------------------------------------------------------------------------- labels


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("Fp1", "Fp1"),
        ("FP1", "Fp1"),
        ("fp1", "Fp1"),
        ("EEG Fp1-REF", "Fp1"),
        ("EEG FP2-LE", "Fp2"),
        ("Cz-Avg", "Cz"),
        ("CZ-AVG", "Cz"),
        ("T7", "T3"),
        ("EEG T8-REF", "T4"),
        ("P7-LE", "T5"),
        ("p8", "T6"),
        ("T3", "T3"),
        ("EEG T6-REF", "T6"),
        ("ECG", None),
        ("EEG A1-REF", None),
        ("Fp1-F7", None),
        ("Photic", None),
    ],
)
def test_canonical_channel(label: str, expected: str | None) -> None:
    assert canonical_channel(label) == expected


def test_match_prefers_szcore_name_over_alias_and_reports_missing() -> None:
    labels = ["EEG T3-REF", "EEG T7-REF", "EEG FP1-REF", "ECG"]
    mapping, missing, ambiguous = match_channels(labels)
    assert mapping == {"Fp1": "EEG FP1-REF", "T3": "EEG T3-REF"}
    assert ambiguous == []
    assert missing == [c for c in CHANNELS if c not in ("Fp1", "T3")]


def test_two_labels_for_one_electrode_is_an_error(tmp_path: Path) -> None:
    labels = [f"EEG {c}-REF" for c in CHANNELS] + ["Cz-LE"]
    path = standard_edf(tmp_path / "dup.edf", 10, labels=labels)
    with pytest.raises(EEGError, match=r"dup\.edf: several channels claim .*Cz"):
        inspect_recording(path)


# --------------------------------------------------------------------------- standardisation


def test_conforming_edf_is_car_in_order_with_avg_labels(tmp_path: Path) -> None:
    # Source in a shuffled order with TUH-style labels and 10-10 aliases, plus extra channels.
    names = list(CHANNELS)[::-1]
    alias = {"T3": "T7", "T4": "T8", "T5": "P7", "T6": "P8"}
    labels = [f"EEG {alias.get(c, c).upper()}-REF" for c in names]
    src = standard_edf(tmp_path / "src.edf", 30, labels=labels, extra=["ECG", "EEG A1-REF"])
    result = standardise_recording(src, tmp_path / "out.edf")

    data, sfreq, out_labels = read(tmp_path / "out.edf")
    assert out_labels == list(OUTPUT_LABELS)
    assert sfreq == 256
    assert data.shape == (19, 30 * 256)
    source, _, source_labels = read(src)
    picked = np.stack([source[source_labels.index(labels[names.index(c)])] for c in CHANNELS])
    expected = picked - picked.mean(axis=0)
    # Within two quantisation steps of the 16-bit output.
    assert np.abs(data - expected).max() < 0.05
    assert np.abs(data.sum(axis=0)).max() < 0.5
    assert result.duration_s == 30
    assert result.source_sfreq_hz == 256
    assert result.checksum == file_checksum(tmp_path / "out.edf")
    assert result.source_checksum == file_checksum(src)
    assert "resampled" not in result.flags
    assert result.start.year == 2021


def test_output_is_readable_by_pyedflib_and_edfio(tmp_path: Path) -> None:
    import edfio
    import pyedflib

    standardise_recording(standard_edf(tmp_path / "a.edf", 20), tmp_path / "b.edf")
    with pyedflib.EdfReader(str(tmp_path / "b.edf")) as f:
        assert f.getSignalLabels() == list(OUTPUT_LABELS)
        assert f.getSampleFrequencies().tolist() == [256] * 19
        assert f.getFileDuration() == 20
    edf = edfio.read_edf(tmp_path / "b.edf")
    assert [s.label for s in edf.signals] == list(OUTPUT_LABELS)


def test_standardisation_is_deterministic(tmp_path: Path) -> None:
    src = standard_edf(tmp_path / "a.edf", 20, 512)
    a = standardise_recording(src, tmp_path / "1.edf")
    b = standardise_recording(src, tmp_path / "2.edf", chunk_s=7)
    assert a.checksum == b.checksum
    assert (tmp_path / "1.edf").read_bytes() == (tmp_path / "2.edf").read_bytes()


@pytest.mark.parametrize("sfreq", [200, 250, 500, 512, 1000])
def test_chunked_resampling_equals_whole_signal_resampling(tmp_path: Path, sfreq: int) -> None:
    src = standard_edf(tmp_path / "a.edf", 25, sfreq)
    result = standardise_recording(src, tmp_path / "b.edf", chunk_s=3.3)
    assert "resampled" in result.flags
    data, out_sfreq, _ = read(tmp_path / "b.edf")
    source, _, _ = read(src)
    car = source[:19] - source[:19].mean(axis=0)
    ratio = resample_ratio(sfreq)
    whole = resample_poly(car, ratio.numerator, ratio.denominator, axis=1)[:, : 25 * 256]
    assert out_sfreq == 256
    assert data.shape == (19, 25 * 256)
    step = (np.array([float(x) for x in _physical_maxima(tmp_path / "b.edf")]) * 2) / 65535
    assert np.all(np.abs(data - whole).max(axis=1) <= step + 1e-9)


def _physical_maxima(path: Path) -> list[str]:
    raw = path.read_bytes()
    ns = int(raw[252:256])
    start = 256 + ns * (16 + 80 + 8 + 8)
    return [raw[start + 8 * i : start + 8 * (i + 1)].decode().strip() for i in range(19)]


def test_resampling_keeps_a_10_hz_rhythm(tmp_path: Path) -> None:
    t = np.arange(20 * 512) / 512
    signals = {
        f"EEG {c}-REF": (512.0, (60 if c == "O1" else 0) * np.sin(2 * np.pi * 10 * t))
        for c in CHANNELS
    }
    write_edf(tmp_path / "a.edf", signals)
    standardise_recording(tmp_path / "a.edf", tmp_path / "b.edf")
    data, _, _ = read(tmp_path / "b.edf")
    o1 = data[CHANNELS.index("O1"), 256:-256]
    spectrum = np.abs(np.fft.rfft(o1))
    assert np.fft.rfftfreq(o1.size, 1 / 256)[spectrum.argmax()] == pytest.approx(10, abs=0.1)
    # The common average removes 1/19 of it from O1 and spreads it over the others.
    assert np.abs(o1).max() == pytest.approx(60 * 18 / 19, rel=0.02)


def test_channels_with_different_sampling_rates(tmp_path: Path) -> None:
    # EEG at 512 Hz except two at 256 Hz; ECG at 1024 Hz must not drive the rate.
    signals = sine_signals([f"EEG {c}-REF" for c in CHANNELS], 512, 20)
    for c in ("Cz", "Pz"):
        _fs, x = signals[f"EEG {c}-REF"]
        signals[f"EEG {c}-REF"] = (256.0, x[::2])
    signals.update(sine_signals(["ECG"], 1024, 20))
    src = write_edf(tmp_path / "mixed.edf", signals)
    info = inspect_recording(src)
    assert info.sfreq_hz == 512
    result = standardise_recording(src, tmp_path / "out.edf", info=info)
    data, sfreq, labels = read(tmp_path / "out.edf")
    assert sfreq == 256
    assert data.shape == (19, 20 * 256)
    assert labels == list(OUTPUT_LABELS)
    assert result.source_sfreq_hz == 512
    assert np.isfinite(data).all()
    assert np.abs(data).max() > 10


def test_missing_channels_are_rejected_with_the_list(tmp_path: Path) -> None:
    labels = [f"EEG {c}-REF" for c in CHANNELS if c not in ("O2", "T6")]
    src = standard_edf(tmp_path / "partial.edf", 10, labels=labels)
    with pytest.raises(MissingChannelsError) as info:
        standardise_recording(src, tmp_path / "out.edf")
    assert info.value.missing == ("O2", "T6")
    assert "partial.edf: missing channels: O2, T6" in str(info.value)
    assert not (tmp_path / "out.edf").exists()
    assert not list(tmp_path.glob("*.partial"))


def test_missing_channels_flat_filled_when_allowed(tmp_path: Path) -> None:
    labels = [f"EEG {c}-REF" for c in CHANNELS if c not in ("O2", "T6")]
    src = standard_edf(tmp_path / "partial.edf", 10, labels=labels)
    result = standardise_recording(src, tmp_path / "out.edf", allow_flat_fill=True)
    assert "flat-filled:O2,T6" in result.flags
    data, _, labels_out = read(tmp_path / "out.edf")
    assert labels_out == list(OUTPUT_LABELS)
    assert np.all(data[CHANNELS.index("O2")] == 0)
    assert np.all(data[CHANNELS.index("T6")] == 0)
    assert np.abs(data[CHANNELS.index("O1")]).max() > 1
    # The average is over the electrodes that exist.
    assert np.abs(data.sum(axis=0)).max() < 0.5


# --------------------------------------------------------------------------- real files


def test_real_pyedflib_file_without_eeg_labels_names_what_is_missing(tmp_path: Path) -> None:
    real = PYEDFLIB_DATA / "test_generator.edf"
    with pytest.raises(MissingChannelsError, match=r"test_generator\.edf: missing channels: Fp1"):
        standardise_recording(real, tmp_path / "out.edf")
    assert len(MissingChannelsError(real, CHANNELS).missing) == 19


def test_real_pyedflib_edf_relabelled_is_standardised(tmp_path: Path) -> None:
    # pyedflib's generator file: EDF+C, 200 Hz, 600 s, 11 test signals. Give eight of them
    # electrode names (the data bytes stay those of the shipped file).
    names = ["sine 1 Hz", "sine 8 Hz", "sine 8.1777 Hz", "sine 8.5 Hz"]
    names += ["sine 15 Hz", "sine 17 Hz", "sine 50 Hz", "noise"]
    electrodes = ["EEG FP1-REF", "EEG F3-REF", "EEG C3-REF", "EEG P3-REF"]
    electrodes += ["EEG O1-REF", "EEG F7-REF", "EEG T7-REF", "EEG P7-REF"]
    src = relabel(
        PYEDFLIB_DATA / "test_generator.edf",
        tmp_path / "gen.edf",
        dict(zip(names, electrodes, strict=True)),
    )
    result = standardise_recording(src, tmp_path / "out.edf", allow_flat_fill=True)
    assert result.source_sfreq_hz == 200
    assert result.duration_s == 600
    assert "resampled" in result.flags
    data, sfreq, _ = read(tmp_path / "out.edf")
    assert sfreq == 256
    assert data.shape == (19, 600 * 256)
    # The 8 Hz sine is still an 8 Hz sine on F3 after re-referencing and resampling.
    f3 = data[CHANNELS.index("F3")]
    source, _, labels = read(src)
    picked = np.stack([source[labels.index(e)] for e in electrodes])
    car_f3 = picked[1] - picked.mean(axis=0)
    ratio = resample_ratio(200)
    expected = resample_poly(car_f3, ratio.numerator, ratio.denominator)[: f3.size]
    assert np.corrcoef(f3[512:-512], expected[512:-512])[0, 1] > 0.999


def test_real_pyedflib_bdf_is_read_through_mne(tmp_path: Path) -> None:
    names = ["sine 5Hz", "square 13Hz", "ramp 7Hz", "pink noise", "white noise"]
    src = relabel(
        PYEDFLIB_DATA / "test_generator.bdf",
        tmp_path / "gen.bdf",
        dict(zip(names, ["Fp1", "Fp2", "Cz", "O1", "O2"], strict=True)),
    )
    result = standardise_recording(src, tmp_path / "out.edf", allow_flat_fill=True)
    assert result.source_sfreq_hz == 1000
    data, sfreq, _ = read(tmp_path / "out.edf")
    assert sfreq == 256
    assert data.shape == (19, 30 * 256)
    # The file's five signals run at 1000, 800, 500, 975 and 999 Hz: each is resampled from
    # its own rate (read with our 24-bit record reader), then re-referenced. Check against
    # pyedflib's independent reading of the same file, resampled whole.
    import pyedflib

    with pyedflib.EdfReader(str(src)) as f:
        labels = f.getSignalLabels()
        native = {lab: (f.readSignal(i), f.getSampleFrequency(i)) for i, lab in enumerate(labels)}
    columns = []
    for name in ("Fp1", "Fp2", "Cz", "O1", "O2"):
        x, fs = native[name]
        ratio = resample_ratio(fs)
        columns.append(resample_poly(x, ratio.numerator, ratio.denominator)[: 30 * 256])
    expected = np.stack(columns)
    expected -= expected.mean(axis=0)
    rows = [CHANNELS.index(c) for c in ("Fp1", "Fp2", "Cz", "O1", "O2")]
    step = np.array([float(_physical_maxima(tmp_path / "out.edf")[r]) for r in rows]) * 2 / 65535
    assert np.all(np.abs(data[rows] - expected).max(axis=1) <= step + 1e-6)


def test_real_single_channel_file_upsampled(tmp_path: Path) -> None:
    # test_subsecond.edf: one 'Fp1' signal at 128 Hz, 698 s.
    result = standardise_recording(
        PYEDFLIB_DATA / "test_subsecond.edf", tmp_path / "out.edf", allow_flat_fill=True
    )
    assert result.source_sfreq_hz == 128
    assert result.duration_s == 698
    assert "flat-filled:" + ",".join(c for c in CHANNELS if c != "Fp1") in result.flags


# --------------------------------------------------------------------------- bad files


def test_truncated_file_is_an_error_naming_it(tmp_path: Path) -> None:
    src = standard_edf(tmp_path / "cut.edf", 30)
    data = src.read_bytes()
    src.write_bytes(data[: len(data) // 2])
    with pytest.raises(EEGError, match=r"cut\.edf: truncated file: the header announces 30"):
        standardise_recording(src, tmp_path / "out.edf")
    assert not (tmp_path / "out.edf").exists()


@pytest.mark.parametrize(
    ("offset", "value", "message"),
    [
        (236, b"abc     ", "wrong header: field 'number of data records' .* 'abc', not an"),
        (184, b"999     ", "wrong header: .* header size 999"),
        (244, b"0       ", "wrong header: data record duration 0"),
    ],
)
def test_wrong_header_is_an_error_naming_the_file(
    tmp_path: Path, offset: int, value: bytes, message: str
) -> None:
    src = standard_edf(tmp_path / "bad.edf", 5)
    data = bytearray(src.read_bytes())
    data[offset : offset + len(value)] = value
    src.write_bytes(bytes(data))
    with pytest.raises(EEGError, match=rf"bad\.edf: {message}"):
        inspect_recording(src)


def test_not_an_edf_and_unknown_format(tmp_path: Path) -> None:
    (tmp_path / "tiny.edf").write_bytes(b"0       short")
    with pytest.raises(EEGError, match=r"tiny\.edf: not an EDF file"):
        inspect_recording(tmp_path / "tiny.edf")
    (tmp_path / "x.txt").write_text("hello")
    with pytest.raises(EEGError, match=r"x\.txt: unsupported format"):
        inspect_recording(tmp_path / "x.txt")


def _szbench_edf(path: Path, seconds: int) -> Path:
    signals = sine_signals(list(CHANNELS), 256, seconds)
    with EdfStreamWriter(
        path,
        labels=[f"EEG {c}-REF" for c in CHANNELS],
        physical_min=[-200] * 19,
        physical_max=[200] * 19,
        n_records=seconds,
    ) as writer:
        writer.write(np.stack([signals[c][1] for c in CHANNELS]))
        writer.close()
    return path


def test_discontinuous_edf_with_a_gap_is_rejected(tmp_path: Path) -> None:
    src = make_discontinuous(_szbench_edf(tmp_path / "gap.edf", 20), gap_after_record=12)
    with pytest.raises(EEGError, match=r"gap\.edf: discontinuous recording \(EDF\+D\): record 12"):
        standardise_recording(src, tmp_path / "out.edf")


def test_discontinuous_edf_without_a_gap_is_accepted(tmp_path: Path) -> None:
    src = make_discontinuous(_szbench_edf(tmp_path / "d.edf", 20), gap_after_record=None)
    result = standardise_recording(src, tmp_path / "out.edf")
    assert "edf+d-contiguous" in result.flags
    assert result.duration_s == 20


def test_writer_refuses_a_short_file(tmp_path: Path) -> None:
    writer = EdfStreamWriter(
        tmp_path / "w.edf", labels=["a"], physical_min=[-1], physical_max=[1], n_records=3
    )
    writer.write(np.zeros((1, 256)))
    with pytest.raises(EEGError, match=r"w\.edf: wrote 1 records but the header announces 3"):
        writer.close()


def test_writer_clips_and_counts(tmp_path: Path) -> None:
    with EdfStreamWriter(
        tmp_path / "w.edf", labels=["a"], physical_min=[-10], physical_max=[10], n_records=1
    ) as writer:
        x = np.zeros((1, 256))
        x[0, :3] = [50, -50, 5]
        writer.write(x)
        writer.close()
    assert writer.n_clipped == 2
    data, _, _ = read(tmp_path / "w.edf")
    assert data[0, :3] == pytest.approx([10, -10, 5], abs=1e-3)


# --------------------------------------------------------------------------- other formats


def test_brainvision_and_eeglab_are_read_through_mne(tmp_path: Path) -> None:
    sig = sine_signals([f"EEG {c}-REF" for c in CHANNELS], 500, 12)
    info = mne.create_info(list(sig), 500.0, "eeg")
    raw = mne.io.RawArray(np.stack([x for _, x in sig.values()]) * 1e-6, info)
    mne.export.export_raw(tmp_path / "r_eeg.vhdr", raw, fmt="brainvision")
    mne.export.export_raw(tmp_path / "r_eeg.set", raw, fmt="eeglab")
    for name in ("r_eeg.vhdr", "r_eeg.set"):
        result = standardise_recording(tmp_path / name, tmp_path / f"{name}.edf")
        data, sfreq, _ = read(tmp_path / f"{name}.edf")
        assert sfreq == 256, name
        assert data.shape == (19, 12 * 256), name
        assert result.source_sfreq_hz == 500
        assert np.abs(data).max() > 10


# --------------------------------------------------------------------------- memory


def _peak_bytes(src: Path, dst: Path) -> int:
    tracemalloc.start()
    try:
        standardise_recording(src, dst, chunk_s=60)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_recording_length(tmp_path: Path) -> None:
    # 512 Hz with an extra channel (the resampling path), 5 min against 30 min.
    short = standard_edf(tmp_path / "short.edf", 300, 512, extra=["ECG"])
    long = standard_edf(tmp_path / "long.edf", 1800, 512, extra=["ECG"])
    _peak_bytes(short, tmp_path / "warm.edf")  # first-use imports and caches
    peak_short = _peak_bytes(short, tmp_path / "s.edf")
    peak_long = _peak_bytes(long, tmp_path / "l.edf")
    whole_recording = 19 * 1800 * 512 * 8  # what loading the long one would take (float64)
    assert peak_long < 1.25 * peak_short + 2_000_000, (peak_short, peak_long)
    assert peak_long < whole_recording / 4


@pytest.mark.parametrize(("up", "down"), [(1, 2), (1, 3), (1, 4), (1, 8), (64, 125), (32, 25)])
@pytest.mark.parametrize("n", [1, 7, 1000, 1001])
def test_fast_decimation_equals_resample_poly(up: int, down: int, n: int) -> None:
    x = np.random.default_rng(n).standard_normal((3, n)) * 100
    expected = resample_poly(x, up, down, axis=1)
    got = resample(x, up, down)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9)


def test_eeg_modules_share_only_public_names() -> None:
    """One idea per module: what one module takes from another is public there."""
    import ast

    import szbench_worker.eeg

    package = Path(szbench_worker.eeg.__file__).parent
    found = []
    for path in sorted(package.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("szbench_"):
                found += [f"{path.name}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert not found, found
    assert len(list(package.glob("*.py"))) >= 8

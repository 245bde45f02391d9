"""The one EDF header reader: malformed headers name the file and the field, for the EEG code
and the runners alike; the runners can use it without the EEG stack."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from szbench_worker.eeg.edf_header import read_edf_header
from szbench_worker.eeg.errors import EEGError
from szbench_worker.eeg.labels import CHANNELS
from szbench_worker.eeg.standardise import inspect_recording
from szbench_worker.runner import edf_duration_s
from tests.worker.eeg_files import standard_edf

# Widths of the signal fields before the one named, per signal (EDF specification order).
_SIGNAL_OFFSETS = {
    "physical minimum": 16 + 80 + 8,
    "digital maximum": 16 + 80 + 8 * 4,
    "samples per data record": 16 + 80 + 8 * 5 + 80,
}


def _edf(tmp_path: Path, name: str = "bad.edf") -> tuple[Path, int]:
    path = standard_edf(tmp_path / name, 5)
    return path, int(path.read_bytes()[252:256])


def _patch(path: Path, offset: int, value: bytes, width: int = 8) -> Path:
    data = bytearray(path.read_bytes())
    data[offset : offset + width] = value.ljust(width)
    path.write_bytes(bytes(data))
    return path


def _signal_field(n_signals: int, name: str, signal: int) -> int:
    """Byte offset of signal ``signal``'s (0-based) field ``name``."""
    return 256 + n_signals * _SIGNAL_OFFSETS[name] + 8 * signal


def _both_readers_say(path: Path, pattern: str) -> None:
    """The EEG code and the runner give the same error, naming the file."""
    messages = []
    for read in (read_edf_header, inspect_recording, edf_duration_s):
        with pytest.raises(EEGError, match=rf"{path.name}: {pattern}") as info:
            read(path)
        messages.append(str(info.value))
    assert len(set(messages)) == 1, messages


@pytest.mark.parametrize(
    ("offset", "value", "pattern"),
    [
        (
            184,
            b"abc",
            r"wrong header: field 'number of bytes in header record' \(bytes 184-191\) "
            r"is 'abc', not an integer",
        ),
        (
            236,
            b"12x",
            r"wrong header: field 'number of data records' \(bytes 236-243\) "
            r"is '12x', not an integer",
        ),
        (
            244,
            b"one",
            r"wrong header: field 'duration of a data record' \(bytes 244-251\) "
            r"is 'one', not a number",
        ),
        (244, b"nan", r"wrong header: field 'duration of a data record' .* is 'nan'"),
        (244, b"-1", r"wrong header: data record duration -1.0 s"),
    ],
)
def test_malformed_fixed_field_is_named(
    tmp_path: Path, offset: int, value: bytes, pattern: str
) -> None:
    path, _ = _edf(tmp_path)
    _both_readers_say(_patch(path, offset, value), pattern)


def test_malformed_signal_count_is_named(tmp_path: Path) -> None:
    path, _ = _edf(tmp_path)
    _patch(path, 252, b"xx", width=4)
    _both_readers_say(
        path, r"wrong header: field 'number of signals' \(bytes 252-255\) is 'xx', not an integer"
    )


@pytest.mark.parametrize(
    ("field", "signal", "value", "pattern"),
    [
        ("physical minimum", 2, b"low", r"is 'low', not a number"),
        ("digital maximum", 0, b"inf", r"is 'inf'$"),
        ("samples per data record", 4, b"2.5", r"is '2.5', not an integer"),
    ],
)
def test_malformed_signal_field_names_the_signal(
    tmp_path: Path, field: str, signal: int, value: bytes, pattern: str
) -> None:
    path, n_signals = _edf(tmp_path)
    _patch(path, _signal_field(n_signals, field, signal), value)
    label = f"EEG {CHANNELS[signal].upper()}-REF"
    _both_readers_say(
        path, rf"wrong header: field '{field}' \(signal {signal + 1}, '{label}'\) {pattern}"
    )


def test_signal_without_samples_is_named(tmp_path: Path) -> None:
    path, n_signals = _edf(tmp_path)
    _patch(path, _signal_field(n_signals, "samples per data record", 1), b"0")
    _both_readers_say(path, r"wrong header: signal 2, 'EEG F3-REF', has 0 samples per data record")


def test_cut_header_and_cut_data_are_errors_for_the_runner_too(tmp_path: Path) -> None:
    path, _ = _edf(tmp_path, "cut.edf")
    whole = path.read_bytes()
    path.write_bytes(whole[:700])
    _both_readers_say(path, r"truncated header: the fields of \d+ signals need \d+ bytes")
    path.write_bytes(whole[: len(whole) - 10])
    _both_readers_say(path, r"truncated file: the header announces 5 data records of 1 s")
    path.write_bytes(whole[:100])
    _both_readers_say(path, r"not an EDF file: 100 bytes")


def test_unfinished_record_count_is_taken_from_the_size(tmp_path: Path) -> None:
    path, _ = _edf(tmp_path)
    _patch(path, 236, b"-1")
    header = read_edf_header(path)
    assert header.n_records == 5
    assert edf_duration_s(path) == header.duration_s == 5.0


def test_the_header_reader_needs_no_eeg_stack() -> None:
    """The runners import it: it must not load numpy, scipy or MNE."""
    code = (
        "import sys\n"
        "import szbench_worker.eeg.edf_header\n"
        "print(sorted(m for m in ('numpy', 'scipy', 'mne') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"

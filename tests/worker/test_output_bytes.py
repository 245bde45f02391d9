"""Output and log bytes that the database cannot store (issue 21 point 5): a NUL, or bytes
that are not UTF-8. The output is the submitter's ``invalid_output`` with a fixed message;
a log keeps its text with those bytes replaced. Storage on PostgreSQL through the pipeline:
``test_pipeline.py::test_output_the_database_cannot_hold_is_invalid_output``."""

from __future__ import annotations

from pathlib import Path

import pytest

from szbench.models import RunOutcome
from szbench_worker.docker_runner import DockerRunner
from szbench_worker.runner import UNSTORABLE_OUTPUT, Limits, check_output, log_text

HEADER = b"onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"
ROW = b"1.0\t2.0\tsz\tn/a\t%s\t2020-01-01 00:00:00\t60.0\n"
MiB = 1024**2


@pytest.mark.parametrize(
    "channels",
    [
        b"Fp1\x00",  # NUL: PostgreSQL's text refuses it
        b"Fp1\xff",  # not UTF-8
        b"\xed\xa0\x80",  # a UTF-16 surrogate written as UTF-8: not UTF-8 either
        b"\xc3",  # a truncated sequence
    ],
)
def test_unstorable_bytes_are_invalid_output_with_a_fixed_message(
    tmp_path: Path, channels: bytes
) -> None:
    tsv = tmp_path / "rec_events.tsv"
    tsv.write_bytes(HEADER + ROW % channels)
    check = check_output(tsv, contract_name="rec_events.tsv", recording_duration_s=60.0)
    assert check.outcome is RunOutcome.INVALID_OUTPUT
    assert check.message == f"/output/rec_events.tsv: {UNSTORABLE_OUTPUT}"
    assert check.annotations is None


def test_utf8_text_beyond_ascii_is_fine(tmp_path: Path) -> None:
    tsv = tmp_path / "rec_events.tsv"
    tsv.write_bytes(HEADER + ROW % "Fp1 ü µV".encode())
    check = check_output(tsv, contract_name="rec_events.tsv", recording_duration_s=60.0)
    assert check.outcome is RunOutcome.OK, check.message
    assert check.annotations is not None
    assert check.annotations.events.tolist() == [[1.0, 3.0]]


def test_log_text_holds_no_nul() -> None:
    assert log_text(b"a\x00b\xffc") == "a\ufffdb\ufffdc"


@pytest.mark.docker
def test_a_container_that_writes_nul_bytes(
    docker_client: object, test_images: dict[str, str], recording: Path, tmp_path: Path
) -> None:
    """The real runner: the TSV with a NUL is refused, the log with one is kept readable."""
    runner = DockerRunner(docker_client, work_dir=tmp_path / "work", host="test-host")  # type: ignore[arg-type]
    limits = Limits(memory_bytes=96 * MiB, cpus=1.0, pids=64, timeout_s=120.0, output_bytes=1 * MiB)
    result = runner.run(
        image=test_images["nulbytes"], recording=recording, output_dir=tmp_path / "o", limits=limits
    )
    assert result.outcome is RunOutcome.INVALID_OUTPUT, result.admin_log
    assert result.submitter_message.endswith(UNSTORABLE_OUTPUT)
    assert "secret" not in result.submitter_message
    assert result.output_tsv is None
    assert "\x00" not in result.admin_log
    assert "before\ufffdafter \ufffd\ufffd done" in result.admin_log

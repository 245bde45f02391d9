"""The output check shared by every runner: the algorithm's TSV read with the scorer's parser,
its declared duration compared with the recording's, and every reason made safe to show."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from szbench.models import RunOutcome
from szbench_worker.runner.contract import CONTAINER_OUTPUT_DIR

if TYPE_CHECKING:
    from szbench_scoring import Annotations

#: A hypothesis whose recordingDuration differs from the recording's by more than this is
#: rejected: SzCORE builds its masks from ``int(recordingDuration)``, so a wrong duration
#: silently changes the false-positive rate.
DURATION_TOLERANCE_S = 1.0

#: Longest snippet of algorithm-controlled text (a parser's reason) shown to a submitter.
MAX_SUBMITTER_DETAIL = 300

#: Why an output that the database cannot store is refused. Fixed: no byte of the output is
#: quoted (a NUL would break the message's own storage, and on held-out data the output is
#: the algorithm's channel).
UNSTORABLE_OUTPUT = "not UTF-8 text, or it holds a NUL byte; write plain UTF-8 text."


@dataclass(frozen=True)
class OutputCheck:
    outcome: RunOutcome
    message: str
    annotations: Annotations | None = None


def _snippet(text: str, *paths: Path | str) -> str:
    """Algorithm-controlled text made safe to show: host paths removed, length capped."""
    for p in sorted({str(p) for p in paths if str(p)}, key=len, reverse=True):
        text = text.replace(p, "<hidden>")
    text = re.sub(r"\s+", " ", text).strip()
    if len(text) > MAX_SUBMITTER_DETAIL:
        text = text[: MAX_SUBMITTER_DETAIL - 3] + "..."
    return text


def _row_text(tsv: Path, row: int) -> str | None:
    """Line ``row`` (1-based, the header is 1) of the algorithm's TSV, so its owner sees what
    the parser refused; shown only where :mod:`szbench.disclosure` allows details."""
    try:
        with tsv.open("rb") as handle:
            for number, line in enumerate(handle, 1):
                if number == row:
                    return line[:MAX_SUBMITTER_DETAIL].decode("utf-8", "replace").rstrip("\r\n")
    except OSError:
        return None
    return None


def _storable(data: bytes) -> bool:
    """Whether the TSV's bytes are text every database the platform runs on can hold:
    UTF-8 (strict: no surrogates) without NUL, which PostgreSQL's text refuses."""
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def check_output(
    tsv: Path,
    *,
    contract_name: str,
    recording_duration_s: float | None,
    hide: tuple[Path, ...] = (),
) -> OutputCheck:
    """Validate an algorithm's TSV: text the database can store (see :func:`_storable`),
    then the scorer's parser.

    ``contract_name`` is what the submitter knows the file as (``/output/$OUTPUT``); host
    paths in ``hide`` never reach the message.
    """
    # Deferred: the runner interface loads without numpy; only this check needs the scorer.
    from szbench_scoring import AnnotationError, parse_annotations

    shown = f"{CONTAINER_OUTPUT_DIR}/{contract_name}"
    if tsv.is_symlink() or (tsv.exists() and not tsv.is_file()):
        return OutputCheck(RunOutcome.INVALID_OUTPUT, f"{shown} must be a regular file.")
    if not tsv.is_file():
        return OutputCheck(RunOutcome.NO_OUTPUT, f"The algorithm wrote no {shown}.")
    try:
        data = tsv.read_bytes()
    except OSError as exc:
        return OutputCheck(RunOutcome.INVALID_OUTPUT, f"{shown}: {_snippet(str(exc), tsv, *hide)}")
    if not _storable(data):
        return OutputCheck(RunOutcome.INVALID_OUTPUT, f"{shown}: {UNSTORABLE_OUTPUT}")
    try:
        annotations = parse_annotations(data, str(tsv))
    except AnnotationError as exc:
        row = getattr(exc, "row", None)
        where = f" row {row}" if row is not None else ""
        reason = str(getattr(exc, "reason", exc))
        quoted = _row_text(tsv, row) if row is not None else None
        if quoted is not None:
            # Whitespace collapses in the snippet: tabs show as spaces, which is enough to
            # spot the wrong field.
            reason += f" (the row: {quoted})"
        reason = _snippet(reason, tsv, *hide)
        return OutputCheck(RunOutcome.INVALID_OUTPUT, f"{shown}{where}: {reason}")
    except ValueError as exc:
        reason = _snippet(str(exc), tsv, *hide)
        return OutputCheck(RunOutcome.INVALID_OUTPUT, f"{shown}: {reason}")
    declared = float(annotations.recording_duration_s)
    if (
        recording_duration_s is not None
        and math.isfinite(declared)
        and abs(declared - recording_duration_s) > DURATION_TOLERANCE_S
    ):
        return OutputCheck(
            RunOutcome.INVALID_OUTPUT,
            f"{shown}: recordingDuration {declared:g} s does not match the recording's "
            f"duration ({recording_duration_s:g} s).",
        )
    return OutputCheck(RunOutcome.OK, "ok", annotations)

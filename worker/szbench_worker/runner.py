"""The runner interface: run one algorithm on one recording and say what happened.

Everything above the runner (the Celery pipeline, the CLI) talks to :class:`Runner` and
gets a :class:`RunResult` back; it never sees the docker SDK. Two implementations (and a
fake for unit tests of the logic above a runner, in ``tests/worker/fakes.py``):

- :class:`szbench_worker.docker_runner.DockerRunner`: the real, sandboxed one;
- :class:`szbench_worker.local_runner.LocalProcessRunner`: a *trusted* local command for the
  embedded demo when no Docker engine is available (not sandboxed, labelled as such).

Both decide how a run ended with the same :func:`classify`.

The algorithm contract (``docs/algorithm-contract.md``) is the SzCORE challenge's: the
container reads ``/data/$INPUT`` (one EDF) and writes ``/output/$OUTPUT`` (one TSV).

Who sees what: :attr:`RunResult.submitter_message` is the detailed reason: never a host path
or the container's logs, but it may quote a bounded snippet of what the algorithm wrote, so
it is shown only to admins and to the owner of a run on a public sample. Everyone else reads
a fixed text per outcome (:mod:`szbench.results.disclosure`): an algorithm that has read
hidden EEG could otherwise smuggle it out through an error message, its exit code or its
outcome. :attr:`RunResult.admin_log` has everything, for admins.
"""

from __future__ import annotations

import functools
import math
import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from szbench.models import RunOutcome
from szbench_worker.eeg.edf_header import read_edf_header

if TYPE_CHECKING:
    from szbench.config import Settings
    from szbench_scoring import Annotations

#: Where the recording and the output appear inside the container (the SzCORE contract).
CONTAINER_DATA_DIR = "/data"
CONTAINER_OUTPUT_DIR = "/output"

#: A hypothesis whose recordingDuration differs from the recording's by more than this is
#: rejected: SzCORE builds its masks from ``int(recordingDuration)``, so a wrong duration
#: silently changes the false-positive rate.
DURATION_TOLERANCE_S = 1.0

#: Longest snippet of algorithm-controlled text (a parser's reason) shown to a submitter.
MAX_SUBMITTER_DETAIL = 300


class RunnerError(Exception):
    """An infrastructure fault (engine unreachable, staging failed): retry, not the submitter's."""


class ImageError(RunnerError):
    """The algorithm image cannot be loaded, pulled or found. The message is submitter-safe."""


class ImageRefused(ImageError):
    """The image archive itself is over a limit or malformed: the submitter's fault, never
    retried. The message is submitter-safe (it names the limit and its setting)."""


@dataclass(frozen=True)
class Limits:
    """Resources and sandbox of one run. Built from settings with :meth:`from_settings`.

    ``user`` is ``"uid[:gid]"`` inside the container (``None`` keeps the image's own user).
    ``network`` is ``False`` for every algorithm run; it exists so tests can show that the
    flag is what closes the network.
    """

    memory_bytes: int = 2 * 1024**3
    cpus: float = 1.0
    pids: int = 256
    timeout_s: float = 900.0
    tmpfs_bytes: int = 256 * 1024**2
    output_bytes: int = 16 * 1024**2
    log_bytes: int = 1024**2
    user: str | None = None
    #: Entries (files, folders, links) a run may leave in /output: each costs an inode.
    output_files: int = 1000
    network: bool = False

    def __post_init__(self) -> None:
        positive = ("memory_bytes", "pids", "tmpfs_bytes", "output_bytes", "log_bytes")
        for name in (*positive, "output_files"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"Limits.{name} must be a positive integer, got {value!r}")
        for name in ("cpus", "timeout_s"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
                raise ValueError(f"Limits.{name} must be a positive number, got {value!r}")
        if self.memory_bytes < 6 * 1024**2:
            # Docker refuses less than 6 MiB; say so here, naming the field.
            raise ValueError("Limits.memory_bytes must be at least 6 MiB")
        if self.user is not None and not re.fullmatch(
            r"[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)?", self.user
        ):
            raise ValueError(f"Limits.user must look like 'uid[:gid]', got {self.user!r}")

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        """The limits configured for this worker (``SZBENCH_RUNNER_*``)."""
        return cls(
            memory_bytes=settings.runner_memory_bytes,
            cpus=settings.runner_cpus,
            pids=settings.runner_pids,
            timeout_s=settings.runner_timeout_s,
            tmpfs_bytes=settings.runner_tmpfs_bytes,
            output_bytes=settings.runner_output_bytes,
            log_bytes=settings.runner_log_bytes,
            user=settings.runner_user or None,
            output_files=settings.runner_output_files,
        )


def gpus_from_settings(settings: Settings) -> tuple[str, ...]:
    """The GPU device ids this worker owns (``SZBENCH_RUNNER_GPUS="0"``); empty for CPU."""
    return tuple(g.strip() for g in settings.runner_gpus.split(",") if g.strip())


@dataclass(frozen=True)
class GpuInfo:
    """Which GPU(s) a run had, for the record next to its results."""

    device_ids: tuple[str, ...]
    model: str | None = None
    driver: str | None = None


@dataclass
class RunResult:
    """What one run produced. ``annotations`` is set exactly when ``outcome`` is OK.

    ``outcome`` is never ``INFRASTRUCTURE_ERROR``: a runner raises :class:`RunnerError` for
    what is not the algorithm's doing, and the pipeline records that.
    """

    outcome: RunOutcome
    exit_code: int | None
    duration_s: float
    peak_memory_bytes: int | None
    submitter_message: str
    admin_log: str
    output_tsv: Path | None
    annotations: Annotations | None
    image_digest: str
    worker_host: str
    gpu: GpuInfo | None = None
    #: ``"docker"`` for a sandboxed container; ``"local-process"`` for a trusted local run.
    sandbox: str = "docker"


class Runner(Protocol):
    """Runs one algorithm image on one recording."""

    def run(
        self,
        *,
        image: str,
        recording: Path,
        output_dir: Path,
        limits: Limits,
        gpus: tuple[str, ...] = (),
    ) -> RunResult:
        """Run ``image`` on ``recording``; the validated TSV is copied into ``output_dir``."""
        ...

    def remove_leftovers(self) -> int:
        """Remove what this process's interrupted runs left behind (containers, staging).

        Called by a worker after a run was interrupted, never during one; returns the number
        of containers removed.
        """
        ...


# --- the contract's file names and the recording's duration -------------------------------


def output_name_for(recording: Path) -> str:
    """The ``$OUTPUT`` file name for a recording: BIDS ``..._eeg.edf`` -> ``..._events.tsv``.

    >>> output_name_for(Path("sub-01_ses-01_task-szMonitoring_run-00_eeg.edf"))
    'sub-01_ses-01_task-szMonitoring_run-00_events.tsv'
    >>> output_name_for(Path("rec.edf"))
    'rec.tsv'
    """
    stem = recording.stem
    if stem.endswith("_eeg"):
        stem = stem[: -len("_eeg")] + "_events"
    return stem + ".tsv"


def edf_duration_s(path: Path) -> float:
    """Duration of an EDF/EDF+/BDF file from its header (records x record duration).

    Read with the project's one header reader (standard library only, so the runner does not
    need MNE or numpy), with the same checks as dataset import.

    Raises
    ------
    EEGError
        A ValueError naming the file and the field, when the header is not a valid EDF/BDF
        header or the file is shorter than the header announces.
    """
    return read_edf_header(path).duration_s


# --- output validation (shared by every runner) ------------------------------------------


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
    the parser refused; shown only where :mod:`szbench.results.disclosure` allows details."""
    try:
        with tsv.open("rb") as handle:
            for number, line in enumerate(handle, 1):
                if number == row:
                    return line[:MAX_SUBMITTER_DETAIL].decode("utf-8", "replace").rstrip("\r\n")
    except OSError:
        return None
    return None


def check_output(
    tsv: Path,
    *,
    contract_name: str,
    recording_duration_s: float | None,
    hide: tuple[Path, ...] = (),
) -> OutputCheck:
    """Validate an algorithm's TSV with the scorer's parser.

    ``contract_name`` is what the submitter knows the file as (``/output/$OUTPUT``); host
    paths in ``hide`` never reach the message.
    """
    from szbench_scoring import AnnotationError, read_annotations

    shown = f"{CONTAINER_OUTPUT_DIR}/{contract_name}"
    if tsv.is_symlink() or (tsv.exists() and not tsv.is_file()):
        return OutputCheck(RunOutcome.INVALID_OUTPUT, f"{shown} must be a regular file.")
    if not tsv.is_file():
        return OutputCheck(RunOutcome.NO_OUTPUT, f"The algorithm wrote no {shown}.")
    try:
        annotations = read_annotations(tsv)
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
    except (UnicodeDecodeError, ValueError, OSError) as exc:
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


# --- how a run ended (shared by every runner) ---------------------------------------------


@dataclass(frozen=True)
class RunEnd:
    """What a runner saw when the algorithm's process ended, before reading its output.

    ``oom_killed``: the kernel's OOM killer struck inside the run. ``output_over_limit``:
    ``/output`` passed ``Limits.output_bytes`` or ``Limits.output_files`` (or hid part of
    itself), however the runner measured it.
    """

    exit_code: int | None
    timed_out: bool = False
    oom_killed: bool = False
    output_over_limit: bool = False


def classify(end: RunEnd, limits: Limits) -> tuple[RunOutcome, str] | None:
    """The outcome of a run and its submitter message from how it ended; ``None`` when the
    process ended cleanly and only its output TSV can tell (:func:`check_output`).

    One order for every runner, the first that holds wins:

    1. timed out: the kill at the wall-clock limit explains whatever followed it;
    2. OOM-killed with a non-zero exit (an OOM kill of a child that the algorithm survived,
       exiting 0, did not end the run);
    3. output over its caps: the watchdog's kill makes a non-zero exit of its own, and a run
       that filled ``/output`` and then crashed is still told about its output;
    4. a non-zero (or unknown) exit code: crashed.

    Examples
    --------
    >>> classify(RunEnd(exit_code=137, timed_out=True, oom_killed=True), Limits())[0]
    <RunOutcome.TIMEOUT: 'timeout'>
    >>> classify(RunEnd(exit_code=1, output_over_limit=True), Limits())[0]
    <RunOutcome.INVALID_OUTPUT: 'invalid_output'>
    >>> classify(RunEnd(exit_code=0, oom_killed=True), Limits()) is None
    True
    """
    if end.timed_out:
        return RunOutcome.TIMEOUT, timeout_message(limits)
    if end.oom_killed and end.exit_code != 0:
        return RunOutcome.OUT_OF_MEMORY, oom_message(limits)
    if end.output_over_limit:
        return RunOutcome.INVALID_OUTPUT, output_too_big_message(limits)
    if end.exit_code != 0:
        return RunOutcome.CRASHED, crashed_message(end.exit_code)
    return None


def timeout_message(limits: Limits) -> str:
    return f"The algorithm ran past the time limit of {limits.timeout_s:g} s and was stopped."


def oom_message(limits: Limits) -> str:
    return (
        f"The algorithm exceeded the memory limit of {describe_limit(limits.memory_bytes)} "
        "and was killed."
    )


def output_too_big_message(limits: Limits) -> str:
    return (
        f"The algorithm wrote more than {describe_limit(limits.output_bytes)} to "
        f"{CONTAINER_OUTPUT_DIR}, or more than {limits.output_files} files there (or made "
        "part of it unreadable); the output was discarded."
    )


def crashed_message(exit_code: int | None) -> str:
    return f"The algorithm exited with code {exit_code}."


def describe_limit(n_bytes: int) -> str:
    """``134217728`` -> ``'128 MiB'``."""
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n_bytes >= size:
            value = n_bytes / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n_bytes} bytes"


def work_dir_from_settings(settings: Settings) -> Path:
    """Where runs stage their files on this host: ``SZBENCH_RUNNER_WORK_DIR``, by default
    ``<data_dir>/runs`` (the one default every runner, sweep and worker start-up uses)."""
    return Path(settings.runner_work_dir or Path(settings.data_dir) / "runs")


def worker_host() -> str:
    """The name this worker records with its results."""
    return os.environ.get("SZBENCH_WORKER_HOST") or socket.gethostname()


@functools.lru_cache(maxsize=16)
def describe_gpus(device_ids: tuple[str, ...]) -> GpuInfo | None:
    """Model and driver of the given GPUs from ``nvidia-smi`` (ids only when it is absent)."""
    if not device_ids:
        return None
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return GpuInfo(device_ids=device_ids)
    try:
        out = subprocess.run(
            [
                smi,
                "--query-gpu=name,driver_version",
                "--format=csv,noheader",
                "-i",
                ",".join(device_ids),
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return GpuInfo(device_ids=device_ids)
    rows = [line.split(",") for line in out.strip().splitlines() if "," in line]
    models = sorted({r[0].strip() for r in rows})
    drivers = sorted({r[1].strip() for r in rows})
    return GpuInfo(device_ids, ", ".join(models) or None, ", ".join(drivers) or None)


def bounded(text: str, limit: int) -> str:
    """Keep at most ``limit`` characters: the head and the tail, with a marker between."""
    if len(text) <= limit:
        return text
    half = max(limit // 2 - 40, 0)
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def make_runner(settings: Settings) -> Runner:
    """The runner this worker is configured for (``SZBENCH_RUNNER_BACKEND``).

    ``docker``: the sandboxed :class:`~szbench_worker.docker_runner.DockerRunner` (an error
    when no engine answers). ``local``: the trusted
    :class:`~szbench_worker.local_runner.LocalProcessRunner` running
    ``runner_local_command`` (the embedded demo only). ``auto``: docker when an engine
    answers, else local.
    """
    backend = settings.runner_backend
    if backend not in ("auto", "docker", "local"):
        raise ValueError(f"SZBENCH_RUNNER_BACKEND must be auto, docker or local, not {backend!r}")
    if backend != "local":
        from szbench_worker.docker_runner.client import engine_available
        from szbench_worker.docker_runner.run import DockerRunner

        if backend == "docker" or engine_available():
            return DockerRunner.from_settings(settings)
    from szbench_worker.local_runner import LocalProcessRunner

    return LocalProcessRunner(
        settings.runner_local_command, work_dir=work_dir_from_settings(settings)
    )

"""Local evaluation (``szbench evaluate``): one algorithm on a local dataset, end to end.

The same tasks as production (start, one task per recording, finalize) run through the
embedded SQLite-backed queue and an in-process worker; results go to the local database
under ``data_dir``, so running the same image on the same data again reuses every finished
recording (and an interrupted evaluation picks up where it stopped: the worker's start-up
recovery sends its unfinished work again, see :mod:`szbench_worker.embedded`).

This module holds the orchestration; the CLI only parses options, shows progress and
prints. Everything here writes through the platform's services.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from szbench import db, migrate, queue
from szbench.algorithms import service as algorithms
from szbench.algorithms.image_check import ArchiveLimits
from szbench.auth import service as users
from szbench.config import get_settings
from szbench.datasets import service as datasets
from szbench.db import session_scope
from szbench.errors import NotFound, SzbenchError
from szbench.evaluations import service as evaluations
from szbench.models import DatasetKind, Evaluation, EvaluationStatus, RecordingRun
from szbench.queue import TASK_FINALIZE, TASK_RUN_RECORDING, TASK_START_EVALUATION
from szbench_scoring import AnnotationError, parse_annotations
from szbench_worker import images, pipeline
from szbench_worker.local_runner import LocalProcessRunner
from szbench_worker.runner import ImageError

LOCAL_USER = "local@szbench.invalid"

Say = Callable[[str], None]
"""Tells the operator what is happening (a line of plain text, printed literally)."""

OnProgress = Callable[[str, int, int], None]
"""Called while waiting with (status, recordings done, recordings in total)."""


class LocalEvaluationError(Exception):
    """The local evaluation cannot start: the operator's input or machine (printed, exit 2)."""


@dataclass(frozen=True)
class Source:
    """What runs the algorithm, and under which digest its runs are recorded."""

    runner: Any
    digest: str
    reference: str
    sandbox: str


@dataclass(frozen=True)
class RecordingReport:
    """What the platform stored of one recording's run (the operator's own data: all of it)."""

    path: str
    subject: str
    outcome: str | None
    message: str
    reused: bool
    exit_code: int | None
    wall_time_s: float | None
    peak_memory_bytes: int | None
    event: dict[str, int | None]
    detections: list[dict[str, Any]] | None
    #: The GPU the run had, as its provenance records it ("NVIDIA H200, driver 580.x"); ""
    #: for a run without one.
    gpu: str = ""

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class LocalResult:
    evaluation_id: int
    status: EvaluationStatus
    message: str | None
    report: dict[str, Any] | None
    recordings: list[RecordingReport] = field(default_factory=list)


def dataset_content_key(root: Path) -> str:
    """sha256 over every file's relative path and bytes (the prepared-dataset cache key)."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        h.update(rel.encode() + b"\0")
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def prepared_dataset(directory: Path, data_dir: Path, say: Say) -> tuple[Path, bool]:
    """The prepared folder for ``directory``, and whether it was a raw BIDS tree.

    A folder with ``manifest.json`` is already prepared. Otherwise it is prepared once into
    ``data_dir/datasets/<content hash>`` and reused while the input's bytes stay the same
    (an interrupted preparation resumes: the preparer keeps what it finished).
    """
    if (directory / "manifest.json").is_file():
        return directory, False
    key = dataset_content_key(directory)
    target = data_dir / "datasets" / key[:32]
    done_marker = target / ".szbench-prepared"
    if done_marker.is_file():
        say(f"Using the prepared copy of {directory} ({target}).")
        return target, True
    # Deferred: preparing needs the EEG stack (scipy, MNE); a prepared dataset does not.
    from szbench_worker.datasets import DatasetError, prepare_dataset

    say(f"Preparing {directory} (standardising the EEG once; cached by content)...")
    try:
        report = prepare_dataset(directory, target)
    except DatasetError as exc:
        raise LocalEvaluationError(str(exc)) from exc
    for problem in report.problems:
        say(f"skipped {problem}")
    if not report.manifest.recordings:
        raise LocalEvaluationError("No recording could be prepared.")
    done_marker.write_text(key + "\n")
    return target, True


def open_source(
    image: str | None,
    tar: Path | None,
    local_process: str | None,
    *,
    gpus: tuple[str, ...] = (),
) -> Source:
    """The runner for exactly one of an image on the engine, a tarball or a local command;
    ``gpus``: the engine must be able to give the image these (``--gpus``), checked now."""
    source = _open_source(image, tar, local_process)
    if gpus:
        from szbench_worker import docker_runner

        refused = docker_runner.gpu_refusal(source.runner.client, source.digest, gpus)
        if refused is not None:
            raise LocalEvaluationError(
                f"This Docker engine cannot give a container GPU {','.join(gpus)}: {refused}. "
                "A GPU needs the NVIDIA driver and the NVIDIA container toolkit registered "
                "with dockerd (nvidia-ctk runtime configure --runtime=docker, then restart "
                "it); `szbench gpu-check` checks a host."
            )
    return source


def _open_source(image: str | None, tar: Path | None, local_process: str | None) -> Source:
    if local_process is not None:
        local = LocalProcessRunner(local_process, cwd=Path.cwd())
        return Source(local, local.digest, local_process, "trusted local process (NOT sandboxed)")
    # Deferred here and in open_source: a local process never loads the docker SDK.
    from szbench_worker import docker_runner

    if not docker_runner.engine_available():
        raise LocalEvaluationError(
            "No Docker engine answers. Start one (scripts/test-services.sh), or run the bundled "
            "baseline as a trusted local process:\n"
            "  szbench evaluate --local-process 'python3 examples/baseline/detect.py' "
            "--dataset DIR"
        )
    settings = get_settings()
    runner = docker_runner.DockerRunner.from_settings(settings)
    try:
        if tar is not None:
            # The next evaluation of the same, unchanged tarball loads nothing.
            id_cache = docker_runner.TarballIdCache(Path(settings.data_dir) / "tarball-ids.json")
            info = docker_runner.load_image_tarball(
                tar, runner.client, limits=ArchiveLimits.from_settings(settings), id_cache=id_cache
            )
            return Source(runner, info.digest, tar.name, "docker sandbox")
        assert image is not None
        try:
            info = docker_runner.inspect_image(image, runner.client)
        except ImageError:
            info = docker_runner.pull_image(image, runner.client)
    except ImageError as exc:
        raise LocalEvaluationError(str(exc)) from exc
    return Source(runner, info.digest, image, "docker sandbox")


def use_embedded_mode(*, gpus: str | None = None) -> Path:
    """Switch this process to the embedded queue (no Redis) and migrate its database;
    the data directory. ``gpus``: the GPU this process's worker owns
    (``SZBENCH_RUNNER_GPUS``, as a gpu-queue worker's), for ``szbench evaluate --gpus``."""
    os.environ["SZBENCH_BROKER_URL"] = ""
    if gpus is not None:
        os.environ["SZBENCH_RUNNER_GPUS"] = gpus
    get_settings.cache_clear()
    db.reset_engine()
    settings = get_settings()
    migrate.upgrade(settings.effective_database_url)
    return Path(settings.data_dir)


def register(
    session: Any,
    *,
    source: Source,
    prepared: Path,
    name: str,
    dataset_slug: str | None,
    public_sample: bool,
    reuse: bool,
    wants_gpu: bool = False,
) -> tuple[int, bool]:
    """The evaluation to wait for, and whether it continues one left unfinished earlier.
    ``wants_gpu``: the version asks for a GPU, so its evaluation goes to the gpu queue and
    each run gets the worker's GPU, as an upload that wants one does."""
    try:
        user = users.get_user_by_email(session, LOCAL_USER)
    except NotFound:
        user = users.create_user(session, email=LOCAL_USER, password=None, name="Local user")
    algorithm = algorithms.find_algorithm(session, owner=user, name=name)
    if algorithm is None:
        algorithm = algorithms.create_algorithm(
            session, owner=user, name=name, title="Local evaluations" if name == "local" else name
        )
    version = algorithms.register_trusted_version(
        session,
        algorithm=algorithm,
        digest=source.digest,
        reference=source.reference,
        message="Registered by szbench evaluate.",
        wants_gpu=wants_gpu,
    )
    try:
        _, checksum = datasets.read_manifest(prepared)
        slug = dataset_slug or f"local-{checksum.rsplit(':', 1)[-1][:16]}"
        dataset = datasets.find_dataset(session, slug)
        if dataset is None:
            dataset = datasets.create_dataset(
                session,
                slug=slug,
                title=slug,
                # Held-out unless asked: the web UI then shows annotations to admins only.
                kind=DatasetKind.PUBLIC_SAMPLE if public_sample else DatasetKind.HELD_OUT,
                # --public-sample is the operator's explicit choice.
                confirm_public=public_sample,
            )
        dataset_version = datasets.ensure_version(session, dataset, prepared_path=prepared)
    except SzbenchError as exc:
        raise LocalEvaluationError(f"{prepared}: {exc.detail}") from exc
    evaluation = evaluations.unfinished_evaluation(
        session, algorithm_version=version, dataset_version=dataset_version
    )
    if evaluation is not None:
        return evaluation.id, True
    evaluation = evaluations.create_evaluation(
        session,
        algorithm_version=version,
        dataset_version=dataset_version,
        created_by=user,
        reuse=reuse,
        # The operator's own machine and data: no platform quota applies.
        charge=False,
    )
    return evaluation.id, False


def wait(evaluation_id: int, on_progress: OnProgress, poll_s: float = 0.1) -> EvaluationStatus:
    """Poll the evaluation until it is finished; its final status."""
    while True:
        with session_scope() as session:
            ev = session.get_one(Evaluation, evaluation_id)
            status, done, total = ev.status, ev.recordings_done, ev.recordings_total
        on_progress(status.value, done, total)
        if status.finished:
            return status
        time.sleep(poll_s)


def run_evaluation(
    source: Source,
    *,
    prepared: Path,
    name: str,
    dataset_slug: str | None,
    public_sample: bool,
    reuse: bool,
    say: Say,
    on_started: Callable[[int], None],
    on_progress: OnProgress,
    wants_gpu: bool = False,
) -> int:
    """Register everything, drive the embedded worker until the evaluation is finished; its id.

    ``on_started`` gets the evaluation's id once it is registered. A KeyboardInterrupt
    stops the worker and propagates: finished recordings are kept for the next invocation.
    """
    # The worker may run other evaluations' recordings too (one interrupted earlier, or a
    # concurrent `szbench evaluate` on this data directory): each with the image resolved
    # from its own version, never with this command's.
    pipeline.set_dependencies(
        pipeline.Dependencies(
            runner=source.runner, resolve_image=images.resolver_for(source.runner, get_settings())
        )
    )
    worker = None
    try:
        sent: list[tuple[str, str, dict[str, Any]]] = []
        queue.set_sender(lambda task, q, kwargs: sent.append((task, q, kwargs)))
        try:
            with session_scope() as session:
                evaluation_id, continued = register(
                    session,
                    source=source,
                    prepared=prepared,
                    name=name,
                    dataset_slug=dataset_slug,
                    public_sample=public_sample,
                    reuse=reuse,
                    wants_gpu=wants_gpu,
                )
            if not continued:
                _start_here(evaluation_id, sent)
        finally:
            queue.set_sender(None)
            # What is left to do goes to the queue, for the worker below (or the next one).
            queue.reset_celery()
            for task, on_queue, kwargs in sent:
                queue.send_task(task, queue=on_queue, **kwargs)
        if continued:
            # An earlier invocation was killed mid-run; the worker's start-up recovery sends
            # its unfinished work again: wait for that one, run nothing twice.
            say(f"Continuing evaluation {evaluation_id}, interrupted earlier.")
        on_started(evaluation_id)
        if not _finished(evaluation_id):
            # Deferred: an evaluation that every reused result finished never loads the
            # Celery worker (its start was most of the time of such a run).
            from szbench_worker.embedded import start_embedded_worker

            worker = start_embedded_worker(upgrade_database=False)
        wait(evaluation_id, on_progress)
        return evaluation_id
    finally:
        if worker is not None:
            worker.stop()
        pipeline.set_dependencies(None)


def _start_here(evaluation_id: int, sent: list[tuple[str, str, dict[str, Any]]]) -> None:
    """Run the new evaluation's start task in this thread, and its finalize when the start
    left no recording to run (every result reused): such an evaluation needs no worker,
    whose start and stop were most of the time of a run that starts no container.

    The same task bodies as the worker's; ``sent`` holds what they sent, minus what ran
    here (an exception leaves the task that raised in it, to be sent to the queue).
    """

    def message(task: str) -> tuple[str, str, dict[str, Any]] | None:
        return next(
            (m for m in sent if m[0] == task and m[2] == {"evaluation_id": evaluation_id}), None
        )

    start = message(TASK_START_EVALUATION)
    if start is None:
        return
    pipeline.start_evaluation(evaluation_id)
    sent.remove(start)
    finalize = message(TASK_FINALIZE)
    if finalize is None or any(m[0] == TASK_RUN_RECORDING for m in sent):
        return
    pipeline.finalize_evaluation(evaluation_id)
    sent.remove(finalize)


def _finished(evaluation_id: int) -> bool:
    with session_scope() as session:
        return session.get_one(Evaluation, evaluation_id).status.finished


def _detections(run: RecordingRun) -> list[dict[str, Any]] | None:
    if run.detections_tsv is None:
        return None
    try:
        found = parse_annotations(run.detections_tsv, source=run.recording.eeg_path)
    except AnnotationError:
        return None
    return [
        {"onset_s": float(start), "duration_s": float(end - start), "event_type": str(kind)}
        for (start, end), kind in zip(found.events, found.event_types, strict=True)
    ]


def result_of(evaluation_id: int, *, strip_eeg_prefix: bool) -> LocalResult:
    """What the platform stored of the evaluation: scores and every recording's run."""
    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        recordings = []
        for run in sorted(ev.runs, key=lambda r: r.id):
            path = run.recording.eeg_path
            if strip_eeg_prefix and path.startswith("eeg/"):
                path = path[len("eeg/") :]
            recordings.append(
                RecordingReport(
                    path=path,
                    subject=run.recording.subject,
                    outcome=run.outcome.value if run.outcome else None,
                    message=run.submitter_message,
                    reused=run.reused_from_id is not None,
                    exit_code=run.exit_code,
                    wall_time_s=run.wall_time_s,
                    peak_memory_bytes=run.peak_memory_bytes,
                    event={"tp": run.event_tp, "fp": run.event_fp, "fn": run.event_fn},
                    detections=_detections(run),
                    gpu=", driver ".join(x for x in (run.gpu_model, run.gpu_driver) if x),
                )
            )
        return LocalResult(
            evaluation_id=evaluation_id,
            status=ev.status,
            message=ev.message,
            report=dict(ev.result.report) if ev.result is not None else None,
            recordings=recordings,
        )

"""``szbench evaluate``: run an algorithm on a local dataset end to end, in embedded mode.

The same tasks as production (start, one task per recording, finalize) run through the
embedded SQLite-backed queue and an in-process worker; results go to the local database
under ``data_dir``, so running the same image on the same data again reuses every
finished recording (and an interrupted evaluation picks up where it stopped).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

console = Console(stderr=True)

LOCAL_USER = "local@szbench.invalid"


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


def prepared_dataset(directory: Path, data_dir: Path) -> tuple[Path, bool]:
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
        console.print(
            f"Using the prepared copy of {escape(str(directory))} ({escape(str(target))})."
        )
        return target, True
    from szbench_worker.datasets import DatasetError, prepare_dataset

    console.print(
        f"Preparing {escape(str(directory))} (standardising the EEG once; cached by content)..."
    )
    try:
        report = prepare_dataset(directory, target)
    except DatasetError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from exc
    for problem in report.problems:
        console.print(f"[yellow]skipped {escape(str(problem))}[/yellow]")
    if not report.manifest.recordings:
        console.print("[red]No recording could be prepared.[/red]")
        raise typer.Exit(2)
    done_marker.write_text(key + "\n")
    return target, True


def _runner_and_digest(
    image: str | None, tar: Path | None, local_process: str | None
) -> tuple[Any, str, str, str]:
    """(runner, digest, reference to record, sandbox label)."""
    from szbench.config import get_settings

    settings = get_settings()
    if local_process is not None:
        from szbench_worker.local_runner import LocalProcessRunner

        local = LocalProcessRunner(local_process, cwd=Path.cwd())
        return local, local.digest, local_process, "trusted local process (NOT sandboxed)"
    from szbench_worker import docker_runner
    from szbench_worker.runner import ImageError

    if not docker_runner.engine_available():
        console.print(
            "[red]No Docker engine answers.[/red] Start one (scripts/test-services.sh), or run "
            "the bundled baseline as a trusted local process:\n"
            "  szbench evaluate --local-process 'python3 examples/baseline/detect.py' "
            "--dataset DIR"
        )
        raise typer.Exit(2)
    runner = docker_runner.DockerRunner.from_settings(settings)
    try:
        if tar is not None:
            info = docker_runner.load_image_tarball(tar, runner.client)
            return runner, info.digest, tar.name, "docker sandbox"
        assert image is not None
        try:
            info = docker_runner.inspect_image(image, runner.client)
        except ImageError:
            info = docker_runner.pull_image(image, runner.client)
    except ImageError as exc:
        console.print(f"[red]{escape(str(exc))}[/red]")
        raise typer.Exit(2) from exc
    return runner, info.digest, image, "docker sandbox"


def _algorithm_version(session: Any, digest: str, reference: str, name: str) -> Any:
    from sqlalchemy import select

    from szbench.models import Algorithm, AlgorithmVersion, User, VersionStatus

    user = session.scalars(select(User).where(User.email == LOCAL_USER)).first()
    if user is None:
        user = User(email=LOCAL_USER, name="Local user")
        session.add(user)
        session.flush()
    algorithm = session.scalars(
        select(Algorithm).where(Algorithm.owner_id == user.id, Algorithm.name == name)
    ).first()
    if algorithm is None:
        title = "Local evaluations" if name == "local" else name
        algorithm = Algorithm(owner_id=user.id, name=name, title=title)
        session.add(algorithm)
        session.flush()
    version = session.scalars(
        select(AlgorithmVersion).where(
            AlgorithmVersion.algorithm_id == algorithm.id, AlgorithmVersion.image_digest == digest
        )
    ).first()
    if version is None:
        version = AlgorithmVersion(
            algorithm_id=algorithm.id,
            version=digest.rsplit(":", 1)[-1][:16],
            image_digest=digest,
            image_reference=reference,
            status=VersionStatus.ACTIVE,
            status_message="Registered by szbench evaluate.",
        )
        session.add(version)
        session.flush()
    return user, version


def _dataset_version(session: Any, prepared: Path, slug: str | None, public: bool) -> Any:
    from sqlalchemy import select

    from szbench.datasets.service import create_dataset, read_manifest, register_dataset_version
    from szbench.errors import SzbenchError
    from szbench.models import Dataset, DatasetKind, DatasetVersion

    try:
        _, checksum = read_manifest(prepared)
        slug = slug or f"local-{checksum.rsplit(':', 1)[-1][:16]}"
        dataset = session.scalars(select(Dataset).where(Dataset.slug == slug)).first()
        if dataset is None:
            dataset = create_dataset(
                session,
                slug=slug,
                title=slug,
                # Held-out unless asked: the web UI then shows annotations to admins only.
                kind=DatasetKind.PUBLIC_SAMPLE if public else DatasetKind.HELD_OUT,
            )
        versions = session.scalars(
            select(DatasetVersion).where(DatasetVersion.dataset_id == dataset.id)
        ).all()
        for existing in versions:
            if existing.path == str(prepared.resolve()) and existing.manifest_checksum == checksum:
                return existing
        return register_dataset_version(
            session, dataset, version=str(len(versions) + 1), prepared_path=prepared
        )
    except SzbenchError as exc:
        console.print(f"[red]{escape(str(prepared))}: {escape(exc.detail)}[/red]")
        raise typer.Exit(2) from exc


def _interrupted_evaluation(session: Any, version: Any, dataset_version: Any) -> Any:
    """The unfinished evaluation of this image on this dataset version, if any."""
    from sqlalchemy import select

    from szbench.models import Evaluation, EvaluationKind

    evaluations = session.scalars(
        select(Evaluation)
        .where(
            Evaluation.algorithm_version_id == version.id,
            Evaluation.dataset_version_id == dataset_version.id,
            Evaluation.kind == EvaluationKind.FULL,
        )
        .order_by(Evaluation.id.desc())
    ).all()
    return next((ev for ev in evaluations if not ev.status.finished), None)


def _wait(evaluation_id: int, poll_s: float = 0.3) -> Any:
    from szbench.db import session_scope
    from szbench.models import Evaluation

    with Progress(
        TextColumn("[bold]Recordings"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        task = progress.add_task("run", total=None, status="queued")
        while True:
            with session_scope() as session:
                ev = session.get_one(Evaluation, evaluation_id)
                status, done, total = ev.status, ev.recordings_done, ev.recordings_total
            progress.update(task, completed=done, total=total or None, status=status.value)
            if status.finished:
                return status
            time.sleep(poll_s)


def _recordings(evaluation_id: int, strip_eeg_prefix: bool) -> list[dict[str, Any]]:
    from sqlalchemy import select

    from szbench.db import session_scope
    from szbench.models import RecordingRun

    rows = []
    with session_scope() as session:
        runs = session.scalars(
            select(RecordingRun)
            .where(RecordingRun.evaluation_id == evaluation_id)
            .order_by(RecordingRun.id)
        ).all()
        for run in runs:
            path = run.recording.eeg_path
            if strip_eeg_prefix and path.startswith("eeg/"):
                path = path[len("eeg/") :]
            rows.append(
                {
                    "path": path,
                    "subject": run.recording.subject,
                    "outcome": run.outcome.value if run.outcome else None,
                    "message": run.submitter_message,
                    "reused": run.reused_from_id is not None,
                    "event": {"tp": run.event_tp, "fp": run.event_fp, "fn": run.event_fn},
                }
            )
    return rows


def evaluate(
    dataset: Path = typer.Option(
        ...,
        "--dataset",
        exists=True,
        file_okay=False,
        help="A prepared dataset (with manifest.json) or a raw SzCORE BIDS tree.",
    ),
    image: str | None = typer.Option(None, "--image", help="Docker image on this engine."),
    tar: Path | None = typer.Option(
        None, "--tar", exists=True, dir_okay=False, help="`docker save` tarball (.tar/.tar.gz)."
    ),
    local_process: str | None = typer.Option(
        None,
        "--local-process",
        help="Run this trusted command instead of a container (NOT sandboxed; for the "
        "bundled baseline on machines without Docker).",
    ),
    json_out: Path | None = typer.Option(None, "--json", help="Write scores + recordings here."),
    reuse: bool = typer.Option(
        True, "--reuse/--no-reuse", help="Reuse finished runs of the same image and recording."
    ),
    name: str = typer.Option(
        "local", "--name", help="Algorithm name the result is listed under on the leaderboard."
    ),
    dataset_name: str | None = typer.Option(
        None,
        "--dataset-name",
        help="Dataset slug for the leaderboard (default: derived from the dataset's checksum).",
    ),
    public_sample: bool = typer.Option(
        False,
        "--public-sample",
        help="Register a new dataset as a public sample: its annotations and the detections "
        "are shown on the web pages (timelines) to anyone who may read them.",
    ),
) -> None:
    """Run an algorithm on every recording of a local dataset, score it, print the results."""
    chosen = [x for x in (image, tar, local_process) if x is not None]
    if len(chosen) != 1:
        console.print("[red]Give exactly one of --image, --tar or --local-process.[/red]")
        raise typer.Exit(2)
    # The embedded mode: no Redis; the SQLite-backed queue and an in-process worker.
    os.environ["SZBENCH_BROKER_URL"] = ""
    from szbench import db, migrate
    from szbench.config import get_settings

    get_settings.cache_clear()
    db.reset_engine()
    settings = get_settings()
    migrate.upgrade(settings.effective_database_url)
    prepared, was_raw = prepared_dataset(dataset.resolve(), Path(settings.data_dir))
    runner, digest, reference, sandbox = _runner_and_digest(image, tar, local_process)

    from szbench.db import session_scope
    from szbench.evaluations.service import create_evaluation
    from szbench.models import DatasetResult, EvaluationStatus
    from szbench_worker import pipeline
    from szbench_worker.embedded import start_embedded_worker

    pipeline.set_dependencies(pipeline.Dependencies(runner=runner, resolve_image=lambda v: digest))
    worker = start_embedded_worker(upgrade_database=False)
    try:
        with session_scope() as session:
            user, version = _algorithm_version(session, digest, reference, name)
            dv = _dataset_version(session, prepared, dataset_name, public_sample)
            evaluation = _interrupted_evaluation(session, version, dv)
            if evaluation is not None:
                # An earlier invocation was killed mid-run; the worker's start-up recovery has
                # already sent its unfinished work again: wait for that one, run nothing twice.
                console.print(f"Continuing evaluation {evaluation.id}, interrupted earlier.")
            else:
                evaluation = create_evaluation(
                    session,
                    algorithm_version=version,
                    dataset_version=dv,
                    created_by=user,
                    reuse=reuse,
                    # The operator's own machine and data: no platform quota applies.
                    charge=False,
                )
            evaluation_id = evaluation.id
        console.print(
            f"Evaluation {evaluation_id}: {escape(reference)} ({digest[:19]}...) via {sandbox}, "
            f"on {escape(str(dataset))}"
        )
        status = _wait(evaluation_id)
    except KeyboardInterrupt:
        console.print("Interrupted. Finished recordings are kept: the same command reuses them.")
        raise typer.Exit(130) from None
    finally:
        worker.stop()
        pipeline.set_dependencies(None)

    from sqlalchemy import select

    from szbench.models import Evaluation

    with session_scope() as session:
        ev = session.get_one(Evaluation, evaluation_id)
        message = ev.message
        result = session.scalars(
            select(DatasetResult).where(DatasetResult.evaluation_id == evaluation_id)
        ).first()
        report = dict(result.report) if result is not None else None
    recordings = _recordings(evaluation_id, strip_eeg_prefix=was_raw)
    if report is not None:
        from szbench.cli.results_table import report_table

        Console().print(report_table(report, title=f"SzCORE scores, {sandbox}"))
    failed = [r for r in recordings if r["outcome"] != "ok"]
    for r in failed:
        # The message may quote what the container wrote: printed literally, never as markup.
        console.print(Text(f"{r['path']}: {r['outcome']}: {r['message']}", style="yellow"))
    if message:
        console.print(Text(message))
    if json_out is not None:
        payload: dict[str, Any] = {}
        if report is not None:
            payload["sample_results"] = report["sample_results"]
            payload["event_results"] = report["event_results"]
        payload["recordings"] = recordings
        json_out.write_text(json.dumps(payload, indent=2) + "\n")
        console.print(f"Wrote {escape(str(json_out))}")
    if status != EvaluationStatus.DONE:
        console.print(f"[red]Evaluation {status.value}.[/red]")
        raise typer.Exit(1)

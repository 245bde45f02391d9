"""One classification of failures, asked by every step of a run (issue 29 item 1).

The verdicts themselves, the image pulls against a real registry on loopback (one that
does not answer, one that has no such image), and the smoke test on real PostgreSQL: a
registry that is away never rejects the submitter's version, and no message a submitter
reads carries an internal address.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest
import requests
import sqlalchemy.exc

from szbench.config import get_settings
from szbench.db import session_scope
from szbench.models import AlgorithmVersion, VersionStatus
from szbench_worker import pipeline
from szbench_worker.faults import (
    CACHE_FULL,
    CANNOT_FETCH,
    PERMANENT_MESSAGE,
    REGISTRY_AWAY,
    Blame,
    classify,
)
from szbench_worker.recordings import RecordingUnavailable
from szbench_worker.runner import HostLacks, ImageError, ImageRefused, RunnerError

from .test_pipeline import (
    Env,
    pipeline_env,  # noqa: F401 (the fixture "env")
    seed_pending_on_public_sample,
)


def _fetch_failure(cause: BaseException | None) -> RecordingUnavailable:
    try:
        try:
            if cause is not None:
                raise cause
            raise RecordingUnavailable("not fetched")
        except RecordingUnavailable:
            raise
        except BaseException as exc:
            raise RecordingUnavailable("fetching failed") from exc
    except RecordingUnavailable as failure:
        return failure


def _http(status: int) -> requests.HTTPError:
    response = requests.Response()
    response.status_code = status
    return requests.HTTPError(f"HTTP {status}", response=response)


@pytest.mark.parametrize(
    ("exc", "blame", "lacks"),
    [
        (ImageRefused("img.tar: over SZBENCH_IMAGE_MAX_BYTES"), Blame.IMAGE, None),
        (HostLacks("registry", REGISTRY_AWAY, "pull of 10.0.0.1:5000/x failed"),
         Blame.PLATFORM_TRANSIENT, "registry"),
        (ImageError("img.tar: no such image tarball"), Blame.PLATFORM_PERMANENT, None),
        (_fetch_failure(requests.ConnectionError("refused")), Blame.PLATFORM_TRANSIENT,
         "platform_api"),
        (_fetch_failure(_http(503)), Blame.PLATFORM_TRANSIENT, "platform_api"),
        (_fetch_failure(_http(401)), Blame.PLATFORM_TRANSIENT, "setting"),
        (_fetch_failure(_http(404)), Blame.PLATFORM_PERMANENT, None),
        (_fetch_failure(_http(429)), Blame.PLATFORM_TRANSIENT, None),
        (_fetch_failure(OSError(errno.ENOSPC, "No space left on device")),
         Blame.PLATFORM_TRANSIENT, "recording_cache"),
        (_fetch_failure(None), Blame.PLATFORM_TRANSIENT, "setting"),
        (sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("gone")),
         Blame.PLATFORM_TRANSIENT, None),
        (sqlalchemy.exc.DataError("INSERT", {}, Exception("integer out of range")),
         Blame.PLATFORM_PERMANENT, None),
        (RunnerError("no Docker engine reachable"), Blame.PLATFORM_TRANSIENT, None),
        (ConnectionError("broker"), Blame.PLATFORM_TRANSIENT, None),
        (KeyError("a bug"), Blame.PLATFORM_PERMANENT, None),
    ],
)  # fmt: skip
def test_whose_fault(
    exc: BaseException, blame: Blame, lacks: str | None, settings_env: pytest.MonkeyPatch
) -> None:
    verdict = classify(exc)
    assert (verdict.blame, verdict.lacks) == (blame, lacks)
    # What a submitter may read never quotes the fault's own words (addresses, paths).
    if blame is not Blame.IMAGE:
        assert str(exc) not in verdict.public or not str(exc)
        assert "10.0.0.1" not in verdict.public


def test_what_a_fetch_lacks_names_the_settings(settings_env: pytest.MonkeyPatch) -> None:
    assert classify(_fetch_failure(None)).public == CANNOT_FETCH
    settings_env.setenv("SZBENCH_PLATFORM_URL", "https://bench.example.org")
    settings_env.setenv("SZBENCH_WORKER_TOKEN", "szb_x")
    get_settings.cache_clear()
    # Configured, and still no bytes: the platform sent others than the checksum.
    assert classify(_fetch_failure(None)).public == PERMANENT_MESSAGE
    assert "cache" in CACHE_FULL


# --- pulls, against a real registry ------------------------------------------------------


@pytest.mark.docker
def test_a_pull_from_a_registry_away_or_without_the_image(
    registry: str, docker_client: Any, test_images: dict[str, str], tmp_path: Path
) -> None:
    from szbench_worker.docker_runner import pull_image, registry_answers

    missing = f"{registry}/szbench/algorithms@sha256:{'a' * 64}"
    with pytest.raises(ImageError) as gone:
        pull_image(missing, docker_client)
    assert classify(gone.value).blame is Blame.PLATFORM_PERMANENT
    assert registry_answers(f"{registry}/szbench/algorithms", docker_client)
    closed = _closed_port()
    away = f"127.0.0.1:{closed}/szbench/algorithms@sha256:{'a' * 64}"
    with pytest.raises(HostLacks) as lacks:
        pull_image(away, docker_client)
    verdict = classify(lacks.value)
    assert (verdict.blame, verdict.lacks) == (Blame.PLATFORM_TRANSIENT, "registry")
    assert verdict.public == REGISTRY_AWAY
    assert str(closed) in verdict.detail
    assert not registry_answers(f"127.0.0.1:{closed}/szbench/algorithms", docker_client)


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- the smoke test -----------------------------------------------------------------------


def test_a_registry_away_never_rejects_the_version(env: Env) -> None:
    """Today's smoke test rejected the version, quoting the registry's address."""

    def away(version: AlgorithmVersion) -> str:
        raise HostLacks(
            "registry", REGISTRY_AWAY, "pulling 10.1.2.3:5000/szbench/algorithms@sha256:... failed"
        )

    pipeline.set_dependencies(pipeline.Dependencies(runner=env.runner, resolve_image=away))
    with session_scope() as session:
        version_id = seed_pending_on_public_sample(session, env).version.id
    with pytest.raises(HostLacks):
        pipeline.smoke_test(version_id)
    with session_scope() as session:
        version = session.get_one(AlgorithmVersion, version_id)
        assert version.status == VersionStatus.SMOKE_TESTING
        assert version.status_message.startswith(f"Smoke test waiting: {REGISTRY_AWAY}")
        assert "10.1.2.3" not in version.status_message
    assert env.runner.calls == []
    # Back: the same task, sent again, decides on the algorithm alone.
    pipeline.set_dependencies(
        pipeline.Dependencies(runner=env.runner, resolve_image=lambda v: v.image_digest)
    )
    assert pipeline.smoke_test(version_id).status == VersionStatus.ACTIVE


def test_an_image_gone_for_good_leaves_the_version_pending(env: Env) -> None:
    def gone(version: AlgorithmVersion) -> str:
        raise ImageError("10.1.2.3:5000/szbench/algorithms@sha256:...: the registry has no such")

    pipeline.set_dependencies(pipeline.Dependencies(runner=env.runner, resolve_image=gone))
    with session_scope() as session:
        version_id = seed_pending_on_public_sample(session, env).version.id
    outcome = pipeline.smoke_test(version_id)
    assert outcome.status == VersionStatus.PENDING
    assert "platform fault" in outcome.message
    assert "10.1.2.3" not in outcome.message


def test_a_held_out_run_whose_pull_waits_counts_no_attempt(env: Env) -> None:
    """A transient fault before the container: the run is not claimed any more, so its try
    is not spent; the task decides (back to the queue on a sick host)."""
    from szbench.models import Evaluation

    from .test_pipeline import new_evaluation

    def away(version: AlgorithmVersion) -> str:
        raise HostLacks("registry", REGISTRY_AWAY, "pull failed")

    pipeline.set_dependencies(pipeline.Dependencies(runner=env.runner, resolve_image=away))
    evaluation_id = new_evaluation(env)
    _name, _queue, kwargs = env.sent.pop(0)
    pipeline.start_evaluation(**kwargs)
    run_task = env.sent.pop(0)
    with pytest.raises(HostLacks):
        pipeline.run_recording(**run_task[2])
    with session_scope() as session:
        run = next(r for r in session.get_one(Evaluation, evaluation_id).runs
                   if r.id == run_task[2]["run_id"])  # fmt: skip
        assert (run.attempts, run.started_at, run.claimed_by, run.outcome) == (0, None, "", None)
    env.sent.clear()

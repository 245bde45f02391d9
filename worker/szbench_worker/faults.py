"""Whose fault a failure is: the one classification that every step of a run asks.

The smoke test, held-out runs, image pulls and loads, recording fetches and storing a result
all hand what went wrong to :func:`classify` and act on its :class:`Verdict` alone, so that
one failure means the same thing wherever it happens (issue 29 item 1):

- :attr:`Blame.ALGORITHM`: what the container did (a timeout, a crash, bad output). Never
  raised: the runner returns it as the run's outcome, charged to the algorithm.
- :attr:`Blame.IMAGE`: the image cannot run anywhere (an archive over the limits or not
  loadable, a configuration the engine refuses). Stored as the run's outcome (``crashed``
  with a fixed text), or the smoke test rejects the version; never retried.
- :attr:`Blame.PLATFORM_TRANSIENT`: something the platform needs is away for now (the
  engine, a disk, the database, the broker, the image registry, the platform's API, a
  setting). Nobody's tries are spent: the task goes back to its queue (the host takes no run
  while it lacks what ``lacks`` names: :mod:`szbench_worker.health`) or is retried, and the
  run is held, with the reason on the evaluation's page and in the API, until it is back.
- :attr:`Blame.PLATFORM_PERMANENT`: the platform cannot do it however long one waits (an
  accepted image that is gone, a recording the platform no longer has, a row the database
  cannot store, a bug). The run ends ``infrastructure_error`` (never charged to anyone),
  the evaluation ends FAILED for an administrator to fix and re-run.

:attr:`Verdict.public` is what a submitter may read: a fixed sentence, never an address, a
path or an engine's own words (those are in :attr:`Verdict.detail`, for admins and logs).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import kombu.exceptions
import requests
import sqlalchemy.exc

from szbench.config import get_settings
from szbench_worker.recordings import RecordingUnavailable
from szbench_worker.runner import HostLacks, ImageError, ImageRefused, RunnerError


class Blame(StrEnum):
    ALGORITHM = "algorithm"
    IMAGE = "image"
    PLATFORM_TRANSIENT = "platform-transient"
    PLATFORM_PERMANENT = "platform-permanent"


@dataclass(frozen=True)
class Verdict:
    """Whose fault, what a submitter may read, what an admin reads; for a transient fault
    of the host, what the host lacks (:data:`szbench_worker.health.NEEDS`)."""

    blame: Blame
    public: str
    detail: str
    lacks: str | None = None


#: What a submitter reads about a permanent platform fault (the run's message).
PERMANENT_MESSAGE = (
    "The platform could not run or score this recording (an infrastructure fault, not your "
    "algorithm's); an administrator has the details."
)
#: ... and about a transient one, while it lasts (smoke tests, the evaluation's hold).
TRANSIENT_MESSAGE = "a platform service is briefly unavailable"
#: A result the database refused to store, even sanitised (:func:`classify` of the error).
UNSTORABLE_MESSAGE = (
    "The platform could not store this recording's result (an infrastructure fault, not your "
    "algorithm's); an administrator has the details."
)
#: The public sentences of what a host may lack (the heartbeat's fault says them).
REGISTRY_AWAY = "the image registry does not answer"
PLATFORM_API_AWAY = "the platform's API does not answer recording fetches"
CACHE_FULL = "the recording cache's disk is full or cannot be written"
WORKER_KEY_REFUSED = "the platform refused this host's worker token (SZBENCH_WORKER_TOKEN)"
CANNOT_FETCH = (
    "this host does not have the recordings' files and cannot fetch them "
    "(SZBENCH_PLATFORM_URL and SZBENCH_WORKER_TOKEN)"
)


def classify(exc: BaseException) -> Verdict:
    """Whose fault ``exc`` is (see the module docstring); an exception nobody expected is a
    bug, the platform's permanent fault."""
    detail = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, ImageRefused):
        return Verdict(Blame.IMAGE, str(exc), detail)
    if isinstance(exc, HostLacks):
        return Verdict(Blame.PLATFORM_TRANSIENT, exc.public, detail, lacks=exc.need)
    if isinstance(exc, ImageError):
        # Accepted once (it has a digest), gone or altered now: no wait brings it back.
        return Verdict(Blame.PLATFORM_PERMANENT, PERMANENT_MESSAGE, f"image unavailable: {exc}")
    if isinstance(exc, RecordingUnavailable):
        return _fetch_verdict(exc, detail)
    if isinstance(exc, sqlalchemy.exc.OperationalError | sqlalchemy.exc.InterfaceError):
        return Verdict(Blame.PLATFORM_TRANSIENT, TRANSIENT_MESSAGE, detail, lacks=None)
    if isinstance(exc, sqlalchemy.exc.StatementError):
        # The database answered and refused the row itself (a value it cannot hold): storing
        # it again changes nothing, so "cannot store" is an outcome that ends the run.
        return Verdict(Blame.PLATFORM_PERMANENT, UNSTORABLE_MESSAGE, f"cannot store: {detail}")
    if isinstance(exc, RunnerError | kombu.exceptions.OperationalError | ConnectionError):
        return Verdict(Blame.PLATFORM_TRANSIENT, TRANSIENT_MESSAGE, detail)
    return Verdict(Blame.PLATFORM_PERMANENT, PERMANENT_MESSAGE, f"unexpected: {detail}")


def _fetch_verdict(exc: BaseException, detail: str) -> Verdict:
    """A recording fetch that failed: the platform's API away, the cache's disk full, this
    host's settings, or a recording the platform cannot give."""
    cause = exc.__cause__
    transient = Blame.PLATFORM_TRANSIENT
    if cause is None:
        settings = get_settings()
        if not (settings.platform_url and settings.worker_token):
            return Verdict(transient, CANNOT_FETCH, detail, lacks="setting")
        # The platform sent other bytes than the checksum (its file changed), or the
        # checksum itself is malformed: no retry mends either.
        return Verdict(Blame.PLATFORM_PERMANENT, PERMANENT_MESSAGE, detail)
    if isinstance(cause, requests.HTTPError) and cause.response is not None:
        status = cause.response.status_code
        if status in (401, 403):
            return Verdict(transient, WORKER_KEY_REFUSED, detail, lacks="setting")
        if status in (404, 410):
            return Verdict(Blame.PLATFORM_PERMANENT, PERMANENT_MESSAGE, detail)
        if status == 429:
            return Verdict(transient, TRANSIENT_MESSAGE, detail)  # its backoff: a retry
    if isinstance(cause, requests.RequestException):  # (an OSError too: asked first)
        return Verdict(transient, PLATFORM_API_AWAY, detail, lacks="platform_api")
    if isinstance(cause, OSError):
        # Writing the cache failed: full (ENOSPC, EDQUOT), read-only, not ours.
        return Verdict(transient, CACHE_FULL, detail, lacks="recording_cache")
    return Verdict(transient, TRANSIENT_MESSAGE, detail)

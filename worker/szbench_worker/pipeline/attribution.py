"""Which image a result belongs to: the one rule that storing and reusing results follow.

A result is stored under an evaluation only when the image the engine actually started
(``RunResult.image_digest``: the container's image id, or a local command's identity) is
the image resolved, in the task, from the evaluation's algorithm version; it is reused only
when it was stored so (``RecordingRun.image_id`` set) and, where the version's record names
its image id, ran exactly that image. Nothing a caller passes in decides it: a process that
happens to run one image (``szbench evaluate``) must never store its detections under
another version's digest, nor serve such rows from the reuse cache.

The version's recorded digest is the image id for uploaded tarballs, images registered by
``szbench evaluate`` and trusted local commands; for images referenced by registry digest
(``name@sha256:...``) it is the manifest digest, whose image id only the engine knows (the
resolver checks that one against the record before anything runs).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, and_

from szbench.models import AlgorithmVersion, RecordingRun
from szbench_worker.pipeline.faults import InfrastructureError


class MisattributedResult(InfrastructureError):
    """The engine ran another image than the evaluation's: the result is not stored."""


def recorded_image_id(version: AlgorithmVersion) -> str | None:
    """The image id every result of ``version`` must come from, when its record names one
    (None for a registry reference: its digest is the manifest's, not the image's)."""
    digest = version.image_digest or ""
    if not digest:
        return None
    if (version.image_reference or "").endswith("@" + digest):
        return None
    return digest


def image_of_result(version: AlgorithmVersion, resolved: str, ran: str) -> str:
    """The image id a result is stored under: ``ran`` (what the engine started), which
    must be ``resolved`` (what the task resolved from ``version``) and the version's own
    image id where its record names one.

    Raises
    ------
    MisattributedResult
        Any other image: the result belongs to no evaluation of ``version``.
    """
    expected = recorded_image_id(version)
    if not ran or ran != resolved or (expected is not None and ran != expected):
        raise MisattributedResult(
            f"the run started image {ran or '(none reported)'}, but algorithm version "
            f"{version.id} resolves to {resolved} (recorded {version.image_digest}); "
            "the result was not stored"
        )
    return ran


def reusable_for(version: AlgorithmVersion, digest: str) -> ColumnElement[bool]:
    """The rows whose result may serve an evaluation of ``version`` (recorded ``digest``):
    stored under the rule above, and from the version's own image id where it is known."""
    expected = recorded_image_id(version)
    conditions: list[Any] = [
        RecordingRun.image_digest == digest,
        RecordingRun.image_id.is_not(None),
    ]
    if expected is not None:
        conditions.append(RecordingRun.image_id == expected)
    return and_(*conditions)

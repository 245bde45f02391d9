"""A version failed its smoke test: its algorithm's people hear why, as far as each may read
the run's own message."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from szbench.auth import policy
from szbench.disclosure import decision
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    Evaluation,
    EvaluationKind,
    NotificationEvent,
    NotificationKind,
    RecordingRun,
    User,
)
from szbench.notifications.kinds.base import Composer, algorithm_facts, link


class SmokeTestFailed(Composer):
    names = {NotificationKind.SMOKE_TEST_FAILED: "smoke_test.failed"}
    labels = {NotificationKind.SMOKE_TEST_FAILED: "A version fails its smoke test"}

    def recipients(self, session: Session, event: NotificationEvent) -> list[int]:
        version = session.get(AlgorithmVersion, event.algorithm_version_id)
        if version is None:
            return []
        return list(session.scalars(policy.users_acting_for(Algorithm.id == version.algorithm_id)))

    def compose(
        self, session: Session, event: NotificationEvent, user: User
    ) -> dict[str, Any] | None:
        version = session.get(AlgorithmVersion, event.algorithm_version_id)
        if version is None or not policy.owns(user, version.algorithm):
            return None
        return {
            **self.envelope(event, user),
            "algorithm": algorithm_facts(version.algorithm),
            "algorithm_version": {
                "id": version.id,
                "version": version.version,
                "status": version.status.value,
                "message": _message(session, version, user),
            },
            "url": link("/submissions"),
        }

    def summary(self, payload: dict[str, Any]) -> str:
        a, v = payload["algorithm"], payload["algorithm_version"]
        return f"{a['name']} version {v['version']} failed its smoke test"

    def mail_lines(self, payload: dict[str, Any]) -> list[str]:
        return [payload["algorithm_version"]["message"], "", f"Your submissions: {payload['url']}"]


def _message(session: Session, version: AlgorithmVersion, user: User) -> str:
    """Why the smoke test failed, as far as ``user`` may read the run's own message
    (:func:`szbench.disclosure.decision.run_message`). A rejection without a run (an image
    refused before it ran) is the platform's own text."""
    smoke = session.scalars(
        select(Evaluation)
        .where(
            Evaluation.algorithm_version_id == version.id,
            Evaluation.kind == EvaluationKind.SMOKE_TEST,
        )
        .order_by(Evaluation.id.desc())
    ).first()
    run = (
        session.scalars(select(RecordingRun).where(RecordingRun.evaluation_id == smoke.id)).first()
        if smoke is not None
        else None
    )
    if smoke is None or run is None or run.outcome is None:
        return version.status_message
    view = decision.view_of(user, smoke)
    if view.run_details:
        return version.status_message
    return "Smoke test failed: " + decision.run_message(view, run.outcome, run.submitter_message)

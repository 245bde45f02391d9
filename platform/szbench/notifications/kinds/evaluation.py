"""An evaluation finished or failed: its algorithm's people hear of it, each told what the
evaluation's page shows them."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from szbench.auth import policy
from szbench.disclosure import decision
from szbench.disclosure import progress as timing
from szbench.errors import NotFound
from szbench.evaluations import queries as evaluation_queries
from szbench.models import (
    Algorithm,
    DatasetKind,
    Evaluation,
    EvaluationStatus,
    NotificationEvent,
    NotificationKind,
    User,
)
from szbench.notifications.kinds.base import Composer, algorithm_facts, iso, link, number
from szbench.results import queries as result_queries


class EvaluationEnded(Composer):
    names = {
        NotificationKind.EVALUATION_FINISHED: "evaluation.finished",
        NotificationKind.EVALUATION_FAILED: "evaluation.failed",
    }
    labels = {
        NotificationKind.EVALUATION_FINISHED: "An evaluation finishes",
        NotificationKind.EVALUATION_FAILED: "An evaluation fails",
    }

    def recipients(self, session: Session, event: NotificationEvent) -> list[int]:
        """Everyone who acts for the algorithm (:func:`policy.users_acting_for`: its owner
        and its team's members)."""
        evaluation = session.get(Evaluation, event.evaluation_id)
        if evaluation is None:
            return []
        algorithm_id = evaluation.algorithm_version.algorithm_id
        return list(session.scalars(policy.users_acting_for(Algorithm.id == algorithm_id)))

    def compose(
        self, session: Session, event: NotificationEvent, user: User
    ) -> dict[str, Any] | None:
        evaluation = session.get(Evaluation, event.evaluation_id)
        if evaluation is None or not policy.can_view_evaluation(user, evaluation):
            return None
        payload = {**self.envelope(event, user), "evaluation": _facts(session, evaluation, user)}
        # The event happens when the evaluation ends: rounded as its finish is (issue 28.3).
        view = decision.view_of(user, evaluation)
        payload["created_at"] = iso(timing.shown_moment(view, event.created_at))
        return payload

    def summary(self, payload: dict[str, Any]) -> str:
        e = payload["evaluation"]
        what = (
            f"{e['algorithm']['name']} {e['algorithm_version']} on "
            f"{e['dataset']} {e['dataset_version']}"
        )
        done = "finished" if e["status"] == EvaluationStatus.DONE.value else "failed"
        return f"Evaluation {e['id']} {done}: {what}"

    def mail_lines(self, payload: dict[str, Any]) -> list[str]:
        e = payload["evaluation"]
        lines = []
        if e.get("figures"):
            f = e["figures"]
            lines.append(
                "Event F1 {}, sensitivity {}, precision {}, false positives per day {} "
                "(over {} subjects).".format(
                    number(f.get("event_f1"), f.get("release")),
                    number(f.get("event_sensitivity"), f.get("release")),
                    number(f.get("event_precision"), f.get("release")),
                    number(f.get("event_fp_rate"), f.get("release")),
                    f.get("subjects"),
                )
            )
        if e.get("outcomes"):
            counts = ", ".join(
                f"{k.replace('_', ' ')}: {v}" for k, v in sorted(e["outcomes"].items())
            )
            lines.append(f"Recordings: {counts}.")
        if e.get("message"):
            lines.append(e["message"])
        return [*lines, "", f"Details: {e['url']}"]


def _facts(session: Session, evaluation: Evaluation, user: User) -> dict[str, Any]:
    """The evaluation as its page shows it to ``user``: outcome counts through the
    disclosure rules (:func:`szbench.evaluations.queries.progress`), the dataset-level
    figures as they are released to ``user`` (rounded, the Ladder's score or exact, with
    ``release`` saying which: :mod:`szbench.disclosure`), the platform's own summary
    message."""
    progress = evaluation_queries.progress(session, evaluation, viewer=user)
    version = evaluation.algorithm_version
    dataset_version = evaluation.dataset_version
    figures = None
    if evaluation.status == EvaluationStatus.DONE:
        try:
            result = result_queries.dataset_result(session, evaluation, viewer=user)
        except NotFound:
            result = None
        if result is not None:
            figures = {m: getattr(result, m) for m in result_queries.METRICS}
            figures.update(
                subjects=result.subjects, recordings=result.recordings, release=result.release
            )
    return {
        "id": evaluation.id,
        "url": link(f"/evaluations/{evaluation.id}"),
        "status": evaluation.status.value,
        "kind": evaluation.kind.value,
        "algorithm": algorithm_facts(version.algorithm),
        "algorithm_version": version.version,
        "dataset": dataset_version.dataset.slug,
        "dataset_version": dataset_version.version,
        "held_out": dataset_version.dataset.kind != DatasetKind.PUBLIC_SAMPLE,
        "published": evaluation.published,
        "message": evaluation.message,
        "recordings_total": progress.recordings_total,
        "outcomes": progress.outcomes,
        "failed_recordings": progress.failed_recordings,
        "figures": figures,
        # Rounded to the progress clock for a non-admin on held-out data, as on the page.
        "finished_at": iso(
            timing.shown_moment(decision.view_of(user, evaluation), evaluation.finished_at)
        ),
    }

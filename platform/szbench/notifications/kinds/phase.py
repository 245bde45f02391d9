"""A phase opened or closed for submissions (a transition of :mod:`szbench.phases.lifecycle`):
those acting for an algorithm submitted to it hear of it, and whoever asked for every
phase's news."""

from __future__ import annotations

from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from szbench.auth import policy
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    NotificationEvent,
    NotificationKind,
    NotificationPreferences,
    Phase,
    User,
)
from szbench.notifications.kinds.base import Composer, iso, link


class PhaseNews(Composer):
    names = {
        NotificationKind.PHASE_OPENED: "phase.opened",
        NotificationKind.PHASE_CLOSED: "phase.closed",
    }
    labels = {
        NotificationKind.PHASE_OPENED: "A phase opens for submissions",
        NotificationKind.PHASE_CLOSED: "A phase closes",
    }

    def recipients(self, session: Session, event: NotificationEvent) -> list[int]:
        submitted = select(AlgorithmVersion.algorithm_id).where(
            AlgorithmVersion.phase_id == event.phase_id
        )
        everything = select(NotificationPreferences.user_id).where(
            NotificationPreferences.all_phases.is_(True)
        )
        return list(
            session.scalars(
                select(User.id).where(
                    or_(
                        User.id.in_(policy.users_acting_for(Algorithm.id.in_(submitted))),
                        User.id.in_(everything),
                    )
                )
            )
        )

    def compose(
        self, session: Session, event: NotificationEvent, user: User
    ) -> dict[str, Any] | None:
        phase = session.get(Phase, event.phase_id)
        if phase is None:
            return None
        return {
            **self.envelope(event, user),
            "phase": {
                "slug": phase.slug,
                "title": phase.title,
                "open": event.kind == NotificationKind.PHASE_OPENED,
                "opens_at": iso(phase.opens_at),
                "closes_at": iso(phase.closes_at),
            },
            "url": link("/submit"),
        }

    def summary(self, payload: dict[str, Any]) -> str:
        p = payload["phase"]
        name = p["title"] or p["slug"]
        return f"Phase {name} is open for submissions" if p["open"] else f"Phase {name} closed"

    def mail_lines(self, payload: dict[str, Any]) -> list[str]:
        p = payload["phase"]
        lines = []
        if p.get("closes_at") and p["open"]:
            lines.append(f"It takes submissions until {p['closes_at']}.")
        return [*lines, "", f"Submit: {payload['url']}"]

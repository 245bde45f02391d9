"""What every kind of notification has: who hears of it, what each one is told (the payload:
the webhook's JSON body, which the e-mail says in words), its one-line summary and its
e-mail text. Each kind's composer is a module beside this one; a payload's fields are
composed in one place per kind (its :meth:`Composer.compose`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.models import Algorithm, NotificationEvent, NotificationKind, User


def link(path: str) -> str:
    """``path`` on the site as users reach it (``public_url``); the bare path without one."""
    root = get_settings().public_url.rstrip("/")
    return f"{root}{path}"


def iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).isoformat()


def number(value: Any, release: str | None = None) -> str:
    """A figure in an e-mail: as released. A rounded or Ladder figure is printed as it was
    released ("0.56", not "0.560", which would claim a third decimal the platform never
    gave); an exact one to 3 decimals."""
    if value is None:
        return "n/a"
    if release in ("rounded", "ladder"):
        return f"{value:g}"
    return f"{value:.3f}"


def algorithm_facts(algorithm: Algorithm) -> dict[str, Any]:
    return {"id": algorithm.id, "name": algorithm.name, "title": algorithm.title}


class Composer:
    """One kind of notification (or two that differ in a word: finished and failed)."""

    #: The kinds this composer makes, with their names in payloads and the
    #: ``X-Szbench-Event`` header.
    names: ClassVar[dict[NotificationKind, str]]
    #: What each kind's switch is called on the account page; empty: it has no switch.
    labels: ClassVar[dict[NotificationKind, str]] = {}

    def envelope(self, event: NotificationEvent, user: User) -> dict[str, Any]:
        """The fields every payload starts with."""
        return {
            "event": self.names[event.kind],
            "event_id": event.id,
            "created_at": iso(event.created_at),
        }

    def recipients(self, session: Session, event: NotificationEvent) -> list[int]:
        """The ids of the users who hear of ``event`` (inactive ones are dropped later)."""
        raise NotImplementedError

    def compose(
        self, session: Session, event: NotificationEvent, user: User
    ) -> dict[str, Any] | None:
        """What ``user`` is told of ``event``; None when they may not learn of it."""
        raise NotImplementedError

    def summary(self, payload: dict[str, Any]) -> str:
        """The notification in one line (the e-mail's subject, the delivery log's text)."""
        raise NotImplementedError

    def mail_lines(self, payload: dict[str, Any]) -> list[str]:
        """The e-mail's body between its first line (the summary) and its footer."""
        raise NotImplementedError

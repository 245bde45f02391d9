"""The test notification a user asks for ("send a test"): to them only, on every channel
they have, whatever their switches say."""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from szbench.models import NotificationEvent, NotificationKind, User
from szbench.notifications.kinds.base import Composer, link


class TestNotification(Composer):
    names = {NotificationKind.TEST: "test"}

    def recipients(self, session: Session, event: NotificationEvent) -> list[int]:
        return [event.user_id] if event.user_id is not None else []

    def compose(
        self, session: Session, event: NotificationEvent, user: User
    ) -> dict[str, Any] | None:
        return {
            **self.envelope(event, user),
            "message": "A test notification from szbench: this channel works.",
            "url": link("/account/notifications"),
        }

    def summary(self, payload: dict[str, Any]) -> str:
        return "szbench test notification"

    def mail_lines(self, payload: dict[str, Any]) -> list[str]:
        return [payload.get("message", ""), ""]

"""Outgoing e-mail over SMTP (``SZBENCH_SMTP_*``); nothing is sent without a host.

Messages that a caller without an account can cause (a reset request, a sign-up's
verification link) go out after the answer has been sent (:func:`send_after`, Starlette's
background tasks): talking to the SMTP server takes from tens of milliseconds to seconds,
and a reset request that waited for it would tell, by its time alone, that the address has
an account. Messages an admin or a signed-in user asks for about themselves are sent before
answering (:func:`send_message`), so that the answer can say whether they went. A message whose
process dies before it is sent is lost: the user asks again.
"""

from __future__ import annotations

import logging
import smtplib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from szbench.config import get_settings
from szbench.formats import mail as formats_mail
from szbench.outbound.deadline import Deadline
from szbench.outbound.smtp import DeadlineSMTP

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Message:
    """A plain-text message to one address."""

    to: str
    subject: str
    body: str


def enabled() -> bool:
    """Whether an SMTP server is configured."""
    return bool(get_settings().smtp_host)


def send(to: str, subject: str, body: str) -> bool:
    """Send a plain-text message now; False (and a log line) when it could not be sent."""
    settings = get_settings()
    if not settings.smtp_host:
        return False
    # Headers of one line each, whatever the subject names (szbench.formats.mail).
    email = formats_mail.message(sender=settings.mail_from, to=to, subject=subject, body=body)
    # The whole conversation ends within smtp_timeout_s, however slowly the server answers.
    try:
        with (
            Deadline(settings.smtp_timeout_s) as deadline,
            DeadlineSMTP(settings.smtp_host, settings.smtp_port, deadline=deadline) as smtp,
        ):
            if settings.smtp_starttls:
                smtp.starttls()
            if settings.smtp_username:
                smtp.login(settings.smtp_username, settings.smtp_password)
            smtp.send_message(email)
    except (OSError, smtplib.SMTPException):
        log.exception("sending e-mail %r to a user failed", subject)
        return False
    return True


def send_message(message: Message) -> bool:
    """:func:`send` for a :class:`Message`."""
    return send(message.to, message.subject, message.body)


class Later(Protocol):
    """What runs work after the answer: a route's ``BackgroundTasks`` (no HTTP import here)."""

    def add_task(self, func: Callable[..., Any], *args: Any) -> None: ...


def send_after(background: Later, message: Message | None) -> None:
    """Send ``message`` (if any) once the answer has gone out, in a worker thread."""
    if message is not None:
        background.add_task(send_message, message)

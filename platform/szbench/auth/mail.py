"""Outgoing e-mail over SMTP (``SZBENCH_SMTP_*``); nothing is sent without a host.

Sent from the request that causes it: the messages are few (sign-up, a reset asked for)
and small, and the caller decides what a failure means (a reset request still answers the
same, so that it tells nothing about which addresses have accounts).
"""

from __future__ import annotations

import logging
import smtplib
from email.message import EmailMessage

from szbench.config import get_settings

log = logging.getLogger(__name__)


def enabled() -> bool:
    """Whether an SMTP server is configured."""
    return bool(get_settings().smtp_host)


def send(to: str, subject: str, body: str) -> bool:
    """Send a plain-text message; False (and a log line) when it could not be sent."""
    settings = get_settings()
    if not settings.smtp_host:
        return False
    message = EmailMessage()
    message["From"] = settings.mail_from
    message["To"] = to
    message["Subject"] = subject
    message.set_content(body)
    try:
        with smtplib.SMTP(
            settings.smtp_host, settings.smtp_port, timeout=settings.smtp_timeout_s
        ) as smtp:
            if settings.smtp_starttls:
                smtp.starttls()
            if settings.smtp_username:
                smtp.login(settings.smtp_username, settings.smtp_password)
            smtp.send_message(message)
    except (OSError, smtplib.SMTPException):
        log.exception("sending e-mail %r to a user failed", subject)
        return False
    return True

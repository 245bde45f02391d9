"""E-mail: a message whose headers are one line each, whatever the subject's text.

A subject names what users typed (an algorithm's name, a phase's title); a line break in it
would make Python's e-mail package refuse the header (and the message be lost), or, with a
lenient library, start a header of the attacker's. Here a header's text is one line, what
a reader cannot see is a space, and it is cut to :data:`SUBJECT_MAX` characters.
"""

from __future__ import annotations

from email.message import EmailMessage

from szbench.formats.text import plain

SUBJECT_MAX = 200


def header(text: str, limit: int = SUBJECT_MAX) -> str:
    """``text`` as a header's value.

    >>> header("Phase X\\r\\nBcc: all@example.org")
    'Phase X Bcc: all@example.org'
    """
    one_line = plain(text)
    return one_line if len(one_line) <= limit else one_line[: limit - 1] + "\u2026"


def message(*, sender: str, to: str, subject: str, body: str) -> EmailMessage:
    """A plain-text message (UTF-8; the body's lines as written, less lone surrogates)."""
    email = EmailMessage()
    email["From"] = header(sender, 300)
    email["To"] = header(to, 300)
    email["Subject"] = header(subject)
    email.set_content(body.encode("utf-8", errors="replace").decode("utf-8"))
    return email

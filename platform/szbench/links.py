"""Links that people give the platform, checked in one place (docs/security.md, "Links").

Every such link is rendered as an ``href`` on the site's pages or sent in e-mails: an
algorithm's code and paper links, and the operator's ``SZBENCH_PUBLIC_URL``. Only absolute
http(s) links pass: any other scheme (``javascript:``, ``data:``) could run code on the
site. Characters a reader cannot see or that end a line (controls, format characters such
as U+200B or U+202E, line and paragraph separators such as U+2028, and any blank inside
the link) are refused, so a link shows what it opens; so are credentials before the host
(``https://user:pass@host``), which make a link read as one site and open another
(``https://good.example@evil.example``), and backslashes, which browsers read as slashes.
"""

from __future__ import annotations

import unicodedata
from urllib.parse import urlsplit

from szbench.errors import BadRequest

# Unicode categories refused anywhere in a link: controls, format characters, surrogates,
# private use, unassigned, and every kind of space and separator.
_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp"})
# Only ordinary blanks around a pasted link are dropped; any other is refused above.
_TRIMMED = " \t\r\n"


def check_link(field: str, url: str) -> str:
    """``url`` without blanks around it, when it is an absolute http(s) link (or empty),
    else :class:`BadRequest` naming ``field`` and what is wrong.

    >>> check_link("code_url", " https://example.org/code ")
    'https://example.org/code'
    """
    url = url.strip(_TRIMMED)
    if not url:
        return ""
    shown = f"{url[:100]!r}"
    for char in url:
        if unicodedata.category(char) in _REFUSED_CATEGORIES:
            raise BadRequest(
                f"{field}: {shown} holds U+{ord(char):04X} ({unicodedata.name(char, 'unnamed')}); "
                "a link may not hold blanks, line separators or invisible characters"
            )
    if "\\" in url:
        raise BadRequest(f"{field}: {shown} holds a backslash; write the link with slashes")
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise BadRequest(f"{field}: {shown} is not an http(s) link (https://...)")
    if "@" in parts.netloc:
        raise BadRequest(
            f"{field}: {shown} carries a user name or password before the host "
            "(user:pass@); give the link without them"
        )
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in range
    except ValueError:
        raise BadRequest(f"{field}: {shown} has an invalid port") from None
    return url

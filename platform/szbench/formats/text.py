"""What every serializer does first to text a user typed: one line, nothing a reader cannot
see, nothing an encoder refuses."""

from __future__ import annotations

import unicodedata

# Controls, format characters (U+202E and the other bidirectional controls, zero-width
# characters), lone surrogates (no UTF-8 encoder takes them), private use, unassigned, and
# the line and paragraph separators.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def plain(text: str) -> str:
    """``text`` on one line with what a reader cannot see as single spaces.

    >>> plain("A\\u202etitle\\nhere\\ud800 ")
    'A title here'
    """
    shown = "".join(" " if unicodedata.category(c) in _INVISIBLE else c for c in text)
    return " ".join(shown.split())

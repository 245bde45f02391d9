"""BibTeX: one ``@misc`` entry whose every field is a balanced braced group, whatever its
text.

BibTeX counts braces without regard to backslashes: ``\\}`` still closes a group, so a
title with an unbalanced brace used to end its field and start a second entry (issue 28).
Here a brace in the text never reaches the file as a brace: it becomes the LaTeX command
that prints it (``\\textbraceleft{}``), as do TeX's other special characters, so the only
braces in a field are the ones this module writes, in pairs. ``@`` becomes ``{\\char64}``
(it prints ``@``), so that a parser that looks for entries by their ``@`` finds one.
"""

from __future__ import annotations

import re

from szbench.formats.text import plain

# TeX's special characters, each as text that prints it. One pass over the string, so a
# replacement is never escaped again.
_ESCAPES = {
    "\\": r"\textbackslash{}",
    "{": r"\textbraceleft{}",
    "}": r"\textbraceright{}",
    "%": r"\%",
    "&": r"\&",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "@": r"{\char64}",
}
_SPECIAL = re.compile("|".join(re.escape(c) for c in _ESCAPES))
_KEY = re.compile(r"[^A-Za-z0-9:._+-]")
_URL_REFUSED = frozenset('{}\\ "#')


def escape(text: str) -> str:
    r"""``text`` as the inside of a braced field: prints as ``text``; its braces balance.

    >>> escape("50% {best} \\o/")
    '50\\% \\textbraceleft{}best\\textbraceright{} \\textbackslash{}o/'
    """
    return _SPECIAL.sub(lambda m: _ESCAPES[m.group(0)], plain(text))


def key(text: str) -> str:
    """An entry key: ASCII letters, digits and ``:._+-`` only."""
    return _KEY.sub("-", text) or "szbench"


def url(address: str) -> str:
    """A URL as a field's verbatim text: a brace, backslash, quote, ``#``, blank or control
    is percent-encoded (BibTeX or TeX would read it as syntax). Its ``%`` stay (they are its
    own escapes); inside another command's argument they need ``\\%`` (:func:`in_argument`)."""
    return "".join(f"%{ord(c):02X}" if c in _URL_REFUSED or ord(c) < 33 else c for c in address)


def in_argument(address: str) -> str:
    """``\\url{...}`` of :func:`url` inside another command's argument (``howpublished``),
    where ``%`` would start a TeX comment."""
    return r"\url{" + url(address).replace("%", r"\%") + "}"


def entry(kind: str, entry_key: str, fields: list[tuple[str, str]]) -> str:
    """One entry, ``fields`` given as (name, escaped value); empty values are left out.
    Each value goes in one pair of braces (a value that must keep its capitals is given
    in its own inner pair by the caller)."""
    lines = [f"@{kind}{{{key(entry_key)},"]
    lines += [f"  {name} = {{{value}}}," for name, value in fields if value]
    lines.append("}")
    return "\n".join(lines) + "\n"

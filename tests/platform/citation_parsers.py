"""Real parsers of the citation formats, as the tests' judges: pybtex in strict mode (a
syntax error raises instead of being skipped) and cffconvert's schema check."""

from __future__ import annotations

from typing import Any

from cffconvert.citation import Citation as CffCitation
from pybtex import errors as pybtex_errors
from pybtex.database import parse_string


def strict_entries(text: str) -> list[Any]:
    """The entries pybtex finds in ``text``, in strict mode (any syntax error raises)."""
    before = pybtex_errors.strict
    pybtex_errors.set_strict_mode(True)
    try:
        return list(parse_string(text, "bibtex").entries.values())
    finally:
        pybtex_errors.set_strict_mode(before)


def validate_cff(text: str) -> None:
    """Raise unless ``text`` is a CITATION.cff file the format's schema accepts."""
    CffCitation(text).validate()

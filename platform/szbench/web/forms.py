"""Form errors next to their field, the typed values kept: one mechanism for every form.

A page form declares its fields as a pydantic model (:class:`FormModel`); its POST route
takes the fields as plain strings (so a wrong value never becomes the app-wide "Bad request"
page, in the validator's wording) and calls :func:`check`. What comes back is a
:class:`Submitted`: the typed values, the model when they are valid, and the errors by field
in a person's words. A service error raised after that (``"code_url: ... is not an http(s)
link"``: services name the field first) goes through :meth:`Submitted.fail`, which puts it
next to the field it names, or above the form when it names none. The page is then rendered
again with ``form`` (the values) and ``errors``; the templates show them with the macros of
``_form.html`` (the message under the field, ``aria-invalid`` and ``aria-describedby`` on it).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from szbench.errors import SzbenchError

#: The key of an error that belongs to the whole form, not to one field.
FORM = "form"
#: A value that does not match its field's pattern, when the form gives no hint of its own.
PATTERN_MISMATCH = "Not in the expected form."

M = TypeVar("M", bound=BaseModel)


class FormModel(BaseModel):
    """The fields of one page form (unknown fields, the CSRF token among them, are ignored)."""

    model_config = ConfigDict(extra="ignore")


def _first_upper(text: str) -> str:
    return text[:1].upper() + text[1:]


def message(error: Mapping[str, Any]) -> str:
    """One pydantic error as a sentence for a person (``"At most 200 characters."``, not
    ``"String should have at most 200 characters"``)."""
    kind = error.get("type", "")
    ctx = error.get("ctx") or {}
    if kind == "missing" or (kind == "string_too_short" and ctx.get("min_length") == 1):
        return "Required."
    if kind == "string_too_long":
        return f"At most {ctx.get('max_length')} characters."
    if kind == "string_too_short":
        return f"At least {ctx.get('min_length')} characters."
    if kind in ("int_parsing", "int_from_float", "int_type"):
        return "Give a whole number."
    if kind in ("float_parsing", "float_type"):
        return "Give a number."
    if kind == "greater_than":
        return f"Give a number above {ctx.get('gt')}."
    if kind == "greater_than_equal":
        return f"Give {ctx.get('ge')} or more."
    if kind == "less_than":
        return f"Give a number below {ctx.get('lt')}."
    if kind == "less_than_equal":
        return f"Give {ctx.get('le')} or less."
    if kind in ("enum", "literal_error"):
        return f"Choose one of {ctx.get('expected', 'the values offered')}."
    if kind == "string_pattern_mismatch":
        return PATTERN_MISMATCH
    text = str(error.get("msg", "Not valid."))
    text = text.removeprefix("Value error, ").removeprefix("Assertion failed, ")
    return _first_upper(text.rstrip(".") + ".")


def messages(errors: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Errors by field name (the first one of each field); the request's place (``body``,
    ``query``) and list indexes are dropped from the location."""
    out: dict[str, str] = {}
    for error in errors:
        loc = [p for p in error.get("loc", ()) if isinstance(p, str)]
        if loc and loc[0] in ("body", "query", "path"):
            loc = loc[1:]
        name = loc[0] if loc else FORM
        out.setdefault(name, message(error))
    return out


def plain(text: str, labels: Mapping[str, str] | None = None) -> str:
    """``text`` with the internal field names it mentions replaced by the words the form
    uses for them (``"is not after opens_at ..."``: ``"is not after the opening time ..."``;
    ``"(confirm_public)"`` goes)."""
    for name, label in (labels or {}).items():
        text = text.replace(f" ({name})", "")
        text = re.sub(rf"\b{re.escape(name)}\b", label, text)
    return text


def service_errors(
    exc: SzbenchError, fields: Iterable[str], labels: Mapping[str, str] | None = None
) -> dict[str, str]:
    """A service error next to the field its detail names first (``"email: ..."``), or for
    the whole form; internal names in the rest are put in the form's words (``labels``)."""
    name, sep, rest = exc.detail.partition(": ")
    # Services sometimes name a nested field ("run_limits.queue"): the form's field is the head.
    head = name.split(".")[0]
    if sep and rest and head in set(fields):
        return {head: _first_upper(plain(rest, labels))}
    return {FORM: _first_upper(plain(exc.detail, labels))}


@dataclass
class Submitted(Generic[M]):
    """What a form POST carried: the typed values, the parsed model (None when invalid)
    and the errors by field."""

    values: dict[str, Any]
    model: M | None
    errors: dict[str, str] = field(default_factory=dict)
    status_code: int = 200
    #: Every field of the form, those not sent back (passwords) included.
    fields: tuple[str, ...] = ()
    #: The form's words for its fields, put in place of their names in a service's message.
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.model is not None and not self.errors

    def fail(self, exc: SzbenchError, aliases: Mapping[str, str] | None = None) -> Submitted[M]:
        """Record a service error against the field it names (the values stay as typed);
        ``aliases`` maps a service's name of a field to the form's (``password`` to
        ``new_password``)."""
        aliases = aliases or {}
        errors = service_errors(exc, [*self.fields, *self.values, *aliases], self.labels)
        self.errors.update({aliases.get(k, k): v for k, v in errors.items()})
        self.status_code = exc.status_code
        return self

    def add(self, name: str, text: str, status_code: int = 400) -> Submitted[M]:
        self.errors[name] = text
        self.status_code = status_code
        return self

    def context(self) -> dict[str, Any]:
        """What the form's template reads: ``form`` (the values) and ``errors``."""
        return {"form": self.values, "errors": self.errors}


def check(
    model: type[M],
    values: Mapping[str, Any],
    *,
    keep_secret: Iterable[str] = (),
    labels: Mapping[str, str] | None = None,
    hints: Mapping[str, str] | None = None,
) -> Submitted[M]:
    """Validate ``values`` against ``model``. Fields named in ``keep_secret`` (passwords) are
    not sent back into the page. ``labels``: the form's words for its fields (see
    :func:`plain`); ``hints``: what a field takes, said instead of "Not in the expected
    form." when its value does not match the field's pattern."""
    shown = {k: v for k, v in values.items() if k not in set(keep_secret)}
    names = tuple(values)
    words = dict(labels or {})
    try:
        valid = model.model_validate(dict(values))
        return Submitted(values=shown, model=valid, fields=names, labels=words)
    except ValidationError as exc:
        errors = messages(exc.errors())
        for name, hint in (hints or {}).items():
            if errors.get(name) == PATTERN_MISMATCH:
                errors[name] = hint
        return Submitted(
            values=shown, model=None, errors=errors, status_code=400, fields=names, labels=words
        )


def empty(values: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The context of a form shown for the first time."""
    return {"form": dict(values or {}), "errors": {}}

"""Texts in an image's configuration that nothing downstream can hold.

A NUL character in a configuration field (``WorkingDir``, ``Entrypoint``, ``Env``, ``Cmd``,
``User``, a label, a key) reaches no container: runc refuses it in the environment, the
kernel cuts a path or an argument at it, and the engine's refusal quotes it back, where
PostgreSQL's text cannot store it. Refused at upload with the field named (issue 29 item 5),
and again by the worker before any container exists (images given by reference, or accepted
before this check).
"""

from __future__ import annotations

from typing import Any


def nul_field(value: Any, where: str = "") -> str | None:
    """The first field of ``value`` (an image config as JSON) whose name or text holds a
    NUL character, as a path like ``config.Env[2]``; ``None`` when none does.

    Examples
    --------
    >>> nul_field({"config": {"Env": ["A=1", "B=x\\x00y"]}})
    'config.Env[1]'
    >>> nul_field({"config": {"Labels": {"a\\x00": "b"}}})
    "config.Labels['a\\\\x00']"
    >>> nul_field({"config": {"Cmd": ["python3"]}}) is None
    True
    """
    if isinstance(value, str):
        return where if "\0" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{where}.{key}".lstrip(".") if str(key).isidentifier() else f"{where}[{key!r}]"
            if "\0" in str(key):
                return inner
            found = nul_field(item, inner)
            if found is not None:
                return found
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = nul_field(item, f"{where}[{i}]")
            if found is not None:
                return found
    return None


def nul_refusal(config: Any, name: str = "the image config") -> str | None:
    """The refusal, naming the field, of a configuration holding a NUL; ``None`` if none."""
    field = nul_field(config)
    if field is None:
        return None
    return (
        f"{name}: the image's configuration field {field} holds a NUL character, "
        "which no container runtime accepts; rebuild the image without it"
    )

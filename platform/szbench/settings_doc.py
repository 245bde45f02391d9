"""docs/settings.md, made from :class:`szbench.config.Settings`: each field's docstring,
type and default, grouped as the class groups them. ``python -m szbench.settings_doc``
prints it; tests/test_settings_doc.py fails when the page is not what this prints."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import Any

from pydantic.fields import FieldInfo

from szbench import config

HEADER = """# Settings

Every setting is an environment variable `SZBENCH_<NAME>` (or a line in `.env`), read once
per process by `szbench.config.get_settings()`. `.env.example` is the annotated template;
this page is generated from the config class (`python -m szbench.settings_doc >
docs/settings.md`), so it is always the complete list.
"""


def _sections() -> dict[str, str]:
    """The first field of each ``# --- Title ---`` group in the class, mapped to the title:
    the groups are the class's own comments, so the page cannot drift from them."""
    source = inspect.getsource(config.Settings)
    tree = ast.parse(source)
    lines = source.splitlines()
    titles: dict[str, str] = {}
    pending = ""
    fields = {
        node.lineno: node.target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if text.startswith("# ---"):
            pending = text.strip("#- ").strip()
        elif number in fields and pending:
            titles[fields[number]] = pending
            pending = ""
    return titles


def _default(info: FieldInfo) -> str:
    value: Any = info.get_default(call_default_factory=True)
    if value is None or value == "":
        return "(empty)"
    if info.annotation is bool or isinstance(value, bool):
        return "true" if value else "false"
    if str(value).startswith(str(Path.home())):
        return f"`~{str(value)[len(str(Path.home())) :]}`"
    return f"`{value}`"


BOUNDS = """
## Which setting moves which bound

Each setting below moves a bound that docs/security.md or docs/operations.md states: the
docs state it at the default, and a deployment that changes the setting changes the bound
with it. The list is made from each field's own metadata (`szbench.config.moves`), so it
cannot drift from the class. The numbers those docs state bounds with and that no operator
has a reason to change are not settings at all (see "No longer settings" below): the bound
the docs promise is the one that holds.

| Setting | What it moves | Stated in |
| --- | --- | --- |"""

REMOVED = """
## No longer settings

These were settings. Each is now a constant next to the code it bounds, with the reason for
its value beside it: a tuning knob no operator decision hangs on, or a number a bound the
docs state is computed from. Setting one changes nothing; every process that reads the
settings logs one warning naming those still set (`szbench.config.removed_in_environment`).
"""


def _moves(name: str, info: FieldInfo) -> str | None:
    extra = info.json_schema_extra
    if not isinstance(extra, dict) or "moves_bound" not in extra:
        return None
    where = f'{extra["moves_doc"]}, "{extra["moves_section"]}"'
    return f"| `SZBENCH_{name.upper()}` | {extra['moves_bound']} | {where} |"


def render() -> str:
    sections = _sections()
    out = [HEADER]
    for name, info in config.Settings.model_fields.items():
        if name in sections:
            out.append(f"\n## {sections[name]}\n")
        description = " ".join((info.description or "").split())
        out.append(f"- **`SZBENCH_{name.upper()}`** (default {_default(info)}): {description}")
    out.append(BOUNDS)
    out.extend(
        row for name, info in config.Settings.model_fields.items() if (row := _moves(name, info))
    )
    out.append(REMOVED)
    out.extend(f"- `{variable}`: `{where}`" for variable, where in sorted(config.REMOVED.items()))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(), end="")

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


def render() -> str:
    sections = _sections()
    out = [HEADER]
    for name, info in config.Settings.model_fields.items():
        if name in sections:
            out.append(f"\n## {sections[name]}\n")
        description = " ".join((info.description or "").split())
        out.append(f"- **`SZBENCH_{name.upper()}`** (default {_default(info)}): {description}")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(render(), end="")

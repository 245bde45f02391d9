"""The scorer's module boundaries: a standalone numpy library whose modules share only public
names (a private module such as ``_batch_parse`` gives what it shares a public name)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import szbench_scoring

PACKAGE = Path(szbench_scoring.__file__).parent


def _imports(path: Path) -> list[ast.Import | ast.ImportFrom]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def test_no_module_imports_a_private_name_of_another() -> None:
    found = [
        f"{path.name}:{node.lineno} imports {alias.name} from {node.module}"
        for path in sorted(PACKAGE.glob("*.py"))
        for node in _imports(path)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("szbench_scoring")
        for alias in node.names
        if alias.name.startswith("_")
    ]
    assert not found, found


def test_imports_only_numpy_and_the_standard_library() -> None:
    allowed = set(sys.stdlib_module_names) | {"numpy", "szbench_scoring", "__future__"}
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        for node in _imports(path):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            found += [
                f"{path.name}:{node.lineno} imports {name}"
                for name in names
                if name and name.split(".")[0] not in allowed
            ]
    assert not found, found

"""Docs that cannot drift: what README.md, docs/*.md and benchmarks/RESULTS.md cite is
resolved against the code, never trusted. ``python -m szbench.docs_check`` (``make lint``,
pre-commit) prints one line per problem, ``doc:line: what is wrong``; ``--write`` fills in
the generated values and docs/settings.md from the code.

- **Tests.** ``tests/<path>.py::<name>`` is a test of that file (``name[...]``, a
  parametrised id, is its function); ``::<name>`` after it, a test of the same file; a bare
  ``test_x.py``, the file of that name beside the last one cited, else the only one; a code
  span that is only ``test_<name>``, a test of the last file cited. Tests are read from each
  file's syntax tree: nothing is imported or collected.
- **Settings.** ``SZBENCH_<NAME>`` is a field of :class:`szbench.config.Settings` or a
  variable the code reads itself (``$SZBENCH_...`` in compose files, scripts, Dockerfiles
  and CI, ``os.environ``/``getenv`` in Python); ``SZBENCH_<PREFIX>*`` names at least one.
  One that is no longer a setting (:data:`szbench.config.REMOVED`) is named only on
  docs/settings.md, which lists them; elsewhere the check names the constant to cite.
- **Values.** ``<!-- value: NAME -->text<!-- /value -->`` holds the code's value of NAME: a
  setting's default, or a module constant (``szbench.module.CONSTANT``, evaluated from its
  source). The unit follows the name (``_BYTES``: KiB, MiB, GiB; ``_S``: seconds) unless the
  marker names one (``<!-- value: NAME h -->``). A value written by hand right after a
  setting's name (`` `SZBENCH_X` (5) ``, `` `SZBENCH_X`, 5 ``) is refused: it would drift
  (``--write`` marks it where it already is the code's value).
- **Code.** A path under the project's top folders exists; a dotted ``szbench...``,
  ``szbench_worker...`` or ``szbench_scoring...`` name is a module, a name a module (or a
  class in it) defines, or a name the code spells as a string (a task's); ``make <target>``
  in code is a target of the Makefile.
- **Sections.** A doc's section cited by its title (``docs/api.md, "Teams"``, ``"Timing"
  above``) begins a heading or a bold lead-in there; a relative link leads to a file, and its
  ``#anchor`` to a heading.
"""

from __future__ import annotations

import argparse
import ast
import bisect
import functools
import math
import operator
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {
    "szbench": "platform/szbench",
    "szbench_worker": "worker/szbench_worker",
    "szbench_scoring": "scoring/szbench_scoring",
}
TOP_FOLDERS = "platform worker scoring scripts benchmarks examples docker migrations tests docs .ci"
WRITE_HINT = "python -m szbench.docs_check --write"
# A dotted name ending so is a host (szbench.example.org), not a module.
_HOSTS = frozenset({"org", "com", "net", "io", "local", "localhost", "test", "example"})

_ID = r"(\[[^\]\s`]*\])?"  # a parametrised id
_TEST_REF = re.compile(r"(?<![\w./-])(tests/[\w/.-]*?\.py)((?:::\w+)*)" + _ID)
_TEST_FILE = re.compile(r"(?<![\w./-])(test_\w+\.py)((?:::\w+)*)" + _ID)
_TEST_AFTER = re.compile(r"(?<![\w\]])::((?:Test\w+::)?test\w*)" + _ID)
_TEST_SPAN = re.compile(r"((?:Test\w+::)?test_\w+)" + _ID)
_PATH = re.compile(rf"(?<![\w./~$-])((?:{'|'.join(map(re.escape, TOP_FOLDERS.split()))})/[\w./-]*)")
_DOTTED = re.compile(rf"(?<![\w./-])((?:{'|'.join(PACKAGES)})(?:\.\w+)+)")
_SETTING = re.compile(r"(?<![\w$])SZBENCH_[A-Z0-9_]*")
_VALUE = re.compile(r"<!-- value: ([\w.]+)(?: (\w+))? -->(.*?)<!-- /value -->")
_VALUE_OPEN = re.compile(r"<!-- value\b")
# A value right after a setting's name: `SZBENCH_X` (5), (default **5**), `SZBENCH_X`, 5, or
# `SZBENCH_X` 16 MiB in a table cell.
_LITERAL = r"(?:default:?\s+)?\**(?=\d|true\b|false\b|empty\b|none\b)"
_HAND_VALUE = re.compile(rf"`?(?:\s*\(\s*{_LITERAL}|,\s*{_LITERAL}|[ \t]+(?=\d))")
# A section cited by its title, in another doc (`docs/api.md, "Teams"`) or this one
# (`"Timing" above`), and a relative link with its anchor.
_SECTION_REF = re.compile(r'((?:\.\./|docs/|benchmarks/)?[\w-]+\.md)`?,?\s+"([^"\n]+)"')
_SECTION_HERE = re.compile(r'"([^"\n]+)"\)?\s+(?:above|below)\b')
_LINK = re.compile(r"\]\((?![a-z]+:)([^)#\s]*)(?:#([^)\s]+))?\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*$|\*\*([^*\n]+?)\.?\*\*", re.M)
_STATED = re.compile(
    r"\d+(?:[,.]\d+)*(?: (s|min|h|days|bytes|KiB|MiB|GiB|TiB)\b)?|true|false|empty|none"
)
_MAKE = re.compile(r"(?<![\w./-])make((?:[ \t]+[a-z][\w-]*)+)")
_FENCE = re.compile(r"^ {0,3}(?:```|~~~)", re.M)
_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")
_ENV_READ = re.compile(
    r"\$\{?(SZBENCH_[A-Z0-9_]+)|(?:environ\.get\(|environ\[|getenv\()\s*[\"'](SZBENCH_[A-Z0-9_]+)"
)

_UNITS = {"bytes": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_UNITS |= {"s": 1, "min": 60, "h": 3600, "days": 86400}
_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
}


@dataclass(frozen=True, order=True)
class Problem:
    doc: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.message}"


class Code:
    """What the docs are checked against, read from the source tree at ``root`` as needed."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root

    @functools.cached_property
    def settings(self) -> dict[str, Any]:
        """``SZBENCH_<NAME>`` of every setting, mapped to its default."""
        from szbench.config import Settings

        return {
            f"SZBENCH_{name.upper()}": info.get_default(call_default_factory=True)
            for name, info in Settings.model_fields.items()
        }

    @functools.cached_property
    def removed(self) -> dict[str, str]:
        """Variables that were settings, mapped to the constant each one became."""
        from szbench.config import REMOVED

        return REMOVED

    @functools.cached_property
    def environment(self) -> frozenset[str]:
        """``SZBENCH_`` variables the code reads without the settings class."""
        files = [self.root / p for p in ("docker-compose.yml", "docker-compose.local.yml")]
        for pattern in ("scripts/*.sh", "docker/*", ".ci/*"):
            files.extend(self.root.glob(pattern))
        for top in ("platform", "worker", "scoring", "scripts", "benchmarks", "tests"):
            files.extend((self.root / top).rglob("*.py"))
        names: set[str] = set()
        for path in files:
            text = path.read_text(errors="replace") if path.is_file() else ""
            if "SZBENCH_" in text:
                names.update(a or b for a, b in _ENV_READ.findall(text))
        return frozenset(names)

    @functools.cached_property
    def make_targets(self) -> frozenset[str]:
        makefile = (self.root / "Makefile").read_text()
        return frozenset(re.findall(r"^([\w.-]+)[ \t]*:(?!=)", makefile, flags=re.M))

    @functools.cached_property
    def test_files(self) -> dict[str, list[str]]:
        """Each test file's name, mapped to its paths from the root."""
        found: dict[str, list[str]] = {}
        for path in sorted((self.root / "tests").rglob("test_*.py")):
            found.setdefault(path.name, []).append(path.relative_to(self.root).as_posix())
        return found

    @functools.cache  # noqa: B019 (one Code per run: the cache is the point)
    def tests(self, rel: str) -> frozenset[str]:
        """The tests pytest collects from ``rel``, by name (``Class::method`` in classes)."""
        names = set()
        for node in ast.parse((self.root / rel).read_text(), filename=rel).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
                names.update(f"{node.name}::{method}" for method in _bound(node.body))
        return frozenset(n for n in names if re.match(r"(Test\w+::)?test", n))

    def defining(self, name: str) -> list[str]:
        """The test files that define ``name`` (a hint for a citation that missed)."""
        pattern = re.compile(rf"^(?:async )?def {re.escape(name)}\b", flags=re.M)
        return [
            rel
            for paths in self.test_files.values()
            for rel in paths
            if pattern.search((self.root / rel).read_text()) and name in self.tests(rel)
        ]

    @functools.cached_property
    def strings(self) -> frozenset[str]:
        """Dotted names the product spells as strings (task, queue and logger names)."""
        found: set[str] = set()
        for package in PACKAGES.values():
            for path in (self.root / package).rglob("*.py"):
                found.update(re.findall(r"[\"'](szbench[\w.]*)[\"']", path.read_text()))
        return frozenset(found)

    @functools.cache  # noqa: B019
    def sections(self, path: Path) -> tuple[list[str], set[str]]:
        """A doc's section titles (headings and bold lead-ins) and its headings' anchors."""
        titles, anchors = [], set()
        for heading, lead in _HEADING.findall(path.read_text()):
            titles.append((heading or lead).replace("`", ""))
            if heading:
                anchors.add(re.sub(r"[^\w\- ]", "", titles[-1].lower()).replace(" ", "-"))
        return titles, anchors

    @functools.cache  # noqa: B019
    def module(self, dotted: str) -> tuple[Path, list[str]]:
        """The source of the longest module prefix of ``dotted``, and the names after it."""
        first, *rest = dotted.split(".")
        folder = self.root / PACKAGES[first]
        for index, part in enumerate(rest):
            if (folder / part / "__init__.py").is_file():
                folder = folder / part
            elif (folder / f"{part}.py").is_file():
                return folder / f"{part}.py", rest[index + 1 :]
            else:
                return folder / "__init__.py", rest[index:]
        return folder / "__init__.py", []

    @functools.cache  # noqa: B019
    def definitions(self, path: Path) -> dict[str, ast.AST]:
        """The names a module binds at its top level, mapped to what binds them."""
        return _bound(ast.parse(path.read_text(), filename=str(path)).body)

    def value(self, name: str) -> Any:
        """A setting's default, or a module constant evaluated from its source."""
        if name.startswith("SZBENCH_"):
            if name not in self.settings:
                raise LookupError(f"{name} is not a setting")
            return self.settings[name]
        if name.split(".")[0] not in PACKAGES:
            raise LookupError(
                f"{name} is neither a setting nor a constant of {', '.join(PACKAGES)}"
            )
        path, names = self.module(name)
        scope = self.definitions(path)
        if len(names) != 1 or names[0] not in scope:
            raise LookupError(f"{name}: no such module constant")
        return _evaluate(scope, scope[names[0]], name)


def _bound(body: list[ast.stmt]) -> dict[str, ast.AST]:
    names: dict[str, ast.AST] = {}
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names[node.name] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                names.update(
                    (n.id, node.value) for n in ast.walk(target) if isinstance(n, ast.Name)
                )
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node.value or node
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update(((a.asname or a.name).split(".")[0], node) for a in node.names)
        elif isinstance(node, ast.If | ast.Try):
            names.update(_bound(node.body))
    return names


def _evaluate(scope: dict[str, ast.AST], node: ast.AST, name: str) -> Any:
    """A constant expression (literals, arithmetic, other constants of the module)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and isinstance(scope.get(node.id), ast.expr):
        return _evaluate(scope, scope[node.id], name)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](
            _evaluate(scope, node.left, name), _evaluate(scope, node.right, name)
        )
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(scope, node.operand, name)
    raise LookupError(f"{name} is not a constant that can be read from its source")


def _number(value: float) -> str:
    if float(value).is_integer():
        return f"{int(value):,}"
    return repr(round(value, 6))


def render(name: str, value: Any, unit: str | None = None) -> str:
    """How a doc writes ``value``, the value of the setting or constant ``name``."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Path):
        home, text = str(Path.home()), str(value)
        return f"`~{text[len(home) :]}`" if text.startswith(home) else f"`{text}`"
    if isinstance(value, str):
        return f"`{value}`" if value else "empty"
    if not isinstance(value, int | float):
        raise LookupError(f"{name} is a {type(value).__name__}: no value a doc can state")
    if unit is None and name.upper().endswith("_BYTES") and value:
        unit = next(u for u in ("TiB", "GiB", "MiB", "KiB", "bytes") if not value % _UNITS[u])
    elif unit is None and name.upper().endswith("_S"):
        unit = "s"
    if unit is None:
        return _number(value)
    if unit not in _UNITS:
        raise LookupError(f"{name}: unknown unit {unit!r} (one of {', '.join(_UNITS)})")
    amount = value / _UNITS[unit]
    return f"{_number(amount)} {'day' if unit == 'days' and amount == 1 else unit}"


def doc_paths(root: Path = ROOT) -> list[Path]:
    return [
        root / "README.md",
        *sorted((root / "docs").glob("*.md")),
        root / "benchmarks/RESULTS.md",
    ]


class _Regions:
    """The fenced blocks and inline code spans of a doc, ``(start, end, fenced)`` in order."""

    def __init__(self, text: str) -> None:
        fences = [m.start() for m in _FENCE.finditer(text)] + [len(text)]
        pairs = zip(fences[:-1:2], fences[1::2], strict=False)
        blocks = [(start, min(end + 3, len(text)), True) for start, end in pairs]
        spans: list[tuple[int, int, bool]] = []
        prose_start = 0
        for start, end, _ in [*blocks, (len(text), len(text), True)]:
            spans.extend(
                (m.start(1), m.end(1), False) for m in _SPAN.finditer(text, prose_start, start)
            )
            prose_start = end
        self.all = sorted(blocks + spans)
        self.fenced = blocks

    @staticmethod
    def holds(regions: list[tuple[int, int, bool]], offset: int) -> bool:
        index = bisect.bisect_right(regions, (offset, math.inf, True)) - 1
        return index >= 0 and offset < regions[index][1]


class _Reader:
    """One doc, read in order: a ``::name`` or a bare name is a test of the last file cited."""

    def __init__(self, code: Code, doc: str, text: str) -> None:
        self.code, self.doc, self.text = code, doc, text
        self.regions = _Regions(text)
        self.problems: list[Problem] = []
        self.context: str | None = None
        self._lines = [0, *(m.end() for m in re.finditer("\n", text))]

    def report(self, offset: int, message: str) -> None:
        line = bisect.bisect_right(self._lines, offset)
        self.problems.append(Problem(self.doc, line, message))

    def check(self) -> list[Problem]:
        # Where two citations overlap, the first to start is read, then the more specific
        # (a value marker holds a name; a test file is a path).
        patterns: list[tuple[re.Pattern[str], Callable[[int, re.Match[str]], None]]] = [
            (_VALUE, self._value),
            (_SECTION_REF, self._section_ref),
            (_SECTION_HERE, self._section_here),
            (_LINK, self._link),
            (_TEST_REF, self._test_ref),
            (_TEST_FILE, self._test_file),
            (_TEST_AFTER, self._test_after),
            (_PATH, self._path),
            (_DOTTED, self._dotted),
            (_SETTING, self._setting),
        ]
        found: list[tuple[int, int, int, Callable[[], None]]] = []
        for rank, (pattern, handler) in enumerate(patterns):
            for match in pattern.finditer(self.text):
                if pattern is _VALUE and _Regions.holds(self.regions.all, match.start()):
                    continue  # a marker shown as code
                call = functools.partial(handler, match.start(), match)
                found.append((match.start(), rank, match.end(), call))
        for start, end, fenced in self.regions.all:
            code = self.text[start:end]
            if not fenced and (bare := _TEST_SPAN.fullmatch(code)):
                found.append(
                    (start, len(patterns), end, functools.partial(self._test_span, start, bare))
                )
            for make in _MAKE.finditer(code):
                call = functools.partial(self._make, start + make.start(), make)
                found.append((start + make.start(), len(patterns), start + make.end(), call))
        covered = 0
        for start, _, end, read in sorted(found, key=lambda item: item[:2]):
            if start >= covered:
                read()
                covered = end
        for match in _VALUE_OPEN.finditer(self.text):
            if not _Regions.holds(self.regions.all, match.start()) and not _VALUE.match(
                self.text, match.start()
            ):
                self.report(match.start(), f"a value marker that does not read {_VALUE.pattern}")
        return self.problems

    def _test_name(self, at: int, name: str, cited: str) -> None:
        if self.context is not None and name in self.code.tests(self.context):
            return
        where = f"{self.context} has no test {name}" if self.context else "no test file before it"
        elsewhere = self.code.defining(name)
        hint = f" (it is in {', '.join(elsewhere)}: cite it with its file)" if elsewhere else ""
        self.report(at, f"{cited}: {where}{hint}")

    def _test_ref(self, at: int, match: re.Match[str]) -> None:
        rel, names = match.group(1), match.group(2)
        if not (self.code.root / rel).is_file():
            self.report(at, f"{rel} does not exist")
            return
        self.context = rel
        if names:
            self._test_name(at, names[2:], match.group(0))

    def _test_file(self, at: int, match: re.Match[str]) -> None:
        name, names = match.group(1), match.group(2)
        candidates = self.code.test_files.get(name, [])
        if self.context and (beside := f"{self.context.rsplit('/', 1)[0]}/{name}") in candidates:
            candidates = [beside]
        if len(candidates) != 1:
            self.report(
                at,
                f"{name}: {len(candidates)} test files have this name "
                f"({', '.join(candidates)}): cite it from tests/",
            )
            return
        self.context = candidates[0]
        if names:
            self._test_name(at, names[2:], match.group(0))

    def _test_after(self, at: int, match: re.Match[str]) -> None:
        self._test_name(at, match.group(1), match.group(0))

    def _test_span(self, at: int, match: re.Match[str]) -> None:
        self._test_name(at, match.group(1), match.group(0))

    def _path(self, at: int, match: re.Match[str]) -> None:
        rel = match.group(1).rstrip(".,:;")
        if self.text[match.end() : match.end() + 1] in ("<", "*", "{", "$", "…") or "..." in rel:
            return  # a pattern, not a path
        if not (self.code.root / rel).exists():
            self.report(at, f"{rel} does not exist")

    def _dotted(self, at: int, match: re.Match[str]) -> None:
        dotted = match.group(1)
        path, names = self.code.module(dotted)
        if not names or dotted in self.code.strings or names[-1] in _HOSTS:
            return
        module = dotted.rsplit(".", len(names))[0]
        node = self.code.definitions(path).get(names[0])
        if node is None:
            self.report(at, f"{dotted}: {module} defines no {names[0]}")
        elif (
            isinstance(node, ast.ClassDef) and len(names) > 1 and names[1] not in _bound(node.body)
        ):
            self.report(at, f"{dotted}: {module}.{names[0]} defines no {names[1]}")

    def _setting(self, at: int, match: re.Match[str]) -> None:
        name, following = match.group(0), self.text[match.end() : match.end() + 1]
        if name == "SZBENCH_" or following in ("<", "…"):
            return  # the prefix itself, or a placeholder
        known = self.code.settings.keys() | self.code.environment
        if name in self.code.removed:
            # Listed as such on the generated page; anywhere else a doc still relies on it.
            if self.doc != "docs/settings.md":
                self.report(
                    at,
                    f"{name} is no longer a setting: it is {self.code.removed[name]} (cite that, "
                    "or reword)",
                )
            return
        if following == "*":
            if not any(k.startswith(name) for k in known):
                self.report(at, f"{name}*: no setting or variable starts so")
        elif name not in known:
            self.report(
                at,
                f"{name} is not a setting (szbench.config.Settings) nor a variable the code reads "
                "(compose files, scripts, Dockerfiles, os.environ)",
            )
        elif (
            name in self.code.settings
            and _HAND_VALUE.match(self.text, match.end())
            and not _Regions.holds(self.regions.fenced, at)
        ):
            self.report(
                at,
                f"{name} has a value written by hand after it; the code says "
                f"{render(name, self.code.settings[name])}. A default goes in "
                f"<!-- value: {name} -->...<!-- /value --> ({WRITE_HINT} puts one that is the "
                "code's there); anything else, reword",
            )

    def _value(self, at: int, match: re.Match[str]) -> None:
        name, unit, stated = match.groups()
        try:
            expected = render(name, self.code.value(name), unit)
        except LookupError as error:
            self.report(at, str(error))
            return
        if stated != expected:
            self.report(
                at, f"{name} is {expected} in the code, the doc says {stated!r}: run {WRITE_HINT}"
            )

    def _doc(self, rel: str) -> Path:
        """A doc named in this one: from the root (docs/..., benchmarks/...), else beside it."""
        if rel.startswith(("docs/", "benchmarks/")) or rel == "README.md":
            return self.code.root / rel
        return (self.code.root / self.doc).parent / rel

    def _section(self, at: int, path: Path, title: str, cited: str) -> None:
        if not path.is_file():
            self.report(at, f"{cited}: {path.relative_to(self.code.root)} does not exist")
        elif not any(t.startswith(title.replace("`", "")) for t in self.code.sections(path)[0]):
            where = path.resolve().relative_to(self.code.root.resolve()).as_posix()
            self.report(at, f"{cited}: {where} has no section {title!r}")

    def _section_ref(self, at: int, match: re.Match[str]) -> None:
        self._section(at, self._doc(match.group(1)), match.group(2), match.group(0))

    def _section_here(self, at: int, match: re.Match[str]) -> None:
        self._section(at, self.code.root / self.doc, match.group(1), match.group(0))

    def _link(self, at: int, match: re.Match[str]) -> None:
        target, anchor = match.groups()
        path = (self.code.root / self.doc).parent / target if target else self.code.root / self.doc
        if not path.exists():
            self.report(at, f"the link to {target} leads nowhere")
        elif anchor and path.suffix == ".md" and anchor not in self.code.sections(path)[1]:
            self.report(at, f"the link to {target}#{anchor}: no such heading")

    def _make(self, at: int, match: re.Match[str]) -> None:
        for target in match.group(1).split():
            if target not in self.code.make_targets:
                self.report(at, f"make {target}: the Makefile has no such target")


def check_text(code: Code, doc: str, text: str) -> list[Problem]:
    """The problems of one doc, named ``doc`` in the messages."""
    return _Reader(code, doc, text).check()


def fill_values(code: Code, text: str) -> str:
    """``text`` with each value marker holding the code's value (unknown names left as is)."""
    regions = _Regions(text).all

    def fill(match: re.Match[str]) -> str:
        name, unit, stated = match.groups()
        if _Regions.holds(regions, match.start()):
            return match.group(0)
        try:
            stated = render(name, code.value(name), unit)
        except LookupError:
            return match.group(0)  # the check names it
        return f"<!-- value: {name}{f' {unit}' if unit else ''} -->{stated}<!-- /value -->"

    return _VALUE.sub(fill, text)


def mark_values(code: Code, text: str) -> str:
    """``text`` with each value written by hand after a setting's name put in a marker where
    it already is the code's value (``(3600 s)`` as ``3,600 s``); one that differs is left for
    a person to judge (the check names it)."""
    fenced = _Regions(text).fenced
    out, done = [], 0
    for match in _SETTING.finditer(text):
        name = match.group(0)
        hand = _HAND_VALUE.match(text, match.end())
        stated = hand and _STATED.match(text, hand.end())
        if not stated or name not in code.settings or _Regions.holds(fenced, match.start()):
            continue
        unit = stated.group(1) if stated.group(1) in ("min", "h", "days") else None
        value = render(name, code.settings[name], unit)
        if stated.group(0).replace(",", "").removesuffix(" s") == value.replace(
            ",", ""
        ).removesuffix(" s"):
            out += [
                text[done : stated.start()],
                f"<!-- value: {name}{f' {unit}' if unit else ''} -->{value}<!-- /value -->",
            ]
            done = stated.end()
    return "".join(out) + text[done:]


def check(code: Code) -> list[Problem]:
    """Every problem of every doc, and docs/settings.md against the settings class."""
    from szbench import settings_doc

    problems = []
    for path in doc_paths(code.root):
        problems += check_text(code, path.relative_to(code.root).as_posix(), path.read_text())
    if (code.root / "docs/settings.md").read_text() != settings_doc.render():
        problems.append(
            Problem("docs/settings.md", 1, f"not what the settings say: run {WRITE_HINT}")
        )
    return sorted(problems)


def write(code: Code) -> None:
    from szbench import settings_doc

    for path in doc_paths(code.root):
        text = path.read_text()
        if (filled := fill_values(code, mark_values(code, text))) != text:
            path.write_text(filled)
    (code.root / "docs/settings.md").write_text(settings_doc.render())


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(prog="python -m szbench.docs_check", description=__doc__)
    parser.add_argument("--write", action="store_true", help="fill in the values from the code")
    code = Code(root)
    if parser.parse_args(argv).write:
        write(code)
    problems = check(code)
    print(*problems, sep="\n", end="\n" if problems else "")
    if problems:
        print(f"docs_check: {len(problems)} problem(s) in the docs", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""The docs check (szbench.docs_check, run by make lint) catches each kind of drift: probe docs
read against a small project tree that cite a missing test, setting, value, path, name or
make target fail with the doc's file and line; what exists passes."""

from __future__ import annotations

from pathlib import Path

import pytest

from szbench import docs_check, settings_doc
from szbench.docs_check import (
    Code,
    check_text,
    fill_values,
    mark_values,
    render,
)

TEST_FILE = """
import pytest


def test_one() -> None: ...


@pytest.mark.parametrize("x", [1, 2])
def test_two(x: int) -> None: ...


class TestGroup:
    def test_inside(self) -> None: ...


def helper() -> None: ...
"""

MODULE = '''
"""Limits."""
from pathlib import Path

_BLOCK_BYTES = 32 * 1024**2
TRIES = 6
BACKOFF_S = 60.0
CAP_S = BACKOFF_S * 60


class Limits:
    size: int = 3

    def apply(self) -> None: ...
'''


@pytest.fixture(scope="module")
def code(tmp_path_factory: pytest.TempPathFactory) -> Code:
    return project(tmp_path_factory.mktemp("project"))


def project(root: Path) -> Code:
    """A small project: tests, a module of constants, a compose file, a Makefile and a doc."""
    for rel, text in {
        "tests/platform/test_things.py": TEST_FILE,
        "tests/web/test_pages.py": "def test_page() -> None: ...\n",
        "tests/platform/test_pages.py": "def test_api_page() -> None: ...\n",
        "platform/szbench/__init__.py": "",
        "platform/szbench/limits.py": MODULE,
        "platform/szbench/queue.py": 'TASK = "szbench.evaluation.start"\n',
        "worker/szbench_worker/__init__.py": "",
        "scoring/szbench_scoring/__init__.py": "",
        "scripts/setup.sh": 'echo "${SZBENCH_SCRIPT_ONLY:-1}"\n',
        "docker-compose.yml": "x: ${SZBENCH_COMPOSE_ONLY:-1}\n",
        "Makefile": "BIN := .venv/bin\n\nlint: setup\n\ttrue\n\nsetup:\n\ttrue\n",
        "docs/other.md": "# Other\n\n## Worker disk: `/output`\n\n**Names.** Text.\n",
    }.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return Code(root)


def messages(code: Code, text: str) -> list[str]:
    """The problems of ``text`` as docs/probe.md (a doc in the project, for its own sections)."""
    (code.root / "docs/probe.md").write_text(text)
    code.sections.cache_clear()
    return [str(p) for p in check_text(code, "docs/probe.md", text)]


def a_number_setting(code: Code) -> tuple[str, int]:
    """A setting with a plain number for default (whichever the settings class has)."""
    return next(
        (name, default)
        for name, default in code.settings.items()
        if type(default) is int and not name.endswith(("_BYTES", "_S"))
    )


def test_cited_tests_that_exist_pass(code: Code) -> None:
    text = """Proved by `tests/platform/test_things.py::test_one`, `::test_two[1]`,
`::TestGroup::test_inside` and (`test_one`); the file `tests/platform/test_things.py`;
`test_pages.py::test_api_page` is the one beside it, `tests/web/test_pages.py::test_page`.
"""
    assert messages(code, text) == []


def test_a_missing_test_fails_with_the_file_and_line(code: Code) -> None:
    text = """# Probe

| What | Proved by |
|---|---|
| a bound | `tests/platform/test_things.py::test_gone`, `::test_one`, `::test_also_gone[x]` |
| more | `tests/platform/test_nowhere.py::test_one` |
The bare name `test_page` is in another file; `helper` is no test: `::helper`.
"""
    assert messages(code, text) == [
        "docs/probe.md:5: tests/platform/test_things.py::test_gone: "
        "tests/platform/test_things.py has no test test_gone",
        "docs/probe.md:5: ::test_also_gone[x]: tests/platform/test_things.py has no test "
        "test_also_gone",
        "docs/probe.md:6: tests/platform/test_nowhere.py does not exist",
        "docs/probe.md:7: test_page: tests/platform/test_things.py has no test test_page "
        "(it is in tests/web/test_pages.py: cite it with its file)",
    ]


def test_a_bare_test_file_must_be_one_file(code: Code) -> None:
    assert messages(code, "See `test_pages.py`.\n") == [
        "docs/probe.md:1: test_pages.py: 2 test files have this name "
        "(tests/platform/test_pages.py, tests/web/test_pages.py): cite it from tests/"
    ]
    assert messages(code, "After `tests/web/test_pages.py`, `test_pages.py::test_page`.") == []


def test_a_missing_setting_fails(code: Code) -> None:
    name, _ = a_number_setting(code)
    text = f"""Set `{name}` or `SZBENCH_COMPOSE_ONLY` or `SZBENCH_SCRIPT_ONLY` (read by the
compose file and a script), `SZBENCH_<NAME>`, `SZBENCH_…` and `{name[:12]}*`.
Not `SZBENCH_NO_SUCH_SETTING`, nor `SZBENCH_NOTHING_*`.
"""
    assert messages(code, text) == [
        "docs/probe.md:3: SZBENCH_NO_SUCH_SETTING is not a setting (szbench.config.Settings) "
        "nor a variable the code reads (compose files, scripts, Dockerfiles, os.environ)",
        "docs/probe.md:3: SZBENCH_NOTHING_*: no setting or variable starts so",
    ]


def test_a_setting_that_became_a_constant_is_named_only_on_the_settings_page(
    code: Code,
) -> None:
    from szbench.config import REMOVED

    name, constant = next(iter(REMOVED.items()))
    assert messages(code, f"Raise `{name}`.\n") == [
        f"docs/probe.md:1: {name} is no longer a setting: it is {constant} (cite that, or reword)"
    ]
    # The generated page lists them as no longer settings.
    assert check_text(code, "docs/settings.md", f"- `{name}`: no longer a setting\n") == []


def test_a_wrong_default_fails_and_write_fills_it_in(code: Code) -> None:
    name, default = a_number_setting(code)
    right = f"`{name}` (<!-- value: {name} -->{default:,}<!-- /value -->)"
    wrong = f"`{name}` (<!-- value: {name} -->{default + 1}<!-- /value -->)"
    assert messages(code, right) == []
    assert messages(code, f"Intro.\n{wrong}\n") == [
        f"docs/probe.md:2: {name} is {default:,} in the code, the doc says '{default + 1}': "
        "run python -m szbench.docs_check --write"
    ]
    assert fill_values(code, wrong) == right


def test_a_value_written_by_hand_after_a_setting_fails(code: Code) -> None:
    name, default = a_number_setting(code)
    for hand in (f"`{name}` (20)", f"`{name}`, 20", f"(`{name}`,\ndefault **20**)", f"`{name}` 20"):
        assert messages(code, hand) == [
            f"docs/probe.md:1: {name} has a value written by hand after it; the code says "
            f"{default:,}. A default goes in <!-- value: {name} -->...<!-- /value --> "
            "(python -m szbench.docs_check --write puts one that is the code's there); "
            "anything else, reword"
        ], hand
    # Setting it, a condition on it, or an example in a code block is no default.
    assert messages(code, f"`{name}=20`, `{name}` empty, (`{name}` times)\n") == []
    assert messages(code, f"```sh\n{name} 20 szbench serve\n```\n") == []


def test_write_marks_hand_values_that_are_the_codes_and_leaves_the_others(code: Code) -> None:
    name, default = a_number_setting(code)
    text = (
        f"`{name}` ({default}), `{name}`, default **{default + 1}**:\n```\n{name} {default}\n```\n"
    )
    marked = mark_values(code, text)
    assert marked == text.replace(
        f"({default})", f"(<!-- value: {name} -->{default:,}<!-- /value -->)", 1
    )
    assert [m.split(": ", 1)[1][:40] for m in messages(code, marked)] == [
        f"{name} has a value written by hand after it"[:40]
    ]


def test_module_constants_are_read_from_their_source(code: Code) -> None:
    text = """Free: <!-- value: szbench.limits._BLOCK_BYTES -->32 MiB<!-- /value -->,
<!-- value: szbench.limits.TRIES -->6<!-- /value --> tries, every
<!-- value: szbench.limits.BACKOFF_S -->60 s<!-- /value --> up to
<!-- value: szbench.limits.CAP_S h -->1 h<!-- /value -->.
"""
    assert messages(code, text) == []
    wrong = text.replace("32 MiB", "64 MiB").replace("-->1 h<", "-->2 h<")
    assert messages(code, wrong) == [
        "docs/probe.md:1: szbench.limits._BLOCK_BYTES is 32 MiB in the code, the doc says "
        "'64 MiB': run python -m szbench.docs_check --write",
        "docs/probe.md:4: szbench.limits.CAP_S is 1 h in the code, the doc says '2 h': "
        "run python -m szbench.docs_check --write",
    ]
    assert fill_values(code, wrong) == text
    assert messages(code, "<!-- value: szbench.limits.GONE -->6<!-- /value -->") == [
        "docs/probe.md:1: szbench.limits.GONE: no such module constant"
    ]
    assert messages(code, "<!-- value: szbench.limits.Limits -->6<!-- /value -->") == [
        "docs/probe.md:1: szbench.limits.Limits is not a constant that can be read from its source"
    ]


def test_a_broken_marker_fails_and_one_shown_as_code_is_left_alone(code: Code) -> None:
    assert messages(code, "Text\n<!-- value: szbench.limits.TRIES -->6") == [
        "docs/probe.md:2: a value marker that does not read "
        "<!-- value: ([\\w.]+)(?: (\\w+))? -->(.*?)<!-- /value -->"
    ]
    shown = "Write `<!-- value: NAME -->...<!-- /value -->`.\n"
    assert messages(code, shown) == []
    assert fill_values(code, shown) == shown


def test_a_missing_path_or_name_fails(code: Code) -> None:
    text = """The runner (`platform/szbench/limits.py`, `scripts/setup.sh`, `worker/`) and
`platform/szbench/gone.py`, `scripts/gone.sh`; patterns `platform/szbench/<domain>/router.py`
and `benchmarks/*.py` are no paths. Names: `szbench.limits.TRIES`, `szbench.limits.Limits.apply`,
the task `szbench.evaluation.start`, the host szbench.example.org; but `szbench.limits.GONE`,
`szbench.limits.Limits.gone` and `szbench.nowhere.thing`.
"""
    assert messages(code, text) == [
        "docs/probe.md:2: platform/szbench/gone.py does not exist",
        "docs/probe.md:2: scripts/gone.sh does not exist",
        "docs/probe.md:4: szbench.limits.GONE: szbench.limits defines no GONE",
        "docs/probe.md:5: szbench.limits.Limits.gone: szbench.limits.Limits defines no gone",
        "docs/probe.md:5: szbench.nowhere.thing: szbench defines no nowhere",
    ]


def test_a_missing_section_or_link_target_fails(code: Code) -> None:
    text = """# Probe

## Here

See docs/other.md, "Worker disk" (a title's start), (other.md, "Names"), "Here" above,
[other](other.md), [disk](other.md#worker-disk-output) and [here](#here).
But docs/other.md, "Worker disks", docs/gone.md, "Any", "Nowhere" below,
[gone](gone.md) and [a heading](other.md#names).
"""
    assert messages(code, text) == [
        'docs/probe.md:7: docs/other.md, "Worker disks": docs/other.md has no section '
        "'Worker disks'",
        'docs/probe.md:7: docs/gone.md, "Any": docs/gone.md does not exist',
        "docs/probe.md:7: \"Nowhere\" below: docs/probe.md has no section 'Nowhere'",
        "docs/probe.md:8: the link to gone.md leads nowhere",
        "docs/probe.md:8: the link to other.md#names: no such heading",
    ]


def test_a_missing_make_target_fails(code: Code) -> None:
    text = "Run `make lint` or `make setup lint`, then\n\n```sh\nmake lnit  # typo\n```\n"
    assert messages(code, text) == ["docs/probe.md:4: make lnit: the Makefile has no such target"]


@pytest.mark.parametrize(
    ("name", "value", "unit", "text"),
    [
        ("SZBENCH_X_BYTES", 16 * 1024**2, None, "16 MiB"),
        ("SZBENCH_X_BYTES", 1000, None, "1,000 bytes"),
        ("SZBENCH_X_S", 86400.0, None, "86,400 s"),
        ("SZBENCH_X_S", 172800, "days", "2 days"),
        ("SZBENCH_X_S", 86400, "days", "1 day"),
        ("SZBENCH_X", 0.01, None, "0.01"),
        ("SZBENCH_X", 32.0, None, "32"),
        ("SZBENCH_X", None, None, "none"),
        ("SZBENCH_X", "", None, "empty"),
        ("SZBENCH_X", "auto", None, "`auto`"),
        ("SZBENCH_X", False, None, "false"),
        ("SZBENCH_X", Path.home() / ".szbench", None, "`~/.szbench`"),
    ],
)
def test_values_are_written_one_way(name: str, value: object, unit: str | None, text: str) -> None:
    assert render(name, value, unit) == text


def test_the_command_reports_and_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = project(tmp_path)
    # The settings page of this small project (the real one cites the real tree).
    monkeypatch.setattr(settings_doc, "render", lambda: "# Settings\n\n- `SZBENCH_DATA_DIR`\n")
    docs = code.root / "docs"
    docs.mkdir(exist_ok=True)
    (code.root / "README.md").write_text("Run `make lint`.\n")
    (code.root / "benchmarks").mkdir(exist_ok=True)
    (code.root / "benchmarks/RESULTS.md").write_text("Measured.\n")
    (docs / "settings.md").write_text(settings_doc.render())
    (docs / "security.md").write_text(
        "# Security\n\n| limit | `tests/platform/test_things.py::test_gone` |\n"
    )
    assert docs_check.main([], root=code.root) == 1
    out = capsys.readouterr()
    assert out.out == (
        "docs/security.md:3: tests/platform/test_things.py::test_gone: "
        "tests/platform/test_things.py has no test test_gone\n"
    )
    assert "1 problem(s)" in out.err
    (docs / "security.md").write_text("# Security\n")
    assert docs_check.main([], root=code.root) == 0
    (docs / "settings.md").write_text("# Settings\n")
    assert docs_check.main([], root=code.root) == 1
    assert capsys.readouterr().out == (
        "docs/settings.md:1: not what the settings say: run python -m szbench.docs_check --write\n"
    )
    assert docs_check.main(["--write"], root=code.root) == 0

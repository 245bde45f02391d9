"""The command line's boundary, run as a user runs it: a separate process, output to a pipe.

A missing optional dependency is simulated with ``sys.modules[name] = None`` (importing it
then raises ModuleNotFoundError, as on an install without the extra).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("platform", "worker", "scoring")),
}
for _name in ("COLUMNS", "TERMINAL_WIDTH", "FORCE_COLOR", "TTY_COMPATIBLE"):
    ENV.pop(_name, None)


def szbench(*args: str, missing: str | None = None) -> subprocess.CompletedProcess[str]:
    code = "import sys\n"
    if missing:
        code += f"sys.modules[{missing!r}] = None\n"
    code += "from szbench.cli.main import app\nsys.argv = ['szbench', *sys.argv[1:]]\napp()\n"
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=ENV,
        cwd=REPO,
        timeout=120,
    )


def test_missing_optional_module_names_the_extra(tmp_path: Path) -> None:
    result = szbench("synth", str(tmp_path / "out"), "--hours", "0.2", missing="scipy")
    assert result.returncode == 2, result.stderr
    assert "szbench synth needs the 'worker' extra: pip install 'szbench[worker]'" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_message_names_the_subcommand() -> None:
    import typer

    from szbench.cli.main import _command_path, app

    group = typer.main.get_command(app)
    assert _command_path(group, ["dataset", "prepare", "IN", "OUT"]) == "szbench dataset prepare"
    assert _command_path(group, ["--version"]) == "szbench"


def test_other_import_errors_are_not_disguised() -> None:
    # A module that is not an optional dependency is a bug: its traceback stays visible.
    result = szbench("synth", "/nonexistent/out", missing="szbench_worker.synth")
    assert result.returncode == 1
    assert "ModuleNotFoundError" in result.stderr
    assert "extra" not in result.stderr


@pytest.mark.slow
def test_errors_naming_a_long_path_stay_on_one_line(tmp_path: Path) -> None:
    deep = tmp_path.joinpath(*(["a-rather-long-folder-name-for-a-dataset"] * 6), "bids")
    result = szbench("dataset", "check", str(deep))
    assert result.returncode == 2, result.stderr
    assert any(str(deep) in line for line in result.stderr.splitlines()), result.stderr


def test_usage_errors_are_not_wrapped_either(tmp_path: Path) -> None:
    # Click's own errors (here an unknown option) go through Typer's panels when Rich is
    # used; off a terminal they are a plain line that keeps the whole argument.
    option = "--" + "no-such-option-" * 8
    result = szbench("dataset", "check", option)
    assert result.returncode == 2
    assert any(option in line for line in result.stderr.splitlines()), result.stderr

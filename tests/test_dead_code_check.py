"""The dead-code check of ``make lint`` (vulture, configured in pyproject.toml) passes on the
tree and reports a function that nothing calls."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VULTURE = Path(sys.executable).with_name("vulture")


def vulture(*extra: str) -> subprocess.CompletedProcess[str]:
    # The configured paths and whitelist, plus any extra paths given here.
    return subprocess.run(
        [str(VULTURE), *extra], capture_output=True, text=True, cwd=REPO, timeout=300
    )


def test_the_tree_has_no_dead_code() -> None:
    result = vulture()
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_function_nothing_calls_is_reported(tmp_path: Path) -> None:
    module = tmp_path / "leftover.py"
    module.write_text("def _no_longer_called(x):\n    return x + 1\n")
    result = vulture(str(module))
    assert result.returncode == 3, result.stdout + result.stderr
    assert "unused function '_no_longer_called'" in result.stdout

"""The pre-commit hooks run the same checks as ``make lint``, with the venv's tools, and
every install takes its versions from requirements.lock."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def lint_target_tools() -> list[list[str]]:
    """The commands of the Makefile's lint recipe, as (tool, arguments) without paths."""
    makefile = (REPO / "Makefile").read_text()
    recipe = re.search(r"^lint:.*\n((?:\t.*\n)+)", makefile, re.MULTILINE)
    assert recipe is not None, "Makefile has no lint target"
    commands = []
    for line in recipe.group(1).splitlines():
        words = line.split()
        assert words[0].startswith("$(BIN)/"), line
        # `make lint` names the whole tree ("."); a hook gets the changed files instead.
        commands.append([words[0].removeprefix("$(BIN)/"), *(w for w in words[1:] if w != ".")])
    return commands


def hook_tools() -> list[list[str]]:
    config = yaml.safe_load((REPO / ".pre-commit-config.yaml").read_text())
    commands = []
    for repo in config["repos"]:
        # Local hooks only: nothing is fetched when they run.
        assert repo["repo"] == "local", repo["repo"]
        for hook in repo["hooks"]:
            assert hook["language"] == "system", hook["id"]
            words = hook["entry"].split()
            assert words[0].startswith(".venv/bin/"), hook["entry"]
            commands.append(
                [
                    words[0].removeprefix(".venv/bin/"),
                    *(w for w in words[1:] if w != "--force-exclude"),
                ]
            )
    return commands


def test_the_hooks_are_the_lint_target() -> None:
    assert hook_tools() == lint_target_tools()
    assert ["vulture"] in hook_tools()


def test_every_install_takes_the_locked_versions() -> None:
    lock = (REPO / "requirements.lock").read_text().splitlines()
    pins = [line for line in lock if line and not line.startswith("#")]
    assert pins
    assert all(re.fullmatch(r"[a-z0-9._-]+==[^\s=]+", pin) for pin in pins), pins[:5]
    names = {pin.split("==")[0] for pin in pins}
    # Every extra is covered: the API (core), the worker, the ops image and the tools.
    assert {"fastapi", "celery", "docker", "mne", "flower", "pytest", "vulture"} <= names
    setup = (REPO / "scripts" / "setup.sh").read_text()
    assert "pip install -q -c requirements.lock -e '.[dev]'" in setup
    images = (REPO / "scripts" / "build-project-images.sh").read_text()
    assert "wheel --wheel-dir \"$ctx/wheels\" -c requirements.lock '.[worker,ops]'" in images

"""What importing each deployable part loads, seen in a fresh interpreter.

The import contracts (pyproject.toml, ``lint-imports``) see the import graph, but not whether
an import runs at module level or inside a function: the CLI's lazy edges into the worker
are allowed there by name. These tests import the entry points as the images do, in a new
process, and look at the third-party modules that got loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
ENV = {
    **os.environ,
    "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("platform", "worker", "scoring")),
}

# Modules only a worker needs: the API image carries none of them.
WORKER_ONLY = {"docker", "mne", "scipy", "pandas", "edfio", "pyedflib", "szbench_worker"}
CELERY_WORKER = ("celery.worker", "celery.apps.worker", "celery.concurrency")


def loaded_by(module: str, *, with_submodules: bool = False) -> list[str]:
    """The modules that ``import module`` (and its submodules) add to a fresh interpreter."""
    code = (
        "import importlib, json, pkgutil, sys\n"
        "before = set(sys.modules)\n"
        f"package = importlib.import_module({module!r})\n"
    )
    if with_submodules:
        code += (
            "for info in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
            "    importlib.import_module(info.name)\n"
        )
    code += "print(json.dumps(sorted(set(sys.modules) - before - {'pkgutil', 'importlib'})))\n"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=REPO, timeout=120
    )
    assert result.returncode == 0, result.stderr
    names: list[str] = json.loads(result.stdout.splitlines()[-1])
    return names


def third_party(names: list[str]) -> set[str]:
    roots = {name.split(".")[0] for name in names}
    # Interpreter and extension internals (``_cython_…``, ``cython_runtime``) are no packages.
    return {
        root
        for root in roots
        if root not in sys.stdlib_module_names
        and not root.startswith("_")
        and root != "cython_runtime"
    }


@pytest.mark.parametrize("entry", ["szbench.app", "szbench.cli.main"])
def test_the_platform_loads_no_worker_module(entry: str) -> None:
    names = loaded_by(entry)
    packages = third_party(names)
    assert "szbench" in packages  # the probe sees what the import loaded
    assert not packages & WORKER_ONLY, sorted(packages & WORKER_ONLY)
    assert not [n for n in names if n.startswith(CELERY_WORKER)]


def test_the_app_enqueues_through_the_celery_client_only() -> None:
    names = loaded_by("szbench.app")
    assert {"fastapi", "sqlalchemy", "celery"} <= third_party(names)


def test_the_scorer_loads_numpy_only() -> None:
    # Every module of it, the private ones too: a published library is imported piecemeal.
    loaded = loaded_by("szbench_scoring", with_submodules=True)
    assert "szbench_scoring.stats" in loaded
    assert third_party(loaded) == {"numpy", "szbench_scoring"}


def test_the_command_line_starts_without_what_a_command_may_not_need() -> None:
    # Issue 24: `szbench evaluate` paid for loading Alembic with every migration (its
    # database is nearly always up to date) and kombu's Redis transport (the embedded mode
    # has no Redis) before doing anything.
    for entry in ("szbench.cli.main", "szbench.migrate", "szbench.queue"):
        names = loaded_by(entry)
        assert entry in names  # the probe sees the module that would have loaded them
        assert "alembic" not in third_party(names), entry
        assert not [n for n in names if n.startswith(("kombu.transport.redis", "redis"))], entry

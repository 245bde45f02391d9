"""docs/settings.md is what the config class says (it is generated from it)."""

from __future__ import annotations

import importlib
import logging
from pathlib import Path

import pytest

from szbench import docs_check, settings_doc
from szbench.auth import throttle
from szbench.config import REMOVED, Settings, get_settings, removed_in_environment
from szbench.disclosure import progress

PAGE = Path(__file__).resolve().parents[1] / "docs" / "settings.md"


def test_the_settings_page_is_current() -> None:
    assert PAGE.read_text() == settings_doc.render(), (
        "docs/settings.md is stale: run `.venv/bin/python -m szbench.settings_doc > "
        "docs/settings.md`"
    )


def test_every_setting_says_what_it_does() -> None:
    undocumented = [name for name, info in Settings.model_fields.items() if not info.description]
    assert undocumented == []


def _config_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "szbench.config"]


def test_a_removed_variable_still_set_is_named_once_and_changes_nothing(
    settings_env: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings_env.chdir(tmp_path)  # no .env here
    settings_env.setenv("SZBENCH_PROGRESS_STEP_S", "3600")
    settings_env.setenv("SZBENCH_SIGNIN_BACKOFF_MAX_S", "1")
    get_settings.cache_clear()
    with caplog.at_level(logging.WARNING, logger="szbench.config"):
        settings = get_settings()
        get_settings()  # read again from the cache: no second warning
    [message] = _config_warnings(caplog)
    assert "SZBENCH_PROGRESS_STEP_S (now szbench.disclosure.progress.PROGRESS_STEP_S)" in message
    assert "SZBENCH_SIGNIN_BACKOFF_MAX_S (now szbench.auth.throttle.BACKOFF_MAX_S)" in message
    assert "no longer settings" in message
    # It does nothing: not a field any more, and the constant keeps its value.
    assert not hasattr(settings, "progress_step_s")
    assert progress.PROGRESS_STEP_S == 900
    assert throttle.BACKOFF_MAX_S == 900.0


def test_without_removed_variables_nothing_is_said(
    settings_env: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings_env.chdir(tmp_path)
    for name in REMOVED:
        settings_env.delenv(name, raising=False)
    get_settings.cache_clear()
    with caplog.at_level(logging.WARNING, logger="szbench.config"):
        get_settings()
    assert _config_warnings(caplog) == []


def test_a_removed_variable_in_the_env_file_is_named(
    settings_env: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings_env.chdir(tmp_path)
    (tmp_path / ".env").write_text(
        "# SZBENCH_BOOTSTRAP_RESAMPLES=5 (a comment)\nSZBENCH_RELEASED_DECIMALS=3\n"
    )
    assert removed_in_environment({}) == ["SZBENCH_RELEASED_DECIMALS"]
    get_settings.cache_clear()
    with caplog.at_level(logging.WARNING, logger="szbench.config"):
        get_settings()
    [message] = _config_warnings(caplog)
    assert "SZBENCH_RELEASED_DECIMALS" in message
    assert "SZBENCH_BOOTSTRAP_RESAMPLES" not in message


def test_each_removed_variable_became_the_constant_it_names() -> None:
    code = docs_check.Code()
    fields = {f"SZBENCH_{name.upper()}" for name in Settings.model_fields}
    for variable, target in REMOVED.items():
        assert variable not in fields
        module, name = target.rsplit(".", 1)
        # The constant the docs can cite (read from its source), as the code holds it.
        assert code.value(target) == getattr(importlib.import_module(module), name), target


def test_each_bound_a_setting_moves_is_a_section_of_its_doc() -> None:
    code = docs_check.Code()
    moved = 0
    for name, info in Settings.model_fields.items():
        extra = info.json_schema_extra
        if not isinstance(extra, dict) or "moves_bound" not in extra:
            continue
        moved += 1
        doc = str(extra["moves_doc"])
        assert doc in ("docs/security.md", "docs/operations.md"), name
        titles, _ = code.sections(code.root / doc)
        assert any(t.startswith(str(extra["moves_section"])) for t in titles), name
    assert moved >= 20

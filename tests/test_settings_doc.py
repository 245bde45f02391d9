"""docs/settings.md is what the config class says (it is generated from it)."""

from __future__ import annotations

from pathlib import Path

from szbench import settings_doc
from szbench.config import Settings

PAGE = Path(__file__).resolve().parents[1] / "docs" / "settings.md"


def test_the_settings_page_is_current() -> None:
    assert PAGE.read_text() == settings_doc.render(), (
        "docs/settings.md is stale: run `.venv/bin/python -m szbench.settings_doc > "
        "docs/settings.md`"
    )


def test_every_setting_says_what_it_does() -> None:
    undocumented = [name for name, info in Settings.model_fields.items() if not info.description]
    assert undocumented == []

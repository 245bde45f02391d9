"""``szbench evaluate`` prints what a container wrote literally, never as rich markup.

A detector's output is quoted in the run's message (the parse error names the bad header);
text such as ``[/yellow]`` in it once crashed the command with rich's MarkupError before the
``--json`` file was written. The trusted local-process runner stands in for a container: the
message comes from the same output check.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from szbench import db, migrate, queue
from szbench.cli.main import app
from szbench.config import get_settings
from szbench_worker import pipeline

from ._pipeline_factories import Rec, make_prepared_dataset

MARKUP = "[/yellow][bold red]x[/bold red][link=file:///etc]y"

DETECTOR = f"""
import os
from pathlib import Path
Path(os.environ["OUTPUT"]).write_text({MARKUP!r} + "\\tduration\\n1\\t2\\n")
print({MARKUP!r}, flush=True)
"""


@pytest.fixture
def embedded(settings_env: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """Embedded settings: SQLite under a temporary data dir, no broker URL."""
    get_settings.cache_clear()
    db.reset_engine()
    queue.reset_celery()
    settings = get_settings()
    assert queue.is_embedded(settings)
    migrate.upgrade(settings.effective_database_url)
    yield Path(settings.data_dir)
    queue.reset_celery()
    pipeline.set_dependencies(None)


@pytest.mark.slow
def test_markup_in_the_output_is_printed_literally_and_the_json_written(
    embedded: Path, tmp_path: Path
) -> None:
    prepared = make_prepared_dataset(tmp_path / "prepared", [Rec("sub-01", "run-00", 600)])
    detector = tmp_path / "detector.py"
    detector.write_text(DETECTOR)
    out = tmp_path / "scores.json"
    result = CliRunner().invoke(
        app,
        [
            "evaluate",
            "--local-process",
            f"{sys.executable} {detector}",
            "--dataset",
            str(prepared),
            "--json",
            str(out),
        ],
    )
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 0, result.output
    (run,) = json.loads(out.read_text())["recordings"]
    assert run["outcome"] == "invalid_output"
    assert "[/yellow]" in run["message"]
    # Printed as written: the brackets are there, not swallowed as styles.
    assert "[/yellow][bold red]x" in " ".join(result.output.split())


def test_report_table_title_is_literal() -> None:
    from rich.console import Console

    from szbench.cli.results_table import report_table

    block = {"sensitivity": 0.5, "precision": None, "f1": 0.5, "fpRate": 1.0}
    console = Console(record=True, width=200)
    console.print(report_table({"event_results": block}, title=f"scores of {MARKUP}"))
    # The title wraps at the table's width: compare without whitespace.
    assert MARKUP.replace(" ", "") in "".join(console.export_text().split())

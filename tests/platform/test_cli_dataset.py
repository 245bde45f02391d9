"""``szbench synth``, ``szbench dataset check`` and ``szbench dataset prepare`` end to end."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from szbench.cli.main import app

# A wide terminal, so that rich does not wrap the lines the tests look for.
runner = CliRunner(env={"COLUMNS": "400"})


def test_synth_check_prepare(tmp_path: Path) -> None:
    src, out = tmp_path / "syn", tmp_path / "out"
    result = runner.invoke(
        app,
        ["synth", str(src), "--subjects", "2", "--hours", "0.17", "--recording-minutes", "10"],
    )
    assert result.exit_code == 0, result.output
    assert "2 recording(s)" in result.output
    assert len(list(src.rglob("*_eeg.edf"))) == 2

    result = runner.invoke(app, ["dataset", "check", str(src)])
    assert result.exit_code == 0, result.output
    assert "ok: 2 recording(s) can be imported" in result.output
    assert not out.exists()

    result = runner.invoke(app, ["dataset", "prepare", str(src), str(out)])
    assert result.exit_code == 0, result.output
    assert "2 imported, 0 unchanged, 2 in the manifest" in result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert [r["subject"] for r in manifest["recordings"]] == ["sub-01", "sub-02"]

    result = runner.invoke(app, ["dataset", "prepare", str(src), str(out)])
    assert result.exit_code == 0, result.output
    assert "0 imported, 2 unchanged" in result.output


def test_bad_file_is_named_and_exit_code_is_1(tmp_path: Path) -> None:
    src, out = tmp_path / "syn", tmp_path / "out"
    assert (
        runner.invoke(
            app, ["synth", str(src), "--hours", "0.17", "--recording-minutes", "10"]
        ).exit_code
        == 0
    )
    broken = sorted(src.rglob("*_eeg.edf"))[1]
    broken.write_bytes(broken.read_bytes()[:-1000])

    result = runner.invoke(app, ["dataset", "check", str(src)])
    assert result.exit_code == 1
    assert "truncated file" in result.output
    assert broken.name in result.output.replace("\n", "")

    result = runner.invoke(app, ["dataset", "prepare", str(src), str(out)])
    assert result.exit_code == 1
    assert "1 imported" in result.output
    assert "skipped:" in result.output


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = runner.invoke(
        app, ["dataset", "prepare", str(tmp_path / "empty"), str(tmp_path / "o")]
    )
    assert result.exit_code == 2
    assert "no recordings" in result.output
    result = runner.invoke(app, ["synth", str(tmp_path / "s"), "--recording-minutes", "5"])
    assert result.exit_code == 2

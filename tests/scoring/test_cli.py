"""``szbench score``: table, JSON, CSVs, exit codes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from typer.testing import CliRunner

from szbench.cli.main import app
from szbench_scoring import score_dataset, write_annotations

runner = CliRunner()
F = "sub-{s}/ses-01/eeg/sub-{s}_ses-01_task-szMonitoring_run-00_events.tsv"


def _tree(root: Path) -> tuple[Path, Path]:
    ref, hyp = root / "ref", root / "hyp"
    write_annotations(ref / F.format(s="01"), [(100, 160), (2000, 2100)], 3600)
    write_annotations(hyp / F.format(s="01"), [(90, 120), (3000, 3010)], 3600)
    write_annotations(ref / F.format(s="02"), [(500, 530)], 3600)  # no hypothesis file
    return ref, hyp


def test_score_prints_a_table_and_writes_files(tmp_path: Path):
    ref, hyp = _tree(tmp_path)
    out, rec, sub = tmp_path / "o.json", tmp_path / "r.csv", tmp_path / "s.csv"
    result = runner.invoke(
        app,
        [
            "score",
            str(ref),
            str(hyp),
            "--json",
            str(out),
            "--per-recording",
            str(rec),
            "--per-subject",
            str(sub),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "SzCORE scores" in result.output
    assert "1 without a hypothesis file" in result.output
    data = json.loads(out.read_text())
    assert data == json.loads(json.dumps(score_dataset(ref, hyp).to_szcore_json()))
    # sub-01: 1 of 2 seizures found, 1 FP; sub-02: missed. Sensitivity mean of 0.5 and 0.
    assert data["event_results"]["sensitivity"] == 0.25
    assert data["event_results"]["sensitivity_std"] == 0.25
    assert data["event_results"]["precision"] == 0.5  # sub-02 has no detection: NaN, skipped
    assert len(list(csv.DictReader(rec.open()))) == 2
    assert [r["subject"] for r in csv.DictReader(sub.open())] == ["sub-01", "sub-02"]


def test_pooled_json(tmp_path: Path):
    ref, hyp = _tree(tmp_path)
    out = tmp_path / "o.json"
    result = runner.invoke(app, ["score", str(ref), str(hyp), "--pooled", "--json", str(out)])
    assert result.exit_code == 0, result.output
    assert "pooled" in result.output
    data = json.loads(out.read_text())
    assert data["event_results"] == {
        "sensitivity": 1 / 3,
        "precision": 0.5,
        "f1": 2 / (2 + 1 + 2),
        "fpRate": 1 / (2 * 3600 / 86400),
    }


def test_invalid_input_exits_2_with_one_line(tmp_path: Path):
    ref, hyp = _tree(tmp_path)
    (hyp / F.format(s="01")).write_text("onset\tduration\teventType\trecordingDuration\n")
    rec = tmp_path / "r.csv"
    result = runner.invoke(app, ["score", str(ref), str(hyp), "--per-recording", str(rec)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: ")
    assert "no rows after the header" in lines[0]
    assert "sub-01" in lines[0]
    # The per-recording CSV still lists the error.
    rows = list(csv.DictReader(rec.open()))
    assert [r["status"] for r in rows] == ["error", "ok"]


def test_missing_reference_folder_exits_2(tmp_path: Path):
    result = runner.invoke(app, ["score", str(tmp_path / "nope"), str(tmp_path)])
    assert result.exit_code == 2
    assert "reference folder not found" in result.output


def test_duration_mismatch_exits_2(tmp_path: Path):
    ref, hyp = _tree(tmp_path)
    write_annotations(hyp / F.format(s="01"), [(90, 120)], 1800)
    result = runner.invoke(app, ["score", str(ref), str(hyp)])
    assert result.exit_code == 2
    assert "does not match the reference" in result.output

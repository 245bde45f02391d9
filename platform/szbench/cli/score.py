"""``szbench score``: SzCORE scoring of a hypothesis folder against a reference folder."""

from __future__ import annotations

import math
from pathlib import Path

import typer
from rich.table import Table

from szbench.cli.console import make_console
from szbench_scoring import (
    AnnotationError,
    DatasetLayoutError,
    DatasetReport,
    Metrics,
    score_dataset,
)

console = make_console()


def _fail(reason: str) -> typer.Exit:
    # One line on stderr, never wrapped, so scripts can show it as it is.
    typer.echo(f"error: {reason}", err=True)
    return typer.Exit(2)


def _cell(value: float, std: float | None, digits: int) -> str:
    if math.isnan(value):
        return "n/a"
    text = f"{value:.{digits}f}"
    if std is not None and not math.isnan(std):
        text += f" ± {std:.{digits}f}"
    return text


def _table(report: DatasetReport, pooled: bool) -> Table:
    how = "pooled over recordings" if pooled else "mean ± std over subjects"
    table = Table(title=f"SzCORE scores ({how})", title_justify="left")
    table.add_column("scoring")
    for name in ("sensitivity", "precision", "F1", "FP/day"):
        table.add_column(name, justify="right")
    for kind, mean, std, pool in (
        ("event", report.event_mean, report.event_std, report.pooled_event),
        ("sample", report.sample_mean, report.sample_std, report.pooled_sample),
    ):
        m: Metrics = pool if pooled else mean
        cells = []
        for name, digits in (("sensitivity", 3), ("precision", 3), ("f1", 3), ("fp_rate", 2)):
            spread = None if pooled else getattr(std, name)
            cells.append(_cell(getattr(m, name), spread, digits))
        table.add_row(kind, *cells)
    return table


def score(
    ref_dir: Path = typer.Argument(..., help="Reference folder (sub-*/**/*.tsv)."),
    hyp_dir: Path = typer.Argument(..., help="Hypothesis folder with the same relative paths."),
    json_out: Path | None = typer.Option(
        None, "--json", help="Write szcore-evaluation's JSON (null for NaN) to this file."
    ),
    pooled: bool = typer.Option(
        False, "--pooled", help="Ratios of the summed counts instead of the per-subject mean."
    ),
    per_recording: Path | None = typer.Option(
        None, "--per-recording", help="Write one CSV row per recording (errors included)."
    ),
    per_subject: Path | None = typer.Option(
        None, "--per-subject", help="Write one CSV row per subject."
    ),
) -> None:
    """Score hypothesis annotations against reference annotations (SzCORE rules)."""
    try:
        report = score_dataset(ref_dir, hyp_dir)
    except (DatasetLayoutError, AnnotationError) as exc:
        raise _fail(str(exc)) from exc
    try:
        if per_recording is not None:
            # Written even when some recordings failed: it lists every error.
            report.write_recordings_csv(per_recording)
        if report.errors:
            first = report.errors[0].error
            more = len(report.errors) - 1
            tail = f" (and {more} more recording(s) with errors)" if more else ""
            raise _fail(f"{first}{tail}")
        if per_subject is not None:
            report.write_subjects_csv(per_subject)
        if json_out is not None:
            report.write_json(json_out, pooled=pooled)
    except OSError as exc:
        raise _fail(f"cannot write: {exc}") from exc

    console.print(_table(report, pooled))
    recordings = len(report.recordings)
    line = f"{len(report.subjects)} subject(s), {recordings} recording(s)"
    if report.n_missing:
        line += f", {report.n_missing} without a hypothesis file (scored as no detections)"
    if report.empty_subjects:
        line += f", {len(report.empty_subjects)} subject(s) without recordings"
    console.print(line)

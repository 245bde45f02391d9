"""``szbench dataset``: check a BIDS EEG dataset and prepare its standardised copy.

The worker package (MNE, scipy) is imported inside the commands, so the CLI still loads on an
API image that has neither.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from szbench.cli.console import make_console

app = typer.Typer(
    help="Check and prepare EEG datasets (BIDS, SzCORE layout).", no_args_is_help=True
)


def _consoles() -> tuple[Console, Console]:
    # Built per command (not at import) so that the terminal width is read when it runs.
    return make_console(), make_console(stderr=True)


@contextmanager
def _progress(label: str, err_console: Console) -> Iterator[Callable[[int, int, str], None]]:
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[current]}"),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None, current="")

        def update(done: int, total: int, current: str) -> None:
            bar.update(task, completed=done, total=total, current=current)

        yield update


@app.command("check")
def check(
    path: Path = typer.Argument(..., help="Root of the BIDS dataset (sub-*/ses-*/eeg/...)."),
    allow_flat_fill: bool = typer.Option(
        False, "--allow-flat-fill", help="Accept recordings missing electrodes (flat-filled)."
    ),
) -> None:
    """Check a dataset and report every problem; writes nothing."""
    from szbench_worker.datasets import DatasetError, check_dataset

    console, err_console = _consoles()
    try:
        with _progress("checking", err_console) as update:
            report = check_dataset(path, allow_flat_fill=allow_flat_fill, progress=update)
    except DatasetError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    table = Table(title=f"{path}: {len(report.recordings)} recording(s)")
    table.add_column("recording", overflow="fold")
    for column in ("sfreq (Hz)", "duration (s)", "seizures", "status"):
        table.add_column(column)
    for item in report.recordings:
        info = item.info
        table.add_row(
            item.recording.id,
            f"{info.sfreq_hz:g}" if info else "-",
            f"{info.duration_s:.0f}" if info else "-",
            str(item.n_seizures) if info else "-",
            "[green]ok[/green]" + (f" ({', '.join(info.flags)})" if info and info.flags else "")
            if item.problem is None
            else f"[red]{item.problem.reason}[/red]",
        )
    console.print(table)
    for problem in report.problems:
        console.print(f"[red]problem:[/red] {escape(str(problem))}")
    if not report.ok:
        console.print(
            f"{report.n_importable} of {len(report.recordings)} recording(s) can be imported; "
            f"{len(report.problems)} problem(s)."
        )
        raise typer.Exit(1)
    console.print(f"[green]ok[/green]: {len(report.recordings)} recording(s) can be imported.")


@app.command("prepare")
def prepare(
    path: Path = typer.Argument(..., help="Root of the source BIDS dataset."),
    out: Path = typer.Argument(..., help="Where to write the standardised dataset."),
    allow_flat_fill: bool = typer.Option(
        False,
        "--allow-flat-fill",
        help="Flat-fill missing electrodes (flagged) instead of rejecting.",
    ),
    name: str | None = typer.Option(None, "--name", help="Dataset name (default: folder name)."),
) -> None:
    """Standardise a dataset into OUT: 19 ch, common average, 256 Hz EDF, checked annotations."""
    from szbench_worker.datasets import DatasetError, prepare_dataset

    console, err_console = _consoles()
    try:
        with _progress("preparing", err_console) as update:
            report = prepare_dataset(
                path, out, allow_flat_fill=allow_flat_fill, name=name, progress=update
            )
    except DatasetError as exc:
        err_console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    total = len(report.manifest.recordings)
    console.print(
        f"{out}: {len(report.imported)} imported, {len(report.reused)} unchanged, "
        f"{total} in the manifest."
    )
    for problem in report.problems:
        console.print(f"[red]skipped:[/red] {escape(str(problem))}")
    if not report.ok:
        raise typer.Exit(1)

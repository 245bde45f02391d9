"""``szbench synth``: write a synthetic EEG dataset in the SzCORE layout."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from szbench.cli.console import make_console


def synth(
    out: Path = typer.Argument(..., help="Folder to write the dataset into."),
    subjects: int = typer.Option(2, "--subjects", min=1, help="Number of subjects."),
    hours: float = typer.Option(1.0, "--hours", min=0.0, help="Hours of EEG per subject."),
    recording_minutes: float = typer.Option(
        60.0, "--recording-minutes", min=10.0, help="Length of each recording (at least 10)."
    ),
    seed: int = typer.Option(0, "--seed", help="Random seed: the same seed, the same files."),
    seizures_per_hour: float = typer.Option(
        1.5, "--seizures-per-hour", min=0.0, help="Mean seizure rate."
    ),
) -> None:
    """Generate synthetic EEG (19 ch, 256 Hz, seizures with their _events.tsv)."""
    from szbench_worker.synth import generate_dataset

    console = make_console()
    try:
        with Progress(
            TextColumn("[bold]generating"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=make_console(stderr=True),
            transient=True,
        ) as bar:
            task = bar.add_task("synth", total=None)
            dataset = generate_dataset(
                out,
                subjects=subjects,
                hours=hours,
                recording_minutes=recording_minutes,
                seed=seed,
                seizures_per_hour=seizures_per_hour,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
    except ValueError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from exc
    console.print(
        f"{out}: {len(dataset.recordings)} recording(s), {dataset.n_seizures} seizure(s), "
        f"{subjects} subject(s), seed {seed}"
    )

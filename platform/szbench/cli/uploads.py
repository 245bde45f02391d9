"""``szbench upload``: upload sessions on this host's database and uploads folder."""

from __future__ import annotations

import json
from dataclasses import asdict

import typer

app = typer.Typer(help="Upload sessions.", no_args_is_help=True)


@app.command("sweep")
def sweep(
    as_json: bool = typer.Option(False, "--json", help="Print the counts as JSON."),
) -> None:
    """Remove expired and refused uploads and stray upload files (the API does this hourly)."""
    from szbench.uploads.sweeper import sweep_once

    report = sweep_once()
    if as_json:
        typer.echo(json.dumps(asdict(report)))
        return
    typer.echo(
        f"removed {report.expired} expired and {report.refused} refused uploads, "
        f"{report.stray_files} stray files; {report.bytes_freed} bytes freed"
    )

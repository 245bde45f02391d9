"""``szbench leaderboard DATASET``: the ranked table, or its JSON."""

from __future__ import annotations

import json
from typing import Any

import typer

from szbench.cli.console import make_console


def _fmt(value: float | None, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def leaderboard(
    dataset: str = typer.Argument(..., help="Dataset slug."),
    version: str | None = typer.Option(None, help="Dataset version (default: newest active)."),
    sort: str = typer.Option("rank", help="rank or a metric name, e.g. event_fp_rate."),
    all_versions: bool = typer.Option(False, "--all-versions", help="Every algorithm version."),
    as_json: bool = typer.Option(False, "--json", help="Print the API's JSON."),
    server: str | None = typer.Option(None, help="Remote server URL (else the local database)."),
    token: str | None = typer.Option(None, envvar="SZBENCH_TOKEN", help="API token (remote)."),
) -> None:
    """Print a dataset's leaderboard, ranked the SzCORE way, with 95% intervals."""
    versions = "all" if all_versions else "latest"
    if server:
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        params: dict[str, Any] = {"sort": sort, "versions": versions, "limit": 500}
        if version:
            params["version"] = version
        response = httpx.get(
            f"{server.rstrip('/')}/api/v1/leaderboards/{dataset}", params=params, headers=headers
        )
        board = response.json()
        if response.status_code >= 400:
            typer.echo(f"error: {board.get('detail', response.text)}", err=True)
            raise typer.Exit(1)
    else:
        from szbench.db import session_scope
        from szbench.errors import SzbenchError
        from szbench.leaderboards import service

        try:
            with session_scope() as session:
                query = service.BoardQuery(
                    slug=dataset,
                    version=version,
                    sort=sort,
                    versions=versions,  # type: ignore[arg-type]
                    limit=None,
                )
                board = service.leaderboard(session, query, viewer=None).model_dump(mode="json")
        except SzbenchError as exc:
            typer.echo(f"error: {exc.detail}", err=True)
            raise typer.Exit(1) from exc
    if as_json:
        typer.echo(json.dumps(board, indent=2))
        return
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(f"{board['dataset']} {board['dataset_version']} — {board['ranking']}"))
    for column in ("#", "algorithm", "version", "F1 (95% CI)", "sensitivity", "precision",
                   "FP/day", "subjects"):  # fmt: skip
        table.add_column(column, justify="left" if column in ("algorithm", "version") else "right")
    for e in board["items"]:
        ci = (e.get("ci") or {}).get("event_f1")
        interval = f" [{_fmt(ci['low'], 2)}, {_fmt(ci['high'], 2)}]" if ci else ""
        # A released figure is printed to the precision it was released at ("0.56", not
        # "0.560", which would claim a third decimal it does not have), as the web page does.
        exact = e.get("release", "exact") == "exact"
        digits = 3 if exact else int(board["release"]["decimals"])
        table.add_row(
            str(e["rank"]),
            # Names chosen by submitters: printed literally, never as markup.
            Text(e["algorithm"] + ("" if e["published"] else " (unpublished)")),
            Text(e["algorithm_version"]),
            _fmt(e["event_f1"], digits) + interval,
            _fmt(e["event_sensitivity"], digits),
            _fmt(e["event_precision"], digits),
            _fmt(e["event_fp_rate"], 2 if exact else 1),
            str(e["subjects"]),
        )
    make_console().print(table)
    if not board["items"]:
        typer.echo("no ranked results yet")
    # Why an F1 has no interval, in the platform's words (the server's, or decide's).
    withheld = dict.fromkeys(
        e["statistics_withheld"] for e in board["items"] if e.get("statistics_withheld")
    )
    for reason in withheld:
        typer.echo(f"{reason}.")

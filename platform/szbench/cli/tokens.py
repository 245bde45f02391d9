"""``szbench token``: API tokens for scripts and the CLI's remote mode."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import typer

app = typer.Typer(help="API tokens.", no_args_is_help=True)


@app.command("create")
def create(
    email: str = typer.Argument(..., help="Whose token."),
    name: str = typer.Option("cli", help="A label to recognise it by."),
    scopes: str = typer.Option(
        "", help="Comma-separated: read,write,admin, or worker alone (default: all but worker)."
    ),
    days: int | None = typer.Option(None, min=1, help="Expire after this many days."),
) -> None:
    """Create a token and print its secret (shown only this once)."""
    from szbench.auth import accounts, service
    from szbench.db import session_scope
    from szbench.errors import SzbenchError

    try:
        accounts.check_token_name(name)
        with session_scope() as session:
            user = service.get_user_by_email(session, email)
            _, secret = service.create_token(
                session,
                user,
                name=name,
                scopes=[s.strip() for s in scopes.split(",") if s.strip()] or None,
                expires_at=datetime.now(UTC) + timedelta(days=days) if days else None,
            )
    except SzbenchError as exc:
        typer.echo(f"error: {exc.detail}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(secret)

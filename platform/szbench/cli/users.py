"""``szbench user``: accounts, from the command line (the first admin, centre users)."""

from __future__ import annotations

import typer

from szbench.models import Role

app = typer.Typer(help="User accounts.", no_args_is_help=True)


@app.command("create")
def create(
    email: str = typer.Argument(..., help="Email address (the login)."),
    role: Role = typer.Option(Role.RESEARCHER, help="admin, researcher or centre."),
    name: str = typer.Option("", help="Display name."),
    password: str | None = typer.Option(
        None, help="Password (asked for when omitted, unless --no-password)."
    ),
    no_password: bool = typer.Option(False, "--no-password", help="API tokens only."),
) -> None:
    """Create a user in the configured database."""
    from szbench.auth import service
    from szbench.db import session_scope
    from szbench.errors import SzbenchError

    if password is None and not no_password:
        password = typer.prompt("password", hide_input=True, confirmation_prompt=True)
    try:
        with session_scope() as session:
            user = service.create_user(
                session, email=email, password=password, name=name, role=role
            )
            typer.echo(f"user {user.id} {user.email} ({user.role.value}) created")
    except SzbenchError as exc:
        typer.echo(f"error: {exc.detail}", err=True)
        raise typer.Exit(1) from exc


@app.command("set-password")
def set_password(
    email: str = typer.Argument(..., help="Email address of the account."),
    password: str | None = typer.Option(None, help="New password (asked for when omitted)."),
) -> None:
    """Reset a user's password; every token and web session they hold is revoked."""
    from szbench.auth import service
    from szbench.db import session_scope
    from szbench.errors import SzbenchError

    if password is None:
        password = typer.prompt("new password", hide_input=True, confirmation_prompt=True)
    try:
        with session_scope() as session:
            user = service.get_user_by_email(session, email)
            service.set_password(session, user, password)
            typer.echo(f"password of user {user.id} {user.email} set; their tokens are revoked")
    except SzbenchError as exc:
        typer.echo(f"error: {exc.detail}", err=True)
        raise typer.Exit(1) from exc

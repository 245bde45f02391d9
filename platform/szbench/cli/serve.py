"""``szbench serve``: the API (and, in embedded mode, the worker) in one command."""

from __future__ import annotations

import typer


def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8000, help="Port to listen on."),
    workers: int = typer.Option(1, min=1, help="API processes (with a broker only)."),
    worker: bool = typer.Option(
        True, "--worker/--no-worker", help="Embedded mode: also run the evaluation worker."
    ),
    log_level: str = typer.Option("info", help="uvicorn log level."),
) -> None:
    """Serve the REST API (and web UI). Without a broker: migrate SQLite, start the worker."""
    import uvicorn

    from szbench import migrate
    from szbench.config import ConfigError, check_serving, get_settings

    settings = get_settings()
    try:
        check_serving(settings)
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    embedded = not settings.broker_url
    handle = None
    if embedded:
        migrate.upgrade(settings.effective_database_url)
        typer.echo(f"embedded mode: database {settings.effective_database_url}")
        if worker:
            try:
                from szbench_worker.embedded import start_embedded_worker
            except ImportError as exc:
                typer.echo(
                    "the embedded worker needs the worker package (pip install 'szbench[worker]');"
                    f" serving the API only ({exc})",
                    err=True,
                )
            else:
                handle = start_embedded_worker(upgrade_database=False)
                typer.echo("embedded worker started")
        workers = 1  # one process owns the SQLite file and the in-process worker
    try:
        uvicorn.run(
            "szbench.app:create_production_app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
            # The app reads forwarding headers itself, from SZBENCH_FORWARDED_ALLOW_IPS only
            # (szbench.api.proxies).
            proxy_headers=False,
        )
    finally:
        if handle is not None:
            handle.stop()

"""``szbench algorithm submit``: submit an image archive or a pinned image reference.

Two modes, the same checks:

- remote (``--server URL --token T``): the archive goes through the API's resumable upload
  (8 MiB chunks, a progress bar, a dropped chunk is retried from the server's offset);
- local (no ``--server``): straight into the configured database as ``--email``'s user.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import typer

app = typer.Typer(help="Algorithms and their versions.", no_args_is_help=True)

CHUNK_BYTES = 8 * 1024**2
RETRIES = 5


def _check(response: Any) -> Any:
    if response.status_code >= 400:
        try:
            body = response.json()
            message = f"{body['error']}: {body['detail']}"
        except (ValueError, KeyError, TypeError):
            message = response.text[:500]
        typer.echo(f"error ({response.status_code}) {message}", err=True)
        raise typer.Exit(1)
    return response.json() if response.content else None


def _upload(client: Any, image: Path) -> str:
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    size = image.stat().st_size
    upload = _check(
        client.post("/api/v1/uploads", json={"filename": image.name, "size_bytes": size})
    )
    offset = 0
    with (
        image.open("rb") as fh,
        Progress("[bold]uploading", BarColumn(), DownloadColumn(), TransferSpeedColumn()) as bar,
    ):
        task = bar.add_task("upload", total=size)
        attempts = 0
        while offset < size:
            fh.seek(offset)
            chunk = fh.read(CHUNK_BYTES)
            try:
                response = client.put(
                    f"/api/v1/uploads/{upload['id']}",
                    params={"offset": offset},
                    content=chunk,
                    headers={"Content-Type": "application/octet-stream"},
                )
            except Exception as exc:  # a dropped connection: ask where to resume
                attempts += 1
                if attempts > RETRIES:
                    typer.echo(f"error: upload failed after {RETRIES} retries ({exc})", err=True)
                    raise typer.Exit(1) from exc
                time.sleep(min(2**attempts, 30))
                offset = _check(client.get(f"/api/v1/uploads/{upload['id']}"))["offset"]
                bar.update(task, completed=offset)
                continue
            offset = _check(response)["offset"]
            attempts = 0
            bar.update(task, completed=offset)
    return str(upload["id"])


def _submit_remote(server: str, token: str, name: str, body: dict[str, Any], image: Path | None,
                   meta: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    import httpx

    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=300) as client:
        mine = _check(client.get("/api/v1/algorithms", params={"mine": True, "limit": 500}))
        found = [a for a in mine["items"] if a["name"] == name]
        algorithm = (
            found[0]
            if found
            else _check(client.post("/api/v1/algorithms", json={"name": name, **meta}))
        )
        if image is not None:
            body["upload_id"] = _upload(client, image)
        return dict(
            _check(client.post(f"/api/v1/algorithms/{algorithm['id']}/versions", json=body))
        )


def _submit_local(email: str, name: str, body: dict[str, Any], image: Path | None,
                  meta: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    from sqlalchemy import select

    from szbench.algorithms import service
    from szbench.algorithms.schemas import VersionOut
    from szbench.auth import service as auth
    from szbench.db import session_scope
    from szbench.errors import SzbenchError
    from szbench.models import Algorithm
    from szbench.uploads import service as uploads

    try:
        with session_scope() as session:
            user = auth.get_user_by_email(session, email)
            algorithm = session.scalar(
                select(Algorithm).where(Algorithm.owner_id == user.id, Algorithm.name == name)
            ) or service.create_algorithm(session, owner=user, name=name, **meta)
            if image is not None:
                body["upload_id"] = uploads.import_file(session, user, image).id
            version = service.submit_version(session, algorithm=algorithm, user=user, **body)
            return VersionOut.model_validate(version).model_dump(mode="json")
    except SzbenchError as exc:
        typer.echo(f"error: {exc.detail}", err=True)
        raise typer.Exit(1) from exc


@app.command("submit")
def submit(
    name: str = typer.Argument(..., help="Algorithm name (created when new)."),
    version: str = typer.Option(..., "--version", "-v", help="Version label, e.g. 1.0.0."),
    image: Path | None = typer.Option(
        None, exists=True, dir_okay=False, help="`docker save` archive (.tar or .tar.gz)."
    ),
    reference: str | None = typer.Option(None, help="Instead: registry/name[:tag]@sha256:..."),
    phase: str | None = typer.Option(None, help="Challenge phase slug."),
    gpu: bool = typer.Option(False, "--gpu", help="The algorithm needs a GPU."),
    title: str = typer.Option("", help="Title (new algorithms)."),
    authors: str = typer.Option("", help="Authors (new algorithms)."),
    licence: str = typer.Option("", help="Licence (new algorithms)."),
    server: str | None = typer.Option(None, help="Remote server URL (else the local database)."),
    token: str | None = typer.Option(None, envvar="SZBENCH_TOKEN", help="API token (remote)."),
    email: str | None = typer.Option(None, help="Submit as this user (local mode)."),
) -> None:
    """Submit a new version; its smoke test starts once it is accepted."""
    if (image is None) == (reference is None):
        typer.echo("error: give exactly one of --image and --reference", err=True)
        raise typer.Exit(2)
    body: dict[str, Any] = {"version": version, "phase": phase, "wants_gpu": gpu}
    if reference is not None:
        body["image_reference"] = reference
    meta = {"title": title, "authors": authors, "licence": licence}
    if server:
        if not token:
            typer.echo("error: --token (or SZBENCH_TOKEN) is needed with --server", err=True)
            raise typer.Exit(2)
        out = _submit_remote(server, token, name, body, image, meta)
    else:
        if not email:
            typer.echo("error: --email is needed without --server", err=True)
            raise typer.Exit(2)
        out = _submit_local(email, name, body, image, meta)
    typer.echo(
        f"{name} {out['version']}: {out['status']} (version id {out['id']}, "
        f"image {out['image_digest']})"
    )

"""``szbench algorithm submit``: submit an image archive or a pinned image reference.

Two modes, the same checks:

- remote (``--server URL --token T``): the archive goes through the API's resumable upload
  (8 MiB chunks, a progress bar). While the server is away (restarting, 502/503/504) every
  request is retried with backoff (``--retries``, ``--retry-wait-max``) and the upload goes
  on from the server's offset; an upload that still fails is resumed by running the same
  command again (the session id is kept under ``$XDG_CACHE_HOME/szbench/uploads``, keyed
  by the server and the archive's sha256, until the version is created). After the last
  byte the server checks the archive and pushes it to its registry in the background; the
  CLI polls it and shows each step with its progress (minutes for a multi-GB image: no
  request waits for them, so no time-out cuts them off), then submits the version;
- local (no ``--server``): straight into the configured database as ``--email``'s user,
  the same steps shown as they run.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

app = typer.Typer(help="Algorithms and their versions.", no_args_is_help=True)

CHUNK_BYTES = 8 * 1024**2
#: How often the server is asked how its steps on the upload go.
POLL_S = 1.0
_STEP_LABELS = {
    "checking": "checking the archive",
    "checking-user": "checking the image's user",
    "pushing": "pushing to the registry",
}
#: Statuses of a server that is restarting or briefly away (a proxy's, or the API's own 503
#: during a database outage): the request did nothing, try again.
_UNAVAILABLE = (502, 503, 504)


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


@dataclass
class Retry:
    """How long the CLI waits for a server that is restarting: ``retries`` attempts in a
    row, ``0.5 * 2**n`` seconds apart, at most ``wait_max_s`` apart."""

    retries: int = 10
    wait_max_s: float = 30.0
    failures: int = 0

    def wait(self, what: str, exc: object) -> None:
        """Count a failure; sleep before the next attempt, or give up (exit 1)."""
        self.failures += 1
        if self.failures > self.retries:
            typer.echo(
                f"error: {what} failed {self.failures} times in a row ({exc}); run the same "
                "command again to resume",
                err=True,
            )
            raise typer.Exit(1)
        delay = min(self.wait_max_s, 0.5 * 2 ** (self.failures - 1))
        typer.echo(f"{what}: {exc}; retrying in {delay:.1f} s", err=True)
        time.sleep(delay)

    def ok(self) -> None:
        self.failures = 0


def _send(client: Any, retry: Retry, method: str, url: str, *, safe: bool, **kwargs: Any) -> Any:
    """A request, sent again while the server is away.

    ``safe``: sending it twice does no harm (reads, chunks at an offset). Anything else is
    sent again only when it surely did not arrive (the connection was refused) or the
    server said it did nothing (502/503/504).
    """
    import httpx

    while True:
        try:
            response = client.request(method, url, **kwargs)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            retry.wait(f"{method} {url}", exc)
            continue
        except httpx.TransportError:
            if not safe:
                raise
            retry.wait(f"{method} {url}", "connection lost")
            continue
        if response.status_code in _UNAVAILABLE:
            retry.wait(f"{method} {url}", f"server answered {response.status_code}")
            continue
        retry.ok()
        return response


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def _state_file(server: str, checksum: str) -> Path:
    """Where an unfinished upload of this archive to this server is remembered."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "szbench"
    key = hashlib.sha256(f"{server.rstrip('/')}\n{checksum}".encode()).hexdigest()[:32]
    return base / "uploads" / f"{key}.json"


def _open_session(client: Any, retry: Retry, image: Path, state: Path) -> dict[str, Any]:
    """The upload session to (re)use: the remembered one while it can still take the bytes."""
    size = image.stat().st_size
    if state.is_file():
        try:
            saved = json.loads(state.read_text())["upload_id"]
        except (ValueError, KeyError, TypeError):
            saved = None
        if saved:
            response = _send(client, retry, "GET", f"/api/v1/uploads/{saved}", safe=True)
            if response.status_code == 200:
                session = dict(response.json())
                if session["size_bytes"] == size and session["state"] != "refused":
                    typer.echo(
                        f"resuming upload {saved} at byte {session['offset']} of {size}", err=True
                    )
                    return session
            elif response.status_code not in (403, 404):
                _check(response)
        state.unlink(missing_ok=True)
    body = {"filename": image.name, "size_bytes": size}
    session = dict(_check(_send(client, retry, "POST", "/api/v1/uploads", safe=False, json=body)))
    state.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(json.dumps({"upload_id": session["id"], "file": str(image)}) + "\n")
    return session


def _paced(data: bytes, rate_bps: int) -> Iterator[bytes]:
    """``data`` in small pieces at no more than ``rate_bps`` bytes per second."""
    piece = max(1, min(64 * 1024, rate_bps // 10))
    started = time.monotonic()
    for i in range(0, len(data), piece):
        ahead = (i / rate_bps) - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)
        yield data[i : i + piece]


def _upload(client: Any, image: Path, state: Path, retry: Retry, rate_bps: int = 0) -> str:
    """Send the archive in chunks; after any interruption go on from the server's offset."""
    import httpx
    from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

    size = image.stat().st_size
    upload = _open_session(client, retry, image, state)
    url = f"/api/v1/uploads/{upload['id']}"
    offset = int(upload["offset"])
    with (
        image.open("rb") as fh,
        Progress("[bold]uploading", BarColumn(), DownloadColumn(), TransferSpeedColumn()) as bar,
    ):
        task = bar.add_task("upload", total=size, completed=offset)
        while offset < size:
            fh.seek(offset)
            chunk = fh.read(CHUNK_BYTES)
            headers = {
                "Content-Type": "application/octet-stream",
                "Content-Range": f"bytes {offset}-{offset + len(chunk) - 1}/{size}",
            }
            content: Any = _paced(chunk, rate_bps) if rate_bps > 0 else chunk
            try:
                # Not resent as it is: part of the body may have landed, and a paced body is
                # spent. After a dropped connection the server says where to go on from.
                response = _send(
                    client,
                    retry,
                    "PUT",
                    url,
                    safe=False,
                    params={"offset": offset},
                    content=content,
                    headers=headers,
                )
            except httpx.TransportError as exc:
                retry.wait("upload", exc)
                response = None
            if response is None or response.status_code == 409:
                # 409: the server is at another offset than we thought (a chunk landed, or
                # was cut back, while the connection dropped).
                if response is not None:
                    retry.wait("upload", "offset out of step with the server")
                offset = int(_check(_send(client, retry, "GET", url, safe=True))["offset"])
            else:
                offset = int(_check(response)["offset"])
            bar.update(task, completed=offset)
    return str(upload["id"])


class _Steps:
    """The server's steps on the upload as the terminal shows them: a bar per step on a
    terminal; elsewhere (a pipe, a log) a line per step and per tenth of it."""

    def __init__(self, where: str = "server: ") -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TransferSpeedColumn,
        )

        self.where = where
        self.terminal = Console(stderr=True).is_terminal
        self.bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            disable=not self.terminal,
        )
        self.tasks: dict[str, Any] = {}
        self.tenths: dict[str, int] = {}

    def __enter__(self) -> _Steps:
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.__exit__(None, None, None)

    def finish(self) -> None:
        """Every step shown as done (the last poll may have seen one short of its end)."""
        for step, task in self.tasks.items():
            total = int(self.bar.tasks[task].total or 0)
            self.show(step, total, total)

    def show(self, step: str, done: int, total: int) -> None:
        label = _STEP_LABELS.get(step, step)
        if step not in self.tasks:
            for previous in self.tasks.values():
                self.bar.update(previous, completed=self.bar.tasks[previous].total)
            self.tasks[step] = self.bar.add_task(label, total=total or None)
            self.tenths[step] = -1
        self.bar.update(self.tasks[step], completed=done, total=total or None)
        tenth = 10 * done // total if total else 0
        if not self.terminal and tenth > self.tenths[step]:
            self.tenths[step] = tenth
            typer.echo(f"{self.where}{label}, {10 * tenth}% of {total} bytes", err=True)


def _server_steps(client: Any, retry: Retry, upload_id: str) -> None:
    """Ask the server to check (and push) the uploaded archive, and show its steps until
    they are done. A refusal ends the command (exit 1, the server's reason); a platform
    fault on the server (its registry away) or a server restart asks again, with backoff.
    A server without the steps (older) checks the archive when the version is submitted."""
    url = f"/api/v1/uploads/{upload_id}"
    response = _send(client, retry, "POST", f"{url}/check", safe=True)
    if response.status_code == 404 and "no such route" in response.text:
        return
    steps = dict(_check(response))["steps"]
    with _Steps() as shown:
        while True:
            step = steps["step"]
            if step == "done":
                shown.finish()
                return
            if step == "refused":
                typer.echo(f"error: the server refused the archive: {steps['detail']}", err=True)
                raise typer.Exit(1)
            if step in ("failed", "interrupted"):
                retry.wait("the server's check", steps["detail"] or "the server restarted")
                response = _send(client, retry, "POST", f"{url}/check", safe=True)
                steps = dict(_check(response))["steps"]
                continue
            shown.show(step, int(steps["done_bytes"]), int(steps["total_bytes"]))
            time.sleep(POLL_S)
            steps = dict(_check(_send(client, retry, "GET", url, safe=True)))["steps"]


def _find_version(client: Any, retry: Retry, algorithm_id: int, label: str) -> Any:
    page = _check(
        _send(
            client,
            retry,
            "GET",
            f"/api/v1/algorithms/{algorithm_id}/versions",
            safe=True,
            params={"limit": 500},
        )
    )
    return next((v for v in page["items"] if v["version"] == label), None)


def _submit_remote(server: str, token: str, name: str, body: dict[str, Any], image: Path | None,
                   meta: dict[str, Any], retry: Retry,
                   rate_bps: int = 0) -> dict[str, Any]:  # fmt: skip
    import httpx

    headers = {"Authorization": f"Bearer {token}"}
    state = _state_file(server, _sha256(image)) if image is not None else None
    with httpx.Client(base_url=server.rstrip("/"), headers=headers, timeout=300) as client:
        mine = _check(
            _send(
                client,
                retry,
                "GET",
                "/api/v1/algorithms",
                safe=True,
                params={"mine": True, "limit": 500},
            )
        )
        found = [a for a in mine["items"] if a["name"] == name]
        algorithm = (
            found[0]
            if found
            else _check(
                _send(
                    client,
                    retry,
                    "POST",
                    "/api/v1/algorithms",
                    safe=False,
                    json={"name": name, **meta},
                )
            )
        )
        if image is not None and state is not None:
            body["upload_id"] = _upload(client, image, state, retry, rate_bps)
            _server_steps(client, retry, body["upload_id"])
        url = f"/api/v1/algorithms/{algorithm['id']}/versions"
        while True:
            try:
                response = _send(client, retry, "POST", url, safe=False, json=body)
            except httpx.TransportError as exc:
                # Sent, but the answer was lost: the version may exist now. Never make two.
                retry.wait(f"POST {url}", exc)
                existing = _find_version(client, retry, algorithm["id"], body["version"])
                if existing is not None:
                    out = dict(existing)
                    break
                continue
            out = dict(_check(response))
            break
        if state is not None:
            state.unlink(missing_ok=True)
        return out


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
            checked = None
            if image is not None:
                upload = uploads.import_file(session, user, image)
                body["upload_id"] = upload.id
                try:
                    with _Steps(where="") as shown:
                        checked = service.check_upload(upload, progress=shown.show)
                except service.ARCHIVE_REFUSALS as exc:
                    uploads.refuse_upload(session, upload.id, exc.detail)  # its bytes go now
                    raise
            version = service.submit_version(
                session, algorithm=algorithm, user=user, checked=checked, **body
            )
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
    retries: int = typer.Option(
        10, min=0, help="Remote: attempts in a row while the server is away, then give up."
    ),
    retry_wait_max: float = typer.Option(
        30.0, min=0.0, help="Remote: longest wait between two attempts, in seconds."
    ),
    limit_rate: int = typer.Option(
        0, min=0, help="Remote: upload at most this many bytes per second (0: no limit)."
    ),
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
        retry = Retry(retries=retries, wait_max_s=retry_wait_max)
        out = _submit_remote(server, token, name, body, image, meta, retry, limit_rate)
    else:
        if not email:
            typer.echo("error: --email is needed without --server", err=True)
            raise typer.Exit(2)
        out = _submit_local(email, name, body, image, meta)
    typer.echo(
        f"{name} {out['version']}: {out['status']} (version id {out['id']}, "
        f"image {out['image_digest']})"
    )

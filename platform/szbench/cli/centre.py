"""``szbench centre``: federated evaluation from the command line (docs/federation.md).

On a centre: ``keygen``, ``subscribe``, ``dataset``, ``follow``, ``sync``, ``bundles``,
``show``, ``approve``, ``discard``, ``redraft``, ``withdraw``, ``status``. On the hub:
``register``, ``list``, ``rotate-key``, ``revoke-key``, ``results``, ``refusals``. Each runs
on the configured database (the server's host: ``docker-compose exec api szbench centre
...``), as the API does (the same services). Output is printed literally: names and
figures come from other sites.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import typer

app = typer.Typer(help="Federated evaluation: a centre and its hub.", no_args_is_help=True)


@contextmanager
def _session() -> Iterator[Any]:
    from szbench.db import session_scope
    from szbench.errors import SzbenchError

    try:
        with session_scope() as session:
            yield session
    except SzbenchError as exc:
        typer.echo(f"error: {exc.detail}", err=True)
        raise typer.Exit(1) from exc


def _echo_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, default=str))


def _guard(action: Callable[[], Any]) -> Any:
    from szbench.errors import SzbenchError

    try:
        return action()
    except SzbenchError as exc:
        typer.echo(f"error: {exc.detail}", err=True)
        raise typer.Exit(1) from exc


# --- the centre's side ---------------------------------------------------------------------------


@app.command("keygen")
def keygen(
    rotate: bool = typer.Option(False, "--rotate", help="Replace the key (old one kept aside)."),
) -> None:
    """Make this centre's Ed25519 key (a file under the data dir, mode 0600); print the
    public key to give to the hub's admins, and its fingerprint to compare."""
    from szbench.federation import signing

    _guard(lambda: signing.generate(rotate=rotate))
    public_key, fp = signing.own_public_key()
    typer.echo(f"public key:  {public_key}")
    typer.echo(f"fingerprint: {fp}")
    typer.echo(
        f"private key: {signing.key_path()} (stays here; back it up apart from the database)"
    )


@app.command("key")
def key() -> None:
    """Print this centre's public key and fingerprint."""
    from szbench.federation import signing

    public_key, fp = _guard(signing.own_public_key)
    typer.echo(f"public key:  {public_key}")
    typer.echo(f"fingerprint: {fp}")


@app.command("subscribe")
def subscribe(
    hub_url: str = typer.Argument(..., help="The hub's address, https://..."),
    name: str = typer.Option(..., "--as", help="This centre's name at the hub."),
    follow_new: bool = typer.Option(
        True, "--follow-new/--no-follow-new", help="Queue the hub's new versions by themselves."
    ),
) -> None:
    """Subscribe to a hub (after its admins registered this centre's public key)."""
    from szbench.federation import centre

    with _session() as session:
        sub = centre.subscribe(session, hub_url=hub_url, centre_name=name, follow_new=follow_new)
        typer.echo(f"subscribed to {sub.hub_url} as {sub.centre_name}")


@app.command("dataset")
def dataset(
    slug: str = typer.Argument(..., help="A held-out dataset of this centre."),
    auto_publish: bool = typer.Option(
        False, "--auto-publish/--approve-each", help="Send results without an admin's approval."
    ),
    min_subjects: int = typer.Option(5, min=3, help="Publish nothing over fewer subjects."),
    remove: bool = typer.Option(False, "--remove", help="Stop running the hub's versions on it."),
) -> None:
    """Choose a dataset to run the hub's followed versions on, and how its results leave."""
    from szbench.federation import centre

    with _session() as session:
        sub = centre.get_subscription(session)
        if remove:
            centre.remove_dataset(session, sub, slug)
            typer.echo(f"{slug}: removed")
            return
        row = centre.set_dataset(
            session, sub, slug, auto_publish=auto_publish, min_subjects=min_subjects
        )
        how = "auto-publish" if row.auto_publish else "each bundle approved by an admin"
        typer.echo(f"{slug}: {how}, at least {row.min_subjects} subjects")


@app.command("follow")
def follow(
    hub_version_id: int = typer.Argument(..., help="The hub's version id (szbench centre status)."),
    stop: bool = typer.Option(False, "--stop", help="Stop following it."),
) -> None:
    """Follow one of the hub's offered versions (queued at the next sync), or stop."""
    from szbench.federation import centre

    with _session() as session:
        row = centre.follow(session, centre.get_subscription(session), hub_version_id, not stop)
        typer.echo(
            f"hub version {row.hub_version_id}: {'followed' if row.followed else 'not followed'}"
        )


@app.command("sync")
def sync() -> None:
    """Read the hub's catalogue, queue followed versions, draft and auto-send bundles."""
    from szbench.federation import centre

    with _session() as session:
        report = centre.run_once(session, centre.get_subscription(session))
    typer.echo(
        f"{report.offered} versions offered; new {report.new or 'none'}; queued evaluations "
        f"{report.queued or 'none'}; drafted bundles {report.prepared or 'none'}; sent "
        f"{report.sent or 'none'}"
    )
    for hub_id in report.no_longer_offered:
        typer.echo(f"hub version {hub_id} is no longer offered: not queued again")
    for line in report.refused:
        typer.echo(f"refused: {line}", err=True)


@app.command("status")
def status(as_json: bool = typer.Option(False, "--json")) -> None:
    """The subscription, the chosen datasets and the hub's versions."""
    from szbench.federation import centre, queries

    with _session() as session:
        out = queries.subscription_out(session, centre.get_subscription(session))
    if as_json:
        _echo_json(out.model_dump(mode="json"))
        return
    typer.echo(f"hub {out.hub_url} as {out.centre_name}; last sync {out.last_synced_at or 'never'}")
    if out.last_sync_error:
        typer.echo(f"last sync failed: {out.last_sync_error}")
    typer.echo(f"key {out.key.fingerprint if out.key else 'none'}")
    for d in out.datasets:
        typer.echo(
            f"dataset {d.dataset} ({d.disclosure}): auto_publish={d.auto_publish} "
            f"min_subjects={d.min_subjects}"
        )
    for v in out.versions:
        flags = ("offered" if v.offered else "not offered") + (", followed" if v.followed else "")
        typer.echo(f"hub version {v.hub_version_id}: {v.algorithm} {v.version} ({flags})")


@app.command("prepare")
def prepare(evaluation_id: int = typer.Argument(...)) -> None:
    """Draft the bundle of one finished evaluation (says why when it cannot leave)."""
    from szbench.federation import centre

    with _session() as session:
        row = centre.prepare_one(
            session, centre.get_subscription(session), _evaluation(session, evaluation_id)
        )
        typer.echo(
            f"bundle {row.id} drafted (sequence {row.sequence}); "
            f"see it: szbench centre show {row.id}"
        )


def _evaluation(session: Any, evaluation_id: int) -> Any:
    from szbench.errors import NotFound
    from szbench.models import Evaluation

    row = session.get(Evaluation, evaluation_id)
    if row is None:
        raise NotFound(f"no evaluation {evaluation_id}")
    return row


@app.command("bundles")
def list_bundles() -> None:
    """This centre's bundles, newest first."""
    from szbench.federation import centre

    with _session() as session:
        for b in centre.list_bundles(session, centre.get_subscription(session)):
            typer.echo(
                f"{b.id}\tsequence {b.sequence}\t{b.kind.value}\t{b.state.value}\t"
                f"evaluation {b.evaluation_id or '-'}\t{b.hub_answer}"
            )


@app.command("show")
def show(bundle_id: int = typer.Argument(...)) -> None:
    """Exactly what leaves: the request line, the headers, then the body's bytes."""
    from szbench.federation import centre, queries

    with _session() as session:
        detail = queries.outgoing_detail(session, centre.get_bundle(session, bundle_id))
    typer.echo(f"{detail.method} {detail.url}", err=True)
    for name, value in detail.headers.items():
        typer.echo(f"{name}: {value}", err=True)
    typer.echo(f"(body sha256 {detail.payload_sha256}, state {detail.state.value})", err=True)
    # The body alone on stdout, byte for byte, so it can be piped and hashed.
    typer.echo(detail.payload, nl=False)
    typer.echo("", err=True)


@app.command("approve")
def approve(
    bundle_id: int = typer.Argument(...),
    sha256: str = typer.Option(..., help="The body's sha256 as `szbench centre show` printed it."),
) -> None:
    """Send a draft whose bytes you have read (their sha256 must match)."""
    from szbench.federation import centre

    with _session() as session:
        row = centre.approve(session, bundle_id, payload_sha256=sha256, by=None)
        state, answer = row.state.value, row.hub_answer
    typer.echo(f"bundle {bundle_id}: {state} ({answer})")
    if state != "sent":
        raise typer.Exit(1)


@app.command("discard")
def discard(bundle_id: int = typer.Argument(...)) -> None:
    """Do not send this draft."""
    from szbench.federation import centre

    with _session() as session:
        centre.discard(session, bundle_id)
    typer.echo(f"bundle {bundle_id}: discarded")


@app.command("redraft")
def redraft(bundle_id: int = typer.Argument(...)) -> None:
    """A new draft of a refused or discarded result (numbered above the hub's last)."""
    from szbench.federation import centre

    with _session() as session:
        row = centre.redraft(session, bundle_id)
        typer.echo(f"bundle {row.id} drafted (sequence {row.sequence})")


@app.command("withdraw")
def withdraw(
    bundle_id: int = typer.Argument(...),
    reason: str = typer.Option("", help="Shown at the hub beside the withdrawn result."),
) -> None:
    """Draft the withdrawal of a sent result (then approve it as any bundle)."""
    from szbench.federation import centre

    with _session() as session:
        row = centre.withdraw(session, bundle_id, reason=reason)
        typer.echo(
            f"withdrawal bundle {row.id} drafted (sequence {row.sequence}); "
            f"read it, then approve it: szbench centre show {row.id}"
        )


# --- the hub's side ------------------------------------------------------------------------------


@app.command("register")
def register(
    name: str = typer.Argument(..., help="The centre's name (it signs with it)."),
    public_key: str = typer.Option(
        ..., help="Its public key as `szbench centre keygen` printed it."
    ),
    title: str = typer.Option("", help="Shown on its page."),
    contact: str = typer.Option("", help="Whom the hub's admins reach (admins only see it)."),
) -> None:
    """Hub: register a centre and its public key."""
    from szbench.federation import service

    with _session() as session:
        row = service.register_centre(
            session, name=name, public_key=public_key, title=title, contact=contact
        )
        typer.echo(f"centre {row.name} registered; key {row.keys[0].fingerprint}")


@app.command("list")
def list_centres() -> None:
    """Hub: the registered centres and their keys."""
    from szbench.federation import service

    with _session() as session:
        for c in service.list_centres(session):
            typer.echo(f"{c.name}\t{c.title}\tlast sequence {c.last_sequence}")
            for k in c.keys:
                typer.echo(f"  {k.fingerprint}\t{k.state.value}")


@app.command("rotate-key")
def rotate_key(
    name: str = typer.Argument(...),
    public_key: str = typer.Option(..., help="The centre's new public key."),
) -> None:
    """Hub: the new key becomes the centre's active key; the old one retires."""
    from szbench.federation import service

    with _session() as session:
        key_row = service.rotate_key(session, service.get_centre(session, name), public_key)
        typer.echo(f"centre {name}: active key {key_row.fingerprint}")


@app.command("revoke-key")
def revoke_key(name: str = typer.Argument(...), fingerprint: str = typer.Argument(...)) -> None:
    """Hub: revoke a centre's key (compromised): nothing more signed with it is accepted."""
    from szbench.federation import service

    with _session() as session:
        service.revoke_key(session, service.get_centre(session, name), fingerprint)
        typer.echo(f"centre {name}: key {fingerprint} revoked")


@app.command("results")
def results(
    centre_name: str | None = typer.Option(None, "--centre", help="One centre's only."),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Hub: results published by centres (withdrawn ones marked)."""
    from szbench.federation import queries, service

    with _session() as session:
        centre_id = service.get_centre(session, centre_name).id if centre_name else None
        rows = queries.visible_results(session, None, centre_id=centre_id)
    if as_json:
        _echo_json([r.model_dump(mode="json") for r in rows])
        return
    for r in rows:
        mark = " (withdrawn)" if r.withdrawn_at else ""
        f1 = r.figures.get("event_f1")
        typer.echo(
            f"{r.id}\t{r.centre}\t{r.algorithm} {r.algorithm_version}\t{r.dataset.name}\t"
            f"event F1 {'n/a' if f1 is None else f1}{mark}"
        )


@app.command("refusals")
def refusals() -> None:
    """Hub: refused bundles, counted per claimed centre and reason."""
    from szbench.federation import service

    with _session() as session:
        for r in service.refusals(session):
            typer.echo(f"{r.centre or '(unreadable)'}\t{r.reason}\t{r.count}\t{r.last_detail}")

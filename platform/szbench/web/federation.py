"""Federation pages (docs/federation.md, docs/web-ui.md "Federation").

The hub's: the centres (``/centres``; admins register them and rotate or revoke their keys
there), a centre's page (its keys' fingerprints, its datasets as its bundles describe them,
its results, withdrawn ones marked), and the external-validation view (one row per
algorithm version, this hub's own released figures beside a column per centre). The
centre's (admins): its subscription, datasets, the hub's versions and its bundles
(``/admin/federation``), and each bundle's approval page, which shows exactly the request
that leaves (method, address, headers, the body's bytes) and approves it by the sha256 of
the bytes shown.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from szbench.api.deps import SessionDep
from szbench.auth.dependencies import AdminOnly, Anyone
from szbench.disclosure import decision
from szbench.errors import SzbenchError
from szbench.federation import centre, queries, service, signing
from szbench.models import Algorithm, AlgorithmVersion, User
from szbench.results import queries as results
from szbench.web import queries as web_queries
from szbench.web.common import CsrfChecked, redirect, render
from szbench.web.pages import METRIC_LABELS

router = APIRouter(include_in_schema=False)

#: The figures the pages show of an external result (those every release carries).
SHOWN = ("event_f1", "event_sensitivity", "event_precision", "event_fp_rate")


def _flash(path: str, action: object) -> Response:
    """Run ``action`` (a callable); redirect to ``path`` with its message or its error."""
    try:
        message = action() if callable(action) else str(action)
    except SzbenchError as exc:
        return redirect(path, f"Not done: {exc.detail}")
    return redirect(path, str(message))


# --- the hub ---------------------------------------------------------------------------------


@router.get("/centres", response_class=HTMLResponse)
def centres_page(request: Request, session: SessionDep, caller: Anyone) -> Response:
    """Centres publishing here, their keys' fingerprints; admins register and manage them."""
    rows = [queries.centre_out(session, c, caller.user) for c in service.list_centres(session)]
    context = {
        "title": "Centres",
        "centres": rows,
        "refusals": service.refusals(session) if caller.is_admin else [],
    }
    return render(request, "centres.html", caller, context)


@router.post("/centres", response_class=HTMLResponse)
def register_centre(
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    name: Annotated[str, Form(max_length=100)],
    public_key: Annotated[str, Form(max_length=1000)],
    title: Annotated[str, Form(max_length=200)] = "",
    contact: Annotated[str, Form(max_length=320)] = "",
) -> Response:
    """Register a centre and its public key (admins)."""

    def act() -> str:
        row = service.register_centre(
            session, name=name.strip(), public_key=public_key, title=title, contact=contact
        )
        return f"Centre {row.name} registered; its key is {row.keys[0].fingerprint}."

    return _flash("/centres", act)


@router.post("/centres/{name}/keys", response_class=HTMLResponse)
def rotate_key(
    name: str,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    public_key: Annotated[str, Form(max_length=1000)],
) -> Response:
    """The centre's new key becomes active; the old one retires (admins)."""

    def act() -> str:
        key = service.rotate_key(session, service.get_centre(session, name), public_key)
        return f"Centre {name}: active key {key.fingerprint}; the previous one is retired."

    return _flash(f"/centres/{name}", act)


@router.post("/centres/{name}/keys/revoke", response_class=HTMLResponse)
def revoke_key(
    name: str,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    fingerprint: Annotated[str, Form(max_length=80)],
) -> Response:
    """Revoke a centre's key: nothing more signed with it is accepted (admins)."""

    def act() -> str:
        service.revoke_key(session, service.get_centre(session, name), fingerprint)
        return f"Centre {name}: key {fingerprint} revoked."

    return _flash(f"/centres/{name}", act)


@router.get("/centres/{name}", response_class=HTMLResponse)
def centre_page(request: Request, name: str, session: SessionDep, caller: Anyone) -> Response:
    """A centre: its keys' fingerprints, its datasets' descriptions and its results."""
    detail = queries.centre_detail(session, service.get_centre(session, name), caller.user)
    context = {
        "title": f"Centre {detail.title or detail.name}",
        "centre": detail,
        "labels": METRIC_LABELS,
        "shown": SHOWN,
    }
    return render(request, "centre.html", caller, context)


def _hub_figures(
    session: SessionDep, viewer: User | None, version_ids: set[int]
) -> dict[int, list[tuple[str, float | None, str]]]:
    """This hub's own results of each version, as the viewer may see them: (dataset,
    released event F1, release rule)."""
    out: dict[int, list[tuple[str, float | None, str]]] = {}
    algorithm_ids = {
        v.algorithm_id for v in (session.get(AlgorithmVersion, i) for i in version_ids) if v
    }
    for algorithm_id in sorted(algorithm_ids):
        algorithm = session.get(Algorithm, algorithm_id)
        if algorithm is None:
            continue
        shown = [
            e
            for e in web_queries.visible_results(session, algorithm, viewer)
            if e.algorithm_version_id in version_ids and e.official
        ]
        views = [(e, decision.view_of(viewer, e)) for e in shown]
        released = results.released_metrics(session, views)
        for e, view in views:
            out.setdefault(e.algorithm_version_id, []).append(
                (
                    f"{e.dataset_version.dataset.slug} {e.dataset_version.version}",
                    released[e.id].get("event_f1"),
                    view.release.value,
                )
            )
    return out


@router.get("/external-validation", response_class=HTMLResponse)
def external_page(request: Request, session: SessionDep, caller: Anyone) -> Response:
    """Each algorithm version's results at the centres, beside this hub's own."""
    centres, rows = queries.external_board(session, caller.user)
    ids = {int(str(r["algorithm_version_id"])) for r in rows}
    context = {
        "title": "External validation",
        "centres": centres,
        "rows": rows,
        "hub": _hub_figures(session, caller.user, ids),
    }
    return render(request, "external.html", caller, context)


# --- the centre ------------------------------------------------------------------------------


def _own_key() -> tuple[str, str] | None:
    try:
        return signing.own_public_key()
    except SzbenchError:
        return None


@router.get("/admin/federation", response_class=HTMLResponse)
def federation_admin(request: Request, session: SessionDep, caller: AdminOnly) -> Response:
    """This centre's hub, datasets, the hub's versions and its bundles (admins)."""
    sub = centre.find_subscription(session)
    context = {
        "title": "Federation",
        "key": _own_key(),
        "subscription": queries.subscription_out(session, sub) if sub else None,
        "bundles": centre.list_bundles(session, sub) if sub else [],
    }
    return render(request, "admin/federation.html", caller, context)


@router.post("/admin/federation/key", response_class=HTMLResponse)
def make_key(
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    rotate: Annotated[str, Form(max_length=10)] = "",
) -> Response:
    """Make (or rotate) this centre's signing key."""

    def act() -> str:
        signing.generate(rotate=bool(rotate))
        return f"Key made: give its public key to the hub's admins ({signing.own_public_key()[1]})."

    return _flash("/admin/federation", act)


@router.post("/admin/federation/subscribe", response_class=HTMLResponse)
def subscribe(
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    hub_url: Annotated[str, Form(max_length=500)],
    centre_name: Annotated[str, Form(max_length=100)],
    follow_new: Annotated[str, Form(max_length=10)] = "",
) -> Response:
    """Subscribe to a hub."""

    def act() -> str:
        sub = centre.subscribe(
            session,
            hub_url=hub_url,
            centre_name=centre_name.strip(),
            follow_new=bool(follow_new),
            by=caller.user,
        )
        return f"Subscribed to {sub.hub_url} as {sub.centre_name}."

    return _flash("/admin/federation", act)


@router.post("/admin/federation/sync", response_class=HTMLResponse)
def sync(session: SessionDep, caller: AdminOnly, _csrf: CsrfChecked) -> Response:
    """Read the hub's catalogue now, queue, draft, send what auto-publishes."""

    def act() -> str:
        report = centre.run_once(session, centre.get_subscription(session))
        return (
            f"{report.offered} versions offered; {len(report.queued)} evaluations queued; "
            f"{len(report.prepared)} bundles drafted; {len(report.sent)} sent."
            + ("".join(f" {r}." for r in report.refused))
        )

    return _flash("/admin/federation", act)


@router.post("/admin/federation/datasets", response_class=HTMLResponse)
def set_dataset(
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    slug: Annotated[str, Form(max_length=100)],
    min_subjects: Annotated[int, Form(ge=1, le=100_000)] = centre.DEFAULT_MIN_SUBJECTS,
    auto_publish: Annotated[str, Form(max_length=10)] = "",
    remove: Annotated[str, Form(max_length=10)] = "",
) -> Response:
    """Choose a dataset to publish from (or stop)."""

    def act() -> str:
        sub = centre.get_subscription(session)
        if remove:
            centre.remove_dataset(session, sub, slug)
            return f"{slug}: the hub's versions are no longer run on it."
        row = centre.set_dataset(
            session, sub, slug, auto_publish=bool(auto_publish), min_subjects=min_subjects
        )
        how = "published as soon as ready" if row.auto_publish else "each bundle approved here"
        return f"{slug}: {how}, from {row.min_subjects} subjects."

    return _flash("/admin/federation", act)


@router.post("/admin/federation/versions/{hub_version_id}", response_class=HTMLResponse)
def follow(
    hub_version_id: int,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    followed: Annotated[str, Form(max_length=10)] = "",
) -> Response:
    """Follow one of the hub's versions, or stop."""

    def act() -> str:
        row = centre.follow(
            session, centre.get_subscription(session), hub_version_id, bool(followed)
        )
        return (
            f"Hub version {row.hub_version_id}: {'followed' if row.followed else 'not followed'}."
        )

    return _flash("/admin/federation", act)


@router.get("/admin/federation/bundles/{bundle_id}", response_class=HTMLResponse)
def bundle_page(
    request: Request, bundle_id: int, session: SessionDep, caller: AdminOnly
) -> Response:
    """Exactly what leaves, byte for byte, and the approval that sends it."""
    detail = queries.outgoing_detail(session, centre.get_bundle(session, bundle_id))
    context = {"title": f"Bundle {detail.id}", "bundle": detail}
    return render(request, "admin/federation_bundle.html", caller, context)


@router.post("/admin/federation/bundles/{bundle_id}/{action}", response_class=HTMLResponse)
def bundle_action(
    bundle_id: int,
    action: str,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    payload_sha256: Annotated[str, Form(max_length=64)] = "",
    reason: Annotated[str, Form(max_length=500)] = "",
) -> Response:
    """Approve (by the sha256 of the bytes shown), discard, draft again or withdraw."""
    here = f"/admin/federation/bundles/{bundle_id}"
    try:
        if action == "approve":
            row = centre.approve(session, bundle_id, payload_sha256=payload_sha256, by=caller.user)
            return redirect(here, f"Bundle {row.id}: {row.state.value} ({row.hub_answer}).")
        if action == "discard":
            centre.discard(session, bundle_id)
            return redirect(here, f"Bundle {bundle_id} discarded.")
        if action == "redraft":
            row = centre.redraft(session, bundle_id)
        elif action == "withdraw":
            row = centre.withdraw(session, bundle_id, reason=reason)
        else:
            return redirect(here, f"Not done: no action {action[:20]!r}.")
    except SzbenchError as exc:
        return redirect(here, f"Not done: {exc.detail}")
    return redirect(
        f"/admin/federation/bundles/{row.id}", f"Bundle {row.id} drafted: read it, then approve it."
    )

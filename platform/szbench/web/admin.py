"""Admin pages: datasets and versions, continuous benchmarking, users and roles,
phases, publishing hidden results, the queue. Every route requires the admin role."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import Field, ValidationError

from szbench.api.deps import SessionDep
from szbench.auth import accounts, mail
from szbench.auth import service as auth
from szbench.auth.dependencies import AdminOnly
from szbench.datasets import queries as datasets
from szbench.datasets import router as datasets_api
from szbench.datasets import service as dataset_service
from szbench.datasets.schemas import DatasetVersionCreate
from szbench.disclosure.facts import rules_of
from szbench.errors import BadRequest, SzbenchError
from szbench.evaluations import queries as evaluations
from szbench.models import (
    DatasetKind,
    DatasetVersion,
    Disclosure,
    FailedRecordings,
    ReleaseRule,
    Role,
)
from szbench.phases import service as phases
from szbench.phases.schemas import PhaseCreate
from szbench.web import forms
from szbench.web import queries as web_queries
from szbench.web.common import CsrfChecked, redirect, render
from szbench.web.forms import FormModel, Submitted

router = APIRouter(prefix="/admin", include_in_schema=False)

#: What a short name (of a dataset or a phase) takes, said under the field when it is wrong.
_SLUG_HINT = (
    "Use lower-case letters, digits, dots, underscores and hyphens, starting with a letter "
    "or a digit (at most 100 characters)."
)


@router.get("", response_class=HTMLResponse)
def admin_home(request: Request, session: SessionDep, caller: AdminOnly) -> Response:
    """Admin overview."""
    queue = web_queries.queue_view(session)
    return render(request, "admin/home.html", caller, {"title": "Admin", "queue": queue})


# --- datasets ----------------------------------------------------------------------------------


def _datasets_page(
    request: Request,
    session: SessionDep,
    caller: AdminOnly,
    *,
    error: str | None = None,
    check: object | None = None,
    form: dict[str, str] | None = None,
    new: Submitted[DatasetForm] | None = None,
    row: tuple[str, Submitted[Any]] | None = None,
    status_code: int = 200,
) -> Response:
    """The datasets page; ``new``: the new-dataset form as typed, with its errors by field;
    ``row``: one dataset's own form (make public, register a version) as typed, with its."""
    rows, _ = datasets.list_datasets(session, limit=500, offset=0)
    counts = {d.id: datasets.recording_counts(session, d) for d in rows}
    context = {
        "title": "Datasets",
        "datasets": rows,
        "counts": counts,
        # Held-out first: the default, and what a dataset stays unless made public on purpose.
        "kinds": [DatasetKind.HELD_OUT, DatasetKind.PUBLIC_SAMPLE],
        "error": error,
        "check": check,
        "form": form or {},
        # The new-dataset form, as typed, and its errors by field.
        "new": new.values if new else {"kind": DatasetKind.HELD_OUT.value},
        "new_errors": new.errors if new else {},
        "row_slug": row[0] if row else None,
        "row_form": row[1].values if row else {},
        "row_errors": row[1].errors if row else {},
    }
    for typed in (new, row[1] if row else None):
        if typed is not None and typed.errors:
            status_code = typed.status_code
    return render(request, "admin/datasets.html", caller, context, status_code=status_code)


@router.get("/datasets", response_class=HTMLResponse)
def datasets_page(request: Request, session: SessionDep, caller: AdminOnly) -> Response:
    """Datasets and their versions; forms to create and register."""
    return _datasets_page(request, session, caller)


class DatasetForm(FormModel):
    slug: str = Field(min_length=1, max_length=100)
    title: str = Field(default="", max_length=200)
    description: str = Field(default="", max_length=5000)
    kind: DatasetKind = DatasetKind.HELD_OUT
    confirm_public: str = Field(default="", max_length=100)


class MakePublicForm(FormModel):
    kind: DatasetKind
    confirm_public: str = Field(default="", max_length=100)


class DatasetVersionForm(FormModel):
    version: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
    prepared_path: str = Field(min_length=1, max_length=1000)


#: The dataset forms' words for their fields, in place of the names a service's message uses.
DATASET_LABELS = {
    "confirm_public": "the confirmation",
    "prepared_path": "the prepared folder",
    "run_limits": "the run limits",
}
_VERSION_HINT = (
    "Use letters, digits, dots, underscores, plus and hyphens, starting with a letter or a "
    "digit (for example v2 or 2025.1)."
)


def _public_unconfirmed(slug: str) -> str:
    return (
        f"Type {slug.strip()[:100]} here to confirm: anyone signed in could then download its "
        "recordings and annotations."
    )


@router.post("/datasets", response_class=HTMLResponse)
def create_dataset(
    request: Request,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    slug: Annotated[str, Form()] = "",
    title: Annotated[str, Form()] = "",
    description: Annotated[str, Form()] = "",
    kind: Annotated[str, Form()] = DatasetKind.HELD_OUT.value,
    confirm_public: Annotated[str, Form()] = "",
) -> Response:
    """Create a dataset (held-out unless a public sample is confirmed by its slug)."""
    typed = forms.check(
        DatasetForm,
        {
            "slug": slug.strip(),
            "title": title,
            "description": description,
            "kind": kind,
            "confirm_public": confirm_public,
        },
        labels=DATASET_LABELS,
        hints={"slug": _SLUG_HINT},
    )
    model = typed.model
    if model and model.kind == DatasetKind.PUBLIC_SAMPLE and not _confirmed(slug, confirm_public):
        typed.add("confirm_public", _public_unconfirmed(slug))
    if not typed.ok:
        return _datasets_page(request, session, caller, new=typed)
    assert typed.model is not None
    try:
        dataset_service.create_dataset(
            session,
            slug=slug.strip(),
            title=title,
            description=description,
            kind=typed.model.kind,
            confirm_public=_confirmed(slug, confirm_public),
        )
    except SzbenchError as exc:
        session.rollback()
        return _datasets_page(request, session, caller, new=typed.fail(exc))
    return redirect("/admin/datasets", f"Dataset {slug} created.")


def _confirmed(slug: str, typed: str) -> bool:
    # Making data public is confirmed by typing its slug, so no default or stray click does it.
    return bool(slug.strip()) and typed.strip() == slug.strip()


@router.post("/datasets/{slug}/kind", response_class=HTMLResponse)
def set_kind(
    request: Request,
    slug: str,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    kind: Annotated[str, Form()] = "",
    confirm_public: Annotated[str, Form()] = "",
) -> Response:
    """Make a dataset held-out, or (confirmed by its slug) a downloadable public sample."""
    dataset = datasets.get_dataset(session, slug)
    typed = forms.check(
        MakePublicForm, {"kind": kind, "confirm_public": confirm_public}, labels=DATASET_LABELS
    )
    model = typed.model
    if model and model.kind == DatasetKind.PUBLIC_SAMPLE and not _confirmed(slug, confirm_public):
        typed.add("confirm_public", _public_unconfirmed(slug))
    if not typed.ok:
        return _datasets_page(request, session, caller, row=(slug, typed))
    assert typed.model is not None
    kind_value = typed.model.kind
    try:
        dataset_service.set_kind(
            session, dataset, kind_value, confirm_public=_confirmed(slug, confirm_public)
        )
    except SzbenchError as exc:
        session.rollback()
        return _datasets_page(request, session, caller, row=(slug, typed.fail(exc)))
    told = {
        DatasetKind.HELD_OUT: "is held-out: its data is for admins only",
        DatasetKind.PUBLIC_SAMPLE: "is a public sample: anyone signed in may download it",
    }
    return redirect("/admin/datasets", f"Dataset {slug} {told[kind_value]}.")


@router.post("/datasets/{slug}/disclosure", response_class=HTMLResponse)
def set_disclosure(
    request: Request,
    slug: str,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    disclosure: Annotated[str, Form(max_length=30)] = "",
) -> Response:
    """Set what non-admins see of results on a held-out dataset."""
    try:
        level = Disclosure(disclosure)
    except ValueError:
        return _datasets_page(
            request,
            session,
            caller,
            error=f"disclosure: unknown level {disclosure!r} (aggregate, subject or recording)",
            status_code=400,
        )
    dataset_service.set_disclosure(session, datasets.get_dataset(session, slug), level)
    return redirect("/admin/datasets", f"Dataset {slug} now discloses {level.value} figures.")


@router.post("/datasets/{slug}/failed-recordings", response_class=HTMLResponse)
def set_failed_recordings(
    request: Request,
    slug: str,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    failed_recordings: Annotated[str, Form(max_length=30)] = "",
) -> Response:
    """Set whether evaluations with failed recordings rank on a dataset's leaderboards."""
    try:
        rule = FailedRecordings(failed_recordings)
    except ValueError:
        return _datasets_page(
            request,
            session,
            caller,
            error=f"failed_recordings: unknown rule {failed_recordings[:30]!r} "
            "(unranked or no_detections)",
            status_code=400,
        )
    dataset_service.set_failed_recordings(session, datasets.get_dataset(session, slug), rule)
    told = {
        FailedRecordings.UNRANKED: "shows evaluations with failed recordings apart, unranked",
        FailedRecordings.NO_DETECTIONS: "scores failed recordings as no detections and ranks them",
    }
    return redirect("/admin/datasets", f"Dataset {slug} now {told[rule]}.")


@router.post("/datasets/{slug}/versions", response_class=HTMLResponse)
def register_version(
    request: Request,
    slug: str,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    version: Annotated[str, Form()] = "",
    prepared_path: Annotated[str, Form()] = "",
    action: Annotated[str, Form(max_length=20)] = "check",
) -> Response:
    """Check a prepared version (dry run: who would be queued), or register it and queue."""
    form = {"slug": slug, "version": version, "prepared_path": prepared_path}
    typed = forms.check(
        DatasetVersionForm,
        {"version": version.strip(), "prepared_path": prepared_path.strip()},
        labels=DATASET_LABELS,
        hints={"version": _VERSION_HINT},
    )
    if typed.model is None:
        return _datasets_page(request, session, caller, row=(slug, typed))
    try:
        body = DatasetVersionCreate(
            version=typed.model.version, prepared_path=typed.model.prepared_path
        )
        result = datasets_api.register_version(
            slug, body, session, caller, dry_run=(action != "register")
        )
    except SzbenchError as exc:
        session.rollback()
        return _datasets_page(request, session, caller, row=(slug, typed.fail(exc)))
    if action != "register":
        return _datasets_page(request, session, caller, check=result, form=form)
    return redirect(
        "/admin/datasets",
        f"{slug} {result.version} registered: {result.recordings} recordings, "
        f"{len(result.evaluation_ids)} evaluations queued.",
    )


@router.get("/datasets/{slug}/versions/{version}/benchmark", response_class=HTMLResponse)
def benchmark_plan(
    request: Request, slug: str, version: str, session: SessionDep, caller: AdminOnly
) -> Response:
    """Dry run of continuous benchmarking on a version, with a button to confirm."""
    planned = datasets_api.benchmark_plan(slug, version, session, caller)
    context = {
        "title": f"Benchmark {slug} {version}",
        "slug": slug,
        "version": version,
        "planned": planned,
    }
    return render(request, "admin/benchmark.html", caller, context)


@router.post("/datasets/{slug}/versions/{version}/benchmark")
def queue_benchmark(
    slug: str, version: str, session: SessionDep, caller: AdminOnly, _csrf: CsrfChecked
) -> Response:
    """Queue every active algorithm version not yet evaluated on this dataset version."""
    ids = datasets_api.queue_benchmark(slug, version, session, caller)
    return redirect("/admin/datasets", f"{len(ids)} evaluations queued on {slug} {version}.")


# --- users -------------------------------------------------------------------------------------


def _users_page(
    request: Request, session: SessionDep, caller: AdminOnly, *, error: str | None = None,
    status_code: int = 200, reset: dict[str, object] | None = None,
    new: Submitted[UserForm] | None = None,
) -> Response:  # fmt: skip
    """The users page; ``new``: the new-user form as typed, with its errors by field."""
    users, total = auth.list_users(session, limit=500, offset=0)
    context = {
        "title": "Users",
        "users": users,
        "total": total,
        "roles": list(Role),
        "error": error,
        "reset": reset,
        "mail_enabled": mail.enabled(),
        "new": new.values if new else {"role": Role.RESEARCHER.value},
        "new_errors": new.errors if new else {},
    }
    if new is not None and new.errors:
        status_code = new.status_code
    return render(request, "admin/users.html", caller, context, status_code=status_code)


class UserForm(FormModel):
    email: str = Field(min_length=1, max_length=320)
    name: str = Field(default="", max_length=200)
    password: str = Field(default="", max_length=1000)
    role: Role = Role.RESEARCHER


@router.get("/users", response_class=HTMLResponse)
def users_page(request: Request, session: SessionDep, caller: AdminOnly) -> Response:
    """Users and roles."""
    return _users_page(request, session, caller)


@router.post("/users", response_class=HTMLResponse)
def create_user(
    request: Request,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    email: Annotated[str, Form()] = "",
    name: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
    role: Annotated[str, Form()] = Role.RESEARCHER.value,
) -> Response:
    """Create a user with any role."""
    typed = forms.check(
        UserForm,
        {"email": email.strip(), "name": name, "password": password, "role": role},
        keep_secret=("password",),
    )
    if typed.model is None:
        return _users_page(request, session, caller, new=typed)
    try:
        auth.create_user(
            session,
            email=typed.model.email,
            password=password or None,
            name=name,
            role=typed.model.role,
        )
    except SzbenchError as exc:
        session.rollback()
        return _users_page(request, session, caller, new=typed.fail(exc))
    return redirect("/admin/users", f"User {email} created.")


@router.post("/users/{user_id}", response_class=HTMLResponse)
def update_user(
    request: Request,
    user_id: int,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    role: Annotated[str, Form(max_length=20)] = "",
    is_active: Annotated[str, Form(max_length=5)] = "",
) -> Response:
    """Change a user's role or active flag."""
    assert caller.user is not None
    user = auth.get_user(session, user_id)
    try:
        new_role = Role(role) if role else None
    except ValueError:
        return _users_page(
            request, session, caller, error=f"role: unknown role {role!r}", status_code=400
        )
    active = None if not is_active else is_active == "true"
    if user.id == caller.user.id and (active is False or (new_role and new_role != Role.ADMIN)):
        return _users_page(
            request, session, caller, error="you cannot demote or deactivate yourself",
            status_code=409,
        )  # fmt: skip
    auth.update_user(session, user, role=new_role, is_active=active)
    return redirect("/admin/users", f"User {user.email} updated.")


@router.post("/users/{user_id}/reset-link", response_class=HTMLResponse)
def issue_reset_link(
    request: Request,
    user_id: int,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    send_email: Annotated[str, Form(max_length=5)] = "",
) -> Response:
    """A one-time password reset link for a user, shown once (and e-mailed if asked)."""
    user = auth.get_user(session, user_id)
    by_mail = send_email == "true" and mail.enabled()
    url, expires_at, emailed = accounts.issue_reset_link(user, by_mail=by_mail)
    reset = {"user": user, "url": url, "expires_at": expires_at, "emailed": emailed}
    return _users_page(request, session, caller, reset=reset)


# --- publishing ----------------------------------------------------------------------------------


@router.get("/publishing", response_class=HTMLResponse)
def publishing(request: Request, session: SessionDep, caller: AdminOnly) -> Response:
    """Hidden (unpublished) results, per evaluation and per phase."""
    context = {
        "title": "Publishing",
        "hidden": web_queries.unpublished(session),
        "phases": web_queries.all_phases(session),
    }
    return render(request, "admin/publishing.html", caller, context)


@router.post("/evaluations/{evaluation_id}/publish")
def publish_evaluation(
    evaluation_id: int, session: SessionDep, caller: AdminOnly, _csrf: CsrfChecked
) -> Response:
    """Publish one evaluation's results."""
    evaluation = evaluations.get_evaluation(session, evaluation_id, viewer=caller.user)
    phases.publish_evaluation(session, evaluation)
    return redirect("/admin/publishing", f"Evaluation {evaluation_id} published.")


@router.post("/phases/{slug}/publish")
def publish_phase(
    slug: str,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    back: Annotated[str, Form(max_length=20)] = "",
) -> Response:
    """Publish every result of a phase."""
    count = phases.publish_phase(session, phases.get_phase(session, slug))
    page = "/admin/phases" if back == "phases" else "/admin/publishing"
    return redirect(page, f"Phase {slug}: {count} evaluations published.")


# --- phases ----------------------------------------------------------------------------------


def _moment(field: str, text: str) -> datetime | None:
    """A date and time typed in a form (``datetime-local``: no offset, read as UTC)."""
    text = text.strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadRequest(
            f"{field}: {text[:40]!r} is not a date and time (YYYY-MM-DD HH:MM, UTC)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _quota(text: str) -> int | None:
    text = text.strip()
    if not text:
        return None
    if not text.isdigit() or int(text) > 10**6:
        raise BadRequest(f"submission_quota: {text[:20]!r} is not a whole number up to 1000000")
    return int(text)


def _level(text: str) -> Disclosure | None:
    if not text:
        return None
    try:
        return Disclosure(text)
    except ValueError:
        raise BadRequest(
            f"disclosure: unknown level {text[:30]!r} (aggregate, subject or recording)"
        ) from None


def _rule(text: str) -> ReleaseRule | None:
    if not text:
        return None
    try:
        return ReleaseRule(text)
    except ValueError:
        raise BadRequest(
            f"release_rule: unknown rule {text[:30]!r} (exact or ladder; empty: the default)"
        ) from None


def _step(text: str) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        step = float(text)
    except ValueError:
        step = math.nan
    if not 0 < step <= 0.5:
        raise BadRequest(f"ladder_step: {text[:20]!r} is not a number above 0 and up to 0.5")
    return step


def _named_versions(session: SessionDep, ids: list[int]) -> list[DatasetVersion]:
    found = []
    for i, dv_id in enumerate(ids):
        dv = session.get(DatasetVersion, dv_id)
        if dv is None:
            raise BadRequest(
                f"Dataset version {dv_id} (ticked {i + 1}.) no longer exists: reload the page "
                "and tick the data again."
            )
        found.append(dv)
    return found


#: The phase forms' words for their fields, in place of the names a service's message uses.
PHASE_LABELS = {
    "opens_at": "the opening time",
    "closes_at": "the deadline",
    "submission_quota": "the quota",
    "release_rule": "the release rule",
    "ladder_step": "the Ladder step",
    "slug": "the short name",
}


def _phases_page(
    request: Request,
    session: SessionDep,
    caller: AdminOnly,
    *,
    error: str | None = None,
    new: Submitted[PhaseForm] | None = None,
    card: tuple[str, Submitted[PhaseForm]] | None = None,
    status_code: int = 200,
) -> Response:
    """The phases page; ``new``: the new-phase form as typed, with its errors by field;
    ``card``: one phase's own forms (dates, quota, release) as typed, with theirs."""
    rows = web_queries.all_phases(session)
    all_datasets, _ = datasets.list_datasets(session, limit=500, offset=0)
    context = {
        "title": "Phases",
        "phases": rows,
        "refusals": {p.id: phases.refusal(p) for p in rows},
        "rules": {p.id: rules_of(p) for p in rows},
        "named": {p.id: {dv.id for dv in p.dataset_versions} for p in rows},
        "dataset_versions": [
            dv for d in all_datasets if d.kind == DatasetKind.HELD_OUT for dv in d.versions
        ],
        "levels": list(Disclosure),
        "error": error,
        "form": new.values if new else {},
        "errors": new.errors if new else {},
        "card_slug": card[0] if card else None,
        "card_form": card[1].values if card else {},
        "card_errors": card[1].errors if card else {},
    }
    for typed in (new, card[1] if card else None):
        if typed is not None and typed.errors:
            status_code = typed.status_code
    return render(request, "admin/phases.html", caller, context, status_code=status_code)


@router.get("/phases", response_class=HTMLResponse)
def phases_page(request: Request, session: SessionDep, caller: AdminOnly) -> Response:
    """Phases: dates, quota, disclosure; create, edit, close, reopen, publish."""
    return _phases_page(request, session, caller)


class PhaseForm(FormModel):
    """A phase's form fields as typed; dates, quota, rule and step are read by
    :func:`_phase_values`, each error put under its field."""

    slug: str = Field(default="", max_length=100)
    title: str = Field(default="", max_length=200)
    opens_at: str = Field(default="", max_length=40)
    closes_at: str = Field(default="", max_length=40)
    submission_quota: str = Field(default="", max_length=40)
    disclosure: str = Field(default="", max_length=40)
    hidden: str = Field(default="", max_length=40)
    release_rule: str = Field(default="", max_length=40)
    ladder_step: str = Field(default="", max_length=40)


_PHASE_READERS: dict[str, Any] = {
    "opens_at": lambda text: _moment("opens_at", text),
    "closes_at": lambda text: _moment("closes_at", text),
    "submission_quota": _quota,
    "disclosure": _level,
    "release_rule": _rule,
    "ladder_step": _step,
}


def _phase_values(typed: Submitted[PhaseForm], names: tuple[str, ...]) -> dict[str, Any]:
    """The typed ``names`` read as dates, quota, level, rule and step; a value that cannot
    be read is an error under its field (every one of them, not only the first)."""
    read: dict[str, Any] = {}
    for name in names:
        try:
            read[name] = _PHASE_READERS[name](str(typed.values.get(name, "")))
        except SzbenchError as exc:
            typed.fail(exc)
    return read


def _phase_form(values: dict[str, str]) -> Submitted[PhaseForm]:
    return forms.check(PhaseForm, values, labels=PHASE_LABELS, hints={"slug": _SLUG_HINT})


@router.post("/phases", response_class=HTMLResponse)
def create_phase(
    request: Request,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    slug: Annotated[str, Form()] = "",
    title: Annotated[str, Form()] = "",
    opens_at: Annotated[str, Form()] = "",
    closes_at: Annotated[str, Form()] = "",
    submission_quota: Annotated[str, Form()] = "",
    disclosure: Annotated[str, Form()] = "",
    hidden: Annotated[str, Form()] = "",
    release_rule: Annotated[str, Form()] = "",
    ladder_step: Annotated[str, Form()] = "",
    dataset_version: Annotated[list[int] | None, Form(max_length=200)] = None,
) -> Response:
    """Create a phase."""
    values = {
        "slug": slug.strip(), "title": title.strip(), "opens_at": opens_at,
        "closes_at": closes_at, "submission_quota": submission_quota, "disclosure": disclosure,
        "hidden": hidden, "release_rule": release_rule, "ladder_step": ladder_step,
    }  # fmt: skip
    typed = _phase_form(values)
    read = _phase_values(typed, tuple(_PHASE_READERS))
    if not typed.ok:
        return _phases_page(request, session, caller, new=typed)
    try:
        body = PhaseCreate(slug=slug.strip(), title=title.strip(), hidden=hidden == "true", **read)
    except ValidationError as exc:
        typed.errors.update(forms.messages(exc.errors()))
        if typed.errors.get("slug") == forms.PATTERN_MISMATCH:
            typed.errors["slug"] = _SLUG_HINT
        typed.status_code = 400
        return _phases_page(request, session, caller, new=typed)
    try:
        phases.create_phase(
            session,
            **body.model_dump(exclude={"dataset_versions"}),
            dataset_versions=_named_versions(session, dataset_version or []),
        )
    except SzbenchError as exc:
        session.rollback()
        return _phases_page(request, session, caller, new=typed.fail(exc))
    return redirect("/admin/phases", f"Phase {slug.strip()} created.")


@router.post("/phases/{slug}/edit", response_class=HTMLResponse)
def edit_phase(
    request: Request,
    slug: str,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    opens_at: Annotated[str, Form()] = "",
    closes_at: Annotated[str, Form()] = "",
    submission_quota: Annotated[str, Form()] = "",
) -> Response:
    """Change a phase's dates and quota (empty: no bound, no quota)."""
    phase = phases.get_phase(session, slug)
    typed = _phase_form(
        {"opens_at": opens_at, "closes_at": closes_at, "submission_quota": submission_quota}
    )
    read = _phase_values(typed, ("opens_at", "closes_at", "submission_quota"))
    if not typed.ok:
        return _phases_page(request, session, caller, card=(slug, typed))
    try:
        phases.update_phase(session, phase, opens_at=read["opens_at"], closes_at=read["closes_at"])
        phase.submission_quota = read["submission_quota"]
        session.flush()
    except SzbenchError as exc:
        session.rollback()
        return _phases_page(request, session, caller, card=(slug, typed.fail(exc)))
    return redirect("/admin/phases", f"Phase {slug} updated.")


@router.post("/phases/{slug}/close")
def close_phase(slug: str, session: SessionDep, caller: AdminOnly, _csrf: CsrfChecked) -> Response:
    """Close a phase for submissions now, whatever its dates."""
    phases.update_phase(session, phases.get_phase(session, slug), is_open=False)
    return redirect("/admin/phases", f"Phase {slug} is closed for submissions.")


@router.post("/phases/{slug}/reopen")
def reopen_phase(slug: str, session: SessionDep, caller: AdminOnly, _csrf: CsrfChecked) -> Response:
    """Open a closed phase again (its dates still apply)."""
    phases.update_phase(session, phases.get_phase(session, slug), is_open=True)
    return redirect("/admin/phases", f"Phase {slug} is open again (within its dates).")


@router.post("/phases/{slug}/disclosure")
def set_phase_disclosure(
    slug: str,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    disclosure: Annotated[str, Form(max_length=30)] = "",
) -> Response:
    """Override the datasets' disclosure for a phase's results (empty: remove the override)."""
    phase = phases.get_phase(session, slug)
    level = _level(disclosure)  # the form caps it at 30 characters, as _level's message does
    phases.update_phase(session, phase, disclosure=level)
    shown = level.value if level else "each dataset's own level"
    return redirect("/admin/publishing", f"Phase {slug} now discloses {shown}.")


@router.post("/phases/{slug}/datasets")
def set_phase_datasets(
    slug: str,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    dataset_version: Annotated[list[int] | None, Form(max_length=200)] = None,
) -> Response:
    """Name the dataset versions a phase's rules apply to (none ticked: none)."""
    phase = phases.get_phase(session, slug)
    named = _named_versions(session, dataset_version or [])
    phases.set_dataset_versions(session, phase, named)
    shown = ", ".join(f"{dv.dataset.slug} {dv.version}" for dv in named) or "no data"
    return redirect("/admin/phases", f"Phase {slug}'s rules now apply to {shown}.")


@router.post("/phases/{slug}/release", response_class=HTMLResponse)
def set_phase_release(
    request: Request,
    slug: str,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    release_rule: Annotated[str, Form()] = "",
    ladder_step: Annotated[str, Form()] = "",
) -> Response:
    """How a phase releases held-out scores while open (empty: the default)."""
    phase = phases.get_phase(session, slug)
    typed = _phase_form({"release_rule": release_rule, "ladder_step": ladder_step})
    read = _phase_values(typed, ("release_rule", "ladder_step"))
    if not typed.ok:
        return _phases_page(request, session, caller, card=(slug, typed))
    phases.update_phase(
        session, phase, release_rule=read["release_rule"], ladder_step=read["ladder_step"]
    )
    rules = rules_of(phase)
    return redirect("/admin/phases", f"Phase {slug} now releases scores: {rules.release.value}.")


@router.post("/phases/{slug}/failed-recordings")
def set_phase_failed_recordings(
    slug: str,
    session: SessionDep,
    caller: AdminOnly,
    _csrf: CsrfChecked,
    failed_recordings: Annotated[str, Form(max_length=30)] = "",
) -> Response:
    """Override the datasets' rule for failed recordings (empty: remove the override)."""
    phase = phases.get_phase(session, slug)
    rule: FailedRecordings | None = None
    if failed_recordings:
        try:
            rule = FailedRecordings(failed_recordings)
        except ValueError:
            raise BadRequest(
                f"failed_recordings: unknown rule {failed_recordings[:30]!r} "
                "(unranked or no_detections; empty: each dataset's own rule)"
            ) from None
    phases.update_phase(session, phase, failed_recordings=rule)
    shown = rule.value if rule else "each dataset's own rule"
    return redirect("/admin/phases", f"Phase {slug}: failed recordings now follow {shown}.")


# --- queue -----------------------------------------------------------------------------------


@router.get("/queue", response_class=HTMLResponse)
def queue_page(request: Request, session: SessionDep, caller: AdminOnly) -> Response:
    """Waiting, running and failed work, per worker (database, broker, Celery)."""
    context = {"title": "Queue", "queue": web_queries.queue_view(session)}
    return render(request, "admin/queue.html", caller, context)

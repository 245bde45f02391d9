"""Pages of a signed-in user: API tokens, submitting, my submissions, one evaluation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from szbench.algorithms import service as algorithms
from szbench.api.deps import SessionDep
from szbench.auth import cookies
from szbench.auth import service as auth
from szbench.auth.dependencies import Anyone, SignedIn, Submitter
from szbench.config import get_settings
from szbench.datasets import queries as datasets
from szbench.errors import Forbidden, SzbenchError, TooManyAttempts, Unauthorized
from szbench.evaluations import queries as evaluations
from szbench.evaluations import router as evaluations_api
from szbench.evaluations.schemas import EvaluationCreate
from szbench.models import AlgorithmVersion
from szbench.phases import service as phases
from szbench.quotas import service as quotas
from szbench.results import queries as results
from szbench.web import queries as web_queries
from szbench.web.common import CsrfChecked, redirect, render

router = APIRouter(include_in_schema=False)

# --- tokens ----------------------------------------------------------------------------------


@router.get("/tokens", response_class=HTMLResponse)
def tokens_page(request: Request, session: SessionDep, caller: SignedIn) -> Response:
    """The caller's API tokens; a form to create one."""
    return _tokens(request, session, caller)


def _tokens(
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    *,
    created: tuple[object, str] | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    assert caller.user is not None
    rows, _ = auth.list_tokens(session, caller.user, limit=200, offset=0)
    context = {
        "title": "API tokens",
        "tokens": rows,
        "scopes": auth.allowed_scopes(caller.user),
        "created": created,
        "error": error,
        "current_token_id": caller.token.id if caller.token else None,
    }
    return render(request, "tokens.html", caller, context, status_code=status_code)


@router.post("/tokens", response_class=HTMLResponse)
def create_token(
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    _csrf: CsrfChecked,
    name: Annotated[str, Form(max_length=200)] = "",
    scopes: Annotated[list[str] | None, Form()] = None,
    expires_in_days: Annotated[str, Form(max_length=10)] = "",
) -> Response:
    """Create a token and show its secret once (this response only)."""
    assert caller.user is not None
    try:
        days = int(expires_in_days) if expires_in_days.strip() else None
    except ValueError:
        return _tokens(
            request, session, caller, error="expires_in_days: give a whole number of days",
            status_code=400,
        )  # fmt: skip
    if days is not None and not 1 <= days <= 3650:
        return _tokens(
            request, session, caller, error="expires_in_days: between 1 and 3650", status_code=400
        )
    try:
        token, secret = auth.create_token(
            session,
            caller.user,
            name=name,
            scopes=list(scopes or []),
            expires_at=datetime.now(UTC) + timedelta(days=days) if days else None,
            within=caller.scopes,
        )
    except SzbenchError as exc:
        return _tokens(request, session, caller, error=exc.detail, status_code=exc.status_code)
    return _tokens(request, session, caller, created=(token, secret))


@router.post("/tokens/{token_id}/revoke")
def revoke_token(
    token_id: int, session: SessionDep, caller: SignedIn, _csrf: CsrfChecked
) -> Response:
    """Revoke one of the caller's tokens."""
    assert caller.user is not None
    token = auth.get_token(session, token_id, viewer=caller.user)
    auth.revoke_token(session, token)
    return redirect("/tokens", f"Token {token.prefix}… revoked.")


# --- password --------------------------------------------------------------------------------


def _password_page(
    request: Request, caller: SignedIn, *, error: str | None = None, status_code: int = 200
) -> Response:
    context = {
        "title": "Change your password",
        "error": error,
        "min_length": get_settings().password_min_length,
    }
    return render(request, "password.html", caller, context, status_code=status_code)


@router.get("/password", response_class=HTMLResponse)
def password_page(request: Request, caller: SignedIn) -> Response:
    """A form to change the caller's password."""
    return _password_page(request, caller)


@router.post("/password", response_class=HTMLResponse)
def change_password(
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    _csrf: CsrfChecked,
    current_password: Annotated[str, Form(max_length=1000)] = "",
    new_password: Annotated[str, Form(max_length=1000)] = "",
) -> Response:
    """Change the password; every session and token is revoked, this browser signed in anew."""
    assert caller.user is not None
    try:
        auth.change_password(
            session,
            caller.user,
            current_password=current_password,
            new_password=new_password,
            client=cookies.client_address(request),
        )
    except SzbenchError as exc:
        # The throttle's count is already committed; nothing else was changed.
        page = _password_page(request, caller, error=exc.detail, status_code=exc.status_code)
        if isinstance(exc, TooManyAttempts):
            page.headers["Retry-After"] = str(exc.retry_after_s)
        return page
    response = redirect("/tokens", "Password changed; every other session and token is revoked.")
    cookies.start_session(session, response, caller.user)
    return response


# --- submit ----------------------------------------------------------------------------------


@router.get("/submit", response_class=HTMLResponse)
def submit_page(request: Request, session: SessionDep, caller: Submitter) -> Response:
    """Upload an algorithm image (resumable, chunked) or give an image reference."""
    assert caller.user is not None
    mine, _ = algorithms.list_algorithms(
        session, viewer=caller.user, mine=True, limit=500, offset=0
    )
    # Only phases that take a submission now: a closed or not yet opened one would refuse it.
    open_phases = phases.accepting(session)
    settings = get_settings()
    quota = quotas.quotas_of(session, caller.user)
    context = {
        "title": "Submit an algorithm",
        "algorithms": mine,
        "phases": open_phases,
        "phase_usage": {phase.id: usage for phase, usage in quota.phases},
        "max_upload_bytes": settings.max_upload_bytes,
        "chunk_bytes": settings.web_upload_chunk_bytes,
        "quota": quota,
    }
    return render(request, "submit.html", caller, context)


# --- my submissions ---------------------------------------------------------------------------


@router.get("/submissions", response_class=HTMLResponse)
def submissions(request: Request, session: SessionDep, caller: SignedIn) -> Response:
    """The caller's algorithms, versions and evaluations with live progress."""
    assert caller.user is not None
    views, counts = web_queries.my_submissions(session, caller.user)
    all_datasets, _ = datasets.list_datasets(session, limit=200, offset=0)
    context = {
        "title": "My submissions",
        "views": views,
        "counts": counts,
        "datasets": [d for d in all_datasets if any(v.is_active for v in d.versions)],
    }
    template = (
        "submissions_list.html" if request.query_params.get("fragment") else "submissions.html"
    )
    return render(request, template, caller, context)


@router.get("/submissions/progress.json")
def submissions_progress(session: SessionDep, caller: SignedIn) -> JSONResponse:
    """Status of the caller's versions and progress of their evaluations (polled)."""
    assert caller.user is not None
    body = web_queries.progress_snapshot(session, caller.user)
    return JSONResponse(body, headers={"Cache-Control": "no-store"})


@router.post("/evaluations/{evaluation_id}/cancel")
def cancel(
    evaluation_id: int, session: SessionDep, caller: Submitter, _csrf: CsrfChecked
) -> Response:
    """Cancel a queued or running evaluation (owner or admin)."""
    evaluations_api.cancel_evaluation(evaluation_id, session, caller)
    return redirect("/submissions", f"Evaluation {evaluation_id} cancelled.")


@router.post("/evaluations/{evaluation_id}/rerun")
def rerun(
    evaluation_id: int, session: SessionDep, caller: Submitter, _csrf: CsrfChecked
) -> Response:
    """Run the same image again with fresh container runs."""
    new = evaluations_api.rerun_evaluation(evaluation_id, session, caller)
    return redirect("/submissions", f"Re-run queued as evaluation {new.id}.")


@router.post("/versions/{version_id}/evaluate")
def evaluate(
    version_id: int,
    session: SessionDep,
    caller: Submitter,
    _csrf: CsrfChecked,
    dataset: Annotated[str, Form(max_length=100)] = "",
) -> Response:
    """Evaluate one of the caller's versions on a dataset's newest active version."""
    body = EvaluationCreate(algorithm_version_id=version_id, dataset=dataset)
    created = evaluations_api.create_evaluation(body, session, caller)
    return redirect("/submissions", f"Evaluation {created.id} queued on {dataset}.")


@router.get("/evaluations/{evaluation_id}", response_class=HTMLResponse)
def evaluation_page(
    request: Request, evaluation_id: int, session: SessionDep, caller: Anyone
) -> Response:
    """One evaluation: progress, provenance and each recording's outcome and messages."""
    evaluation = evaluations.get_evaluation(session, evaluation_id, viewer=caller.user)
    detail = evaluations.to_detail(session, evaluation, viewer=caller.user)
    runs_hidden = None
    try:
        runs, total = results.recording_runs(session, evaluation, viewer=caller.user, limit=500)
    except (Forbidden, Unauthorized) as exc:
        runs, total, runs_hidden = [], 0, exc.detail[:1].upper() + exc.detail[1:]
    version = session.get(AlgorithmVersion, evaluation.algorithm_version_id)
    context = {
        "title": f"Evaluation {evaluation.id}",
        "evaluation": evaluation,
        "detail": detail,
        "runs": runs,
        "runs_total": total,
        "runs_hidden": runs_hidden,
        "version": version,
        "can_manage": caller.user is not None
        and (caller.is_admin or evaluation.algorithm_version.algorithm.owner_id == caller.user.id),
    }
    return render(request, "evaluation.html", caller, context)

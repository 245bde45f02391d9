"""Pages of a signed-in user: the account (profile, web sign-ins), API tokens, passwords
(change, reset by link, e-mail verification), submitting, my submissions, one evaluation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, BackgroundTasks, Form, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import Field, field_validator

from szbench.algorithms import service as algorithms
from szbench.api.deps import SessionDep
from szbench.api.pagination import IdPath
from szbench.auth import accounts, cookies, mail, policy
from szbench.auth import service as auth
from szbench.auth.dependencies import Anyone, SignedIn, Submitter
from szbench.config import get_settings
from szbench.datasets import queries as datasets
from szbench.errors import Forbidden, NotFound, SzbenchError, TooManyAttempts, Unauthorized
from szbench.evaluations import queries as evaluations
from szbench.evaluations import router as evaluations_api
from szbench.evaluations.schemas import EvaluationCreate
from szbench.leaderboards.service import failures_rule
from szbench.models import AlgorithmVersion, Evaluation, EvaluationKind, EvaluationStatus
from szbench.phases import service as phases
from szbench.quotas import service as quotas
from szbench.results import queries as results
from szbench.web import forms
from szbench.web import queries as web_queries
from szbench.web.common import Caller, CsrfChecked, redirect, render
from szbench.web.forms import FormModel, Submitted

router = APIRouter(include_in_schema=False)
# Bytes per PUT of the submit page's resumable upload: 8 MiB keeps a fast link busy between
# two requests and loses little after a dropped connection. A tuning knob, not a setting.
UPLOAD_CHUNK_BYTES = 8 * 1024**2

# --- tokens ----------------------------------------------------------------------------------


@router.get("/tokens", response_class=HTMLResponse)
def tokens_page(request: Request, session: SessionDep, caller: SignedIn) -> Response:
    """The caller's API tokens; a form to create one."""
    return _tokens(request, session, caller)


class TokenForm(FormModel):
    name: str = Field(default="", max_length=200)
    expires_in_days: int | None = Field(default=None, ge=1, le=3650)

    @field_validator("expires_in_days", mode="before")
    @classmethod
    def _blank_is_never(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value


def _tokens(
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    *,
    created: tuple[object, str] | None = None,
    typed: Submitted[TokenForm] | None = None,
) -> Response:
    assert caller.user is not None
    # Web sign-ins are listed on the account page, apart from these.
    rows = accounts.api_tokens(session, caller.user)[:200]
    context = {
        "title": "API tokens",
        "tokens": rows,
        # A worker token is minted by the operator's CLI only (no token can mint one).
        "scopes": [s for s in auth.allowed_scopes(caller.user) if s != auth.WORKER_SCOPE],
        "created": created,
        "current_token_id": caller.token.id if caller.token else None,
        **(typed.context() if typed else forms.empty()),
    }
    status = typed.status_code if typed else 200
    return render(request, "tokens.html", caller, context, status_code=status)


@router.post("/tokens", response_class=HTMLResponse)
def create_token(
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    _csrf: CsrfChecked,
    name: Annotated[str, Form()] = "",
    scopes: Annotated[list[str] | None, Form()] = None,
    expires_in_days: Annotated[str, Form()] = "",
) -> Response:
    """Create a token and show its secret once (this response only)."""
    assert caller.user is not None
    typed = forms.check(TokenForm, {"name": name, "expires_in_days": expires_in_days})
    typed.values["scopes"] = list(scopes or [])
    if typed.model is None:
        return _tokens(request, session, caller, typed=typed)
    days = typed.model.expires_in_days
    try:
        accounts.check_token_name(name)
        token, secret = auth.create_token(
            session,
            caller.user,
            name=name,
            scopes=list(scopes or []),
            expires_at=datetime.now(UTC) + timedelta(days=days) if days else None,
            within=caller.scopes,
        )
    except SzbenchError as exc:
        return _tokens(request, session, caller, typed=typed.fail(exc))
    return _tokens(request, session, caller, created=(token, secret))


@router.post("/tokens/{token_id}/revoke")
def revoke_token(
    token_id: IdPath, session: SessionDep, caller: SignedIn, _csrf: CsrfChecked
) -> Response:
    """Revoke one of the caller's tokens."""
    assert caller.user is not None
    token = auth.get_token(session, token_id, viewer=caller.user)
    auth.revoke_token(session, token)
    return redirect("/tokens", f"Token {token.prefix}… revoked.")


# --- password --------------------------------------------------------------------------------


class PasswordForm(FormModel):
    current_password: str = Field(default="", max_length=1000)
    new_password: str = Field(min_length=1, max_length=1000)


def _password_page(
    request: Request, caller: SignedIn, typed: Submitted[PasswordForm] | None = None
) -> Response:
    context = {
        "title": "Change your password",
        "min_length": get_settings().password_min_length,
        **(typed.context() if typed else forms.empty()),
    }
    status = typed.status_code if typed else 200
    return render(request, "password.html", caller, context, status_code=status)


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
    current_password: Annotated[str, Form()] = "",
    new_password: Annotated[str, Form()] = "",
) -> Response:
    """Change the password; every session and token is revoked, this browser signed in anew."""
    assert caller.user is not None
    values = {"current_password": current_password, "new_password": new_password}
    typed = forms.check(PasswordForm, values, keep_secret=values)
    if typed.model is None:
        return _password_page(request, caller, typed)
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
        page = _password_page(
            request, caller, typed.fail(exc, aliases={"password": "new_password"})
        )
        if isinstance(exc, TooManyAttempts):
            page.headers["Retry-After"] = str(exc.retry_after_s)
        return page
    response = redirect("/tokens", "Password changed; every other session and token is revoked.")
    cookies.start_session(session, response, caller.user)
    return response


# --- account: profile and web sign-ins --------------------------------------------------------


@router.get("/account", response_class=HTMLResponse)
def account_page(request: Request, session: SessionDep, caller: SignedIn) -> Response:
    """The caller's profile and web sign-ins (API tokens are on their own page)."""
    return _account(request, session, caller)


class AccountForm(FormModel):
    name: str = Field(default="", max_length=200)


def _account(
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    *,
    typed: Submitted[AccountForm] | None = None,
) -> Response:
    assert caller.user is not None
    context = {
        "title": "Your account",
        "account": caller.user,
        "sessions": accounts.web_sessions(session, caller.user),
        "current_token_id": caller.token.id if caller.token else None,
        "api_token_count": accounts.live_api_token_count(session, caller.user),
        "mail_enabled": mail.enabled(),
        "needs_verification": accounts.needs_verification(caller.user),
        **(typed.context() if typed else forms.empty({"name": caller.user.name})),
    }
    status = typed.status_code if typed else 200
    return render(request, "account.html", caller, context, status_code=status)


@router.post("/account", response_class=HTMLResponse)
def update_account(
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    _csrf: CsrfChecked,
    name: Annotated[str, Form()] = "",
) -> Response:
    """Change the caller's display name."""
    assert caller.user is not None
    typed = forms.check(AccountForm, {"name": name})
    if typed.model is None:
        return _account(request, session, caller, typed=typed)
    try:
        auth.update_user(session, caller.user, name=name.strip())
    except SzbenchError as exc:
        session.rollback()
        return _account(request, session, caller, typed=typed.fail(exc))
    return redirect("/account", "Your name is saved.")


@router.post("/account/sessions/{token_id}/revoke")
def revoke_session(
    token_id: IdPath, session: SessionDep, caller: SignedIn, _csrf: CsrfChecked
) -> Response:
    """Sign one of the caller's browsers out."""
    assert caller.user is not None
    token = auth.get_token(session, token_id, viewer=caller.user)
    if not accounts.is_web_session(token) or token.user_id != caller.user.id:
        raise NotFound(f"web sign-in {token_id} does not exist")
    auth.revoke_token(session, token)
    if caller.token is not None and token.id == caller.token.id:
        response = redirect("/", "You are signed out.")
        cookies.clear_session_cookie(response)
        return response
    return redirect("/account", "That browser is signed out.")


@router.post("/account/sessions/revoke-others")
def revoke_other_sessions(session: SessionDep, caller: SignedIn, _csrf: CsrfChecked) -> Response:
    """Sign out every other browser (API tokens stay)."""
    assert caller.user is not None
    count = accounts.sign_out_elsewhere(session, caller.user, keep=caller.token)
    return redirect("/account", f"{count} other web sign-in(s) ended.")


@router.post("/account/verify")
def send_verification(
    request: Request, session: SessionDep, caller: SignedIn, _csrf: CsrfChecked
) -> Response:
    """Send the e-mail verification link again."""
    assert caller.user is not None
    if not mail.enabled() or caller.user.email_verified_at is not None:
        return redirect("/account")
    sent = mail.send_message(accounts.verification_message(caller.user))
    message = (
        f"A verification link is on its way to {caller.user.email}."
        if sent
        else "The e-mail could not be sent; try again later."
    )
    return redirect("/account", message)


@router.get("/verify", response_class=HTMLResponse)
def verify(request: Request, session: SessionDep, caller: Caller, token: str = "") -> Response:
    """Follow an e-mailed verification link."""
    user = accounts.verify_email(session, token[:2001], client=cookies.client_address(request))
    message = f"Your address {user.email} is confirmed."
    return redirect("/account" if caller.user else "/login", message)


# --- password reset ----------------------------------------------------------------------------


def _reset_page(
    request: Request,
    caller: Caller,
    token: str,
    *,
    account: str,
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    context = {
        "title": "Choose a new password",
        "token": token,
        "account": account,
        "error": error,
        "min_length": get_settings().password_min_length,
    }
    return render(request, "password_reset.html", caller, context, status_code=status_code)


@router.get("/password/reset", response_class=HTMLResponse)
def reset_page(request: Request, session: SessionDep, caller: Caller, token: str = "") -> Response:
    """The form behind a reset link (the link is checked, not spent)."""
    user = accounts.check_reset_token(session, token[:2001])
    return _reset_page(request, caller, token, account=user.email)


@router.post("/password/reset", response_class=HTMLResponse)
def reset(
    request: Request,
    session: SessionDep,
    caller: Caller,
    _csrf: CsrfChecked,
    token: Annotated[str, Form(max_length=2000)] = "",
    new_password: Annotated[str, Form(max_length=1000)] = "",
) -> Response:
    """Set the new password; every session and token is revoked, this browser signed in."""
    user = accounts.check_reset_token(session, token)
    try:
        accounts.reset_password(session, token, new_password)
    except SzbenchError as exc:
        session.rollback()
        return _reset_page(
            request, caller, token, account=user.email, error=exc.detail,
            status_code=exc.status_code,
        )  # fmt: skip
    response = redirect(
        "/account", "Your new password is set; every other session and API token is revoked."
    )
    cookies.start_session(session, response, user)
    return response


class ForgotForm(FormModel):
    email: str = Field(min_length=1, max_length=320)


@router.get("/password/forgot", response_class=HTMLResponse)
def forgot_page(request: Request, caller: Caller) -> Response:
    """Ask for a reset link by e-mail (or learn whom to ask)."""
    context = {"title": "Forgot your password?", "mail_enabled": mail.enabled()}
    return render(request, "password_forgot.html", caller, context)


@router.post("/password/forgot", response_class=HTMLResponse)
def forgot(
    request: Request,
    session: SessionDep,
    caller: Caller,
    _csrf: CsrfChecked,
    background: BackgroundTasks,
    email: Annotated[str, Form()] = "",
) -> Response:
    """E-mail a reset link; the answer is the same whether or not the address has an account."""
    typed = forms.check(ForgotForm, {"email": email})
    if not typed.ok:
        context = {"title": "Forgot your password?", "mail_enabled": mail.enabled()}
        context.update(typed.context())
        return render(request, "password_forgot.html", caller, context, status_code=400)
    if mail.enabled():
        mail.send_after(background, accounts.request_reset_mail(session, email))
    context = {"title": "Forgot your password?", "mail_enabled": mail.enabled(), "sent": True}
    return render(request, "password_forgot.html", caller, context)


# --- submit ----------------------------------------------------------------------------------


@router.get("/submit", response_class=HTMLResponse)
def submit_page(
    request: Request, session: SessionDep, caller: Submitter, algorithm_id: int | None = None
) -> Response:
    """Upload an algorithm image (resumable, chunked) or give an image reference.

    ``algorithm_id`` preselects one of the caller's algorithms ("Upload a fixed version" on
    an evaluation page); any other id leaves "New algorithm" selected.
    """
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
        "selected_algorithm_id": algorithm_id if any(a.id == algorithm_id for a in mine) else None,
        "phases": open_phases,
        "phase_usage": {phase.id: usage for phase, usage in quota.phases},
        "max_upload_bytes": settings.max_upload_bytes,
        "chunk_bytes": UPLOAD_CHUNK_BYTES,
        "quota": quota,
    }
    return render(request, "submit.html", caller, context)


# --- my submissions ---------------------------------------------------------------------------


@router.get("/submissions", response_class=HTMLResponse)
def submissions(request: Request, session: SessionDep, caller: SignedIn) -> Response:
    """The caller's algorithms, versions and evaluations with live progress."""
    assert caller.user is not None
    mine = web_queries.my_submissions(session, caller.user)
    views = mine.views
    all_datasets, _ = datasets.list_datasets(session, limit=200, offset=0)
    context = {
        "title": "My submissions",
        "views": views,
        "counts": mine.counts,
        "shown": mine.shown,
        "rerun_refused": web_queries.rerun_refusals(
            session, caller.user, [e for v in views for vv in v.versions for e in vv.evaluations]
        ),
        # Versions whose phase takes no more held-out work from this user, and why.
        "closed": web_queries.closed_versions(views, caller.user),
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


#: Where a Cancel or Re-run button sends its user back to: the page the button was on (the
#: form's ``back`` field). My submissions is the default, as its list holds both buttons.
_BACK_TO_EVALUATION = "evaluation"


@router.post("/evaluations/{evaluation_id}/cancel")
def cancel(
    evaluation_id: int,
    session: SessionDep,
    caller: Submitter,
    _csrf: CsrfChecked,
    back: Annotated[str, Form(max_length=20)] = "",
) -> Response:
    """Cancel a queued or running evaluation (owner or admin)."""
    evaluations_api.cancel_evaluation(evaluation_id, session, caller)
    page = f"/evaluations/{evaluation_id}" if back == _BACK_TO_EVALUATION else "/submissions"
    return redirect(page, f"Evaluation {evaluation_id} cancelled.")


@router.post("/evaluations/{evaluation_id}/rerun")
def rerun(
    evaluation_id: int,
    session: SessionDep,
    caller: Submitter,
    _csrf: CsrfChecked,
    back: Annotated[str, Form(max_length=20)] = "",
) -> Response:
    """Run the same image again with fresh container runs."""
    new = evaluations_api.rerun_evaluation(evaluation_id, session, caller)
    # From an evaluation's page, on to the new evaluation's: that is the one to follow.
    page = f"/evaluations/{new.id}" if back == _BACK_TO_EVALUATION else "/submissions"
    return redirect(page, f"Re-run queued as evaluation {new.id}.")


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
        "can_manage": policy.can_manage_algorithm(
            caller.user, evaluation.algorithm_version.algorithm
        ),
        "rerun_refused": web_queries.rerun_refusal(session, caller.user, evaluation),
        "failures_rule": failures_rule(evaluation).value,
        "smoke_reason": web_queries.smoke_rejection(evaluation, version),
        "board_url": _board_url(evaluation, version),
        **web_queries.progress_clock_words(),
    }
    return render(request, "evaluation.html", caller, context)


def _board_url(evaluation: Evaluation, version: AlgorithmVersion | None) -> str | None:
    """The leaderboard a finished full evaluation is ranked on, as the way on from its page:
    the dataset version it ran on, every algorithm version shown when this one is not its
    algorithm's newest (the board shows each algorithm's newest by default)."""
    if (
        evaluation.kind != EvaluationKind.FULL
        or evaluation.status != EvaluationStatus.DONE
        or version is None
        or version.algorithm.withdrawn_at is not None
    ):
        return None
    dv = evaluation.dataset_version
    newest = max(v.id for v in version.algorithm.versions)
    shown = "" if version.id == newest else "&versions=all"
    return f"/leaderboards/{quote(dv.dataset.slug)}?version={quote(dv.version)}{shown}"

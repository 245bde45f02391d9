"""Public pages: home, sign in/out, sign up, leaderboards, metric definitions, algorithms."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, BackgroundTasks, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import Field

from szbench.algorithms import service as algorithms
from szbench.api.deps import SessionDep
from szbench.auth import accounts, cookies, mail
from szbench.auth.dependencies import Anyone
from szbench.config import get_settings
from szbench.datasets import queries as datasets
from szbench.disclosure import decision
from szbench.errors import (
    BadRequest,
    Forbidden,
    NotFound,
    SzbenchError,
    TooManyAttempts,
)
from szbench.evaluations import queries as evaluations
from szbench.evaluations.schemas import SubjectResultOut
from szbench.federation import queries as federation
from szbench.leaderboards import service as leaderboards
from szbench.leaderboards import snapshots
from szbench.leaderboards.statistics import CI_METRICS
from szbench.models import Evaluation
from szbench.results import queries as results
from szbench.web import charts, forms
from szbench.web import queries as web_queries
from szbench.web.common import Caller, CsrfChecked, redirect, render, safe_next
from szbench.web.forms import FormModel, Submitted

router = APIRouter(include_in_schema=False)

METRIC_LABELS = {
    "event_f1": "Event F1",
    "event_sensitivity": "Event sensitivity",
    "event_precision": "Event precision",
    "event_fp_rate": "Event FP/day",
    "sample_f1": "Sample F1",
    "sample_sensitivity": "Sample sensitivity",
    "sample_precision": "Sample precision",
    "sample_fp_rate": "Sample FP/day",
}


@router.get("/", response_class=HTMLResponse)
def home(request: Request, session: SessionDep, caller: Anyone) -> Response:
    """Home: every leaderboard."""
    boards = leaderboards.index(session, viewer=caller.user)
    all_datasets, _ = datasets.list_datasets(session, limit=200, offset=0)
    return render(
        request,
        "home.html",
        caller,
        # The page's own heading: the site's name follows every title already.
        {"boards": boards, "datasets": all_datasets, "title": "Seizure-detection leaderboards"},
    )


@router.get("/login", response_class=HTMLResponse)
def login_form(
    request: Request,
    caller: Caller,
    next: str | None = None,
    email: Annotated[str, Query(max_length=320)] = "",
) -> Response:
    """The sign-in form."""
    context = {"next": safe_next(next), "title": "Sign in", "email": email}
    return render(request, "login.html", caller, context)


@router.post("/login", response_class=HTMLResponse)
def login(
    request: Request,
    session: SessionDep,
    caller: Caller,
    _csrf: CsrfChecked,
    email: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
    next: Annotated[str, Form(max_length=2000)] = "/",
) -> Response:
    """Check the password and set the session cookie."""
    response = RedirectResponse(safe_next(next), status_code=303)
    typed = forms.check(LoginForm, {"email": email, "password": password}, keep_secret=["password"])
    if not typed.ok:
        context = {"next": safe_next(next), "title": "Sign in", **typed.context()}
        return render(request, "login.html", caller, context, status_code=400)
    try:
        cookies.login_with_password(
            session,
            response,
            email=email,
            password=password,
            client=cookies.client_address(request),
        )
    except SzbenchError as exc:
        context = {"next": safe_next(next), "error": exc.detail, "email": email, "title": "Sign in"}
        page = render(request, "login.html", caller, context, status_code=exc.status_code)
        if isinstance(exc, TooManyAttempts):
            page.headers["Retry-After"] = str(exc.retry_after_s)
        return page
    return response


class LoginForm(FormModel):
    # The lengths an account can have: a longer value is said wrong under its field before
    # any password is hashed.
    email: str = Field(max_length=320)
    password: str = Field(max_length=1000)


@router.post("/logout")
def logout(request: Request, session: SessionDep, _csrf: CsrfChecked) -> Response:
    """Revoke the session's token and clear the cookie."""
    response = redirect("/", "You are signed out.")
    cookies.logout(session, request, response)
    return response


def _check_signup_open() -> None:
    if not accounts.signup_open():
        raise Forbidden("sign-up is closed on this server; ask an admin for an account")


class SignupForm(FormModel):
    email: str = Field(min_length=1, max_length=320)
    password: str = Field(min_length=1, max_length=1000)
    name: str = Field(default="", max_length=200)


def _signup_page(
    request: Request, caller: Caller, typed: Submitted[SignupForm] | None = None
) -> Response:
    context = {
        "title": "Create an account",
        "min_length": get_settings().password_min_length,
        **(typed.context() if typed else forms.empty()),
    }
    if typed is not None:
        # The address has an account: point to signing in and to the reset instead.
        context["exists"] = typed.status_code == 409 and "email" in typed.errors
    status = typed.status_code if typed else 200
    return render(request, "signup.html", caller, context, status_code=status)


@router.get("/signup", response_class=HTMLResponse)
def signup_form(request: Request, caller: Caller) -> Response:
    """The sign-up form (when sign-up is open)."""
    _check_signup_open()
    return _signup_page(request, caller)


@router.post("/signup", response_class=HTMLResponse)
def signup(
    request: Request,
    session: SessionDep,
    caller: Caller,
    _csrf: CsrfChecked,
    background: BackgroundTasks,
    email: Annotated[str, Form()] = "",
    password: Annotated[str, Form()] = "",
    name: Annotated[str, Form()] = "",
) -> Response:
    """Create a researcher account and sign it in."""
    _check_signup_open()
    typed = forms.check(
        SignupForm, {"email": email, "password": password, "name": name},
        keep_secret=("password",),
    )  # fmt: skip
    if typed.model is None:
        return _signup_page(request, caller, typed)
    try:
        user, message = accounts.sign_up(
            session, email=email, password=password, name=name,
            client=cookies.client_address(request),
        )  # fmt: skip
        welcome = "Welcome! Your account is ready."
        if message is not None:
            welcome += f" Confirm your address with the link sent to {user.email}."
        response = redirect("/submissions", welcome)
        cookies.start_session(session, response, user)
    except SzbenchError as exc:
        session.rollback()
        page = _signup_page(request, caller, typed.fail(exc))
        if isinstance(exc, TooManyAttempts):
            page.headers["Retry-After"] = str(exc.retry_after_s)
        return page
    mail.send_after(background, message)
    return response


@router.get("/definitions", response_class=HTMLResponse)
def definitions(request: Request, caller: Caller) -> Response:
    """The SzCORE metrics and the ranking rule, defined."""
    return render(request, "definitions.html", caller, {"title": "Metric definitions"})


@router.get("/leaderboards/{slug}", response_class=HTMLResponse)
def leaderboard(
    request: Request,
    slug: str,
    session: SessionDep,
    caller: Anyone,
    version: Annotated[str | None, Query(max_length=100)] = None,
    sort: Annotated[str, Query(max_length=50)] = "rank",
    order: Literal["asc", "desc"] | None = None,
    versions: Literal["latest", "all"] = "latest",
    q: Annotated[str, Query(max_length=100)] = "",
    phase: Annotated[str, Query(max_length=100)] = "",
    unranked: bool = False,
) -> Response:
    """A dataset's ranked table with confidence intervals; sortable and filterable."""
    dataset = datasets.get_dataset(session, slug)
    if sort not in leaderboards.SORT_KEYS:
        raise BadRequest(
            f"This leaderboard cannot be sorted by {sort[:50]!r}. It sorts by rank, "
            "algorithm, subjects, recordings or a metric (event F1, false positives per "
            "day, ...); use the column headings."
        )
    query = leaderboards.BoardQuery(
        slug=slug,
        version=version or None,
        sort=sort,
        order=order,
        versions=versions,
        limit=None,
        unranked=unranked,
    )
    board = leaderboards.leaderboard(session, query, viewer=caller.user)
    phase_of = web_queries.phases_of_versions(
        session, [e.algorithm_version_id for e in board.items]
    )
    items = board.items
    needle = q.strip().lower()
    if needle:
        items = [
            e
            for e in items
            if needle in f"{e.algorithm} {e.title} {e.owner} {e.algorithm_version}".lower()
        ]
    if phase:
        items = [e for e in items if phase_of.get(e.algorithm_version_id) == phase]
    # One FP/day scale for the whole table (rates have no natural maximum).
    fp_values: list[float] = []
    for e in board.items:
        fp_ci = (e.ci or {}).get("event_fp_rate")
        for v in (e.event_fp_rate, fp_ci.high if fp_ci else None):
            if v is not None and not charts.is_missing(v):
                fp_values.append(v)
    fp_max = charts.nice_max(max(fp_values, default=1.0))
    rows = []
    for e in items:
        bars = {}
        for metric in CI_METRICS:
            interval = (e.ci or {}).get(metric)
            bars[metric] = charts.interval(
                getattr(e, metric),
                interval.low if interval else None,
                interval.high if interval else None,
                maximum=fp_max if metric == "event_fp_rate" else 1.0,
                label=f"{e.algorithm} {METRIC_LABELS[metric]}",
            )
        rows.append({"entry": e, "bars": bars, "phase": phase_of.get(e.algorithm_version_id)})
    # Why statistics are withheld is the disclosure module's sentence, carried by each entry.
    withheld = [e.statistics_withheld for e in items if e.statistics_withheld]
    context = {
        "title": f"Leaderboard: {dataset.title or dataset.slug}",
        "dataset": dataset,
        "board": board,
        "rows": rows,
        "labels": METRIC_LABELS,
        "ci_metrics": CI_METRICS,
        "filters": {
            "version": board.dataset_version,
            "versions": versions,
            "q": q,
            "phase": phase,
            "unranked": unranked,
        },
        "ranked_count": sum(1 for e in board.items if e.rank is not None),
        "phases": web_queries.all_phases(session),
        "fp_max": fp_max,
        "decimals": board.release.decimals,
        "withheld_reasons": list(dict.fromkeys(withheld)),
        "withheld_count": len(withheld),
        "snapshots": snapshots.list_snapshots(session, slug, board.dataset_version),
    }
    return render(request, "leaderboard.html", caller, context)


@router.get("/algorithms/{algorithm_id}", response_class=HTMLResponse)
def algorithm_page(
    request: Request,
    algorithm_id: int,
    session: SessionDep,
    caller: Anyone,
    evaluation: Annotated[int | None, Query(ge=1, le=2**62)] = None,
) -> Response:
    """An algorithm: its results per dataset, per-subject charts, rank stability, timelines."""
    algorithm = algorithms.get_algorithm(session, algorithm_id, viewer=caller.user)
    shown = web_queries.visible_results(session, algorithm, caller.user)
    selected = None
    if evaluation is not None:
        selected = evaluations.get_evaluation(session, evaluation, viewer=caller.user)
        if selected.algorithm_version.algorithm_id != algorithm.id:
            raise NotFound(f"evaluation {evaluation} is not a result of this algorithm")
    elif shown:
        selected = shown[-1]
    views = [(e, decision.view_of(caller.user, e)) for e in shown]
    context: dict[str, object] = {
        "title": algorithm.title or algorithm.name,
        "algorithm": algorithm,
        "results": shown,
        # Each result's figures as its view releases them, and how (rounded, ladder, exact).
        "released": results.released_metrics(session, views),
        "release": {e.id: view.release.value for e, view in views},
        "decimals": decision.RELEASED_DECIMALS,
        "selected": selected,
        "labels": METRIC_LABELS,
        # A count per finished evaluation: what every viewer of the result may know.
        "failed": leaderboards.failed_counts(session, [e.id for e in shown if e.status.finished]),
        "same_image": leaderboards.earlier_same_image(
            session, list(algorithm.versions), viewer=caller.user
        ),
        # Its results at clinical centres (federated evaluation), beside its own.
        "external": federation.visible_results(session, caller.user, algorithm_id=algorithm.id),
    }
    if selected is not None:
        context.update(_evaluation_charts(session, selected, caller))
    return render(request, "algorithm.html", caller, context)


def _evaluation_charts(
    session: SessionDep, evaluation: Evaluation, caller: Caller
) -> dict[str, object]:
    view = decision.view_of(caller.user, evaluation)
    subjects_hidden = None
    subjects: list[SubjectResultOut] = []
    if view.subjects:
        subjects, _ = results.subject_results(session, evaluation, viewer=caller.user, limit=None)
    else:
        subjects_hidden = view.withheld("Per-subject results") + "."
    labels = [s.subject for s in subjects]
    subject_charts = [
        charts.horizontal_bars(
            labels, [s.event_f1 for s in subjects], title="Event F1 per subject", maximum=1.0
        ),
        charts.horizontal_bars(
            labels,
            [s.event_sensitivity for s in subjects],
            title="Event sensitivity per subject",
            maximum=1.0,
        ),
        charts.horizontal_bars(
            labels,
            [s.event_fp_rate for s in subjects],
            title="False positives per day per subject",
            digits=1,
            css="bars fp",
        ),
    ]
    stability = None
    rank_chart = None
    statistics_status = None
    if evaluation.status.value == "done" and evaluation.official:
        dv = evaluation.dataset_version
        query = leaderboards.BoardQuery(
            slug=dv.dataset.slug, version=dv.version, versions="all", limit=None
        )
        board = leaderboards.leaderboard(session, query, viewer=caller.user)
        statistics_status = board.statistics.status
        entry = next((e for e in board.items if e.evaluation_id == evaluation.id), None)
        if entry is not None and entry.rank_stability is None and statistics_status == "ok":
            statistics_status = (
                f"not disclosed: phase {view.ladder_phase} releases scores on this data by the "
                "Ladder until it closes"
                if view.release.value == "ladder"
                else f"not disclosed: over {entry.subjects} subject(s) the resampled ranks "
                "would show per-subject results, which this held-out dataset does not disclose"
            )
        if entry is not None and entry.rank_stability is not None:
            stability = {"entry": entry, "rs": entry.rank_stability, "board_size": board.total}
            if entry.rank_stability.histogram:
                rank_chart = charts.rank_histogram(
                    entry.rank_stability.histogram,
                    title=f"Rank across subjects on {dv.dataset.slug} {dv.version}",
                )
    lines, hidden_reason = web_queries.timelines(session, evaluation, viewer=caller.user)
    timeline_charts = [
        (
            t,
            charts.timeline(
                t.duration_s, t.reference, t.detections, title=f"Timeline of {t.recording}"
            ),
        )
        for t in lines
    ]
    return {
        "subjects": subjects,
        "subjects_hidden": subjects_hidden,
        "subject_charts": subject_charts,
        "stability": stability,
        "rank_chart": rank_chart,
        "statistics_status": statistics_status,
        "timelines": timeline_charts,
        "timelines_hidden": hidden_reason,
        "public_sample": evaluation.dataset_version.dataset.kind.value == "public_sample",
    }

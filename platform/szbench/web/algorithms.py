"""Editing an algorithm in the web UI: its fields and links, withdrawing it from the
leaderboards and putting it back (owner or admin; the same service as ``PATCH
/api/v1/algorithms/{id}``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response

from szbench.algorithms import service as algorithms
from szbench.api.deps import SessionDep
from szbench.api.pagination import IdPath
from szbench.auth.dependencies import SignedIn
from szbench.errors import SzbenchError
from szbench.models import Algorithm, Visibility
from szbench.web.common import CsrfChecked, redirect, render

router = APIRouter(include_in_schema=False)


def _managed(session: SessionDep, caller: SignedIn, algorithm_id: int) -> Algorithm:
    assert caller.user is not None
    return algorithms.get_managed_algorithm(session, algorithm_id, user=caller.user)


def _form(
    request: Request,
    caller: SignedIn,
    algorithm: Algorithm,
    *,
    form: dict[str, str] | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    fields = ("title", "authors", "licence", "description", "code_url", "paper_url")
    values = form or {key: getattr(algorithm, key) for key in fields}
    values.setdefault("visibility", algorithm.visibility.value)
    context = {
        "title": f"Edit {algorithm.name}",
        "algorithm": algorithm,
        "form": values,
        "error": error,
    }
    return render(request, "algorithm_edit.html", caller, context, status_code=status_code)


@router.get("/algorithms/{algorithm_id}/edit", response_class=HTMLResponse)
def edit_page(
    request: Request, algorithm_id: IdPath, session: SessionDep, caller: SignedIn
) -> Response:
    """A form to edit an algorithm's fields and links, and to withdraw it."""
    return _form(request, caller, _managed(session, caller, algorithm_id))


@router.post("/algorithms/{algorithm_id}/edit", response_class=HTMLResponse)
def edit(
    request: Request,
    algorithm_id: IdPath,
    session: SessionDep,
    caller: SignedIn,
    _csrf: CsrfChecked,
    title: Annotated[str, Form(max_length=200)] = "",
    authors: Annotated[str, Form(max_length=500)] = "",
    licence: Annotated[str, Form(max_length=100)] = "",
    description: Annotated[str, Form(max_length=20000)] = "",
    code_url: Annotated[str, Form(max_length=500)] = "",
    paper_url: Annotated[str, Form(max_length=500)] = "",
    visibility: Annotated[str, Form(max_length=20)] = "",
) -> Response:
    """Save the algorithm's fields."""
    algorithm = _managed(session, caller, algorithm_id)
    form = {
        "title": title,
        "authors": authors,
        "licence": licence,
        "description": description,
        "code_url": code_url,
        "paper_url": paper_url,
        "visibility": visibility,
    }
    try:
        shown = Visibility(visibility) if visibility else None
    except ValueError:
        return _form(
            request, caller, algorithm, form=form, status_code=400,
            error=f"visibility: unknown value {visibility!r} (public or private)",
        )  # fmt: skip
    try:
        algorithms.update_algorithm(
            session,
            algorithm,
            title=title.strip() or algorithm.name,
            authors=authors.strip(),
            licence=licence.strip(),
            description=description,
            code_url=code_url,
            paper_url=paper_url,
            visibility=shown,
        )
    except SzbenchError as exc:
        session.rollback()
        return _form(
            request, caller, algorithm, form=form, error=exc.detail, status_code=exc.status_code
        )
    return redirect(f"/algorithms/{algorithm.id}", f"{algorithm.name} saved.")


@router.post("/algorithms/{algorithm_id}/withdraw")
def withdraw(
    algorithm_id: IdPath, session: SessionDep, caller: SignedIn, _csrf: CsrfChecked
) -> Response:
    """Take the algorithm off every leaderboard (its results stay on its page)."""
    algorithm = _managed(session, caller, algorithm_id)
    algorithms.update_algorithm(session, algorithm, withdrawn=True)
    return redirect(
        f"/algorithms/{algorithm.id}", f"{algorithm.name} is withdrawn from the leaderboards."
    )


@router.post("/algorithms/{algorithm_id}/restore")
def restore(
    algorithm_id: IdPath, session: SessionDep, caller: SignedIn, _csrf: CsrfChecked
) -> Response:
    """Put a withdrawn algorithm back on the leaderboards."""
    algorithm = _managed(session, caller, algorithm_id)
    algorithms.update_algorithm(session, algorithm, withdrawn=False)
    return redirect(f"/algorithms/{algorithm.id}", f"{algorithm.name} is back on the leaderboards.")

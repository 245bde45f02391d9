"""Editing an algorithm in the web UI: its fields and links, withdrawing it from the
leaderboards and putting it back (owner or admin; the same service as ``PATCH
/api/v1/algorithms/{id}``)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import Field

from szbench.algorithms import service as algorithms
from szbench.api.deps import SessionDep
from szbench.api.pagination import IdPath
from szbench.auth.dependencies import SignedIn
from szbench.errors import SzbenchError
from szbench.models import Algorithm, Visibility
from szbench.web import forms
from szbench.web.common import CsrfChecked, redirect, render
from szbench.web.forms import FormModel, Submitted

router = APIRouter(include_in_schema=False)


def _managed(session: SessionDep, caller: SignedIn, algorithm_id: int) -> Algorithm:
    assert caller.user is not None
    return algorithms.get_editable_algorithm(session, algorithm_id, user=caller.user)


class AlgorithmForm(FormModel):
    title: str = Field(default="", max_length=200)
    authors: str = Field(default="", max_length=500)
    licence: str = Field(default="", max_length=100)
    description: str = Field(default="", max_length=20000)
    code_url: str = Field(default="", max_length=500)
    paper_url: str = Field(default="", max_length=500)
    visibility: Literal["", "public", "private"] = ""
    external_evaluation: bool = False


_FIELDS = ("title", "authors", "licence", "description", "code_url", "paper_url")


def _form(
    request: Request,
    caller: SignedIn,
    algorithm: Algorithm,
    typed: Submitted[AlgorithmForm] | None = None,
) -> Response:
    if typed is None:
        shown = forms.empty({key: getattr(algorithm, key) for key in _FIELDS})
        shown["form"]["visibility"] = algorithm.visibility.value
        shown["form"]["external_evaluation"] = algorithm.external_evaluation
    else:
        shown = typed.context()
    context = {"title": f"Edit {algorithm.name}", "algorithm": algorithm, **shown}
    status = typed.status_code if typed else 200
    return render(request, "algorithm_edit.html", caller, context, status_code=status)


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
    title: Annotated[str, Form()] = "",
    authors: Annotated[str, Form()] = "",
    licence: Annotated[str, Form()] = "",
    description: Annotated[str, Form()] = "",
    code_url: Annotated[str, Form()] = "",
    paper_url: Annotated[str, Form()] = "",
    visibility: Annotated[str, Form()] = "",
    external_evaluation: Annotated[str, Form(max_length=10)] = "",
) -> Response:
    """Save the algorithm's fields."""
    algorithm = _managed(session, caller, algorithm_id)
    typed = forms.check(
        AlgorithmForm,
        {
            "title": title,
            "authors": authors,
            "licence": licence,
            "description": description,
            "code_url": code_url,
            "paper_url": paper_url,
            "visibility": visibility,
            "external_evaluation": bool(external_evaluation),
        },
    )
    if typed.model is None:
        return _form(request, caller, algorithm, typed)
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
            visibility=Visibility(visibility) if visibility else None,
            external_evaluation=bool(external_evaluation),
        )
    except SzbenchError as exc:
        session.rollback()
        return _form(request, caller, algorithm, typed.fail(exc))
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

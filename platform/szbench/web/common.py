"""What every page shares: templates, the CSRF token, the caller, HTML errors.

CSRF (see docs/web-ui.md): the session cookie is ``SameSite=Lax`` (browsers do not send it
on cross-site POSTs) and state changes whose ``Origin`` (or ``Referer``) is ``null`` or
another site are refused app-wide (:mod:`szbench.auth.csrf`). On top of that, every HTML
form carries a token that must equal the ``szbench_csrf`` cookie (double submit): a random
value set on the first page view, ``HttpOnly``, ``SameSite=Strict``. It protects the
sign-in and sign-up forms too, which have no session yet. The page scripts call the JSON API
with ``fetch`` (JSON bodies and ``PUT``s, which a cross-site form cannot send), relying on
SameSite and the Origin check.
"""

from __future__ import annotations

import hmac
import inspect
import logging
import re
import secrets
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, Form, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from markupsafe import Markup
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from szbench import __version__
from szbench.api.deps import get_session
from szbench.api.errors import http_error_headers
from szbench.auth import accounts
from szbench.auth.cookies import read_session_cookie
from szbench.auth.dependencies import Principal, browser_principal, get_principal
from szbench.config import get_settings
from szbench.errors import Forbidden, SzbenchError
from szbench.evaluations.queries import shown_state
from szbench.web import charts, forms

HERE = Path(__file__).resolve().parent
CSRF_COOKIE = "szbench_csrf"
CSRF_FIELD = "csrf_token"

templates = Jinja2Templates(directory=str(HERE / "templates"))

_BIDI_CONTROLS = re.compile("[\u202a-\u202e\u2066-\u2069]")
_ISOLATE_OPENERS = "\u2066\u2067\u2068"
_FSI, _PDI = "\u2068", "\u2069"


def isolate_bidi(value: Any) -> Any:
    """Every value a template prints, as the template engine's ``finalize``: a string that
    carries bidirectional controls (U+202E, right-to-left override, reverses the text after
    it up to the end of the line) is put in a first-strong isolate (U+2068 ... U+2069), the
    plain-text form of ``<bdi>``, which ends every override or embedding opened inside it;
    a stray closing U+2069 that would close an isolate outside it is dropped. It applies in
    text and in attribute values alike, so no place that shows user text is missed.

    >>> isolate_bidi("evil\u202etxt.exe") == "\u2068evil\u202etxt.exe\u2069"
    True
    >>> isolate_bidi("x\u2069\u202ey")
    '\u2068x\u202ey\u2069'
    """
    if not isinstance(value, str) or isinstance(value, Markup):
        return value
    if not _BIDI_CONTROLS.search(value):
        return value
    depth, kept = 0, []
    for char in value:
        if char in _ISOLATE_OPENERS:
            depth += 1
        elif char == _PDI:
            if depth == 0:
                continue
            depth -= 1
        kept.append(char)
    return _FSI + "".join(kept) + _PDI * (depth + 1)


templates.env.finalize = isolate_bidi
templates.env.globals.update(fmt=charts.fmt, app_version=__version__, csrf_field=CSRF_FIELD)


def _pct(value: float | None) -> str:
    return "n/a" if charts.is_missing(value) else f"{100 * value:.1f}%"  # type: ignore[operator]


def _duration(seconds: float) -> str:
    """``42 s``, ``17 min``, ``3 h 05 min``: rounded, as an estimate should be."""
    total = round(seconds)
    if total < 90:
        return f"{total} s"
    minutes = round(total / 60)
    if minutes < 90:
        return f"{minutes} min"
    return f"{minutes // 60} h {minutes % 60:02d} min"


templates.env.filters["pct"] = _pct
templates.env.globals["shown_state"] = shown_state
templates.env.globals["duration"] = _duration
templates.env.filters["num"] = charts.fmt


# Pages load nothing but their own static files: no inline script, no other origin, no
# framing. A violation shows up as a console error, which the browser test fails on.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
        "object-src 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


def csrf_token(request: Request) -> str:
    """This browser's CSRF token (a new one when it has none yet; set by :func:`render`)."""
    existing = request.cookies.get(CSRF_COOKIE)
    if existing and 20 <= len(existing) <= 100:
        return existing
    token = getattr(request.state, "new_csrf", None)
    if token is None:
        token = secrets.token_urlsafe(32)
        request.state.new_csrf = token
    return str(token)


def _set_csrf_cookie(request: Request, response: Response) -> None:
    token = getattr(request.state, "new_csrf", None)
    if token is not None and request.cookies.get(CSRF_COOKIE) != token:
        response.set_cookie(
            CSRF_COOKIE,
            token,
            httponly=True,
            samesite="strict",
            secure=get_settings().session_cookie_secure,
            path="/",
        )


def check_csrf(request: Request, csrf_token: Annotated[str, Form(max_length=200)] = "") -> None:
    """Dependency of every form POST: the form's token must equal the cookie's."""
    cookie = request.cookies.get(CSRF_COOKIE) or ""
    if not cookie or not csrf_token or not hmac.compare_digest(cookie, csrf_token):
        raise Forbidden(
            "the form's security token is missing or out of date; reload the page and try again"
        )


CsrfChecked = Annotated[None, Depends(check_csrf)]
Caller = Annotated[Principal, Depends(get_principal)]


def render(
    request: Request,
    template: str,
    caller: Principal | None,
    context: dict[str, Any] | None = None,
    *,
    status_code: int = 200,
) -> HTMLResponse:
    """Render ``template`` with the caller, CSRF token, flash message and settings."""
    flash = request.query_params.get("msg")
    ctx = {
        "request": request,
        "user": caller.user if caller else None,
        "is_admin": bool(caller and caller.is_admin),
        "csrf": csrf_token(request),
        "flash": flash[:300] if flash else None,
        "signup_open": accounts.signup_open(),
        **(context or {}),
    }
    response = templates.TemplateResponse(request, template, ctx, status_code=status_code)
    _set_csrf_cookie(request, response)
    response.headers["Cache-Control"] = "no-store"
    response.headers.update(SECURITY_HEADERS)
    return response


def redirect(path: str, message: str | None = None) -> RedirectResponse:
    """A 303 after a form POST, with an optional message shown on the next page."""
    if message:
        path += ("&" if "?" in path else "?") + "msg=" + quote(message)
    return RedirectResponse(path, status_code=303)


def safe_next(target: str | None) -> str:
    """A local path to go to after sign-in (never another site)."""
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


# --- errors as pages ----------------------------------------------------------------------

_NON_PAGE_PREFIXES = ("/api/", "/healthz", "/readyz", "/metrics", "/static/")


def is_page_request(request: Request) -> bool:
    path = request.url.path
    return not path.startswith(_NON_PAGE_PREFIXES) and not path.endswith(".json")


async def _resolve_nav(request: Request) -> None:
    """Who the session cookie names, for the navigation of a page that no route took
    (Starlette's 404 runs before any dependency, so a signed-in user's "no page here" would
    offer "Sign in"). Through the app's own session dependency; never a refusal."""
    if getattr(request.state, "nav", None) is not None or not read_session_cookie(request):
        return
    provider = request.app.dependency_overrides.get(get_session, get_session)
    units: Any = provider()
    try:
        if inspect.isasyncgen(units):
            session: Any = await units.__anext__()
            try:
                await run_in_threadpool(browser_principal, request, session)
            finally:
                await units.aclose()
        else:
            session = next(units)  # a test's plain generator
            try:
                browser_principal(request, session)
            finally:
                units.close()
    except Exception:
        logging.getLogger(__name__).warning("no navigation for an error page", exc_info=True)


def install_error_pages(app: Any) -> None:
    """Render errors on page routes as HTML (sign-in redirect for 401); API errors unchanged."""
    handlers = app.exception_handlers
    api_error = handlers[SzbenchError]
    api_http = handlers[StarletteHTTPException]
    api_validation = handlers[RequestValidationError]

    async def page_error(request: Request, exc: Exception) -> Any:
        if not is_page_request(request):
            return await api_error(request, exc)
        assert isinstance(exc, SzbenchError)
        if exc.status_code == 401:
            return redirect(f"/login?next={quote(request.url.path)}", "Please sign in first.")
        return _error_page(request, exc.status_code, exc.name, exc.detail)

    async def page_http_error(request: Request, exc: Exception) -> Any:
        if not is_page_request(request):
            return await api_http(request, exc)
        assert isinstance(exc, StarletteHTTPException)
        if exc.status_code == 404:
            await _resolve_nav(request)
        detail = "There is no page here." if exc.status_code == 404 else str(exc.detail)
        page = _error_page(request, exc.status_code, "Error", detail)
        page.headers.update(http_error_headers(request, exc) or {})
        return page

    async def page_validation_error(request: Request, exc: Exception) -> Any:
        if not is_page_request(request):
            return await api_validation(request, exc)
        assert isinstance(exc, RequestValidationError)
        return _error_page(request, 400, "BadRequest", validation_sentence(list(exc.errors())))

    app.add_exception_handler(SzbenchError, page_error)
    app.add_exception_handler(StarletteHTTPException, page_http_error)
    app.add_exception_handler(RequestValidationError, page_validation_error)


_PLACES = {"query": "The link", "path": "The address", "body": "The form"}


def validation_sentence(errors: list[dict[str, Any]]) -> str:
    """What was wrong with a page request, as a sentence for a person (the API's detail,
    ``query.order: Input should be 'asc' or 'desc'``, is for programs).

    For ``?order=up``: "The link gives order as 'up', which this page cannot use: it should
    be 'asc' or 'desc'. Go back, or remove order from the address."
    """
    if not errors:
        return "This page cannot use the values in its address."
    error = errors[0]
    loc = [str(part) for part in error.get("loc", ())]
    place = _PLACES.get(loc[0], "The request") if loc else "The request"
    field = ".".join(loc[1:]) or "a value"
    value = error.get("input")
    given = f" as {str(value)[:60]!r}" if isinstance(value, str | int | float) else ""
    # The forms' plain words ("at most 100 characters"), not the validator's.
    reason = forms.message(error).rstrip(".")
    because = f": {reason[:1].lower() + reason[1:]}" if reason else ""
    more = f" ({len(errors) - 1} more value(s) are wrong too.)" if len(errors) > 1 else ""
    fix = f" Go back, or remove {field} from the address." if loc and loc[0] == "query" else ""
    if error.get("type") == "missing":
        return f"{place} lacks {field}, which this page needs.{more}"
    return f"{place} gives {field}{given}, which this page cannot use{because}.{fix}{more}"


_TITLES = {
    400: "This request cannot be used",
    403: "Not allowed",
    404: "Not found",
    405: "Not found",
    409: "Already done or taken",
    413: "Too large",
    429: "Please wait",
}


def _sentence(text: str) -> str:
    """A service's detail as a sentence on a page: capital first, full stop last."""
    text = text.strip()
    if not text:
        return text
    text = text[:1].upper() + text[1:]
    return text if text.endswith((".", "!", "?", ")")) else text + "."


def _back(request: Request) -> str | None:
    """The page the visitor came from, when it is one of this site's (its path only)."""
    referer = request.headers.get("referer", "")
    origin = f"{request.url.scheme}://{request.url.netloc}"
    if referer.startswith(origin + "/"):
        path = referer[len(origin) :]
        if path.split("?")[0] != request.url.path:
            return path
    return None


def next_steps(request: Request, status_code: int, signed_in: bool) -> list[tuple[str, str]]:
    """Where an error page sends its visitor on (address, words), most useful first."""
    steps: list[tuple[str, str]] = []
    back = _back(request)
    if back is not None:
        steps.append((back, "Go back to the page you came from"))
    here = quote(request.url.path)
    if status_code == 403 and not signed_in:
        steps.append((f"/login?next={here}", "Sign in"))
    elif status_code == 403:
        steps.append((f"/login?next={here}", "Sign in with another account"))
    if status_code == 429 and signed_in:
        steps.append(("/submissions", "See your submissions and what they used"))
    if status_code in (404, 405) and signed_in:
        steps.append(("/submissions", "My submissions"))
    if status_code >= 500:
        steps.append((request.url.path, "Try this page again in a moment"))
    steps.append(("/", "The leaderboards"))
    steps.append(("/how-to-submit", "How to submit an algorithm"))
    return steps


def _error_page(request: Request, status_code: int, name: str, detail: str) -> HTMLResponse:
    # ``name`` (the error's class) is for the API's envelope and the logs; the page says in
    # words what happened and where to go from here.
    del name
    nav = getattr(request.state, "nav", None)
    signed_in = getattr(request.state, "user_id", None) is not None
    context = {
        "signed_in": signed_in,
        # The signed-in navigation, from the values the caller's check left (see NavCaller).
        "user": nav,
        "is_admin": bool(nav and nav.is_admin),
        "title": _TITLES.get(status_code, "Something went wrong"),
        "status": status_code,
        "detail": _sentence(detail),
        "steps": next_steps(request, status_code, signed_in),
    }
    # The caller is not resolved again here (that could fail the same way); the navigation
    # knows from the request state who is signed in.
    return render(request, "error.html", None, context, status_code=status_code)

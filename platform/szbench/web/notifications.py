"""The account's notifications page: what to be told and how (e-mail, a signed webhook), the
webhook's secret, a test send and the delivery log (docs/web-ui.md)."""

from __future__ import annotations

from typing import Annotated, Any

import anyio
from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import Field

from szbench.api.deps import SessionDep
from szbench.auth.dependencies import SignedIn, SignedInOutsideSession
from szbench.db import session_scope
from szbench.errors import SzbenchError
from szbench.models import DeliveryStatus, NotificationChannel, NotificationKind
from szbench.notifications import delivery, kinds, ping, preferences
from szbench.notifications.router import delivery_out
from szbench.notifications.webhook import SIGNATURE_HEADER, TIMESTAMP_HEADER
from szbench.web import forms
from szbench.web.common import CsrfChecked, redirect, render
from szbench.web.forms import FormModel

router = APIRouter(include_in_schema=False)

PAGE = "/account/notifications"
# Errors whose detail starts with one of these names are shown next to that field.
_FIELDS = ("webhook_url", "secret")


class SettingsForm(FormModel):
    all_phases: str = Field(default="", max_length=10)
    webhook_url: str = Field(default="", max_length=2000)


class SecretForm(FormModel):
    secret: str = Field(default="", max_length=300)


def _field_errors(exc: SzbenchError) -> dict[str, str]:
    return forms.service_errors(exc, _FIELDS)


def _channels() -> list[NotificationChannel]:
    """The channels the page offers: e-mail only where this server sends it."""
    mail = [NotificationChannel.MAIL] if preferences.mail_enabled() else []
    return [*mail, NotificationChannel.WEBHOOK]


def _page(
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    *,
    errors: dict[str, str] | None = None,
    typed: dict[str, Any] | None = None,
    new_secret: str | None = None,
    status_code: int = 200,
) -> Response:
    assert caller.user is not None
    prefs = preferences.preferences_of(session, caller.user)
    rows, total = delivery.deliveries(session, caller.user, limit=50)
    switches = preferences.switches(prefs)
    if typed is not None:
        # Show what was sent, not what is stored: nothing was saved.
        switches = typed["switches"]
    context = {
        "title": "Notifications",
        "kinds": kinds.KIND_LABELS,
        "channels": _channels(),
        "switches": switches,
        "all_phases": typed["all_phases"] if typed is not None else prefs.all_phases,
        "webhook_url": typed["webhook_url"] if typed is not None else prefs.webhook_url,
        "secret_set": bool(prefs.webhook_secret),
        "new_secret": new_secret,
        "mail_enabled": preferences.mail_enabled(),
        "mail_to": preferences.mail_address(caller.user),
        "deliveries": [delivery_out(d) for d in rows],
        "deliveries_total": total,
        "errors": errors or {},
        "signature_header": SIGNATURE_HEADER,
        "timestamp_header": TIMESTAMP_HEADER,
    }
    return render(request, "notifications.html", caller, context, status_code=status_code)


@router.get(PAGE, response_class=HTMLResponse)
def notifications_page(request: Request, session: SessionDep, caller: SignedIn) -> Response:
    """What the caller is told and how, their webhook, and the delivery log."""
    return _page(request, session, caller)


@router.post(PAGE, response_class=HTMLResponse)
def save_notifications(
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    _csrf: CsrfChecked,
    switch: Annotated[list[str] | None, Form()] = None,
    all_phases: Annotated[str, Form()] = "",
    webhook_url: Annotated[str, Form()] = "",
) -> Response:
    """Save the switches and the webhook URL (a first URL gets a secret, shown once)."""
    assert caller.user is not None
    on = set(switch or [])
    shown = _channels()
    events: dict[NotificationKind, dict[NotificationChannel, bool | None]] = {
        kind: {channel: _switch_name(kind, channel) in on for channel in shown}
        for kind in preferences.SWITCHABLE
    }
    submitted = forms.check(SettingsForm, {"all_phases": all_phases, "webhook_url": webhook_url})
    try:
        if submitted.model is None:
            secret = None
        else:
            secret = preferences.update_preferences(
                session,
                caller.user,
                events=events,
                all_phases=bool(all_phases),
                webhook_url=webhook_url,
            )
    except SzbenchError as exc:
        submitted.fail(exc)
    if submitted.errors:
        session.rollback()
        stored = preferences.switches(preferences.preferences_of(session, caller.user))
        typed = {
            # The channels not on the page keep their stored value.
            "switches": {kind: {**stored[kind], **events[kind]} for kind in preferences.SWITCHABLE},
            "all_phases": bool(all_phases),
            "webhook_url": webhook_url,
        }
        return _page(
            request, session, caller, errors=submitted.errors, typed=typed,
            status_code=submitted.status_code,
        )  # fmt: skip
    if secret is not None:
        return _page(request, session, caller, new_secret=secret)
    return redirect(PAGE, "Your notification settings are saved.")


def _switch_name(kind: NotificationKind, channel: NotificationChannel) -> str:
    return f"{channel.value}:{kind.value}"


@router.post(f"{PAGE}/secret", response_class=HTMLResponse)
def replace_secret(
    request: Request,
    session: SessionDep,
    caller: SignedIn,
    _csrf: CsrfChecked,
    secret: Annotated[str, Form()] = "",
) -> Response:
    """Replace the webhook's signing secret (the one typed, or a random one); shown once."""
    assert caller.user is not None
    typed = forms.check(SecretForm, {"secret": secret})
    if typed.model is None:
        return _page(request, session, caller, errors=typed.errors, status_code=400)
    try:
        new = preferences.set_secret(session, caller.user, secret or None)
    except SzbenchError as exc:
        return _page(
            request, session, caller, errors=_field_errors(exc), status_code=exc.status_code
        )
    return _page(request, session, caller, new_secret=new)


@router.post(f"{PAGE}/test", response_class=HTMLResponse)
async def send_test(
    request: Request, caller: SignedInOutsideSession, _csrf: CsrfChecked
) -> Response:
    """Send a test notification on each channel; say how each went (or that it is still
    going: the delivery log shows the end)."""
    assert caller.user is not None
    user_id = caller.user.id
    try:
        ids = await anyio.to_thread.run_sync(ping.start, user_id)
    except SzbenchError as exc:
        return await anyio.to_thread.run_sync(_refused, request, caller, exc)
    await ping.wait(ping.send_soon(ids))
    message = await anyio.to_thread.run_sync(_test_message, user_id, ids)
    return redirect(PAGE, message)


def _refused(request: Request, caller: SignedIn, exc: SzbenchError) -> Response:
    with session_scope() as session:
        return _page(
            request, session, caller, errors=_field_errors(exc), status_code=exc.status_code
        )


def _test_message(user_id: int, delivery_ids: list[int]) -> str:
    parts = []
    with session_scope() as session:
        for d in sorted(
            ping.outcomes(session, user_id, delivery_ids), key=lambda d: d.channel.value
        ):
            name = "e-mail" if d.channel == NotificationChannel.MAIL else "webhook"
            code = f" (HTTP {d.last_status_code})" if d.last_status_code else ""
            if d.delivered_at:
                outcome = "delivered"
            elif d.status == DeliveryStatus.PENDING:
                outcome = "still being sent (the delivery log below shows how it ends)"
            else:
                outcome = f"failed: {d.last_error}"
            parts.append(f"{name} {outcome}{code}")
    return "Test sent: " + "; ".join(parts) + "."

"""``/api/v1/users/me/notifications``: the caller's notification settings, webhook secret,
test sends and delivery log (docs/api.md, "Notifications")."""

from __future__ import annotations

import anyio
from fastapi import APIRouter

from szbench.api.deps import SessionDep
from szbench.api.errors import ERROR_RESPONSES
from szbench.api.pagination import Page, PageDep
from szbench.auth.dependencies import SignedIn, SignedInOutsideSession
from szbench.db import session_scope
from szbench.models import (
    NotificationChannel,
    NotificationDelivery,
    NotificationPreferences,
    User,
)
from szbench.notifications import delivery, ping, preferences
from szbench.notifications.schemas import (
    DeliveryOut,
    PreferencesChanged,
    PreferencesOut,
    PreferencesUpdate,
    SecretIn,
    SecretOut,
)

router = APIRouter(
    prefix="/users/me/notifications", tags=["notifications"], responses=ERROR_RESPONSES
)


def preferences_out(prefs: NotificationPreferences, user: User) -> PreferencesOut:
    return PreferencesOut(
        events=preferences.switches(prefs),
        all_phases=prefs.all_phases,
        webhook_url=prefs.webhook_url,
        webhook_secret_set=bool(prefs.webhook_secret),
        mail_enabled=preferences.mail_enabled(),
        mail_to=preferences.mail_address(user),
    )


def delivery_out(row: NotificationDelivery) -> DeliveryOut:
    payload = row.payload or {}
    return DeliveryOut(
        id=row.id,
        event_id=row.event_id,
        event=str(payload.get("event", "")),
        channel=row.channel,
        status=row.status,
        attempts=row.attempts,
        target=row.target,
        last_status_code=row.last_status_code,
        last_error=row.last_error,
        response_snippet=row.response_snippet,
        created_at=row.created_at,
        last_attempt_at=row.last_attempt_at,
        next_attempt_at=row.next_attempt_at,
        delivered_at=row.delivered_at,
        summary=delivery.summary(payload),
    )


@router.get("", response_model=PreferencesOut)
def get_preferences(session: SessionDep, caller: SignedIn) -> PreferencesOut:
    """The caller's notification switches (per event, per channel) and webhook."""
    assert caller.user is not None
    return preferences_out(preferences.preferences_of(session, caller.user), caller.user)


@router.patch("", response_model=PreferencesChanged)
def update_preferences(
    body: PreferencesUpdate, session: SessionDep, caller: SignedIn
) -> PreferencesChanged:
    """Change switches, all_phases or the webhook URL (a first URL gets a secret, shown once)."""
    assert caller.user is not None
    events = (
        {
            kind: {NotificationChannel(ch): on for ch, on in switches.model_dump().items()}
            for kind, switches in body.events.items()
        }
        if body.events is not None
        else None
    )
    secret = preferences.update_preferences(
        session,
        caller.user,
        events=events,
        all_phases=body.all_phases,
        webhook_url=body.webhook_url,
    )
    out = preferences_out(preferences.preferences_of(session, caller.user), caller.user)
    return PreferencesChanged(**out.model_dump(), webhook_secret=secret)


@router.post("/webhook-secret", response_model=SecretOut)
def replace_secret(body: SecretIn, session: SessionDep, caller: SignedIn) -> SecretOut:
    """Replace the webhook's signing secret (yours, or a random one); shown this once."""
    assert caller.user is not None
    return SecretOut(webhook_secret=preferences.set_secret(session, caller.user, body.secret))


@router.post("/test", response_model=list[DeliveryOut])
async def send_test(caller: SignedInOutsideSession) -> list[DeliveryOut]:
    """Send a test notification on each of your channels; each outcome, or pending while a
    receiver still answers (at most 5 tests a minute, one at a time)."""
    assert caller.user is not None
    user_id = caller.user.id
    # Neither a request thread nor a database connection is held while receivers answer.
    ids = await anyio.to_thread.run_sync(ping.start, user_id)
    await ping.wait(ping.send_soon(ids))
    return await anyio.to_thread.run_sync(_test_outcomes, user_id, ids)


def _test_outcomes(user_id: int, delivery_ids: list[int]) -> list[DeliveryOut]:
    with session_scope() as session:
        return [delivery_out(d) for d in ping.outcomes(session, user_id, delivery_ids)]


@router.get("/deliveries", response_model=Page[DeliveryOut])
def list_deliveries(session: SessionDep, caller: SignedIn, page: PageDep) -> Page[DeliveryOut]:
    """The caller's notification deliveries, newest first, with each one's attempts."""
    assert caller.user is not None
    rows, total = delivery.deliveries(session, caller.user, limit=page.limit, offset=page.offset)
    return Page(
        items=[delivery_out(d) for d in rows], total=total, limit=page.limit, offset=page.offset
    )

"""``/api/v1/users/me/notifications``: the caller's notification settings, webhook secret,
test sends and delivery log (docs/api.md, "Notifications")."""

from __future__ import annotations

from fastapi import APIRouter

from szbench.api.deps import SessionDep
from szbench.api.errors import ERROR_RESPONSES
from szbench.api.pagination import Page, PageDep
from szbench.auth.dependencies import SignedIn
from szbench.models import (
    NotificationChannel,
    NotificationDelivery,
    NotificationPreferences,
    User,
)
from szbench.notifications import outbox, service
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
        events=service.switches(prefs),
        all_phases=prefs.all_phases,
        webhook_url=prefs.webhook_url,
        webhook_secret_set=bool(prefs.webhook_secret),
        mail_enabled=service.mail_enabled(),
        mail_to=service.mail_address(user),
    )


def delivery_out(delivery: NotificationDelivery) -> DeliveryOut:
    payload = delivery.payload or {}
    return DeliveryOut(
        id=delivery.id,
        event_id=delivery.event_id,
        event=str(payload.get("event", "")),
        channel=delivery.channel,
        status=delivery.status,
        attempts=delivery.attempts,
        target=delivery.target,
        last_status_code=delivery.last_status_code,
        last_error=delivery.last_error,
        response_snippet=delivery.response_snippet,
        created_at=delivery.created_at,
        last_attempt_at=delivery.last_attempt_at,
        next_attempt_at=delivery.next_attempt_at,
        delivered_at=delivery.delivered_at,
        summary=service.summary(payload),
    )


@router.get("", response_model=PreferencesOut)
def get_preferences(session: SessionDep, caller: SignedIn) -> PreferencesOut:
    """The caller's notification switches (per event, per channel) and webhook."""
    assert caller.user is not None
    return preferences_out(service.preferences_of(session, caller.user), caller.user)


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
    secret = service.update_preferences(
        session,
        caller.user,
        events=events,
        all_phases=body.all_phases,
        webhook_url=body.webhook_url,
    )
    out = preferences_out(service.preferences_of(session, caller.user), caller.user)
    return PreferencesChanged(**out.model_dump(), webhook_secret=secret)


@router.post("/webhook-secret", response_model=SecretOut)
def replace_secret(body: SecretIn, session: SessionDep, caller: SignedIn) -> SecretOut:
    """Replace the webhook's signing secret (yours, or a random one); shown this once."""
    assert caller.user is not None
    return SecretOut(webhook_secret=service.set_secret(session, caller.user, body.secret))


@router.post("/test", response_model=list[DeliveryOut])
def send_test(session: SessionDep, caller: SignedIn) -> list[DeliveryOut]:
    """Send a test notification on each of the caller's channels now; the outcomes."""
    assert caller.user is not None
    event_id = service.record_test(session, caller.user)
    # Committed before any call: no transaction stays open while a receiver answers.
    session.commit()
    outbox.send_due(session, event_id=event_id)
    rows, _ = service.deliveries(session, caller.user, limit=10, event_id=event_id)
    return [delivery_out(d) for d in rows]


@router.get("/deliveries", response_model=Page[DeliveryOut])
def list_deliveries(session: SessionDep, caller: SignedIn, page: PageDep) -> Page[DeliveryOut]:
    """The caller's notification deliveries, newest first, with each one's attempts."""
    assert caller.user is not None
    rows, total = service.deliveries(session, caller.user, limit=page.limit, offset=page.offset)
    return Page(
        items=[delivery_out(d) for d in rows], total=total, limit=page.limit, offset=page.offset
    )

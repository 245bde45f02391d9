"""Bodies of ``/api/v1/users/me/notifications``."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, Field

from szbench.models import DeliveryStatus, NotificationChannel, NotificationKind

_SWITCHES = (
    "Per event kind, per channel: true sends, false does not. Kinds: smoke_test_failed, "
    "evaluation_finished, evaluation_failed, phase_opened, phase_closed; channels: mail, "
    "webhook. Kinds or channels left out keep their setting."
)


class ChannelSwitches(BaseModel):
    mail: bool | None = None
    webhook: bool | None = None


class PreferencesOut(BaseModel):
    events: dict[NotificationKind, dict[NotificationChannel, bool]] = Field(description=_SWITCHES)
    all_phases: bool = Field(
        description="Phase events of every phase; false: only of phases you submitted to."
    )
    webhook_url: str
    webhook_secret_set: bool
    mail_enabled: bool = Field(
        description="Whether this server sends notification e-mail (SMTP set, not centre mode)."
    )
    mail_to: str | None = Field(
        description="The address notification e-mail goes to; null when none is sent to you "
        "(e-mail off on this server, or your address not confirmed yet)."
    )


class PreferencesUpdate(BaseModel):
    events: dict[NotificationKind, ChannelSwitches] | None = Field(
        default=None, description=_SWITCHES
    )
    all_phases: bool | None = None
    webhook_url: str | None = Field(
        default=None,
        max_length=2000,
        description="https:// address that receives the signed POSTs; empty removes it.",
    )


class PreferencesChanged(PreferencesOut):
    webhook_secret: str | None = Field(
        default=None,
        description="The signing secret, when this change made one (a first webhook URL): "
        "shown this once.",
    )


class SecretIn(BaseModel):
    secret: str | None = Field(
        default=None,
        min_length=16,
        max_length=200,
        description="Your own secret (16-200 characters); absent: a random one is made.",
    )


class SecretOut(BaseModel):
    webhook_secret: str = Field(description="Shown this once; keep it with your receiver.")


class DeliveryOut(BaseModel):
    id: int
    event_id: int
    event: str = Field(description="evaluation.finished, smoke_test.failed, phase.opened, ...")
    channel: NotificationChannel
    status: DeliveryStatus
    attempts: int
    target: str = Field(description="Where the last attempt went (URL or e-mail address).")
    last_status_code: int | None = Field(description="The receiver's HTTP status, if any.")
    last_error: str
    response_snippet: str = Field(description="The start of the receiver's answer (bounded).")
    created_at: datetime
    last_attempt_at: datetime | None
    next_attempt_at: datetime | None
    delivered_at: datetime | None
    summary: str = Field(description="What the notification says, in one line.")

"""One composer per kind of notification (:class:`~.base.Composer`), found by its kind or by
a stored payload's ``event`` name."""

from __future__ import annotations

from typing import Any

from szbench.models import NotificationKind
from szbench.notifications.kinds.base import Composer
from szbench.notifications.kinds.evaluation import EvaluationEnded
from szbench.notifications.kinds.phase import PhaseNews
from szbench.notifications.kinds.smoke import SmokeTestFailed
from szbench.notifications.kinds.test import TestNotification

_ALL: tuple[Composer, ...] = (SmokeTestFailed(), EvaluationEnded(), PhaseNews(), TestNotification())
_BY_KIND = {kind: composer for composer in _ALL for kind in composer.names}

#: The event's name in payloads and the ``X-Szbench-Event`` header.
EVENT_NAMES = {kind: composer.names[kind] for kind, composer in _BY_KIND.items()}
_BY_NAME = {name: _BY_KIND[kind] for kind, name in EVENT_NAMES.items()}
#: What each switch is called on the account page (the kinds a user can turn off).
KIND_LABELS = {kind: label for composer in _ALL for kind, label in composer.labels.items()}


def of(kind: NotificationKind) -> Composer:
    return _BY_KIND[kind]


def of_payload(payload: dict[str, Any]) -> Composer:
    """The composer of a stored payload (by its ``event`` name)."""
    return _BY_NAME[str(payload.get("event"))]

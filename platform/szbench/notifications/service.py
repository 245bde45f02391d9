"""Notifications: who is told what, by which channel, and the outbox of deliveries.

1. An event is recorded in the transaction that makes it happen (:func:`record_evaluation_end`
   and :func:`record_smoke_failure` from the pipeline, :func:`check_phases` from the
   notifications tick), under a key that makes one happening one event; the deliver task is
   sent after that commit.
2. :func:`fan_out` makes one delivery per (event, recipient, channel) the recipient has not
   turned off, its payload composed once, then, through the rules every page follows
   (:mod:`szbench.auth.policy`, :mod:`szbench.disclosure`): an algorithm's owner
   learns what their evaluation page shows them (status, outcome counts as disclosed, the
   dataset-level figures), never the message of a run on held-out data.
3. :func:`claim` takes a due delivery for one attempt (a conditional update: two workers
   never make the same attempt), :func:`send` makes it outside any transaction, and
   :func:`finish` records the outcome and when to retry (exponential backoff, at most
   ``MAX_ATTEMPTS`` attempts). :mod:`szbench.notifications.outbox` drives these.

Recipients: an evaluation's or a smoke test's events go to the algorithm's owner; a phase's
to the owners of the algorithms with a version in that phase, and to users who asked for
every phase's news (``all_phases``). Inactive accounts get nothing.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from szbench.auth import mail, policy
from szbench.config import get_settings
from szbench.disclosure import decision
from szbench.disclosure import progress as timing
from szbench.errors import BadRequest, Conflict, NotFound
from szbench.evaluations import queries as evaluation_queries
from szbench.leaderboards import snapshots
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    DatasetKind,
    DeliveryStatus,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    NotificationChannel,
    NotificationDelivery,
    NotificationEvent,
    NotificationKind,
    NotificationPreferences,
    Phase,
    PhaseState,
    RecordingRun,
    User,
)
from szbench.notifications import webhook
from szbench.phases import service as phases
from szbench.queue import QUEUE_MAINTENANCE, TASK_NOTIFY, enqueue_after_commit, is_embedded
from szbench.results import queries as result_queries

log = logging.getLogger(__name__)

#: The event's name in payloads and the ``X-Szbench-Event`` header.
EVENT_NAMES = {
    NotificationKind.SMOKE_TEST_FAILED: "smoke_test.failed",
    NotificationKind.EVALUATION_FINISHED: "evaluation.finished",
    NotificationKind.EVALUATION_FAILED: "evaluation.failed",
    NotificationKind.PHASE_OPENED: "phase.opened",
    NotificationKind.PHASE_CLOSED: "phase.closed",
    NotificationKind.TEST: "test",
}
#: What each switch is called on the account page.
KIND_LABELS = {
    NotificationKind.SMOKE_TEST_FAILED: "A version fails its smoke test",
    NotificationKind.EVALUATION_FINISHED: "An evaluation finishes",
    NotificationKind.EVALUATION_FAILED: "An evaluation fails",
    NotificationKind.PHASE_OPENED: "A phase opens for submissions",
    NotificationKind.PHASE_CLOSED: "A phase closes",
}
SWITCHABLE = tuple(KIND_LABELS)
_EVALUATION_KINDS = (NotificationKind.EVALUATION_FINISHED, NotificationKind.EVALUATION_FAILED)
_PHASE_KINDS = (NotificationKind.PHASE_OPENED, NotificationKind.PHASE_CLOSED)
SECRET_MIN, SECRET_MAX = 16, 200


def _now() -> datetime:
    return datetime.now(UTC)


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).isoformat()


def _insert(session: Session, model: Any) -> Any:
    """``INSERT ... ON CONFLICT DO NOTHING`` for the session's database."""
    dialect = session.get_bind().dialect.name
    return postgresql.insert(model) if dialect == "postgresql" else sqlite.insert(model)


def link(path: str) -> str:
    """``path`` on the site as users reach it (``public_url``); the bare path without one."""
    root = get_settings().public_url.rstrip("/")
    return f"{root}{path}"


# --- preferences ------------------------------------------------------------------------------


def preferences_of(session: Session, user: User) -> NotificationPreferences:
    """The user's preferences; the defaults (every switch on, no webhook) when never saved."""
    row = session.get(NotificationPreferences, user.id)
    if row is not None:
        return row
    return NotificationPreferences(
        user_id=user.id, webhook_url="", webhook_secret="", muted=[], all_phases=False
    )


def _stored_preferences(session: Session, user: User) -> NotificationPreferences:
    row = session.get(NotificationPreferences, user.id)
    if row is None:
        row = preferences_of(session, user)
        session.add(row)
    return row


def _switch(kind: NotificationKind, channel: NotificationChannel) -> str:
    return f"{channel.value}:{kind.value}"


def is_on(
    prefs: NotificationPreferences, kind: NotificationKind, channel: NotificationChannel
) -> bool:
    return _switch(kind, channel) not in (prefs.muted or [])


def switches(
    prefs: NotificationPreferences,
) -> dict[NotificationKind, dict[NotificationChannel, bool]]:
    return {kind: {ch: is_on(prefs, kind, ch) for ch in NotificationChannel} for kind in SWITCHABLE}


def mail_enabled() -> bool:
    """Notification e-mail: where SMTP is configured, never in centre mode (nothing is
    pushed off the host there)."""
    return mail.enabled() and not get_settings().centre_mode


def mail_address(user: User) -> str | None:
    """Where notification e-mail to ``user`` goes; None when none is sent to them.

    Not to an address its account has not confirmed: that could be anyone's.
    """
    if not mail_enabled() or not user.is_active or policy.needs_verification(user):
        return None
    return user.email


def update_preferences(
    session: Session,
    user: User,
    *,
    events: dict[NotificationKind, dict[NotificationChannel, bool | None]] | None = None,
    all_phases: bool | None = None,
    webhook_url: str | None = None,
) -> str | None:
    """Change what is given (None: unchanged). Returns the webhook's signing secret when
    this change made one (a first URL), to be shown this once.

    Everything is checked before anything changes: a refused URL loses no other setting.
    """
    url = None
    if webhook_url is not None:
        url = webhook_url.strip()
        if url:
            target = webhook.check_url(url)
            webhook.check_addresses(target)
            url = target.url
    if events is not None and NotificationKind.TEST in events:
        raise BadRequest("events.test: the test notification has no switch")
    row = _stored_preferences(session, user)
    if events is not None:
        muted = set(row.muted or [])
        for kind, channels in events.items():
            for channel, on in channels.items():
                if on is True:
                    muted.discard(_switch(kind, channel))
                elif on is False:
                    muted.add(_switch(kind, channel))
        row.muted = sorted(muted)
    if all_phases is not None:
        row.all_phases = all_phases
    secret = None
    if url is not None:
        row.webhook_url = url
        if url and not row.webhook_secret:
            secret = row.webhook_secret = secrets.token_urlsafe(32)
    session.flush()
    return secret


def set_secret(session: Session, user: User, secret: str | None = None) -> str:
    """Replace the webhook's signing secret with ``secret``, or a random one; returns it."""
    if secret is not None:
        if not SECRET_MIN <= len(secret) <= SECRET_MAX:
            raise BadRequest(f"secret: between {SECRET_MIN} and {SECRET_MAX} characters")
        if not secret.isprintable() or secret.strip() != secret:
            raise BadRequest("secret: printable characters only, no space at either end")
    row = _stored_preferences(session, user)
    row.webhook_secret = secret if secret is not None else secrets.token_urlsafe(32)
    session.flush()
    return row.webhook_secret


# --- events -----------------------------------------------------------------------------------


def _record(
    session: Session, kind: NotificationKind, key: str, *, enqueue: bool = True, **refs: int
) -> int:
    session.execute(
        _insert(session, NotificationEvent.__table__)
        .values(kind=kind, key=key, created_at=_now(), **refs)
        .on_conflict_do_nothing(index_elements=["key"])
    )
    event_id = session.scalar(select(NotificationEvent.id).where(NotificationEvent.key == key))
    assert event_id is not None
    # In the embedded mode the embedded worker's notifier picks the event up (its queue
    # carries only the pipeline's work).
    if enqueue and not is_embedded():
        enqueue_after_commit(session, TASK_NOTIFY, queue=QUEUE_MAINTENANCE, event_id=event_id)
    return event_id


def record_evaluation_end(session: Session, evaluation: Evaluation) -> int | None:
    """Record that ``evaluation`` finished or failed, in the transaction that ended it.

    Smoke tests are told by their version's outcome (:func:`record_smoke_failure`), and a
    cancellation is its owner's or an admin's own act: neither is an evaluation event.
    """
    if evaluation.kind == EvaluationKind.SMOKE_TEST:
        return None
    if evaluation.status == EvaluationStatus.DONE:
        kind = NotificationKind.EVALUATION_FINISHED
    elif evaluation.status == EvaluationStatus.FAILED:
        kind = NotificationKind.EVALUATION_FAILED
    else:
        return None
    return _record(session, kind, f"evaluation:{evaluation.id}", evaluation_id=evaluation.id)


def record_smoke_failure(session: Session, version: AlgorithmVersion) -> int:
    """Record that ``version`` failed its smoke test, in the transaction that rejected it
    (under the version's lock: a version rejected again after a re-test is a new event)."""
    earlier = session.scalar(
        select(func.count(NotificationEvent.id)).where(
            NotificationEvent.algorithm_version_id == version.id,
            NotificationEvent.kind == NotificationKind.SMOKE_TEST_FAILED,
        )
    )
    return _record(
        session,
        NotificationKind.SMOKE_TEST_FAILED,
        f"smoke:{version.id}:{int(earlier or 0) + 1}",
        algorithm_version_id=version.id,
    )


def record_test(session: Session, user: User) -> int:
    """A test notification to ``user`` on each channel they have, fanned out at once."""
    if not _channels(user, preferences_of(session, user), NotificationKind.TEST):
        why = "" if mail_enabled() else " (this server sends no notification e-mail)"
        raise Conflict(f"webhook_url: nothing to send a test to: set a webhook URL first{why}")
    key = f"test:{user.id}:{secrets.token_hex(8)}"
    event_id = _record(session, NotificationKind.TEST, key, enqueue=False, user_id=user.id)
    fan_out(session, event_id)
    return event_id


def check_phases(session: Session, now: datetime | None = None) -> list[int]:
    """Record each phase that opened or closed since the last look; the new events' ids.

    Whether a phase is open is :func:`szbench.phases.service.refusal`'s answer (its flag and
    its dates), so a date passing, which nothing writes, is noticed here. The phase's state
    row is locked while it changes and each change has its own key, so two ticks at once
    record one event. A phase new since the last look counts as closed before; phases older
    than notifications are looked at once without an event (the migration marks them).
    """
    now = now or _now()
    known = {s.phase_id: s.is_open for s in session.scalars(select(PhaseState))}
    made: list[int] = []
    for phase in session.scalars(select(Phase).order_by(Phase.id)).all():
        open_now = phases.refusal(phase, now) is None
        if phase.id in known and known[phase.id] is open_now:
            continue
        state = _locked_state(session, phase.id, now)
        if state.is_open is None:
            state.is_open, state.changed_at = open_now, now
            continue
        if state.is_open is open_now:
            continue  # another tick recorded it meanwhile
        state.is_open, state.changed_at = open_now, now
        state.changes += 1
        kind = NotificationKind.PHASE_OPENED if open_now else NotificationKind.PHASE_CLOSED
        key = f"phase:{phase.id}:{state.changes}"
        # The tick that looked fans it out itself: no task to send.
        made.append(_record(session, kind, key, enqueue=False, phase_id=phase.id))
        if not open_now:
            _snapshot_boards(session, phase)
    session.flush()
    return made


def _snapshot_boards(session: Session, phase: Phase) -> None:
    """The boards as the closing phase left them, to be cited (szbench.leaderboards.snapshots).
    A board that cannot be frozen must not hold up the phase's news: it is logged, and an
    admin can take the snapshot by hand."""
    try:
        with session.begin_nested():
            snapshots.take_for_phase(session, phase)
    except Exception:
        log.exception("could not snapshot the boards of phase %s as it closed", phase.slug)


def _locked_state(session: Session, phase_id: int, now: datetime) -> PhaseState:
    session.execute(
        _insert(session, PhaseState.__table__)
        .values(phase_id=phase_id, is_open=False, changes=0, changed_at=now)
        .on_conflict_do_nothing(index_elements=["phase_id"])
    )
    return session.scalars(
        select(PhaseState)
        .where(PhaseState.phase_id == phase_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one()


def unfanned(session: Session, limit: int = 100) -> list[int]:
    """Events whose deliveries are not made yet (their task was lost, or the tick's own)."""
    return list(
        session.scalars(
            select(NotificationEvent.id)
            .where(NotificationEvent.fanned_out_at.is_(None))
            .order_by(NotificationEvent.id)
            .limit(limit)
        )
    )


# --- fan-out and payloads ---------------------------------------------------------------------


def fan_out(session: Session, event_id: int) -> int:
    """Make the event's deliveries (once); how many were made."""
    event = session.scalars(
        select(NotificationEvent)
        .where(NotificationEvent.id == event_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    ).one_or_none()
    if event is None or event.fanned_out_at is not None:
        return 0
    now = _now()
    made = 0
    for user in _recipients(session, event):
        channels = _channels(user, preferences_of(session, user), event.kind)
        payload = compose(session, event, user) if channels else None
        if payload is None:
            continue
        for channel in channels:
            result = session.execute(
                _insert(session, NotificationDelivery.__table__)
                .values(
                    event_id=event.id,
                    user_id=user.id,
                    channel=channel,
                    status=DeliveryStatus.PENDING,
                    payload=payload,
                    next_attempt_at=now,
                    created_at=now,
                )
                .on_conflict_do_nothing(index_elements=["event_id", "user_id", "channel"])
                .returning(NotificationDelivery.__table__.c.id)
            )
            made += len(result.all())
    event.fanned_out_at = now
    session.flush()
    return made


def _recipients(session: Session, event: NotificationEvent) -> list[User]:
    """Who hears of ``event``: for an algorithm's evaluation or smoke test, everyone who
    acts for the algorithm (:func:`policy.users_acting_for`: its owner and its team's
    members); for a phase, those acting for an algorithm submitted to it and whoever asked
    for every phase. What each is told is decided per person (:func:`compose`)."""
    if event.kind == NotificationKind.TEST:
        ids = [event.user_id]
    elif event.kind in _EVALUATION_KINDS:
        evaluation = session.get(Evaluation, event.evaluation_id)
        algorithm_id = evaluation.algorithm_version.algorithm_id if evaluation else None
        ids = list(session.scalars(policy.users_acting_for(Algorithm.id == algorithm_id)))
    elif event.kind == NotificationKind.SMOKE_TEST_FAILED:
        version = session.get(AlgorithmVersion, event.algorithm_version_id)
        algorithm_id = version.algorithm_id if version else None
        ids = list(session.scalars(policy.users_acting_for(Algorithm.id == algorithm_id)))
    else:
        submitted = select(AlgorithmVersion.algorithm_id).where(
            AlgorithmVersion.phase_id == event.phase_id
        )
        everything = select(NotificationPreferences.user_id).where(
            NotificationPreferences.all_phases.is_(True)
        )
        ids = list(
            session.scalars(
                select(User.id).where(
                    or_(
                        User.id.in_(policy.users_acting_for(Algorithm.id.in_(submitted))),
                        User.id.in_(everything),
                    )
                )
            )
        )
    if not ids:
        return []
    users = session.scalars(
        select(User).where(User.id.in_([i for i in ids if i is not None])).order_by(User.id)
    )
    return [u for u in users if u.is_active]


def _channels(
    user: User, prefs: NotificationPreferences, kind: NotificationKind
) -> list[NotificationChannel]:
    wanted = [
        channel
        for channel in NotificationChannel
        if kind == NotificationKind.TEST or is_on(prefs, kind, channel)
    ]
    out = []
    if NotificationChannel.MAIL in wanted and mail_address(user):
        out.append(NotificationChannel.MAIL)
    if NotificationChannel.WEBHOOK in wanted and prefs.webhook_url:
        out.append(NotificationChannel.WEBHOOK)
    return out


def compose(session: Session, event: NotificationEvent, user: User) -> dict[str, Any] | None:
    """What ``user`` is told of ``event`` (the webhook's JSON body; the e-mail says the
    same); None when they may not learn of it."""
    payload: dict[str, Any] = {
        "event": EVENT_NAMES[event.kind],
        "event_id": event.id,
        "created_at": _iso(event.created_at),
    }
    if event.kind in _EVALUATION_KINDS:
        evaluation = session.get(Evaluation, event.evaluation_id)
        if evaluation is None or not policy.can_view_evaluation(user, evaluation):
            return None
        payload["evaluation"] = _evaluation_facts(session, evaluation, user)
        # The event happens when the evaluation ends: rounded as its finish is (issue 28.3).
        view = decision.view_of(user, evaluation)
        payload["created_at"] = _iso(timing.shown_moment(view, event.created_at))
    elif event.kind == NotificationKind.SMOKE_TEST_FAILED:
        version = session.get(AlgorithmVersion, event.algorithm_version_id)
        if version is None or not policy.owns(user, version.algorithm):
            return None
        payload["algorithm"] = _algorithm_facts(version.algorithm)
        payload["algorithm_version"] = {
            "id": version.id,
            "version": version.version,
            "status": version.status.value,
            "message": _smoke_message(session, version, user),
        }
        payload["url"] = link("/submissions")
    elif event.kind in _PHASE_KINDS:
        phase = session.get(Phase, event.phase_id)
        if phase is None:
            return None
        payload["phase"] = {
            "slug": phase.slug,
            "title": phase.title,
            "open": event.kind == NotificationKind.PHASE_OPENED,
            "opens_at": _iso(phase.opens_at),
            "closes_at": _iso(phase.closes_at),
        }
        payload["url"] = link("/submit")
    else:
        payload["message"] = "A test notification from szbench: this channel works."
        payload["url"] = link("/account/notifications")
    return payload


def _algorithm_facts(algorithm: Algorithm) -> dict[str, Any]:
    return {"id": algorithm.id, "name": algorithm.name, "title": algorithm.title}


def _evaluation_facts(session: Session, evaluation: Evaluation, user: User) -> dict[str, Any]:
    """The evaluation as its page shows it to ``user``: outcome counts through the
    disclosure rules (:func:`szbench.evaluations.queries.progress`), the dataset-level
    figures as they are released to ``user`` (rounded, the Ladder's score or exact, with
    ``release`` saying which: :mod:`szbench.disclosure`), the platform's own summary
    message."""
    progress = evaluation_queries.progress(session, evaluation, viewer=user)
    version = evaluation.algorithm_version
    dataset_version = evaluation.dataset_version
    figures = None
    if evaluation.status == EvaluationStatus.DONE:
        try:
            result = result_queries.dataset_result(session, evaluation, viewer=user)
        except NotFound:
            result = None
        if result is not None:
            figures = {m: getattr(result, m) for m in result_queries.METRICS}
            figures.update(
                subjects=result.subjects, recordings=result.recordings, release=result.release
            )
    return {
        "id": evaluation.id,
        "url": link(f"/evaluations/{evaluation.id}"),
        "status": evaluation.status.value,
        "kind": evaluation.kind.value,
        "algorithm": _algorithm_facts(version.algorithm),
        "algorithm_version": version.version,
        "dataset": dataset_version.dataset.slug,
        "dataset_version": dataset_version.version,
        "held_out": dataset_version.dataset.kind != DatasetKind.PUBLIC_SAMPLE,
        "published": evaluation.published,
        "message": evaluation.message,
        "recordings_total": progress.recordings_total,
        "outcomes": progress.outcomes,
        "failed_recordings": progress.failed_recordings,
        "figures": figures,
        # Rounded to the progress clock for a non-admin on held-out data, as on the page.
        "finished_at": _iso(
            timing.shown_moment(decision.view_of(user, evaluation), evaluation.finished_at)
        ),
    }


def _smoke_message(session: Session, version: AlgorithmVersion, user: User) -> str:
    """Why the smoke test failed, as far as ``user`` may read the run's own message
    (:func:`szbench.disclosure.decision.run_message`). A rejection without a run (an image
    refused before it ran) is the platform's own text."""
    smoke = session.scalars(
        select(Evaluation)
        .where(
            Evaluation.algorithm_version_id == version.id,
            Evaluation.kind == EvaluationKind.SMOKE_TEST,
        )
        .order_by(Evaluation.id.desc())
    ).first()
    run = (
        session.scalars(select(RecordingRun).where(RecordingRun.evaluation_id == smoke.id)).first()
        if smoke is not None
        else None
    )
    if smoke is None or run is None or run.outcome is None:
        return version.status_message
    view = decision.view_of(user, smoke)
    if view.run_details:
        return version.status_message
    return "Smoke test failed: " + decision.run_message(view, run.outcome, run.submitter_message)


def mail_text(payload: dict[str, Any]) -> tuple[str, str]:
    """The e-mail's subject and body for a delivery's payload."""
    subject = summary(payload)
    lines = [subject, ""]
    event = payload.get("event")
    if "evaluation" in payload:
        e = payload["evaluation"]
        if e.get("figures"):
            f = e["figures"]
            lines.append(
                "Event F1 {}, sensitivity {}, precision {}, false positives per day {} "
                "(over {} subjects).".format(
                    _fmt(f.get("event_f1")),
                    _fmt(f.get("event_sensitivity")),
                    _fmt(f.get("event_precision")),
                    _fmt(f.get("event_fp_rate")),
                    f.get("subjects"),
                )
            )
        if e.get("outcomes"):
            counts = ", ".join(
                f"{k.replace('_', ' ')}: {v}" for k, v in sorted(e["outcomes"].items())
            )
            lines.append(f"Recordings: {counts}.")
        if e.get("message"):
            lines.append(e["message"])
        lines += ["", f"Details: {e['url']}"]
    elif "algorithm_version" in payload:
        lines += [
            payload["algorithm_version"]["message"],
            "",
            f"Your submissions: {payload['url']}",
        ]
    elif "phase" in payload:
        p = payload["phase"]
        if p.get("closes_at") and p["open"]:
            lines.append(f"It takes submissions until {p['closes_at']}.")
        lines += ["", f"Submit: {payload['url']}"]
    else:
        lines += [payload.get("message", ""), ""]
    settings_page = link("/account/notifications")
    if event == "test":
        lines += ["", f"Your notification settings: {settings_page}"]
    else:
        lines += [
            "",
            f"You get this e-mail because of your notification settings ({settings_page}); "
            "each kind of notice can be turned off there.",
        ]
    return subject, "\n".join(lines) + "\n"


def _fmt(value: Any) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def summary(payload: dict[str, Any]) -> str:
    """The notification in one line (the e-mail's subject, the delivery log's text)."""
    if "evaluation" in payload:
        e = payload["evaluation"]
        what = (
            f"{e['algorithm']['name']} {e['algorithm_version']} on "
            f"{e['dataset']} {e['dataset_version']}"
        )
        done = "finished" if e["status"] == EvaluationStatus.DONE.value else "failed"
        return f"Evaluation {e['id']} {done}: {what}"
    if "algorithm_version" in payload:
        a, v = payload["algorithm"], payload["algorithm_version"]
        return f"{a['name']} version {v['version']} failed its smoke test"
    if "phase" in payload:
        p = payload["phase"]
        name = p["title"] or p["slug"]
        return f"Phase {name} is open for submissions" if p["open"] else f"Phase {name} closed"
    return "szbench test notification"


# --- attempts ---------------------------------------------------------------------------------


# A receiver that is down for an hour or so still gets its message; one gone for good stops
# costing attempts after about two hours (60 s, 2, 4, 8, 16 min between the six).
MAX_ATTEMPTS = 6
BACKOFF_BASE_S = 60.0
BACKOFF_MAX_S = 3600.0


def backoff_s(attempts: int) -> float:
    """Seconds to wait after the ``attempts``-th failed attempt.

    >>> [backoff_s(n) for n in (1, 2, 3)]
    [60.0, 120.0, 240.0]
    """
    return float(min(BACKOFF_BASE_S * 2 ** max(attempts - 1, 0), BACKOFF_MAX_S))


def due(session: Session, *, event_id: int | None = None, limit: int = 200) -> list[int]:
    """Deliveries whose next attempt is due, oldest due first."""
    query = select(NotificationDelivery.id).where(
        NotificationDelivery.status == DeliveryStatus.PENDING,
        NotificationDelivery.next_attempt_at <= _now(),
    )
    if event_id is not None:
        query = query.where(NotificationDelivery.event_id == event_id)
    return list(session.scalars(query.order_by(NotificationDelivery.next_attempt_at).limit(limit)))


@dataclass(frozen=True)
class Job:
    """One claimed attempt: everything :func:`send` needs, read before the transaction ends."""

    delivery_id: int
    channel: NotificationChannel
    payload: dict[str, Any]
    target: str
    secret: str
    refusal: str = ""


def claim(session: Session, delivery_id: int) -> Job | None:
    """Take the delivery for one attempt, or None when it is not due (another worker took
    it). The claim pushes its next attempt out by a lease, so an attempt whose worker died
    is made again later; commit before sending."""
    settings = get_settings()
    now = _now()
    lease = timedelta(seconds=3 * max(settings.webhook_timeout_s, settings.smtp_timeout_s) + 60)
    claimed = session.execute(
        update(NotificationDelivery)
        .where(
            NotificationDelivery.id == delivery_id,
            NotificationDelivery.status == DeliveryStatus.PENDING,
            NotificationDelivery.next_attempt_at <= now,
        )
        .values(
            attempts=NotificationDelivery.attempts + 1,
            last_attempt_at=now,
            next_attempt_at=now + lease,
        )
        .execution_options(synchronize_session=False)
    )
    if not claimed.rowcount:  # type: ignore[attr-defined]
        return None
    delivery = session.get_one(NotificationDelivery, delivery_id, populate_existing=True)
    user = session.get_one(User, delivery.user_id)
    prefs = preferences_of(session, user)
    refusal = ""
    if delivery.channel == NotificationChannel.MAIL:
        target = mail_address(user) or ""
        if not target:
            refusal = "no e-mail sent: e-mail is off on this server or the address is unconfirmed"
    else:
        target = prefs.webhook_url
        if not target:
            refusal = "no webhook URL any more"
    if not user.is_active:
        refusal = "the account is deactivated"
    delivery.target = target
    session.flush()
    return Job(
        delivery_id=delivery.id,
        channel=delivery.channel,
        payload=dict(delivery.payload or {}),
        target=target,
        secret=prefs.webhook_secret,
        refusal=refusal,
    )


def body_of(payload: dict[str, Any]) -> bytes:
    """The webhook's body: the payload as compact JSON (the bytes that are signed)."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode("utf-8")


def send(job: Job) -> webhook.Outcome:
    """Make the attempt (no database work: call it outside any transaction)."""
    if job.refusal:
        return webhook.Outcome(False, error=job.refusal, retry=False)
    if job.channel == NotificationChannel.MAIL:
        subject, text = mail_text(job.payload)
        if mail.send(job.target, subject, text):
            return webhook.Outcome(True)
        return webhook.Outcome(
            False, error="the mail server did not take the message (the platform's log says why)"
        )
    headers = {
        "X-Szbench-Event": str(job.payload.get("event")),
        "X-Szbench-Delivery": str(job.delivery_id),
    }
    return webhook.post(job.target, job.secret, body_of(job.payload), headers)


def finish(session: Session, delivery_id: int, outcome: webhook.Outcome) -> NotificationDelivery:
    """Record an attempt's outcome; schedule the next one, or end the delivery."""
    now = _now()
    delivery = session.get_one(NotificationDelivery, delivery_id, populate_existing=True)
    delivery.last_status_code = outcome.status_code
    delivery.last_error = outcome.error[:500]
    delivery.response_snippet = outcome.snippet[:500]
    # A test is one attempt: its user is looking at the answer.
    once = (delivery.payload or {}).get("event") == EVENT_NAMES[NotificationKind.TEST]
    if outcome.delivered:
        delivery.status = DeliveryStatus.DELIVERED
        delivery.delivered_at = now
        delivery.next_attempt_at = None
    elif once or not outcome.retry or delivery.attempts >= MAX_ATTEMPTS:
        delivery.status = DeliveryStatus.FAILED
        delivery.next_attempt_at = None
    else:
        delivery.next_attempt_at = now + timedelta(seconds=backoff_s(delivery.attempts))
    session.flush()
    return delivery


# --- the delivery log -------------------------------------------------------------------------


def deliveries(
    session: Session, user: User, *, limit: int, offset: int = 0, event_id: int | None = None
) -> tuple[list[NotificationDelivery], int]:
    """The user's deliveries, newest first."""
    where = [NotificationDelivery.user_id == user.id]
    if event_id is not None:
        where.append(NotificationDelivery.event_id == event_id)
    total = session.scalar(select(func.count(NotificationDelivery.id)).where(*where)) or 0
    rows = session.scalars(
        select(NotificationDelivery)
        .where(*where)
        .order_by(NotificationDelivery.id.desc())
        .limit(limit)
        .offset(offset)
    ).all()
    return list(rows), total

"""Quotas: how many submissions and held-out evaluations a user may still start.

Every check runs under :func:`lock_user` and in the transaction that then records what it
allows (the version or the evaluation row), so concurrent requests of one user are decided
one after the other: with one submission left, exactly one of N simultaneous requests gets
it. The uses are counted from the rows themselves (no separate counter to drift):

- a *held-out evaluation* is one full pass over held-out data that the user asked for: a new
  algorithm version (its smoke test queues the held-out evaluations, uncharged), a re-run, or
  a full evaluation requested on a held-out dataset version;
- a *submission* is an algorithm version; in a phase with a quota, re-runs and requested full
  evaluations of the phase's versions count as submissions too.

Teams (:mod:`szbench.teams.service`): work on a team's algorithm is charged to the user who
starts it *and* to the team (the row records the team it was charged to), and is allowed
only while both have quota left. A team's limits are one account's, so splitting a team's
work over its members' accounts buys nothing; a user in several teams is still held to their
own limits; a member who leaves (or is removed) leaves their past work charged to the team.

Held-out work needs a verified address where e-mail is on (:func:`_check_held_out`): each
account brings its own daily held-out limit, so the limit is one per address its owner can
read mail at, not one per sign-up (docs/security.md, "Sign-ups").

What the platform's own faults cost is given back: a version whose smoke test failed only
through infrastructure faults, and an evaluation that FAILED (only platform faults fail
one) are not counted. A version its smoke test rejected never ran on held-out data: it
counts as a submission of the day, not as a held-out evaluation nor against a phase's
quota. Admins have no quota.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import ColumnElement, and_, or_, select, update
from sqlalchemy.orm import Session, selectinload

from szbench.auth import policy
from szbench.config import get_settings
from szbench.errors import Forbidden, QuotaExceeded
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    Dataset,
    DatasetKind,
    DatasetVersion,
    Evaluation,
    EvaluationKind,
    EvaluationStatus,
    Phase,
    RunOutcome,
    Team,
    User,
    VersionStatus,
    as_utc,
)

#: The rolling window of the daily limits.
DAY = timedelta(days=1)


@dataclass(frozen=True)
class Usage:
    """One limit as the user sees it. ``limit`` None: unlimited."""

    limit: int | None
    used: int
    #: When the count next drops so that one more use is available (when the limit is
    #: reached: the oldest use's 24 h are over); None for a limit without a window (a
    #: phase's) or when nothing is counted.
    resets_at: datetime | None = None

    @property
    def remaining(self) -> int | None:
        return None if self.limit is None else max(0, self.limit - self.used)


def lock_user(session: Session, user: User) -> None:
    """Hold ``user``'s row until the transaction ends, so that its quota decisions queue.

    PostgreSQL: ``SELECT ... FOR UPDATE`` on the row. SQLite has no row locks; a write is
    what serialises there (the driver begins the transaction at the first write, which waits
    for the database's one writer), so the row is touched without a change.
    """
    if session.get_bind().dialect.name == "sqlite":
        session.execute(
            update(User)
            .where(User.id == user.id)
            .values(is_active=User.is_active)
            .execution_options(synchronize_session=False)
        )
    else:
        session.execute(select(User.id).where(User.id == user.id).with_for_update())


def _lock_team(session: Session, team_id: int) -> Team | None:
    """:func:`lock_user` for a team's row (taken after the user's: one order, no deadlock);
    the team, or None when it was deleted meanwhile."""
    if session.get_bind().dialect.name == "sqlite":
        session.execute(
            update(Team)
            .where(Team.id == team_id)
            .values(name=Team.name)
            .execution_options(synchronize_session=False)
        )
        return session.get(Team, team_id)
    return session.scalars(select(Team).where(Team.id == team_id).with_for_update()).first()


#: Who is charged: a user (admins are exempt) or a team.
Payer = User | Team


def _limit(payer: Payer, limit: int | None) -> int | None:
    return None if isinstance(payer, User) and policy.is_admin(payer) else limit


def _versions_of(payer: Payer) -> ColumnElement[bool]:
    """The versions charged to ``payer``: its submitter's (versions made before submitters
    were recorded: the algorithm owner's), or the team's they were charged to."""
    if isinstance(payer, Team):
        return AlgorithmVersion.team_id == payer.id
    return or_(
        AlgorithmVersion.created_by_id == payer.id,
        and_(AlgorithmVersion.created_by_id.is_(None), Algorithm.owner_id == payer.id),
    )


def _evaluations_of(payer: Payer) -> ColumnElement[bool]:
    if isinstance(payer, Team):
        return Evaluation.team_id == payer.id
    return Evaluation.created_by_id == payer.id


def _now() -> datetime:
    return datetime.now(UTC)


def _infrastructure_failed(session: Session, version: AlgorithmVersion) -> bool:
    """True when the version's smoke test failed only through infrastructure faults."""
    smoke = session.scalars(
        select(Evaluation)
        .where(
            Evaluation.algorithm_version_id == version.id,
            Evaluation.kind == EvaluationKind.SMOKE_TEST,
        )
        .order_by(Evaluation.id.desc())
        .options(selectinload(Evaluation.runs))
    ).first()
    if smoke is None or smoke.status != EvaluationStatus.FAILED:
        return False
    outcomes = {run.outcome for run in smoke.runs if run.outcome is not None}
    return outcomes == {RunOutcome.INFRASTRUCTURE_ERROR}


def _version_times(
    session: Session, where: list[ColumnElement[bool]], *, held_out: bool = False
) -> list[datetime]:
    """When each version counted by ``where`` was made; ``held_out``: only those that may
    reach held-out data (not rejected by their smoke test)."""
    if held_out:
        where = [*where, AlgorithmVersion.status != VersionStatus.REJECTED]
    versions = session.scalars(select(AlgorithmVersion).join(Algorithm).where(*where)).all()
    return [as_utc(v.created_at) for v in versions if not _infrastructure_failed(session, v)]


def _evaluation_times(
    session: Session,
    where: list[ColumnElement[bool]],
    kinds: tuple[EvaluationKind, ...] = (EvaluationKind.FULL,),
) -> list[datetime]:
    rows = session.scalars(
        select(Evaluation.created_at)
        .join(AlgorithmVersion, AlgorithmVersion.id == Evaluation.algorithm_version_id)
        .join(DatasetVersion, DatasetVersion.id == Evaluation.dataset_version_id)
        .join(Dataset, Dataset.id == DatasetVersion.dataset_id)
        .where(
            Evaluation.kind.in_(kinds),
            Evaluation.status != EvaluationStatus.FAILED,
            *where,
        )
    ).all()
    return [as_utc(t) for t in rows]


def _windowed(limit: int | None, times: list[datetime]) -> Usage:
    if not times:
        return Usage(limit=limit, used=0)
    if limit == 0:
        # Nothing is ever available (an operator's way to pause submissions): no reset time.
        return Usage(limit=limit, used=len(times))
    ordered = sorted(times)
    # Over a lowered limit, a use is available again only once enough old ones have expired.
    first = len(ordered) - limit if limit is not None and len(ordered) >= limit else 0
    return Usage(limit=limit, used=len(ordered), resets_at=ordered[first] + DAY)


def held_out_usage(session: Session, payer: Payer, *, now: datetime | None = None) -> Usage:
    """The held-out evaluations of the last 24 h charged to a user or a team, against
    ``held_out_runs_per_day``.

    Re-scores count too: each asks the held-out annotations about the stored detections
    with parameters the user chooses (tolerances, thresholds), so each is one more query.
    """
    since = (now or _now()) - DAY
    limit = _limit(payer, get_settings().held_out_runs_per_day)
    times = _version_times(
        session,
        [_versions_of(payer), AlgorithmVersion.created_at >= since],
        held_out=True,
    ) + _evaluation_times(
        session,
        [
            _evaluations_of(payer),
            Evaluation.created_at >= since,
            Dataset.kind == DatasetKind.HELD_OUT,
        ],
        kinds=(EvaluationKind.FULL, EvaluationKind.RESCORE),
    )
    return _windowed(limit, times)


def submissions_usage(session: Session, payer: Payer, *, now: datetime | None = None) -> Usage:
    """The algorithm versions of the last 24 h charged to a user or a team, against
    ``submissions_per_day``."""
    since = (now or _now()) - DAY
    limit = _limit(payer, get_settings().submissions_per_day)
    return _windowed(
        limit, _version_times(session, [_versions_of(payer), AlgorithmVersion.created_at >= since])
    )


def phase_usage(session: Session, payer: Payer, phase: Phase) -> Usage:
    """The submissions in ``phase`` charged to a user or a team (versions, re-runs and
    requested evaluations)."""
    limit = _limit(payer, phase.submission_quota)
    versions = _version_times(
        session, [_versions_of(payer), AlgorithmVersion.phase_id == phase.id], held_out=True
    )
    evaluations = _evaluation_times(
        session, [_evaluations_of(payer), AlgorithmVersion.phase_id == phase.id]
    )
    return Usage(limit=limit, used=len(versions) + len(evaluations))


def _when(moment: datetime | None) -> str:
    return "" if moment is None else f"; the next one frees up at {moment:%Y-%m-%d %H:%M} UTC"


def _who(payer: Payer) -> str:
    return f"team {payer.name!r} has" if isinstance(payer, Team) else "you have"


def _payers(session: Session, user: User, team_id: int | None) -> list[Payer]:
    """``user`` and the team charged with them (if any), both locked in that order."""
    lock_user(session, user)
    team = _lock_team(session, team_id) if team_id is not None else None
    return [user] if team is None else [user, team]


def _check_held_out(session: Session, user: User, payers: list[Payer]) -> None:
    if policy.needs_verification(user):
        raise Forbidden(
            f"held-out evaluations: confirm your e-mail address first: open the link sent to "
            f"{user.email} (your account page sends a new one)"
        )
    if get_settings().held_out_runs_per_day is None:
        return
    for payer in payers:
        usage = held_out_usage(session, payer)
        if usage.remaining == 0:
            raise QuotaExceeded(
                f"held-out evaluations: {_who(payer)} used all {usage.limit} of the last 24 "
                f"hours (each submission, re-run and re-score is one){_when(usage.resets_at)}"
            )


def _check_phase(session: Session, payers: list[Payer], phase: Phase | None) -> None:
    if phase is None or phase.submission_quota is None:
        return
    for payer in payers:
        if phase_usage(session, payer, phase).remaining == 0:
            raise QuotaExceeded(
                f"phase {phase.slug!r}: {_who(payer)} used all {phase.submission_quota} "
                "submissions (re-runs count as submissions)"
            )


def check_submission(
    session: Session, *, user: User, phase: Phase | None, team_id: int | None = None
) -> None:
    """Raise :class:`QuotaExceeded` unless ``user`` may submit a version now (of an
    algorithm of team ``team_id``: unless the team may, too).

    Takes the user's lock (and the team's): the caller records the version in the same
    transaction.
    """
    if policy.is_admin(user):
        return
    payers = _payers(session, user, team_id)
    _check_phase(session, payers, phase)
    if get_settings().submissions_per_day is not None:
        for payer in payers:
            usage = submissions_usage(session, payer)
            if usage.remaining == 0:
                raise QuotaExceeded(
                    f"{_who(payer)} used all {usage.limit} submissions of the last 24 hours"
                    f"{_when(usage.resets_at)}"
                )
    _check_held_out(session, user, payers)


def check_evaluation(
    session: Session, *, user: User, algorithm_version: AlgorithmVersion, held_out: bool
) -> None:
    """Raise :class:`QuotaExceeded` unless ``user`` (and the algorithm's team) may start a
    full evaluation (a re-run or a requested one) of ``algorithm_version``; ``held_out``:
    on held-out data.

    Takes the user's lock (and the team's): the caller records the evaluation in the same
    transaction.
    """
    if policy.is_admin(user):
        return
    payers = _payers(session, user, algorithm_version.algorithm.team_id)
    _check_phase(session, payers, algorithm_version.phase)
    if held_out:
        _check_held_out(session, user, payers)


def evaluation_refusal(
    session: Session, *, user: User, algorithm_version: AlgorithmVersion, held_out: bool
) -> str | None:
    """Why :func:`check_evaluation` would refuse now, for a page that offers a re-run
    (no lock: a display, not a decision); None when it would not."""
    if policy.is_admin(user):
        return None
    team_id = algorithm_version.algorithm.team_id
    team = session.get(Team, team_id) if team_id is not None else None
    payers: list[Payer] = [user] if team is None else [user, team]
    try:
        _check_phase(session, payers, algorithm_version.phase)
        if held_out:
            _check_held_out(session, user, payers)
    except (QuotaExceeded, Forbidden) as exc:
        return exc.detail
    return None


def check_rescore(
    session: Session, *, user: User, held_out: bool, team_id: int | None = None
) -> None:
    """Raise :class:`QuotaExceeded` unless ``user`` (and team ``team_id``, the algorithm's)
    may re-score on held-out data now.

    Takes the user's lock (and the team's): the caller records the re-score in the same
    transaction.
    """
    if policy.is_admin(user) or not held_out:
        return
    _check_held_out(session, user, _payers(session, user, team_id))


def charged_team(user: User | None, algorithm: Algorithm) -> int | None:
    """The team a version or an evaluation of ``algorithm`` started by ``user`` is charged
    to (recorded on its row): the algorithm's team, for work a user started."""
    return algorithm.team_id if user is not None else None


@dataclass(frozen=True)
class Quotas:
    """Every quota of one user, as shown to them (no lock: a display, not a decision)."""

    exempt: bool
    held_out_runs: Usage
    submissions: Usage
    phases: list[tuple[Phase, Usage]]


def _quota_phases(session: Session) -> list[Phase]:
    """The open phases with a submission quota."""
    return list(
        session.scalars(
            select(Phase)
            .where(Phase.is_open.is_(True), Phase.submission_quota.is_not(None))
            .order_by(Phase.id)
        ).all()
    )


def team_quotas(session: Session, team: Team) -> Quotas:
    """What a team may still start (its members are held to their own limits as well)."""
    phases = _quota_phases(session)
    return Quotas(
        exempt=False,
        held_out_runs=held_out_usage(session, team),
        submissions=submissions_usage(session, team),
        phases=[(phase, phase_usage(session, team, phase)) for phase in phases],
    )


def quotas_of(session: Session, user: User) -> Quotas:
    """What ``user`` may still start: the daily limits and each open phase's quota."""
    phases = _quota_phases(session)
    return Quotas(
        exempt=policy.is_admin(user),
        held_out_runs=held_out_usage(session, user),
        submissions=submissions_usage(session, user),
        phases=[(phase, phase_usage(session, user, phase)) for phase in phases],
    )

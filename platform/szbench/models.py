"""Database models (SQLAlchemy 2, typed). The same schema serves PostgreSQL and SQLite.

The API's pydantic schemas live apart from these, per domain, in ``szbench.<domain>.schemas``.
Enumerations are stored as their string values (no native database enums) so that the
migrations stay identical on both backends and adding a value needs no type migration.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any, overload

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from szbench import clock

# Deterministic constraint names: Alembic can then alter them on SQLite (batch mode) and
# PostgreSQL alike, and autogenerate compares them reliably.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


@overload
def as_utc(moment: datetime) -> datetime: ...
@overload
def as_utc(moment: None) -> None: ...
def as_utc(moment: datetime | None) -> datetime | None:
    """A moment as every column holds it: timezone-aware UTC, a naive one taken to be UTC
    (a date typed into a form; what a column gives back is aware already)."""
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A moment, always timezone-aware UTC in Python, whatever the database.

    PostgreSQL keeps ``timestamptz`` and hands back aware values; SQLite (the embedded
    default) has no time zones and hands back naive ones, so a page comparing a stored time
    with the clock failed there alone ("can't compare offset-naive and offset-aware
    datetimes"). Values are stored as UTC; a naive value given is taken to be UTC already.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        return as_utc(value)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        return as_utc(value)


def utcnow(context: Any) -> datetime:
    """Column default: the database's time, on the inserting connection (:mod:`szbench.clock`:
    a host's own clock may be off by hours)."""
    return clock.column_default(context)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {dict[str, Any]: JSON, list[str]: JSON}


def _enum(cls: type[enum.Enum], length: int = 32) -> Enum:
    return Enum(
        cls,
        native_enum=False,
        create_constraint=False,
        length=length,
        values_callable=lambda members: [m.value for m in members],
    )


class Role(enum.StrEnum):
    ADMIN = "admin"
    RESEARCHER = "researcher"
    CENTRE = "centre"


class TeamRole(enum.StrEnum):
    OWNER = "owner"  # manages the members, deletes the team
    MEMBER = "member"  # sees the team's algorithms, submits and evaluates their versions


class Visibility(enum.StrEnum):
    PUBLIC = "public"
    PRIVATE = "private"


class DatasetKind(enum.StrEnum):
    # A public sample: recordings and annotations may be served to anyone signed in.
    PUBLIC_SAMPLE = "public_sample"
    # Held-out: recordings and annotations are never served to non-admins.
    HELD_OUT = "held_out"


class Disclosure(enum.StrEnum):
    """How much of what held-out annotations determine reaches non-admins.

    Ordered: each level shows what the one before it shows, and more. Public samples are
    always disclosed fully; see :mod:`szbench.disclosure`.
    """

    # Only the dataset-level figures (and how many recordings failed).
    AGGREGATE = "aggregate"
    # Per-subject figures too.
    SUBJECT = "subject"
    # Per-recording counts, outcomes and timelines too (e.g. once a phase is over).
    RECORDING = "recording"


class FailedRecordings(enum.StrEnum):
    """What a leaderboard makes of an evaluation in which some recordings failed (crashed,
    timeout, out_of_memory, no_output, invalid_output)."""

    # Shown apart, unranked: a failure is not a score.
    UNRANKED = "unranked"
    # Ranked, each failed recording scored as no detections (SzCORE's missing-file rule).
    NO_DETECTIONS = "no_detections"


class ReleaseRule(enum.StrEnum):
    """How a phase releases held-out scores to non-admins (see szbench.disclosure)."""

    # The scores as the disclosure level allows (rounded at the aggregate level).
    EXACT = "exact"
    # The Ladder (Blum & Hardt, ICML 2015): a submitter's released score changes only when a
    # submission beats their best by the phase's step, and is rounded to that step.
    LADDER = "ladder"


class VersionStatus(enum.StrEnum):
    """Lifecycle of an algorithm version."""

    PENDING = "pending"  # uploaded, waiting for the smoke test
    SMOKE_TESTING = "smoke_testing"
    ACTIVE = "active"  # passed the smoke test; runs on held-out data
    REJECTED = "rejected"  # failed the smoke test (the submitter's fault)
    RETIRED = "retired"  # no longer queued on new dataset versions


class EvaluationStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SCORING = "scoring"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self in (EvaluationStatus.DONE, EvaluationStatus.FAILED, EvaluationStatus.CANCELLED)


class EvaluationKind(enum.StrEnum):
    SMOKE_TEST = "smoke_test"  # the public sample recording, before held-out data
    FULL = "full"
    RESCORE = "rescore"  # stored detections scored again with other parameters


class RunOutcome(enum.StrEnum):
    """What happened to one recording. Mirrors the runner's outcomes, plus infra faults."""

    OK = "ok"
    TIMEOUT = "timeout"
    OUT_OF_MEMORY = "out_of_memory"
    CRASHED = "crashed"
    INVALID_OUTPUT = "invalid_output"
    NO_OUTPUT = "no_output"
    # Not the submitter's fault: retried, never counted against a quota.
    INFRASTRUCTURE_ERROR = "infrastructure_error"


#: Outcomes that are the algorithm's failure: its recording has no score of its own.
FAILED_OUTCOMES = (
    RunOutcome.TIMEOUT,
    RunOutcome.OUT_OF_MEMORY,
    RunOutcome.CRASHED,
    RunOutcome.INVALID_OUTPUT,
    RunOutcome.NO_OUTPUT,
)


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(320), unique=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    role: Mapped[Role] = mapped_column(_enum(Role), default=Role.RESEARCHER)
    password_hash: Mapped[str | None] = mapped_column(String(256))
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # When the password was last set: tokens (and so web sessions) made before then are void.
    password_changed_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Set when the user followed an e-mailed verification link (only with SMTP configured).
    email_verified_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    tokens: Mapped[list[ApiToken]] = relationship(back_populates="user")
    algorithms: Mapped[list[Algorithm]] = relationship(back_populates="owner")
    # Read by szbench.auth.policy (team members act for the team's algorithms).
    memberships: Mapped[list[TeamMember]] = relationship(back_populates="user")

    # Not a column. False on the object a request resolved from an admin's token that lacks
    # the admin scope (szbench.auth.dependencies): szbench.auth.policy then treats the user
    # as a researcher. Objects loaded outside a request (CLI, worker) keep the role's power.
    admin_scope = True


class SigninThrottle(Base):
    """Sign-in attempts per account or per client address (szbench.auth.throttle)."""

    __tablename__ = "signin_throttle"

    # sha256 of "account:<email>" or "client:<address>": no typed email is stored.
    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    last_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    blocked_until: Mapped[datetime | None] = mapped_column(UTCDateTime())


class ApiToken(Base):
    """A bearer token. Only a hash is stored; the secret is shown once, at creation."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(200), default="")
    # First characters of the secret, so a user can tell tokens apart in a list.
    prefix: Mapped[str] = mapped_column(String(16))
    token_hash: Mapped[str] = mapped_column(String(128), unique=True)
    scopes: Mapped[list[str]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    user: Mapped[User] = relationship(back_populates="tokens")


class Team(Base):
    """People who share algorithms: each member sees the team's algorithms and submits and
    evaluates their versions; held-out quotas count per team as well as per user."""

    __tablename__ = "teams"

    id: Mapped[int] = mapped_column(primary_key=True)
    # Not unique: only among the teams of one person (szbench.teams.service.create_team).
    name: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    members: Mapped[list[TeamMember]] = relationship(
        back_populates="team", order_by="TeamMember.added_at", cascade="all, delete-orphan"
    )


class TeamMember(Base):
    __tablename__ = "team_members"

    team_id: Mapped[int] = mapped_column(
        ForeignKey("teams.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True
    )
    role: Mapped[TeamRole] = mapped_column(_enum(TeamRole), default=TeamRole.MEMBER)
    added_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    team: Mapped[Team] = relationship(back_populates="members")
    user: Mapped[User] = relationship(back_populates="memberships")


class Phase(Base):
    """A challenge phase: its own submission quota, results hidden until published."""

    __tablename__ = "phases"

    id: Mapped[int] = mapped_column(primary_key=True)
    slug: Mapped[str] = mapped_column(String(100), unique=True)
    title: Mapped[str] = mapped_column(String(200), default="")
    hidden: Mapped[bool] = mapped_column(Boolean, default=False)
    # Submissions (algorithm versions) per user in this phase; None means unlimited.
    submission_quota: Mapped[int | None] = mapped_column(Integer)
    is_open: Mapped[bool] = mapped_column(Boolean, default=True)
    # Overrides the datasets' disclosure for evaluations of this phase's versions, on the
    # dataset versions it names (dataset_versions) only.
    disclosure: Mapped[Disclosure | None] = mapped_column(_enum(Disclosure))
    # Submissions are accepted from opens_at (inclusive) to closes_at (exclusive); None: no
    # bound on that side. is_open still closes a phase at once, whatever its dates.
    opens_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    closes_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # Overrides the datasets' failed-recordings rule for this phase's versions (on the
    # dataset versions it names).
    failed_recordings: Mapped[FailedRecordings | None] = mapped_column(_enum(FailedRecordings))
    # How held-out scores are released while the phase is open; None: the default (the
    # Ladder for a phase without a closing date, exact otherwise). A closed phase is exact.
    release_rule: Mapped[ReleaseRule | None] = mapped_column(_enum(ReleaseRule))
    # The Ladder's step; None: SZBENCH_LADDER_STEP.
    ladder_step: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    # The dataset versions this phase's rules (disclosure, failed recordings, release) apply
    # to: evaluations of its versions on any other data follow that data's own rules.
    dataset_versions: Mapped[list[DatasetVersion]] = relationship(
        secondary="phase_dataset_versions", order_by="DatasetVersion.id", back_populates="phases"
    )


class PhaseDatasetVersion(Base):
    """A dataset version a phase names (its rules apply there)."""

    __tablename__ = "phase_dataset_versions"

    phase_id: Mapped[int] = mapped_column(
        ForeignKey("phases.id", ondelete="CASCADE"), primary_key=True
    )
    dataset_version_id: Mapped[int] = mapped_column(
        ForeignKey("dataset_versions.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class Algorithm(Base):
    __tablename__ = "algorithms"
    __table_args__ = (UniqueConstraint("owner_id", "name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id"), index=True)
    # Its team's members act as its owner for seeing it and its versions' evaluations and
    # for submitting versions (szbench.auth.policy); editing it stays with the owner.
    # No foreign key on the team columns (here and on versions and evaluations): adding one
    # rebuilds the table on SQLite, whose cascades would then delete the rows that refer to
    # it; szbench.teams.service clears them when a team is deleted.
    team_id: Mapped[int | None] = mapped_column(Integer, index=True)
    name: Mapped[str] = mapped_column(String(100))
    title: Mapped[str] = mapped_column(String(200), default="")
    authors: Mapped[str] = mapped_column(String(500), default="")
    licence: Mapped[str] = mapped_column(String(100), default="")
    description: Mapped[str] = mapped_column(Text, default="")
    visibility: Mapped[Visibility] = mapped_column(_enum(Visibility), default=Visibility.PUBLIC)
    # http(s) links only (checked by the service), rendered as links on the pages.
    code_url: Mapped[str] = mapped_column(String(500), default="", server_default="")
    paper_url: Mapped[str] = mapped_column(String(500), default="", server_default="")
    # The owner's choice: clinical centres subscribed to this hub may run its public active
    # versions on their private data and publish signed results (szbench.federation).
    external_evaluation: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    # Withdrawn by its owner or an admin: off every leaderboard, its results kept and shown
    # on its own page.
    withdrawn_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Counts changes of what the read caches show about it (szbench.changes): bumped in the
    # transaction of every such change, part of the caches' keys.
    revision: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    owner: Mapped[User] = relationship(back_populates="algorithms")
    team: Mapped[Team | None] = relationship(
        primaryjoin="foreign(Algorithm.team_id) == Team.id", viewonly=True
    )
    versions: Mapped[list[AlgorithmVersion]] = relationship(
        back_populates="algorithm", order_by="AlgorithmVersion.id"
    )


class AlgorithmVersion(Base):
    __tablename__ = "algorithm_versions"
    __table_args__ = (UniqueConstraint("algorithm_id", "version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    algorithm_id: Mapped[int] = mapped_column(
        ForeignKey("algorithms.id", ondelete="CASCADE"), index=True
    )
    version: Mapped[str] = mapped_column(String(100))
    phase_id: Mapped[int | None] = mapped_column(ForeignKey("phases.id"), index=True)
    # sha256 content digest of the image (the image id for tarballs, the repo digest for pulls).
    image_digest: Mapped[str | None] = mapped_column(String(100), index=True)
    image_reference: Mapped[str | None] = mapped_column(String(500))
    # The manifest digest of the copy pushed to SZBENCH_REGISTRY (uploads only): workers on
    # other hosts pull it by this and check that the image id is image_digest.
    registry_digest: Mapped[str | None] = mapped_column(String(100))
    # Where an uploaded tarball is kept on the shared uploads volume (relative path).
    tarball_path: Mapped[str | None] = mapped_column(String(500))
    tarball_bytes: Mapped[int | None] = mapped_column(BigInteger)
    status: Mapped[VersionStatus] = mapped_column(
        _enum(VersionStatus), default=VersionStatus.PENDING, index=True
    )
    status_message: Mapped[str] = mapped_column(Text, default="")
    # Needs a GPU queue: set by the submitter, checked against the dataset's limits.
    wants_gpu: Mapped[bool] = mapped_column(Boolean, default=False)
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    # The team charged for it (its algorithm's team when it was made): quotas count it
    # against that team even after the algorithm or its submitter leaves the team.
    team_id: Mapped[int | None] = mapped_column(Integer, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    algorithm: Mapped[Algorithm] = relationship(back_populates="versions")
    phase: Mapped[Phase | None] = relationship()


class UploadState(enum.StrEnum):
    OPEN = "open"  # receiving bytes, or complete and not yet submitted
    REFUSED = "refused"  # its archive failed the check; its bytes are already deleted


class Upload(Base):
    """A resumable upload session. Its bytes are ``<uploads_dir>/sessions/<id>.part``; the
    row is deleted when a version is made from it (the atomic claim), deleted or swept."""

    __tablename__ = "uploads"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    filename: Mapped[str] = mapped_column(String(255))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    state: Mapped[UploadState] = mapped_column(_enum(UploadState), default=UploadState.OPEN)
    refused_because: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow, index=True)
    # When its archive was refused: a refused upload counts against its owner's open
    # sessions for SZBENCH_UPLOAD_REFUSAL_MEMORY_S from then (its bytes go at once).
    refused_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), nullable=True)


class Dataset(Base):
    __tablename__ = "datasets"

    id: Mapped[int] = mapped_column(primary_key=True)
    slug: Mapped[str] = mapped_column(String(100), unique=True)
    title: Mapped[str] = mapped_column(String(200), default="")
    description: Mapped[str] = mapped_column(Text, default="")
    # Shown on the dataset's page: the terms of use and how to cite it.
    licence: Mapped[str] = mapped_column(String(200), default="", server_default="")
    citation: Mapped[str] = mapped_column(Text, default="", server_default="")
    kind: Mapped[DatasetKind] = mapped_column(_enum(DatasetKind), default=DatasetKind.HELD_OUT)
    # Per-dataset run limits and queue (timeout_s, memory_bytes, cpus, gpu...), overriding
    # the worker's defaults; see szbench.config.
    run_limits: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # What non-admins see of results on held-out data (ignored for public samples).
    disclosure: Mapped[Disclosure] = mapped_column(
        _enum(Disclosure), default=Disclosure.AGGREGATE, server_default=Disclosure.AGGREGATE.value
    )
    # Whether evaluations with failed recordings rank (scored as no detections) or not.
    failed_recordings: Mapped[FailedRecordings] = mapped_column(
        _enum(FailedRecordings),
        default=FailedRecordings.UNRANKED,
        server_default=FailedRecordings.UNRANKED.value,
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    versions: Mapped[list[DatasetVersion]] = relationship(
        back_populates="dataset", order_by="DatasetVersion.id"
    )


class DatasetVersion(Base):
    __tablename__ = "dataset_versions"
    __table_args__ = (UniqueConstraint("dataset_id", "version"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_id: Mapped[int] = mapped_column(
        ForeignKey("datasets.id", ondelete="CASCADE"), index=True
    )
    version: Mapped[str] = mapped_column(String(100))
    # The prepared dataset folder (manifest.json, eeg/, annotations/) on the datasets volume.
    path: Mapped[str] = mapped_column(String(1000))
    manifest_checksum: Mapped[str] = mapped_column(String(100), default="")
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Counts changes of what the read caches show about it (szbench.changes): bumped in the
    # transaction of every such change, part of the caches' keys.
    revision: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    dataset: Mapped[Dataset] = relationship(back_populates="versions")
    recordings: Mapped[list[Recording]] = relationship(
        back_populates="dataset_version", order_by="Recording.id"
    )
    # The phases naming it: what a viewer learns of it follows all of them
    # (szbench.disclosure.facts).
    phases: Mapped[list[Phase]] = relationship(
        secondary="phase_dataset_versions", order_by="Phase.id", back_populates="dataset_versions"
    )


class Recording(Base):
    __tablename__ = "recordings"
    __table_args__ = (UniqueConstraint("dataset_version_id", "key"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    dataset_version_id: Mapped[int] = mapped_column(
        ForeignKey("dataset_versions.id", ondelete="CASCADE"), index=True
    )
    # The manifest's recording id, e.g. sub-01_ses-01_task-szMonitoring_run-00.
    key: Mapped[str] = mapped_column(String(300))
    subject: Mapped[str] = mapped_column(String(100), index=True)
    session: Mapped[str] = mapped_column(String(100), default="")
    run: Mapped[str] = mapped_column(String(100), default="")
    duration_s: Mapped[float] = mapped_column(Float)
    sfreq_hz: Mapped[float] = mapped_column(Float, default=256.0)
    source_checksum: Mapped[str] = mapped_column(String(100), default="")
    # sha256 of the standardised EDF: part of the idempotency key of every run on it.
    checksum: Mapped[str] = mapped_column(String(100), index=True)
    # Relative to the dataset version's path.
    eeg_path: Mapped[str] = mapped_column(String(1000))
    annotations_path: Mapped[str] = mapped_column(String(1000))
    # The reference annotations as registered (a few rows of TSV), so that a worker on a
    # host without the dataset's files scores without them; None: not read at registration.
    reference_tsv: Mapped[str | None] = mapped_column(Text)
    flags: Mapped[list[str]] = mapped_column(JSON, default=list)
    # Seizure events in the reference, counted at registration so the dataset page need not
    # read every annotation file; None for recordings registered before the count existed.
    seizures: Mapped[int | None] = mapped_column(Integer)

    dataset_version: Mapped[DatasetVersion] = relationship(back_populates="recordings")


class Evaluation(Base):
    """One algorithm version (image digest) on one dataset version, scored one way."""

    __tablename__ = "evaluations"
    __table_args__ = (Index("ix_evaluations_dv_status", "dataset_version_id", "status"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    algorithm_version_id: Mapped[int] = mapped_column(
        ForeignKey("algorithm_versions.id", ondelete="CASCADE"), index=True
    )
    dataset_version_id: Mapped[int] = mapped_column(
        ForeignKey("dataset_versions.id", ondelete="CASCADE"), index=True
    )
    kind: Mapped[EvaluationKind] = mapped_column(_enum(EvaluationKind), default=EvaluationKind.FULL)
    status: Mapped[EvaluationStatus] = mapped_column(
        _enum(EvaluationStatus), default=EvaluationStatus.QUEUED, index=True
    )
    image_digest: Mapped[str] = mapped_column(String(100))
    # For re-scores: the evaluation whose stored detections are scored again.
    source_evaluation_id: Mapped[int | None] = mapped_column(ForeignKey("evaluations.id"))
    scorer_version: Mapped[str] = mapped_column(String(100), default="")
    scoring_params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # True when scored with the SzCORE defaults: only those rank on the leaderboard.
    official: Mapped[bool] = mapped_column(Boolean, default=True)
    # May finished runs of other evaluations with the same (image digest, recording checksum,
    # scorer version) be reused? False for a re-run, which forces fresh container runs.
    reuse_runs: Mapped[bool] = mapped_column(Boolean, default=True, server_default="1")
    # Results of hidden phases are shown to their owner only until an admin publishes them.
    published: Mapped[bool] = mapped_column(Boolean, default=True)
    queue: Mapped[str] = mapped_column(String(50), default="cpu")
    recordings_total: Mapped[int] = mapped_column(Integer, default=0)
    recordings_done: Mapped[int] = mapped_column(Integer, default=0)
    # Submitter-safe summary of the failure, if any; the full story is in the runs' admin logs.
    message: Mapped[str] = mapped_column(Text, default="")
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    # The team charged for it, as on AlgorithmVersion.team_id.
    team_id: Mapped[int | None] = mapped_column(Integer, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # The reconciler (szbench_worker.reconcile): how many times in a row it had to send this
    # evaluation's work again without the evaluation progressing, when it last did, and the
    # recordings_done it saw then (progress since resets the count).
    reconcile_rounds: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    reconciled_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    reconcile_progress: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Counts changes of what the read caches show about it (szbench.changes): bumped in the
    # transaction of every such change, part of the caches' keys.
    revision: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    algorithm_version: Mapped[AlgorithmVersion] = relationship()
    dataset_version: Mapped[DatasetVersion] = relationship()
    runs: Mapped[list[RecordingRun]] = relationship(
        back_populates="evaluation", order_by="RecordingRun.id"
    )
    result: Mapped[DatasetResult | None] = relationship(back_populates="evaluation")
    subject_results: Mapped[list[SubjectResult]] = relationship(
        back_populates="evaluation", order_by="SubjectResult.subject"
    )


class RecordingRun(Base):
    """The algorithm on one recording: outcome, detections, counts and provenance.

    At most one per (evaluation, recording), so a retried task can never duplicate a result.
    Across evaluations a finished run is reused when (image digest, recording checksum,
    scorer version) match: the key is indexed for that lookup.
    """

    __tablename__ = "recording_runs"
    __table_args__ = (
        UniqueConstraint("evaluation_id", "recording_id"),
        Index(
            "ix_recording_runs_reuse_key", "image_digest", "recording_checksum", "scorer_version"
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    evaluation_id: Mapped[int] = mapped_column(
        ForeignKey("evaluations.id", ondelete="CASCADE"), index=True
    )
    recording_id: Mapped[int] = mapped_column(ForeignKey("recordings.id", ondelete="CASCADE"))
    image_digest: Mapped[str] = mapped_column(String(100))
    # The image the engine actually started for this result (the container's image id, or a
    # trusted local command's identity), set only when it is the evaluation's version's
    # image (szbench_worker.pipeline.attribution); None: no result, or one never reused.
    image_id: Mapped[str | None] = mapped_column(String(100))
    recording_checksum: Mapped[str] = mapped_column(String(100))
    scorer_version: Mapped[str] = mapped_column(String(100))
    outcome: Mapped[RunOutcome | None] = mapped_column(_enum(RunOutcome))
    exit_code: Mapped[int | None] = mapped_column(Integer)
    # The detailed reason (may quote what the algorithm wrote): for admins, and for the
    # owner on a public sample. Everyone else gets a fixed text per outcome at read time
    # (szbench.disclosure), so no byte of a held-out run's output reaches them.
    submitter_message: Mapped[str] = mapped_column(Text, default="")
    # Admins only: the bounded container log and the worker's own diagnostics.
    admin_log: Mapped[str] = mapped_column(Text, default="")
    # The algorithm's output TSV as produced (kept for re-scoring without a container run).
    detections_tsv: Mapped[str | None] = mapped_column(Text)
    # Was this row copied from an earlier run with the same reuse key?
    reused_from_id: Mapped[int | None] = mapped_column(ForeignKey("recording_runs.id"))
    attempts: Mapped[int] = mapped_column(Integer, default=0)

    event_tp: Mapped[int | None] = mapped_column(Integer)
    event_fp: Mapped[int | None] = mapped_column(Integer)
    event_fn: Mapped[int | None] = mapped_column(Integer)
    event_ref_true: Mapped[int | None] = mapped_column(Integer)
    sample_tp: Mapped[int | None] = mapped_column(Integer)
    sample_fp: Mapped[int | None] = mapped_column(Integer)
    sample_fn: Mapped[int | None] = mapped_column(Integer)
    sample_ref_true: Mapped[int | None] = mapped_column(Integer)
    num_samples: Mapped[int | None] = mapped_column(BigInteger)

    # Provenance.
    worker_host: Mapped[str] = mapped_column(String(200), default="")
    gpu_model: Mapped[str | None] = mapped_column(String(200))
    gpu_driver: Mapped[str | None] = mapped_column(String(100))
    wall_time_s: Mapped[float | None] = mapped_column(Float)
    peak_memory_bytes: Mapped[int | None] = mapped_column(BigInteger)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # The worker (WorkerHeartbeat.id) whose attempt claimed this run last; with started_at
    # it tells the reconciler whether an unfinished run is still being worked on.
    claimed_by: Mapped[str] = mapped_column(String(200), default="", server_default="")
    # When a worker gave this run up for a platform fault (its retries ran out on an
    # unreachable engine, a full disk, a lost database): no message of it is left anywhere,
    # so the reconciler sends it again on its next round instead of failing the evaluation.
    released_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    evaluation: Mapped[Evaluation] = relationship(back_populates="runs")
    recording: Mapped[Recording] = relationship()


class WorkerHeartbeat(Base):
    """A worker process's sign of life, written by its heartbeat thread every few seconds.

    ``id`` is ``<host>:<pid>.<start time>`` of the worker's main process: unique per worker
    instance, so a restarted worker is a new row and its predecessor's claims are told apart.
    ``run_ids`` are the runs it holds right now; ``free_since`` is when it last had a free slot
    without receiving a task (None while every slot is busy): a live worker that has been free
    for a while proves that its queues hold nothing, so unfinished work is lost, not waiting.
    ``fault`` says why the worker takes no runs now (``szbench_worker.health``: a sentence
    shown to everyone, so it names no address or path), None while it can run them;
    ``fault_kind`` what the host lacks (``engine``, ``work_dir``, ``recording_cache``,
    ``platform_api``, ``registry``, ``setting``), for metrics.
    """

    __tablename__ = "worker_heartbeats"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    host: Mapped[str] = mapped_column(String(200), index=True)
    node: Mapped[str] = mapped_column(String(200), default="")
    queues: Mapped[list[str]] = mapped_column(JSON, default=list)
    concurrency: Mapped[int] = mapped_column(Integer, default=1)
    run_ids: Mapped[list[int]] = mapped_column(JSON, default=list)
    free_since: Mapped[datetime | None] = mapped_column(UTCDateTime())
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    fault: Mapped[str | None] = mapped_column(String(500))
    fault_kind: Mapped[str | None] = mapped_column(String(40))


class _Metrics:
    """Event and sample metrics, NaN stored as NULL."""

    event_sensitivity: Mapped[float | None] = mapped_column(Float)
    event_precision: Mapped[float | None] = mapped_column(Float)
    event_f1: Mapped[float | None] = mapped_column(Float)
    event_fp_rate: Mapped[float | None] = mapped_column(Float)
    sample_sensitivity: Mapped[float | None] = mapped_column(Float)
    sample_precision: Mapped[float | None] = mapped_column(Float)
    sample_f1: Mapped[float | None] = mapped_column(Float)
    sample_fp_rate: Mapped[float | None] = mapped_column(Float)


class SubjectResult(_Metrics, Base):
    __tablename__ = "subject_results"
    __table_args__ = (UniqueConstraint("evaluation_id", "subject"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    evaluation_id: Mapped[int] = mapped_column(
        ForeignKey("evaluations.id", ondelete="CASCADE"), index=True
    )
    subject: Mapped[str] = mapped_column(String(100))
    recordings: Mapped[int] = mapped_column(Integer, default=0)
    # Summed counts, so pooled figures and re-aggregation need no per-recording scan.
    counts: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)

    evaluation: Mapped[Evaluation] = relationship(back_populates="subject_results")


class DatasetResult(_Metrics, Base):
    """The dataset-level figures: per-subject means (ranked on), their std, and pooled."""

    __tablename__ = "dataset_results"

    id: Mapped[int] = mapped_column(primary_key=True)
    evaluation_id: Mapped[int] = mapped_column(
        ForeignKey("evaluations.id", ondelete="CASCADE"), unique=True
    )
    subjects: Mapped[int] = mapped_column(Integer, default=0)
    recordings: Mapped[int] = mapped_column(Integer, default=0)
    missing_hypotheses: Mapped[int] = mapped_column(Integer, default=0)
    # The whole report: *_std, pooled metrics, bootstrap intervals, scorer parameters.
    report: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    evaluation: Mapped[Evaluation] = relationship(back_populates="result")


Index("ix_dataset_results_event_f1", DatasetResult.event_f1)
# The quota checks count one user's versions and evaluations of the last 24 hours.
Index("ix_evaluations_quota", Evaluation.created_by_id, Evaluation.created_at)
Index("ix_algorithm_versions_quota", AlgorithmVersion.created_by_id, AlgorithmVersion.created_at)


# --- notifications (szbench.notifications) --------------------------------------------------


class NotificationKind(enum.StrEnum):
    """What happened; each kind can be turned off per channel (docs/api.md)."""

    SMOKE_TEST_FAILED = "smoke_test_failed"
    EVALUATION_FINISHED = "evaluation_finished"
    EVALUATION_FAILED = "evaluation_failed"
    PHASE_OPENED = "phase_opened"
    PHASE_CLOSED = "phase_closed"
    # Asked for by its user ("send a test"): goes to them only, whatever their switches say.
    TEST = "test"


class NotificationChannel(enum.StrEnum):
    MAIL = "mail"
    WEBHOOK = "webhook"


class DeliveryStatus(enum.StrEnum):
    PENDING = "pending"  # waiting for its first attempt or its next retry
    DELIVERED = "delivered"
    FAILED = "failed"  # out of attempts, or refused (an address webhooks may not reach)


class NotificationPreferences(Base):
    """One user's notification switches and webhook; absent: every switch on, no webhook."""

    __tablename__ = "notification_preferences"

    user_id: Mapped[int] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    webhook_url: Mapped[str] = mapped_column(String(2000), default="")
    # Signs each webhook call (HMAC-SHA256); kept as is because signing needs it, shown to
    # its user once, when it is made.
    webhook_secret: Mapped[str] = mapped_column(String(200), default="")
    # "<channel>:<kind>" pairs the user turned off.
    muted: Mapped[list[str]] = mapped_column(JSON, default=list)
    # Phase events of every phase, not only of the phases the user submitted to.
    all_phases: Mapped[bool] = mapped_column(Boolean, default=False)


class NotificationEvent(Base):
    """Something worth telling, recorded in the transaction that made it happen."""

    __tablename__ = "notification_events"

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[NotificationKind] = mapped_column(_enum(NotificationKind))
    # One event per happening ("evaluation:12", "phase:3:2" for its second change...): a
    # second recording of the same happening is a no-op.
    key: Mapped[str] = mapped_column(String(200), unique=True)
    evaluation_id: Mapped[int | None] = mapped_column(
        ForeignKey("evaluations.id", ondelete="CASCADE")
    )
    algorithm_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("algorithm_versions.id", ondelete="CASCADE")
    )
    phase_id: Mapped[int | None] = mapped_column(ForeignKey("phases.id", ondelete="CASCADE"))
    # The one recipient of a test event.
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # When its deliveries were made (None: not yet; the notifications tick makes them).
    fanned_out_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), index=True)


class NotificationDelivery(Base):
    """The outbox: one event to one user on one channel, with every attempt's outcome."""

    __tablename__ = "notification_deliveries"
    __table_args__ = (UniqueConstraint("event_id", "user_id", "channel"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    event_id: Mapped[int] = mapped_column(
        ForeignKey("notification_events.id", ondelete="CASCADE"), index=True
    )
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    channel: Mapped[NotificationChannel] = mapped_column(_enum(NotificationChannel))
    status: Mapped[DeliveryStatus] = mapped_column(
        _enum(DeliveryStatus), default=DeliveryStatus.PENDING
    )
    # The JSON body sent (and what an e-mail says): composed once, so retries send the same.
    payload: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # When the next attempt is due (also a claimed attempt's lease); None once it is over.
    next_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), index=True)
    # Where the last attempt went (webhook URL or e-mail address) and what came back.
    target: Mapped[str] = mapped_column(String(2000), default="")
    last_status_code: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str] = mapped_column(String(500), default="")
    # The start of the receiver's answer, bounded (szbench.notifications.webhook).
    response_snippet: Mapped[str] = mapped_column(String(500), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_attempt_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class PhaseState(Base):
    """Whether a phase took submissions when the phase lifecycle last looked
    (:mod:`szbench.phases.lifecycle`), so that a phase opening or closing by its dates (no
    write marks that moment) is noticed once."""

    __tablename__ = "phase_states"

    phase_id: Mapped[int] = mapped_column(
        ForeignKey("phases.id", ondelete="CASCADE"), primary_key=True
    )
    # None: not looked at yet (phases that existed before notifications): the first look
    # records the state without an event.
    is_open: Mapped[bool | None] = mapped_column(Boolean)
    # Changes seen so far (each one a PhaseTransition, its seq the count), and the last one's time.
    changes: Mapped[int] = mapped_column(Integer, default=0)
    changed_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class PhaseTransition(Base):
    """A phase opening or closing for submissions, as the phase lifecycle noticed it: the
    event other domains consume (notifications tell of it as ``phase:<id>:<seq>``)."""

    __tablename__ = "phase_transitions"
    __table_args__ = (UniqueConstraint("phase_id", "seq"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    phase_id: Mapped[int] = mapped_column(ForeignKey("phases.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    opened: Mapped[bool] = mapped_column(Boolean)
    at: Mapped[datetime] = mapped_column(UTCDateTime())


# --- leaderboard snapshots (szbench.leaderboards.snapshots) ----------------------------------


class LeaderboardSnapshot(Base):
    """A leaderboard frozen as an anonymous visitor saw it, to be cited (docs/web-ui.md,
    "Snapshots"). Rows are never changed: the migration installs a trigger that refuses
    every UPDATE and DELETE, so a citation keeps pointing at the figures it quotes."""

    __tablename__ = "leaderboard_snapshots"

    id: Mapped[int] = mapped_column(primary_key=True)
    # RESTRICT: a cited board cannot vanish with its data (retire the version instead).
    dataset_version_id: Mapped[int] = mapped_column(
        ForeignKey("dataset_versions.id", ondelete="RESTRICT"), index=True
    )
    # Frozen copies of what the board was named by, so the snapshot reads alone.
    dataset: Mapped[str] = mapped_column(String(100))
    dataset_version: Mapped[str] = mapped_column(String(100))
    # sha256 of the canonical JSON of ``board`` (docs/api.md, "Snapshots").
    content_sha256: Mapped[str] = mapped_column(String(64))
    board: Mapped[dict[str, Any]] = mapped_column(JSON)
    # "admin" or "phase_closed" (taken when a phase naming the version closed).
    reason: Mapped[str] = mapped_column(String(32))
    # Plain values, not keys: a snapshot outlives the phase and the account (a key's
    # ON DELETE SET NULL would be an UPDATE, which the trigger refuses).
    phase: Mapped[str | None] = mapped_column(String(100))
    created_by_id: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


# --- federated evaluation (szbench.federation, docs/federation.md) ---------------------------


class KeyState(enum.StrEnum):
    """A centre's signing key as the hub holds it: only an active key signs new bundles."""

    ACTIVE = "active"
    RETIRED = "retired"  # rotated out: what it signed stays; nothing new is accepted
    REVOKED = "revoked"  # compromised: nothing new is accepted, its bundles are marked


class BundleKind(enum.StrEnum):
    RESULT = "result"
    WITHDRAWAL = "withdrawal"


class OutgoingState(enum.StrEnum):
    """A bundle at the centre: drafted, then sent (accepted by the hub) or refused."""

    DRAFT = "draft"  # prepared, waiting for an admin's approval (its bytes are final)
    SENT = "sent"
    REFUSED = "refused"  # the hub refused it (the answer is kept); a new draft may follow
    DISCARDED = "discarded"  # an admin chose not to send it


class Centre(Base):
    """Hub side: a clinical centre allowed to publish results here."""

    __tablename__ = "centres"

    id: Mapped[int] = mapped_column(primary_key=True)
    # The name the centre signs its bundles with (a slug).
    name: Mapped[str] = mapped_column(String(100), unique=True)
    title: Mapped[str] = mapped_column(String(200), default="")
    contact: Mapped[str] = mapped_column(String(320), default="")
    # The highest sequence number accepted from it: a bundle must carry a higher one.
    last_sequence: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    keys: Mapped[list[CentreKey]] = relationship(back_populates="centre", order_by="CentreKey.id")


class CentreKey(Base):
    """Hub side: a centre's Ed25519 public key (the centre alone holds the private key)."""

    __tablename__ = "centre_keys"

    id: Mapped[int] = mapped_column(primary_key=True)
    centre_id: Mapped[int] = mapped_column(ForeignKey("centres.id", ondelete="CASCADE"), index=True)
    # The raw 32-byte public key, base64url without padding.
    public_key: Mapped[str] = mapped_column(String(64))
    # sha256:<hex> of the raw key: how a bundle names its key, and what people compare.
    fingerprint: Mapped[str] = mapped_column(String(80), unique=True)
    state: Mapped[KeyState] = mapped_column(_enum(KeyState), default=KeyState.ACTIVE)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    retired_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

    centre: Mapped[Centre] = relationship(back_populates="keys")


class ExternalResult(Base):
    """Hub side: a verified bundle, stored as received (its bytes and signature); the
    columns beside them are read from those bytes for queries and are never edited, but
    ``withdrawn_*``, which a later withdrawal bundle of the same centre sets."""

    __tablename__ = "external_results"
    __table_args__ = (UniqueConstraint("centre_id", "sequence"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    centre_id: Mapped[int] = mapped_column(ForeignKey("centres.id"), index=True)
    key_id: Mapped[int] = mapped_column(ForeignKey("centre_keys.id"))
    sequence: Mapped[int] = mapped_column(Integer)
    kind: Mapped[BundleKind] = mapped_column(_enum(BundleKind))
    # The payload exactly as received (canonical JSON, UTF-8) and its Ed25519 signature.
    payload: Mapped[str] = mapped_column(Text)
    payload_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    signature: Mapped[str] = mapped_column(String(100))
    received_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # Results only: the version run and the centre's dataset, as the payload names them.
    algorithm_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("algorithm_versions.id"), index=True
    )
    dataset: Mapped[str] = mapped_column(String(100), default="")
    # Withdrawals only: the sequence of the result they withdraw.
    withdraws_sequence: Mapped[int | None] = mapped_column(Integer)
    withdrawn_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    withdrawn_by_sequence: Mapped[int | None] = mapped_column(Integer)

    centre: Mapped[Centre] = relationship()
    key: Mapped[CentreKey] = relationship()


class BundleRefusal(Base):
    """Hub side: refused bundles counted per claimed centre and reason (bounded: one row
    per pair, however many arrive)."""

    __tablename__ = "bundle_refusals"

    # The centre the bundle claimed to come from ("" when none could be read).
    centre: Mapped[str] = mapped_column(String(100), primary_key=True)
    reason: Mapped[str] = mapped_column(String(40), primary_key=True)
    count: Mapped[int] = mapped_column(Integer, default=0)
    last_detail: Mapped[str] = mapped_column(String(500), default="")
    last_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class HubSubscription(Base):
    """Centre side: the hub this centre runs public algorithms of and publishes to."""

    __tablename__ = "hub_subscriptions"

    id: Mapped[int] = mapped_column(primary_key=True)
    hub_url: Mapped[str] = mapped_column(String(500), unique=True)
    # The name the hub registered this centre under.
    centre_name: Mapped[str] = mapped_column(String(100))
    # Queue new versions the hub offers by themselves (else an admin follows each).
    follow_new: Mapped[bool] = mapped_column(Boolean, default=True)
    # The last sequence number given to a bundle.
    last_sequence: Mapped[int] = mapped_column(Integer, default=0)
    # The hub's registry, as its catalogue names it (images are pulled from it by digest).
    hub_registry: Mapped[str] = mapped_column(String(300), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    last_synced_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    last_sync_error: Mapped[str] = mapped_column(String(500), default="")


class FederatedDataset(Base):
    """Centre side: a private dataset the centre runs the hub's algorithms on."""

    __tablename__ = "federated_datasets"

    subscription_id: Mapped[int] = mapped_column(
        ForeignKey("hub_subscriptions.id", ondelete="CASCADE"), primary_key=True
    )
    dataset_id: Mapped[int] = mapped_column(
        ForeignKey("datasets.id", ondelete="CASCADE"), primary_key=True
    )
    # Send each result's bundle as soon as it is prepared, without an admin's approval.
    auto_publish: Mapped[bool] = mapped_column(Boolean, default=False)
    # Below this many subjects nothing is published from it.
    min_subjects: Mapped[int] = mapped_column(Integer, default=5)

    dataset: Mapped[Dataset] = relationship()


class HubVersion(Base):
    """Centre side: an algorithm version the hub offered, and its local copy."""

    __tablename__ = "hub_versions"
    __table_args__ = (UniqueConstraint("subscription_id", "hub_version_id"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    subscription_id: Mapped[int] = mapped_column(
        ForeignKey("hub_subscriptions.id", ondelete="CASCADE"), index=True
    )
    hub_version_id: Mapped[int] = mapped_column(Integer)
    hub_algorithm_id: Mapped[int] = mapped_column(Integer)
    algorithm: Mapped[str] = mapped_column(String(100))
    version: Mapped[str] = mapped_column(String(100))
    image_digest: Mapped[str] = mapped_column(String(100))
    # Pulled from the hub's registry by this manifest digest only.
    registry_digest: Mapped[str] = mapped_column(String(100))
    # In the hub's catalogue at the last sync (its author may stop offering it).
    offered: Mapped[bool] = mapped_column(Boolean, default=True)
    followed: Mapped[bool] = mapped_column(Boolean, default=False)
    algorithm_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("algorithm_versions.id", ondelete="SET NULL")
    )
    first_seen_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)

    algorithm_version: Mapped[AlgorithmVersion | None] = relationship()


class OutgoingBundle(Base):
    """Centre side: a bundle prepared for the hub. Its bytes are final once drafted: the
    approval page shows them, and approving sends exactly them."""

    __tablename__ = "outgoing_bundles"
    __table_args__ = (UniqueConstraint("subscription_id", "sequence"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    subscription_id: Mapped[int] = mapped_column(
        ForeignKey("hub_subscriptions.id", ondelete="CASCADE"), index=True
    )
    sequence: Mapped[int] = mapped_column(Integer)
    kind: Mapped[BundleKind] = mapped_column(_enum(BundleKind))
    evaluation_id: Mapped[int | None] = mapped_column(
        ForeignKey("evaluations.id", ondelete="SET NULL"), index=True
    )
    # For a withdrawal: the result bundle it withdraws.
    withdraws_id: Mapped[int | None] = mapped_column(ForeignKey("outgoing_bundles.id"))
    payload: Mapped[str] = mapped_column(Text)
    payload_sha256: Mapped[str] = mapped_column(String(64))
    signature: Mapped[str] = mapped_column(String(100))
    state: Mapped[OutgoingState] = mapped_column(
        _enum(OutgoingState), default=OutgoingState.DRAFT, index=True
    )
    auto: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    approved_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id"))
    sent_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    # The hub's answer to the last attempt (status and detail, bounded).
    hub_answer: Mapped[str] = mapped_column(String(1000), default="")
    withdrawn_at: Mapped[datetime | None] = mapped_column(UTCDateTime())

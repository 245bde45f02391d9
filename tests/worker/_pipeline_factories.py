"""Test data for the pipeline tests: tiny prepared datasets and the rows around them.

A *prepared* dataset here has the layout ``szbench dataset prepare`` writes (manifest.json,
eeg/, annotations/); its EDFs are minimal (one channel, header-exact) because the fake
runner only reads their duration. Real EEG is used by the end-to-end tests.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.orm import Session

from szbench.datasets.service import create_dataset, register_dataset_version
from szbench.models import (
    Algorithm,
    AlgorithmVersion,
    Base,
    DatasetKind,
    DatasetVersion,
    User,
    VersionStatus,
)

HEADER = "onset\tduration\teventType\tconfidence\tchannels\tdateTime\trecordingDuration\n"


def events_tsv(duration_s: float, seizures: Sequence[tuple[float, float]] = ()) -> str:
    """An SzCORE TSV: the seizures as ``(onset_s, duration_s)``, or one bckg row."""
    rows = [
        f"{onset:.1f}\t{dur:.1f}\tsz\tn/a\tn/a\t2020-01-01 00:00:00\t{duration_s:.1f}\n"
        for onset, dur in seizures
    ]
    if not rows:
        rows = [f"0.0\t{duration_s:.1f}\tbckg\tn/a\tn/a\t2020-01-01 00:00:00\t{duration_s:.1f}\n"]
    return HEADER + "".join(rows)


def write_tiny_edf(path: Path, duration_s: int, seed: int = 0) -> None:
    """A valid one-channel EDF of ``duration_s`` one-second records of 1 sample each."""

    def f(value: object, width: int) -> bytes:
        return str(value).ljust(width)[:width].encode("ascii")

    header = b"".join(
        [
            f(0, 8),
            f(f"X X X X seed{seed}", 80),
            f("Startdate 01-JAN-2020 X X X", 80),
            f("01.01.20", 8),
            f("00.00.00", 8),
            f(512, 8),
            f("", 44),
            f(duration_s, 8),
            f(1, 8),
            f(1, 4),
        ]
    )
    signal = b"".join(
        [
            f("Cz-Avg", 16),
            f("", 80),
            f("uV", 8),
            f(-100, 8),
            f(100, 8),
            f(-32768, 8),
            f(32767, 8),
            f("", 80),
            f(1, 8),
            f("", 32),
        ]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header + signal + bytes([seed % 256, 0]) * duration_s)


@dataclass
class Rec:
    subject: str
    run: str
    duration_s: int = 600
    seizures: tuple[tuple[float, float], ...] = ()

    @property
    def key(self) -> str:
        return f"{self.subject}_ses-01_task-szMonitoring_{self.run}"

    @property
    def edf_name(self) -> str:
        return f"{self.key}_eeg.edf"


def make_prepared_dataset(root: Path, recs: Sequence[Rec], seed: int = 0) -> Path:
    """Write a prepared dataset folder with ``recs`` and return it."""
    entries = []
    for i, rec in enumerate(recs):
        folder = f"{rec.subject}/ses-01/eeg"
        eeg = f"eeg/{folder}/{rec.edf_name}"
        ann = f"annotations/{folder}/{rec.key}_events.tsv"
        write_tiny_edf(root / eeg, rec.duration_s, seed=seed * 1000 + i)
        (root / ann).parent.mkdir(parents=True, exist_ok=True)
        (root / ann).write_text(events_tsv(rec.duration_s, rec.seizures))
        entries.append(
            {
                "id": rec.key,
                "subject": rec.subject,
                "session": "ses-01",
                "run": rec.run,
                "duration_s": float(rec.duration_s),
                "source_sfreq_hz": 256.0,
                "source_checksum": "",
                "checksum": "sha256:" + hashlib.sha256((root / eeg).read_bytes()).hexdigest(),
                "eeg_path": eeg,
                "annotations_path": ann,
                "flags": [],
            }
        )
    # The layout of `szbench dataset prepare` (docs/datasets.md).
    manifest = {
        "format": 1,
        "name": root.name,
        "created": "2026-01-01T00:00:00+00:00",
        "channels": ["Cz-Avg"],
        "sfreq_hz": 256,
        "recordings": entries,
    }
    (root / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return root


@dataclass
class World:
    user: User
    version: AlgorithmVersion
    dataset_version: DatasetVersion
    recs: list[Rec] = field(default_factory=list)


def seed_world(
    session: Session,
    prepared: Path,
    recs: Sequence[Rec],
    *,
    slug: str = "held",
    kind: DatasetKind = DatasetKind.HELD_OUT,
    digest: str = "sha256:" + "0" * 64,
    status: VersionStatus = VersionStatus.ACTIVE,
    run_limits: dict[str, object] | None = None,
) -> World:
    """A user, an algorithm version with ``digest`` and a registered dataset version."""
    user = session.query(User).filter_by(email="alice@example.org").one_or_none()
    if user is None:
        # Like an account the CLI makes: verified, so tests that turn mail on can still submit.
        user = User(email="alice@example.org", name="Alice", email_verified_at=datetime.now(UTC))
        session.add(user)
        session.flush()
    algorithm = session.query(Algorithm).filter_by(owner_id=user.id, name="algo").one_or_none()
    if algorithm is None:
        algorithm = Algorithm(owner_id=user.id, name="algo")
        session.add(algorithm)
        session.flush()
    version = AlgorithmVersion(
        algorithm_id=algorithm.id,
        version=f"v{session.query(AlgorithmVersion).count() + 1}",
        image_digest=digest,
        image_reference="szbench-test/algo:latest",
        status=status,
    )
    session.add(version)
    dataset = create_dataset(
        session, slug=slug, kind=kind, run_limits=run_limits, confirm_public=True
    )
    dv = register_dataset_version(session, dataset, version="1", prepared_path=prepared)
    session.flush()
    return World(user=user, version=version, dataset_version=dv, recs=list(recs))


def truncate_all(session: Session) -> None:
    """Empty every table (the pipeline tests commit for real), on PostgreSQL or SQLite."""
    if session.get_bind().dialect.name == "sqlite":
        # No TRUNCATE there: children first, and the ids start again at 1.
        for table in reversed(Base.metadata.sorted_tables):
            session.execute(text(f'DELETE FROM "{table.name}"'))
        if session.scalar(text("SELECT name FROM sqlite_master WHERE name = 'sqlite_sequence'")):
            session.execute(text("DELETE FROM sqlite_sequence"))
        return
    names = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
    session.execute(text(f"TRUNCATE {names} RESTART IDENTITY CASCADE"))

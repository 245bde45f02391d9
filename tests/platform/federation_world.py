"""A hub's world for the federation tests: a registered centre with its key, an offered
version, and signed bundles made the way a centre makes them (or forged)."""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy.orm import Session

from szbench.config import get_settings
from szbench.federation import bundles, service, signing
from szbench.models import AlgorithmVersion, Centre, Role

from . import factories as f

HUB = "http://127.0.0.1:9"


def hub_settings(settings_env: pytest.MonkeyPatch) -> None:
    settings_env.setenv("SZBENCH_PUBLIC_URL", HUB)
    settings_env.setenv("SZBENCH_REGISTRY", "127.0.0.1:5999")
    get_settings.cache_clear()


def key_text(key: Ed25519PrivateKey) -> str:
    return signing.b64url(signing.public_bytes(key.public_key()))


def fp(key: Ed25519PrivateKey) -> str:
    return signing.fingerprint(signing.public_bytes(key.public_key()))


def offered_version(session: Session, **algorithm: Any) -> AlgorithmVersion:
    owner = f.user(session)
    algorithm.setdefault("external_evaluation", True)
    algo = f.algorithm(session, owner, **algorithm)
    i = f.n()
    return f.version(session, algo, registry_digest=f"sha256:{i + 7:064x}")


def default_params() -> dict[str, Any]:
    from szbench_scoring import ScoringParams

    return dataclasses.asdict(ScoringParams())


@dataclass
class World:
    session: Session
    centre: Centre
    key: Ed25519PrivateKey
    version: AlgorithmVersion
    sequence: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    def result(self, **changes: Any) -> dict[str, Any]:
        """A valid result bundle's data, the next sequence; ``changes`` replace fields."""
        from szbench_scoring import SCORER_VERSION

        self.sequence += 1
        data: dict[str, Any] = {
            "format": bundles.FORMAT,
            "kind": "result",
            "hub": HUB,
            "centre": self.centre.name,
            "key": fp(self.key),
            "sequence": self.sequence,
            "created_at": bundles.timestamp(),
            "algorithm_version": {
                "hub_version_id": self.version.id,
                "image_digest": self.version.image_digest,
                "registry_digest": self.version.registry_digest,
            },
            "scorer": {"version": SCORER_VERSION, "params": default_params()},
            "dataset": {
                "name": "centre-eeg",
                "title": "Centre EEG 2026",
                "description": "Adult ICU recordings",
                "version": "1",
                "subjects": 12,
                "recordings": 40,
                "hours": 38.5,
                "montage": "19 channels of the 10-20 system, common average reference, 256 Hz",
                "standardisation": "szbench dataset prepare, manifest format 1",
                "manifest_sha256": "ab" * 32,
            },
            "release": {"level": "aggregate", "rule": "rounded", "decimals": 2, "min_subjects": 5},
            "figures": {
                "event_f1": 0.31,
                "event_sensitivity": 0.42,
                "event_precision": 0.25,
                "event_fp_rate": 3.1,
                "sample_f1": 0.2,
            },
            "failed_recordings": 0,
        }
        for name, value in changes.items():
            target = data
            *path, last = name.split("__")
            for part in path:
                target = target[part]
            target[last] = value
        return data

    def withdrawal(self, withdraws: int, reason: str = "a labelling error") -> dict[str, Any]:
        self.sequence += 1
        return {
            "format": bundles.FORMAT,
            "kind": "withdrawal",
            "hub": HUB,
            "centre": self.centre.name,
            "key": fp(self.key),
            "sequence": self.sequence,
            "created_at": bundles.timestamp(),
            "withdraws": withdraws,
            "reason": reason,
        }


def sign(data: dict[str, Any], key: Ed25519PrivateKey) -> tuple[bytes, str]:
    payload = bundles.encode(data)
    return payload, service.SIGNATURE_SCHEME + signing.sign(key, payload)


def world(session: Session, name: str | None = None) -> World:
    key = Ed25519PrivateKey.generate()
    centre = service.register_centre(
        session, name=name or f"centre-{f.n()}", public_key=key_text(key), contact="ops@c.example"
    )
    return World(session, centre, key, offered_version(session))


def admin_headers(session: Session) -> dict[str, str]:
    return f.headers(session, f.user(session, role=Role.ADMIN), ["read", "write", "admin"])


def digest(payload: bytes) -> str:
    return hashlib.sha256(payload).hexdigest()


def catalogue_of(session: Session) -> dict[str, Any]:
    """The hub's catalogue answer, as its route builds it (for centre-side tests)."""
    from szbench.algorithms.registry import repository

    repo = repository(get_settings())
    return {
        "hub": HUB,
        "registry": repo,
        "versions": [
            {
                "id": v.id,
                "algorithm_id": a.id,
                "algorithm": a.name,
                "title": a.title,
                "authors": a.authors,
                "version": v.version,
                "image_digest": v.image_digest,
                "registry_digest": v.registry_digest,
                "reference": f"{repo}@{v.registry_digest}",
            }
            for v, a in service.offered_versions(session)
        ],
    }

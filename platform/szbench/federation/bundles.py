"""The result bundle: what leaves a centre, as bytes, and the bounds the hub reads it with.

A bundle is one JSON object written in the JSON Canonicalization Scheme (RFC 8785, the
``rfc8785`` library): keys sorted by their UTF-16 code units, no blanks, numbers in their
shortest ECMAScript form, UTF-8. Those bytes are what the centre signs, what its approval
page shows, what goes over the wire as the request body, and what the hub stores. The hub
accepts only bytes that are already canonical (re-encoding what it parsed must give them
back), so one bundle has exactly one byte form: no duplicate keys, no NaN, no blanks that a
reader could take for something else.

Two kinds, version 1 (``"format": "szbench-bundle/1"``):

``result``
    ``hub`` (the hub's address), ``centre`` (its name at the hub), ``key`` (fingerprint of the
    signing key), ``sequence``, ``created_at``; ``algorithm_version`` (the hub's version id,
    its image id and registry manifest digest); ``scorer`` (version and parameters);
    ``dataset`` (name, title, description, version, subjects, recordings, hours, montage,
    standardisation, manifest sha256); ``release`` (the disclosure level, the rule it gives:
    ``rounded`` or ``exact``, the decimals and the centre's minimum of subjects);
    ``figures`` (dataset-level only) and ``failed_recordings``.
``withdrawal``
    the same header, then ``withdraws`` (the sequence of an earlier result of this centre)
    and ``reason``.

Every string and number is bounded here (:data:`MAX_BYTES` in all), so a hostile sender
costs the hub a bounded amount of work before a refusal.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

import rfc8785
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from szbench.errors import BadRequest

FORMAT = "szbench-bundle/1"
#: The largest bundle the hub reads (a result is under 3 KiB).
MAX_BYTES = 16 * 1024
#: The figures a bundle may carry (dataset-level, the leaderboard's metrics).
METRICS = (
    "event_sensitivity",
    "event_precision",
    "event_f1",
    "event_fp_rate",
    "sample_sensitivity",
    "sample_precision",
    "sample_f1",
    "sample_fp_rate",
)
DIGEST_PATTERN = r"^sha256:[0-9a-f]{64}$"
NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,99}$"

Digest = Annotated[str, StringConstraints(pattern=DIGEST_PATTERN)]
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]
Count = Annotated[int, Field(ge=0, le=10_000_000)]


def _text(limit: int) -> Any:
    return Annotated[str, StringConstraints(max_length=limit)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class VersionRef(_Strict):
    hub_version_id: Annotated[int, Field(ge=1, le=2**31 - 1)]
    image_digest: Digest
    registry_digest: Digest


class Scorer(_Strict):
    version: _text(100)  # type: ignore[valid-type]
    params: dict[_text(50), bool | int | float | _text(100) | None] = Field(  # type: ignore[valid-type]
        max_length=30
    )


class DatasetDescription(_Strict):
    name: Name
    title: _text(200)  # type: ignore[valid-type]
    description: _text(2000)  # type: ignore[valid-type]
    version: _text(100)  # type: ignore[valid-type]
    subjects: Count
    recordings: Count
    hours: Annotated[float, Field(ge=0, le=10_000_000)]
    montage: _text(300)  # type: ignore[valid-type]
    standardisation: _text(200)  # type: ignore[valid-type]
    manifest_sha256: _text(100)  # type: ignore[valid-type]


class Release(_Strict):
    level: Literal["aggregate", "subject", "recording"]
    rule: Literal["rounded", "exact"]
    decimals: Annotated[int, Field(ge=0, le=6)]
    min_subjects: Annotated[int, Field(ge=1, le=100_000)]


class _Header(_Strict):
    format: Literal["szbench-bundle/1"]
    hub: _text(500)  # type: ignore[valid-type]
    centre: Name
    key: Digest
    sequence: Annotated[int, Field(ge=1, le=2**31 - 1)]
    created_at: Annotated[str, StringConstraints(pattern=r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")]


class ResultBundle(_Header):
    kind: Literal["result"]
    algorithm_version: VersionRef
    scorer: Scorer
    dataset: DatasetDescription
    release: Release
    figures: dict[Literal[METRICS], float | int | None] = Field(max_length=len(METRICS))  # type: ignore[valid-type]
    failed_recordings: Count


class WithdrawalBundle(_Header):
    kind: Literal["withdrawal"]
    withdraws: Annotated[int, Field(ge=1, le=2**31 - 1)]
    reason: _text(500)  # type: ignore[valid-type]


Bundle = ResultBundle | WithdrawalBundle


class Malformed(BadRequest):
    """Bytes that are no bundle of this format (too large, not canonical, a field wrong)."""


def encode(data: dict[str, Any]) -> bytes:
    """``data`` in its one canonical byte form (RFC 8785)."""
    return bytes(rfc8785.dumps(data))


def timestamp(moment: datetime | None = None) -> str:
    """``created_at`` in the bundle's form: UTC to the second, ``Z``."""
    return (moment or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def decode(payload: bytes) -> Bundle:
    """The bundle these bytes are, else :class:`Malformed` naming what is wrong.

    Checks, in order: the size, UTF-8 JSON without NaN or Infinity, the canonical form
    (the bytes are exactly :func:`encode` of what they parse to), then every field.
    """
    if len(payload) > MAX_BYTES:
        raise Malformed(f"bundle: {len(payload)} bytes, more than the {MAX_BYTES} a bundle may be")
    try:
        data = json.loads(payload.decode("utf-8"), parse_constant=_refuse_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Malformed(f"bundle: not UTF-8 JSON ({str(exc)[:200]})") from None
    if not isinstance(data, dict):
        raise Malformed("bundle: not a JSON object")
    try:
        canonical = encode(data)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as exc:
        raise Malformed(f"bundle: cannot be canonicalised ({str(exc)[:200]})") from None
    if canonical != payload:
        raise Malformed(
            "bundle: not in canonical form (RFC 8785: sorted keys, no blanks, no duplicate "
            "keys, shortest numbers)"
        )
    kind = data.get("kind")
    model: type[ResultBundle] | type[WithdrawalBundle]
    if kind == "result":
        model = ResultBundle
    elif kind == "withdrawal":
        model = WithdrawalBundle
    else:
        raise Malformed(f"bundle.kind: {str(kind)[:40]!r} is neither 'result' nor 'withdrawal'")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "bundle"
        raise Malformed(f"bundle.{where}: {first['msg']}") from None


def header_claims(payload: bytes) -> tuple[str, int | None]:
    """The centre and sequence a payload claims, read leniently (for counting a refusal
    whatever is wrong with it); ``""`` and None when they cannot be read."""
    try:
        data = json.loads(payload[:MAX_BYTES].decode("utf-8", "replace"))
    except ValueError:
        return "", None
    if not isinstance(data, dict):
        return "", None
    centre = data.get("centre")
    sequence = data.get("sequence")
    name = centre if isinstance(centre, str) and re.match(NAME_PATTERN, centre) else ""
    return name, sequence if isinstance(sequence, int) else None

"""Deployment settings: the image allow-list and centre mode, read from the environment."""

from __future__ import annotations

import pytest

from szbench.config import Settings

DIGEST = "sha256:" + "ab" * 32
OTHER = "sha256:" + "cd" * 32


def test_empty_allow_list_admits_every_image() -> None:
    settings = Settings(allowed_images="")
    assert settings.image_is_allowed(digest=DIGEST, reference="anything/at:all")
    assert settings.image_is_allowed(digest=DIGEST)


@pytest.mark.parametrize(
    ("digest", "reference", "allowed"),
    [
        (DIGEST, None, True),  # a tarball upload whose digest is listed
        (OTHER, None, False),  # a tarball upload with another digest
        (OTHER, "localhost:5000/approved/detector:1.2", True),  # under the prefix
        (OTHER, f"localhost:5000/approved/detector@{OTHER}", True),
        (OTHER, "localhost:5000/approvedX/detector:1", False),  # prefix ends at the slash
        (OTHER, "evil.example/approved/detector:1", False),
        (None, None, False),
    ],
)
def test_digests_and_prefixes(digest: str | None, reference: str | None, allowed: bool) -> None:
    settings = Settings(allowed_images=f" localhost:5000/approved/ , {DIGEST} ,")
    assert settings.image_is_allowed(digest=digest, reference=reference) is allowed


def test_centre_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SZBENCH_CENTRE_MODE", "true")
    monkeypatch.setenv("SZBENCH_ALLOWED_IMAGES", DIGEST)
    settings = Settings()
    assert settings.centre_mode is True
    assert settings.image_is_allowed(digest=DIGEST)
    assert not settings.image_is_allowed(digest=OTHER, reference="localhost:5000/x:1")


def test_webhook_networks_must_be_networks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SZBENCH_WEBHOOK_ALLOWED_NETWORKS", "10.0.0.0/8, 192.168.1.300/32")
    with pytest.raises(ValueError, match=r"webhook_allowed_networks[\s\S]*'192.168.1.300/32'"):
        Settings()
    monkeypatch.setenv("SZBENCH_WEBHOOK_ALLOWED_NETWORKS", " 10.0.0.0/8 , fd00::/8 ,")
    assert Settings().webhook_allowed_networks.startswith(" 10.0.0.0/8")

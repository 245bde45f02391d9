"""Ed25519 keys and signatures for result bundles (the ``cryptography`` library).

A centre holds its private key in a file of its own (PKCS #8 PEM, mode 0600, under
``data_dir/federation/``), never in the database: a database backup then carries no key.
The hub holds only public keys, as the raw 32 bytes in base64url without padding; a key is
named by its fingerprint, ``sha256:<hex>`` of those raw bytes, which both sides show so that
people can compare them out of band.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from szbench.config import Settings, get_settings
from szbench.errors import BadRequest, Conflict

#: The key file of this centre, under ``data_dir``.
KEY_FILE = Path("federation") / "centre-key.pem"
#: Where a rotated-out key is kept (until the hub has retired it).
OLD_KEY_FILE = Path("federation") / "centre-key.old.pem"


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def unb64url(text: str, *, what: str) -> bytes:
    """base64url (padding optional) to bytes, else :class:`BadRequest` naming ``what``."""
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise BadRequest(f"{what}: not base64url") from None


def public_bytes(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(raw: bytes) -> str:
    """How a public key is named: ``sha256:`` and the hex digest of its 32 raw bytes.

    >>> fingerprint(bytes(32))[:23]
    'sha256:66687aadf862bd77'
    """
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def parse_public_key(text: str) -> bytes:
    """A public key as people paste it: base64url of the 32 raw bytes, or a PEM block.
    Returns the raw bytes; :class:`BadRequest` names what is wrong."""
    text = text.strip()
    if text.startswith("-----BEGIN"):
        try:
            key = serialization.load_pem_public_key(text.encode("ascii"))
        except (ValueError, UnicodeEncodeError):
            raise BadRequest("public_key: not a PEM public key") from None
        if not isinstance(key, Ed25519PublicKey):
            raise BadRequest("public_key: not an Ed25519 key")
        return public_bytes(key)
    raw = unb64url(text, what="public_key")
    if len(raw) != 32:
        raise BadRequest(f"public_key: an Ed25519 key is 32 bytes, this is {len(raw)}")
    return raw


def sign(key: Ed25519PrivateKey, payload: bytes) -> str:
    """The signature of ``payload``, base64url (Ed25519 is deterministic: the same key and
    bytes give the same signature, so a draft's signature is final)."""
    return b64url(key.sign(payload))


def verify(raw_public_key: bytes, payload: bytes, signature: str) -> bool:
    """Whether ``signature`` (base64url) is ``payload`` signed by that key."""
    try:
        sig = unb64url(signature, what="signature")
    except BadRequest:
        return False
    if len(sig) != 64:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(raw_public_key).verify(sig, payload)
    except (InvalidSignature, ValueError):
        return False
    return True


# --- the centre's key file ---------------------------------------------------------------------


def key_path(settings: Settings | None = None) -> Path:
    return (settings or get_settings()).data_dir / KEY_FILE


def _write_private(path: Path, key: Ed25519PrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # Made 0600 before a byte is written: the key is never readable by others, not even
    # for a moment.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)


def generate(settings: Settings | None = None, *, rotate: bool = False) -> Ed25519PrivateKey:
    """Make this centre's key file; with ``rotate`` the current key moves to the old key's
    file first (the hub retires it once the new one is registered). Refuses to overwrite."""
    path = key_path(settings)
    if path.exists():
        if not rotate:
            raise Conflict(
                f"{path} exists already: this centre has a key (rotate it with --rotate)"
            )
        path.replace(path.with_name(OLD_KEY_FILE.name))
    key = Ed25519PrivateKey.generate()
    _write_private(path, key)
    return key


def load(settings: Settings | None = None) -> Ed25519PrivateKey:
    """This centre's private key; :class:`Conflict` when there is none or it is unusable."""
    path = key_path(settings)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise Conflict(
            "this centre has no signing key yet: run `szbench centre keygen` and give the "
            "public key it prints to the hub's admins"
        ) from None
    key = serialization.load_pem_private_key(data, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise Conflict(f"{path} does not hold an Ed25519 key")
    return key


def own_public_key(settings: Settings | None = None) -> tuple[str, str]:
    """This centre's public key (base64url) and its fingerprint."""
    raw = public_bytes(load(settings).public_key())
    return b64url(raw), fingerprint(raw)

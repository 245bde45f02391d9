"""Password hashing with the standard library's scrypt (no extra dependency).

Hashes are stored as ``scrypt$N$r$p$<salt b64>$<hash b64>`` so the cost can be raised
later: :func:`needs_rehash` tells when a stored hash is cheaper than the current setting.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

_R = 8
_P = 1
_DKLEN = 32


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def hash_password(password: str, *, n: int = 2**14) -> str:
    """Hash ``password`` with a fresh 16-byte salt."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=n, r=_R, p=_P, dklen=_DKLEN, maxmem=256 * 1024**2
    )
    return f"scrypt${n}${_R}${_P}${_b64(salt)}${_b64(digest)}"


def verify_password(password: str, stored: str | None) -> bool:
    """True when ``password`` matches ``stored``; False for a missing or malformed hash."""
    if not stored:
        return False
    try:
        scheme, n_s, r_s, p_s, salt_s, hash_s = stored.split("$")
        if scheme != "scrypt":
            return False
        salt = base64.b64decode(salt_s)
        expected = base64.b64decode(hash_s)
        digest = hashlib.scrypt(
            password.encode("utf-8"),
            salt=salt,
            n=int(n_s),
            r=int(r_s),
            p=int(p_s),
            dklen=len(expected),
            maxmem=256 * 1024**2,
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(digest, expected)


def needs_rehash(stored: str, *, n: int) -> bool:
    try:
        return int(stored.split("$")[1]) < n
    except (IndexError, ValueError):
        return True

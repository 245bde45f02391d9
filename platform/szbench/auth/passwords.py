"""Password hashing with the standard library's scrypt, and the rules a new password meets.

Hashes are stored as ``scrypt$N$r$p$<salt b64>$<hash b64>`` so the cost can be raised
later: :func:`needs_rehash` tells when a stored hash is cheaper than the current setting.
:func:`dummy_hash` is a well-formed hash that no password matches: checking a password
against it costs what checking a real one does, so a sign-in for an unknown email takes as
long as one for a known email (no timing tells which emails have accounts).

:func:`check_new_password` refuses short passwords and common ones. The common ones are
the 30,000 most frequent of zxcvbn's password list (a maintained package): lists typed by
hand go stale, and that one is what zxcvbn itself scores passwords against.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from functools import lru_cache

from szbench.errors import BadRequest

_R = 8
_P = 1
_DKLEN = 32


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _scrypt(password: str, *, salt: bytes, n: int, r: int, p: int, dklen: int) -> bytes:
    # The one place that pays the cost (tests count calls here).
    return hashlib.scrypt(
        password.encode("utf-8"), salt=salt, n=n, r=r, p=p, dklen=dklen, maxmem=256 * 1024**2
    )


def hash_password(password: str, *, n: int = 2**14) -> str:
    """Hash ``password`` with a fresh 16-byte salt."""
    salt = secrets.token_bytes(16)
    digest = _scrypt(password, salt=salt, n=n, r=_R, p=_P, dklen=_DKLEN)
    return f"scrypt${n}${_R}${_P}${_b64(salt)}${_b64(digest)}"


@lru_cache
def dummy_hash(n: int) -> str:
    """A hash of cost ``n`` that no password matches (random bytes, not a digest)."""
    return (
        f"scrypt${n}${_R}${_P}${_b64(secrets.token_bytes(16))}${_b64(secrets.token_bytes(_DKLEN))}"
    )


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
        digest = _scrypt(
            password, salt=salt, n=int(n_s), r=int(r_s), p=int(p_s), dklen=len(expected)
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(digest, expected)


def needs_rehash(stored: str, *, n: int) -> bool:
    try:
        return int(stored.split("$")[1]) < n
    except (IndexError, ValueError):
        return True


@lru_cache(maxsize=1)
def common_passwords() -> frozenset[str]:
    """The blocklist: zxcvbn's 30,000 most common passwords, lower case."""
    from zxcvbn.frequency_lists import FREQUENCY_LISTS  # 1 MB of lists: load on first use

    return frozenset(word.lower() for word in FREQUENCY_LISTS["passwords"])


def check_new_password(password: str, *, min_length: int, email: str | None = None) -> None:
    """Refuse a password that is short, blank, one character repeated, the account's email
    (or its part before the @), or one of :func:`common_passwords`; :class:`BadRequest`
    names the field and the rule."""
    if len(password) < min_length:
        raise BadRequest(f"password: must be at least {min_length} characters")
    folded = password.strip().lower()
    if len(set(folded)) <= 1:
        raise BadRequest("password: must not be blank or one character repeated")
    if email and folded in {email.strip().lower(), email.strip().lower().split("@")[0]}:
        raise BadRequest("password: must not be your email address")
    if folded in common_passwords() or password.lower() in common_passwords():
        raise BadRequest("password: is one of the most common passwords; choose another")

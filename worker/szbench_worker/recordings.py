"""Where a run's recording comes from, on any host.

On the main host (or wherever the dataset version's folder is mounted at the registered
path) the file is read in place, never copied. A worker on another host fetches it from
the platform by its checksum (``GET /api/v1/worker/recordings/{sha256}``, a worker token,
resumable with ``Range``) into a content-addressed cache under
``SZBENCH_RECORDING_CACHE_DIR``, capped at ``SZBENCH_RECORDING_CACHE_BYTES`` with the
least recently used entries evicted first. Every run verifies the cached file's sha256
first: an entry that does not match (a flipped bit, a tampered file) is deleted and
fetched again. The run's staging then hard-links the cached file (it is read-only), so a
run costs no copy and an eviction during a run does not pull the file from under it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import requests

from szbench.config import Settings
from szbench_worker.runner import RunnerError

log = logging.getLogger(__name__)

_CHUNK = 1024**2
#: Fetch attempts per recording and run (each resumes where the last one stopped).
_ATTEMPTS = 3


class RecordingUnavailable(RunnerError):
    """The recording cannot be had on this host now (the platform's fault, retried)."""


@dataclass(frozen=True)
class Located:
    """The file to stage for a run, and how it was had: ``"in place"``, ``"cache"`` (a
    verified entry) or ``"fetched"`` (``fetched_bytes`` over the network)."""

    path: Path
    source: str
    fetched_bytes: int = 0


def _hex(checksum: str) -> str:
    digest = checksum.removeprefix("sha256:")
    if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        raise RecordingUnavailable(f"recording checksum {checksum!r} is not sha256:<64 hex>")
    return digest


def file_sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return "sha256:" + hashlib.file_digest(fh, "sha256").hexdigest()


def check_platform_url(url: str) -> str:
    """``url`` without a trailing slash; plain http only to a loopback address (held-out
    recordings cross the network over TLS)."""
    parts = urlsplit(url)
    if parts.scheme == "https":
        return url.rstrip("/")
    host = parts.hostname or ""
    loopback = host == "localhost"
    with contextlib.suppress(ValueError):
        loopback = loopback or ipaddress.ip_address(host).is_loopback
    if parts.scheme == "http" and loopback:
        return url.rstrip("/")
    raise RecordingUnavailable(
        f"SZBENCH_PLATFORM_URL={url!r}: held-out recordings are fetched over https:// only "
        "(plain http:// to a loopback address for tests)"
    )


class RecordingCache:
    """A content-addressed, size-capped, least-recently-used cache of recording files."""

    def __init__(self, root: Path, cap_bytes: int) -> None:
        self.root = root
        self.cap_bytes = cap_bytes

    def path_for(self, checksum: str) -> Path:
        return self.root / "sha256" / _hex(checksum)

    def _partial(self, checksum: str) -> Path:
        return self.root / "partial" / _hex(checksum)

    @contextlib.contextmanager
    def _locked(self, checksum: str) -> Iterator[None]:
        # Two worker processes of one host wanting one recording fetch it once.
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with (locks / _hex(checksum)).open("a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def get(self, checksum: str, fetch: Fetcher) -> Located:
        """The verified cached file for ``checksum``, fetched when absent or corrupt."""
        path = self.path_for(checksum)
        checksum = "sha256:" + _hex(checksum)
        with self._locked(checksum):
            if path.exists():
                if file_sha256(path) == checksum:
                    os.utime(path)  # its last use, which eviction goes by
                    return Located(path, "cache")
                log.warning(
                    "cached recording %s does not match its checksum (corrupt or tampered): "
                    "deleted, fetched again",
                    checksum,
                )
                path.unlink()
            fetched = self._fetch(checksum, fetch)
        self.evict(keep=path)
        return Located(path, "fetched", fetched)

    def _fetch(self, checksum: str, fetch: Fetcher) -> int:
        partial = self._partial(checksum)
        partial.parent.mkdir(parents=True, exist_ok=True)
        fetched = 0
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                fetched += fetch.into(checksum, partial)
                break
            except (requests.RequestException, OSError) as exc:
                log.warning("fetching recording %s (attempt %s): %s", checksum, attempt, exc)
                if attempt == _ATTEMPTS:
                    raise RecordingUnavailable(
                        f"recording {checksum} could not be fetched from the platform: {exc}"
                    ) from exc
        got = file_sha256(partial)
        if got != checksum:
            partial.unlink()
            raise RecordingUnavailable(f"recording {checksum}: the platform sent {got}")
        path = self.path_for(checksum)
        path.parent.mkdir(parents=True, exist_ok=True)
        # World-readable and read-only: staging hard-links it for a (remapped) container uid.
        partial.chmod(0o444)
        partial.replace(path)
        log.info("fetched recording %s (%s bytes) into the cache", checksum, fetched)
        return fetched

    def entries(self) -> list[tuple[float, int, Path]]:
        """``(last use, size, path)`` of every cached file."""
        found = []
        with contextlib.suppress(FileNotFoundError), os.scandir(self.root / "sha256") as it:
            for entry in it:
                with contextlib.suppress(FileNotFoundError):
                    st = entry.stat()
                    found.append((st.st_mtime, st.st_size, Path(entry.path)))
        return found

    def evict(self, *, keep: Path | None = None) -> list[Path]:
        """Delete the least recently used files until the cache is within its cap (never
        ``keep``, the file a run is about to use); the deleted paths."""
        found = sorted(self.entries())
        total = sum(size for _, size, _ in found)
        gone = []
        for _, size, path in found:
            if total <= self.cap_bytes:
                break
            if path == keep:
                continue
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                gone.append(path)
                total -= size
        if gone:
            log.info("recording cache over its cap: evicted %s file(s)", len(gone))
        return gone


class Fetcher:
    """Fetches recordings from the platform with the worker token, resuming with Range."""

    def __init__(self, base_url: str, token: str, timeout_s: float) -> None:
        self.base_url = check_platform_url(base_url)
        self.token = token
        self.timeout_s = timeout_s

    def into(self, checksum: str, partial: Path) -> int:
        """Append the rest of ``checksum``'s bytes to ``partial``; the bytes received."""
        have = partial.stat().st_size if partial.exists() else 0
        headers = {"Authorization": f"Bearer {self.token}"}
        if have:
            headers["Range"] = f"bytes={have}-"
        url = f"{self.base_url}/api/v1/worker/recordings/{quote(checksum, safe='')}"
        with requests.get(url, headers=headers, stream=True, timeout=self.timeout_s) as response:
            if response.status_code == 416 and have:
                return 0  # already whole: the checksum check decides
            if response.status_code not in (200, 206):
                raise requests.HTTPError(
                    f"HTTP {response.status_code}: {response.text[:300]}", response=response
                )
            mode = "ab" if response.status_code == 206 else "wb"
            received = 0
            with partial.open(mode) as fh:
                for chunk in response.iter_content(_CHUNK):
                    fh.write(chunk)
                    received += len(chunk)
            return received


def cache_for(settings: Settings) -> RecordingCache:
    return RecordingCache(settings.effective_recording_cache_dir, settings.recording_cache_bytes)


def locate(in_place: Path, checksum: str, settings: Settings) -> Located:
    """The file to run on: ``in_place`` when this host has it, else the cache's copy."""
    if in_place.is_file():
        return Located(in_place, "in place")
    if not (settings.platform_url and settings.worker_token):
        raise RecordingUnavailable(
            f"{in_place.name} is not on this host, and SZBENCH_PLATFORM_URL and "
            "SZBENCH_WORKER_TOKEN are not both set to fetch it"
        )
    fetcher = Fetcher(
        settings.platform_url, settings.worker_token, settings.recording_fetch_timeout_s
    )
    return cache_for(settings).get(checksum, fetcher)

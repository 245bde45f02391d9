"""Where a run's recording comes from, on any host.

On the main host (or wherever the dataset version's folder is mounted at the registered
path) the file is read in place, never copied. A worker on another host fetches it from
the platform by its checksum (``GET /api/v1/worker/recordings/{sha256}``, a worker token,
resumable with ``Range``) into a content-addressed cache under
``SZBENCH_RECORDING_CACHE_DIR``.

The cache trusts only its own regular files (issue 29.7). Its folders are the worker's own
(no symbolic link, nobody else may write them); an entry is opened without following a link
(``O_NOFOLLOW``, and non-blocking, so a FIFO planted there cannot hang the worker), and is
used only when it is a regular file of the worker's uid that nobody else may write and that
has no hard link the cache did not make. Its sha256 is computed on that open descriptor,
and the very file verified is what the run stages: the cache links it, from the
descriptor, as ``in-use/<sha256>/<use>/<recording's name>``, and the runner hard-links that
into the run's ``data/`` (no copy). No path is resolved again between the check and the
use, so nothing swapped in meanwhile reaches a container. A use holds a lock for its whole
run; an entry in use is never evicted.

Size: least recently used entries go first, past ``SZBENCH_RECORDING_CACHE_BYTES``, or,
when that is empty (the default), whenever the disk's free space would fall under a reserve
(``SZBENCH_WORKER_MIN_FREE_BYTES`` plus 5% of the disk): the cache takes what the disk has,
never what the runs need. A fetch that meets a full disk (``ENOSPC``) evicts and goes on;
only when nothing is left to evict does it fail, saying that the disk is full
(:func:`cache_fault` says it before a run is taken).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import ipaddress
import logging
import os
import shutil
import stat
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import requests

from szbench.config import Settings
from szbench_worker.runner import RunnerError

log = logging.getLogger(__name__)

_CHUNK = 1024**2
#: Fetch attempts per recording and run (each resumes where the last one stopped); a full
#: disk is not an attempt (it evicts and goes on).
_ATTEMPTS = 3
#: Seconds a fetch waits for the next bytes before it gives this attempt up and resumes where
#: it stopped: a minute rides out a busy platform or a congested link, and a stalled
#: connection costs a run a minute, not its time limit. A tuning knob, not a setting.
FETCH_STALL_TIMEOUT_S = 60.0
#: Of the disk's size, what the derived cap leaves free beside the worker's own floor
#: (``SZBENCH_WORKER_MIN_FREE_BYTES``), for whatever else writes there.
_HEADROOM_FRACTION = 0.05
#: Room a fetch needs beside the reserve before the cache calls its disk full: more than
#: a standardised one-hour recording (35 MB).
_ROOM_FOR_ONE_BYTES = 64 * 1024**2
_OPEN_ENTRY = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OPEN_PARTIAL = os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OPEN_LOCK = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FULL = (errno.ENOSPC, errno.EDQUOT)


class RecordingUnavailable(RunnerError):
    """The recording cannot be had on this host now (the platform's fault, retried)."""


@dataclass(frozen=True)
class Located:
    """The file to stage for a run, and how it was had: ``"in place"``, ``"cache"`` (a
    verified entry) or ``"fetched"`` (``fetched_bytes`` over the network)."""

    path: Path
    source: str
    fetched_bytes: int = 0


@dataclass(frozen=True)
class CacheSpace:
    """The cache's disk: ``free_bytes`` now, ``reserve_bytes`` the cache leaves free,
    ``cached_bytes`` in entries, ``evictable_bytes`` of them not in use."""

    free_bytes: int
    reserve_bytes: int
    cached_bytes: int
    evictable_bytes: int

    @property
    def usable_bytes(self) -> int:
        """What a new fetch may fill: free space past the reserve, once the entries not in
        use are evicted."""
        return self.free_bytes + self.evictable_bytes - self.reserve_bytes


def _hex(checksum: str) -> str:
    digest = checksum.removeprefix("sha256:")
    if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
        raise RecordingUnavailable(f"recording checksum {checksum!r} is not sha256:<64 hex>")
    return digest


def _fd_sha256(fd: int) -> str:
    """The sha256 of the whole file open as ``fd`` (positional reads: no shared offset)."""
    h = hashlib.sha256()
    offset = 0
    while chunk := os.pread(fd, _CHUNK, offset):
        h.update(chunk)
        offset += len(chunk)
    return "sha256:" + h.hexdigest()


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


def _untrusted_file(st: os.stat_result) -> str | None:
    """Why a file the cache opened is not its own (type, owner, others' write bits)."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not the worker's"
    if st.st_mode & 0o022:
        return f"writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _untrusted_dir(st: os.stat_result) -> str | None:
    """Why a folder of the cache is not its own (a link, another owner, others may write)."""
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory (a symbolic link?)"
    if st.st_uid != os.geteuid():
        return f"owned by uid {st.st_uid}, not the worker's"
    if st.st_mode & 0o022:
        return f"writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


class _Sink:
    """Where a fetch writes: appends to the partial file open as ``fd``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def write(self, data: bytes) -> None:
        """All of ``data`` (a short write on a filling disk leaves exactly what it wrote:
        the next fetch resumes from the file's size)."""
        view = memoryview(data)
        while view:
            n = os.write(self.fd, view)
            if n == 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            view = view[n:]

    def restart(self) -> None:
        """Drop what was written (the platform sent the whole file again)."""
        os.ftruncate(self.fd, 0)


class RecordingCache:
    """A content-addressed, least-recently-used cache of recording files that trusts only
    its own regular files (see the module).

    ``cap_bytes``: the most its entries may hold; None: derived from the disk's free space,
    keeping ``min_free_bytes`` plus 5% of the disk free.
    """

    def __init__(
        self, root: Path, cap_bytes: int | None = None, *, min_free_bytes: int = 0
    ) -> None:
        self.root = root
        self.cap_bytes = cap_bytes
        self.min_free_bytes = min_free_bytes

    def path_for(self, checksum: str) -> Path:
        return self.root / "sha256" / _hex(checksum)

    # --- its own folders ---------------------------------------------------------------

    def _dir(self, *parts: str) -> Path:
        """A folder of the cache, made if missing, and refused unless it is the worker's
        own: a real directory (no link), its uid, nobody else may write it."""
        path = self.root.joinpath(*parts)
        try:
            self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
            for depth in range(1, len(parts) + 1):
                folder = self.root.joinpath(*parts[:depth])
                with contextlib.suppress(FileExistsError):
                    folder.mkdir(mode=0o700)
                why = _untrusted_dir(folder.lstat())
                if why is not None:
                    raise RecordingUnavailable(
                        f"the recording cache's folder {folder} is {why}: only the worker's "
                        "own folders are used (remove it, or fix its owner and mode)"
                    )
        except OSError as exc:
            raise self._disk_error(exc) from exc
        return path

    def _disk_error(self, exc: OSError) -> RecordingUnavailable:
        if exc.errno in _FULL:
            return RecordingUnavailable(self._full_message())
        return RecordingUnavailable(f"the recording cache ({self.root}) cannot be used: {exc}")

    def _full_message(self) -> str:
        free = self._statvfs_free()
        return (
            f"the recording cache's disk ({self.root}) is full ({free // 2**20} MiB free) and "
            "nothing in it can be evicted (every cached recording is in use): free space "
            "there, or give SZBENCH_RECORDING_CACHE_DIR a larger disk"
        )

    def _statvfs_free(self) -> int:
        st = os.statvfs(self.root)
        return st.f_bavail * st.f_frsize

    @contextlib.contextmanager
    def _locked(self, checksum: str, *, blocking: bool = True) -> Iterator[bool]:
        """This checksum's lock (fetches, checks, uses and evictions of one entry take it):
        two worker processes of one host wanting one recording fetch it once. Yields False
        when ``blocking`` is off and another process holds it."""
        fd = os.open(self._dir("locks") / _hex(checksum), _OPEN_LOCK, 0o600)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    # --- uses: an entry pinned for a run ---------------------------------------------

    def _uses(self, digest: str) -> Path:
        return self.root / "in-use" / digest

    def _live_uses(self, digest: str, *, remove_dead: bool = True) -> int:
        """Uses of an entry whose process holds them; a dead process's are removed (only
        under the entry's lock: no use is being made meanwhile)."""
        live = 0
        with contextlib.suppress(FileNotFoundError), os.scandir(self._uses(digest)) as it:
            for use in it:
                if not use.is_dir(follow_symlinks=False):
                    continue
                try:
                    fd = os.open(Path(use.path) / "lock", os.O_RDONLY | os.O_NOFOLLOW)
                except OSError:
                    fd = -1
                if fd >= 0:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        live += 1
                        continue
                    finally:
                        os.close(fd)
                if remove_dead:
                    shutil.rmtree(use.path, ignore_errors=True)
        return live

    @contextlib.contextmanager
    def _use(self, digest: str, fd: int, name: str) -> Iterator[Path]:
        """A link to the file open as ``fd``, named ``name``, held for this ``with``: made
        from the descriptor (``/proc/self/fd``), never from a path checked before."""
        folder = self._dir("in-use", digest) / f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
        folder.mkdir(mode=0o700)
        lock = os.open(folder / "lock", _OPEN_LOCK | os.O_EXCL, 0o600)
        into = -1
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            into = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
            # linkat(AT_SYMLINK_FOLLOW) on the descriptor's /proc link: the inode itself (a
            # dir_fd makes Python call linkat; plain link() would link the /proc link).
            os.link(f"/proc/self/fd/{fd}", name, dst_dir_fd=into, follow_symlinks=True)
            yield folder / name
        finally:
            with contextlib.suppress(OSError):
                (folder / name).unlink()
            if into >= 0:
                os.close(into)
            os.close(lock)
            shutil.rmtree(folder, ignore_errors=True)

    # --- entries ---------------------------------------------------------------------

    def _open_verified(self, digest: str) -> int | None:
        """The entry open (``O_NOFOLLOW``), checked and its sha256 verified on that
        descriptor; None when absent. An entry that fails a check is deleted (the link, never
        what it points to) and logged. Under the entry's lock."""
        self._dir("sha256")
        path = self.path_for(digest)
        try:
            fd = os.open(path, _OPEN_ENTRY)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno != errno.ELOOP:
                raise self._disk_error(exc) from exc
            self._distrust(path, None, "a symbolic link")
            return None
        st = os.fstat(fd)
        why = _untrusted_file(st)
        if why is None:
            # Each live use accounts for its own link and the run's staging link of it.
            allowed = 1 + 2 * self._live_uses(digest)
            if st.st_nlink > allowed:
                why = f"hard-linked elsewhere ({st.st_nlink} links, the cache made {allowed})"
        if why is None and _fd_sha256(fd) != "sha256:" + digest:
            why = "it does not match its checksum: corrupt or tampered"
        if why is not None:
            self._distrust(path, fd, why)
            return None
        os.utime(fd)  # its last use, which eviction goes by
        return fd

    def _distrust(self, path: Path, fd: int | None, why: str) -> None:
        if fd is not None:
            os.close(fd)
        log.warning(
            "cached recording %s is not to be trusted (%s): deleted, fetched again", path, why
        )
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # never follows a link

    @contextlib.contextmanager
    def use(self, checksum: str, fetch: Fetcher, *, name: str) -> Iterator[Located]:
        """The verified recording ``checksum`` as a file named ``name`` for the duration of
        the ``with`` (fetched when absent or untrusted): stage it from the yielded path, which
        stays the file that was verified; the entry is not evicted meanwhile."""
        digest = _hex(checksum)
        name = name if _plain_name(name) else f"{digest}.edf"
        with contextlib.ExitStack() as held:
            try:
                with self._locked(digest):
                    fd = self._open_verified(digest)
                    source, fetched = "cache", 0
                    if fd is None:
                        fd, fetched = self._fetch(digest, fetch)
                        source = "fetched"
                    try:
                        link = held.enter_context(self._use(digest, fd, name))
                    finally:
                        os.close(fd)
            except OSError as exc:
                # A disk that fails or fills under the cache: this host's fault, said so.
                raise self._disk_error(exc) from exc
            if source == "fetched":
                self.evict()
            yield Located(link, source, fetched)

    def _fetch(self, digest: str, fetch: Fetcher) -> tuple[int, int]:
        """Fetch into ``partial/``, verify on the descriptor, move into place: the open
        verified descriptor of the entry and the bytes received. Under the entry's lock."""
        partial = self._dir("partial") / digest
        fd = self._open_partial(partial)
        try:
            fetched = self._download(digest, fetch, fd)
            got = _fd_sha256(fd)
            if got != "sha256:" + digest:
                partial.unlink()
                raise RecordingUnavailable(f"recording sha256:{digest}: the platform sent {got}")
            # World-readable and read-only: staging hard-links it for a (remapped) container uid.
            os.fchmod(fd, 0o444)
            os.replace(partial, self._dir("sha256") / digest)
        except BaseException:
            os.close(fd)
            raise
        log.info("fetched recording sha256:%s (%s bytes) into the cache", digest, fetched)
        return fd, fetched

    def _open_partial(self, partial: Path) -> int:
        """The partial fetch, open to append: what an earlier fetch left when it is the
        cache's own file, else (a link, another's file) removed and started afresh."""
        try:
            try:
                fd = os.open(partial, _OPEN_PARTIAL, 0o600)
            except OSError as exc:
                if exc.errno != errno.ELOOP:
                    raise
                why: str | None = "a symbolic link"
            else:
                st = os.fstat(fd)
                why = _untrusted_file(st) or (None if st.st_nlink == 1 else "hard-linked elsewhere")
                if why is None:
                    return fd
                os.close(fd)
            log.warning("partial fetch %s is not to be trusted (%s): removed", partial, why)
            partial.unlink()  # the link or the name, never what it points to
            return os.open(partial, _OPEN_PARTIAL | os.O_EXCL, 0o600)
        except OSError as exc:
            raise self._disk_error(exc) from exc

    def _download(self, digest: str, fetch: Fetcher, fd: int) -> int:
        fetched = 0
        attempt = 0
        while True:
            try:
                fetched += fetch.into("sha256:" + digest, os.fstat(fd).st_size, _Sink(fd))
                return fetched
            except OSError as exc:
                if exc.errno in _FULL:
                    # The disk, not the platform: make room and go on where it stopped.
                    if not self._evict_one(keep=digest):
                        raise RecordingUnavailable(self._full_message()) from exc
                    continue
                attempt += 1
                error: Exception = exc
            except requests.RequestException as exc:
                attempt += 1
                error = exc
            log.warning("fetching recording sha256:%s (attempt %s): %s", digest, attempt, error)
            if attempt >= _ATTEMPTS:
                raise RecordingUnavailable(
                    f"recording sha256:{digest} could not be fetched from the platform: {error}"
                ) from error

    # --- size -------------------------------------------------------------------------

    def entries(self) -> list[tuple[float, int, Path]]:
        """``(last use, size, path)`` of every cached file (links counted as they are)."""
        found = []
        with contextlib.suppress(FileNotFoundError), os.scandir(self.root / "sha256") as it:
            for entry in it:
                with contextlib.suppress(FileNotFoundError):
                    st = entry.stat(follow_symlinks=False)
                    found.append((st.st_mtime, st.st_size, Path(entry.path)))
        return found

    def _reserve(self) -> int:
        st = os.statvfs(self.root)
        return self.min_free_bytes + int(_HEADROOM_FRACTION * st.f_blocks * st.f_frsize)

    def over_by(self) -> int:
        """Bytes to evict now: past ``cap_bytes``, or (no cap) under the disk's reserve."""
        if self.cap_bytes is not None:
            return sum(size for _, size, _ in self.entries()) - self.cap_bytes
        return self._reserve() - self._statvfs_free()

    def _evict_one(self, *, keep: str | None = None) -> int:
        """Delete the least recently used entry that no run uses (never ``keep``); the bytes
        it held, 0 when there is none."""
        for _, size, path in sorted(self.entries()):
            digest = path.name
            if digest == keep:
                continue
            with self._locked(digest, blocking=False) as mine:
                if not mine or self._live_uses(digest):
                    continue  # being fetched, checked or staged right now: not this one
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
                    log.info("recording cache: evicted %s (%s bytes)", digest, size)
                    return max(size, 1)
        return 0

    def evict(self) -> list[Path]:
        """Evict least recently used entries not in use until the cache is within its cap
        (or the disk above its reserve); the deleted paths."""
        gone: list[Path] = []
        while self.over_by() > 0:
            before = {p for _, _, p in self.entries()}
            if not self._evict_one():
                log.warning(
                    "recording cache: over its cap or its disk under its reserve, and nothing "
                    "left that may be evicted (the rest is in use)"
                )
                break
            gone.extend(before - {p for _, _, p in self.entries()})
        return gone

    def space(self) -> CacheSpace:
        """The cache's disk now (:func:`cache_fault`, health checks)."""
        self._dir("sha256")
        found = self.entries()
        busy = {p.name for _, _, p in found if self._live_uses(p.name, remove_dead=False)}
        return CacheSpace(
            free_bytes=self._statvfs_free(),
            reserve_bytes=self._reserve() if self.cap_bytes is None else 0,
            cached_bytes=sum(size for _, size, _ in found),
            evictable_bytes=sum(size for _, size, p in found if p.name not in busy),
        )


def _plain_name(name: str) -> bool:
    return bool(name) and name not in (".", "..") and "/" not in name and "\0" not in name


class Fetcher:
    """Fetches recordings from the platform with the worker token, resuming with Range."""

    def __init__(self, base_url: str, token: str, timeout_s: float) -> None:
        self.base_url = check_platform_url(base_url)
        self.token = token
        self.timeout_s = timeout_s

    def into(self, checksum: str, have: int, sink: _Sink) -> int:
        """Write the rest of ``checksum``'s bytes, from offset ``have``, to ``sink``; the
        bytes received. A failed write (a full disk) raises its ``OSError``."""
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
            if response.status_code == 200 and have:
                sink.restart()  # the whole file again, not the rest
            received = 0
            for chunk in response.iter_content(_CHUNK):
                sink.write(chunk)
                received += len(chunk)
            return received


def cache_for(settings: Settings) -> RecordingCache:
    return RecordingCache(
        settings.effective_recording_cache_dir,
        settings.recording_cache_bytes,
        min_free_bytes=settings.worker_min_free_bytes,
    )


def fetches_recordings(settings: Settings) -> bool:
    """Whether this host fetches recordings it does not have (a worker on another host)."""
    return bool(settings.platform_url and settings.worker_token)


def cache_fault(settings: Settings) -> str | None:
    """Why this host's recording cache cannot take a recording now (a sentence an operator
    acts on); None when it can, or when this host fetches nothing. For the host's health
    check: a host whose cache disk is full takes no run (each would fail its fetch)."""
    if not fetches_recordings(settings):
        return None
    cache = cache_for(settings)
    try:
        space = cache.space()
    except (RecordingUnavailable, OSError) as exc:
        return str(exc)
    if space.usable_bytes < _ROOM_FOR_ONE_BYTES:
        return (
            f"the recording cache's disk ({cache.root}) has {space.free_bytes // 2**20} MiB "
            f"free; of the {space.cached_bytes // 2**20} MiB of recordings it holds "
            f"{space.evictable_bytes // 2**20} MiB may be evicted: under the "
            f"{(space.reserve_bytes + _ROOM_FOR_ONE_BYTES) // 2**20} MiB a fetch needs"
        )
    return None


@contextlib.contextmanager
def located(
    in_place: Path, checksum: str, settings: Settings, *, fetch: Fetcher | None = None
) -> Iterator[Located]:
    """The file to run on, for the duration of the ``with``: ``in_place`` when this host
    has it, else the cache's verified copy under the same name (the contract's ``INPUT``)."""
    if in_place.is_file():
        yield Located(in_place, "in place")
        return
    if not fetches_recordings(settings):
        raise RecordingUnavailable(
            f"{in_place.name} is not on this host, and SZBENCH_PLATFORM_URL and "
            "SZBENCH_WORKER_TOKEN are not both set to fetch it"
        )
    fetch = fetch or Fetcher(settings.platform_url, settings.worker_token, FETCH_STALL_TIMEOUT_S)
    with cache_for(settings).use(checksum, fetch, name=in_place.name) as found:
        yield found

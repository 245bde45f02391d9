"""The worker's recording cache: content-addressed, verified before every run, resumable
fetches, least-recently-used eviction (issue 22); and it trusts only its own regular files,
stages the very file it verified, keeps what a run uses and lives within its disk (issue
29.7). Files in place stay in place.

The disk tests run on a tmpfs of a few MiB that each test mounts and removes (root, as CI
runs the suite): a real ``ENOSPC``, a real free-space figure.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from szbench.config import Settings
from szbench_worker import recordings
from szbench_worker.docker_runner.staging import stage_recording
from szbench_worker.recordings import (
    Fetcher,
    RecordingCache,
    RecordingUnavailable,
    cache_fault,
    check_platform_url,
    located,
)

MiB = 1024**2
NAME = "sub-01_ses-01_task-szMonitoring_run-00_eeg.edf"
REPO = Path(__file__).resolve().parents[2]


def _checksum(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class FakeFetcher(Fetcher):
    """Serves bytes from a dict in 64 KiB writes; ``cut`` stops the first transfer after
    that many bytes (a dropped connection), so that the next attempt must resume."""

    def __init__(self, files: dict[str, bytes], cut: int | None = None) -> None:
        self.files = files
        self.cut = cut
        self.calls: list[tuple[str, int]] = []

    def into(self, checksum: str, have: int, sink: object) -> int:
        self.calls.append((checksum, have))
        data = self.files[checksum][have:]
        if self.cut is not None:
            data, self.cut = data[: self.cut], None
            self._write(sink, data)
            raise OSError("connection reset")
        return self._write(sink, data)

    @staticmethod
    def _write(sink: object, data: bytes) -> int:
        for i in range(0, len(data), 64 * 1024):
            sink.write(data[i : i + 64 * 1024])  # type: ignore[attr-defined]
        return len(data)


def _get(cache: RecordingCache, checksum: str, fetcher: Fetcher) -> tuple[str, int, bytes]:
    """One use of ``checksum``: how it was had, the bytes fetched, the bytes a run sees."""
    with cache.use(checksum, fetcher, name=NAME) as got:
        assert got.path.name == NAME
        return got.source, got.fetched_bytes, got.path.read_bytes()


@pytest.fixture
def blob() -> tuple[bytes, str, FakeFetcher]:
    data = os.urandom(10_000)
    return data, _checksum(data), FakeFetcher({_checksum(data): data})


# --- issue 22: fetched once, verified, resumed, capped -----------------------------------


def test_fetched_once_verified_every_time_and_refetched_when_tampered(
    tmp_path: Path, blob: tuple[bytes, str, FakeFetcher]
) -> None:
    data, checksum, fetcher = blob
    cache = RecordingCache(tmp_path / "cache", cap_bytes=MiB)
    assert _get(cache, checksum, fetcher) == ("fetched", len(data), data)
    entry = cache.path_for(checksum)
    assert entry.stat().st_mode & 0o777 == 0o444
    assert _get(cache, checksum, fetcher)[:2] == ("cache", 0)
    assert len(fetcher.calls) == 1

    entry.chmod(0o644)
    entry.write_bytes(b"x" + data[1:])  # same size, one byte changed
    assert _get(cache, checksum, fetcher) == ("fetched", len(data), data)
    assert len(fetcher.calls) == 2


def test_an_interrupted_fetch_resumes_where_it_stopped(tmp_path: Path) -> None:
    data = os.urandom(200_000)
    checksum = _checksum(data)
    fetcher = FakeFetcher({checksum: data}, cut=70_000)
    assert _get(RecordingCache(tmp_path / "cache", MiB), checksum, fetcher)[2] == data
    assert fetcher.calls == [(checksum, 0), (checksum, 70_000)]


def test_wrong_bytes_from_the_platform_are_not_cached(tmp_path: Path) -> None:
    data = os.urandom(1000)
    claimed = _checksum(b"something else")
    cache = RecordingCache(tmp_path / "cache", MiB)
    with pytest.raises(RecordingUnavailable, match="the platform sent"):
        _get(cache, claimed, FakeFetcher({claimed: data}))
    assert not cache.path_for(claimed).exists()
    assert not any((tmp_path / "cache" / "partial").iterdir())


def test_least_recently_used_entries_go_past_the_cap(tmp_path: Path) -> None:
    blobs = [os.urandom(4000) for _ in range(3)]
    sums = [_checksum(b) for b in blobs]
    fetcher = FakeFetcher(dict(zip(sums, blobs, strict=True)))
    cache = RecordingCache(tmp_path / "cache", cap_bytes=9000)
    _get(cache, sums[0], fetcher)
    _get(cache, sums[1], fetcher)
    a, b = cache.path_for(sums[0]), cache.path_for(sums[1])
    os.utime(b, (1_000, 1_000))  # b used long ago, a just now
    os.utime(a, (2_000, 2_000))
    _get(cache, sums[0], fetcher)  # a used again: the newest
    _get(cache, sums[2], fetcher)
    assert a.exists()
    assert cache.path_for(sums[2]).exists()
    assert not b.exists()
    assert sum(size for _, size, _ in cache.entries()) <= 9000


def test_files_in_place_are_used_where_they_are(tmp_path: Path) -> None:
    recording = tmp_path / "held" / "r.edf"
    recording.parent.mkdir()
    recording.write_bytes(b"edf")
    settings = Settings(data_dir=tmp_path / "data")
    with located(recording, _checksum(b"edf"), settings) as found:
        assert (found.path, found.source) == (recording, "in place")
    assert not (tmp_path / "data" / "cache").exists()
    with (
        pytest.raises(RecordingUnavailable, match="SZBENCH_PLATFORM_URL"),
        located(tmp_path / "elsewhere.edf", _checksum(b"edf"), settings),
    ):
        pass


def test_held_out_recordings_cross_the_network_over_tls_only() -> None:
    assert check_platform_url("https://bench.example.org/") == "https://bench.example.org"
    assert check_platform_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000"
    with pytest.raises(RecordingUnavailable, match="https"):
        check_platform_url("http://bench.example.org")


def test_a_run_stages_the_verified_file_as_a_link_under_the_recordings_name(
    tmp_path: Path, blob: tuple[bytes, str, FakeFetcher]
) -> None:
    data, checksum, fetcher = blob
    settings = Settings(
        data_dir=tmp_path / "data", platform_url="http://127.0.0.1:9", worker_token="t"
    )
    registered = tmp_path / "main-host-only" / NAME
    with located(registered, checksum, settings, fetch=fetcher) as found:
        run_data = tmp_path / "run" / "data"
        run_data.mkdir(parents=True)
        assert stage_recording(found.path, run_data) is None  # a link, nothing to bind-mount
        # The contract's INPUT: the recording's own name, not the cache's hash.
        staged = run_data / NAME
        assert (
            staged.stat().st_ino
            == settings.effective_recording_cache_dir.joinpath(
                "sha256", checksum.removeprefix("sha256:")
            )
            .stat()
            .st_ino
        )  # no copy
        staged.unlink()  # the run's clean-up leaves the cache whole
    assert cache_path(settings, checksum).read_bytes() == data
    assert not any((settings.effective_recording_cache_dir / "in-use").rglob("*.edf"))


def cache_path(settings: Settings, checksum: str) -> Path:
    return settings.effective_recording_cache_dir / "sha256" / checksum.removeprefix("sha256:")


# --- issue 29.7: only its own regular files -------------------------------------------------


def test_a_symbolic_link_in_place_of_an_entry_is_never_followed(
    tmp_path: Path, blob: tuple[bytes, str, FakeFetcher]
) -> None:
    """Another file with the right bytes, linked in: the cache deletes the link (not its
    target, whose mode it must not change either) and fetches its own copy."""
    data, checksum, fetcher = blob
    cache = RecordingCache(tmp_path / "cache", MiB)
    _get(cache, checksum, fetcher)
    outside = tmp_path / "outside.edf"
    outside.write_bytes(data)
    outside.chmod(0o600)
    entry = cache.path_for(checksum)
    entry.unlink()
    entry.symlink_to(outside)
    with cache.use(checksum, fetcher, name=NAME) as got:
        assert got.source == "fetched"
        assert got.path.stat().st_ino != outside.stat().st_ino
    assert not entry.is_symlink()
    assert entry.stat().st_ino != outside.stat().st_ino
    assert outside.stat().st_mode & 0o777 == 0o600  # nothing made it world-readable


def test_a_hard_link_the_cache_did_not_make_is_not_trusted(
    tmp_path: Path, blob: tuple[bytes, str, FakeFetcher]
) -> None:
    """An entry with a second name (through which it could change after the check) is
    replaced by a file of the cache's own; the other name keeps its file."""
    data, checksum, fetcher = blob
    cache = RecordingCache(tmp_path / "cache", MiB)
    _get(cache, checksum, fetcher)
    other = tmp_path / "other-name"
    os.link(cache.path_for(checksum), other)
    assert _get(cache, checksum, fetcher)[:2] == ("fetched", len(data))
    assert cache.path_for(checksum).stat().st_nlink == 1
    assert other.read_bytes() == data


def test_an_entry_of_another_owner_is_not_trusted(
    tmp_path: Path, blob: tuple[bytes, str, FakeFetcher]
) -> None:
    assert os.geteuid() == 0, "chown needs root (CI runs the suite as root)"
    data, checksum, fetcher = blob
    cache = RecordingCache(tmp_path / "cache", MiB)
    _get(cache, checksum, fetcher)
    os.chown(cache.path_for(checksum), 12345, 12345)
    assert _get(cache, checksum, fetcher)[:2] == ("fetched", len(data))
    assert cache.path_for(checksum).stat().st_uid == os.geteuid()


def test_a_fifo_in_place_of_an_entry_does_not_hang_the_worker(
    tmp_path: Path, blob: tuple[bytes, str, FakeFetcher]
) -> None:
    data, checksum, fetcher = blob
    cache = RecordingCache(tmp_path / "cache", MiB)
    (tmp_path / "cache" / "sha256").mkdir(parents=True, mode=0o700)
    os.mkfifo(cache.path_for(checksum))
    got: list[tuple[str, int, bytes]] = []
    thread = threading.Thread(target=lambda: got.append(_get(cache, checksum, fetcher)))
    thread.daemon = True
    thread.start()
    thread.join(30)
    assert got == [("fetched", len(data), data)], "the FIFO was opened blocking"


def test_a_partial_fetch_that_is_a_link_is_never_written_through(
    tmp_path: Path, blob: tuple[bytes, str, FakeFetcher]
) -> None:
    data, checksum, fetcher = blob
    cache = RecordingCache(tmp_path / "cache", MiB)
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    partial = tmp_path / "cache" / "partial" / checksum.removeprefix("sha256:")
    partial.parent.mkdir(parents=True, mode=0o700)
    partial.symlink_to(victim)
    assert _get(cache, checksum, fetcher) == ("fetched", len(data), data)
    assert victim.read_bytes() == b"precious"


def test_a_cache_folder_that_is_a_link_or_open_to_others_is_refused(
    tmp_path: Path, blob: tuple[bytes, str, FakeFetcher]
) -> None:
    _, checksum, fetcher = blob
    root = tmp_path / "cache"
    root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "sha256").symlink_to(elsewhere)
    with pytest.raises(RecordingUnavailable, match=r"sha256 is not a directory"):
        _get(RecordingCache(root, MiB), checksum, fetcher)
    assert not any(elsewhere.iterdir())
    (root / "sha256").unlink()
    (root / "sha256").mkdir(mode=0o777)
    (root / "sha256").chmod(0o777)
    with pytest.raises(RecordingUnavailable, match="writable by others"):
        _get(RecordingCache(root, MiB), checksum, fetcher)


def test_the_file_staged_is_the_file_verified_whatever_happens_to_the_entry_meanwhile(
    tmp_path: Path, blob: tuple[bytes, str, FakeFetcher]
) -> None:
    """Between the check and the staging, the entry's name is given to other bytes: the
    run still stages the bytes that were verified (no path is resolved again)."""
    data, checksum, fetcher = blob
    cache = RecordingCache(tmp_path / "cache", MiB)
    _get(cache, checksum, fetcher)
    swapped = tmp_path / "cache" / "sha256" / "swap"
    swapped.write_bytes(b"not the recording" * 100)
    with cache.use(checksum, fetcher, name=NAME) as got:
        os.replace(swapped, cache.path_for(checksum))
        run_data = tmp_path / "run"
        run_data.mkdir()
        stage_recording(got.path, run_data)
        assert (run_data / NAME).read_bytes() == data


# --- issue 29.7: nothing evicted from under a run ---------------------------------------------


def test_an_entry_in_use_is_not_evicted_until_its_run_is_over(tmp_path: Path) -> None:
    blobs = [os.urandom(4000) for _ in range(3)]
    sums = [_checksum(b) for b in blobs]
    fetcher = FakeFetcher(dict(zip(sums, blobs, strict=True)))
    cache = RecordingCache(tmp_path / "cache", cap_bytes=5000)  # room for one
    with cache.use(sums[0], fetcher, name=NAME) as held:
        os.utime(cache.path_for(sums[0]), (1, 1))  # the least recently used of all
        _get(cache, sums[1], fetcher)
        _get(cache, sums[2], fetcher)
        assert cache.path_for(sums[0]).exists(), "evicted while a run stages it"
        assert held.path.read_bytes() == blobs[0]
    assert cache.evict() == [cache.path_for(sums[0])]


HOLDER = """
import sys
from pathlib import Path
from szbench_worker.recordings import RecordingCache
sys.path.insert(0, {tests!r})
from tests.worker.test_recording_cache import FakeFetcher
data = Path(sys.argv[2]).read_bytes()
cache = RecordingCache(Path(sys.argv[1]), cap_bytes=5000)
with cache.use(sys.argv[3], FakeFetcher({{sys.argv[3]: data}}), name="r.edf"):
    print("holding", flush=True)
    sys.stdin.read()
"""


def test_a_use_held_by_another_process_counts_and_a_dead_ones_does_not(
    tmp_path: Path,
) -> None:
    data = os.urandom(4000)
    checksum = _checksum(data)
    (tmp_path / "blob").write_bytes(data)
    root = tmp_path / "cache"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(str(REPO / p) for p in ("platform", "worker", "scoring")),
    }
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            HOLDER.format(tests=str(REPO)),
            str(root),
            str(tmp_path / "blob"),
            checksum,
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline() == b"holding\n"
        cache = RecordingCache(root, cap_bytes=0)
        assert cache.evict() == []  # the other process's run uses it
        assert cache.path_for(checksum).exists()
        holder.send_signal(signal.SIGKILL)  # dies holding it: its use ends with it
        holder.wait(10)
        assert cache.evict() == [cache.path_for(checksum)]
        assert not any((root / "in-use").rglob("r.edf"))
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


# --- issue 29.7: within its disk ---------------------------------------------------------------


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """An 8 MiB tmpfs of the test's own (a real file system that fills)."""
    assert os.geteuid() == 0, "mounting a tmpfs needs root (CI runs the suite as root)"
    path = Path(tempfile.mkdtemp(prefix="szbench-cache-disk-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
        shutil.rmtree(path, ignore_errors=True)


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def test_without_a_cap_the_cache_lives_within_its_disk(small_disk: Path) -> None:
    """Ten 1.5 MiB recordings through an 8 MiB disk, the cap left to the disk (the default):
    every fetch succeeds, the oldest go, and the disk keeps its reserve free."""
    blobs = [os.urandom(3 * MiB // 2) for _ in range(10)]
    sums = [_checksum(b) for b in blobs]
    fetcher = FakeFetcher(dict(zip(sums, blobs, strict=True)))
    cache = RecordingCache(small_disk / "cache", min_free_bytes=MiB)
    for checksum, data in zip(sums, blobs, strict=True):
        assert _get(cache, checksum, fetcher)[2] == data
        assert _free(small_disk) >= MiB
    kept = {p.name for _, _, p in cache.entries()}
    assert 2 <= len(kept) < 10
    assert sums[-1].removeprefix("sha256:") in kept


def test_a_full_disk_during_a_fetch_evicts_and_goes_on(
    small_disk: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Something else fills the disk: the fetch meets ENOSPC, evicts what no run uses and
    resumes; with nothing left to evict it says the disk is full (not a platform fault's
    "could not be fetched"), and the health check says so before a run is taken."""
    blobs = [os.urandom(2 * MiB) for _ in range(3)]
    sums = [_checksum(b) for b in blobs]
    fetcher = FakeFetcher(dict(zip(sums, blobs, strict=True)))
    cache = RecordingCache(small_disk / "cache", cap_bytes=10**12)  # the cap never bites
    _get(cache, sums[0], fetcher)
    _get(cache, sums[1], fetcher)
    filler = small_disk / "filler"
    subprocess.run(["fallocate", "-l", str(_free(small_disk) - MiB), str(filler)], check=True)
    assert _get(cache, sums[2], fetcher)[2] == blobs[2]
    assert not cache.path_for(sums[0]).exists()  # the least recently used made room
    # Resumed where the full disk stopped it, as one attempt: a full disk spends none.
    (_, first), (_, resumed) = fetcher.calls[2:]
    assert first == 0 < resumed < 2 * MiB

    # What a fetch needs past the reserve, scaled to this 8 MiB disk (64 MiB shipped).
    monkeypatch.setattr(recordings, "_ROOM_FOR_ONE_BYTES", MiB)
    settings = Settings(
        data_dir=small_disk / "data",
        recording_cache_dir=small_disk / "cache",
        platform_url="http://127.0.0.1:9",
        worker_token="t",
        worker_min_free_bytes=0,
    )
    with cache.use(sums[2], fetcher, name=NAME):  # in use: it may not go
        cache.path_for(sums[1]).unlink()
        more = small_disk / "more"
        subprocess.run(["fallocate", "-l", str(_free(small_disk)), str(more)], check=True)
        with pytest.raises(RecordingUnavailable, match=r"disk .* is full") as exc:
            _get(cache, sums[0], fetcher)
        assert "could not be fetched" not in str(exc.value)
        fault = cache_fault(settings)
        assert fault is not None
        assert "recording cache's disk" in fault
    assert cache_fault(settings) is None  # its one recording may go now
    filler.unlink()
    more.unlink()
    assert cache_fault(settings) is None
    assert cache_fault(Settings(data_dir=small_disk / "data")) is None  # fetches nothing

"""The worker's recording cache (issue 22): content-addressed, verified before every run,
capped with least-recently-used eviction, resumable fetches; files in place stay in place."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from szbench.config import Settings
from szbench_worker.recordings import (
    Fetcher,
    RecordingCache,
    RecordingUnavailable,
    check_platform_url,
    locate,
)


def _checksum(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class FakeFetcher(Fetcher):
    """Serves bytes from a dict; ``cut`` stops the first transfer after that many bytes
    (a dropped connection), so that the next attempt must resume with a Range."""

    def __init__(self, files: dict[str, bytes], cut: int | None = None) -> None:
        self.files = files
        self.cut = cut
        self.calls: list[tuple[str, int]] = []

    def into(self, checksum: str, partial: Path) -> int:
        have = partial.stat().st_size if partial.exists() else 0
        self.calls.append((checksum, have))
        data = self.files[checksum][have:]
        if self.cut is not None:
            part, self.cut = data[: self.cut], None
            with partial.open("ab") as fh:
                fh.write(part)
            raise OSError("connection reset")
        with partial.open("ab") as fh:
            fh.write(data)
        return len(data)


def test_fetched_once_verified_every_time_and_refetched_when_tampered(tmp_path: Path) -> None:
    data = os.urandom(10_000)
    checksum = _checksum(data)
    fetcher = FakeFetcher({checksum: data})
    cache = RecordingCache(tmp_path / "cache", cap_bytes=1024**2)

    first = cache.get(checksum, fetcher)
    assert (first.source, first.fetched_bytes) == ("fetched", len(data))
    assert first.path.read_bytes() == data
    assert first.path.stat().st_mode & 0o777 == 0o444
    again = cache.get(checksum, fetcher)
    assert again.source == "cache"
    assert len(fetcher.calls) == 1

    first.path.chmod(0o644)
    first.path.write_bytes(b"x" + data[1:])  # same size, one byte changed
    healed = cache.get(checksum, fetcher)
    assert healed.source == "fetched"
    assert healed.path.read_bytes() == data
    assert len(fetcher.calls) == 2


def test_an_interrupted_fetch_resumes_where_it_stopped(tmp_path: Path) -> None:
    data = os.urandom(50_000)
    checksum = _checksum(data)
    fetcher = FakeFetcher({checksum: data}, cut=20_000)
    located = RecordingCache(tmp_path / "cache", 1024**2).get(checksum, fetcher)
    assert located.path.read_bytes() == data
    assert fetcher.calls == [(checksum, 0), (checksum, 20_000)]


def test_wrong_bytes_from_the_platform_are_not_cached(tmp_path: Path) -> None:
    data = os.urandom(1000)
    claimed = _checksum(b"something else")
    cache = RecordingCache(tmp_path / "cache", 1024**2)
    with pytest.raises(RecordingUnavailable, match="the platform sent"):
        cache.get(claimed, FakeFetcher({claimed: data}))
    assert not cache.path_for(claimed).exists()
    assert not any((tmp_path / "cache" / "partial").iterdir())


def test_least_recently_used_entries_go_past_the_cap(tmp_path: Path) -> None:
    blobs = [os.urandom(4000) for _ in range(3)]
    sums = [_checksum(b) for b in blobs]
    fetcher = FakeFetcher(dict(zip(sums, blobs, strict=True)))
    cache = RecordingCache(tmp_path / "cache", cap_bytes=9000)
    a = cache.get(sums[0], fetcher).path
    b = cache.get(sums[1], fetcher).path
    os.utime(b, (1_000, 1_000))  # b used long ago, a just now
    os.utime(a, (2_000, 2_000))
    cache.get(sums[0], fetcher)  # a used again: the newest
    c = cache.get(sums[2], fetcher).path
    assert a.exists()
    assert c.exists()
    assert not b.exists()
    assert sum(size for _, size, _ in cache.entries()) <= 9000


def test_files_in_place_are_used_where_they_are(tmp_path: Path) -> None:
    recording = tmp_path / "held" / "r.edf"
    recording.parent.mkdir()
    recording.write_bytes(b"edf")
    settings = Settings(data_dir=tmp_path / "data")
    located = locate(recording, _checksum(b"edf"), settings)
    assert (located.path, located.source) == (recording, "in place")
    assert not (tmp_path / "data" / "cache").exists()
    with pytest.raises(RecordingUnavailable, match="SZBENCH_PLATFORM_URL"):
        locate(tmp_path / "elsewhere.edf", _checksum(b"edf"), settings)


def test_held_out_recordings_cross_the_network_over_tls_only() -> None:
    assert check_platform_url("https://bench.example.org/") == "https://bench.example.org"
    assert check_platform_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000"
    with pytest.raises(RecordingUnavailable, match="https"):
        check_platform_url("http://bench.example.org")


def test_a_run_stages_the_cached_file_as_a_link(tmp_path: Path) -> None:
    from szbench_worker.docker_runner.staging import stage_recording

    data = os.urandom(5000)
    checksum = _checksum(data)
    cached = RecordingCache(tmp_path / "cache", 1024**2).get(
        checksum, FakeFetcher({checksum: data})
    )
    run_data = tmp_path / "run" / "data"
    run_data.mkdir(parents=True)
    assert stage_recording(cached.path, run_data) is None  # a link, nothing to bind-mount
    staged = run_data / cached.path.name
    assert staged.stat().st_ino == cached.path.stat().st_ino  # no copy
    staged.unlink()  # the run's clean-up leaves the cache whole
    assert cached.path.read_bytes() == data

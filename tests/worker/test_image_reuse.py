"""Loading an image tarball that the engine already holds reuses the engine's copy.

The image id is read from the archive (manifest.json and the config blob it names, whose
sha256 is the id) without loading; when the engine has that id, ``docker load`` is skipped.
Unit tests count the client's loads on handmade archives; the real-engine tests use an
image of their own (a unique label, so no other session's image is touched).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import hashlib
import io
import json
import os
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from docker.errors import ImageNotFound

from szbench.algorithms.image_check import ArchiveLimits, check_image_archive, tarball_image_id
from szbench_worker.docker_runner import (
    TarballIdCache,
    build_image,
    load_image_tarball,
)
from szbench_worker.docker_runner import images as images_module
from szbench_worker.runner import ImageError, ImageRefused
from tests.platform.images import docker_save
from tests.worker.conftest import BASE_IMAGE

images_module_tarball_image_id = images_module.tarball_image_id

CONFIG = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"diff_ids": []}})


def write_archive(path: Path, members: dict[str, bytes]) -> Path:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as raw, tarfile.open(fileobj=raw, mode="w") as tar:  # type: ignore[operator]
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def legacy_archive(path: Path, config: bytes, config_name: str | None = None) -> Path:
    """A ``docker save`` archive in the layout before Docker 25 (config ``<hex>.json``)."""
    name = config_name or f"{hashlib.sha256(config).hexdigest()}.json"
    manifest = [{"Config": name, "RepoTags": ["x:1"], "Layers": ["l/layer.tar"]}]
    return write_archive(
        path,
        {name: config, "l/layer.tar": b"\0" * 1024, "manifest.json": json.dumps(manifest).encode()},
    )


class FakeImage:
    def __init__(self, image_id: str) -> None:
        self.id = image_id
        self.tags: list[str] = []
        self.attrs: dict[str, Any] = {}


class CountingImages:
    """The client's ``images``: a set of ids, and a count of ``load`` calls."""

    def __init__(self, present: set[str], loads_as: str) -> None:
        self.present = present
        self.loads_as = loads_as
        self.loads = 0

    def get(self, reference: str) -> FakeImage:
        if reference not in self.present:
            raise ImageNotFound(reference)
        return FakeImage(reference)

    def load(self, data: Any) -> list[FakeImage]:
        self.loads += 1
        self.present.add(self.loads_as)
        return [FakeImage(self.loads_as)]


class CountingClient:
    def __init__(self, present: set[str], loads_as: str) -> None:
        self.images = CountingImages(present, loads_as)


@pytest.mark.parametrize("suffix", [".tar", ".tar.gz"])
def test_second_load_of_the_same_archive_does_not_call_the_engines_load(
    tmp_path: Path, suffix: str
) -> None:
    config = CONFIG.encode()
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    archive = legacy_archive(tmp_path / f"image{suffix}", config)
    client = CountingClient(present=set(), loads_as=image_id)

    first = load_image_tarball(archive, client)  # type: ignore[arg-type]
    second = load_image_tarball(archive, client)  # type: ignore[arg-type]

    assert first.digest == second.digest == image_id
    assert client.images.loads == 1


def test_oci_layout_archive_names_its_config_blob(tmp_path: Path) -> None:
    """Docker 25 and later: manifest.json names ``blobs/sha256/<hex>``."""
    config = CONFIG.encode()
    hex_digest = hashlib.sha256(config).hexdigest()
    manifest = [{"Config": f"blobs/sha256/{hex_digest}", "Layers": ["blobs/sha256/" + "0" * 64]}]
    archive = write_archive(
        tmp_path / "oci.tar",
        {
            "oci-layout": b'{"imageLayoutVersion": "1.0.0"}',
            f"blobs/sha256/{hex_digest}": config,
            "blobs/sha256/" + "0" * 64: b"\0" * 1024,
            "manifest.json": json.dumps(manifest).encode(),
        },
    )
    assert tarball_image_id(archive) == f"sha256:{hex_digest}"


def test_a_config_that_does_not_match_its_name_is_never_reused(tmp_path: Path) -> None:
    """A forged archive naming an image the engine has must not run that image: it is
    loaded (and the engine decides), never matched by name."""
    present = "sha256:" + hashlib.sha256(b"someone else's image").hexdigest()
    archive = legacy_archive(
        tmp_path / "forged.tar", CONFIG.encode(), config_name=f"{present[7:]}.json"
    )
    loaded = "sha256:" + hashlib.sha256(CONFIG.encode()).hexdigest()
    client = CountingClient(present={present}, loads_as=loaded)

    assert tarball_image_id(archive) is None
    info = load_image_tarball(archive, client)  # type: ignore[arg-type]

    assert client.images.loads == 1
    assert info.digest == loaded != present


@pytest.mark.parametrize(
    "members",
    [
        pytest.param({"hello.txt": b"hi"}, id="no manifest"),
        pytest.param({"manifest.json": b"not json"}, id="manifest not json"),
        pytest.param({"manifest.json": b"[]"}, id="no image"),
        pytest.param(
            {"manifest.json": json.dumps([{"Config": "a.json"}, {"Config": "b.json"}]).encode()},
            id="two images",
        ),
        pytest.param(
            {"manifest.json": json.dumps([{"Config": "0" * 64 + ".json"}]).encode()},
            id="config missing",
        ),
    ],
)
def test_archives_without_one_verifiable_image_are_loaded(
    tmp_path: Path, members: dict[str, bytes]
) -> None:
    archive = write_archive(tmp_path / "odd.tar", members)
    assert tarball_image_id(archive) is None
    client = CountingClient(present=set(), loads_as="sha256:" + "1" * 64)
    load_image_tarball(archive, client)  # type: ignore[arg-type]
    assert client.images.loads == 1


@pytest.mark.parametrize(
    ("layout", "with_manifest_json"),
    [("legacy", True), ("oci", True), ("oci", False)],
    ids=["legacy", "oci", "bare oci index"],
)
@pytest.mark.parametrize("gzip", [False, True])
def test_the_id_is_read_as_the_upload_check_reads_it(
    tmp_path: Path, layout: str, with_manifest_json: bool, gzip: bool
) -> None:
    """One reader of ``docker save`` archives: every layout the upload check accepts gives
    the worker the same image id, so an uploaded image already on the engine is reused
    (a bare OCI layout, read through index.json, included)."""
    path = tmp_path / ("img.tar.gz" if gzip else "img.tar")
    image_id = docker_save(path, layout=layout, gzip=gzip, with_manifest_json=with_manifest_json)
    assert tarball_image_id(path) == check_image_archive(path).digest == image_id


def test_not_a_tar_archive_has_no_id(tmp_path: Path) -> None:
    (tmp_path / "x.tar").write_bytes(b"definitely not a tar archive" * 100)
    assert tarball_image_id(tmp_path / "x.tar") is None


class CountingReads:
    """tarball_image_id, counting how often an archive is read for its id."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, path: Path) -> str | None:
        self.calls += 1
        return images_module_tarball_image_id(path)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> CountingReads:
    counter = CountingReads()
    monkeypatch.setattr(images_module, "tarball_image_id", counter)
    return counter


def test_an_id_cache_spares_reading_an_unchanged_archive_again(
    tmp_path: Path, reads: CountingReads
) -> None:
    """A .tar.gz must be inflated whole to find its id: with the cache, only once."""
    config = CONFIG.encode()
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    archive = legacy_archive(tmp_path / "image.tar.gz", config)
    cache = TarballIdCache(tmp_path / "cache" / "tarball-ids.json")
    client = CountingClient(present=set(), loads_as=image_id)

    first = load_image_tarball(archive, client, id_cache=cache)  # type: ignore[arg-type]
    second = load_image_tarball(archive, client, id_cache=cache)  # type: ignore[arg-type]
    third = load_image_tarball(archive, client, id_cache=cache)  # type: ignore[arg-type]

    assert first.digest == second.digest == third.digest == image_id
    assert (reads.calls, client.images.loads) == (1, 1)
    assert image_id in cache.path.read_text()


def test_a_rewritten_archive_is_read_again_not_taken_from_the_cache(
    tmp_path: Path, reads: CountingReads
) -> None:
    old, new = CONFIG.encode(), CONFIG.replace("linux", "Linux").encode()
    old_id, new_id = ("sha256:" + hashlib.sha256(c).hexdigest() for c in (old, new))
    archive = legacy_archive(tmp_path / "image.tar", old)
    cache = TarballIdCache(tmp_path / "tarball-ids.json")
    client = CountingClient(present=set(), loads_as=old_id)
    load_image_tarball(archive, client, id_cache=cache)  # type: ignore[arg-type]

    before = archive.stat()
    legacy_archive(archive, new)  # the same file and size, another image, the old mtime
    os.utime(archive, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (archive.stat().st_ino, archive.stat().st_size) == (before.st_ino, before.st_size)
    client.images.loads_as = new_id
    info = load_image_tarball(archive, client, id_cache=cache)  # type: ignore[arg-type]

    assert info.digest == new_id
    assert (reads.calls, client.images.loads) == (2, 2)
    assert cache.get(archive, images_module._file_state(archive)) == new_id


def test_the_cache_spares_the_archive_check_only_under_the_same_limits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`szbench evaluate --tar` checks the archive's limits (issue 21 point 3); an unchanged
    file that passed under the same limits is not read again, under other limits it is."""
    checks: list[ArchiveLimits] = []

    def counting_check(path: Path, **kwargs: Any) -> Any:
        checks.append(kwargs["limits"])
        return check_image_archive(path, **kwargs)

    monkeypatch.setattr(images_module, "check_image_archive", counting_check)
    config = CONFIG.encode()
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    archive = legacy_archive(tmp_path / "image.tar.gz", config)
    cache = TarballIdCache(tmp_path / "tarball-ids.json")
    client = CountingClient(present=set(), loads_as=image_id)
    limits = ArchiveLimits(100, 2**30, 100, 2**30, 20.0)
    for _ in range(2):
        load_image_tarball(archive, client, limits=limits, id_cache=cache)  # type: ignore[arg-type]
    assert checks == [limits]
    tighter = dataclasses.replace(limits, max_members=2)
    with pytest.raises(ImageRefused, match="limit ARCHIVE_MAX_MEMBERS"):
        load_image_tarball(archive, client, limits=tighter, id_cache=cache)  # type: ignore[arg-type]
    assert checks == [limits, tighter]
    assert client.images.loads == 1


def test_an_unusable_id_cache_is_no_cache(tmp_path: Path) -> None:
    config = CONFIG.encode()
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    archive = legacy_archive(tmp_path / "image.tar", config)
    (tmp_path / "cache").mkdir()  # a folder where the cache file would be
    client = CountingClient(present=set(), loads_as=image_id)
    cache = TarballIdCache(tmp_path / "cache")
    for _ in range(2):
        assert load_image_tarball(archive, client, id_cache=cache).digest == image_id  # type: ignore[arg-type]
    assert client.images.loads == 1  # the archive's own id still spares the second load


# --- the real engine -----------------------------------------------------------------------


@pytest.fixture
def own_image(docker_client: Any, tmp_path: Path) -> Iterator[str]:
    """An image only this test has (a unique label), removed afterwards."""
    context = tmp_path / "ctx"
    context.mkdir()
    (context / "Dockerfile").write_text(
        f"FROM {BASE_IMAGE}\nLABEL szbench.test={uuid.uuid4().hex}\nRUN echo reuse > /marker\n"
    )
    image_id = build_image(context, f"szbench-test/reuse-{uuid.uuid4().hex[:12]}", docker_client)
    try:
        yield image_id.digest
    finally:
        with contextlib.suppress(ImageNotFound):
            docker_client.images.remove(image_id.digest, force=True)


class SpyImages:
    """The real engine's ``images``, counting ``load`` calls."""

    def __init__(self, images: Any) -> None:
        self._images = images
        self.loads = 0

    def load(self, data: Any) -> Any:
        self.loads += 1
        return self._images.load(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._images, name)


class SpyClient:
    def __init__(self, client: Any) -> None:
        self.images = SpyImages(client.images)


@pytest.mark.docker
@pytest.mark.parametrize("suffix", [".tar", ".tar.gz"])
def test_reloading_a_saved_image_reuses_the_engines_copy(
    docker_client: Any, own_image: str, tmp_path: Path, suffix: str
) -> None:
    archive = tmp_path / f"image{suffix}"
    opener = gzip.open if suffix == ".gz" else open
    with opener(archive, "wb") as f:  # type: ignore[operator]
        for chunk in docker_client.images.get(own_image).save(named=True):
            f.write(chunk)
    assert tarball_image_id(archive) == own_image
    docker_client.images.remove(own_image, force=True)
    spy = SpyClient(docker_client)

    first = load_image_tarball(archive, spy)  # type: ignore[arg-type]
    second = load_image_tarball(archive, spy)  # type: ignore[arg-type]

    assert spy.images.loads == 1
    assert first.digest == second.digest == own_image
    assert docker_client.images.get(own_image).id == own_image


@pytest.mark.docker
def test_a_missing_file_is_still_an_image_error(docker_client: Any, tmp_path: Path) -> None:
    with pytest.raises(ImageError, match=r"gone\.tar: no such image tarball"):
        load_image_tarball(tmp_path / "gone.tar", docker_client)

"""Archive limits of the image check: expanded bytes, members, files and bytes in the layers.

Each archive is made here: small on disk, large (or numerous) once expanded. Limits are
lowered through their settings so that the archives stay small and quick to build.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
from pathlib import Path

import pytest

from szbench.algorithms import image_check
from szbench.algorithms.image_check import ArchiveLimits, check_image_archive
from szbench.config import get_settings
from szbench.errors import InvalidSubmission, PayloadTooLarge
from tests.platform.images import docker_save, member

MiB = 1024**2


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(format=tarfile.GNU_FORMAT)


def _image(path: Path, layer: bytes, *, outer_gzip: bool = False) -> str:
    """A legacy ``docker save`` archive of one image whose one layer blob is ``layer``."""
    layer_hex = hashlib.sha256(layer).hexdigest()
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"User": "1000", "Cmd": ["python3"]},
            "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_hex}"]},
        }
    ).encode()
    config_hex = hashlib.sha256(config).hexdigest()
    manifest = json.dumps(
        [{"Config": f"{config_hex}.json", "RepoTags": [], "Layers": [f"{layer_hex}/layer.tar"]}]
    ).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in (
            (f"{layer_hex}/layer.tar", layer),
            (f"{config_hex}.json", config),
            ("manifest.json", manifest),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    raw = buffer.getvalue()
    path.write_bytes(gzip.compress(raw, compresslevel=6) if outer_gzip else raw)
    return f"sha256:{config_hex}"


def _layer(files: list[tuple[str, bytes]], *, compress: bool = False) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue()) if compress else buffer.getvalue()


def _limit(settings_env: pytest.MonkeyPatch, name: str, value: int) -> None:
    """A setting (``SZBENCH_...``) or a constant of :mod:`szbench.algorithms.image_check`
    set to ``value`` for this test."""
    if name.startswith("SZBENCH_"):
        settings_env.setenv(name, str(value))
        get_settings.cache_clear()
    else:
        settings_env.setattr(image_check, name, value)


def _too_large(path: Path, *fragments: str) -> str:
    with pytest.raises(PayloadTooLarge) as err:
        check_image_archive(path)
    for fragment in fragments:
        assert fragment in err.value.detail
    assert err.value.status_code == 413
    return err.value.detail


def test_the_counts_of_a_valid_archive(tmp_path: Path, settings_env: pytest.MonkeyPatch) -> None:
    path = tmp_path / "img.tar"
    files = [("app/a.bin", b"a" * 3000), ("app/b.bin", b"b" * 5000)]
    image_id = _image(path, _layer(files))
    info = check_image_archive(path)
    assert info.digest == image_id
    assert (info.layer_members, info.image_bytes) == (2, 8000)
    with tarfile.open(path) as tar:
        expected = sum(512 + -(-m.size // 512) * 512 for m in tar.getmembers())
    assert info.expanded_bytes == expected  # headers and padded data, not the end blocks
    # A gzip-compressed layer is counted through its compression.
    _image(path, _layer(files, compress=True))
    assert check_image_archive(path).image_bytes == 8000


def test_expanded_bytes_refused_from_the_header_before_expanding(
    tmp_path: Path, settings_env: pytest.MonkeyPatch
) -> None:
    """A member header claiming 1 TiB, followed by no data at all: the check refuses it on
    the header (a check that expanded first would fail on the missing bytes instead)."""
    path = tmp_path / "bomb.tar.gz"
    path.write_bytes(gzip.compress(_header("blobs/sha256/zeros", 1024**4) + b"\0" * 4096))
    detail = _too_large(path, "SZBENCH_ARCHIVE_MAX_EXPANDED_BYTES", "'blobs/sha256/zeros'")
    assert str(get_settings().archive_max_expanded_bytes) in detail


def test_expanded_bytes_of_a_layer_of_zeros(
    tmp_path: Path, settings_env: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "zeros.tar.gz"
    _image(path, _layer([("zeros", b"\0" * (8 * MiB))]), outer_gzip=True)
    assert path.stat().st_size < 64 * 1024  # small compressed, large expanded
    assert check_image_archive(path).image_bytes == 8 * MiB
    _limit(settings_env, "SZBENCH_ARCHIVE_MAX_EXPANDED_BYTES", 4 * MiB)
    _too_large(path, "more than 4194304 bytes", "SZBENCH_ARCHIVE_MAX_EXPANDED_BYTES")


def test_member_count_refused_at_the_cap(tmp_path: Path, settings_env: pytest.MonkeyPatch) -> None:
    path = tmp_path / "many.tar"
    docker_save(path, extra=[member(f"pad/{i}", size=1) for i in range(300)])
    assert check_image_archive(path).digest.startswith("sha256:")
    _limit(settings_env, "ARCHIVE_MAX_MEMBERS", 100)
    _too_large(path, "more than 100 members", "ARCHIVE_MAX_MEMBERS")


def test_the_archive_is_read_only_up_to_the_member_cap(
    tmp_path: Path, settings_env: pytest.MonkeyPatch
) -> None:
    """Members are counted as they are read: past the cap nothing more is read (here a
    damaged tail after the cap would otherwise make it an unreadable archive)."""
    path = tmp_path / "cut.tar"
    docker_save(path, extra=[member(f"pad/{i}", size=1) for i in range(200)])
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] + b"\xff" * 512 * 4)  # garbage after 100+ members
    _limit(settings_env, "ARCHIVE_MAX_MEMBERS", 50)
    _too_large(path, "ARCHIVE_MAX_MEMBERS")


def test_files_in_the_layers_are_counted(tmp_path: Path, settings_env: pytest.MonkeyPatch) -> None:
    path = tmp_path / "files.tar"
    # Two layers of 30 files each: the cap counts all layers together.
    files = [[(member(f"f/{layer}/{i}"), b"x") for i in range(30)] for layer in range(2)]
    docker_save(path, layers=files, layout="oci")
    assert check_image_archive(path).layer_members == 2 * 31  # with each app/detect.py
    _limit(settings_env, "IMAGE_MAX_LAYER_MEMBERS", 40)
    _too_large(path, "more than 40 files", "IMAGE_MAX_LAYER_MEMBERS", "layer 'blobs/")


def test_image_bytes_through_a_compressed_layer(
    tmp_path: Path, settings_env: pytest.MonkeyPatch
) -> None:
    """The 2 MB archive that loads as a 1 GB image, in small: a gzip layer in a plain tar,
    so that neither the upload nor the outer archive is large."""
    path = tmp_path / "img.tar"
    _image(path, _layer([("zeros", b"\0" * (16 * MiB))], compress=True))
    assert path.stat().st_size < 64 * 1024
    _limit(settings_env, "SZBENCH_IMAGE_MAX_BYTES", 8 * MiB)
    detail = _too_large(path, "more than 8388608 bytes", "SZBENCH_IMAGE_MAX_BYTES")
    assert "/layer.tar" in detail
    # The outer archive is small: only the image limit caught it.
    roomy = ArchiveLimits(
        max_members=10, max_expanded_bytes=1 * MiB, max_layer_members=10, max_image_bytes=32 * MiB
    )
    assert check_image_archive(path, limits=roomy).image_bytes == 16 * MiB


def test_a_layer_that_is_not_a_tar_is_refused(
    tmp_path: Path, settings_env: pytest.MonkeyPatch
) -> None:
    """Its files could not be counted (a zstd layer, say), so its size would be unknown."""
    path = tmp_path / "img.tar"
    _image(path, b"\x28\xb5\x2f\xfd" + b"\x01" * 4096)  # zstd magic, then anything
    with pytest.raises(InvalidSubmission, match="is not a tar archive"):
        check_image_archive(path)


def test_a_layer_named_twice_is_refused(tmp_path: Path, settings_env: pytest.MonkeyPatch) -> None:
    """Extraction keeps the last member of a name, a push might send the first: an archive
    naming a layer twice is refused, whatever either copy holds (issue 29.4)."""
    path = tmp_path / "img.tar"
    _image(path, _layer([("app/a", b"a")]))
    with tarfile.open(path) as tar:
        layer_name = next(m.name for m in tar.getmembers() if m.name.endswith("/layer.tar"))
    data = path.read_bytes()
    end = len(data)
    while data[end - 512 : end] == bytes(512):
        end -= 512
    replacement = b"\x28\xb5\x2f\xfd" + b"\x01" * 600  # not a tar (zstd magic)
    path.write_bytes(
        data[:end]
        + _header(layer_name, len(replacement))
        + replacement
        + bytes(-len(replacement) % 512)
        + bytes(1024)
    )
    with pytest.raises(InvalidSubmission, match="a second member named") as refused:
        check_image_archive(path)
    assert repr(layer_name) in refused.value.detail


def test_an_empty_layer_is_fine(tmp_path: Path, settings_env: pytest.MonkeyPatch) -> None:
    path = tmp_path / "img.tar"
    _image(path, b"\0" * 1024)  # how docker writes a layer without files
    assert check_image_archive(path).layer_members == 0


def test_an_oversized_extended_header_is_refused_unread(
    tmp_path: Path, settings_env: pytest.MonkeyPatch
) -> None:
    """tarfile would read a pax header whole into memory: one claiming 1 GiB is refused on
    its header (there are no such bytes here to read)."""
    head = io.BytesIO()
    pax = tarfile.TarInfo("././@PaxHeader")
    pax.type = tarfile.XHDTYPE
    pax.size = 1024**3
    head.write(pax.tobuf(format=tarfile.USTAR_FORMAT))
    path = tmp_path / "pax.tar.gz"
    path.write_bytes(gzip.compress(head.getvalue() + b"\0" * 8192))
    with pytest.raises(InvalidSubmission, match="extended tar header of 1073741824 bytes"):
        check_image_archive(path)


def _gzip_of_zeros(head: bytes, zeros: int) -> bytes:
    """``head`` then ``zeros`` zero bytes, gzip-compressed as concatenated gzip members (one
    compressed 16 MiB block repeated): about 1 MB per GiB, made in milliseconds."""
    block = gzip.compress(bytes(16 * MiB), compresslevel=9)
    assert zeros % (16 * MiB) == 0
    return gzip.compress(head) + block * (zeros // (16 * MiB))


def test_a_gzip_bomb_is_refused_after_bounded_work(
    tmp_path: Path, settings_env: pytest.MonkeyPatch
) -> None:
    """One member claiming 1 GiB of zeros (within every size limit), about 1 MB on disk:
    skipping its bytes means expanding them. The check stops once the expansion passes the
    ratio, long before the end of the file (the old check expanded all of it, then refused
    the archive for having no manifest)."""
    path = tmp_path / "bomb.tar.gz"
    path.write_bytes(_gzip_of_zeros(_header("blobs/sha256/zeros", 1024**3), 1024**3))
    size = path.stat().st_size
    assert size < 2 * MiB
    detail = _too_large(path, "ARCHIVE_MAX_EXPANSION_RATIO", "more than 32 times")
    read = int(re.search(r"from the first (\d+)", detail).group(1))  # type: ignore[union-attr]
    assert read < size / 4, (read, size)


def test_a_bomb_in_a_compressed_layer_is_refused_after_bounded_work(
    tmp_path: Path, settings_env: pytest.MonkeyPatch
) -> None:
    """A plain archive whose gzip layer holds a 1 GiB file of zeros: within the image size
    limit, so before the ratio it was accepted after expanding all of it."""
    layer = _gzip_of_zeros(_header("zeros", 1024**3), 1024**3)
    path = tmp_path / "img.tar"
    _image(path, layer)
    assert path.stat().st_size < 2 * MiB
    detail = _too_large(path, "ARCHIVE_MAX_EXPANSION_RATIO")
    assert int(re.search(r"more than (\d+) bytes", detail).group(1)) < 64 * MiB  # type: ignore[union-attr]


def test_the_ratio_is_what_refuses(tmp_path: Path, settings_env: pytest.MonkeyPatch) -> None:
    path = tmp_path / "zeros.tar.gz"
    _image(path, _layer([("zeros", b"\0" * (40 * MiB))]), outer_gzip=True)
    _too_large(path, "ARCHIVE_MAX_EXPANSION_RATIO")
    _limit(settings_env, "ARCHIVE_MAX_EXPANSION_RATIO", 5000)
    assert check_image_archive(path).image_bytes == 40 * MiB

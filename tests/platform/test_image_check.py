"""The pure-Python check of `docker save` archives, on archives crafted here."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from szbench.algorithms.image_check import check_image_archive
from szbench.errors import InvalidSubmission
from tests.platform.images import docker_save, member


@pytest.mark.parametrize("layout", ["legacy", "oci"])
@pytest.mark.parametrize("gzip", [False, True])
def test_valid_archives(tmp_path: Path, layout: str, gzip: bool) -> None:
    path = tmp_path / ("img.tar.gz" if gzip else "img.tar")
    image_id = docker_save(path, layout=layout, gzip=gzip)
    info = check_image_archive(path)
    assert info.digest == image_id
    assert (info.os, info.architecture, info.user) == ("linux", "amd64", "1000")
    assert info.layout == ("docker-save" if layout == "legacy" else "oci")
    assert info.gzip is gzip
    assert info.layers == 1
    assert info.repo_tags == ["algo0:1.0"]


def test_bare_oci_layout_read_through_index(tmp_path: Path) -> None:
    path = tmp_path / "img.tar"
    image_id = docker_save(path, layout="oci", with_manifest_json=False)
    info = check_image_archive(path)
    assert info.digest == image_id
    assert info.layout == "oci"


def _refused(path: Path, *fragments: str, allow_root: bool = False) -> str:
    with pytest.raises(InvalidSubmission) as err:
        check_image_archive(path, allow_root=allow_root)
    for fragment in fragments:
        assert fragment in err.value.detail
    return err.value.detail


@pytest.mark.parametrize(
    ("evil", "fragment"),
    [
        (member("../escape.sh"), "escapes the archive"),
        (member("/etc/cron.d/evil"), "escapes the archive"),
        (member("blobs/../../x"), "escapes the archive"),
        (member("link", kind=tarfile.SYMTYPE, link="/etc/passwd"), "symbolic link"),
        (member("a/link", kind=tarfile.SYMTYPE, link="../../outside"), "symbolic link"),
        (member("hard", kind=tarfile.LNKTYPE, link="../outside"), "hard link"),
        (member("dev", kind=tarfile.CHRTYPE), "device files"),
        (member("fifo", kind=tarfile.FIFOTYPE), "FIFO"),
    ],
)
def test_members_escaping_the_archive_are_refused(
    tmp_path: Path, evil: tarfile.TarInfo, fragment: str
) -> None:
    path = tmp_path / "img.tar"
    docker_save(path, extra=[evil])
    detail = _refused(path, fragment)
    assert repr(evil.name) in detail


def test_symlink_inside_the_archive_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "img.tar"
    docker_save(path, extra=[member("x/link", kind=tarfile.SYMTYPE, link="../repositories")])
    assert check_image_archive(path).digest.startswith("sha256:")


def test_two_images_refused(tmp_path: Path) -> None:
    path = tmp_path / "img.tar"
    docker_save(path, images=2)
    _refused(path, "holds 2 images", "exactly one")
    docker_save(path, images=2, layout="oci", with_manifest_json=False)
    _refused(path, "index.json", "holds 2 images")


def test_wrong_platform_refused(tmp_path: Path) -> None:
    path = tmp_path / "img.tar"
    docker_save(path, arch="arm64")
    _refused(path, "linux/arm64", "linux/amd64")
    docker_save(path, os_name="windows")
    _refused(path, "windows/amd64")


@pytest.mark.parametrize("user", [None, "", "root", "0", "0:0", "root:root"])
def test_root_user_refused_unless_allowed(tmp_path: Path, user: str | None) -> None:
    path = tmp_path / "img.tar"
    docker_save(path, user=user)
    _refused(path, "runs as root", "USER")
    assert check_image_archive(path, allow_root=True).digest.startswith("sha256:")


def test_non_root_users_accepted(tmp_path: Path) -> None:
    path = tmp_path / "img.tar"
    for user in ("1000", "1000:1000", "algo", "nobody:nogroup"):
        docker_save(path, user=user)
        assert check_image_archive(path).user == user


def test_not_an_archive(tmp_path: Path) -> None:
    path = tmp_path / "img.tar"
    path.write_bytes(b"this is not a tar file at all" * 100)
    _refused(path, "not a readable tar archive")
    gz = tmp_path / "img.tar.gz"
    gz.write_bytes(b"\x1f\x8b" + b"garbage" * 100)
    _refused(gz, "tar.gz")


def test_tar_without_manifest(tmp_path: Path) -> None:
    path = tmp_path / "plain.tar"
    with tarfile.open(path, "w") as tar:
        tar.addfile(member("hello.txt", size=0))
    _refused(path, "not an image archive written by `docker save`")


def test_missing_layer_and_tampered_config(tmp_path: Path) -> None:
    import io
    import json

    path = tmp_path / "img.tar"
    docker_save(path)
    # Rewrite the archive: drop the layer file.
    src = tarfile.open(path)  # noqa: SIM115 - read by both rewrites below, closed at the end
    out = tmp_path / "nolayer.tar"
    with tarfile.open(out, "w") as dst:
        for m in src.getmembers():
            if not m.name.endswith("layer.tar"):
                dst.addfile(m, src.extractfile(m))
    _refused(out, "layer", "missing from the archive")
    # Tamper with the config: its content no longer matches its name.
    tampered = tmp_path / "tampered.tar"
    with tarfile.open(tampered, "w") as dst:
        for m in src.getmembers():
            data = src.extractfile(m).read()  # type: ignore[union-attr]
            if m.name.endswith(".json") and "/" not in m.name and m.name != "manifest.json":
                config = json.loads(data)
                config["config"]["User"] = "1001"
                data = json.dumps(config).encode()
                m.size = len(data)
            dst.addfile(m, io.BytesIO(data))
    _refused(tampered, "does not match its name")
    src.close()

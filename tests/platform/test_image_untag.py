"""Loading an archive never applies its names (issue 21 point 2): the stream handed to
``docker load`` (:func:`untagged_archive`) has every name taken out and everything else
byte for byte. The engine's side: ``tests/worker/test_image_load.py``."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest

from szbench.algorithms.image_check import check_image_archive, untagged_archive
from szbench.errors import InvalidSubmission
from tests.platform.images import docker_save, member

NAMES = ["szbench-test/victim:1", "szbench/worker:latest"]


def _members(path: Path) -> dict[str, tuple[tarfile.TarInfo, bytes]]:
    out = {}
    with tarfile.open(path) as tar:
        for info in tar.getmembers():
            fh = tar.extractfile(info) if info.isfile() else None
            out[info.name] = (info, fh.read() if fh is not None else b"")
    return out


@pytest.mark.parametrize("layout", ["legacy", "oci"])
@pytest.mark.parametrize("gzip", [False, True])
def test_the_stream_has_no_name_and_every_other_byte(
    tmp_path: Path, layout: str, gzip: bool
) -> None:
    original = tmp_path / ("img.tar.gz" if gzip else "img.tar")
    image_id = docker_save(original, layout=layout, gzip=gzip, tags=NAMES)
    before = _members(original)
    assert json.loads(before["manifest.json"][1])[0]["RepoTags"] == NAMES
    assert "szbench/worker" in before["repositories"][1].decode()

    stream = tmp_path / "stream.tar"
    stream.write_bytes(b"".join(untagged_archive(original)))
    after = _members(stream)

    assert "repositories" not in after
    (entry,) = json.loads(after["manifest.json"][1])
    assert entry["RepoTags"] is None
    assert entry["Config"] == json.loads(before["manifest.json"][1])[0]["Config"]
    if layout == "oci":
        index = json.loads(after["index.json"][1])
        assert index["manifests"]
        for descriptor in index["manifests"]:
            assert "org.opencontainers.image.ref.name" not in descriptor["annotations"]
            assert "io.containerd.image.name" not in descriptor["annotations"]
    changed = {"manifest.json", "index.json", "repositories"}
    assert {n: d for n, (_, d) in after.items() if n not in changed} == {
        n: d for n, (_, d) in before.items() if n not in changed
    }
    assert check_image_archive(stream).digest == image_id


@pytest.mark.parametrize("name", ["manifest.json", "index.json", "repositories"])
def test_a_naming_member_that_is_a_link_is_refused(tmp_path: Path, name: str) -> None:
    """The engine's load would follow the link past the names taken out of the member."""
    path = tmp_path / "img.tar"
    link = member(name, kind=tarfile.SYMTYPE, link="elsewhere.json")
    docker_save(path, layout="oci", extra=[link])  # the later member of a name wins
    with pytest.raises(InvalidSubmission, match=f"{name}: must be a regular file"):
        check_image_archive(path)
    with pytest.raises(InvalidSubmission, match=f"{name}: must be a regular file"):
        b"".join(untagged_archive(path))

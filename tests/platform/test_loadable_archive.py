"""The engine loads only what the platform checked (issue 29.4): the stream handed to
``docker load`` (:func:`loadable_archive`) is a tar the platform writes itself from what its
reader read, and the reader refuses every archive that the engine's extraction would read
otherwise (links it did not resolve, two members of a name, paths through links), whatever
the name encoding (``./``, PAX, GNU long names). The engine's side, with the same family:
``tests/worker/test_image_load.py``."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from szbench.algorithms.image_check import check_image_archive, loadable_archive
from szbench.errors import InvalidSubmission
from szbench.models import Upload, UploadState
from tests.platform import factories as f
from tests.platform.archive_family import KINDS, craft
from tests.platform.images import docker_save, member

NAMES = ["szbench-test/victim:1", "szbench-test/new:1"]


def _members(path: Path) -> dict[str, tuple[tarfile.TarInfo, bytes]]:
    out = {}
    with tarfile.open(path) as tar:
        for info in tar.getmembers():
            fh = tar.extractfile(info) if info.isfile() else None
            out[info.name] = (info, fh.read() if fh is not None else b"")
    return out


def _stream(path: Path, tmp_path: Path) -> Path:
    stream = tmp_path / "stream.tar"
    stream.write_bytes(b"".join(loadable_archive(path)))
    return stream


@pytest.mark.parametrize("layout", ["legacy", "oci"])
@pytest.mark.parametrize("gzip", [False, True])
def test_the_engine_gets_the_checked_config_and_layers_and_nothing_else(
    tmp_path: Path, layout: str, gzip: bool
) -> None:
    original = tmp_path / ("img.tar.gz" if gzip else "img.tar")
    layers = [[(member("app/a"), b"a")], [(member("app/b"), b"b")]]
    image_id = docker_save(original, layout=layout, gzip=gzip, tags=NAMES, layers=layers)
    before = _members(original)
    (entry,) = json.loads(before["manifest.json"][1])

    after = _members(_stream(original, tmp_path))

    config = image_id.removeprefix("sha256:") + ".json"
    assert sorted(after) == sorted(["manifest.json", config, "layer-0.tar", "layer-1.tar"])
    assert json.loads(after["manifest.json"][1]) == [
        {"Config": config, "RepoTags": None, "Layers": ["layer-0.tar", "layer-1.tar"]}
    ]
    assert hashlib.sha256(after[config][1]).hexdigest() == image_id.removeprefix("sha256:")
    for i, name in enumerate(entry["Layers"]):
        assert after[f"layer-{i}.tar"][1] == before[name][1]
    for info, _ in after.values():
        assert info.isfile()
    assert check_image_archive(tmp_path / "stream.tar").digest == image_id


def test_a_layer_listed_twice_is_written_once(tmp_path: Path) -> None:
    """Legacy `docker save` links a repeated layer to its first copy: the link is followed
    here, and the engine gets one file named twice in the manifest."""
    path = tmp_path / "img.tar"
    image_id = docker_save(path)
    members = _members(path)
    (entry,) = json.loads(members["manifest.json"][1])
    entry["Layers"] = [entry["Layers"][0], "again/layer.tar"]
    manifest = json.dumps([entry]).encode()
    with tarfile.open(tmp_path / "twice.tar", "w") as tar:
        for name, (info, data) in members.items():
            if name == "manifest.json":
                info.size = len(manifest)
                data = manifest
            tar.addfile(info, io.BytesIO(data))
        link = "../" + entry["Layers"][0]
        tar.addfile(member("again/layer.tar", kind=tarfile.SYMTYPE, link=link))
    after = _members(_stream(tmp_path / "twice.tar", tmp_path))
    assert json.loads(after["manifest.json"][1])[0]["Layers"] == ["layer-0.tar", "layer-0.tar"]
    assert "layer-1.tar" not in after
    assert check_image_archive(tmp_path / "stream.tar").digest == image_id


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_family_is_refused_naming_the_member_or_loads_only_the_checked_image(
    tmp_path: Path, kind: str
) -> None:
    crafted = craft(kind, tmp_path, NAMES)
    if crafted.refusal is None:
        assert check_image_archive(crafted.path).digest == crafted.checked_id
        after = _members(_stream(crafted.path, tmp_path))
        assert after["manifest.json"][1].count(b"Config") == 1
        assert crafted.hidden_id.removeprefix("sha256:").encode() not in b"".join(
            data for _, data in after.values()
        )
        assert check_image_archive(tmp_path / "stream.tar").digest == crafted.checked_id
        return
    for read in (check_image_archive, lambda p: b"".join(loadable_archive(p))):
        with pytest.raises(InvalidSubmission) as refused:
            read(crafted.path)
        assert crafted.refusal in refused.value.detail
        assert repr(crafted.member) in refused.value.detail or refused.value.detail.startswith(
            f"{crafted.member}:"
        )


@pytest.mark.parametrize(
    ("link", "fragment"),
    [
        (member("x/dangling", kind=tarfile.SYMTYPE, link="nothing"), "does not lead to a file"),
        (member("x/folder", kind=tarfile.SYMTYPE, link="../blobs"), "does not lead to a file"),
        (member("x/loop", kind=tarfile.SYMTYPE, link="loop"), "does not lead to a file"),
        (member("hard", kind=tarfile.LNKTYPE, link="nothing"), "does not lead to a file"),
    ],
)
def test_a_link_the_reader_cannot_resolve_to_a_file_is_refused(
    tmp_path: Path, link: tarfile.TarInfo, fragment: str
) -> None:
    path = tmp_path / "img.tar"
    docker_save(path, layout="oci", extra=[link])
    with pytest.raises(InvalidSubmission, match=fragment) as refused:
        check_image_archive(path)
    assert repr(link.name) in refused.value.detail


def test_the_exploit_is_refused_through_the_api(
    client: TestClient, db_session: Session, tmp_path: Path
) -> None:
    """The issue's upload, submitted through the API on the default deployment: 422 naming
    the member, the upload refused and its bytes gone; no version."""
    owner = f.user(db_session)
    h = f.headers(db_session, owner)
    algo = client.post("/api/v1/algorithms", headers=h, json={"name": "linked"}).json()
    data = craft("exploit", tmp_path, NAMES).path.read_bytes()
    upload = client.post(
        "/api/v1/uploads", headers=h, json={"filename": "img.tar", "size_bytes": len(data)}
    ).json()
    assert client.put(
        f"/api/v1/uploads/{upload['id']}", headers=h, params={"offset": 0}, content=data
    ).json()["complete"]
    r = client.post(
        f"/api/v1/algorithms/{algo['id']}/versions",
        headers=h,
        json={"version": "1", "upload_id": upload["id"]},
    )
    assert r.status_code == 422, r.text
    assert r.json()["error"] == "InvalidSubmission"
    assert "archive member 'd/manifest.json': its path runs through 'd'" in r.json()["detail"]
    db_session.expire_all()
    assert db_session.get(Upload, upload["id"]).state == UploadState.REFUSED
    assert client.get(f"/api/v1/algorithms/{algo['id']}/versions", headers=h).json()["total"] == 0

"""The pure-Python check of `docker save` archives, on archives crafted here."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from szbench.algorithms.image_check import check_image_archive, image_uid
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


PASSWD = b"root:x:0:0:root:/root:/bin/sh\nalgo:x:1000:1000::/home/algo:/bin/sh\n"


def _file(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.mode = 0o755 if kind == tarfile.DIRTYPE else 0o644
    return info


def _with_passwd(content: bytes) -> list[list[tuple[tarfile.TarInfo, bytes]]]:
    return [[(_file("etc", tarfile.DIRTYPE), b""), (_file("etc/passwd"), content)]]


# User, /etc/passwd of the image (None: none), and the uid the engine runs it as (None: it
# refuses to start the container). Numeric forms are what Go's Atoi reads; names resolve
# through the first matching passwd entry, whose unparsable uid field runc reads as 0.
UIDS = [
    ("", PASSWD, 0),
    ("0", None, 0),
    ("00", None, 0),
    ("+0", None, 0),
    ("-0", None, 0),
    ("000:1000", None, 0),
    ("0:0", None, 0),
    ("root", PASSWD, 0),
    ("root:root", PASSWD, 0),
    ("1000", None, 1000),
    ("+1000", None, 1000),
    ("01000:0", None, 1000),
    ("algo", PASSWD, 1000),
    ("algo:0", PASSWD, 1000),
    ("nobody", PASSWD, None),
    ("algo", None, None),
    ("1000", b"algo:x:0:0::/:/bin/sh\n", 1000),  # numeric: passwd never consulted
    ("algo", b"algo:x:x:1000::/:/bin/sh\n", 0),
    ("algo", b"algo:x::1000::/:/bin/sh\n", 0),
    ("algo", b"algo:x\n", 0),
    ("algo", b"algo:x:99999999999999999999:0::/:/bin/sh\n", 0),
    ("algo", b"algo:x:00:0::/:/bin/sh\nalgo:x:1000:0::/:/bin/sh\n", 0),  # first entry wins
    ("algo", b"  algo:x:0:0::/:/bin/sh  \n", 0),  # runc trims each line
    ("algo", b"\xc2\xa0algo:x:0:0\nalgo:x:1000:0\n", 0),  # Unicode blanks too
    ("algo", b"junk\x0balgo:x:1000\nalgo:x:0:0\n", 0),  # lines end at \n only
    ("99999999999999999999", None, None),  # no int64: a name, and no such entry
]


@pytest.mark.parametrize(("user", "passwd", "uid"), UIDS)
def test_image_uid_is_the_engines(user: str, passwd: bytes | None, uid: int | None) -> None:
    assert image_uid(user, lambda: passwd) == uid


@pytest.mark.parametrize(
    "user", [None, "", "root", "0", "00", "+0", "-0", "0:0", "000:1000", "root:root", " root"]
)
def test_root_user_refused_unless_allowed(tmp_path: Path, user: str | None) -> None:
    path = tmp_path / "img.tar"
    docker_save(path, user=user, layers=_with_passwd(PASSWD))
    _refused(path, "runs as root", "USER")
    assert check_image_archive(path, allow_root=True).digest.startswith("sha256:")


@pytest.mark.parametrize("layout", ["legacy", "oci"])
def test_non_root_users_accepted(tmp_path: Path, layout: str) -> None:
    path = tmp_path / "img.tar"
    passwd = PASSWD + b"nobody:x:65534:65534::/:/bin/sh\n"
    for user in ("1000", "1000:1000", "+1000", "algo", "algo:0", "nobody:nogroup", "ghost"):
        docker_save(path, user=user, layout=layout, layers=_with_passwd(passwd))
        assert check_image_archive(path).user == user


@pytest.mark.parametrize("gzip", [False, True])
def test_names_resolve_through_the_topmost_passwd(tmp_path: Path, gzip: bool) -> None:
    path = tmp_path / "img.tar"
    root_algo = b"algo:x:0:0::/:/bin/sh\n"
    # A lower layer says algo is 1000; the layer above replaces the file: algo is root.
    docker_save(
        path, user="algo", gzip=gzip, layers=[*_with_passwd(PASSWD), *_with_passwd(root_algo)]
    )
    _refused(path, "runs as root", "'algo'")
    # The other way round: the top layer's passwd decides, algo is 1000.
    docker_save(
        path, user="algo", gzip=gzip, layers=[*_with_passwd(root_algo), *_with_passwd(PASSWD)]
    )
    assert check_image_archive(path).user == "algo"
    # A whiteout deletes the lower layer's passwd: no entry, the engine would not start it.
    deleted = [[(_file("etc/.wh.passwd"), b"")]]
    docker_save(path, user="algo", gzip=gzip, layers=[*_with_passwd(root_algo), *deleted])
    assert check_image_archive(path).user == "algo"
    # An opaque /etc hides the lower layers' files the same way.
    opaque = [[(_file("etc", tarfile.DIRTYPE), b""), (_file("etc/.wh..wh..opq"), b"")]]
    docker_save(path, user="algo", gzip=gzip, layers=[*_with_passwd(root_algo), *opaque])
    assert check_image_archive(path).user == "algo"


@pytest.mark.parametrize(
    "layer",
    [
        [(_file("etc", tarfile.SYMTYPE, "app"), b"")],
        [(_file("etc", tarfile.DIRTYPE), b""), (_file("etc/passwd", tarfile.SYMTYPE, "x"), b"")],
        [(_file("etc", tarfile.DIRTYPE), b""), (_file("etc/passwd", tarfile.LNKTYPE, "x"), b"")],
    ],
)
def test_passwd_that_cannot_be_read_safely_is_refused_for_names(
    tmp_path: Path, layer: list[tuple[tarfile.TarInfo, bytes]]
) -> None:
    path = tmp_path / "img.tar"
    docker_save(path, user="algo", layers=[*_with_passwd(PASSWD), layer])
    _refused(path, "cannot tell which uid", "USER 1000")
    # A numeric user needs no passwd.
    docker_save(path, user="1000", layers=[*_with_passwd(PASSWD), layer])
    assert check_image_archive(path).user == "1000"


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


@pytest.mark.parametrize("gzip", [False, True])
def test_the_check_reports_how_far_each_pass_has_read(tmp_path: Path, gzip: bool) -> None:
    """Issue 29.11: the check tells how far it has read the file, per pass (a named user
    needs a second one), each ending at the file's size; a numeric user needs one pass."""
    path = tmp_path / ("img.tar.gz" if gzip else "img.tar")
    for user, steps in (("algo", ["checking", "checking-user"]), ("1000", ["checking"])):
        docker_save(path, user=user, gzip=gzip, layers=_with_passwd(PASSWD))
        told: list[tuple[str, int, int]] = []
        check_image_archive(path, progress=lambda *report, told=told: told.append(report))
        size = path.stat().st_size
        order = [step for step, _, _ in told]
        assert order == sorted(order, key=steps.index)  # one pass after the other
        assert sorted(set(order), key=steps.index) == steps
        for step in steps:
            done = [d for s, d, _ in told if s == step]
            assert done == sorted(done)  # forward only
            assert done[-1] == size
        assert {total for _, _, total in told} == {size}

"""Upload archives that try to make the engine's load read another archive than the
platform's checker did (issue 29.4), and legitimate archives written in the same odd ways.

Each is a clean archive of :func:`tests.platform.images.docker_save` (the *checked* image,
non-root) with members added or rewritten. The hostile ones carry a second manifest naming
``tags``: the checked image under ``tags[1]``, and under ``tags[0]`` a *hidden* image (a
root image whose config and layer are members of the archive, never checked). Loaded by an
engine that follows the upload's links or last-of-a-name members, they move ``tags[0]`` to
the hidden root image and create ``tags[1]``; the first of them (``exploit``) did so on the
tree of commit 4f6b99f.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.platform.images import docker_save

Members = list[tuple[tarfile.TarInfo, bytes]]
LONG = "d" * 120  # over ustar's 100-byte name field: a GNU long name or a PAX path


@dataclass(frozen=True)
class Crafted:
    path: Path
    checked_id: str
    hidden_id: str
    # A fragment of the refusal and the member it names; None for an archive to accept.
    refusal: str | None
    member: str | None


def _read(path: Path) -> Members:
    with tarfile.open(path) as tar:
        out = []
        for info in tar.getmembers():
            fh = tar.extractfile(info) if info.isfile() else None
            out.append((info, fh.read() if fh is not None else b""))
    return out


def _file(name: str, data: bytes, **pax: str) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.pax_headers = dict(pax)
    return info, data


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = target
    return info, b""


def _write(path: Path, members: Members, fmt: int = tarfile.PAX_FORMAT) -> None:
    with tarfile.open(path, "w", format=fmt) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)


def _hidden(directory: Path, tags: list[str], clean: Members) -> tuple[str, Members, bytes]:
    """A root image's config and layer as members under ``h/``, and a manifest naming it
    ``tags[0]`` and the checked image (as the clean manifest names it) ``tags[1]``."""
    source = directory / "hidden-source.tar"
    hidden_id = docker_save(source, user="0", layers=[[_file("app/root", b"uid 0")]])
    members = []
    for info, data in _read(source):
        if info.name.endswith("/layer.tar"):
            members.append(_file("h/layer.tar", data))
        elif info.name == hidden_id.removeprefix("sha256:") + ".json":
            members.append(_file(f"h/{info.name}", data))
    (checked,) = json.loads(next(d for i, d in clean if i.name == "manifest.json"))
    manifest = [
        {
            "Config": f"h/{hidden_id.removeprefix('sha256:')}.json",
            "RepoTags": [tags[0]],
            "Layers": ["h/layer.tar"],
        },
        {"Config": checked["Config"], "RepoTags": [tags[1]], "Layers": checked["Layers"]},
    ]
    source.unlink()
    return hidden_id, members, json.dumps(manifest).encode()


def _clean(directory: Path) -> tuple[str, Members]:
    source = directory / "checked-source.tar"
    checked_id = docker_save(source)
    members = _read(source)
    source.unlink()
    return checked_id, members


# Each kind: (members of the clean archive, the hidden members, the hidden manifest) ->
# (the archive's members, tar format, refusal fragment, member named) .
Kind = Callable[[Members, Members, bytes], tuple[Members, int, str | None, str | None]]


def _exploit(clean: Members, hidden: Members, manifest: bytes) -> tuple[Members, int, str, str]:
    return (
        [*clean, *hidden, _link("d", "."), _file("d/manifest.json", manifest)],
        tarfile.PAX_FORMAT,
        "its path runs through 'd', a symbolic link",
        "d/manifest.json",
    )


def _pax_path(clean: Members, hidden: Members, manifest: bytes) -> tuple[Members, int, str, str]:
    # The ustar name field says one thing, the PAX record (which readers apply) another.
    smuggled = _file("innocent.json", manifest, path="d/manifest.json")
    return (
        [*clean, *hidden, _link("d", "."), smuggled],
        tarfile.PAX_FORMAT,
        "its path runs through 'd', a symbolic link",
        "d/manifest.json",
    )


def _long_names(fmt: int) -> Kind:
    def kind(clean: Members, hidden: Members, manifest: bytes) -> tuple[Members, int, str, str]:
        return (
            [*clean, *hidden, _link(LONG, "."), _file(f"{LONG}/manifest.json", manifest)],
            fmt,
            f"its path runs through {LONG!r}, a symbolic link",
            f"{LONG}/manifest.json",
        )

    return kind


def _link_over_folder(
    clean: Members, hidden: Members, manifest: bytes
) -> tuple[Members, int, str, str]:
    return (
        [*clean, *hidden, _file("d/manifest.json", manifest), _link("d", ".")],
        tarfile.PAX_FORMAT,
        "where earlier members have their folder",
        "d",
    )


def _symlinked_manifest(
    clean: Members, hidden: Members, manifest: bytes
) -> tuple[Members, int, str, str]:
    rest = [m for m in clean if m[0].name != "manifest.json"]
    return (
        [*rest, *hidden, _file("x/m.json", manifest), _link("manifest.json", "x/m.json")],
        tarfile.PAX_FORMAT,
        "manifest.json: must be a regular file",
        "manifest.json",
    )


def _hard_linked_manifest(
    clean: Members, hidden: Members, manifest: bytes
) -> tuple[Members, int, str, str]:
    rest = [m for m in clean if m[0].name != "manifest.json"]
    linked = _link("manifest.json", "x/manifest.json", tarfile.LNKTYPE)
    return (
        [*rest, *hidden, _file("x/manifest.json", manifest), linked],
        tarfile.PAX_FORMAT,
        "manifest.json: must be a regular file",
        "manifest.json",
    )


def _hard_link_folder(
    clean: Members, hidden: Members, manifest: bytes
) -> tuple[Members, int, str, str]:
    return (
        [*clean, *hidden, _link("d", "repositories", tarfile.LNKTYPE), _file("d/m.json", manifest)],
        tarfile.PAX_FORMAT,
        "its path runs through 'd', a hard link",
        "d/m.json",
    )


def _duplicate(prefix: str) -> Kind:
    def kind(clean: Members, hidden: Members, manifest: bytes) -> tuple[Members, int, str, str]:
        return (
            [*clean, *hidden, _file(f"{prefix}manifest.json", manifest)],
            tarfile.PAX_FORMAT,
            "a second member named 'manifest.json'",
            f"{prefix}manifest.json",
        )

    return kind


def _dot_slash(clean: Members, hidden: Members, manifest: bytes) -> tuple[Members, int, None, None]:
    """As `tar -C DIR -c .` writes a saved folder: every name under `./`, `./` itself first."""
    root = tarfile.TarInfo(".")
    root.type = tarfile.DIRTYPE
    renamed = []
    for info, data in clean:
        info.name = "./" + info.name
        renamed.append((info, data))
    return [(root, b""), *renamed], tarfile.USTAR_FORMAT, None, None


def _long_layer_path(fmt: int) -> Kind:
    """A legitimate archive whose layer lives under a name over 100 bytes."""

    def kind(clean: Members, hidden: Members, manifest: bytes) -> tuple[Members, int, None, None]:
        out = []
        for info, data in clean:
            if info.name.endswith("/layer.tar"):
                old = info.name
                info.name = f"{LONG}/{old}"
            elif info.name == "manifest.json":
                entries = json.loads(data)
                entries[0]["Layers"] = [f"{LONG}/{p}" for p in entries[0]["Layers"]]
                info, data = _file("manifest.json", json.dumps(entries).encode())
            out.append((info, data))
        return out, fmt, None, None

    return kind


def _extras(clean: Members, hidden: Members, manifest: bytes) -> tuple[Members, int, None, None]:
    """Accepted: a hidden image's members and its names sit unreferenced in the archive."""
    return [*clean, *hidden, _file("h/manifest.json", manifest)], tarfile.PAX_FORMAT, None, None


KINDS: dict[str, Kind] = {
    "exploit": _exploit,
    "pax-path": _pax_path,
    "gnu-long-names": _long_names(tarfile.GNU_FORMAT),
    "pax-long-names": _long_names(tarfile.PAX_FORMAT),
    "link-over-folder": _link_over_folder,
    "symlinked-manifest": _symlinked_manifest,
    "hard-linked-manifest": _hard_linked_manifest,
    "hard-link-as-folder": _hard_link_folder,
    "duplicate-manifest": _duplicate(""),
    "dot-slash-duplicate": _duplicate("./"),
    # Accepted, and loaded as the checked image only:
    "dot-slash-names": _dot_slash,
    "gnu-long-layer-path": _long_layer_path(tarfile.GNU_FORMAT),
    "pax-long-layer-path": _long_layer_path(tarfile.PAX_FORMAT),
    "unreferenced-extras": _extras,
}


def craft(kind: str, directory: Path, tags: list[str]) -> Crafted:
    """The archive of ``kind`` in ``directory``; ``tags``: the two names it tries to set."""
    checked_id, clean = _clean(directory)
    hidden_id, hidden, manifest = _hidden(directory, tags, clean)
    members, fmt, refusal, member = KINDS[kind](clean, hidden, manifest)
    path = directory / f"{kind}.tar"
    _write(path, members, fmt)
    return Crafted(path, checked_id, hidden_id, refusal, member)

"""Check an image archive written by ``docker save``, in pure Python (no docker SDK).

Accepted: a ``.tar`` or ``.tar.gz`` holding exactly one image in either layout that
``docker save`` writes:

- legacy (Docker before 25): ``manifest.json`` naming ``<config hex>.json`` and
  ``<layer id>/layer.tar`` files;
- OCI layout (Docker 25 and later): ``oci-layout``, ``index.json`` and ``blobs/sha256/*``,
  plus the same ``manifest.json`` pointing into ``blobs/``. A bare OCI layout without
  ``manifest.json`` is read through ``index.json``.

Refused, each with a message naming the member or field: anything that is not a tar
archive; members whose path or link target escapes the archive (absolute paths, ``..``,
symbolic or hard links pointing outside); device files and FIFOs; more or fewer than one
image; a config blob whose content does not match its name; a platform other than
linux/amd64; an image that runs as root unless the settings allow it.

The recorded digest is the image id: ``sha256:`` + the sha256 of the config blob, which is
what ``docker load`` reports and ``docker inspect`` shows as ``Id``.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from szbench.errors import InvalidSubmission

# JSON members (manifests, configs, indexes) are small; larger files are layers.
_MAX_JSON_BYTES = 8 * 1024**2
_MAX_KEPT_BYTES = 64 * 1024**2


@dataclass(frozen=True)
class ImageInfo:
    digest: str
    architecture: str
    os: str
    user: str
    layout: str
    layers: int
    repo_tags: list[str] = field(default_factory=list)
    gzip: bool = False


def _is_gzip(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def _escapes(name: str) -> bool:
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return True
    normal = posixpath.normpath(name)
    return normal == ".." or normal.startswith("../")


def _clean(name: str) -> str:
    normal = posixpath.normpath(name)
    return "" if normal == "." else normal


def _check_member(member: tarfile.TarInfo) -> None:
    name = member.name
    if _escapes(name) or ".." in name.split("/"):
        raise InvalidSubmission(f"archive member {name!r}: path escapes the archive")
    if member.isdev() or member.isfifo():
        raise InvalidSubmission(f"archive member {name!r}: device files and FIFOs are not allowed")
    if member.issym():
        target = member.linkname
        resolved = posixpath.join(posixpath.dirname(name), target)
        if target.startswith("/") or _escapes(resolved):
            raise InvalidSubmission(
                f"archive member {name!r}: symbolic link to {target!r} points outside the archive"
            )
    elif member.islnk() and _escapes(member.linkname):
        raise InvalidSubmission(
            f"archive member {name!r}: hard link to {member.linkname!r} points outside the archive"
        )


def _scan(tar: tarfile.TarFile) -> tuple[dict[str, tarfile.TarInfo], dict[str, bytes]]:
    """Check every member; keep the small JSON-looking files' bytes (one pass, also for gzip)."""
    members: dict[str, tarfile.TarInfo] = {}
    kept: dict[str, bytes] = {}
    kept_bytes = 0
    for member in tar:
        _check_member(member)
        name = _clean(member.name)
        members[name] = member
        if member.isfile() and 0 < member.size <= _MAX_JSON_BYTES and kept_bytes < _MAX_KEPT_BYTES:
            fh = tar.extractfile(member)
            if fh is None:
                continue
            head = fh.read(1)
            if head in (b"{", b"["):
                data = head + fh.read()
                kept[name] = data
                kept_bytes += len(data)
    return members, kept


def _resolve(name: str, members: dict[str, tarfile.TarInfo]) -> str:
    """Follow in-archive links (legacy ``docker save`` links repeated layers)."""
    seen: set[str] = set()
    while name in members and name not in seen:
        seen.add(name)
        member = members[name]
        if member.issym():
            name = _clean(posixpath.join(posixpath.dirname(name), member.linkname))
        elif member.islnk():
            name = _clean(member.linkname)
        else:
            return name
    return name


def _json(
    name: str, members: dict[str, tarfile.TarInfo], kept: dict[str, bytes]
) -> tuple[Any, bytes]:
    real = _resolve(name, members)
    if real not in members:
        raise InvalidSubmission(f"{name}: named by the manifest but missing from the archive")
    data = kept.get(real)
    if data is None:
        raise InvalidSubmission(f"{name}: not a JSON document of at most {_MAX_JSON_BYTES} bytes")
    try:
        return json.loads(data), data
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidSubmission(f"{name}: not valid JSON ({exc})") from None


def _from_docker_manifest(
    members: dict[str, tarfile.TarInfo], kept: dict[str, bytes]
) -> tuple[str, list[str], list[str]]:
    manifest, _ = _json("manifest.json", members, kept)
    if not isinstance(manifest, list):
        raise InvalidSubmission("manifest.json: expected a list of images")
    if len(manifest) != 1:
        raise InvalidSubmission(
            f"manifest.json: the archive holds {len(manifest)} images; submit exactly one"
        )
    entry = manifest[0]
    if not isinstance(entry, dict) or not isinstance(entry.get("Config"), str):
        raise InvalidSubmission("manifest.json: the image entry has no Config")
    layers = entry.get("Layers")
    if not isinstance(layers, list) or not all(isinstance(x, str) for x in layers):
        raise InvalidSubmission("manifest.json: Layers must be a list of paths")
    tags = entry.get("RepoTags") or []
    return entry["Config"], layers, [t for t in tags if isinstance(t, str)]


def _from_oci_index(
    members: dict[str, tarfile.TarInfo], kept: dict[str, bytes]
) -> tuple[str, list[str], list[str]]:
    index, _ = _json("index.json", members, kept)
    manifests = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(manifests, list):
        raise InvalidSubmission("index.json: no manifests list")
    if len(manifests) != 1:
        raise InvalidSubmission(
            f"index.json: the archive holds {len(manifests)} images; submit exactly one"
        )
    digest = manifests[0].get("digest", "") if isinstance(manifests[0], dict) else ""
    manifest, _ = _json(_blob_path(digest, "index.json"), members, kept)
    if isinstance(manifest, dict) and "manifests" in manifest:
        raise InvalidSubmission(
            "index.json: a multi-platform image index; submit one linux/amd64 image"
        )
    config = manifest.get("config", {}) if isinstance(manifest, dict) else {}
    layers = manifest.get("layers", []) if isinstance(manifest, dict) else []
    config_path = _blob_path(
        config.get("digest", "") if isinstance(config, dict) else "", "manifest"
    )
    layer_paths = [
        _blob_path(x.get("digest", ""), "manifest layers") for x in layers if isinstance(x, dict)
    ]
    return config_path, layer_paths, []


def _blob_path(digest: str, where: str) -> str:
    algo, _, hex_digest = digest.partition(":")
    if algo != "sha256" or len(hex_digest) != 64:
        raise InvalidSubmission(f"{where}: {digest!r} is not a sha256 digest")
    return f"blobs/sha256/{hex_digest}"


def _runs_as_root(user: str) -> bool:
    name = user.split(":", 1)[0].strip()
    return name in ("", "root", "0")


def check_image_archive(path: Path, *, allow_root: bool = False) -> ImageInfo:
    """Check the ``docker save`` archive at ``path``; its :class:`ImageInfo` or
    :class:`~szbench.errors.InvalidSubmission` naming the problem."""
    gzip = _is_gzip(path)
    try:
        with tarfile.open(path, mode="r:gz" if gzip else "r:") as tar:
            members, kept = _scan(tar)
    except (tarfile.TarError, EOFError, OSError) as exc:
        kind = "tar.gz" if gzip else "tar"
        raise InvalidSubmission(f"the upload is not a readable {kind} archive ({exc})") from None
    if not members:
        raise InvalidSubmission("the archive is empty")

    if "manifest.json" in members:
        layout = "oci" if "oci-layout" in members else "docker-save"
        config_name, layers, tags = _from_docker_manifest(members, kept)
    elif "index.json" in members and "oci-layout" in members:
        layout = "oci"
        config_name, layers, tags = _from_oci_index(members, kept)
    else:
        raise InvalidSubmission(
            "no manifest.json or index.json: not an image archive written by `docker save`"
        )
    if not layers:
        raise InvalidSubmission("manifest.json: the image has no layers")
    for layer in layers:
        if _escapes(layer) or _resolve(_clean(layer), members) not in members:
            raise InvalidSubmission(f"manifest.json: layer {layer!r} is missing from the archive")

    config, raw = _json(_clean(config_name), members, kept)
    digest_hex = hashlib.sha256(raw).hexdigest()
    expected = posixpath.basename(config_name).removesuffix(".json")
    if len(expected) == 64 and expected != digest_hex:
        raise InvalidSubmission(
            f"{config_name}: content does not match its name (sha256 {digest_hex[:12]}...)"
        )
    if not isinstance(config, dict):
        raise InvalidSubmission(f"{config_name}: the image config is not a JSON object")
    arch, os_name = config.get("architecture"), config.get("os")
    if (os_name, arch) != ("linux", "amd64"):
        raise InvalidSubmission(
            f"{config_name}: the image is for {os_name}/{arch}; the workers run linux/amd64"
        )
    runtime = config.get("config") or {}
    user = str(runtime.get("User") or "") if isinstance(runtime, dict) else ""
    if _runs_as_root(user) and not allow_root:
        shown = user or "unset, so root"
        raise InvalidSubmission(
            f"{config_name}: the image runs as root (User is {shown}); "
            "add `USER 1000` (or another non-root user) to the Dockerfile"
        )
    return ImageInfo(
        digest=f"sha256:{digest_hex}",
        architecture=str(arch),
        os=str(os_name),
        user=user,
        layout=layout,
        layers=len(layers),
        repo_tags=tags,
        gzip=gzip,
    )

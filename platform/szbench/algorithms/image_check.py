"""Check an image archive written by ``docker save``, in pure Python (no docker SDK).

Accepted: a ``.tar`` or ``.tar.gz`` holding exactly one image in either layout that
``docker save`` writes:

- legacy (Docker before 25): ``manifest.json`` naming ``<config hex>.json`` and
  ``<layer id>/layer.tar`` files;
- OCI layout (Docker 25 and later): ``oci-layout``, ``index.json`` and ``blobs/sha256/*``,
  plus the same ``manifest.json`` pointing into ``blobs/``. A bare OCI layout without
  ``manifest.json`` is read through ``index.json``.

Refused, each with a message naming the member or field: anything that is not a tar
archive; an archive over a size limit (:class:`ArchiveLimits`, HTTP 413 naming the limit and
its setting): too many members, too many expanded bytes, too many files in its layers or too
many bytes in them (about the loaded image's size); a layer that is not a tar archive;
members whose path or link target escapes the archive (absolute paths, ``..``, symbolic
or hard links pointing outside); two members of one name; a member whose path runs through
a link or a file; a link that does not end at a file of the archive; device files and
FIFOs; more or fewer than one image; a config blob whose content does not match its name; a
platform other than linux/amd64; an image that runs as root unless the settings allow it.
Root is decided as the engine decides it (:func:`image_uid`): numeric users as Go reads
numbers (``00`` and ``+0`` are uid 0), names through the image's own ``/etc/passwd`` read
from its layers; a name whose passwd cannot be read as the engine would (a linked ``/etc``,
a compressed layer) is refused rather than guessed.

The recorded digest is the image id: ``sha256:`` + the sha256 of the config blob, which is
what ``docker load`` reports and ``docker inspect`` shows as ``Id``.

The engine never reads an upload: it loads :func:`loadable_archive`, a tar this module writes
from what it read and checked (its own ``manifest.json``, the config it hashed, the layers
it counted), so no link, duplicate or name-encoding trick in the upload can make the engine's
extraction see another archive than this reader did.

The limits are checked while the archive is read, from each member's header before its
bytes are expanded, so a small compressed archive that expands to terabytes is refused
after its first large header. Members are counted, not listed: only the outer archive's
(at most ``max_members``) are kept; a layer's file headers are dropped as they are read.

Reading past a member's bytes still expands them when they are compressed (gzip has no
way to skip), so the work of decompressing is bounded too (:class:`_Meter`): everything
decompressed, the outer archive and every compressed layer together, may be at most
:data:`ARCHIVE_MAX_EXPANSION_RATIO` times the bytes read of the archive file so far
(past a first :data:`_RATIO_FREE_BYTES`). A decompression bomb is refused after that much
work, however large it claims to be, instead of after expanding to its claimed size.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import io
import json
import lzma
import posixpath
import re
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from szbench.algorithms.image_config import nul_refusal
from szbench.config import Settings, get_settings
from szbench.errors import InvalidSubmission, PayloadTooLarge

# JSON members (manifests, configs, indexes) are small; larger files are layers.
_MAX_JSON_BYTES = 8 * 1024**2
_MAX_KEPT_BYTES = 64 * 1024**2
# tarfile reads a long-name or pax header whole into memory: a header that claims
# gigabytes would be read before any member is seen.
_MAX_EXTENDED_HEADER_BYTES = 1024**2
_BLOCK = tarfile.BLOCKSIZE
# The compressions a layer may use, by their first bytes (zstd is refused: its files could
# not be counted here). The stream each makes is closed with the member it reads.
_DECOMPRESSORS: dict[bytes, Callable[[IO[bytes]], Any]] = {
    b"\x1f\x8b": lambda fh: gzip.GzipFile(fileobj=fh, mode="rb"),
    b"BZh": bz2.BZ2File,
    b"\xfd7zXZ\x00": lzma.LZMAFile,
}
# Decompressed bytes free of the expansion ratio: small archives of text compress far
# better than images do, and this much costs well under a second to expand.
_RATIO_FREE_BYTES = 32 * 1024**2
# The bounds docs/security.md states for the check ("Archives and uploads", "Archive work and
# refusals"): constants, so that what the docs promise is what holds. Decompressing may make
# at most this many times the bytes read (past _RATIO_FREE_BYTES): images compress 2-5 times,
# a gzip bomb about 1,000, so 32 refuses a bomb after that much work and never a real image.
ARCHIVE_MAX_EXPANSION_RATIO = 32.0
# Members of the outer archive are kept (their headers, about 5 MiB at 10,000): an image
# archive holds a manifest, a config and a few entries per layer.
ARCHIVE_MAX_MEMBERS = 10_000
# Files in all layers together, counted and dropped as read: an image with a full CUDA and
# Python stack holds on the order of 100,000; a million bounds the header reading of an
# archive of empty files.
IMAGE_MAX_LAYER_MEMBERS = 1_000_000
# Forward seeks in a compressed stream are reads of at most this much, each then charged.
_SKIP_CHUNK = 1024**2


@dataclass(frozen=True)
class ArchiveLimits:
    """What an image archive may hold; each over-limit archive is refused while it is read."""

    max_members: int
    max_expanded_bytes: int
    max_layer_members: int
    max_image_bytes: int
    max_expansion_ratio: float = ARCHIVE_MAX_EXPANSION_RATIO

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> ArchiveLimits:
        settings = settings or get_settings()
        return cls(
            max_members=ARCHIVE_MAX_MEMBERS,
            max_expanded_bytes=settings.archive_max_expanded_bytes,
            max_layer_members=IMAGE_MAX_LAYER_MEMBERS,
            max_image_bytes=settings.image_max_bytes,
            max_expansion_ratio=ARCHIVE_MAX_EXPANSION_RATIO,
        )


class _Header(tarfile.TarInfo):
    """A member header that refuses oversized long-name and pax headers before tarfile
    reads them into memory."""

    def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
        extended = (
            tarfile.GNUTYPE_LONGNAME,
            tarfile.GNUTYPE_LONGLINK,
            tarfile.XHDTYPE,
            tarfile.XGLTYPE,
            tarfile.SOLARIS_XHDTYPE,
        )
        if self.type in extended and self.size > _MAX_EXTENDED_HEADER_BYTES:
            raise InvalidSubmission(
                f"archive member {self.name!r}: an extended tar header of {self.size} bytes "
                f"(at most {_MAX_EXTENDED_HEADER_BYTES})"
            )
        return super()._proc_member(tarfile_)  # type: ignore[misc,no-any-return]


def _padded(size: int) -> int:
    return -(-size // _BLOCK) * _BLOCK


class _Meter:
    """The work of decompressing, against the archive bytes read: everything any stream has
    decompressed so far may be at most ``ratio`` times the furthest byte read of the
    archive file, past :data:`_RATIO_FREE_BYTES`; :class:`PayloadTooLarge` beyond."""

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio
        self.read = 0
        self.made = 0

    def produced(self, count: int) -> None:
        self.made += count
        if self.made > _RATIO_FREE_BYTES + self.ratio * self.read:
            raise PayloadTooLarge(
                f"the archive's compressed data expands to more than {self.ratio:g} times its "
                f"size (more than {self.made} bytes from the first {self.read}; limit "
                "ARCHIVE_MAX_EXPANSION_RATIO)"
            )


class _ArchiveFile(io.RawIOBase):
    """The archive file, telling the meter (when there is one) the furthest byte read, and
    ``report`` (when given) where the reading is."""

    def __init__(
        self, fh: IO[bytes], meter: _Meter | None, report: Callable[[int], None] | None = None
    ) -> None:
        self._fh = fh
        self._meter = meter
        self._report = report

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = self._fh.readinto(buffer)  # type: ignore[attr-defined]
        if self._meter is not None:
            self._meter.read = max(self._meter.read, self._fh.tell())
        if self._report is not None:
            self._report(self._fh.tell())
        return int(count or 0)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return self._fh.seek(offset, whence)

    def tell(self) -> int:
        return self._fh.tell()


class _Expanded(io.RawIOBase):
    """A decompressing stream read forward, each byte it makes charged to the meter. A
    forward seek is a read (that is what it costs); a backward one starts over, charged."""

    def __init__(self, stream: Any, meter: _Meter) -> None:
        self._stream = stream
        self._meter = meter
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        count = int(self._stream.readinto(buffer) or 0)
        self._pos += count
        self._meter.produced(count)
        return count

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._pos
        elif whence != io.SEEK_SET:
            raise OSError("a compressed stream cannot seek from its end")
        if offset < self._pos:
            self._stream.seek(0)
            self._pos = 0
        skip = bytearray(_SKIP_CHUNK)
        while self._pos < offset:
            view = memoryview(skip)[: min(_SKIP_CHUNK, offset - self._pos)]
            if not self.readinto(view):
                break
        return self._pos


def _expanded(stream: Any, meter: _Meter) -> io.BufferedReader:
    return io.BufferedReader(_Expanded(stream, meter), buffer_size=_SKIP_CHUNK)


class _Budget:
    """Counts what the archive expands to, refusing it at the first count over a limit."""

    def __init__(self, limits: ArchiveLimits) -> None:
        self.limits = limits
        self.meter = _Meter(limits.max_expansion_ratio)
        self.members = 0
        self.expanded_bytes = 0
        self.layer_members = 0
        self.image_bytes = 0

    def outer(self, member: tarfile.TarInfo) -> None:
        limits = self.limits
        self.members += 1
        if self.members > limits.max_members:
            raise PayloadTooLarge(
                f"the archive holds more than {limits.max_members} members "
                "(limit ARCHIVE_MAX_MEMBERS)"
            )
        self.expanded_bytes += _BLOCK + _padded(member.size)
        if self.expanded_bytes > limits.max_expanded_bytes:
            raise PayloadTooLarge(
                f"archive member {member.name!r}: the archive expands to more than "
                f"{limits.max_expanded_bytes} bytes (limit SZBENCH_ARCHIVE_MAX_EXPANDED_BYTES)"
            )

    def layer(self, layer: str, member: tarfile.TarInfo) -> None:
        limits = self.limits
        self.layer_members += 1
        if self.layer_members > limits.max_layer_members:
            raise PayloadTooLarge(
                f"layer {layer!r}: the image's layers hold more than "
                f"{limits.max_layer_members} files (limit IMAGE_MAX_LAYER_MEMBERS)"
            )
        if member.isfile():
            self.image_bytes += member.size
            if self.image_bytes > limits.max_image_bytes:
                raise PayloadTooLarge(
                    f"layer {layer!r}: the image's files add up to more than "
                    f"{limits.max_image_bytes} bytes (limit SZBENCH_IMAGE_MAX_BYTES)"
                )


@dataclass(frozen=True)
class ImageParts:
    """Where an archive's one image is: its config (bytes, as hashed for the image id) and
    its layers in order, as archive member names with links followed, with their sizes."""

    config: bytes
    layers: tuple[str, ...]
    sizes: tuple[int, ...] = ()


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
    # What the archive expands to, and the files and bytes of all its layers together.
    expanded_bytes: int = 0
    layer_members: int = 0
    image_bytes: int = 0
    # What was checked, for writing the archive the engine loads (:func:`loadable_archive`).
    parts: ImageParts | None = field(default=None, repr=False)


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


def _check_place(
    name: str, member: tarfile.TarInfo, members: dict[str, tarfile.TarInfo], folders: set[str]
) -> None:
    """Refuse a member that the engine's extraction would place other than this reader
    does: a second member of a name (extraction keeps the last, through whatever the first
    made of it), a path running through a link or a file (extraction follows a folder link:
    ``d -> .`` makes ``d/manifest.json`` the archive's own), or a link or file where earlier
    members have their folder. ``folders``: every folder of the members so far."""
    shown = member.name
    if name in members or (name == "" and not member.isdir()):
        raise InvalidSubmission(
            f"archive member {shown!r}: a second member named {name or '.'!r} "
            "(`docker save` writes each name once)"
        )
    parts = name.split("/")
    for depth in range(1, len(parts)):
        folder = "/".join(parts[:depth])
        above = members.get(folder)
        if above is not None and not above.isdir():
            raise InvalidSubmission(
                f"archive member {shown!r}: its path runs through {folder!r}, "
                f"{_kind(above)}, not a folder"
            )
    if not member.isdir() and name in folders:
        raise InvalidSubmission(
            f"archive member {shown!r}: {_kind(member)} where earlier members have their folder"
        )
    folders.update("/".join(parts[:depth]) for depth in range(1, len(parts)))


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return f"a symbolic link to {member.linkname!r}"
    if member.islnk():
        return f"a hard link to {member.linkname!r}"
    return "a file"


def _check_links(members: dict[str, tarfile.TarInfo]) -> None:
    """Every link must end, through links of the archive only, at one of its files (legacy
    ``docker save`` links a repeated layer to its first copy): this reader resolves each
    link itself, so none may lead anywhere it does not see."""
    for name, member in members.items():
        if member.issym() or member.islnk():
            end = members.get(_resolve(name, members))
            if end is None or not end.isfile():
                raise InvalidSubmission(
                    f"archive member {member.name!r}: {_kind(member)}, which does not lead "
                    "to a file of the archive"
                )


def _scan_layer(fh: IO[bytes], name: str, budget: _Budget) -> bool:
    """Count the files of the layer tar ``fh`` (plain or compressed); False if it is not a
    tar archive. Headers are dropped as they are read, so memory stays bounded."""
    magic = fh.read(6)
    fh.seek(0)
    # Plain layers are read with seeks (their file bytes skipped, not read); compressed
    # ones as a stream, which expands them once, each expanded byte charged to the meter.
    source: IO[bytes] = fh
    mode = "r:"
    opener = next((o for m, o in _DECOMPRESSORS.items() if magic.startswith(m)), None)
    if opener is not None:
        source, mode = _expanded(opener(fh), budget.meter), "r|"
    try:
        with tarfile.open(fileobj=source, mode=mode, tarinfo=_Header) as layer:  # type: ignore[call-overload]
            while (member := layer.next()) is not None:
                layer.members.clear()
                budget.layer(name, member)
    except tarfile.ReadError as exc:
        # Docker writes an empty layer as a tar of zero blocks, which tarfile calls empty.
        return "empty file" in str(exc)
    except (tarfile.TarError, EOFError, OSError, ValueError):
        return False
    return True


def _scan(
    tar: tarfile.TarFile, budget: _Budget | None
) -> tuple[dict[str, tarfile.TarInfo], dict[str, bytes], set[str]]:
    """Check and count every member in one pass (also for gzip); keep the small JSON
    files' bytes, and return the names of the files that are tar archives (the layers).

    Without a ``budget`` nothing is counted and no layer is opened (an empty set of tars):
    enough to read the image's id, a seek past each layer of a plain tar."""
    members: dict[str, tarfile.TarInfo] = {}
    kept: dict[str, bytes] = {}
    tars: set[str] = set()
    folders: set[str] = set()
    kept_bytes = 0
    while (member := tar.next()) is not None:
        # tarfile lists every member it has read; the names kept here are enough.
        tar.members.clear()  # type: ignore[attr-defined]
        _check_member(member)
        if budget is not None:
            budget.outer(member)
        name = _clean(member.name)
        _check_place(name, member, members, folders)
        members[name] = member
        if not member.isfile() or member.size == 0:
            continue
        fh = tar.extractfile(member)
        if fh is None:
            continue
        head = fh.read(1)
        if head in (b"{", b"["):
            if member.size <= _MAX_JSON_BYTES and kept_bytes < _MAX_KEPT_BYTES:
                data = head + fh.read()
                kept[name] = data
                kept_bytes += len(data)
        elif budget is not None:
            fh.seek(0)
            if _scan_layer(fh, name, budget):
                tars.add(name)
    return members, kept, tars


def _read(
    path: Path, budget: _Budget | None, report: Callable[[int], None] | None = None
) -> tuple[bool, dict[str, tarfile.TarInfo], dict[str, bytes], set[str]]:
    """The one pass over the archive every reader makes (:func:`_scan`); whether it is
    gzip-compressed first. ``report(position)``: how far the file has been read."""
    compressed = _is_gzip(path)
    try:
        with path.open("rb") as raw:
            source: IO[bytes] | gzip.GzipFile = raw
            if budget is not None:
                # Checked: every byte decompressed is charged to the budget's meter.
                source = io.BufferedReader(_ArchiveFile(raw, budget.meter, report))
                if compressed:
                    source = _expanded(gzip.GzipFile(fileobj=source, mode="rb"), budget.meter)
            elif compressed:
                source = gzip.GzipFile(fileobj=raw, mode="rb")
            with tarfile.open(fileobj=source, mode="r:", tarinfo=_Header) as tar:
                members, kept, tars = _scan(tar, budget)
    except (tarfile.TarError, EOFError, OSError) as exc:
        kind = "tar.gz" if compressed else "tar"
        raise InvalidSubmission(f"the upload is not a readable {kind} archive ({exc})") from None
    if not members:
        raise InvalidSubmission("the archive is empty")
    _check_links(members)
    return compressed, members, kept, tars


def _image_entry(
    members: dict[str, tarfile.TarInfo], kept: dict[str, bytes]
) -> tuple[str, str, list[str], list[str]]:
    """``(layout, config path, layer paths, tags)`` of the archive's one image."""
    for name in _NAMING_MEMBERS:
        if name in members and not members[name].isfile():
            # This reader would read the link's target as the manifest; the engine never
            # reads it (:func:`loadable_archive`), but an image is described in one way only.
            raise InvalidSubmission(f"{name}: must be a regular file, not a link or a folder")
    if "manifest.json" in members:
        layout = "oci" if "oci-layout" in members else "docker-save"
        return (layout, *_from_docker_manifest(members, kept))
    if "index.json" in members and "oci-layout" in members:
        return ("oci", *_from_oci_index(members, kept))
    raise InvalidSubmission(
        "no manifest.json or index.json: not an image archive written by `docker save`"
    )


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


# Go's strconv.Atoi, which the engine applies to the user part of ``User``: an optional sign,
# then decimal digits (leading zeros allowed), within int64.
_GO_INT = re.compile(r"[+-]?[0-9]+")
_INT64 = 2**63


class _Unprovable(Exception):
    """The image's /etc/passwd cannot be read the way the engine would read it."""


def _go_atoi(text: str) -> int | None:
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if -_INT64 <= value < _INT64 else None


def _passwd_uid(passwd: bytes, name: str) -> int | None:
    """The uid of the ``/etc/passwd`` entry called ``name`` as runc reads it (first entry
    wins), except that 0 wins over it: any entry that could be the one read with uid 0.

    runc splits lines at ``\n`` only and trims Unicode blanks around each; here every line
    that could match under any such trimming is considered, so a difference in how blanks
    are read can only make an image count as root.
    """
    uids: list[int] = []
    for raw in passwd.split(b"\n"):
        fields = raw.decode("utf-8", "replace").strip().split(":")
        if fields[0] != name:
            continue
        # runc ignores a uid field it cannot parse ("x", "", an overflow): uid 0.
        uid = _go_atoi(fields[2]) if len(fields) > 2 else 0
        uids.append(uid or 0)
    if not uids:
        return None
    return 0 if 0 in uids else uids[0]


def image_uid(user: str, passwd: Callable[[], bytes | None]) -> int | None:
    """The uid the engine runs an image's ``User`` as; ``None`` when it would not start it.

    Decided as the engine decides (runc's ``GetExecUser``): the part before the first ``:``;
    empty is root; anything Go's ``Atoi`` reads (``00``, ``+0``, ``-0``) is that uid, whatever
    ``/etc/passwd`` says; any other text is a name looked up in the image's ``/etc/passwd``
    (``passwd()``; ``None`` when the image has none), first entry wins. A name with no entry
    makes the engine refuse to start the container.
    """
    name = user.split(":", 1)[0]
    if name == "":
        return 0
    numeric = _go_atoi(name)
    if numeric is not None:
        return numeric
    content = passwd()
    return None if content is None else _passwd_uid(content, name)


def _runs_as_root(user: str, passwd: Callable[[], bytes | None]) -> bool:
    """Whether the engine would run ``user`` as uid 0. A user spec that only reads as
    non-root with its surrounding blanks kept counts as root: nothing rests on whitespace."""
    return 0 in (image_uid(user, passwd), image_uid(user.strip(), passwd))


def _layer_passwd(layer: IO[bytes]) -> tuple[str, bytes | None]:
    """What one layer tar says about ``/etc/passwd``: ``("file", bytes)``, ``("deleted", None)``
    (a whiteout of it, or an opaque ``/etc``) or ``("absent", None)``.

    Raises
    ------
    _Unprovable
        For a layer that makes ``/etc`` or ``/etc/passwd`` anything but a folder and a
        regular file (links included), or that is not a plain tar (compressed layers).
    """
    said: tuple[str, bytes | None] = ("absent", None)
    try:
        with tarfile.open(fileobj=layer, mode="r|") as tar:
            for member in tar:
                name = _clean(member.name.lstrip("/"))
                if name == "etc":
                    if not member.isdir():
                        raise _Unprovable("/etc is not a folder")
                elif name in ("etc/.wh..wh..opq", ".wh.etc") or name == "etc/.wh.passwd":
                    if said[0] == "absent" or name != "etc/.wh..wh..opq":
                        said = ("deleted", None)
                elif name == "etc/passwd":
                    if not member.isfile() or member.size > _MAX_JSON_BYTES:
                        raise _Unprovable("/etc/passwd is not a small regular file")
                    fh = tar.extractfile(member)
                    said = ("file", fh.read() if fh is not None else b"")
    except (tarfile.TarError, EOFError) as exc:
        raise _Unprovable(f"a layer is not a plain tar ({exc})") from None
    return said


def _image_passwd(
    path: Path,
    gzip: bool,
    layers: list[str],
    members: dict[str, tarfile.TarInfo],
    report: Callable[[int], None] | None = None,
) -> bytes | None:
    """The image's ``/etc/passwd`` as the running container sees it (the topmost layer that
    writes or deletes it wins); ``None`` when no layer leaves one. One streaming pass."""
    order = {_resolve(_clean(layer), members): i for i, layer in enumerate(layers)}
    found: dict[int, tuple[str, bytes | None]] = {}
    try:
        with (
            path.open("rb") as raw,
            tarfile.open(
                fileobj=io.BufferedReader(_ArchiveFile(raw, None, report)),
                mode="r|gz" if gzip else "r|",
            ) as tar,
        ):
            for member in tar:
                index = order.get(_clean(member.name))
                if index is None or not member.isfile():
                    continue
                fh = tar.extractfile(member)
                if fh is not None:
                    found[index] = _layer_passwd(fh)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise _Unprovable(f"the archive cannot be read again ({exc})") from None
    # A layer listed twice (docker save links repeated layers) says the same at each place.
    for i, layer in enumerate(layers):
        j = order[_resolve(_clean(layer), members)]
        if j != i and j in found:
            found[i] = found[j]
    for i in reversed(range(len(layers))):
        kind, content = found.get(i, ("absent", None))
        if kind != "absent":
            return content
    return None


#: ``progress(step, done, total)``: the check's step (``checking``: the pass that reads and
#: counts everything; ``checking-user``: a second pass for a named ``User``, reading the
#: image's ``/etc/passwd``) and the bytes of the archive file read of ``total``.
Progress = Callable[[str, int, int], None]


def check_image_archive(
    path: Path,
    *,
    allow_root: bool = False,
    limits: ArchiveLimits | None = None,
    progress: Progress | None = None,
) -> ImageInfo:
    """Check the ``docker save`` archive at ``path``; its :class:`ImageInfo`, else
    :class:`~szbench.errors.InvalidSubmission` naming the problem, or
    :class:`~szbench.errors.PayloadTooLarge` naming the limit (default: the settings').
    ``progress``: told how far each pass over the file has read (:data:`Progress`)."""
    budget = _Budget(limits or ArchiveLimits.from_settings())
    size = path.stat().st_size if progress is not None else 0
    passes: list[str] = []

    def reporter(step: str) -> Callable[[int], None] | None:
        if progress is None:
            return None

        def report(done: int) -> None:
            if not passes or passes[-1] != step:
                passes.append(step)
            progress(step, done, size)

        return report

    gzip, members, kept, tars = _read(path, budget, reporter("checking"))
    if progress is not None:  # the reading stops at the end-of-archive blocks: all is read
        progress("checking", size, size)
    layout, config_name, layers, tags = _image_entry(members, kept)
    if not layers:
        raise InvalidSubmission("manifest.json: the image has no layers")
    for layer in layers:
        real = "" if _escapes(layer) else _resolve(_clean(layer), members)
        if real not in members:
            raise InvalidSubmission(f"manifest.json: layer {layer!r} is missing from the archive")
        if real not in tars:
            # Its files could not be counted (zstd, say): its size would be unknown.
            raise InvalidSubmission(
                f"manifest.json: layer {layer!r} is not a tar archive (plain, gzip, bzip2 or xz)"
            )

    config, raw = _json(_clean(config_name), members, kept)
    parts = _parts(raw, layers, members)
    digest_hex = hashlib.sha256(raw).hexdigest()
    expected = posixpath.basename(config_name).removesuffix(".json")
    if len(expected) == 64 and expected != digest_hex:
        raise InvalidSubmission(
            f"{config_name}: content does not match its name (sha256 {digest_hex[:12]}...)"
        )
    if not isinstance(config, dict):
        raise InvalidSubmission(f"{config_name}: the image config is not a JSON object")
    refused = nul_refusal(config, config_name)
    if refused is not None:
        raise InvalidSubmission(refused)
    arch, os_name = config.get("architecture"), config.get("os")
    if (os_name, arch) != ("linux", "amd64"):
        raise InvalidSubmission(
            f"{config_name}: the image is for {os_name}/{arch}; the workers run linux/amd64"
        )
    runtime = config.get("config") or {}
    user = str(runtime.get("User") or "") if isinstance(runtime, dict) else ""
    if not allow_root:
        _check_user(path, gzip, config_name, user, layers, members, reporter("checking-user"))
        if progress is not None and passes[-1:] == ["checking-user"]:
            progress("checking-user", size, size)
    return ImageInfo(
        digest=f"sha256:{digest_hex}",
        architecture=str(arch),
        os=str(os_name),
        user=user,
        layout=layout,
        layers=len(layers),
        repo_tags=tags,
        gzip=gzip,
        expanded_bytes=budget.expanded_bytes,
        layer_members=budget.layer_members,
        image_bytes=budget.image_bytes,
        parts=parts,
    )


def tarball_image_id(path: Path) -> str | None:
    """The image id in the ``docker save`` archive at ``path``, read without loading it
    (the worker's question: is this image on the engine already?).

    The same pass as :func:`check_image_archive`, without its limits, its layer count or
    its user check: the config blob that the manifest names is hashed, and its sha256 must
    be its name, or an archive could name an image it does not hold and have the engine's
    copy run instead. ``None`` when the archive does not show exactly one image with a
    matching config; loading it says why. A ``.tar`` costs a read of its headers; a
    ``.tar.gz`` one pass of inflating it (layers are skipped, never kept).
    """
    try:
        _, members, kept, _ = _read(path, None)
        _, config_name, _, _ = _image_entry(members, kept)
        _, raw = _json(_clean(config_name), members, kept)
    except InvalidSubmission:
        return None
    digest_hex = hashlib.sha256(raw).hexdigest()
    if posixpath.basename(config_name).removesuffix(".json") != digest_hex:
        return None
    return f"sha256:{digest_hex}"


def image_parts(path: Path) -> ImageParts:
    """The config and layer members of the (already checked) archive at ``path``, for a
    push to a registry. :class:`InvalidSubmission` when they cannot be found."""
    _, members, kept, _ = _read(path, None)
    _, config_name, layers, _ = _image_entry(members, kept)
    _, raw = _json(_clean(config_name), members, kept)
    return _parts(raw, layers, members)


def _parts(config: bytes, layers: list[str], members: dict[str, tarfile.TarInfo]) -> ImageParts:
    real = []
    for layer in layers:
        name = "" if _escapes(layer) else _resolve(_clean(layer), members)
        if name not in members or not members[name].isfile():
            raise InvalidSubmission(f"manifest.json: layer {layer!r} is missing from the archive")
        real.append(name)
    sizes = tuple(members[name].size for name in real)
    return ImageParts(config=config, layers=tuple(real), sizes=sizes)


def iter_members(path: Path, wanted: set[str]) -> Iterator[tuple[str, int, IO[bytes]]]:
    """``(name, size, file)`` of each regular member of ``wanted``, in one streaming pass (a
    ``.tar.gz`` is expanded on the way); each file is readable until the next is yielded."""
    compressed = _is_gzip(path)
    with tarfile.open(
        path, mode="r|gz" if compressed else "r|", tarinfo=_Header, bufsize=_CHUNK
    ) as tar:
        while (member := tar.next()) is not None:
            tar.members.clear()  # type: ignore[attr-defined]
            name = _clean(member.name)
            if name in wanted and member.isfile():
                fh = tar.extractfile(member)
                if fh is not None:
                    yield name, member.size, fh


def _check_user(
    path: Path,
    gzip: bool,
    config_name: str,
    user: str,
    layers: list[str],
    members: dict[str, tarfile.TarInfo],
    report: Callable[[int], None] | None = None,
) -> None:
    """Refuse an image the engine would run as uid 0, or whose user it cannot prove is not."""

    read: list[bytes | None] = []

    def passwd() -> bytes | None:
        if read:
            return read[0]
        try:
            read.append(_image_passwd(path, gzip, layers, members, report))
        except _Unprovable as exc:
            raise InvalidSubmission(
                f"{config_name}: cannot tell which uid User {user!r} is ({exc}); "
                "give a numeric non-root user, e.g. `USER 1000`"
            ) from None
        return read[0]

    if _runs_as_root(user, passwd):
        shown = repr(user) if user else "unset, so root"
        raise InvalidSubmission(
            f"{config_name}: the image runs as root (User is {shown}, uid 0 for the engine); "
            "add `USER 1000` (or another non-root user) to the Dockerfile"
        )


# --- the archive the engine loads ------------------------------------------------------

#: The members through which ``docker load`` would read an upload's names and images:
#: ``manifest.json``, ``index.json`` and the legacy ``repositories`` file. The engine never
#: reads them (:func:`loadable_archive` writes its own), but a link among them is refused
#: at upload all the same: nothing in an accepted archive reads two ways.
_NAMING_MEMBERS = ("manifest.json", "index.json", "repositories")
_CHUNK = 1024**2


def _file_header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o644
    # PAX, for layers over ustar's 8 GiB; names are short, so only a size needs its header.
    return info.tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "surrogateescape")


def loadable_archive(path: Path, parts: ImageParts | None = None) -> Iterator[bytes]:
    """The one image of the archive at ``path``, as a tar stream for ``docker load`` that
    this module writes itself: a ``manifest.json`` of its own (no name: loading it never
    creates or moves a tag), the config bytes that were hashed for the image id, and each
    layer member that was counted and read, under names of its own. Nothing else of the
    upload reaches the engine: not its manifests or names, not its links (followed here,
    where this reader resolved them), not its other members.

    ``parts``: what :func:`check_image_archive` read (:attr:`ImageInfo.parts`), so the
    archive is not read an extra time for them; without it they are read first. One
    streaming pass over the layers, in chunks of 1 MiB; a ``.tar.gz`` is expanded on the way.

    Raises
    ------
    InvalidSubmission
        When the archive cannot be read to its end, a layer is missing or shorter than its
        header says, or the reader refuses the archive (:func:`image_parts`).
    """
    parts = parts if parts is not None else image_parts(path)
    names: dict[str, str] = {}
    for layer in parts.layers:
        names.setdefault(layer, f"layer-{len(names)}.tar")
    config_name = hashlib.sha256(parts.config).hexdigest() + ".json"
    manifest = json.dumps(
        [{"Config": config_name, "RepoTags": None, "Layers": [names[n] for n in parts.layers]}]
    ).encode()
    for name, data in (("manifest.json", manifest), (config_name, parts.config)):
        yield _file_header(name, len(data)) + data + bytes(_padded(len(data)) - len(data))
    written: set[str] = set()
    try:
        for member, size, fh in iter_members(path, set(names)):
            if member in written:  # the file changed since it was read: never two of a name
                raise InvalidSubmission(f"archive member {member!r}: a second member of that name")
            yield _file_header(names[member], size)
            sent = 0
            while chunk := fh.read(min(_CHUNK, size - sent)):
                sent += len(chunk)
                yield chunk
            if sent != size:
                raise InvalidSubmission(
                    f"archive member {member!r}: {sent} of its {size} bytes could be read"
                )
            yield bytes(_padded(size) - size)
            written.add(member)
    except (tarfile.TarError, EOFError) as exc:
        raise InvalidSubmission(f"the archive cannot be read to its end ({exc})") from None
    except OSError as exc:  # its text may name the file's path: not the submitter's to see
        reason = exc.strerror or type(exc).__name__
        raise InvalidSubmission(f"the archive cannot be read to its end ({reason})") from None
    missing = [layer for layer in names if layer not in written]
    if missing:
        raise InvalidSubmission(f"manifest.json: layer {missing[0]!r} is missing from the archive")
    yield bytes(2 * _BLOCK)

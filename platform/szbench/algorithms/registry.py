"""Pushing an accepted upload to the deployment's registry (``SZBENCH_REGISTRY``).

Workers on other hosts never see the uploads volume: they pull the image by the manifest
digest recorded here. The push speaks the registry's HTTP API (distribution v2) from the
archive itself, in the standard library, so that the API image needs no Docker engine or
SDK: the config blob, each layer member as it is in the archive (its sha256 is its blob
digest; the engine checks the uncompressed content against the config's ``diff_ids`` when
it pulls), then a schema 2 manifest tagged with the image id. The name is content-addressed:
``<registry>/<namespace>/algorithms:<image id hex>``, so one image is one tag however often
it is uploaded, and its blobs are stored once.

What the registry already holds under the tag is checked, never trusted (issue 29.6): it is
reused only when it is a manifest of this very image (its config digest is the image id, its
layers are the config's ``diff_ids``, uncompressed, and every blob it names is there), and its
digest is computed here from its bytes. Anything else under the tag (another image, this
config over other layers, a compressed layer that cannot be checked without reading it) is
pushed over.

Every exchange with the registry goes through the project's outbound client
(:mod:`szbench.outbound`) and is bounded as a whole (:func:`_exchange`): a blob's upload may
take ``SZBENCH_REGISTRY_TIMEOUT_S`` plus one second per :data:`MIN_RATE_BPS` bytes sent,
however the registry stalls (reading the bytes slowly, answering slowly, dripping its
answer), instead of a limit per read that a drip never reaches.

The registry is the deployment's own (on its private network, or TLS when it is elsewhere);
it takes no credentials here.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import logging
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urljoin, urlsplit

from szbench.algorithms.image_check import ImageParts, image_parts, iter_members
from szbench.config import Settings, get_settings
from szbench.errors import ServiceUnavailable
from szbench.outbound import http
from szbench.outbound.deadline import Deadline, DeadlineExceeded, paced

log = logging.getLogger(__name__)

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
OCI_MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
LAYER_TAR = "application/vnd.docker.image.rootfs.diff.tar"
# Layers whose blob digest is their diff_id: checkable against the config without a read.
_UNCOMPRESSED = (LAYER_TAR, "application/vnd.oci.image.layer.v1.tar")
_CHUNK = 1024**2
#: The slowest rate at which a registry may take a blob: an exchange may last
#: ``SZBENCH_REGISTRY_TIMEOUT_S`` plus one second per this many bytes sent. A registry on the
#: deployment's network takes tens of MB/s; one slower than this is broken, not busy.
MIN_RATE_BPS = 1024**2
# Registry answers are small JSON documents (manifests, errors): a longer one is refused.
_MAX_ANSWER_BYTES = 8 * 1024**2

#: ``progress(done, total)``: bytes of the image sent (or found in the registry) so far.
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Pushed:
    """Where an image went: ``reference`` (``repo@sha256:...``) pulls exactly it."""

    repository: str
    digest: str

    @property
    def reference(self) -> str:
        return f"{self.repository}@{self.digest}"


def repository(settings: Settings | None = None) -> str:
    """``host:port/namespace/algorithms``, the one repository uploads are pushed to."""
    settings = settings or get_settings()
    host, _, namespace = settings.registry.strip().strip("/").partition("/")
    return f"{host}/{namespace or 'szbench'}/algorithms"


def _plain_http(host: str, settings: Settings) -> bool:
    if settings.registry_plain_http:
        return True
    name = host.rsplit(":", 1)[0].strip("[]")
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class _Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    def header(self, name: str) -> str:
        return self.headers.get(name.lower(), "")


def _exchange(
    url: str,
    method: str,
    *,
    body: bytes | Iterable[bytes] | None,
    headers: dict[str, str],
    deadline: Deadline,
) -> _Answer:
    """One HTTP exchange with the registry, through the project's outbound client: over as a
    whole by ``deadline``, whether the registry stops reading the body, waits to answer or
    drips its answer (a limit per read never ends a drip). Each chunk of an iterable
    ``body`` gives the deadline one second per :data:`MIN_RATE_BPS` bytes as it is sent.

    Raises
    ------
    ServiceUnavailable
        No answer, a broken connection, an answer over :data:`_MAX_ANSWER_BYTES`, or the
        deadline passed (the message says which, and the time allowed).
    """
    host = urlsplit(url).netloc
    content: bytes | Iterator[bytes]
    if body is None or isinstance(body, bytes):
        content = body or b""
    else:
        content = paced(body, deadline, bytes_per_s=MIN_RATE_BPS)
    try:
        answer = http.request(
            method,
            url,
            deadline=deadline,
            headers=list(headers.items()),
            content=content,
            max_body=_MAX_ANSWER_BYTES + 1,
        )
    except DeadlineExceeded as exc:
        raise _too_slow(host, method, deadline) from exc
    except (http.CallFailed, OSError) as exc:  # OSError: the name does not resolve
        raise ServiceUnavailable(
            f"the image registry ({host}) does not answer ({exc}); try again later"
        ) from exc
    if len(answer.body) > _MAX_ANSWER_BYTES:
        raise ServiceUnavailable(
            f"the image registry ({host}) answered {method} with more than "
            f"{_MAX_ANSWER_BYTES} bytes; try again later"
        )
    return _Answer(answer.status, answer.headers, answer.body)


def _too_slow(host: str, method: str, deadline: Deadline) -> ServiceUnavailable:
    return ServiceUnavailable(
        f"the image registry ({host}) did not finish a {method} within "
        f"{deadline.seconds:.0f} s (SZBENCH_REGISTRY_TIMEOUT_S plus one second per "
        f"{MIN_RATE_BPS} bytes sent); try again later"
    )


class _Registry:
    """The few v2 calls a push needs, each bounded by :func:`_exchange`."""

    def __init__(self, settings: Settings) -> None:
        self.repo = repository(settings)
        host, _, self.path = self.repo.partition("/")
        self.host = settings.registry_push.strip().strip("/").split("/")[0] or host
        self.scheme = "http" if _plain_http(self.host, settings) else "https"
        self.base_s = settings.registry_timeout_s

    def request(
        self,
        method: str,
        url: str,
        body: bytes | Iterable[bytes] | None = None,
        headers: dict[str, str] | None = None,
        deadline: Deadline | None = None,
    ) -> _Answer:
        target = urljoin(f"{self.scheme}://{self.host}/", url)
        if deadline is not None:
            return _exchange(target, method, body=body, headers=headers or {}, deadline=deadline)
        with Deadline(self.base_s) as own:
            return _exchange(target, method, body=body, headers=headers or {}, deadline=own)

    def expect(self, answer: _Answer, *codes: int, what: str) -> None:
        if answer.status not in codes:
            raise ServiceUnavailable(
                f"the image registry ({self.host}) refused {what} (HTTP {answer.status}); "
                "try again later"
            )

    def has_blob(self, digest: str) -> bool:
        return self.request("HEAD", f"/v2/{self.path}/blobs/{digest}").status == 200

    def held_image(self, tag: str, image_id: str, config: bytes) -> str | None:
        """The digest of the manifest under ``tag`` when it is a pullable manifest of
        ``image_id`` (config ``config``), checked; ``None`` for anything else."""
        answer = self.request(
            "GET",
            f"/v2/{self.path}/manifests/{tag}",
            headers={"Accept": f"{MANIFEST_TYPE}, {OCI_MANIFEST_TYPE}"},
        )
        if answer.status == 404:
            return None
        self.expect(answer, 200, what="reading the image's tag")
        digest = "sha256:" + hashlib.sha256(answer.body).hexdigest()
        problem = _not_this_image(answer.body, image_id, config)
        if problem is None:
            missing = [d for d in _blobs(answer.body) if not self.has_blob(d)]
            problem = f"its blob {missing[0]} is missing" if missing else None
        if problem is not None:
            log.warning(
                "the registry holds %s under %s:%s, which is not image %s (%s): pushing it",
                digest,
                self.repo,
                tag,
                image_id,
                problem,
            )
            return None
        return digest

    def upload(self, chunks: Iterator[bytes], digest: Callable[[], str]) -> None:
        """One blob: its three exchanges bounded together by one deadline."""
        with Deadline(self.base_s) as deadline:
            self._upload(chunks, digest, deadline)

    def _upload(
        self, chunks: Iterator[bytes], digest: Callable[[], str], deadline: Deadline
    ) -> None:
        started = self.request("POST", f"/v2/{self.path}/blobs/uploads/", deadline=deadline)
        self.expect(started, 202, what="a blob upload")
        sent = self.request(
            "PATCH",
            started.header("Location"),
            body=chunks,
            headers={"Content-Type": "application/octet-stream"},
            deadline=deadline,
        )
        self.expect(sent, 202, what="a blob's bytes")
        location = sent.header("Location")
        sep = "&" if "?" in location else "?"
        done = self.request(
            "PUT",
            f"{location}{sep}digest={digest()}",
            deadline=deadline,
        )
        self.expect(done, 201, what="a blob")


def _not_this_image(manifest: bytes, image_id: str, config: bytes) -> str | None:
    """Why the manifest ``manifest`` is not a pullable manifest of the image whose id and
    config are given; ``None`` when it is. Layers are checked without reading them: each
    must be uncompressed, so that its blob digest is its ``diff_id``."""
    try:
        document = json.loads(manifest)
        diff_ids = json.loads(config)["rootfs"]["diff_ids"]
    except (ValueError, KeyError, TypeError):
        return "not a manifest"
    if not isinstance(document, dict) or document.get("mediaType", MANIFEST_TYPE) not in (
        MANIFEST_TYPE,
        OCI_MANIFEST_TYPE,
    ):
        return "not an image manifest"
    held = document.get("config")
    if not isinstance(held, dict) or held.get("digest") != image_id:
        shown = held.get("digest") if isinstance(held, dict) else None
        return f"its config is {shown}"
    layers = document.get("layers")
    if not isinstance(layers, list) or len(layers) != len(diff_ids):
        return "its layers are not the config's"
    for layer, diff_id in zip(layers, diff_ids, strict=True):
        if not isinstance(layer, dict) or layer.get("mediaType") not in _UNCOMPRESSED:
            return "a layer that cannot be checked without reading it"
        if layer.get("digest") != diff_id:
            return f"its layer {layer.get('digest')} is not the config's {diff_id}"
    return None


def _blobs(manifest: bytes) -> list[str]:
    document: dict[str, Any] = json.loads(manifest)
    found = [document["config"]["digest"], *(layer["digest"] for layer in document["layers"])]
    return list(dict.fromkeys(found))


class _Hashing:
    """Chunks of a file, hashed and counted as they are sent."""

    def __init__(
        self,
        fh: IO[bytes] | None = None,
        data: bytes | None = None,
        sent: Callable[[int], None] | None = None,
    ) -> None:
        self.fh = fh
        self.data = data
        self.sent = sent
        self.sha = hashlib.sha256()
        self.size = 0
        self.head = b""

    def __iter__(self) -> Iterator[bytes]:
        if self.data is not None:
            self._count(self.data)
            yield self.data
            return
        assert self.fh is not None
        while chunk := self.fh.read(_CHUNK):
            self._count(chunk)
            yield chunk

    def _count(self, chunk: bytes) -> None:
        if self.size == 0:
            self.head = chunk[:2]
        self.sha.update(chunk)
        self.size += len(chunk)
        if self.sent is not None:
            self.sent(len(chunk))

    def digest(self) -> str:
        return "sha256:" + self.sha.hexdigest()


def push_archive(
    path: Path,
    image_id: str,
    settings: Settings | None = None,
    *,
    parts: ImageParts | None = None,
    progress: Progress | None = None,
) -> Pushed:
    """Push the checked ``docker save`` archive at ``path`` (image ``image_id``); return
    where it is. Nothing is pushed again when the registry holds this image under its tag
    already (checked, not trusted: :meth:`_Registry.held_image`).

    ``parts``: what the check read (:attr:`ImageInfo.parts`), else read here.
    ``progress(done, total)``: bytes of the image pushed so far, as they go.

    Raises
    ------
    ServiceUnavailable
        The registry cannot be reached, refuses a step, or takes longer than its deadline
        (the upload stays; submit again).
    """
    settings = settings or get_settings()
    registry = _Registry(settings)
    tag = image_id.removeprefix("sha256:")
    parts = parts if parts is not None else image_parts(path)
    distinct = dict(zip(parts.layers, parts.sizes or (0,) * len(parts.layers), strict=True))
    total = len(parts.config) + sum(distinct.values())
    known = registry.held_image(tag, image_id, parts.config)
    if known:
        log.info("image %s is in the registry already as %s", image_id, known)
        if progress is not None:
            progress(total, total)
        return Pushed(registry.repo, known)
    done = 0

    def sent(count: int) -> None:
        nonlocal done
        done += count
        if progress is not None:
            progress(done, total)

    config = _Hashing(data=parts.config, sent=sent)
    if not registry.has_blob(f"sha256:{hashlib.sha256(parts.config).hexdigest()}"):
        registry.upload(iter(config), config.digest)
    else:
        list(config)  # counted and hashed all the same
    blobs: dict[str, tuple[str, int, str]] = {}
    for name, _, fh in iter_members(path, set(parts.layers)):
        if name in blobs:
            continue
        layer = _Hashing(fh, sent=sent)
        registry.upload(iter(layer), layer.digest)
        kind = LAYER_GZIP if layer.head == b"\x1f\x8b" else LAYER_TAR
        blobs[name] = (layer.digest(), layer.size, kind)
    missing = [name for name in parts.layers if name not in blobs]
    if missing:
        raise ServiceUnavailable(f"the archive's layer {missing[0]} could not be read for the push")
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_TYPE,
            "config": {"mediaType": CONFIG_TYPE, "size": config.size, "digest": config.digest()},
            "layers": [
                {"mediaType": blobs[n][2], "size": blobs[n][1], "digest": blobs[n][0]}
                for n in parts.layers
            ],
        }
    ).encode()
    digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
    answer = registry.request(
        "PUT",
        f"/v2/{registry.path}/manifests/{tag}",
        body=manifest,
        headers={"Content-Type": MANIFEST_TYPE},
    )
    registry.expect(answer, 201, what="the image manifest")
    stored = answer.header("Docker-Content-Digest")
    if stored and stored != digest:
        raise ServiceUnavailable(
            f"the image registry ({registry.host}) stored the manifest as {stored}, not as "
            f"its digest {digest}; try again later"
        )
    log.info("pushed image %s to %s@%s", image_id, registry.repo, digest)
    return Pushed(registry.repo, digest)

"""Pushing an accepted upload to the deployment's registry (``SZBENCH_REGISTRY``).

Workers on other hosts never see the uploads volume: they pull the image by the manifest
digest recorded here. The push speaks the registry's HTTP API (distribution v2) from the
archive itself, in the standard library, so that the API image needs no Docker engine or
SDK: the config blob, each layer member as it is in the archive (its sha256 is its blob
digest; the engine checks the uncompressed content against the config's ``diff_ids`` when
it pulls), then a schema 2 manifest tagged with the image id. The name is content-addressed:
``<registry>/<namespace>/algorithms:<image id hex>``, so one image is one tag however often
it is uploaded, and its blobs are stored once.

The registry is the deployment's own (on its private network, or TLS when it is elsewhere);
it takes no credentials here.
"""

from __future__ import annotations

import hashlib
import http.client
import ipaddress
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO
from urllib.parse import urljoin, urlsplit

from szbench.algorithms.image_check import image_parts, iter_members
from szbench.config import Settings, get_settings
from szbench.errors import ServiceUnavailable

log = logging.getLogger(__name__)

MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
LAYER_TAR = "application/vnd.docker.image.rootfs.diff.tar"
_CHUNK = 1024**2


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


class _Registry:
    """One registry connection: the few v2 calls a push needs."""

    def __init__(self, settings: Settings) -> None:
        self.repo = repository(settings)
        host, _, self.path = self.repo.partition("/")
        self.host = settings.registry_push.strip().strip("/").split("/")[0] or host
        plain = _plain_http(self.host, settings)
        self.scheme = "http" if plain else "https"
        self.timeout = settings.registry_timeout_s

    def _conn(self) -> http.client.HTTPConnection:
        kind = http.client.HTTPConnection if self.scheme == "http" else http.client.HTTPSConnection
        return kind(self.host, timeout=self.timeout)

    def request(
        self,
        method: str,
        url: str,
        body: bytes | Iterator[bytes] | None = None,
        headers: dict[str, str] | None = None,
    ) -> http.client.HTTPResponse:
        target = urlsplit(urljoin(f"{self.scheme}://{self.host}/", url))
        path = target.path + (f"?{target.query}" if target.query else "")
        conn = self._conn()
        try:
            conn.request(
                method,
                path,
                body=body,
                headers=headers or {},
                encode_chunked=body is not None and not isinstance(body, bytes),
            )
            response = conn.getresponse()
            response.read()
            return response
        except (OSError, http.client.HTTPException) as exc:
            raise ServiceUnavailable(
                f"the image registry ({self.host}) does not answer ({exc}); try again later"
            ) from exc
        finally:
            conn.close()

    def expect(self, response: http.client.HTTPResponse, *codes: int, what: str) -> None:
        if response.status not in codes:
            raise ServiceUnavailable(
                f"the image registry ({self.host}) refused {what} (HTTP {response.status}); "
                "try again later"
            )

    def manifest_digest(self, tag: str) -> str | None:
        response = self.request(
            "HEAD", f"/v2/{self.path}/manifests/{tag}", headers={"Accept": MANIFEST_TYPE}
        )
        if response.status == 200:
            return response.getheader("Docker-Content-Digest")
        return None

    def has_blob(self, digest: str) -> bool:
        return self.request("HEAD", f"/v2/{self.path}/blobs/{digest}").status == 200

    def upload(self, chunks: Iterator[bytes], digest: Callable[[], str]) -> None:
        started = self.request("POST", f"/v2/{self.path}/blobs/uploads/")
        self.expect(started, 202, what="a blob upload")
        sent = self.request(
            "PATCH",
            started.getheader("Location") or "",
            body=chunks,
            headers={"Content-Type": "application/octet-stream"},
        )
        self.expect(sent, 202, what="a blob's bytes")
        location = sent.getheader("Location") or ""
        sep = "&" if "?" in location else "?"
        done = self.request(
            "PUT", f"{location}{sep}digest={digest()}", headers={"Content-Length": "0"}
        )
        self.expect(done, 201, what="a blob")


class _Hashing:
    """Chunks of a file, hashed and counted as they are sent."""

    def __init__(self, fh: IO[bytes] | None = None, data: bytes | None = None) -> None:
        self.fh = fh
        self.data = data
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

    def digest(self) -> str:
        return "sha256:" + self.sha.hexdigest()


def push_archive(path: Path, image_id: str, settings: Settings | None = None) -> Pushed:
    """Push the checked ``docker save`` archive at ``path`` (image ``image_id``); return
    where it is. Nothing is pushed again when the registry holds the tag already.

    Raises
    ------
    ServiceUnavailable
        The registry cannot be reached or refuses a step (the upload stays; submit again).
    """
    settings = settings or get_settings()
    registry = _Registry(settings)
    tag = image_id.removeprefix("sha256:")
    known = registry.manifest_digest(tag)
    if known:
        log.info("image %s is in the registry already as %s", image_id, known)
        return Pushed(registry.repo, known)
    parts = image_parts(path)
    config = _Hashing(data=parts.config)
    if not registry.has_blob(f"sha256:{hashlib.sha256(parts.config).hexdigest()}"):
        registry.upload(iter(config), config.digest)
    else:
        list(config)  # counted and hashed all the same
    blobs: dict[str, tuple[str, int, str]] = {}
    for name, _, fh in iter_members(path, set(parts.layers)):
        if name in blobs:
            continue
        layer = _Hashing(fh)
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
    response = registry.request(
        "PUT",
        f"/v2/{registry.path}/manifests/{tag}",
        body=manifest,
        headers={"Content-Type": MANIFEST_TYPE},
    )
    registry.expect(response, 201, what="the image manifest")
    log.info("pushed image %s to %s@%s", image_id, registry.repo, digest)
    return Pushed(registry.repo, digest)

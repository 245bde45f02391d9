"""Build image archives laid out the way `docker save` writes them (for upload tests)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path
from typing import Any

_MTIME = 1_700_000_000


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = _MTIME
    tar.addfile(info, io.BytesIO(data))


def _layer(payload: bytes, files: list[tuple[tarfile.TarInfo, bytes]] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        _add(tar, "app/detect.py", payload)
        for info, data in files or []:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buffer.getvalue()


def _config(arch: str, os_name: str, user: str | None, layers: list[bytes]) -> bytes:
    runtime: dict[str, Any] = {"Cmd": ["python3", "/app/detect.py"], "Env": ["PATH=/usr/bin"]}
    if user is not None:
        runtime["User"] = user
    config = {
        "architecture": arch,
        "os": os_name,
        "config": runtime,
        "rootfs": {
            "type": "layers",
            "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest() for layer in layers],
        },
    }
    return json.dumps(config).encode()


def docker_save(
    path: Path,
    *,
    layout: str = "legacy",
    arch: str = "amd64",
    os_name: str = "linux",
    user: str | None = "1000",
    images: int = 1,
    gzip: bool = False,
    extra: list[tarfile.TarInfo] | None = None,
    with_manifest_json: bool = True,
    layers: list[list[tuple[tarfile.TarInfo, bytes]]] | None = None,
    tags: list[str] | None = None,
) -> str:
    """Write an archive at ``path``; returns the first image's id (``sha256:`` + config hash).

    ``layers``: the files of each image's layers, bottom first (default: one layer holding
    only ``app/detect.py``). ``tags``: the first image's names, as ``docker save`` writes
    them (``RepoTags``, ``repositories``, the OCI index's name annotations); default
    ``algo<i>:1.0`` for image ``i``.
    """
    entries: list[tuple[str, bytes]] = []
    manifest: list[dict[str, Any]] = []
    index_manifests: list[dict[str, Any]] = []
    repositories: dict[str, dict[str, str]] = {}
    first_id = ""
    for i in range(images):
        blobs = [_layer(f"print('detector {i}')\n".encode(), files) for files in (layers or [None])]
        config = _config(arch, os_name, user, blobs)
        config_hex = hashlib.sha256(config).hexdigest()
        hexes = [hashlib.sha256(b).hexdigest() for b in blobs]
        first_id = first_id or f"sha256:{config_hex}"
        names = tags if tags is not None and i == 0 else [f"algo{i}:1.0"]
        if layout == "legacy":
            for layer_hex, layer in zip(hexes, blobs, strict=True):
                entries += [
                    (f"{layer_hex}/layer.tar", layer),
                    (f"{layer_hex}/VERSION", b"1.0"),
                    (f"{layer_hex}/json", json.dumps({"id": layer_hex}).encode()),
                ]
            entries.append((f"{config_hex}.json", config))
            manifest.append(
                {
                    "Config": f"{config_hex}.json",
                    "RepoTags": names,
                    "Layers": [f"{h}/layer.tar" for h in hexes],
                }
            )
        else:
            oci_manifest = json.dumps(
                {
                    "schemaVersion": 2,
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {
                        "mediaType": "application/vnd.oci.image.config.v1+json",
                        "digest": f"sha256:{config_hex}",
                        "size": len(config),
                    },
                    "layers": [
                        {
                            "mediaType": "application/vnd.oci.image.layer.v1.tar",
                            "digest": f"sha256:{h}",
                            "size": len(b),
                        }
                        for h, b in zip(hexes, blobs, strict=True)
                    ],
                }
            ).encode()
            manifest_hex = hashlib.sha256(oci_manifest).hexdigest()
            entries += [(f"blobs/sha256/{h}", b) for h, b in zip(hexes, blobs, strict=True)]
            entries += [
                (f"blobs/sha256/{config_hex}", config),
                (f"blobs/sha256/{manifest_hex}", oci_manifest),
            ]
            manifest.append(
                {
                    "Config": f"blobs/sha256/{config_hex}",
                    "RepoTags": names,
                    "Layers": [f"blobs/sha256/{h}" for h in hexes],
                }
            )
            descriptor = {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": f"sha256:{manifest_hex}",
                "size": len(oci_manifest),
            }
            # One descriptor per name, as Docker writes them; one without a name if none.
            index_manifests += [
                {
                    **descriptor,
                    "annotations": {
                        "io.containerd.image.name": f"docker.io/library/{name}",
                        "org.opencontainers.image.ref.name": name.rpartition(":")[2],
                    },
                }
                for name in names
            ] or [descriptor]
        for name in names:
            repo, _, tag = name.rpartition(":")
            repositories.setdefault(repo, {})[tag] = hexes[-1]
    if layout == "oci":
        entries.append(("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'))
        entries.append(
            ("index.json", json.dumps({"schemaVersion": 2, "manifests": index_manifests}).encode())
        )
    if with_manifest_json:
        entries.append(("manifest.json", json.dumps(manifest).encode()))
    entries.append(("repositories", json.dumps(repositories).encode()))
    with tarfile.open(path, mode="w:gz" if gzip else "w") as tar:
        if layout == "oci":
            for directory in ("blobs", "blobs/sha256"):
                info = tarfile.TarInfo(directory)
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tar.addfile(info)
        for name, data in entries:
            _add(tar, name, data)
        for info in extra or []:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isfile() else None)
    return first_id


def member(
    name: str, *, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 1
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = size if kind == tarfile.REGTYPE else 0
    return info

"""Image archives whose configuration a test rewrites (a `docker save` archive in, one out)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def rewrite_config(src: Path, dst: Path, change: Callable[[dict[str, Any]], None]) -> str:
    """Copy the legacy-layout archive ``src`` to ``dst`` with its image's configuration
    changed by ``change`` (the config blob renamed after its new sha256, the manifest's
    names dropped); the new image id."""
    with tarfile.open(src) as tar:
        members = [(m, tar.extractfile(m).read() if m.isfile() else None) for m in tar]  # type: ignore[union-attr]
    data = {m.name: body for m, body in members}
    manifest = json.loads(data["manifest.json"])
    old_name = manifest[0]["Config"]
    config = json.loads(data[old_name])
    change(config)
    blob = json.dumps(config).encode()
    new_hex = hashlib.sha256(blob).hexdigest()
    manifest[0]["Config"] = f"{new_hex}.json"
    manifest[0]["RepoTags"] = None
    with tarfile.open(dst, "w") as out:
        for member, body in members:
            if member.name in ("repositories",):
                continue
            if member.name == old_name:
                member = tarfile.TarInfo(f"{new_hex}.json")
                body = blob
            elif member.name == "manifest.json":
                body = json.dumps(manifest).encode()
                member = tarfile.TarInfo("manifest.json")
            if body is not None:
                member.size = len(body)
            out.addfile(member, io.BytesIO(body) if body is not None else None)
    return f"sha256:{new_hex}"

"""Dataset pages: what each dataset is, how large, under which licence, and its leaderboards;
the public sample as one archive."""

from __future__ import annotations

import io
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse

from szbench.api.deps import SessionDep
from szbench.auth.dependencies import Anyone
from szbench.datasets import facts
from szbench.datasets import queries as datasets
from szbench.leaderboards import service as leaderboards
from szbench.models import DatasetKind
from szbench.web.common import render

router = APIRouter(include_in_schema=False)

_CHUNK = 1024**2


class _Chunks(io.RawIOBase):
    """A write-only file whose bytes are taken away as they come, so the archive streams."""

    def __init__(self) -> None:
        self.pending: list[bytes] = []

    def writable(self) -> bool:
        return True

    def write(self, data: bytes) -> int:  # type: ignore[override]
        self.pending.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        out, self.pending = b"".join(self.pending), []
        return out


def stream_tar_gz(files: list[tuple[str, Path]], top: str) -> Iterator[bytes]:
    """A .tar.gz of ``files`` under the folder ``top``, produced while it is sent."""
    sink = _Chunks()
    with tarfile.open(fileobj=sink, mode="w|gz") as archive:
        for name, path in files:
            info = archive.gettarinfo(str(path), arcname=f"{top}/{name}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o644
            with path.open("rb") as handle:
                archive.addfile(info, handle)
            if sum(len(p) for p in sink.pending) >= _CHUNK:
                yield sink.take()
    yield sink.take()


@router.get("/datasets", response_class=HTMLResponse)
def dataset_list(request: Request, session: SessionDep, caller: Anyone) -> Response:
    """Every dataset, with its kind and size."""
    rows, _ = datasets.list_datasets(session, limit=500, offset=0)
    listed = []
    for dataset in rows:
        versions = facts.version_facts(session, dataset, caller.user)
        listed.append({"dataset": dataset, "newest": versions[0] if versions else None})
    return render(request, "datasets.html", caller, {"title": "Datasets", "listed": listed})


@router.get("/datasets/{slug}", response_class=HTMLResponse)
def dataset_page(request: Request, slug: str, session: SessionDep, caller: Anyone) -> Response:
    """A dataset: description, licence, citation, size per version and its leaderboards."""
    dataset = datasets.get_dataset(session, slug)
    versions = facts.version_facts(session, dataset, caller.user)
    boards = [b for b in leaderboards.index(session, viewer=caller.user) if b.dataset == slug]
    context = {
        "title": f"Dataset: {dataset.title or dataset.slug}",
        "dataset": dataset,
        "versions": versions,
        "boards": boards,
        "public_sample": dataset.kind == DatasetKind.PUBLIC_SAMPLE,
    }
    return render(request, "dataset.html", caller, context)


@router.get("/datasets/{slug}/download.tar.gz")
def download_sample(
    slug: str,
    session: SessionDep,
    caller: Anyone,
    version: Annotated[str | None, Query(max_length=100)] = None,
) -> Response:
    """A public sample's version as prepared (manifest.json, EDFs, references), for
    ``szbench evaluate --dataset``; held-out datasets answer 403."""
    dataset = datasets.get_dataset(session, slug)
    chosen = datasets.get_version(session, dataset, version)
    files = facts.sample_files(session, dataset, chosen, caller.user)
    top = re.sub(r"[^A-Za-z0-9._-]", "_", f"{dataset.slug}-{chosen.version}")
    return StreamingResponse(
        stream_tar_gz(files, top),
        media_type="application/gzip",
        headers={"Content-Disposition": f'attachment; filename="{top}.tar.gz"'},
    )

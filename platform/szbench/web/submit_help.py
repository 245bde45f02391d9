""" "How to submit": the container contract, the limits in force, a starter to download and
the public sample to test on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response, StreamingResponse
from sqlalchemy import select

from szbench.api.deps import SessionDep
from szbench.auth.dependencies import Anyone
from szbench.config import Settings, get_settings
from szbench.errors import NotFound
from szbench.models import Dataset, DatasetKind
from szbench.web.common import render
from szbench.web.datasets import stream_tar_gz

router = APIRouter(include_in_schema=False)

#: The bundled baseline (Dockerfile, detector, README): the starter a submitter adapts. It
#: lives in the source tree, not the wheel; a server without it says so.
STARTER_DIR = Path(__file__).resolve().parents[3] / "examples" / "baseline"
STARTER_FILES = ("Dockerfile", "detect.py", "README.md")


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:g} {unit}" if unit == "bytes" else f"{n:.4g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def limits_of(settings: Settings, run_limits: dict[str, Any] | None) -> list[tuple[str, str]]:
    """The per-recording limits a run gets: the worker's settings, overridden by a
    dataset's ``run_limits`` (the same rule as the worker's ``run_limits``)."""
    own = dict(run_limits or {})

    def pick(key: str, default: Any) -> Any:
        return own.get(key, default)

    return [
        (
            "Wall-clock time per recording",
            f"{float(pick('timeout_s', settings.runner_timeout_s)):g} s",
        ),
        ("Memory (RAM, no swap)", _size(float(pick("memory_bytes", settings.runner_memory_bytes)))),
        ("CPU cores", f"{float(pick('cpus', settings.runner_cpus)):g}"),
        ("Processes and threads", str(int(pick("pids", settings.runner_pids)))),
        (
            "Scratch space: /tmp and declared volumes (tmpfs)",
            _size(float(pick("tmpfs_bytes", settings.runner_tmpfs_bytes))),
        ),
        (
            "Everything written to /output",
            _size(float(pick("output_bytes", settings.runner_output_bytes))),
        ),
        (
            "Files and folders in /output",
            str(int(pick("output_files", settings.runner_output_files))),
        ),
        ("GPU", "one, on the gpu queue" if pick("queue", "cpu") == "gpu" else "none"),
        ("Network", "none"),
    ]


def _public_sample(session: SessionDep, settings: Settings) -> Dataset | None:
    """The smoke test's public sample, else any public sample."""
    rows = session.scalars(
        select(Dataset).where(Dataset.kind == DatasetKind.PUBLIC_SAMPLE).order_by(Dataset.id)
    ).all()
    preferred = [d for d in rows if d.slug == settings.smoke_test_dataset]
    chosen = preferred or list(rows)
    return chosen[0] if chosen else None


@router.get("/how-to-submit", response_class=HTMLResponse)
def how_to_submit(request: Request, session: SessionDep, caller: Anyone) -> Response:
    """The container contract, the limits, the starter and the public sample."""
    settings = get_settings()
    held_out = session.scalars(
        select(Dataset).where(Dataset.kind == DatasetKind.HELD_OUT).order_by(Dataset.slug)
    ).all()
    sample = _public_sample(session, settings)
    context = {
        "title": "How to submit",
        "default_limits": limits_of(settings, None),
        "dataset_limits": [
            (d, limits_of(settings, d.run_limits)) for d in held_out if d.run_limits
        ],
        "sample": sample,
        "smoke_test": bool(settings.smoke_test_dataset)
        and sample is not None
        and sample.slug == settings.smoke_test_dataset,
        "starter": STARTER_DIR.is_dir(),
        "max_upload": _size(settings.max_upload_bytes),
        "held_out_runs_per_day": settings.held_out_runs_per_day,
        "submissions_per_day": settings.submissions_per_day,
    }
    return render(request, "how_to_submit.html", caller, context)


@router.get("/how-to-submit/starter.tar.gz")
def starter() -> Response:
    """The baseline's Dockerfile, detector and README as a .tar.gz to start from."""
    files = [(name, STARTER_DIR / name) for name in STARTER_FILES]
    missing = [name for name, path in files if not path.is_file()]
    if missing:
        raise NotFound(f"the starter is not on this server (missing: {', '.join(missing)})")
    return StreamingResponse(
        stream_tar_gz(files, "szbench-starter"),
        media_type="application/gzip",
        headers={"Content-Disposition": 'attachment; filename="szbench-starter.tar.gz"'},
    )

"""CSV and JSON downloads of tables (leaderboards, per-subject, per-recording results), and
"Cite this" downloads; each format written by its serializer (:mod:`szbench.formats`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import Response

from szbench import citations
from szbench.citations import Citation, Format
from szbench.formats import tables


def table_response(
    rows: Iterable[Mapping[str, Any]], *, columns: list[str], filename: str, fmt: str
) -> Response:
    """``rows`` as a CSV (flat cells, JSON for nested ones) or a JSON list attachment."""
    rows = list(rows)
    disposition = {"Content-Disposition": f'attachment; filename="{filename}.{fmt}"'}
    if fmt == "json":
        body = json.dumps(
            [{c: r.get(c) for c in columns} for r in rows], default=tables.json_cell, indent=1
        )
        return Response(body, media_type="application/json", headers=disposition)
    return Response(
        tables.csv_text(rows, columns),
        media_type="text/csv; charset=utf-8",
        headers=disposition,
    )


def citation_response(citation: Citation, fmt: Format) -> Response:
    """A "Cite this" download, shown in the browser (inline) and named for saving."""
    return Response(
        citations.render(citation, fmt),
        media_type=citations.MEDIA_TYPES[fmt],
        headers={
            "Content-Disposition": f'inline; filename="{citations.download_name(citation, fmt)}"'
        },
    )

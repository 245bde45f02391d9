"""CSV and JSON downloads of tables (leaderboards, per-subject, per-recording results)."""

from __future__ import annotations

import csv
import enum
import io
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from fastapi import Response

from szbench import citations
from szbench.citations import Citation, Format

#: What a spreadsheet reads as the start of a formula.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_text(value: Any) -> Any:
    """A CSV cell: text that a spreadsheet would run as a formula is quoted as text.

    Cells may hold what a container wrote (an admin's download of run messages) or what a
    submitter typed (names): ``=HYPERLINK(...)`` must stay text when an admin opens the file.
    """
    value = _cell(value)
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _cell(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return "" if value is None else value


def table_response(
    rows: Iterable[Mapping[str, Any]], *, columns: list[str], filename: str, fmt: str
) -> Response:
    """``rows`` as a CSV (flat cells, JSON for nested ones) or a JSON list attachment."""
    rows = list(rows)
    disposition = {"Content-Disposition": f'attachment; filename="{filename}.{fmt}"'}
    if fmt == "json":
        body = json.dumps([{c: r.get(c) for c in columns} for r in rows], default=_cell, indent=1)
        return Response(body, media_type="application/json", headers=disposition)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_csv_text(row.get(c)) for c in columns])
    return Response(buffer.getvalue(), media_type="text/csv; charset=utf-8", headers=disposition)


def citation_response(citation: Citation, fmt: Format) -> Response:
    """A "Cite this" download, shown in the browser (inline) and named for saving."""
    return Response(
        citations.render(citation, fmt),
        media_type=citations.MEDIA_TYPES[fmt],
        headers={
            "Content-Disposition": f'inline; filename="{citations.download_name(citation, fmt)}"'
        },
    )

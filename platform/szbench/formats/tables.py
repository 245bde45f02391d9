"""CSV: tables that a spreadsheet opens as the same cells, and as text.

Cells may hold what a container wrote (an admin's download of run messages) or what a
submitter typed (names, titles). The csv module quotes separators, quotes and line breaks;
here a cell that a spreadsheet would run as a formula (``=HYPERLINK(...)``) is kept as text
with a leading apostrophe, line breaks are written as ``\n`` (inside quotes), and
characters no UTF-8 encoder takes (lone surrogates) or that some readers stop at (NUL) are
dropped.
"""

from __future__ import annotations

import csv
import enum
import io
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

#: What a spreadsheet reads as the start of a formula.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def cell(value: Any) -> Any:
    """One value as a CSV cell."""
    if isinstance(value, enum.Enum):
        value = value.value
    elif isinstance(value, datetime):
        value = value.isoformat()
    elif isinstance(value, dict | list):
        value = json.dumps(value, sort_keys=True)
    elif value is None:
        value = ""
    if not isinstance(value, str):
        return value
    value = "".join(c for c in value if c != "\0" and not 0xD800 <= ord(c) <= 0xDFFF)
    # A lone carriage return is no separator to the writer (its lines end in "\n") but
    # ends a row for readers: every line break is written as "\n", inside quotes.
    value = value.replace("\r\n", "\n").replace("\r", "\n")
    if value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_text(rows: Iterable[Mapping[str, Any]], columns: list[str]) -> str:
    """``rows`` as CSV with a header line."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([cell(row.get(c)) for c in columns])
    return buffer.getvalue()


def json_cell(value: Any) -> Any:
    """``json.dumps``'s default for values JSON has no type for."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)

"""Rendering of a stored SzCORE report as a table (the layout of ``szbench score``).

``szbench score`` renders a live :class:`~szbench_scoring.DatasetReport`; the pipeline's
commands have the stored JSON instead (``DatasetResult.report``:
``{"sample_results": ..., "event_results": ..., "pooled": ...}``), so this renders that
shape in the same layout: one row per scoring, mean ± std over subjects, then pooled rows.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table
from rich.text import Text

_COLUMNS = (("sensitivity", 3), ("precision", 3), ("f1", 3), ("fpRate", 2))


def _cell(value: float | None, std: float | None, digits: int) -> str:
    if value is None:
        return "n/a"
    text = f"{value:.{digits}f}"
    if std is not None:
        text += f" ± {std:.{digits}f}"
    return text


def report_table(report: dict[str, Any], *, title: str = "SzCORE scores") -> Table:
    """Rows ``event`` and ``sample`` (mean ± std over subjects) and, when the report has a
    ``pooled`` block, ``event (pooled)`` and ``sample (pooled)``. NaN (null) shows as n/a.

    >>> block = {"sensitivity": 0.5, "precision": None, "f1": 0.5, "fpRate": 1.0,
    ...          "sensitivity_std": 0.5, "precision_std": None, "f1_std": 0.1, "fpRate_std": 0}
    >>> table = report_table({"event_results": block, "sample_results": block})
    >>> [c.header for c in table.columns]
    ['scoring', 'sensitivity', 'precision', 'F1', 'FP/day']
    >>> table.row_count
    2
    """
    table = Table(
        # The title may name an image or a dataset: never read as markup.
        title=Text(title),
        title_justify="left",
        caption="event/sample: mean ± std over subjects; (pooled): ratios of the summed counts",
        caption_justify="left",
    )
    table.add_column("scoring")
    for header in ("sensitivity", "precision", "F1", "FP/day"):
        table.add_column(header, justify="right")
    pooled = report.get("pooled") or {}
    rows = [("event", report.get("event_results") or {}, True)]
    rows.append(("sample", report.get("sample_results") or {}, True))
    if pooled:
        rows.append(("event (pooled)", pooled.get("event_results") or {}, False))
        rows.append(("sample (pooled)", pooled.get("sample_results") or {}, False))
    for label, block, with_std in rows:
        cells = [
            _cell(block.get(key), block.get(f"{key}_std") if with_std else None, digits)
            for key, digits in _COLUMNS
        ]
        table.add_row(label, *cells)
    return table

"""Rendering of an SzCORE report (``{"sample_results": ..., "event_results": ...}``) as a table.

Shared by the commands that print results (``szbench evaluate``; ``szbench score`` may use
it too). Takes the JSON shape, so that it works on stored reports without the scorer.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

_ROWS = (("sensitivity", "Sensitivity"), ("precision", "Precision"), ("f1", "F1"))


def _fmt(value: Any, *, percent: bool = True) -> str:
    if value is None:
        return "n/a"
    return f"{100 * value:.1f}%" if percent else f"{value:.2f}"


def report_table(report: dict[str, Any], *, title: str = "SzCORE scores") -> Table:
    """Per-subject mean ± std of each metric, for event and sample scoring, plus pooled.

    ``report`` is szcore-evaluation's JSON; a ``pooled`` key (same shape, no ``*_std``)
    adds the pooled column.
    """
    pooled = report.get("pooled") or {}
    table = Table(title=title)
    table.add_column("Metric")
    for kind in ("Event", "Sample"):
        table.add_column(f"{kind} (mean ± std over subjects)", justify="right")
        if pooled:
            table.add_column(f"{kind} (pooled)", justify="right")
    for key, label in (*_ROWS, ("fpRate", "False positives / day")):
        percent = key != "fpRate"
        cells = [label]
        for block in ("event_results", "sample_results"):
            values = report.get(block) or {}
            mean = _fmt(values.get(key), percent=percent)
            std = values.get(f"{key}_std")
            cells.append(mean if std is None else f"{mean} ± {_fmt(std, percent=percent)}")
            if pooled:
                cells.append(_fmt((pooled.get(block) or {}).get(key), percent=percent))
        table.add_row(*cells)
    return table

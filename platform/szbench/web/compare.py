"""The comparison page: algorithms side by side on one dataset version, with paired tests.

The numbers come from :mod:`szbench.compare.service` (the same as ``GET
/api/v1/comparisons``); this module only picks the entries and draws.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from html import escape
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response
from pydantic import Field

from szbench.api.deps import SessionDep
from szbench.api.pagination import MAX_ID
from szbench.auth.dependencies import Anyone
from szbench.compare import service
from szbench.datasets import queries as datasets
from szbench.disclosure import decision, release
from szbench.errors import BadRequest
from szbench.leaderboards import service as leaderboards
from szbench.results.queries import METRICS
from szbench.web import charts
from szbench.web.common import render
from szbench.web.pages import METRIC_LABELS

router = APIRouter(include_in_schema=False)
_ids = itertools.count(1)


def _text(x: float, y: float, text: str, css: str, anchor: str = "start") -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" class="{css}">{escape(text)}</text>'
    )


def grouped_bars(
    labels: Sequence[str],
    series: Sequence[tuple[str, Sequence[float | None]]],
    *,
    title: str,
    maximum: float | None = None,
    digits: int = 2,
    width: int = 420,
) -> str:
    """Per label (subject) one bar per series (algorithm), side by side, as an SVG string.

    Drawn as the charts of :mod:`szbench.web.charts` are (role img, title and desc, CSS
    classes for colours). The series are told apart by the classes ``s0``, ``s1``, ... (a
    legend on the page) and each bar's tooltip names its series. Missing values show "n/a"
    and no bar, never a zero.
    """
    bar_h, gap, left, right, top = 12, 8, 90, 60, 24
    k = max(1, len(series))
    group_h = bar_h * k + gap
    height = top + group_h * max(1, len(labels)) + 4
    present = [
        v for _, values in series for v in values if v is not None and not charts.is_missing(v)
    ]
    axis_max = maximum if maximum is not None else charts.nice_max(max(present, default=0.0))
    scale = charts.LinearScale(0.0, axis_max, left, width - right)
    described = "; ".join(
        f"{lab}: " + ", ".join(f"{name} {charts.fmt(values[i], digits)}" for name, values in series)
        for i, lab in enumerate(labels)
    )
    n = next(_ids)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart bars grouped" role="img" '
        f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
        f'aria-labelledby="cmp-t{n} cmp-d{n}"><title id="cmp-t{n}">{escape(title)}</title>'
        f'<desc id="cmp-d{n}">{escape(described or "no values")}</desc>'
    ]
    for tick in charts.ticks(axis_max):
        x = scale(tick)
        parts.append(
            f'<line class="grid" x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{height - 4}"/>'
        )
        parts.append(
            _text(x, top - 8, charts.fmt(tick, 2 if axis_max <= 2.5 else 0), "tick", "middle")
        )
    for i, label in enumerate(labels):
        y0 = top + i * group_h
        parts.append(_text(left - 6, y0 + (bar_h * k) / 2 + 4, label, "label", "end"))
        for j, (name, values) in enumerate(series):
            value = values[i]
            y = y0 + j * bar_h
            if value is None or charts.is_missing(value):
                parts.append(_text(left + 4, y + bar_h - 2, "n/a", "na"))
                continue
            x_end = scale(value)
            parts.append(
                f'<rect class="bar s{j % 8}" x="{left}" y="{y + 1}" '
                f'width="{max(0.0, x_end - left):.1f}" height="{bar_h - 2}">'
                f"<title>{escape(label)}, {escape(name)}: {charts.fmt(value, digits)}</title>"
                "</rect>"
            )
            parts.append(_text(x_end + 4, y + bar_h - 2, charts.fmt(value, digits), "value"))
    parts.append("</svg>")
    return "".join(parts)


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    session: SessionDep,
    caller: Anyone,
    dataset: Annotated[str, Query(max_length=100)] = "",
    version: Annotated[str, Query(max_length=100)] = "",
    evaluation: Annotated[
        list[Annotated[int, Field(ge=1, le=MAX_ID)]] | None, Query(max_length=50)
    ] = None,
    metric: Annotated[str, Query(max_length=50)] = service.RANKING_METRIC,
) -> Response:
    """Pick two or more leaderboard entries; their per-subject values and paired tests."""
    if metric not in METRICS:
        raise BadRequest(f"metric: unknown metric {metric!r}")
    chosen = list(dict.fromkeys(evaluation or []))
    rows = service.load(session, chosen, viewer=caller.user) if len(chosen) >= 2 else []
    if rows:
        dv = rows[0].dataset_version
        dataset, version = dv.dataset.slug, dv.version
    if not dataset:
        raise BadRequest("dataset: choose a dataset (open the comparison from a leaderboard)")
    ds = datasets.get_dataset(session, dataset)
    query = leaderboards.BoardQuery(
        slug=ds.slug, version=version or None, versions="all", limit=None
    )
    board = leaderboards.leaderboard(session, query, viewer=caller.user)
    context: dict[str, object] = {
        "title": f"Compare algorithms on {ds.title or ds.slug}",
        "dataset": ds,
        "board": board,
        "chosen": set(chosen),
        "metric": metric,
        "metrics": METRIC_LABELS,
        "comparison": None,
        "hidden": None,
    }
    if rows:
        # What may be shown is the disclosure module's answer (each entry's view, each pair's
        # released test); the page only draws it.
        views = service.views_of(rows, viewer=caller.user)
        if release.comparing(views.values()) == decision.Comparing.NONE:
            context["hidden"] = release.comparison_withheld(views)
        else:
            comparison = service.compare(session, chosen, viewer=caller.user, metric=metric)
            # An entry is called what the leaderboard and its own page call it: its title
            # (its short name when it has none), then its version.
            names = [
                f"{e.title or e.algorithm} {e.algorithm_version}" for e in comparison.evaluations
            ]
            label = METRIC_LABELS.get(metric, metric)
            context["comparison"] = comparison
            context["digits"] = (
                3 if comparison.release == "subjects" else decision.RELEASED_DECIMALS
            )
            context["names"] = dict(
                zip([e.evaluation_id for e in comparison.evaluations], names, strict=True)
            )
            if comparison.subjects:
                context["chart"] = grouped_bars(
                    [s.subject for s in comparison.subjects],
                    [
                        (name, [s.values[i] for s in comparison.subjects])
                        for i, name in enumerate(names)
                    ],
                    title=f"{label} per subject",
                    maximum=None if metric.endswith("fp_rate") else 1.0,
                    digits=1 if metric.endswith("fp_rate") else 2,
                )
    return render(request, "compare.html", caller, context)

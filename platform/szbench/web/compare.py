"""The comparison page: algorithms side by side on one dataset version, with paired tests.

The numbers come from :mod:`szbench.compare.service` (the same as ``GET
/api/v1/comparisons``); this module only picks the entries and draws.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, Response

from szbench.api.deps import SessionDep
from szbench.auth.dependencies import Anyone
from szbench.compare import service
from szbench.datasets import queries as datasets
from szbench.errors import BadRequest
from szbench.leaderboards import service as leaderboards
from szbench.results.queries import METRICS
from szbench.web import charts
from szbench.web.common import render
from szbench.web.pages import METRIC_LABELS

router = APIRouter(include_in_schema=False)


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    request: Request,
    session: SessionDep,
    caller: Anyone,
    dataset: Annotated[str, Query(max_length=100)] = "",
    version: Annotated[str, Query(max_length=100)] = "",
    evaluation: Annotated[list[int] | None, Query()] = None,
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
    board = leaderboards.leaderboard(
        session,
        slug=ds.slug,
        version=version or None,
        viewer=caller.user,
        versions="all",
        limit=None,
    )
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
        context["hidden"] = service.hidden_reason(rows, viewer=caller.user)
        if context["hidden"] is None:
            comparison = service.compare(session, chosen, viewer=caller.user, metric=metric)
            names = [f"{e.algorithm} {e.algorithm_version}" for e in comparison.evaluations]
            label = METRIC_LABELS.get(metric, metric)
            context["comparison"] = comparison
            context["names"] = dict(
                zip([e.evaluation_id for e in comparison.evaluations], names, strict=True)
            )
            context["chart"] = charts.grouped_bars(
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

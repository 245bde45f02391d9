"""What a bundle may carry: the one adapter between federation and the disclosure rules.

Every question federation asks of the disclosure rules (:mod:`szbench.disclosure`) goes
through this module. A
centre publishes what its own rules release to an anonymous reader of its own site
(``decide(None, ...)``): at the ``aggregate`` level the rounded figures, at ``subject`` and
``recording`` the exact dataset-level figures; never under the Ladder. The hub checks the
same grid on what it receives, so a figure the declared rule would not release is refused
even when a centre's software was changed to send it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from szbench.disclosure import decision, release
from szbench.disclosure.decision import Release, View
from szbench.models import Evaluation

#: A bundle's figures and the rules that decide them.
RULE_ROUNDED = "rounded"
RULE_EXACT = "exact"


def view_of(evaluation: Evaluation) -> View:
    """What this centre releases of ``evaluation`` to anyone outside it."""
    return decision.view_of(None, evaluation)


def rule_of(view: View) -> str | None:
    """``rounded`` or ``exact``; None where nothing may be published (the Ladder)."""
    if view.release == Release.ROUNDED:
        return RULE_ROUNDED
    if view.release == Release.EXACT:
        return RULE_EXACT
    return None


def figures(view: View, metrics: Mapping[str, float | None]) -> dict[str, float | None]:
    """The dataset-level figures ``view`` releases (the metrics it withholds left out)."""
    released = release.released_metrics(view, metrics)
    if view.release == Release.ROUNDED:
        return {m: released[m] for m in release.ROUNDED_METRICS if m in released}
    return released


def grid_refusal(rule: str, decimals: int, metric: str, value: float | None) -> str | None:
    """Why ``value`` of ``metric`` is not a figure ``rule`` releases (None when it is)."""
    if value is None:
        return None
    if not math.isfinite(value) or value < 0:
        return f"{metric}: {value!r} is not a released figure"
    fp = metric.endswith("fp_rate")
    if not fp and value > 1:
        return f"{metric}: {value!r} is outside 0 to 1"
    if rule == RULE_EXACT:
        return None
    if metric not in release.ROUNDED_METRICS:
        return f"{metric} is withheld at the aggregate level (rounded release)"
    shown = release.round_fp_rate(value) if fp else release.round_ratio(value, decimals)
    if shown != value:
        return f"{metric}: {value!r} is not on the released grid (it would be {shown!r})"
    return None


def decimals_of(view: View) -> int:
    return view.decimals


def bits_per_result(*, recordings: int, decimals: int | None = None) -> float:
    """The most bits one published result at the aggregate level (rounded) carries about a
    centre's held-out data: its figures (:data:`~szbench.results.release.ROUNDED_METRICS`
    on their grids, or null) and the count of failed recordings (0 to ``recordings``). The
    dataset's description is the centre's own choice, the same for every algorithm, and
    tells nothing an algorithm chose.

    >>> round(bits_per_result(recordings=1000, decimals=2), 1)
    44.8
    """
    decimals = decision.RELEASED_DECIMALS if decimals is None else decimals
    ratio = math.log2(10**decimals + 2)
    fp = math.log2(release.FP_RATE_GRID_SIZE + 1)
    return 4 * ratio + fp + math.log2(recordings + 1)

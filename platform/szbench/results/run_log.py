"""The part of a run's admin log that its owner may read on a public sample.

A run's ``admin_log`` is the runner's header (host, host paths of the recording, GPU ids),
then a marker line, then the tail of what the container wrote to stdout/stderr; the worker
may append its own ``[worker]``/``[reconciler]`` lines. The owner of a public-sample run gets
only what follows the first marker, up to the first appended worker line, and only for
outcomes the algorithm itself caused: an infrastructure failure's note may name host paths.
Held-out runs never reach this function for non-admins (see
:attr:`szbench.disclosure.decision.View.run_details`).
"""

from __future__ import annotations

from szbench.models import RunOutcome

#: The runners' marker lines before the container's own output (Docker, local process).
MARKERS = ("--- container log (tail) ---\n", "--- log (tail) ---\n")
_WORKER_LINES = ("\n[worker] ", "\n[reconciler] ")
_ALGORITHM_OUTCOMES = frozenset(RunOutcome) - {RunOutcome.INFRASTRUCTURE_ERROR}


def container_log(admin_log: str, outcome: RunOutcome | None, *, limit: int) -> str | None:
    """The container's stdout/stderr tail in ``admin_log`` (at most ``limit`` characters),
    or None when there is none to show.

    >>> container_log("host: h1\\n--- log (tail) ---\\nepoch 1\\n", RunOutcome.OK, limit=100)
    'epoch 1\\n'
    >>> container_log("host: h1\\n--- log (tail) ---\\nx", RunOutcome.INFRASTRUCTURE_ERROR, limit=9)
    """
    if outcome not in _ALGORITHM_OUTCOMES:
        return None
    starts = [(admin_log.find(m), m) for m in MARKERS if m in admin_log]
    if not starts:
        return None
    at, marker = min(starts)
    text = admin_log[at + len(marker) :]
    for line in _WORKER_LINES:
        cut = text.find(line)
        if cut >= 0:
            text = text[: cut + 1]
    if len(text) > limit:
        text = "[... earlier lines cut ...]\n" + text[len(text) - limit :]
    return text

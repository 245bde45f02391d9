"""axe-core in the browser tests: inject the engine into a page and fail on any violation.

axe-core's ``axe.min.js`` comes from the ``axe-playwright-python`` wheel (the dev extra), so
no browser or script download is involved. It is evaluated through the DevTools protocol
rather than added as a ``<script>`` element: the pages' Content-Security-Policy allows no
inline script, and the crawl keeps that policy on (a violation would be a console error).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

#: Rules as axe-core ships them (WCAG 2.x A and AA plus its best practices): none is turned
#: off, so every rule that applies to a page is checked.
RUN_OPTIONS: dict[str, Any] = {"resultTypes": ["violations"]}


@cache
def axe_source() -> str:
    import axe_playwright_python

    path = Path(axe_playwright_python.__file__).resolve().parent / "axe.min.js"
    return path.read_text(encoding="utf-8")


def violations(page: Any) -> list[dict[str, Any]]:
    """axe-core's violations on the page as it is now (the engine is injected once a page)."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(axe_source())
    result = page.evaluate("(options) => axe.run(document, options)", RUN_OPTIONS)
    return list(result["violations"])


def describe(found: list[dict[str, Any]]) -> str:
    """One line per violation and affected element: rule, impact, selector, what fails."""
    lines = []
    for violation in found:
        for node in violation["nodes"]:
            summary = (node.get("failureSummary") or "").replace("\n", " ")
            lines.append(
                f"{violation['id']} ({violation.get('impact')}): {json.dumps(node['target'])} "
                f"{node['html'][:160]} -- {summary[:300]}"
            )
    return "\n".join(lines)


def assert_no_axe_violations(page: Any, context: str = "") -> None:
    """Fail with every violation axe-core finds on ``page`` (``context`` names the case)."""
    found = violations(page)
    assert not found, f"axe-core violations on {context or page.url}:\n{describe(found)}"

"""A 405 names, in ``Allow``, every method the path takes, whichever route answered it."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient

_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


def _pattern(template: str) -> re.Pattern[str]:
    return re.compile("^" + re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(template)) + "$")


def test_every_api_path_answers_405_with_all_its_methods(client: TestClient) -> None:
    paths = client.get("/api/v1/openapi.json").json()["paths"]
    templates = {
        template: {m.upper() for m in operations if m.upper() in _METHODS}
        for template, operations in paths.items()
    }
    checked = 0
    for template in templates:
        concrete = re.sub(r"\{[^}]+\}", "1", template)
        # Every documented operation whose path the concrete address matches.
        expected = set().union(
            *(methods for t, methods in templates.items() if _pattern(t).match(concrete))
        )
        missing = [m for m in _METHODS if m not in expected]
        if not missing:
            continue
        r = client.request(missing[0], concrete)
        assert r.status_code == 405, (missing[0], concrete, r.status_code, r.text)
        allow = {m.strip() for m in r.headers["allow"].split(",")}
        assert allow == expected, (concrete, allow, expected)
        assert r.json()["error"] == "MethodNotAllowed"
        checked += 1
    assert checked > 20


def test_phases_405_names_post_too(client: TestClient) -> None:
    r = client.delete("/api/v1/phases")
    assert r.status_code == 405
    assert {m.strip() for m in r.headers["allow"].split(",")} == {"GET", "POST"}


def test_a_page_405_names_every_method(client: TestClient) -> None:
    r = client.put("/login")
    assert r.status_code == 405
    assert {m.strip() for m in r.headers["allow"].split(",")} == {"GET", "POST"}

"""The web server's access log and Django's request warnings name the route a request matched,
never its path or query: a path holds client-chosen thread ids and people's ids, and a log line
outlives an erasure (memory_project.weblog)."""

from __future__ import annotations

import http.client
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import RequestFactory
from gunicorn.config import Config

from memory_project.weblog import (
    NO_ROUTE,
    ROUTE_ENVIRON_KEY,
    RouteAccessLogger,
    RouteOnly,
    route_of_path,
    route_text,
)
from tests.kit.api import Caller
from tests.kit.servers import gunicorn_serving

PERSON = "p-ines-7q"
THREAD = f"trip:{PERSON}"


@pytest.fixture
def served(transactional_db: None, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    with gunicorn_serving(var_dir=tmp_path) as where:
        yield where, tmp_path / "gunicorn.log"


def get(where: str, path: str, key: str) -> int:
    host, port = where.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("GET", path, headers={"Authorization": f"Bearer {key}", "Referer": f"http://x/?q={PERSON}"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def log_once_it_says(log: Path, text: str) -> str:
    """The log's text once it holds `text` (gunicorn writes the access line after the response)."""
    deadline = time.monotonic() + 30
    while True:
        content = log.read_text(errors="replace")
        if text in content or time.monotonic() > deadline:
            return content
        time.sleep(0.1)


@pytest.mark.slow
def test_gunicorns_access_log_and_djangos_not_found_warning_name_the_route_not_the_ids(
    served: tuple[str, Path], alice: Caller
) -> None:
    where, log = served
    assert get(where, f"/api/v1/threads/{THREAD}/entries?x={PERSON}", alice.key) == 404
    assert get(where, f"/no/such/{PERSON}/page?x={PERSON}", alice.key) == 404

    content = log_once_it_says(log, f"GET {NO_ROUTE} HTTP/1.1")
    assert "GET /api/v1/threads/{thread_id}/entries HTTP/1.1" in content
    assert "Not Found: /api/v1/threads/{thread_id}/entries" in content
    assert f"Not Found: {NO_ROUTE}" in content
    assert PERSON not in content


def test_a_request_warning_names_the_route_in_place_of_the_path() -> None:
    request = RequestFactory().get(f"/api/v1/users/{PERSON}/identifiers?x={PERSON}")
    record = logging.LogRecord(
        "django.request", logging.WARNING, __file__, 1, "%s: %s", ("Not Found", request.path), None
    )
    record.request = request
    assert RouteOnly().filter(record)
    assert record.getMessage() == "Not Found: /api/v1/users/{user_id}/identifiers"


def test_a_path_that_matches_no_pattern_is_logged_as_no_route() -> None:
    assert route_of_path(f"/nothing/{PERSON}") == NO_ROUTE


def test_a_resolved_request_leaves_its_route_for_the_access_log(alice: Caller) -> None:
    # The access log takes it from there instead of resolving the path again (issue 26).
    response = alice.client.get(f"/api/v1/threads/{THREAD}/path")
    assert response.status_code == 404
    pattern = response.wsgi_request.META[ROUTE_ENVIRON_KEY]
    assert route_text(pattern) == "/api/v1/threads/{thread_id}/path"
    atoms = RouteAccessLogger(Config()).atoms(
        type("Response", (), {"status": "404 Not Found", "sent": 0, "headers": []})(),
        type("Request", (), {"headers": [], "method": "GET", "version": (1, 1)})(),
        {
            **response.wsgi_request.META,
            "PATH_INFO": "/elsewhere",
            "RAW_URI": "/elsewhere",
            "SERVER_PROTOCOL": "HTTP/1.1",
        },
        timedelta(milliseconds=3),
    )
    assert atoms["r"] == "GET /api/v1/threads/{thread_id}/path HTTP/1.1" and PERSON not in str(atoms)

"""The docs page in a real headless Chromium: an operation opened shows the fields of its answer.

A screenshot of the opened operation goes to bench/out/screenshots/api-docs-thread.png.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from playwright.sync_api import expect

from tests.kit.browser import BROWSER_TEST, shoot

pytestmark = BROWSER_TEST


def test_the_docs_page_shows_the_fields_of_a_response_and_the_error_shape(
    django_db_setup: None, live_server: object, chromium: Callable[[], Any]
) -> None:
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 1600})
        page.goto(f"{live_server.url}/api/docs/")  # type: ignore[attr-defined]
        operation = page.locator(".opblock-get", has=page.locator("[data-path='/api/v1/threads/{thread_id}']"))
        operation.locator(".opblock-summary").first.click()
        responses = operation.locator(".responses-table").first
        # The answer's fields, in the example Swagger UI builds from the declared schema...
        expect(responses).to_contain_text('"active_leaf_id"')
        expect(responses).to_contain_text('"forked_from"')
        # ...and the errors, in the one error shape.
        expect(responses.locator("tr.response[data-code='404']")).to_contain_text('"error"')
        expect(responses.locator("tr.response[data-code='404']")).to_contain_text('"message"')
        operation.scroll_into_view_if_needed()
        shoot(page, "api-docs-thread")

"""The docs page in a real headless Chromium: an operation opened shows the fields of its answer.

A screenshot of the opened operation goes to var/screenshots/api-docs-thread.png.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "bench" / "out" / "screenshots"

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        not Path(CHROMIUM).exists() and not shutil.which("chromium"),
        reason=f"{CHROMIUM} is not installed (apt-get install chromium)",
    ),
]


def test_the_docs_page_shows_the_fields_of_a_response_and_the_error_shape(
    django_db_setup: None, live_server: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from playwright.sync_api import expect, sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shot = SCREENSHOTS / "api-docs-thread.png"
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"],
        )
        try:
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
            page.screenshot(path=str(shot), full_page=False)
        finally:
            browser.close()
    assert os.path.getsize(shot) > 10_000

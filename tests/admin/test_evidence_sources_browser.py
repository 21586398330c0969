"""A quote of a tool call and of memory file lines, in place on the review queue, in a real
headless Chromium. The screenshot goes to bench/out/screenshots/review-evidence-sources.png."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from memoryapp.files.access import FileAccess
from memoryapp.files.protocol import file_create
from memoryapp.items.services import item_write
from memoryapp.models import MemoryFileVersion
from tests.kit.browser import BROWSER_TEST, log_in, shoot, staff_user
from tests.kit.factories import AgentFactory, EntryFactory, ThreadFactory

pytestmark = BROWSER_TEST

NOTES = "# Ana\nprefers the window seat\nallergic to peanuts, severe\nlikes early flights\nbirthday in May"


@pytest.fixture
def seeded(transactional_db: None) -> str:
    agent = AgentFactory(slug="concierge")
    thread = ThreadFactory(agent=agent, external_id="t-trip", user_id="u-ana")
    EntryFactory(thread=thread, role="user", content="Book me a flight to Lisbon, any airline.")
    EntryFactory(
        thread=thread,
        role="assistant",
        content="",
        tool_calls=[{"id": "call_7", "name": "search_flights", "arguments": {"to": "LIS"}}],
    )
    result = EntryFactory(
        thread=thread, type="tool_result", tool_call_id="call_7", content="TP1351 departs 07:10, seat 3A (window)"
    )
    file_create(access=FileAccess(agent=agent, user_id="u-ana"), path="/memories/ana.md", file_text=NOTES)
    version = MemoryFileVersion.objects.get(agent=agent, path="/memories/ana.md")
    item = item_write(
        agent=agent,
        kind="preference",
        subject="Ana",
        attribute="seat",
        value="window seat, early flights",
        trust="model",
        user_id="u-ana",
        evidence=[
            {"file_range": {"version_id": version.pk, "start_line": 2, "end_line": 2}, "quote": "window seat"},
            {"entry_id": result.id, "tool_call_id": "call_7", "quote": "seat 3A (window)"},
        ],
    )
    staff_user("rita", role="reviewer")
    return item.pk


def test_the_queue_shows_the_quoted_file_lines_and_tool_call_in_place(django_db_setup, live_server, seeded, chromium):
    with chromium() as browser:
        page = log_in(browser, live_server, "rita", then="/admin/memoryapp/memoryitem/review/", wait_for=".rq-card")
        card = page.locator(f"#card-{seeded}")

        quoted = card.locator(".rq-file .rq-line.rq-quoted")
        expect(quoted).to_have_count(1)
        expect(quoted).to_have_attribute("data-line", "2")
        expect(quoted.locator("mark")).to_have_text("prefers the window seat")
        expect(card.locator(".rq-file .rq-line")).to_have_count(4)  # line 2 and the two around (1, 3, 4)
        expect(card.locator(".rq-file .rq-path")).to_have_text("/memories/ana.md")
        expect(card.locator(".rq-tool .rq-call")).to_contain_text("call_7")
        expect(card.locator(".rq-tool mark")).to_have_text("seat 3A (window)")
        background = quoted.evaluate("e => getComputedStyle(e).backgroundColor")
        assert background not in ("rgba(0, 0, 0, 0)", "transparent"), background  # the range stands out
        shoot(page, "review-evidence-sources")

"""Two pages in a real headless Chromium at real sizes: the channel sessions of five agents (eighty of
them, with chat ids and thread ids as long as the API allows), and a job run that names its thread by
row id only (issue 25 §5), which the page shows by the thread's name while it lives.

Screenshots (1,280 x 800) go to bench/out/screenshots/."""

from __future__ import annotations

from playwright.sync_api import expect

from memoryapp.admin.conversation import thread_url
from memoryapp.compaction.services import compaction_now
from memoryapp.models import Agent
from memoryapp.sessions.services import session_close, session_open
from memoryapp.threads.services import entry_add, thread_create
from tests.kit.browser import BROWSER_TEST, log_in, shoot, staff_user, too_wide

pytestmark = BROWSER_TEST


def test_eighty_sessions_fit_the_page_and_lead_to_their_threads(django_db_setup, live_server, chromium) -> None:
    agents = [Agent.objects.create(slug=f"support-bot-{n}", name=f"Support bot {n}") for n in range(5)]
    first = None
    for n in range(80):
        opened = session_open(
            agent=agents[n % 5],
            user_id=f"customer-{n:03d}-" + "x" * 60,
            channel_type=("telegram", "slack", "whatsapp", "web")[n % 4],
            channel_id=f"{n:03d}-" + "c" * 200,
        ).session
        if n % 3 == 0:
            session_close(agent=agents[n % 5], session_id=opened.id)
        first = first or opened
    assert first is not None
    entry_add(thread=first.thread, role="user", content="Hello, my order has not arrived.")
    staff_user("rita", role="reviewer")
    with chromium() as browser:
        page = log_in(browser, live_server, "rita", then="/admin/memoryapp/channelsession/")
        expect(page.locator("#result_list tbody tr")).to_have_count(80)
        shoot(page, "channel-sessions-at-size")
        assert too_wide(page) == []
        page.goto(f"{live_server.url}/admin/memoryapp/channelsession/?status__exact=closed")
        expect(page.locator("#result_list tbody tr")).to_have_count(27)
        page.goto(f"{live_server.url}/admin/memoryapp/channelsession/{first.pk}/change/")
        page.click(f'a[href="{thread_url(first.thread.pk)}"]')
        page.wait_for_load_state()
        expect(page.locator("#content")).to_contain_text("my order has not arrived")


def test_a_job_run_shows_its_thread_by_name_and_the_link_opens_it(django_db_setup, live_server, chromium) -> None:
    agent = Agent.objects.create(slug="tools-bot", name="Tools bot")
    thread = thread_create(agent=agent, external_id="order:" + "o" * 100, user_id="u-ana")
    for n in range(30):
        entry_add(thread=thread, role="user", content=f"Look up order {n}, please.")
        calls = [{"id": f"c{n}", "name": "orders", "arguments": {"n": n}}]
        entry_add(thread=thread, role="assistant", content="", tool_calls=calls)
        entry_add(thread=thread, type="tool_result", tool_call_id=f"c{n}", content=f"order {n}: " + "shipped " * 300)
    run, _ = compaction_now(thread=thread, strategy="clear-old-tool-results", actor="staff:admin")
    staff_user("otto", role="operator", groups=("Reviewers",))
    with chromium() as browser:
        page = log_in(browser, live_server, "otto", then=f"/admin/governance/jobrun/{run.pk}/change/")
        link = page.locator(f'#content a[href="{thread_url(thread.pk)}"]').first
        expect(link).to_contain_text("order:")
        shoot(page, "job-run-thread-link")
        assert too_wide(page) == []
        link.click()
        page.wait_for_load_state()
        expect(page.locator("#content")).to_contain_text("Look up order 29")

"""The staff console in a real headless Chromium (Debian's package, driven by Playwright): a
2,000-turn conversation with a branch and a fork read around a linked turn, "compact now", a
redaction previewed and confirmed, a job run's progress bar redrawn while it runs, and the lists.
Each page is photographed at 1280 x 800 into bench/out/screenshots/ (docs/console.md)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.utils import timezone

from governance.models import JobRun
from memoryapp.agents.services import agent_get_or_create
from memoryapp.forgetting.services import entry_redact, replies_of
from memoryapp.items.services import item_write
from memoryapp.models import Entry, MemoryItem, Thread
from memoryapp.threads.services import entry_add, thread_fork
from tests.kit.browser import BROWSER_TEST, in_another_thread, log_in, shoot, staff_user
from tests.kit.locomo_threads import locomo_thread

pytestmark = BROWSER_TEST


def fits_the_screen(page: Any) -> bool:
    """Nothing wider than the window, and no list scrolled sideways in its box, at 1280 px."""
    overflowing = page.evaluate(
        """() => [document.documentElement, ...document.querySelectorAll('.results, #content-main, .module')]
                .filter(box => box.scrollWidth > Math.max(box.clientWidth, window.innerWidth * (box === document.documentElement)) + 1)
                .map(box => `${box.tagName}#${box.id}.${box.className} ${box.scrollWidth} > ${box.clientWidth}: ` +
                     Array.from(box.querySelectorAll('*')).filter(e => e.getBoundingClientRect().right > box.getBoundingClientRect().right + 1)
                          .slice(0, 3).map(e => `${e.tagName}.${e.className}`).join(' '))"""
    )
    assert not overflowing, (page.url, overflowing)
    return True


def test_a_2000_turn_conversation_reads_at_full_width_around_a_linked_turn(
    django_db_setup: None, live_server: Any, chromium: Callable[[], Any]
) -> None:
    agent, _ = agent_get_or_create(slug="concierge")
    thread = locomo_thread(
        agent=agent, external_id="caroline-and-melanie", turns=2000, user_id="u-caroline", tools_every=40
    )
    at = {
        e.seq: e for e in Entry.objects.filter(thread=thread, seq__in=[996, 1000, 1004, 1900, 1950]).defer("embedding")
    }
    side = entry_add(
        thread=thread, role="assistant", content="(another answer, tried once)", parent_id=at[1004].id, activate=False
    )
    entry_add(thread=thread, role="user", content="And what happened next?", parent_id=side.id, activate=False)
    fork = thread_fork(thread=thread, entry_id=at[1950].id, new_thread_id="caroline-what-if")
    entry_add(thread=fork, role="assistant", content="In this fork the conversation takes another turn.")
    quote = " ".join(at[1000].text.split()[:5])
    item_write(
        agent=agent,
        kind="event",
        subject=at[1000].sender_name,
        attribute="said",
        value=quote,
        trust="model",
        user_id="u-caroline",
        evidence=[{"entry_id": at[1000].id, "quote": quote}],
    )
    entry_redact(entry=at[996], reason="the person asked", actor="test")
    anchor = at[1000].id
    staff_user("ada", superuser=True)
    url = f"/admin/memoryapp/thread/{thread.pk}/change/"

    with chromium() as browser:
        page = log_in(browser, live_server, "ada", then=f"{url}?entry={anchor}%23entry-{anchor}")
        page.goto(f"{live_server.url}{url}?entry={anchor}#entry-{anchor}")
        page.wait_for_selector(f"#entry-{anchor}.anchor")
        turns = page.locator(".cv-turn")
        assert turns.count() == 100
        widths = page.evaluate(
            """() => Array.from(document.querySelectorAll('.cv-turn, .cv-turn .cv-text, .cv-turn .cv-who'))
                    .filter(e => e.getClientRects().length)
                    .map(e => e.getBoundingClientRect().width)"""
        )
        assert widths and min(widths) >= 300, min(widths)
        box = page.evaluate(
            f"() => {{ const r = document.getElementById('entry-{anchor}').getBoundingClientRect();"
            " return [r.top, r.bottom, window.innerHeight]; }"
        )
        assert 0 <= box[0] < box[2] and box[1] > 0, box  # the anchor turn is on the screen
        assert page.locator(f"#entry-{anchor} mark.quote").count() == 1
        assert page.locator(f"#entry-{at[1004].id} .cv-branches summary").inner_text() == "1 other branch from here"
        assert "[redacted]" in page.locator(f"#entry-{at[996].id}").inner_text()
        assert fits_the_screen(page)
        shoot(page, "conversation-anchored")

        # The other branch opens from its fold; the fork's page names where it came from.
        page.locator(f"#entry-{at[1004].id} .cv-branches summary").click()
        page.locator(f"#entry-{at[1004].id} .cv-branches a").click()
        page.wait_for_selector(".cv-branch.other")
        assert page.locator(".cv-turn").last.inner_text().find("And what happened next?") >= 0
        shoot(page, "conversation-other-branch")
        page.goto(f"{live_server.url}/admin/memoryapp/thread/{fork.pk}/change/")
        assert "Forked from caroline-and-melanie at entry" in page.locator(".cv-fork-origin").inner_text()
        shoot(page, "conversation-fork")

        # A link of the review queue's form (a bare fragment) to a turn on another page finds it.
        page.goto(f"{live_server.url}{url}#{at[1000].id}")
        page.wait_for_selector(f"#entry-{anchor}.anchor")
        assert "entry=" in page.url
        # The newest page: the fork is marked where it was made.
        page.goto(f"{live_server.url}{url}")
        assert page.locator(".cv-turn").count() == 100
        assert page.locator(f"#entry-{at[1950].id} .cv-forked-here").inner_text().endswith("caroline-what-if")
        shoot(page, "conversation-newest")


def test_compact_now_starts_a_job_run_linked_from_the_message(
    django_db_setup: None, live_server: Any, chromium: Callable[[], Any]
) -> None:
    agent, _ = agent_get_or_create(slug="concierge")
    thread = locomo_thread(agent=agent, external_id="with-tools", turns=120, tools_every=6)
    staff_user("ada", superuser=True)
    url = f"/admin/memoryapp/thread/{thread.pk}/change/"
    with chromium() as browser:
        page = log_in(browser, live_server, "ada", then=url)
        page.goto(f"{live_server.url}{url}")
        page.select_option("select[name=strategy]", "clear-old-tool-results")
        page.click("#compact-now")
        page.wait_for_selector(".messagelist .success")
        message = page.locator(".messagelist .success").inner_text()
        assert "Compaction (clear-old-tool-results) queued as job run #" in message
        shoot(page, "compact-now")
        page.locator(".messagelist .success a").click()
        page.wait_for_selector(".field-progress_shown")
        assert "Compaction" in page.title() or "compact" in page.locator("#content").inner_text()
        shoot(page, "job-run-compaction")

    run = JobRun.objects.get(kind__icontains="compact")
    assert run.arguments["thread_pk"] == thread.pk and run.status == "succeeded"  # eager in the tests
    assert Entry.objects.filter(thread=thread, type="compaction").count() == 1
    assert Thread.objects.get(pk=thread.pk).updated_at == thread.updated_at  # the thread was not "saved"


def test_a_privacy_officer_sees_what_a_redaction_takes_then_confirms_it(
    django_db_setup: None, live_server: Any, chromium: Callable[[], Any]
) -> None:
    agent, _ = agent_get_or_create(slug="concierge")
    thread = locomo_thread(agent=agent, external_id="to-redact", turns=40, user_id="u-ana")
    said = Entry.objects.filter(thread=thread, role="user").order_by("seq").defer("embedding")[3]
    quote = " ".join(said.text.split()[:4])
    item = item_write(
        agent=agent,
        kind="fact",
        subject="Ana",
        attribute="remark",
        value=quote,
        trust="model",
        user_id="u-ana",
        evidence=[{"entry_id": said.id, "quote": quote}],
    )
    thread_fork(thread=thread, entry_id=said.id, new_thread_id="to-redact-fork")
    # A user message takes its replies up to the next user message (004); the fork holds none of them.
    redacted = 1 + len(replies_of([said]))
    redacted_label = f"{redacted} entries redacted" if redacted > 1 else "1 entry redacted"
    staff_user("olga", role="privacy")
    entry_url = f"/admin/memoryapp/entry/{said.id.replace('_', '_5F')}/change/"
    with chromium() as browser:
        page = log_in(browser, live_server, "olga", then=entry_url)
        page.goto(f"{live_server.url}{entry_url}")
        assert page.locator(".field-standing_items").inner_text().find("Ana · remark") >= 0
        shoot(page, "entry-page")
        page.click("#redact-link")
        page.wait_for_selector("table.consequences")
        counts = {
            row.locator("td").nth(1).inner_text(): int(row.locator("td.n").inner_text())
            for row in page.locator("table.consequences tr").all()
        }
        assert counts[redacted_label.split(" ", 1)[1]] == redacted
        assert counts["fork copy redacted"] == 1 and counts["memory item purged"] == 1
        assert fits_the_screen(page)
        shoot(page, "redaction-preview")
        page.click("#confirm")  # no reason: the browser's own check stops it (required)
        assert page.locator("table.consequences").count() == 1
        page.fill("#id_reason", "the person asked by phone")
        page.click("#confirm")
        page.wait_for_selector(".messagelist .success")
        message = page.locator(".messagelist .success").inner_text()
        assert f"{redacted_label}, 1 fork copy redacted, 1 memory item purged" in message
        shoot(page, "redaction-done")
    assert Entry.objects.get(pk=said.id).redacted_at is not None
    assert not MemoryItem.objects.filter(pk=item.pk).exists()


def test_a_running_job_runs_progress_bar_is_redrawn_until_it_ends(
    django_db_setup: None, live_server: Any, chromium: Callable[[], Any]
) -> None:
    agent, _ = agent_get_or_create(slug="concierge")
    run = JobRun.objects.create(
        kind="embed_entries",
        status="running",
        agent_id=agent.pk,
        progress_done=30,
        progress_total=120,
        started_at=timezone.now() - timedelta(seconds=15),
        arguments={"agent_id": agent.pk},
        task_name="memoryapp.tasks.embed_pending",
    )
    JobRun.objects.create(
        kind="extract", status="failed", agent_id=agent.pk, error="ModelError: timed out", task_name="x"
    )
    JobRun.objects.create(kind="compact", status="succeeded", agent_id=agent.pk, progress_done=7, progress_total=7)
    staff_user("olav", role="operator")
    with chromium() as browser:
        page = log_in(browser, live_server, "olav", then="/admin/governance/jobrun/")
        page.goto(f"{live_server.url}/admin/governance/jobrun/")
        bar = page.locator(f".jr-progress[data-run='{run.pk}']")
        assert bar.locator(".jr-text").inner_text().startswith("30 / 120 · 25% · ")
        assert bar.locator("progress").get_attribute("max") == "120"
        assert page.locator(f"tr:has(.jr-progress[data-run='{run.pk}']) .field-agent_shown").inner_text() == "concierge"
        assert fits_the_screen(page)
        shoot(page, "job-runs")

        in_another_thread(lambda: JobRun.objects.filter(pk=run.pk).update(progress_done=90))
        page.wait_for_function(
            f"document.querySelector(\".jr-progress[data-run='{run.pk}'] .jr-text\").textContent.startsWith('90 / 120')",
            timeout=15_000,
        )
        assert (
            bar.locator("progress").get_attribute("value") == "90"
            or page.evaluate(f"document.querySelector(\".jr-progress[data-run='{run.pk}'] progress\").value") == 90
        )
        # When it ends, the page reloads itself once (the time it took and its result are the server's).
        with page.expect_navigation(timeout=15_000):
            in_another_thread(
                lambda: JobRun.objects.filter(pk=run.pk).update(
                    progress_done=120, status="succeeded", finished_at=timezone.now()
                )
            )
        row = page.locator(f"tr:has(.jr-progress[data-run='{run.pk}'])")
        assert row.locator(".field-status_shown").inner_text() == "Succeeded"
        assert row.locator(".jr-progress").get_attribute("data-open") == ""
        assert "so far" not in row.locator(".field-took").inner_text()
        shoot(page, "job-runs-done")
        page.goto(f"{live_server.url}/admin/governance/jobrun/{run.pk}/change/")
        shoot(page, "job-run")


def test_the_lists_fit_the_screen(django_db_setup: None, live_server: Any, chromium: Callable[[], Any]) -> None:
    agent, _ = agent_get_or_create(slug="concierge")
    thread = locomo_thread(
        agent=agent, external_id="a-rather-long-thread-name-for-the-list", turns=150, user_id="u-caroline"
    )
    for entry in Entry.objects.filter(thread=thread, role="user").defer("embedding")[:3]:
        entry_redact(entry=entry, reason="asked", actor="staff:olga")
    staff_user("ada", superuser=True)
    with chromium() as browser:
        page = log_in(browser, live_server, "ada", then="/admin/memoryapp/entry/")
        for name, url in (
            ("entries", "/admin/memoryapp/entry/"),
            ("entries-search", "/admin/memoryapp/entry/?q=painting"),
            ("audit", "/admin/governance/auditrecord/"),
            ("threads", "/admin/memoryapp/thread/"),
            ("agent", f"/admin/memoryapp/agent/{agent.pk}/change/"),
        ):
            page.goto(f"{live_server.url}{url}")
            page.wait_for_load_state()
            shoot(page, f"list-{name}")
            assert fits_the_screen(page), name
        page.goto(f"{live_server.url}/admin/memoryapp/entry/?q=painting")
        assert page.locator("#result_list tbody tr").count() > 0

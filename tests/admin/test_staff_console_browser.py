"""The reviewers' and the overview's pages in a real headless Chromium (Debian's, driven by Playwright),
filled from real conversations (LoCoMo, tests/locomo_review.py).

- The queue: the filters with the script on (Filter button, Enter in the person box), paging, a
  conflict decided from the keyboard (2 then a) and undone (u).
- The item page: approve with an edit, reject with a reason.
- "What did the agent know", with a comparison of two moments.
- The admin index for a reviewer, a privacy officer and an operator (light and dark).

Screenshots at 1280 x 800 go to bench/out/screenshots/ (docs/benchmarks.md names the folder).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.core.cache import cache
from django.utils import timezone
from playwright.sync_api import expect

from governance.audit.chain import audit_append
from governance.console.review import QUEUE_PAGE
from governance.models import AuditRecord, JobRun
from memoryapp.agents.services import agent_get_or_create
from memoryapp.items.services import item_write
from memoryapp.models import Entry, ItemReview, MemoryItem
from memoryapp.search.space import space_record
from memoryapp.threads.services import entries_add, thread_create
from tests.kit.browser import BROWSER_TEST, has_class, log_in, shoot, staff_user
from tests.kit.locomo_review import locomo_suggestions, locomo_thread, quote_of

pytestmark = BROWSER_TEST


def _seed_queue() -> dict[str, Any]:
    """Two agents, two real conversations, their suggestions; one slot in conflict and one with a
    near-duplicate."""
    concierge, _ = agent_get_or_create(slug="concierge")
    coach, _ = agent_get_or_create(slug="coach")
    thread, turns = locomo_thread(agent=concierge, sample=0, user_id="u-caroline", external_id="t-caroline")
    first = locomo_suggestions(agent=concierge, thread=thread, by_turn=turns, sample=0, limit=45)
    other, other_turns = locomo_thread(agent=coach, sample=1, user_id="u-jon", external_id="t-jon")
    second = locomo_suggestions(agent=coach, thread=other, by_turn=other_turns, sample=1, limit=25)
    target = second[0]
    quoted = target.evidence.get().entry
    rival = item_write(
        agent=coach,
        kind="fact",
        subject=target.subject,
        attribute=target.attribute,
        value="something else entirely",
        trust="tool",
        user_id=target.user_id,
        confidence=0.5,
        evidence=[{"entry_id": quoted.id, "quote": quote_of(quoted.text, 5)}],
    )
    twin = item_write(
        agent=concierge,
        kind="fact",
        subject=first[1].subject,
        attribute=first[1].attribute,
        value=first[1].value.upper() + ".",
        trust="model",
        user_id=first[1].user_id,
        confidence=0.7,
    )
    return {
        "coach": coach.pk,
        "conflict": (target.pk, rival.pk),
        "twin": (first[1].pk, twin.pk),
        "total": len(first) + len(second) + 2,
    }


def test_the_queue_filters_pages_decides_a_conflict_and_undoes_in_a_browser(
    django_db_setup: Any, live_server: Any, transactional_db: Any, chromium: Callable[[], Any]
) -> None:
    seeded = _seed_queue()
    staff_user("rita", role="reviewer")
    kept, rival = seeded["conflict"]
    queue = f"{live_server.url}/admin/memoryapp/memoryitem/review/"
    with chromium() as browser:
        page = log_in(browser, live_server, "rita")
        page.goto(queue)
        page.wait_for_selector(".rq-card")
        expect(page.locator("#rq-left")).to_have_text(str(seeded["total"]))
        shoot(page, "review-queue")

        # the Filter button with the script on: only the coach's suggestions
        page.select_option("select[name=agent]", str(seeded["coach"]))
        page.click(".rq-filters button[type=submit]")
        page.wait_for_url(f"**agent={seeded['coach']}**")
        expect(page.locator(".rq-agent").first).to_have_text("coach")
        expect(page.locator(".rq-group")).to_have_count(1)

        # Enter in the person box with the script on: a person nobody has, then u-jon
        page.fill("input[name=user_id]", "u-nobody")
        page.press("input[name=user_id]", "Enter")
        page.wait_for_url("**user_id=u-nobody**")
        expect(page.locator(".rq-empty")).to_contain_text("under these filters")
        page.fill("input[name=user_id]", "u-jon")
        page.press("input[name=user_id]", "Enter")
        page.wait_for_url("**user_id=u-jon**")
        expect(page.locator(".rq-person").first).to_have_text("u-jon")

        # paging: the whole queue, next page (50 a page; without the LoCoMo data beside the
        # project, the stand-in conversation gives one page, and then there is no next link)
        page.goto(queue)
        if seeded["total"] > QUEUE_PAGE:
            page.click("a[rel=next] >> nth=0")
            page.wait_for_url("**after=**")
            expect(page.locator("#rq-range")).to_contain_text("51\u2013")
            shoot(page, "review-queue-page-2")
        else:
            expect(page.locator("a[rel=next]")).to_have_count(0)

        # a conflict: choose the second value from the keyboard, keep it; then undo with u
        page.goto(f"{queue}?user_id=u-jon")
        card = page.locator(f"#card-{kept}")
        expect(card).to_have_class(has_class("rq-conflict"))
        card.locator(".rq-slot").click()
        shoot(page, "review-queue-conflict")
        waiting = int(page.locator("#rq-left").inner_text())
        page.keyboard.press("2")
        expect(card.locator(".rq-value")).to_have_value("something else entirely")
        page.keyboard.press("a")
        expect(card).to_have_class(has_class("rq-done"))
        expect(page.locator("#rq-left")).to_have_text(str(waiting - 2))
        expect(page.locator("#rq-flash")).to_contain_text("other value rejected")
        expect(page.locator("#rq-undo-button")).to_be_enabled()
        page.keyboard.press("u")
        expect(card).not_to_have_class(has_class("rq-done"))
        expect(page.locator("#rq-left")).to_have_text(str(waiting))
        expect(page.locator("#rq-flash")).to_contain_text("Undone: 2 items")

        # then decide it for good: keep the first value
        card.locator(".rq-slot").click()
        page.keyboard.press("1")
        page.keyboard.press("a")
        expect(card).to_have_class(has_class("rq-done"))
        shoot(page, "review-queue-after-decisions")

        dark = log_in(browser, live_server, "rita", dark=True)
        dark.goto(queue)
        dark.wait_for_selector(".rq-choice")
        shoot(dark, "review-queue-dark")

    rows = {i.pk: i for i in MemoryItem.objects.filter(pk__in=[kept, rival])}
    assert (rows[kept].status, rows[rival].status) == ("active", "rejected")
    outcomes = sorted(AuditRecord.objects.filter(action="item.reviewed").values_list("outcome", flat=True))
    assert outcomes == ["approved", "approved", "rejected", "rejected", "undone", "undone"]
    assert ItemReview.objects.filter(undone_at__isnull=False).count() == 2


def test_the_item_page_approves_with_an_edit_and_rejects_with_a_reason_in_a_browser(
    django_db_setup: Any, live_server: Any, transactional_db: Any, chromium: Callable[[], Any]
) -> None:
    concierge, _ = agent_get_or_create(slug="concierge")
    thread, turns = locomo_thread(agent=concierge, sample=0, user_id="u-caroline", sessions=4)
    items = locomo_suggestions(agent=concierge, thread=thread, by_turn=turns, limit=3)
    edited, rejected = items[0], items[1]
    suggested_value = edited.value
    staff_user("rita", role="reviewer")
    moment = timezone.now()
    with chromium() as browser:
        page = log_in(browser, live_server, "rita")
        page.goto(f"{live_server.url}/admin/memoryapp/memoryitem/{edited.pk}/change/")
        expect(page.locator("#ip-state")).to_have_text("Suggested")
        expect(page.locator(".rq-src mark").first).to_be_visible()
        shoot(page, "item-page-suggested")
        page.fill("#ip-decide textarea[name=value]", edited.value + " (checked)")
        page.click("#ip-decide button[value=approve]")
        expect(page.locator("#ip-state")).to_have_text("Active")
        expect(page.locator("ul.messagelist")).to_contain_text("Approved with the edited value.")
        expect(page.locator("#ip-steps del")).to_have_text(edited.value)
        shoot(page, "item-page-approved-edited")

        page.goto(f"{live_server.url}/admin/memoryapp/memoryitem/{rejected.pk}/change/")
        page.fill("#ip-decide input[name=reason]", "not what she said")
        page.click("#ip-decide button[value=reject]")
        expect(page.locator("#ip-state")).to_have_text("Rejected")
        expect(page.locator("#ip-reason")).to_contain_text("not what she said")
        shoot(page, "item-page-rejected")
        dark = log_in(browser, live_server, "rita", dark=True)
        dark.goto(f"{live_server.url}/admin/memoryapp/memoryitem/{edited.pk}/change/")
        shoot(dark, "item-page-dark")

        stamp = (moment - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S")
        later = (timezone.now() + timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%S")
        page.goto(
            f"{live_server.url}/admin/memoryapp/memoryitem/known/?agent={concierge.pk}&user_id=u-caroline"
            f"&at={later}&compare={stamp}"
        )
        expect(page.locator("#known-changes")).to_be_visible()
        expect(page.locator("tr.kd-added")).to_have_count(1)
        shoot(page, "known-compare")

    edited.refresh_from_db()
    rejected.refresh_from_db()
    assert (edited.status, edited.value) == ("active", suggested_value + " (checked)")
    assert rejected.status == "rejected"
    assert ItemReview.objects.get(item=edited).value_before == suggested_value


def _seed_overview() -> None:
    """A month of activity: entries and items per day for three agents, decisions, jobs, removals."""
    now = timezone.now()
    agents = [agent_get_or_create(slug=slug)[0] for slug in ("concierge", "coach", "travel-desk")]
    for index, agent in enumerate(agents):
        thread = thread_create(agent=agent, external_id=f"t-month-{index}", user_id=f"u-{index}")
        specs = [
            {"role": "user", "content": f"day {day} turn {n}", "created_at": now - timedelta(days=day, minutes=n)}
            for day in range(30)
            for n in range((day * 7 + index * 5) % 13 + index * 3)
        ]
        entries_add(thread=thread, entries=specs[:1000])
        for day in range(0, 30, 2):
            item = item_write(
                agent=agent,
                kind="fact",
                subject="someone",
                attribute=f"fact {day}",
                value=f"value {day}",
                trust="system" if day % 4 else "model",
                user_id=f"u-{index}",
            )
            MemoryItem.objects.filter(pk=item.pk).update(recorded_at=now - timedelta(days=day))
    for n, outcome in enumerate(["approved"] * 9 + ["rejected"] * 4 + ["approved_edited"] * 2 + ["undone"]):
        audit_append(action="item.reviewed", actor="staff:rita", subject=f"mem_{n}", outcome=outcome)
    for action in ["entry.redact", "entry.redact", "thread.delete", "memory_files.redact", "item.forgotten"]:
        audit_append(action=action, actor="staff:pia")
    for n in range(40):
        kind = ("embedding", "extraction", "compaction", "audit_verify")[n % 4]
        took = (0.4, 6.0, 2.5, 1.2)[n % 4] * (1 + (n % 5) / 2)
        finished = now - timedelta(hours=n * 7)
        status = "failed" if n in (1, 5, 30) else "succeeded"
        run = JobRun.objects.create(
            kind=kind, status=status, started_at=finished - timedelta(seconds=took), finished_at=finished
        )
        JobRun.objects.filter(pk=run.pk).update(created_at=finished - timedelta(seconds=took))


def test_the_index_shows_each_role_its_overview_in_a_browser(
    django_db_setup: Any, live_server: Any, transactional_db: Any, chromium: Callable[[], Any]
) -> None:
    cache.clear()
    _seed_queue()
    _seed_overview()
    for name, role in (("rita", "reviewer"), ("pia", "privacy"), ("otto", "operator")):
        staff_user(name, role=role)
    entries_today = Entry.objects.filter(created_at__date=timezone.now().date(), agent__slug="concierge").count()
    with chromium() as browser:
        reviewer = log_in(browser, live_server, "rita")
        expect(reviewer.locator("#ov-review")).to_be_visible()
        expect(reviewer.locator("#ov-operator")).to_have_count(0)
        expect(reviewer.locator("#ov-backlog")).to_contain_text("suggestions waiting")
        shoot(reviewer, "index-reviewer")
        reviewer.click("#ov-backlog")
        reviewer.wait_for_selector(".rq-card")

        officer = log_in(browser, live_server, "pia")
        expect(officer.locator("#ov-privacy")).to_be_visible()
        expect(officer.locator("#ov-review")).to_have_count(0)
        expect(officer.locator("#ov-audit")).to_contain_text("link and hash correctly")
        expect(officer.locator("#ov-removals")).to_contain_text("entries redacted")
        shoot(officer, "index-privacy-officer")

        # Vectors recorded as another model's than the configured one: the operator is told.
        space_record(embedder="local", model="multilingual-e5-small-q4")
        operator = log_in(browser, live_server, "otto")
        expect(operator.locator("#ov-operator")).to_be_visible()
        expect(operator.locator("#ov-vector-space")).to_contain_text("run `python manage.py reembed`")
        expect(operator.locator("#ov-vector-space")).to_have_class(has_class("ov-bad"))
        expect(operator.locator("#ov-privacy")).to_have_count(0)
        expect(operator.locator("svg.ch-svg")).to_have_count(4)
        expect(operator.locator("#ov-health")).to_contain_text("answers")
        expect(operator.locator("#ov-failures")).to_contain_text("failed in the last 24 hours")
        today = timezone.now().date().isoformat()
        expect(operator.locator(f"rect:has(title:text-is('{today} · concierge: {entries_today} entries'))"))
        shoot(operator, "index-operator")
        operator.locator("#ov-operator").scroll_into_view_if_needed()
        operator.evaluate("document.querySelector('.ov-charts').scrollIntoView()")
        shoot(operator, "index-operator-charts")
        dark = log_in(browser, live_server, "otto", dark=True)
        dark.evaluate("document.querySelector('.ov-charts').scrollIntoView()")
        shoot(dark, "index-operator-charts-dark")

"""The item's page as a decision page (Django test client): value, quotes in their turns once,
approve / edit / reject / undo / forget through the services, the history in words."""

from __future__ import annotations

import re

import pytest

from governance.models import AuditRecord
from memoryapp.items.services import item_write
from memoryapp.models import ItemReview, MemoryItem
from memoryapp.threads.services import entry_add, thread_create
from tests.kit.api import Caller
from tests.kit.review_staff import food_talk, staff, suggest

pytestmark = pytest.mark.django_db


def page_url(item: MemoryItem) -> str:
    return f"/admin/memoryapp/memoryitem/{item.pk}/change/"


def decide_url(item: MemoryItem) -> str:
    return f"/admin/memoryapp/memoryitem/{item.pk}/decide/"


def test_the_page_shows_each_quote_once_in_its_turns_and_offers_no_save_button(alice: Caller) -> None:
    thread, answer = food_talk(alice.agent)
    item = item_write(
        agent=alice.agent,
        kind="preference",
        subject="Ana",
        attribute="diet",
        value="vegetarian",
        trust="model",
        user_id="u-ana",
        evidence=[
            {"entry_id": answer.id, "quote": "I am vegetarian now"},
            {"entry_id": answer.id, "quote": "I stopped eating meat"},
        ],
    )
    page = staff("reviewer").get(page_url(item)).content.decode()
    assert page.count("<mark>") == 2  # both quotes marked, in the one entry shown once
    assert page.count("I stopped eating meat") == 1
    assert "Anything I should know about your food?" in page  # the turn before
    assert "Noted, vegetarian recipes from now on." in page  # the turn after
    assert f"/admin/memoryapp/thread/{thread.pk}/change/#{answer.id}" in page
    assert 'name="_save"' not in page and 'name="_continue"' not in page
    assert 'value="approve"' in page and 'value="reject"' in page
    posted = staff("reviewer", name="rita2").post(page_url(item), {"status": "active", "value": "x"})
    assert posted.status_code == 405  # the page has no form to save: decisions post to decide/
    item.refresh_from_db()
    assert (item.status, item.value) == ("suggested", "vegetarian")


def test_approving_with_an_edit_keeps_the_value_before_in_the_items_history(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    item = suggest(alice.agent, answer)
    client = staff("reviewer", name="rita")
    done = client.post(decide_url(item), {"action": "approve", "item": item.pk, "value": "vegetarian, eats fish"})
    assert done.status_code == 302 and done["Location"] == page_url(item)
    item.refresh_from_db()
    assert (item.status, item.value) == ("active", "vegetarian, eats fish")
    page = client.get(page_url(item)).content.decode()
    assert re.search(r"value edited: <del>vegetarian</del> → <ins>vegetarian, eats fish</ins>", page)
    assert 'id="ip-state">Active<' in page and "by staff:rita" in page
    assert AuditRecord.objects.get(subject=item.pk, action="item.reviewed").outcome == "approved_edited"


def test_a_rejection_reason_is_shown_as_text_not_inside_json(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    item = suggest(alice.agent, answer)
    client = staff("reviewer", name="rita")
    client.post(decide_url(item), {"action": "reject", "item": item.pk, "reason": "said about her sister"})
    page = client.get(page_url(item)).content.decode()
    assert "Rejected by staff:rita" in page and "<q>said about her sister</q>" in page
    assert "rejected_because" not in page  # the metadata key is not printed as raw JSON


def test_a_reject_without_a_reason_changes_nothing_and_says_why(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    item = suggest(alice.agent, answer)
    followed = staff("reviewer").post(decide_url(item), {"action": "reject", "item": item.pk}, follow=True)
    assert "Say why it is rejected." in followed.content.decode()
    item.refresh_from_db()
    assert item.status == "suggested"


def test_the_reviewer_undoes_their_decision_from_the_page(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    item = suggest(alice.agent, answer)
    client = staff("reviewer", name="rita")
    client.post(decide_url(item), {"action": "approve", "item": item.pk})
    page = client.get(page_url(item)).content.decode()
    decision = ItemReview.objects.get(item=item).decision
    assert "Undo your approval" in page and f'name="decision" value="{decision}"' in page
    assert "Undo your approval" not in staff("reviewer", name="otto").get(page_url(item)).content.decode()
    client.post(decide_url(item), {"action": "undo", "decision": decision})
    item.refresh_from_db()
    assert item.status == "suggested"
    assert "<b>undone</b> by staff:rita" in client.get(page_url(item)).content.decode()


def test_after_forget_the_page_and_the_list_say_forgotten(alice: Caller) -> None:
    item = item_write(agent=alice.agent, kind="fact", subject="Ana", attribute="city", value="Porto", trust="system")
    # Letting memory go is the privacy officers' (memoryapp.forget_memoryitem), not the reviewers'.
    assert staff("reviewer").get(f"/admin/memoryapp/memoryitem/{item.pk}/forget/").status_code == 403
    client = staff("privacy")
    assert 'id="ip-forget"' in client.get(page_url(item)).content.decode()
    confirm = client.get(f"/admin/memoryapp/memoryitem/{item.pk}/forget/").content.decode()
    assert "Yes, forget it" in confirm and "the value it replaced does not come back" in confirm
    item.refresh_from_db()
    assert item.expired_at is None  # asking is not doing
    client.post(f"/admin/memoryapp/memoryitem/{item.pk}/forget/")
    item.refresh_from_db()
    assert item.expired_at is not None
    page = client.get(page_url(item)).content.decode()
    assert 'id="ip-state">Forgotten<' in page and "<b>forgotten</b> by" in page
    listing = client.get("/admin/memoryapp/memoryitem/").content.decode()
    row = listing[listing.index(item.pk) :]
    assert '<td class="field-state">forgotten</td>' in row[:2000]
    assert client.get("/admin/memoryapp/memoryitem/", {"forgotten": "yes"}).content.decode().count(item.pk) >= 1


def test_a_privacy_officer_reads_the_page_but_cannot_decide(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    item = suggest(alice.agent, answer)
    officer = staff("privacy")
    page = officer.get(page_url(item))
    assert page.status_code == 200
    text = page.content.decode()
    assert 'value="approve"' not in text and "approving or rejecting it is for reviewers" in text
    assert officer.post(decide_url(item), {"action": "approve", "item": item.pk}).status_code == 403
    assert officer.post(page_url(item), {"status": "active"}).status_code == 403
    assert staff("operator").get(page_url(item)).status_code == 403
    item.refresh_from_db()
    assert item.status == "suggested" and item.expired_at is None


def test_a_decision_posted_for_another_item_is_refused(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    item = suggest(alice.agent, answer)
    other = suggest(alice.agent, answer, value="Porto", attribute="city")
    staff("reviewer").post(decide_url(item), {"action": "approve", "item": other.pk})
    assert set(MemoryItem.objects.values_list("status", flat=True)) == {"suggested"}


def test_a_thread_scoped_item_links_its_thread_and_a_missing_item_is_404(alice: Caller) -> None:
    thread = thread_create(agent=alice.agent, external_id="t-trip", user_id="u-ana")
    said = entry_add(thread=thread, role="user", content="This trip I only eat fish.")
    item = suggest(alice.agent, said, value="pescatarian", thread_id="t-trip", quote="I only eat fish")
    client = staff("reviewer")
    page = client.get(page_url(item)).content.decode()
    assert f'href="/admin/memoryapp/thread/{thread.pk}/change/">t-trip</a>' in page
    assert client.get("/admin/memoryapp/memoryitem/mem_missing/change/").status_code == 404


def test_the_uses_of_an_item_used_hundreds_of_times_page_back_to_the_oldest(alice: Caller) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from memoryapp.models import AccessLog
    from memoryapp.search.access_log import access_log_record

    item = item_write(
        agent=alice.agent, kind="fact", subject="Ana", attribute="sister", value="Lucinda", trust="system"
    )
    thread = thread_create(agent=alice.agent, external_id="t-uses", user_id="u-ana")
    start = timezone.now() - timedelta(days=1)
    for n in range(120):  # two uses share each moment: the pages must not lose or repeat one of them
        access_log_record(
            agent_id=alice.agent.pk,
            thread=thread,
            source="context",
            item_ids=[item.pk],
            at=start + timedelta(minutes=n // 2),
        )
    client = staff("reviewer")
    newest = list(
        AccessLog.objects.filter(item_ids__contains=[item.pk]).order_by("-at", "-pk").values_list("pk", flat=True)
    )

    seen: list[int] = []
    url = page_url(item)
    for _ in range(4):
        page = client.get(url).content.decode()
        section = page.split('id="item-uses"')[1].split("</section>")[0]
        seen += [int(pk) for pk in re.findall(r'data-use="(\d+)"', section)]
        older = re.search(r'href="\?uses_before=(\d+)#item-uses" rel="next"', section)
        if older is None:
            break
        url = f"{page_url(item)}?uses_before={older.group(1)}"
    assert seen == newest  # 50, 50, 20: each once, newest first
    assert "sent to the agent 120 times" in client.get(page_url(item)).content.decode()
    assert 'rel="first"' in page and 'rel="next"' not in section

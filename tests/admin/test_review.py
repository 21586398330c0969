"""The reviewers' queue and the item admin (Django test client): who may review, what a card shows, decisions audited."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from governance.models import AuditRecord
from memoryapp.admin.items import highlighted, quote_spans
from memoryapp.items.selectors import context_facts
from memoryapp.models import MemoryItem
from tests.kit.admin import staff_client
from tests.kit.factories import EntryFactory, MemoryItemFactory, ThreadFactory

REVIEW_URL = "/admin/memoryapp/memoryitem/review/"


REVIEWER = ("change_memoryitem", "view_memoryitem", "view_entity")


def reviewer_client(username: str = "rita", *, permitted: bool = True) -> Client:
    return staff_client(username=username, permissions=REVIEWER if permitted else ())


def conversation(agent):
    thread = ThreadFactory(agent=agent, external_id="t-ana")
    question = EntryFactory(thread=thread, role="assistant", content="Anything I should know about your food?")
    answer = EntryFactory(thread=thread, content="I stopped eating meat, I am vegetarian now <b>really</b>.")
    reply = EntryFactory(thread=thread, role="assistant", content="Noted, vegetarian recipes from now on.")
    return thread, question, answer, reply


def suggested(agent, entry, value="vegetarian", attribute="diet", quote="I am vegetarian now"):
    return MemoryItemFactory(
        agent=agent,
        kind="preference",
        attribute=attribute,
        value=value,
        trust="model",
        evidence=[{"entry_id": entry.id, "quote": quote}],
    )


def test_the_queue_needs_staff_with_the_reviewer_permission(alice):
    assert Client().get(REVIEW_URL).status_code == 302  # to the login page
    assert reviewer_client("nobody", permitted=False).get(REVIEW_URL).status_code == 403
    assert reviewer_client().get(REVIEW_URL).status_code == 200


def test_a_card_shows_the_slot_trust_and_the_quote_highlighted_between_the_turns_around_it(alice):
    thread, _question, answer, _reply = conversation(alice.agent)
    item = suggested(alice.agent, answer)
    page = reviewer_client().get(REVIEW_URL).content.decode()
    assert f'id="card-{item.pk}"' in page
    assert "<mark>I am vegetarian now</mark>" in page
    assert "&lt;b&gt;really&lt;/b&gt;" in page  # the entry's text is escaped, never rendered as HTML
    assert "Anything I should know about your food?" in page  # the turn before
    assert "Noted, vegetarian recipes from now on." in page  # the turn after
    assert f"/admin/memoryapp/thread/{thread.pk}/change/#{answer.id}" in page
    assert "quotes hold" in page and ">model<" in page and "u-ana" in page


def test_the_queue_shows_only_suggested_items_grouped_by_agent_and_person(alice, bob):
    _, _, answer, _ = conversation(alice.agent)
    waiting = suggested(alice.agent, answer)
    decided = MemoryItemFactory(agent=alice.agent, attribute="city", value="Lisbon", user_id="")
    other = MemoryItemFactory(
        agent=bob.agent, subject="Ben", attribute="city", value="Porto", trust="model", user_id=""
    )
    page = reviewer_client().get(REVIEW_URL).content.decode()
    assert f"card-{waiting.pk}" in page and f"card-{other.pk}" in page
    assert f"card-{decided.pk}" not in page
    filtered = reviewer_client("rita2").get(REVIEW_URL, {"agent": bob.agent.pk}).content.decode()
    assert f"card-{other.pk}" in filtered and f"card-{waiting.pk}" not in filtered


def test_approve_activates_the_item_and_audits_who_and_which(alice):
    _, _, answer, _ = conversation(alice.agent)
    item = suggested(alice.agent, answer)
    response = reviewer_client().post(
        REVIEW_URL, {"action": "approve", "item": item.pk, "value": "vegetarian"}, HTTP_X_REQUESTED_WITH="fetch"
    )
    assert response.status_code == 200 and response.json()["ok"] is True
    item.refresh_from_db()
    assert item.status == "active"
    record = AuditRecord.objects.get(action="item.reviewed", subject=item.pk)
    assert (record.actor, record.outcome) == ("staff:rita", "approved")
    assert [f.text for f in context_facts(agent=alice.agent, user_id="u-ana")] == ["Ana diet: vegetarian"]


def test_an_edited_value_is_saved_then_approved(alice):
    _, _, answer, _ = conversation(alice.agent)
    item = suggested(alice.agent, answer)
    response = reviewer_client().post(
        REVIEW_URL, {"action": "approve", "item": item.pk, "value": "vegetarian (no meat)"}
    )
    assert response.status_code == 302
    item.refresh_from_db()
    assert (item.status, item.value) == ("active", "vegetarian (no meat)")
    assert AuditRecord.objects.get(action="item.reviewed", subject=item.pk).outcome == "approved_edited"


def test_reject_needs_a_reason_keeps_the_item_out_of_contexts_and_audits_without_the_reason(alice):
    _, _, answer, _ = conversation(alice.agent)
    item = suggested(alice.agent, answer)
    client = reviewer_client()
    refused = client.post(REVIEW_URL, {"action": "reject", "item": item.pk}, HTTP_X_REQUESTED_WITH="fetch")
    assert refused.status_code == 400 and refused.json()["field"] == "reason"
    item.refresh_from_db()
    assert item.status == "suggested"
    client.post(REVIEW_URL, {"action": "reject", "item": item.pk, "reason": "a guess, not said"})
    item.refresh_from_db()
    assert (item.status, item.metadata["rejected_because"]) == ("rejected", "a guess, not said")
    record = AuditRecord.objects.get(action="item.reviewed", subject=item.pk)
    assert record.outcome == "rejected" and "guess" not in str(record.details)
    assert context_facts(agent=alice.agent, user_id="u-ana") == []


def test_a_decided_item_cannot_be_decided_again(alice):
    _, _, answer, _ = conversation(alice.agent)
    item = suggested(alice.agent, answer)
    client = reviewer_client()
    client.post(REVIEW_URL, {"action": "approve", "item": item.pk, "value": item.value})
    again = client.post(REVIEW_URL, {"action": "reject", "item": item.pk, "reason": "x"}, HTTP_X_REQUESTED_WITH="fetch")
    assert again.status_code == 409
    item.refresh_from_db()
    assert item.status == "active"
    assert AuditRecord.objects.filter(action="item.reviewed", subject=item.pk).count() == 1


def test_bulk_approve_and_reject_of_a_selection(alice):
    _, _, answer, _ = conversation(alice.agent)
    items = [suggested(alice.agent, answer, value=f"v{n}", attribute=f"a{n}") for n in range(4)]
    client = reviewer_client()
    approved = client.post(
        REVIEW_URL, {"action": "bulk_approve", "selected": [items[0].pk, items[1].pk]}, HTTP_X_REQUESTED_WITH="fetch"
    )
    assert approved.json()["done"] == 2
    no_reason = client.post(
        REVIEW_URL, {"action": "bulk_reject", "selected": [items[2].pk]}, HTTP_X_REQUESTED_WITH="fetch"
    )
    assert no_reason.status_code == 400
    client.post(REVIEW_URL, {"action": "bulk_reject", "selected": [items[2].pk, items[3].pk], "reason": "duplicate"})
    statuses = [MemoryItem.objects.get(pk=i.pk).status for i in items]
    assert statuses == ["active", "active", "rejected", "rejected"]
    outcomes = sorted(AuditRecord.objects.filter(action="item.reviewed").values_list("outcome", flat=True))
    assert outcomes == ["approved", "approved", "rejected", "rejected"]


def test_approving_a_newer_value_supersedes_the_current_one(alice):
    _, _, answer, _ = conversation(alice.agent)
    held = MemoryItemFactory(agent=alice.agent, kind="preference", attribute="diet", value="omnivore")
    item = suggested(alice.agent, answer)
    page = reviewer_client().get(REVIEW_URL).content.decode()
    assert "replaces <q>omnivore</q>" in page
    reviewer_client("rita2").post(REVIEW_URL, {"action": "approve", "item": item.pk, "value": item.value})
    held.refresh_from_db()
    assert held.status == "superseded"
    assert [f.text for f in context_facts(agent=alice.agent, user_id="u-ana")] == [
        "Ana diet: vegetarian (previously: omnivore)"
    ]


def test_what_did_the_agent_know_shows_the_items_that_held_then(alice):
    start = timezone.now() - timedelta(days=10)
    from freezegun import freeze_time

    with freeze_time(start):
        MemoryItemFactory(agent=alice.agent, attribute="city", value="Lisbon")
    with freeze_time(start + timedelta(days=5)):
        MemoryItemFactory(agent=alice.agent, attribute="city", value="Porto")
    with freeze_time(start + timedelta(days=8)):  # told late: Ana had been in Faro since day 1
        MemoryItemFactory(agent=alice.agent, attribute="city", value="Faro", valid_from=start + timedelta(days=1))
    client = reviewer_client()
    at = (start + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%S")
    hindsight = client.get(
        "/admin/memoryapp/memoryitem/known/", {"agent": alice.agent.pk, "user_id": "u-ana", "at": at, "world": "1"}
    ).content.decode()
    assert "Ana city: Faro" in hindsight
    page = client.get("/admin/memoryapp/memoryitem/known/", {"agent": alice.agent.pk, "user_id": "u-ana", "at": at})
    text = page.content.decode()
    assert page.status_code == 200
    assert "Ana city: Lisbon" in text and "Porto" not in text and "Faro" not in text
    now_text = client.get(
        "/admin/memoryapp/memoryitem/known/",
        {"agent": alice.agent.pk, "user_id": "u-ana", "at": timezone.now().strftime("%Y-%m-%dT%H:%M:%S")},
    ).content.decode()
    assert "Ana city: Porto (previously: Faro)" in now_text


def test_the_item_page_shows_the_slot_history_and_the_list_filters(alice):
    first = MemoryItemFactory(agent=alice.agent, attribute="city", value="Lisbon", user_id="")
    MemoryItemFactory(agent=alice.agent, attribute="city", value="Porto", user_id="")
    client = reviewer_client()
    page = client.get(f"/admin/memoryapp/memoryitem/{first.pk}/change/").content.decode()
    assert "slot history" in page.lower() and "Porto" in page and "superseded" in page
    listing = client.get("/admin/memoryapp/memoryitem/", {"status__exact": "active", "trust__exact": "system"})
    assert listing.status_code == 200 and "Porto" in listing.content.decode()
    assert client.get("/admin/memoryapp/memoryitem/", {"user_id": "u-x"}).status_code == 200
    assert client.get("/admin/memoryapp/entity/").status_code == 200


def test_the_item_list_actions_go_through_the_services(alice):
    _, _, answer, _ = conversation(alice.agent)
    item = suggested(alice.agent, answer)
    client = reviewer_client()
    client.post("/admin/memoryapp/memoryitem/", {"action": "approve_selected", "_selected_action": [item.pk]})
    item.refresh_from_db()
    assert item.status == "active"
    assert AuditRecord.objects.filter(action="item.reviewed", subject=item.pk, actor="staff:rita").exists()


@pytest.mark.parametrize(
    ("text", "quotes", "expected"),
    [
        ("I am  vegetarian now", ["am vegetarian"], [(2, 16)]),
        ("a b a b", ["a b"], [(0, 3), (4, 7)]),
        ("abcdef", ["abc", "cde"], [(0, 5)]),
        ("nothing", ["missing"], []),
    ],
)
def test_quotes_are_found_in_their_entry_whitespace_aside(text, quotes, expected):
    assert quote_spans(text, quotes) == expected


def test_highlighting_escapes_the_entry_and_cuts_long_text_around_the_quote():
    text = "<script>x</script> " + "word " * 200 + "the quote here " + "tail " * 200
    html = str(highlighted(text, ["the quote here"], window=40))
    assert "<mark>the quote here</mark>" in html
    assert "<script>" not in html
    assert html.startswith("… ") and html.endswith(" …")

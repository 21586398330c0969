"""The review queue at scale (Django test client): paging, order, filters, conflicts and
near-duplicates decided as one, counters in the answers, undo, query counts pinned."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from governance.models import AuditRecord
from memoryapp.items.selectors import context_facts
from memoryapp.items.services import item_write, near_duplicate, slot_clusters, value_key
from memoryapp.models import Evidence, ItemReview, MemoryItem
from memoryapp.threads.services import entry_add, thread_create
from tests.kit.api import Caller
from tests.kit.review_staff import REVIEW_URL, food_talk, staff, suggest

pytestmark = pytest.mark.django_db

CARD = re.compile(r'<article class="rq-card[^"]*" id="card-([^"]+)"')


def _cards(page: str) -> list[str]:
    return CARD.findall(page)


def _numbered(alice: Caller, n: int, *, user_id: str = "u-ana") -> list[MemoryItem]:
    """n suggestions, each in a slot of its own, recorded one second apart (oldest first)."""
    start = timezone.now() - timedelta(hours=2)
    items = [
        MemoryItem(
            agent=alice.agent,
            user_id=user_id,
            kind="fact",
            subject="Ana",
            attribute=f"fact {i:03d}",
            value=f"value {i}",
            trust="model",
            status="suggested",
            confidence=0.6,
            valid_from=start,
            recorded_at=start + timedelta(seconds=i),
        )
        for i in range(n)
    ]
    return MemoryItem.objects.bulk_create(items)


def _next_link(page: str) -> str | None:
    found = re.search(r'<a href="\?([^"]*)" rel="next"', page)
    return found.group(1).replace("&amp;", "&") if found else None


def _previous_link(page: str) -> str | None:
    found = re.search(r'<a href="\?([^"]*)" rel="prev"', page)
    return found.group(1).replace("&amp;", "&") if found else None


def test_the_queue_pages_oldest_first_fifty_at_a_time_forward_and_back(alice: Caller) -> None:
    items = _numbered(alice, 120)
    client = staff("reviewer")
    first = client.get(REVIEW_URL).content.decode()
    assert _cards(first) == [i.pk for i in items[:50]]
    assert "120</b> waiting" in first and "1\u201350" in first and _previous_link(first) is None
    second = client.get(f"{REVIEW_URL}?{_next_link(first)}").content.decode()
    assert _cards(second) == [i.pk for i in items[50:100]] and "51\u2013100" in second
    third = client.get(f"{REVIEW_URL}?{_next_link(second)}").content.decode()
    assert _cards(third) == [i.pk for i in items[100:]] and _next_link(third) is None
    back = client.get(f"{REVIEW_URL}?{_previous_link(third)}").content.decode()
    assert _cards(back) == [i.pk for i in items[50:100]]
    newest = client.get(REVIEW_URL, {"order": "newest"}).content.decode()
    assert _cards(newest) == [i.pk for i in reversed(items[70:])]


def test_a_page_stays_put_when_items_before_it_are_decided(alice: Caller) -> None:
    items = _numbered(alice, 60)
    client = staff("reviewer")
    first = client.get(REVIEW_URL).content.decode()
    for item in items[:10]:  # decided while the reviewer reads page one
        client.post(REVIEW_URL, {"action": "approve", "item": item.pk})
    second = client.get(f"{REVIEW_URL}?{_next_link(first)}").content.decode()
    assert _cards(second) == [i.pk for i in items[50:]]  # keyset: no item skipped, none twice


def test_filters_narrow_the_queue_and_keep_to_the_pages(alice: Caller, bob: Caller) -> None:
    _numbered(alice, 3, user_id="u-ana")
    bens = _numbered(alice, 2, user_id="u-ben")
    bobs = _numbered(bob, 2, user_id="u-ana")
    client = staff("reviewer")
    assert _cards(client.get(REVIEW_URL, {"user_id": "u-ben"}).content.decode()) == [i.pk for i in bens]
    by_agent = client.get(REVIEW_URL, {"agent": bob.agent.pk}).content.decode()
    assert _cards(by_agent) == [i.pk for i in bobs] and "2</b> waiting" in by_agent
    nothing = client.get(REVIEW_URL, {"user_id": "u-nobody"}).content.decode()
    assert _cards(nothing) == [] and "Nothing waits for review under these filters" in nothing


def test_a_cursor_changed_by_hand_shows_the_first_page_and_says_so(alice: Caller) -> None:
    items = _numbered(alice, 3)
    page = staff("reviewer").get(REVIEW_URL, {"after": "not-a-cursor"})
    assert page.status_code == 200
    text = page.content.decode()
    assert _cards(text) == [i.pk for i in items] and "Showing the first page" in text


# --- conflicts and near-duplicates ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        ("Peanuts (severe).", "peanuts severe", True),  # case and punctuation
        ("short answers, bullet points", "bullet points, short answers", True),  # word order
        ("vegetarian", "vegeterian", True),  # a typo apart
        ("10 km", "100 km", False),  # numbers differ: two values
        ("born 1985", "born 1986", False),
        ("Porto", "Lisbon", False),
        ("Porto", "Porta", False),  # short words a letter apart stay apart (ratio 0.8)
    ],
)
def test_near_duplicates_are_the_same_value_spelled_or_ordered_otherwise(a: str, b: str, same: bool) -> None:
    assert near_duplicate(a, b) is same


def test_a_value_key_drops_case_punctuation_and_spacing_only() -> None:
    assert value_key("  Peanuts (SEVERE).") == value_key("peanuts severe") == "peanuts severe"
    assert value_key("Ünïcode  \uff46\uff55\uff4c\uff4c") == "ünïcode full"  # NFKC: full-width letters are letters


def test_suggestions_of_one_slot_cluster_into_values_best_source_first(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    vegan = suggest(alice.agent, answer, value="vegan")
    veg = suggest(alice.agent, answer, value="Vegetarian.")
    veg2 = suggest(alice.agent, answer, value="vegetarian", trust="tool")
    clusters = slot_clusters([vegan, veg, veg2])
    assert [[i.pk for i in c] for c in clusters] == [[vegan.pk], [veg.pk, veg2.pk]]


def test_conflicting_suggestions_of_one_slot_are_shown_together_with_a_choice(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    vegan = suggest(alice.agent, answer, value="vegan")
    vegetarian = suggest(alice.agent, answer, value="vegetarian")
    other = suggest(alice.agent, answer, value="Porto", attribute="city", quote="I stopped eating meat")
    page = staff("reviewer").get(REVIEW_URL).content.decode()
    assert _cards(page) == [vegan.pk, other.pk]  # the two diet suggestions are one card
    card = page[page.index(f'id="card-{vegan.pk}"') : page.index(f'id="card-{other.pk}"')]
    assert "rq-choice rq-conflict" in page and "conflict · 2 values, choose one" in card
    assert f'name="keep" value="{vegan.pk}"' in card and f'name="keep" value="{vegetarian.pk}"' in card
    assert f'name="items" value="{vegan.pk},{vegetarian.pk}"' in card


def test_choosing_one_value_approves_it_and_rejects_the_others_in_one_decision(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    vegan = suggest(alice.agent, answer, value="vegan")
    vegetarian = suggest(alice.agent, answer, value="vegetarian")
    again = suggest(alice.agent, answer, value="Vegetarian!")
    response = staff("reviewer").post(
        REVIEW_URL,
        {"action": "choose", "keep": vegetarian.pk, "items": f"{vegan.pk},{vegetarian.pk},{again.pk}"},
        HTTP_X_REQUESTED_WITH="fetch",
    )
    body = response.json()
    assert response.status_code == 200 and body["ok"] and body["kept"] == vegetarian.pk
    assert body["waiting"] == 0 and "1 duplicate rejected; 1 other value rejected" in body["message"]
    rows = {i.pk: i for i in MemoryItem.objects.all()}
    assert rows[vegetarian.pk].status == "active"
    assert (rows[again.pk].status, rows[again.pk].metadata["rejected_because"]) == (
        "rejected",
        f"duplicate of {vegetarian.pk}",
    )
    assert rows[vegan.pk].metadata["rejected_because"] == f"another value chosen ({vegetarian.pk})"
    decisions = set(ItemReview.objects.values_list("decision", flat=True))
    assert decisions == {body["decision"]}
    outcomes = sorted(AuditRecord.objects.filter(action="item.reviewed").values_list("outcome", flat=True))
    assert outcomes == ["approved", "rejected", "rejected"]
    assert [f.text for f in context_facts(agent=alice.agent, user_id="u-ana")] == ["Ana diet: vegetarian"]


def test_near_duplicates_are_grouped_with_one_decision_for_the_group(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    first = suggest(alice.agent, answer, value="vegetarian")
    second = suggest(alice.agent, answer, value="Vegetarian.")
    page = staff("reviewer").get(REVIEW_URL).content.decode()
    assert _cards(page) == [first.pk] and f"/admin/memoryapp/memoryitem/{second.pk}/change/" in page
    assert "rq-choice rq-duplicates" in page and "2 near-duplicates · one decision" in page
    assert "Approve one, reject the duplicates" in page


def test_choosing_across_slots_is_refused_and_changes_nothing(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    diet = suggest(alice.agent, answer)
    city = suggest(alice.agent, answer, value="Porto", attribute="city")
    response = staff("reviewer").post(
        REVIEW_URL,
        {"action": "choose", "keep": diet.pk, "items": f"{diet.pk},{city.pk}"},
        HTTP_X_REQUESTED_WITH="fetch",
    )
    assert response.status_code == 400 and response.json()["field"] == "items"
    assert set(MemoryItem.objects.values_list("status", flat=True)) == {"suggested"}


def test_a_slots_suggestions_from_a_later_page_come_along(alice: Caller) -> None:
    items = _numbered(alice, 60)
    late = MemoryItem.objects.create(
        agent=alice.agent,
        user_id="u-ana",
        kind="fact",
        subject="Ana",
        attribute=items[0].attribute,
        value="another value",
        trust="model",
        status="suggested",
        valid_from=items[0].valid_from,
        recorded_at=timezone.now(),
    )
    page = staff("reviewer").get(REVIEW_URL).content.decode()
    assert f'name="keep" value="{late.pk}"' in page and "+1 of the same slot<" in page


# --- counters and undo ---------------------------------------------------------------------------


def test_every_answer_carries_the_count_still_waiting_under_the_pages_filters(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    items = [suggest(alice.agent, answer, value=f"v{n}", attribute=f"a{n}") for n in range(3)]
    suggest(alice.agent, answer, value="elsewhere", user_id="u-ben")
    client = staff("reviewer")
    body = client.post(
        REVIEW_URL,
        {"action": "approve", "item": items[0].pk, "query": "user_id=u-ana"},
        HTTP_X_REQUESTED_WITH="fetch",
    ).json()
    assert body["waiting"] == 2  # u-ana's; u-ben's is not under the filter
    body = client.post(
        REVIEW_URL, {"action": "undo", "decision": body["decision"], "query": ""}, HTTP_X_REQUESTED_WITH="fetch"
    ).json()
    assert body["waiting"] == 4 and body["items"] == [{"id": items[0].pk, "status": "suggested", "value": "v0"}]


def test_undo_of_an_edited_approval_restores_the_suggested_value_and_the_slot(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    held = item_write(
        agent=alice.agent,
        kind="preference",
        subject="Ana",
        attribute="diet",
        value="omnivore",
        trust="system",
        user_id="u-ana",
    )
    item = suggest(alice.agent, answer)
    client = staff("reviewer")
    decided = client.post(
        REVIEW_URL,
        {"action": "approve", "item": item.pk, "value": "vegetarian, no fish"},
        HTTP_X_REQUESTED_WITH="fetch",
    ).json()
    assert [f.text for f in context_facts(agent=alice.agent, user_id="u-ana")] == [
        "Ana diet: vegetarian, no fish (previously: omnivore)"
    ]
    undone = client.post(REVIEW_URL, {"action": "undo", "decision": decided["decision"]}, HTTP_X_REQUESTED_WITH="fetch")
    assert undone.status_code == 200 and undone.json()["ok"]
    item.refresh_from_db()
    held.refresh_from_db()
    assert (item.status, item.value, item.activated_at) == ("suggested", "vegetarian", None)
    assert "reviewed_by" not in item.metadata and held.status == "active" and held.valid_to is None
    assert [f.text for f in context_facts(agent=alice.agent, user_id="u-ana")] == ["Ana diet: omnivore"]
    steps = list(
        ItemReview.objects.filter(item=item).order_by("at", "id").values_list("action", "value_before", "value_after")
    )
    assert steps == [
        ("approved", "vegetarian", "vegetarian, no fish"),
        ("undone", "vegetarian, no fish", "vegetarian"),
    ]
    audit = list(AuditRecord.objects.filter(subject=item.pk, action="item.reviewed").values_list("outcome", "details"))
    assert audit == [("approved_edited", {}), ("undone", {"undid": "approved"})]


def test_undo_takes_a_whole_decision_back_and_only_once(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    vegan = suggest(alice.agent, answer, value="vegan")
    vegetarian = suggest(alice.agent, answer, value="vegetarian")
    client = staff("reviewer")
    decided = client.post(
        REVIEW_URL,
        {"action": "choose", "keep": vegan.pk, "items": f"{vegan.pk},{vegetarian.pk}"},
        HTTP_X_REQUESTED_WITH="fetch",
    ).json()
    undo = {"action": "undo", "decision": decided["decision"]}
    assert client.post(REVIEW_URL, undo, HTTP_X_REQUESTED_WITH="fetch").status_code == 200
    assert set(MemoryItem.objects.values_list("status", flat=True)) == {"suggested"}
    again = client.post(REVIEW_URL, undo, HTTP_X_REQUESTED_WITH="fetch")
    assert again.status_code == 409
    assert AuditRecord.objects.filter(outcome="undone").count() == 2


def test_undo_is_refused_to_another_reviewer_and_after_the_item_moved_on(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    item = suggest(alice.agent, answer)
    rita = staff("reviewer", name="rita")
    decided = rita.post(REVIEW_URL, {"action": "approve", "item": item.pk}, HTTP_X_REQUESTED_WITH="fetch").json()
    undo = {"action": "undo", "decision": decided["decision"]}
    other = staff("reviewer", name="otto").post(REVIEW_URL, undo, HTTP_X_REQUESTED_WITH="fetch")
    assert other.status_code == 403
    # A privacy officer lets it go since: the approval stands.
    assert staff("privacy").post(f"/admin/memoryapp/memoryitem/{item.pk}/forget/").status_code == 302
    late = rita.post(REVIEW_URL, undo, HTTP_X_REQUESTED_WITH="fetch")
    assert late.status_code == 409
    item.refresh_from_db()
    assert item.status == "active" and item.expired_at is not None


def test_without_the_script_the_last_decision_can_be_undone_from_the_page(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    item = suggest(alice.agent, answer)
    client = staff("reviewer")
    assert 'id="rq-undo-button" disabled' in client.get(REVIEW_URL).content.decode()
    client.post(REVIEW_URL, {"action": "reject", "item": item.pk, "reason": "too vague"})
    decision = ItemReview.objects.get(item=item).decision
    page = client.get(REVIEW_URL).content.decode()
    assert f'name="decision" value="{decision}"' in page and 'id="rq-undo-button" disabled' not in page
    followed = client.post(REVIEW_URL, {"action": "undo", "decision": decision}, follow=True)
    assert "Undone: 1 item waiting for review again." in followed.content.decode()
    item.refresh_from_db()
    assert item.status == "suggested" and "rejected_because" not in item.metadata


def test_bulk_decisions_are_one_decision_for_undo(alice: Caller) -> None:
    _, answer = food_talk(alice.agent)
    items = [suggest(alice.agent, answer, value=f"v{n}", attribute=f"a{n}") for n in range(3)]
    client = staff("reviewer")
    decided = client.post(
        REVIEW_URL,
        {"action": "bulk_reject", "selected": [f"{items[0].pk},{items[1].pk}", items[2].pk], "reason": "too vague"},
        HTTP_X_REQUESTED_WITH="fetch",
    ).json()
    assert decided["done"] == 3
    client.post(REVIEW_URL, {"action": "undo", "decision": decided["decision"]}, HTTP_X_REQUESTED_WITH="fetch")
    assert set(MemoryItem.objects.values_list("status", flat=True)) == {"suggested"}


# --- who may, and what it costs ------------------------------------------------------------------


@pytest.mark.parametrize(("role", "status"), [("reviewer", 200), ("privacy", 403), ("operator", 403)])
def test_only_reviewers_open_the_queue_and_decide(alice: Caller, role: str, status: int) -> None:
    _, answer = food_talk(alice.agent)
    item = suggest(alice.agent, answer)
    client = staff(role)
    assert client.get(REVIEW_URL).status_code == status
    client.post(REVIEW_URL, {"action": "approve", "item": item.pk})
    item.refresh_from_db()
    assert item.status == ("active" if role == "reviewer" else "suggested")


def _queue_queries(alice: Caller, n: int) -> int:
    thread = thread_create(agent=alice.agent, external_id=f"t-{n}", user_id="u-ana")
    entries = [entry_add(thread=thread, role="user", content=f"I said thing number {i} today.") for i in range(30)]
    items = _numbered(alice, n)
    Evidence.objects.bulk_create(
        Evidence(agent=alice.agent, item=item, entry=entries[i % 30], quote=f"thing number {i % 30}", status="verified")
        for i, item in enumerate(items)
    )
    for item in items[::10]:  # a conflict every tenth slot
        MemoryItem.objects.create(
            agent=alice.agent,
            user_id="u-ana",
            kind="fact",
            subject="Ana",
            attribute=item.attribute,
            value=f"{item.value} or not",
            trust="model",
            status="suggested",
            valid_from=item.valid_from,
            recorded_at=item.recorded_at + timedelta(milliseconds=1),
        )
    client = staff("reviewer", name=f"r{n}")
    client.get(REVIEW_URL)  # the session's first load
    with CaptureQueriesContext(connection) as queries:
        page = client.get(REVIEW_URL)
    assert page.status_code == 200 and len(_cards(page.content.decode())) > 0
    MemoryItem.objects.all().delete()
    return len(queries)


def test_the_queue_costs_the_same_queries_for_20_and_500_suggestions(alice: Caller) -> None:
    small, large = _queue_queries(alice, 20), _queue_queries(alice, 500)
    assert small == large, (small, large)
    # session, user, permissions (2), page, counts, slot siblings, quotes, turns before, turns after,
    # slot values now, agents of the filter, retention policies (each card's review deadline)
    assert large == 13, large

"""What did the agent know at T: an item counts from its activation, approvals undone count for
the time they stood, the person's thread-scoped items are included and labelled, two moments compared."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone
from freezegun import freeze_time

from memoryapp.items.selectors import items_holding, items_known, items_list, known_changes, known_reach
from memoryapp.items.services import item_approve, item_forget, item_write, items_review_undo
from memoryapp.models import MemoryItem
from memoryapp.threads.services import thread_create
from tests.kit.api import Caller
from tests.kit.review_staff import staff

pytestmark = pytest.mark.django_db

KNOWN_URL = "/admin/memoryapp/memoryitem/known/"


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S")


def _write(alice: Caller, value: str, *, trust: str = "model", attribute: str = "city", **scope: str) -> MemoryItem:
    return item_write(
        agent=alice.agent,
        kind="fact",
        subject="Ana",
        attribute=attribute,
        value=value,
        trust=trust,
        user_id=scope.pop("user_id", "u-ana"),
        **scope,
    )


def test_an_item_suggested_at_t1_and_approved_at_t2_is_known_only_from_t2(alice: Caller) -> None:
    t1 = timezone.now() - timedelta(hours=3)
    t2 = t1 + timedelta(hours=1)
    with freeze_time(t1):
        item = _write(alice, "Porto")
    with freeze_time(t2):
        item_approve(item=item, actor="staff:rita")
    item.refresh_from_db()
    assert item.activated_at == t2
    between, after = t1 + timedelta(minutes=30), t2 + timedelta(minutes=1)
    assert list(items_holding(agent=alice.agent, user_id="u-ana", as_of=between, known_at=between)) == []
    assert [i.pk for i in items_holding(agent=alice.agent, user_id="u-ana", as_of=after, known_at=after)] == [item.pk]
    # the API's known_at reads the same way
    assert items_list(agent=alice.agent, user_id="u-ana", known_at=between).results == []

    client = staff("reviewer")
    page = client.get(KNOWN_URL, {"agent": alice.agent.pk, "user_id": "u-ana", "at": _stamp(between)})
    assert "Porto" not in page.content.decode() and "0 items held" in page.content.decode()
    later = client.get(KNOWN_URL, {"agent": alice.agent.pk, "user_id": "u-ana", "at": _stamp(after)}).content.decode()
    assert "Ana city: Porto" in later and "1 item held" in later


def test_the_value_an_approval_replaced_is_known_until_the_approval(alice: Caller) -> None:
    t0 = timezone.now() - timedelta(hours=5)
    with freeze_time(t0):
        _write(alice, "Lisbon", trust="system")
    with freeze_time(t0 + timedelta(hours=1)):
        porto = _write(alice, "Porto")  # suggested: memory still says Lisbon
    with freeze_time(t0 + timedelta(hours=2)):
        item_approve(item=porto, actor="staff:rita")

    def values(at: datetime) -> list[str]:
        return [i.value for i in items_known(agent=alice.agent, user_id="u-ana", at=at)]

    assert values(t0 + timedelta(minutes=90)) == ["Lisbon"]
    assert values(t0 + timedelta(minutes=150)) == ["Porto"]


def test_an_approval_undone_later_was_known_while_it_stood_and_not_after(alice: Caller) -> None:
    t0 = timezone.now() - timedelta(hours=5)
    with freeze_time(t0):
        _write(alice, "Lisbon", trust="system")
    with freeze_time(t0 + timedelta(minutes=10)):
        porto = _write(alice, "Porto")
    with freeze_time(t0 + timedelta(hours=1)):
        item_approve(item=porto, actor="staff:rita", decision="dec_one")
    with freeze_time(t0 + timedelta(hours=2)):
        items_review_undo(decision="dec_one", actor="staff:rita")

    def values(at: datetime) -> list[str]:
        return [i.value for i in items_known(agent=alice.agent, user_id="u-ana", at=at)]

    assert values(t0 + timedelta(minutes=30)) == ["Lisbon"]
    assert values(t0 + timedelta(minutes=90)) == ["Porto"]  # the approval stood then: Lisbon was closed
    assert values(t0 + timedelta(minutes=150)) == ["Lisbon"]  # undone: Lisbon holds again
    assert values(timezone.now()) == ["Lisbon"]


def test_asking_about_a_person_includes_the_items_of_their_threads_labelled(alice: Caller) -> None:
    thread_create(agent=alice.agent, external_id="t-trip", user_id="u-ana")
    thread_create(agent=alice.agent, external_id="t-ben", user_id="u-ben")
    personal = _write(alice, "Porto", trust="system")
    in_thread = _write(alice, "pescatarian", trust="system", attribute="diet", user_id="", thread_id="t-trip")
    others = _write(alice, "Leeds", trust="system", user_id="", thread_id="t-ben")
    at = timezone.now() + timedelta(seconds=1)
    known = {i.pk: known_reach(i) for i in items_known(agent=alice.agent, user_id="u-ana", at=at, world=True)}
    assert known == {personal.pk: "person", in_thread.pk: "thread t-trip"}
    assert others.pk not in known
    page = (
        staff("reviewer")
        .get(KNOWN_URL, {"agent": alice.agent.pk, "user_id": "u-ana", "at": _stamp(at), "world": "1"})
        .content.decode()
    )
    assert "pescatarian" in page and '<span class="known-thread">thread t-trip</span>' in page
    assert "Leeds" not in page


def test_two_moments_compared_say_what_was_added_removed_and_changed(alice: Caller) -> None:
    t0 = timezone.now() - timedelta(days=3)
    with freeze_time(t0):
        _write(alice, "Lisbon", trust="system")
        job = _write(alice, "nurse", trust="system", attribute="job")

    with freeze_time(t0 + timedelta(days=1)):
        _write(alice, "Porto", trust="system")
        _write(alice, "cats", trust="system", attribute="pets")
        item_forget(item=job, actor="staff:rita")
    earlier = items_known(agent=alice.agent, user_id="u-ana", at=t0 + timedelta(hours=1))
    later = items_known(agent=alice.agent, user_id="u-ana", at=t0 + timedelta(days=2))
    changes = known_changes(earlier=earlier, later=later)
    assert [i.value for i in changes.added] == ["cats"]
    assert [i.value for i in changes.removed] == ["nurse"]
    assert [(a.value, b.value) for a, b in changes.changed] == [("Lisbon", "Porto")]
    page = (
        staff("reviewer")
        .get(
            KNOWN_URL,
            {
                "agent": alice.agent.pk,
                "user_id": "u-ana",
                "at": _stamp(t0 + timedelta(days=2)),
                "compare": _stamp(t0 + timedelta(hours=1)),
            },
        )
        .content.decode()
    )
    assert "1 added · 1 removed · 1 changed value · 0 unchanged" in page
    assert 'class="kd-changed"' in page and 'class="kd-added"' in page and 'class="kd-removed"' in page


def test_the_known_page_is_for_reviewers_and_refuses_a_time_it_cannot_read(alice: Caller) -> None:
    assert staff("operator").get(KNOWN_URL).status_code == 403
    page = staff("reviewer").get(KNOWN_URL, {"agent": alice.agent.pk, "at": "yesterday"})
    assert page.status_code == 200 and "The time is not one I can read" in page.content.decode()

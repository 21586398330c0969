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


def test_what_the_agent_knew_in_a_thread_is_what_its_context_reads_person_and_project_included(alice: Caller) -> None:
    """Asked about a thread alone, the page shows the thread's scope as the context builder reads it
    (its person and project too), says so, and the thread's page links it filled in (issue 23 §16)."""
    from dataclasses import asdict

    from memoryapp.items.selectors import thread_context_scope

    thread = thread_create(
        agent=alice.agent, external_id="t-trip", user_id="u-ana", metadata={"project_id": "p-lisbon"}
    )
    seen = [
        _write(alice, "Porto", trust="system", user_id=""),  # every person
        _write(alice, "vegetarian", trust="system", attribute="diet"),  # the thread's person
        _write(alice, "by train", trust="system", attribute="travel", project_id="p-lisbon"),
        _write(alice, "window seat", trust="system", attribute="seat", thread_id="t-trip"),
    ]
    unseen = [
        _write(alice, "Madrid", trust="system", attribute="home", user_id="u-ben"),
        _write(alice, "by plane", trust="system", attribute="travel", project_id="p-oslo"),
        _write(alice, "aisle seat", trust="system", attribute="seat", thread_id="t-other"),
    ]
    at = timezone.now() + timedelta(seconds=1)
    reads = {i.pk for i in items_holding(agent=alice.agent, **asdict(thread_context_scope(thread)), as_of=at)}
    assert reads == {i.pk for i in seen}

    reviewer = staff("reviewer")
    page = reviewer.get(KNOWN_URL, {"agent": alice.agent.pk, "thread_id": "t-trip", "at": _stamp(at)}).content.decode()
    assert all(f"/memoryitem/{i.pk}/change/" in page for i in seen)
    assert not any(f"/memoryitem/{i.pk}/change/" in page for i in unseen)
    assert "4 items held" in page and 'id="known-scope"' in page
    assert "Thread t-trip (person u-ana, project p-lisbon): exactly what a context built for this thread reads" in page
    # A person typed that is not the thread's: the thread's own is shown, and the page says so.
    typed = reviewer.get(
        KNOWN_URL, {"agent": alice.agent.pk, "thread_id": "t-trip", "user_id": "u-ben", "at": _stamp(at)}
    ).content.decode()
    assert "not <code>u-ben</code>" in typed and "Madrid" not in typed
    missing = reviewer.get(KNOWN_URL, {"agent": alice.agent.pk, "thread_id": "t-none", "at": _stamp(at)})
    assert "alice has no thread &#x27;t-none&#x27;." in missing.content.decode()

    thread_page = reviewer.get(f"/admin/memoryapp/thread/{thread.pk}/change/").content.decode()
    assert 'id="thread-known"' in thread_page
    assert f"{KNOWN_URL}?agent={alice.agent.pk}&amp;thread_id=t-trip&amp;at=" in thread_page
    # Who may not read what the agent knew is not offered the link, nor the page.
    officer = staff("privacy", name="officer")
    officer_page = officer.get(f"/admin/memoryapp/thread/{thread.pk}/change/")
    assert officer_page.status_code == 200 and 'id="thread-known"' not in officer_page.content.decode()
    assert officer.get(KNOWN_URL, {"agent": alice.agent.pk, "thread_id": "t-trip"}).status_code == 403

"""What an irreversible action takes, counted by a dry run of its own services: the preview changes
nothing and reports exactly what the action then does."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from governance.models import AuditRecord
from governance.staff.consequences import Consequences, consequences_apply, consequences_preview
from memoryapp.forgetting.services import entry_delete, entry_redact, thread_delete
from memoryapp.items.services import item_write
from memoryapp.models import Entry, Evidence, MemoryFileVersion, MemoryItem, Thread
from memoryapp.threads.services import entry_add, thread_create, thread_fork
from tests.kit.api import Caller

pytestmark = pytest.mark.django_db
ACTOR = "staff:olga"


def world(caller: Caller) -> dict[str, Any]:
    thread = thread_create(agent=caller.agent, external_id="porto", user_id="u-ana")
    told = entry_add(thread=thread, role="user", content="My passport is X123 and I live in Porto.")
    reply = entry_add(thread=thread, role="assistant", content="Noted.")
    again = entry_add(thread=thread, role="user", content="Porto is home.")
    for attribute, quotes in (
        ("passport", [(told, "passport is X123")]),
        ("city", [(told, "I live in Porto"), (again, "Porto is home")]),
    ):
        item_write(
            agent=caller.agent,
            kind="fact",
            subject="Ana",
            attribute=attribute,
            value=attribute,
            trust="user",
            user_id="u-ana",
            evidence=[{"entry_id": e.id, "quote": q} for e, q in quotes],
        )
    fork = thread_fork(thread=thread, entry_id=reply.id, new_thread_id="porto-fork")
    return {"thread": thread, "told": told, "reply": reply, "again": again, "fork": fork}


def snapshot(agent_id: int) -> tuple[Any, ...]:
    return (
        sorted(Entry.objects.filter(agent_id=agent_id).values_list("id", "parent_id", "text", "content_hash")),
        sorted(MemoryItem.objects.filter(agent_id=agent_id).values_list("id", "verified", "status")),
        sorted(Evidence.objects.filter(agent_id=agent_id).values_list("item_id", "entry_id", "quote")),
        sorted(MemoryFileVersion.objects.filter(agent_id=agent_id).values_list("id", "content")),
        sorted(Thread.objects.filter(agent_id=agent_id).values_list("external_id", "active_leaf_id", "next_seq")),
        AuditRecord.objects.count(),
    )


def report_of(report: Consequences) -> tuple[Any, ...]:
    # Forks by number: the chain names a thread by its owner's pseudonym, a rehearsal by its id.
    return (report.counts, len(report.forks), sorted(report.purged_item_ids), report.skipped, report.audit_records)


ACTIONS: dict[str, Callable[[dict[str, Any]], list[tuple[str, Callable[[], Any]]]]] = {
    "redact": lambda w: [(w["told"].id, lambda: entry_redact(entry=w["told"], reason="asked", actor=ACTOR))],
    "delete entry": lambda w: [(w["reply"].id, lambda: entry_delete(entry=w["reply"], actor=ACTOR))],
    "delete thread": lambda w: [("porto", lambda: thread_delete(thread=w["thread"], actor=ACTOR))],
    "two at once": lambda w: [
        (w["again"].id, lambda: entry_delete(entry=w["again"], actor=ACTOR)),
        (w["told"].id, lambda: entry_redact(entry=w["told"], reason="asked", actor=ACTOR)),
    ],
}


@pytest.mark.parametrize("action", list(ACTIONS))
def test_a_preview_changes_nothing_and_counts_what_the_action_then_does(alice: Caller, action: str) -> None:
    w = world(alice)
    before = snapshot(alice.agent.pk)
    previewed = consequences_preview(steps=ACTIONS[action](w), actor=ACTOR)
    assert snapshot(alice.agent.pk) == before
    # The instances the steps hold are read again by the services: the same steps run for real.
    done = consequences_apply(steps=ACTIONS[action](w), actor=ACTOR)
    assert report_of(previewed) == report_of(done)
    assert snapshot(alice.agent.pk) != before
    assert sum(done.counts.values()) > 0


def test_the_counts_of_a_thread_delete_name_every_kind_it_takes(alice: Caller) -> None:
    w = world(alice)
    report = consequences_preview(steps=ACTIONS["delete thread"](w), actor=ACTOR)
    counts = {k: v for k, v in report.counts.items() if v}
    assert counts == {
        "threads_deleted": 1,
        "entries_deleted": 3,
        "fork_copies_deleted": 2,
        "items_purged": 2,
        "evidence_removed": 3,
        "entities_deleted": 1,
    }
    assert report.forks == {(alice.agent.pk, "porto-fork")}
    assert report.summary() == (
        "1 thread deleted, 3 entries deleted, 2 fork copies deleted, 2 memory items purged, 3 quotes removed, "
        "1 entity deleted, 1 fork touched"
    )


def test_a_refused_step_is_listed_and_the_others_still_count(alice: Caller) -> None:
    thread = thread_create(agent=alice.agent, external_id="t")
    said = entry_add(thread=thread, role="user", content="hello")
    label = entry_add(thread=thread, type="label", event={"label": "x"})
    steps = [
        (label.id, lambda: entry_redact(entry=label, actor=ACTOR)),
        (said.id, lambda: entry_redact(entry=said, actor=ACTOR)),
    ]
    report = consequences_apply(steps=steps, actor=ACTOR)
    assert report.skipped == [(label.id, "Event entries cannot be redacted.")]
    assert report.counts["entries_redacted"] == 1
    assert Entry.objects.get(pk=said.id).redacted_at is not None


def test_records_of_another_actor_written_meanwhile_are_not_counted(alice: Caller) -> None:
    from governance.audit.chain import audit_append

    thread = thread_create(agent=alice.agent, external_id="t")
    said = entry_add(thread=thread, role="user", content="hello")

    def redact_while_someone_else_deletes() -> None:
        audit_append(action="thread.delete", actor="agent:other", details={"entries": 99})
        entry_redact(entry=said, actor=ACTOR)

    report = consequences_preview(steps=[(said.id, redact_while_someone_else_deletes)], actor=ACTOR)
    assert report.counts["entries_redacted"] == 1 and report.counts["entries_deleted"] == 0


def test_letting_items_go_is_counted_and_a_second_time_counts_nothing(alice: Caller) -> None:
    from memoryapp.items.services import item_forget

    world(alice)
    items = list(MemoryItem.objects.filter(agent=alice.agent).order_by("pk"))
    steps = [(i.pk, lambda i=i: item_forget(item=i, actor=ACTOR)) for i in items]
    previewed = consequences_preview(steps=steps, actor=ACTOR)
    assert MemoryItem.objects.filter(agent=alice.agent, expired_at__isnull=False).count() == 0
    assert report_of(previewed) == report_of(consequences_apply(steps=steps, actor=ACTOR))
    assert previewed.summary() == "2 memory items let go (history kept)"
    assert consequences_preview(steps=steps, actor=ACTOR).summary() == "nothing"


@pytest.mark.django_db(transaction=True)  # two connections: the preview's thread, and this test's
def test_an_audit_write_of_another_connection_completes_while_a_preview_is_under_way(alice: Caller) -> None:
    """A preview's records are rolled back anyway: it tallies them without the audit chain's lock,
    so the service's other audit writes do not wait for a staffer reading a confirm page."""
    import threading

    from django.db import connection, transaction

    from governance.audit.chain import audit_append

    thread = thread_create(agent=alice.agent, external_id="t")
    said = entry_add(thread=thread, role="user", content="hello")
    inside, release = threading.Event(), threading.Event()

    def held_open() -> None:  # after the redaction and its audit record
        inside.set()
        release.wait(60)

    found: dict[str, Consequences] = {}

    def preview() -> None:
        try:
            steps = [(said.id, lambda: entry_redact(entry=said, actor=ACTOR)), ("held", held_open)]
            found["report"] = consequences_preview(steps=steps, actor=ACTOR)
        finally:
            connection.close()

    worker = threading.Thread(target=preview)
    worker.start()
    try:
        assert inside.wait(60), "the preview did not reach its last step"
        with transaction.atomic():
            with connection.cursor() as cursor:  # without it, a lock held by the preview hangs the test
                cursor.execute("SET LOCAL lock_timeout = '20s'")
            audit_append(action="key.revoked", actor="staff:other", subject="k-1")
        assert AuditRecord.objects.filter(action="key.revoked").count() == 1
    finally:
        release.set()
        worker.join(60)
    assert found["report"].counts["entries_redacted"] == 1
    assert Entry.objects.get(pk=said.id).redacted_at is None

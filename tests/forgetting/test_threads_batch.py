"""A batch of threads deleted together (`threads_delete`, what the prune does) ends where deleting
them one at a time (`thread_delete`) ends: the same rows left, the same counts for each thread,
the same audit records and change events, on a world with forks, items quoting several threads,
files placed at entries or kept for a thread, vectors, and threads nothing stands on."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from governance.audit.pseudonyms import pseudonym_secret
from governance.models import AuditRecord
from memoryapp.forgetting.services import thread_delete, threads_delete
from memoryapp.models import Entity, Entry, Event, Evidence, MemoryFileVersion, MemoryItem, Thread
from memoryapp.threads.services import thread_fork
from tests.kit.audit_names import audit_name
from tests.kit.factories import (
    AgentFactory,
    EntityFactory,
    EntryFactory,
    MemoryFileVersionFactory,
    MemoryItemFactory,
    ThreadFactory,
)


def _chat(agent: Any, external_id: str, turns: int = 3) -> list[Entry]:
    thread = ThreadFactory(agent=agent, external_id=external_id, user_id="u-ana")
    return [
        EntryFactory(thread=thread, role="user" if n % 2 == 0 else "assistant", content=f"{external_id} turn {n}")
        for n in range(turns)
    ]


def _world() -> list[Thread]:
    """Threads to delete (pk order), and others that stay and are quoted with them."""
    agent = AgentFactory(slug="alice")
    plain_1 = _chat(agent, "plain-1")
    _chat(agent, "plain-2", turns=1)
    ThreadFactory(agent=agent, external_id="empty")
    source = _chat(agent, "source", turns=4)
    fork = thread_fork(thread=source[0].thread, entry_id=source[2].pk, new_thread_id="fork")
    EntryFactory(thread=fork, role="user", content="fork's own turn")
    a, b, kept = _chat(agent, "quoted-a"), _chat(agent, "quoted-b"), _chat(agent, "kept")
    # Quoting two deleted threads: trimmed by the first, purged by the second.
    MemoryItemFactory(
        agent=agent,
        attribute="both",
        value="quoted-a turn 0 and quoted-b turn 1",
        evidence=[{"entry_id": a[0].pk, "quote": "quoted-a turn 0"}, {"entry_id": b[1].pk, "quote": "quoted-b turn 1"}],
    )
    # Quoting a deleted thread and one that stays: trimmed.
    MemoryItemFactory(
        agent=agent,
        attribute="half",
        value="quoted-b turn 2 and kept turn 0",
        evidence=[{"entry_id": b[2].pk, "quote": "quoted-b turn 2"}, {"entry_id": kept[0].pk, "quote": "kept turn 0"}],
    )
    # Quoting a plain-looking thread between two runs of plain ones.
    MemoryItemFactory(
        agent=agent, attribute="one", value="source turn 1", evidence=[{"entry_id": source[1].pk, "quote": "source"}]
    )
    placed = _chat(agent, "placed")
    MemoryFileVersionFactory(agent=agent, path="/memories/placed.md", content="at a turn\n", place=placed[1])
    scoped = _chat(agent, "scoped")
    MemoryItemFactory(agent=agent, user_id="u-ana", thread_id="scoped", attribute="note", value="thread note")
    EntityFactory(agent=agent, name="Scratch", thread_id="scoped")
    MemoryFileVersionFactory(agent=agent, path="/memories/scratch.md", content="scratch\n", thread_id="scoped")
    _chat(agent, "plain-3", turns=2)
    vector = [0.1] * settings.EMBEDDING_DIMENSIONS
    Entry.objects.filter(pk__in=[plain_1[1].pk, scoped[2].pk, source[3].pk]).update(embedding=vector)
    kept_thread = kept[0].thread_id
    return list(Thread.objects.exclude(pk=kept_thread).order_by("pk"))


def _state(known: set[str]) -> dict[str, Any]:
    """What the database holds; the ids of file versions the cascade wrote (a file's deletion) are
    made anew each time, so they read `new`."""

    def named(value: str) -> str:
        return "new" if value.startswith("mfv_") and value not in known else value

    return {
        "threads": sorted(Thread.objects.values_list("external_id", "active_leaf_id", "forked_from_id")),
        "entries": sorted(
            (e.pk, e.thread_id, e.parent_id, e.embedding is None, e.redacted_at is None) for e in Entry.objects.all()
        ),
        "items": sorted(MemoryItem.objects.values_list("pk", "status", "verified", "entity_id")),
        "evidence": sorted(Evidence.objects.values_list("pk", "item_id", "entry_id", "status")),
        "entities": sorted(Entity.objects.values_list("pk", "thread_id")),
        "files": sorted(
            (named(v.pk), v.thread_id, v.path, v.sequence, v.content, v.place_id, v.redacted_at is None)
            for v in MemoryFileVersion.objects.all()
        ),
        "audit": [
            (r.action, r.actor, r.agent_id, r.thread_id, named(r.subject), r.outcome, _ids(r.details, named))
            for r in AuditRecord.objects.order_by("seq")
        ],
        "events": [(e.agent_id, e.type, e.thread_id, [named(i) for i in e.ids]) for e in Event.objects.order_by("pk")],
    }


def _ids(value: Any, named: Any) -> Any:
    if isinstance(value, dict):
        return {k: _ids(v, named) for k, v in value.items()}
    if isinstance(value, list):
        return [_ids(v, named) for v in value]
    return named(value) if isinstance(value, str) else value


def _known() -> set[str]:
    return set(MemoryFileVersion.objects.values_list("pk", flat=True))


@pytest.mark.django_db
def test_a_batch_of_threads_ends_where_deleting_them_one_at_a_time_ends() -> None:
    threads = _world()
    known = _known()
    audit_before, events_before = AuditRecord.objects.count(), Event.objects.count()

    rollback = transaction.savepoint()
    one_at_a_time = {t.pk: thread_delete(thread=Thread.objects.get(pk=t.pk), actor="test") for t in threads}
    expected = _state(known)
    transaction.savepoint_rollback(rollback)
    assert AuditRecord.objects.count() == audit_before and Event.objects.count() == events_before

    together = threads_delete(threads=threads, actor="test")

    assert together == one_at_a_time
    assert _state(known) == expected
    # The world had each kind: threads nothing stood on, and every kind of derived memory.
    assert sum(c["threads"] for c in together.values()) == len(threads) == 10
    totals = {k: sum(c[k] for c in together.values()) for k in ("items_purged", "items_trimmed", "vectors")}
    assert totals["items_purged"] >= 3 and totals["items_trimmed"] >= 2 and totals["vectors"] == 3
    assert sum(c["file_versions"] for c in together.values()) == 2
    assert not Thread.objects.exclude(external_id="kept").exists()


@pytest.mark.django_db
def test_a_batch_of_threads_nothing_stands_on_writes_each_threads_records() -> None:
    agent = AgentFactory(slug="alice")
    for n in range(3):
        _chat(agent, f"plain-{n}", turns=n)
    threads = list(Thread.objects.order_by("pk"))
    only = Entry.objects.get(thread__external_id="plain-1").pk
    two = sorted(Entry.objects.filter(thread__external_id="plain-2").values_list("pk", flat=True))

    counts = threads_delete(threads=threads, actor="test")

    assert [counts[t.pk]["entries_deleted"] for t in threads] == [0, 1, 2]
    records = list(AuditRecord.objects.filter(actor="test").order_by("seq"))
    # The records name the thread by the owner's pseudonym (governance.audit.pseudonyms).
    named = {n: audit_name(agent_id=agent.pk, user_id="u-ana", value=n) for n in ("plain-0", "plain-1", "plain-2")}
    assert [(r.action, r.thread_id) for r in records] == [
        ("thread.delete", named["plain-0"]),
        ("lineage.forget", named["plain-1"]),
        ("thread.delete", named["plain-1"]),
        ("lineage.forget", named["plain-2"]),
        ("thread.delete", named["plain-2"]),
    ]
    assert records[1].subject == only and records[1].details["entry_ids"] == [only]
    assert records[3].subject == "2 entries" and records[3].details["entry_ids"] == two
    assert records[3].details["items_purged"] == 0 and records[4].details == {"entries": 2, "fork_copies": 0}
    gone = Event.objects.filter(type="thread.deleted").order_by("pk")
    assert [e.thread_id for e in gone] == ["plain-0", "plain-1", "plain-2"]
    assert not Entry.objects.exists()


@pytest.mark.django_db
def test_threads_nothing_stands_on_go_by_as_many_statements_however_many_they_are() -> None:
    agent = AgentFactory(slug="alice")
    for n in range(8):
        _chat(agent, f"plain-{n}", turns=3)
    threads = list(Thread.objects.order_by("pk"))

    pseudonym_secret(agent_id=agent.pk, user_id="u-ana")  # the owner's audit pseudonym secret, made once before
    with CaptureQueriesContext(connection) as two:
        threads_delete(threads=threads[:2], actor="test")
    with CaptureQueriesContext(connection) as six:
        threads_delete(threads=threads[2:], actor="test")

    assert len(six.captured_queries) == len(two.captured_queries) < 30
    assert not Thread.objects.exists() and AuditRecord.objects.filter(action="thread.delete").count() == 8

"""Erasure of a person (`person_erase`): every thread about them, their messages elsewhere, their items,
facts, entities, files and the job runs naming them go, in batches; nobody else's data is touched."""

from __future__ import annotations

import itertools

import pytest
from django.db import connection

from governance.audit.chain import audit_verify
from governance.models import AuditRecord, JobRun
from memoryapp.errors import DomainError
from memoryapp.forgetting.person import person_erase, person_erase_plan
from memoryapp.items.facts import fact_remember
from memoryapp.models import Agent, Entity, Entry, Evidence, MemoryFileVersion, MemoryItem, Thread
from memoryapp.threads.services import thread_fork
from tests.kit.factories import (
    AgentFactory,
    EntityFactory,
    EntryFactory,
    JobRunFactory,
    MemoryFileVersionFactory,
    MemoryItemFactory,
    ThreadFactory,
)

CANARY = "zebracanary"
KEEP = "otterkeep"


def _rows_holding(text: str) -> dict[str, int]:
    """Rows of every content table holding `text` anywhere in the row."""
    tables = (
        "memoryapp_thread",
        "memoryapp_entry",
        "memoryapp_memoryitem",
        "memoryapp_evidence",
        "memoryapp_entity",
        "memoryapp_memoryfileversion",
        "memoryapp_itemreview",
        "governance_jobrun",
    )
    found = {}
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"SELECT count(*) FROM {table} t WHERE t::text LIKE %s", [f"%{text}%"])
            count = cursor.fetchone()[0]
            if count:
                found[table] = count
    return found


def _world(agent: Agent, user_id: str, word: str, threads: int = 3) -> list[Thread]:
    """A person's threads with a quoted item each, a fact, an entity, a file and a job run."""
    made = []
    for i in range(threads):
        thread = ThreadFactory(agent=agent, external_id=f"t-{user_id}-{i}", user_id=user_id)
        said = EntryFactory(thread=thread, role="user", content=f"My secret word is {word} number {i}")
        EntryFactory(thread=thread, role="assistant", content=f"Noted {word}")
        MemoryItemFactory(
            agent=agent,
            user_id=user_id,
            subject=user_id,
            attribute=f"secret {i}",
            value=f"{word} {i}",
            evidence=[{"entry_id": said.id, "quote": f"secret word is {word}"}],
        )
        made.append(thread)
    fact_remember(agent=agent, namespace=f"users/{user_id}", key="secret", value=word)
    EntityFactory(agent=agent, name=f"{word} entity", user_id=user_id)
    MemoryFileVersionFactory(agent=agent, path=f"/memories/{word}.md", content=f"{word}\n", user_id=user_id)
    JobRunFactory(
        kind="extract", agent_id=agent.pk, arguments={"thread_pk": made[0].pk, "thread_id": made[0].external_id}
    )
    JobRunFactory(kind="export", agent_id=agent.pk, arguments={"user_id": user_id}, result={"rows": 3})
    JobRunFactory(kind="export", agent_id=agent.pk, arguments={"user_id": user_id + "0"})  # another person
    return made


@pytest.mark.django_db(transaction=True)
def test_person_erase_removes_every_trace_and_leaves_others_whole() -> None:
    alice, bob = AgentFactory(slug="alice"), AgentFactory(slug="bob")
    _world(alice, "u-eve", CANARY)
    _world(alice, "u-other", KEEP, threads=2)
    _world(bob, "u-eve", CANARY, threads=1)
    # A fork of one of Eve's threads, and Eve speaking in another person's thread.
    eve_thread = Thread.objects.get(agent=alice, external_id="t-u-eve-1")
    thread_fork(thread=eve_thread, entry_id=eve_thread.active_leaf_id, new_thread_id="t-eve-fork")
    other = Thread.objects.get(agent=alice, external_id="t-u-other-0")
    said = EntryFactory(thread=other, role="user", content=f"Eve here: {CANARY} again", metadata={"userId": "u-eve"})
    reply = EntryFactory(thread=other, role="assistant", content=f"Hi Eve, {CANARY}")
    after = EntryFactory(thread=other, role="user", content=f"back to {KEEP}")

    plan = person_erase_plan(user_id="u-eve", agent_ids=[alice.pk])
    assert plan["threads"] == 4 and plan["messages_elsewhere"] == 1 and plan["items"] >= 4
    assert Thread.objects.filter(user_id="u-eve").count() == 5  # the plan changed nothing

    seen: list[tuple[int, int]] = []
    counts = person_erase(
        user_id="u-eve", agent_ids=[alice.pk], actor="test", progress=lambda d, t: seen.append((d, t)), batch_size=2
    )
    assert counts["threads"] == 4
    assert counts["entries_deleted"] >= 4 * 2 + 2  # the threads' turns, and Eve's message with its reply
    assert counts["items_purged"] >= 4
    assert counts["file_versions"] == 1
    assert counts["job_runs"] == 2  # the extraction of a thread of theirs, and the run naming them
    assert len(seen) >= 3 and seen[-1][0] == seen[-1][1]
    assert all(d1 <= d2 for (d1, _), (d2, _) in itertools.pairwise(seen))

    # Alice holds nothing of Eve's any more; Bob's copy of Eve and the other person are whole.
    assert not Thread.objects.filter(agent=alice, user_id="u-eve").exists()
    assert not MemoryItem.objects.filter(agent=alice, user_id="u-eve").exists()
    assert not MemoryItem.objects.filter(agent=alice, namespace="users/u-eve").exists()
    assert not Entity.objects.filter(agent=alice, user_id="u-eve").exists()
    assert not MemoryFileVersion.objects.filter(agent=alice, user_id="u-eve").exists()
    assert not Entry.objects.filter(pk__in=[said.pk, reply.pk]).exists()
    assert Entry.objects.filter(pk=after.pk).exists()
    left = _rows_holding(CANARY)
    bob_rows = Thread.objects.filter(agent=bob, user_id="u-eve").count()
    assert bob_rows == 1 and MemoryItem.objects.filter(agent=bob, user_id="u-eve").count() >= 2
    assert set(left) <= {
        "memoryapp_thread",
        "memoryapp_entry",
        "memoryapp_memoryitem",
        "memoryapp_evidence",
        "memoryapp_entity",
        "memoryapp_memoryfileversion",
    }
    assert not Entry.objects.filter(agent=alice, text__contains=CANARY).exists()
    assert Thread.objects.filter(agent=alice, user_id="u-other").count() == 2
    assert MemoryItem.objects.filter(agent=alice, user_id="u-other").count() >= 3
    assert MemoryFileVersion.objects.filter(agent=alice, user_id="u-other").count() == 1
    assert Evidence.objects.filter(agent=alice, item__user_id="u-other").count() == 2

    # Audit: counts and ids only, never the person's id; the chain still verifies.
    for record in AuditRecord.objects.filter(action__startswith="person."):
        assert "u-eve" not in str(record.details) and "u-eve" not in record.subject
    assert audit_verify().ok

    # A second run finds nothing.
    again = person_erase(user_id="u-eve", agent_ids=[alice.pk], actor="test")
    assert not any(again.values()), again

    # Every agent: Bob's too.
    person_erase(user_id="u-eve", actor="test")
    assert _rows_holding(CANARY) == {}
    assert JobRun.objects.filter(arguments__erased=True).count() == 4
    assert JobRun.objects.filter(arguments__user_id="u-eve0").count() == 2  # "u-eve0" is someone else
    assert _rows_holding(KEEP)


@pytest.mark.django_db
def test_the_persons_message_in_another_thread_takes_its_reply_and_the_summary_covering_it() -> None:
    alice = AgentFactory(slug="alice")
    other = ThreadFactory(agent=alice, external_id="t-team", user_id="u-team")
    first = EntryFactory(thread=other, role="user", content="Team standup")
    said = EntryFactory(thread=other, role="user", content=f"{CANARY} from Eve", metadata={"userId": "u-eve"})
    reply = EntryFactory(thread=other, role="assistant", content=f"Thanks Eve, {CANARY}")
    kept = EntryFactory(thread=other, role="user", content="Next topic")
    summary = EntryFactory(
        thread=other,
        type="compaction",
        role="user",
        content=f"[condensed] Eve said {CANARY}",
        event={"summary": f"Eve said {CANARY}", "first_kept_entry_id": kept.pk},
    )
    Entry.objects.filter(pk=said.pk).update(embedding=[0.1] * 384)

    counts = person_erase(user_id="u-eve", agent_ids=[alice.pk], actor="test")

    assert (counts["entries_deleted"], counts["summaries"], counts["threads"]) == (2, 1, 0)
    assert counts["vectors"] >= 1
    assert not Entry.objects.filter(pk__in=[said.pk, reply.pk, summary.pk]).exists()
    assert Entry.objects.filter(pk__in=[first.pk, kept.pk]).count() == 2
    assert Entry.objects.get(pk=kept.pk).parent_id == first.pk
    assert _rows_holding(CANARY) == {}


@pytest.mark.django_db
def test_a_plan_counts_and_changes_nothing_and_bad_arguments_are_refused() -> None:
    alice = AgentFactory(slug="alice")
    _world(alice, "u-eve", CANARY, threads=2)
    plan = person_erase_plan(user_id="u-eve")
    assert (plan["threads"], plan["entries"], plan["file_versions"]) == (2, 4, 1)
    assert plan["items"] == 3  # two quoted items and the fact
    assert Thread.objects.filter(user_id="u-eve").count() == 2
    for bad in ({"user_id": ""}, {"user_id": "x" * 129}, {"user_id": "u-eve", "mode": "shred"}):
        with pytest.raises(DomainError) as refused:
            person_erase(**bad)  # type: ignore[arg-type]
        assert refused.value.field in ("user_id", "mode")
    assert Thread.objects.filter(user_id="u-eve").count() == 2

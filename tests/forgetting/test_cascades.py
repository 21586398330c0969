"""The cascades of 004 "Forgetting, Redacting and Rewinding", each answering with its counts: replies
and keep_replies, copies in forks and forks of forks, rewind marking items stale, what a thread kept
for itself, files whose head was redacted, vectors, summaries, and a cascade stopped part way then
run again to completion."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from governance.models import AuditRecord
from memoryapp.content import REDACTED_TEXT
from memoryapp.forgetting.person import person_erase
from memoryapp.forgetting.services import (
    COUNT_KEYS,
    cascade_step_hook,
    entries_forget,
    entries_redact,
    entry_delete,
    thread_clear,
    thread_delete,
    thread_rewind_stale,
)
from memoryapp.models import Entity, Entry, MemoryFileVersion, MemoryItem, Thread
from memoryapp.threads.services import thread_fork
from tests.kit.api import Caller, build_context, create_memory_file, use_memory_tool
from tests.kit.factories import (
    AgentFactory,
    EntityFactory,
    EntryFactory,
    MemoryFileVersionFactory,
    MemoryItemFactory,
    ThreadFactory,
)


class Stop(Exception):
    """What the injected fault raises between two steps."""


@pytest.fixture
def no_hook() -> Iterator[None]:
    yield
    cascade_step_hook(None)


def _conversation(agent: Any, external_id: str = "t-1", user_id: str = "u-ana") -> tuple[Thread, dict[str, Entry]]:
    """q1 -> a1 -> call -> result -> q2 -> a2 (the active branch), and q1 -> alt (another branch)."""
    thread = ThreadFactory(agent=agent, external_id=external_id, user_id=user_id)
    q1 = EntryFactory(thread=thread, role="user", content="My passport number is X12345678")
    a1 = EntryFactory(thread=thread, role="assistant", content="Your passport X12345678 is noted")
    call = EntryFactory(
        thread=thread, role="assistant", content="", tool_calls=[{"id": "c1", "name": "save", "arguments": {}}]
    )
    result = EntryFactory(thread=thread, type="tool_result", tool_call_id="c1", content="saved X12345678")
    q2 = EntryFactory(thread=thread, role="user", content="Now plan Rome")
    a2 = EntryFactory(thread=thread, role="assistant", content="Start at the Colosseum")
    alt = EntryFactory(thread=thread, role="assistant", content="Alt answer", parent_id=q1.id, activate=False)
    thread.refresh_from_db()
    return thread, {"q1": q1, "a1": a1, "call": call, "result": result, "q2": q2, "a2": a2, "alt": alt}


def _exists(*entries: Entry) -> list[bool]:
    return [Entry.objects.filter(pk=e.pk).exists() for e in entries]


# --- replies ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_user_message_takes_its_replies_on_every_branch_up_to_the_next_user_message() -> None:
    agent = AgentFactory(slug="alice")
    thread, e = _conversation(agent)

    counts = entry_delete(entry=e["q1"], actor="test")

    assert set(counts) == set(COUNT_KEYS)
    assert counts["entries_deleted"] == 5  # q1, a1, call, result, and alt on the other branch
    assert _exists(e["q1"], e["a1"], e["call"], e["result"], e["alt"]) == [False] * 5
    assert _exists(e["q2"], e["a2"]) == [True, True]
    assert Entry.objects.get(pk=e["q2"].pk).parent_id is None  # spliced to the nearest survivor
    thread.refresh_from_db()
    assert thread.active_leaf_id == e["a2"].pk


@pytest.mark.django_db
def test_keep_replies_leaves_the_replies_and_deletes_only_the_message() -> None:
    agent = AgentFactory(slug="alice")
    _, e = _conversation(agent)

    counts = entry_delete(entry=e["q1"], keep_replies=True, actor="test")

    assert counts["entries_deleted"] == 1
    assert _exists(e["a1"], e["alt"]) == [True, True]
    assert Entry.objects.get(pk=e["a1"].pk).parent_id is None


@pytest.mark.django_db
def test_redacting_a_user_message_redacts_its_replies_and_keeps_their_place() -> None:
    agent = AgentFactory(slug="alice")
    _, e = _conversation(agent)

    counts = entries_redact(entry=e["q1"], reason="the user asked", actor="test")

    assert counts["entries_redacted"] == 5 and counts["entries_deleted"] == 0
    for key in ("q1", "a1", "call", "result", "alt"):
        row = Entry.objects.get(pk=e[key].pk)
        assert row.redacted_at is not None and "X12345678" not in json.dumps([row.text, row.content, row.tool_calls])
    assert Entry.objects.get(pk=e["a1"].pk).parent_id == e["q1"].pk
    assert Entry.objects.get(pk=e["q2"].pk).redacted_at is None
    again = entries_redact(entry=e["q1"], actor="test")
    assert not any(again.values())


@pytest.mark.django_db
def test_an_event_among_the_replies_is_deleted_not_redacted() -> None:
    agent = AgentFactory(slug="alice")
    thread = ThreadFactory(agent=agent)
    q = EntryFactory(thread=thread, role="user", content="secret")
    label = EntryFactory(thread=thread, type="label", event={"label": "x"})
    a = EntryFactory(thread=thread, role="assistant", content="secret again")

    counts = entries_redact(entry=q, actor="test")

    assert (counts["entries_redacted"], counts["entries_deleted"]) == (2, 1)
    assert not Entry.objects.filter(pk=label.pk).exists()
    assert Entry.objects.get(pk=a.pk).parent_id == q.pk


# --- forks -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_copies_of_a_message_and_its_replies_go_in_forks_and_forks_of_forks() -> None:
    agent = AgentFactory(slug="alice")
    thread, e = _conversation(agent)
    first = thread_fork(thread=thread, entry_id=e["a2"].pk, new_thread_id="f-1")
    EntryFactory(thread=first, role="user", content="fork turn")
    second = thread_fork(thread=first, entry_id=first.active_leaf_id, new_thread_id="f-2")

    counts = entry_delete(entry=e["q1"], actor="test")

    # 5 in the origin, 4 copies in each fork (the other branch `alt` was not copied).
    assert counts["entries_deleted"] == 5 + 4 + 4
    for fork in (first, second):
        texts = list(Entry.objects.filter(thread=fork).order_by("seq").values_list("text", flat=True))
        assert not any("X12345678" in t for t in texts)
        assert "Now plan Rome" in texts
    assert Entry.objects.filter(thread=second, text="fork turn").exists()


# --- rewind ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_rewind_marks_items_standing_only_on_abandoned_turns_stale_and_they_leave_the_context(
    alice: Caller,
) -> None:
    thread, e = _conversation(alice.agent)
    only_there = MemoryItemFactory(
        agent=alice.agent,
        subject="Ana",
        attribute="plan",
        value="Colosseum first",
        evidence=[{"entry_id": e["a2"].pk, "quote": "Start at the Colosseum"}],
    )
    also_kept = MemoryItemFactory(
        agent=alice.agent,
        subject="Ana",
        attribute="passport",
        value="X12345678",
        evidence=[
            {"entry_id": e["a2"].pk, "quote": "Start at the Colosseum"},
            {"entry_id": e["q1"].pk, "quote": "passport number is X12345678"},
        ],
    )
    before = build_context(alice, "t-1", strategy="recent", max_tokens=4000)
    assert "Colosseum first" in json.dumps(before)

    moved, counts = thread_rewind_stale(thread=thread, entry_id=e["q2"].pk, actor="test")

    assert moved.active_leaf_id == e["q2"].pk and counts["items_stale"] == 1
    stale = MemoryItem.objects.get(pk=only_there.pk)
    assert stale.status == "stale"
    because = stale.metadata["stale_because"]
    assert (because["reason"], because["thread_id"], because["to_entry_id"]) == ("rewound", "t-1", e["q2"].pk)
    assert MemoryItem.objects.get(pk=also_kept.pk).status == "active"
    assert Entry.objects.filter(pk=e["a2"].pk).exists()  # a rewind deletes nothing
    after = build_context(alice, "t-1", strategy="recent", max_tokens=4000)
    assert "Colosseum first" not in json.dumps(after)
    # A thread standing there already is left as it is.
    assert thread_rewind_stale(thread=moved, entry_id=e["q2"].pk)[1]["items_stale"] == 0


@pytest.mark.django_db
def test_a_rewinds_stale_record_names_the_items_and_no_empty_kept_id(alice: Caller) -> None:
    thread, e = _conversation(alice.agent)
    item = MemoryItemFactory(
        agent=alice.agent, value="Colosseum", evidence=[{"entry_id": e["a2"].pk, "quote": "Colosseum"}]
    )

    thread_rewind_stale(thread=thread, entry_id=e["q2"].pk, actor="test")

    record = AuditRecord.objects.get(action="items.marked_stale")
    assert record.details == {"item_ids": [item.pk], "kept_ids": []}


def test_rewind_through_the_api_marks_stale(alice: Caller) -> None:
    _, e = _conversation(alice.agent)
    item = MemoryItemFactory(
        agent=alice.agent, value="Colosseum", evidence=[{"entry_id": e["a2"].pk, "quote": "Colosseum"}]
    )
    response = alice.client.post("/api/v1/threads/t-1/rewind", {"entry_id": e["q2"].pk}, format="json")
    assert response.status_code == 200 and response.json()["active_leaf_id"] == e["q2"].pk
    assert MemoryItem.objects.get(pk=item.pk).status == "stale"


# --- threads ---------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_deleting_a_thread_takes_what_was_kept_for_it_alone() -> None:
    agent = AgentFactory(slug="alice")
    thread, _ = _conversation(agent, "t-1")
    other, _ = _conversation(agent, "t-2")
    mine = MemoryItemFactory(agent=agent, user_id="u-ana", thread_id="t-1", value="thread note")
    theirs = MemoryItemFactory(agent=agent, user_id="u-ana", thread_id="t-2", value="other note")
    person = MemoryItemFactory(agent=agent, user_id="u-ana", value="person note", attribute="city")
    EntityFactory(agent=agent, name="Scratch", thread_id="t-1")
    kept_entity = EntityFactory(agent=agent, name="Scratch", thread_id="t-2")
    MemoryFileVersionFactory(agent=agent, path="/memories/scratch.md", content="X12345678\n", thread_id="t-1")
    MemoryFileVersionFactory(agent=agent, path="/memories/scratch.md", content="kept\n", thread_id="t-2")

    scoped_entities = Entity.objects.filter(agent=agent, thread_id="t-1").count()  # Scratch, and Ana of the item

    counts = thread_delete(thread=thread, actor="test")

    assert counts["threads"] == 1 and counts["entries_deleted"] == 7
    assert counts["items_purged"] == 1 and counts["entities"] == scoped_entities == 2
    assert counts["file_versions"] == 1
    assert not MemoryItem.objects.filter(pk=mine.pk).exists()
    assert MemoryItem.objects.filter(pk__in=[theirs.pk, person.pk]).count() == 2
    assert not Entity.objects.filter(agent=agent, thread_id="t-1").exists()
    assert Entity.objects.filter(pk=kept_entity.pk).exists()
    versions = MemoryFileVersion.objects.filter(agent=agent, thread_id="t-1").order_by("sequence")
    assert [v.content for v in versions] == [REDACTED_TEXT, None]  # redacted, then the file deleted
    assert MemoryFileVersion.objects.get(agent=agent, thread_id="t-2").content == "kept\n"
    assert Thread.objects.filter(pk=other.pk).exists()


@pytest.mark.django_db
def test_clearing_a_thread_deletes_its_entries_and_keeps_it() -> None:
    agent = AgentFactory(slug="alice")
    thread, e = _conversation(agent)
    item = MemoryItemFactory(agent=agent, value="v", evidence=[{"entry_id": e["q1"].pk, "quote": "passport"}])

    counts = thread_clear(thread=thread, actor="test")

    assert counts["entries_deleted"] == 7 and counts["items_purged"] == 1
    assert not Entry.objects.filter(thread=thread).exists()
    assert not MemoryItem.objects.filter(pk=item.pk).exists()
    thread.refresh_from_db()
    assert thread.active_leaf_id is None


# --- files, vectors, summaries ----------------------------------------------------------------------


def test_a_file_whose_head_was_redacted_leaves_the_listing_and_keeps_its_history(alice: Caller) -> None:
    _, e = _conversation(alice.agent)
    url = f"/api/v1/memory-tool?user_id=u-ana&place={e['a1'].pk}"
    create_memory_file(alice, "/memories/passport-X12345678.md", "X12345678\n", url)
    create_memory_file(alice, "/memories/other.md", "other\n", "/api/v1/memory-tool?user_id=u-ana")

    counts = entries_redact(entry=e["q1"], actor="test")

    assert counts["file_versions"] == 1
    status, listing = use_memory_tool(
        alice, {"command": "view", "path": "/memories"}, "/api/v1/memory-tool?user_id=u-ana"
    )
    assert status == 200 and "passport" not in json.dumps(listing) and "other.md" in json.dumps(listing)
    history = MemoryFileVersion.objects.filter(agent=alice.agent, path="/memories/passport-X12345678.md")
    assert [v.content for v in history.order_by("sequence")] == [REDACTED_TEXT, None]


@pytest.mark.django_db
def test_vectors_and_summaries_go_with_their_entries() -> None:
    agent = AgentFactory(slug="alice")
    thread, e = _conversation(agent)
    Entry.objects.filter(pk__in=[e["q1"].pk, e["a1"].pk]).update(embedding=[0.1] * 384)
    summary = EntryFactory(
        thread=thread,
        type="compaction",
        role="user",
        content="[condensed] passport noted",
        event={"summary": "passport noted", "first_kept_entry_id": e["q2"].pk},
    )

    counts = entry_delete(entry=e["q1"], actor="test")

    assert counts["vectors"] >= 2 and counts["summaries"] == 1
    assert not Entry.objects.filter(pk=summary.pk).exists()


# --- stopped part way, run again -------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_cascade_stopped_between_its_steps_changes_nothing_and_completes_when_run_again(no_hook: None) -> None:
    agent = AgentFactory(slug="alice")
    _, e = _conversation(agent)
    item = MemoryItemFactory(agent=agent, value="v", evidence=[{"entry_id": e["a1"].pk, "quote": "passport"}])

    def fail(step: str) -> None:
        if step == "derived":
            raise Stop(step)

    cascade_step_hook(fail)
    with pytest.raises(Stop):
        entries_forget(agent=agent, entry_ids=[e["q1"].pk], actor="test")
    # The derived memory went in the same transaction as the entries: all of it stands again.
    assert MemoryItem.objects.filter(pk=item.pk).exists() and all(_exists(*e.values()))

    cascade_step_hook(None)
    counts = entries_forget(agent=agent, entry_ids=[e["q1"].pk], actor="test")
    assert counts["entries_deleted"] == 5 and counts["items_purged"] == 1


@pytest.mark.django_db(transaction=True)
def test_an_erasure_stopped_between_batches_is_run_again_and_completes(no_hook: None) -> None:
    agent = AgentFactory(slug="alice")
    for i in range(5):
        thread = ThreadFactory(agent=agent, external_id=f"t-eve-{i}", user_id="u-eve")
        said = EntryFactory(thread=thread, role="user", content=f"eve secret {i}")
        MemoryItemFactory(
            agent=agent, user_id="u-eve", attribute=f"a{i}", evidence=[{"entry_id": said.pk, "quote": "eve secret"}]
        )
    ThreadFactory(agent=agent, external_id="t-ana", user_id="u-ana", turns=[("user", "ana stays")])
    batches = 0

    def fail(step: str) -> None:
        nonlocal batches
        batches += 1
        if step == "batch" and batches == 3:  # the items' batch, then two batches of threads
            raise Stop(step)

    cascade_step_hook(fail)
    with pytest.raises(Stop):
        person_erase(user_id="u-eve", agent_ids=[agent.pk], batch_size=2, actor="test")
    left = Thread.objects.filter(agent=agent, user_id="u-eve").count()
    assert left == 1  # two batches of two threads committed before the fault, one is left

    cascade_step_hook(None)
    counts = person_erase(user_id="u-eve", agent_ids=[agent.pk], batch_size=2, actor="test")
    assert counts["threads"] == 1 and counts["entries_deleted"] == 1
    assert not Thread.objects.filter(agent=agent, user_id="u-eve").exists()
    assert not MemoryItem.objects.filter(agent=agent, user_id="u-eve").exists()
    assert Thread.objects.filter(agent=agent, user_id="u-ana").exists()

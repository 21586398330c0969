"""Change events: every write that changes memory is an event of ids, numbered per agent in commit order."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone
from rest_framework.test import APIClient

from memoryapp.compaction.services import compaction_run
from memoryapp.events.selectors import events_after, events_last_seq
from memoryapp.events.services import event_record, events_prune
from memoryapp.files.access import FileAccess
from memoryapp.files.services import file_put, files_redact
from memoryapp.forgetting.services import entry_delete, entry_redact, thread_delete
from memoryapp.items.services import StaleMark, item_approve, item_forget, item_reject, item_write, items_mark_stale
from memoryapp.models import Agent, Entry, Event, Thread
from memoryapp.threads.services import entries_add, entry_add, thread_create, thread_fork
from tests.kit.api import Caller, error_of, get_ok, post_entry, post_thread
from tests.kit.concurrency import in_threads
from tests.kit.events import events_number_now
from tests.kit.factories import AgentFactory, ThreadFactory

PAGE = "/api/v1/events/page"


def _types(agent: Agent, after: int = 0) -> list[str]:
    return [e.type for e in events_after(agent_id=agent.pk, after=after, limit=1000)]


def test_every_write_that_changes_memory_is_an_event_of_ids_in_the_order_of_its_writes(alice: Caller) -> None:
    agent = alice.agent
    thread = ThreadFactory(agent=agent, external_id="t-ev")
    first = entry_add(thread=thread, role="user", content="I am allergic to peanuts, my secret word is ZEBRA.")
    batch = entries_add(
        thread=thread, entries=[{"role": "assistant", "content": "Noted."}, {"role": "user", "content": "ok"}]
    )
    suggested = item_write(
        agent=agent, kind="fact", subject="Ana", attribute="allergy", value="peanuts ZEBRA", trust="model",
        evidence=[{"entry_id": first.id, "quote": "allergic to peanuts"}],
    )  # fmt: skip
    item_approve(item=suggested, actor="staff:rita")
    other = item_write(agent=agent, kind="fact", subject="Ana", attribute="city", value="Porto", trust="model")
    item_reject(item=other, actor="staff:rita")
    items_mark_stale(marks=[StaleMark(item_id=suggested.pk, because={"by": "dedupe"})], actor="dedupe")
    kept = item_write(agent=agent, kind="fact", subject="Ana", attribute="pet", value="a cat", trust="system")
    item_forget(item=kept, actor="agent:alice")
    access = FileAccess(agent=agent, user_id="u-ana", thread_id="t-ev", actor="agent:alice")
    version = file_put(access=access, path="/memories/notes.md", text="ZEBRA is the word")
    files_redact(access=access, paths=["/memories/notes.md"], reason="test")
    compaction_run(thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 0, "clear_at_least": 0})
    fork = thread_fork(thread=thread, entry_id=batch[0].id, new_thread_id="t-ev-fork")
    entry_redact(entry=Entry.objects.get(pk=batch[1].id), reason="test")
    entry_delete(entry=Entry.objects.get(pk=first.id))
    thread_delete(thread=Thread.objects.get(pk=fork.pk))
    events_number_now()

    events = events_after(agent_id=agent.pk, after=0, limit=100)
    kinds = [e.type for e in events]
    assert kinds[:2] == ["entry.added", "entry.added"]
    assert kinds.count("item.written") == 3 and kinds.count("item.activated") == 1
    assert "item.rejected" in kinds and "item.stale" in kinds and "item.forgotten" in kinds
    assert kinds.index("file.version") < kinds.index("file.redacted") < kinds.index("entry.redacted")
    # The deleted entry had a copy in the fork: it goes too, then the fork itself. The item quoting
    # it goes before it (the cascade takes derived memory first), named in its own event.
    assert kinds[-5:] == ["entry.redacted", "item.forgotten", "entry.deleted", "entry.deleted", "thread.deleted"]
    assert events[-4].ids == [suggested.pk]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert events[0].ids == [first.id] and events[1].ids == [e.id for e in batch]
    assert events[0].thread_id == "t-ev"
    assert next(e for e in events if e.type == "file.version").ids == [version.pk]
    # The fork's copies were announced in the fork's thread (and went with it: thread.deleted).
    fork_added = next(e for e in events if e.type == "entry.added" and e.thread_id == "t-ev-fork")
    assert len(fork_added.ids) == 2 and not set(fork_added.ids) & {first.id, batch[0].id}
    # Ids and types only: none of what was said is in any event.
    text = json.dumps([{"type": e.type, "ids": e.ids, "thread": e.thread_id} for e in events])
    assert "ZEBRA" not in text and "peanuts" not in text


def test_a_write_that_fails_records_no_event(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-rollback")
    with pytest.raises(RuntimeError), transaction.atomic():
        entry_add(thread=thread, role="user", content="this never happened")
        raise RuntimeError("the request failed after the write")
    error_of(alice.client.post("/api/v1/threads/t-rollback/entries", {"role": "nobody"}, format="json"), 400)
    events_number_now()
    assert events_after(agent_id=alice.agent.pk, after=0) == []


def test_an_event_is_numbered_when_it_commits_not_when_it_is_written(transactional_db: None) -> None:
    """A writes its event first and commits last: B's event, committed first, is 1 and A's is 2. A reader
    that resumed after 1 (B's) still gets A's, which a number taken at insert would have put before it."""
    agent = AgentFactory(slug="ordered")
    slow = thread_create(agent=agent, external_id="slow")
    fast = thread_create(agent=agent, external_id="fast")
    a_wrote, b_committed = threading.Event(), threading.Event()
    seen_between: list[list[int]] = []

    def writer_a() -> str:
        with transaction.atomic():
            entry = entry_add(thread=slow, role="user", content="written first")
            a_wrote.set()
            assert b_committed.wait(30)
            # B is committed, A is not: a reader sees B's event alone, numbered 1.
            seen_between.append(
                [e.seq for e in in_threads(lambda: events_after(agent_id=agent.pk, after=0))[0]]  # type: ignore[union-attr]
            )
        return entry.id

    def writer_b() -> str:
        assert a_wrote.wait(30)
        entry = entry_add(thread=fast, role="user", content="written second")
        b_committed.set()
        return entry.id

    a_entry, b_entry = in_threads(writer_a, writer_b)
    assert isinstance(a_entry, str) and isinstance(b_entry, str), (a_entry, b_entry)
    assert seen_between == [[1]]
    events = events_after(agent_id=agent.pk, after=0)
    assert [(e.seq, e.ids) for e in events] == [(1, [b_entry]), (2, [a_entry])]
    # Inserted in the other order: a sequence taken at insert would have given A the smaller number.
    assert events[1].pk < events[0].pk
    assert events_after(agent_id=agent.pk, after=1)[0].ids == [a_entry]


@pytest.mark.slow
def test_concurrent_writers_get_gap_free_numbers_and_a_reader_never_sees_a_number_before_a_smaller_one(
    transactional_db: None,
) -> None:
    """8 writers append 25 entries each (one transaction per entry, threads of their own) while a
    reader follows the stream from where it stopped: it gets every event once, in order, and never
    meets a number whose predecessor is missing (which a reader would skip for good)."""
    agent = AgentFactory(slug="busy")
    threads = [thread_create(agent=agent, external_id=f"w-{n}") for n in range(8)]
    done = threading.Event()
    read: list[int] = []
    holes: list[tuple[int, int]] = []

    def writer(thread: Thread) -> list[str]:
        return [entry_add(thread=thread, role="user", content=f"turn {n}").id for n in range(25)]

    def reader() -> None:
        position = 0
        while True:
            finished = done.is_set()
            for event in events_after(agent_id=agent.pk, after=position, limit=50):
                assert event.seq is not None
                if event.seq != position + 1:
                    holes.append((position, event.seq))
                position = event.seq
                read.append(event.seq)
            if finished and position >= 200:
                return
            if finished and time.monotonic() > deadline:
                return
            time.sleep(0.005)

    deadline = time.monotonic() + 120
    follower = threading.Thread(target=lambda: in_threads(reader))
    follower.start()
    written = in_threads(*[lambda t=t: writer(t) for t in threads], timeout=120)
    done.set()
    follower.join(timeout=130)
    assert all(isinstance(w, list) for w in written), written
    assert holes == []
    assert read == list(range(1, 201))
    events = events_after(agent_id=agent.pk, after=0, limit=1000)
    assert sorted(i for e in events for i in e.ids) == sorted(i for w in written for i in w)
    assert events_last_seq(agent_id=agent.pk) == 200
    # Commit times follow the numbers.
    times = [e.at for e in events]
    assert times == sorted(times)  # type: ignore[type-var]


def test_the_event_page_answers_the_agents_own_events_and_never_another_agents(alice: Caller, bob: Caller) -> None:
    post_thread(alice, "t-a")
    post_entry(alice, "t-a", role="user", content="hello")
    post_thread(bob, "t-b")
    post_entry(bob, "t-b", role="user", content="hi")
    post_entry(bob, "t-b", role="user", content="there")
    events_number_now()

    mine = get_ok(alice.client, PAGE)
    assert [(e["seq"], e["type"], e["thread_id"]) for e in mine["results"]] == [(1, "entry.added", "t-a")]
    assert mine["last_seq"] == 1 and mine["next_after"] == 1 and "missed" not in mine
    theirs = get_ok(bob.client, PAGE, {"after": 0, "limit": 1})
    assert [e["thread_id"] for e in theirs["results"]] == ["t-b"] and theirs["next_after"] == 1
    assert theirs["last_seq"] == 2
    assert [e["seq"] for e in get_ok(bob.client, PAGE, {"after": 1})["results"]] == [2]
    # Every id bob's events name is bob's.
    ids = {i for e in get_ok(bob.client, PAGE)["results"] for i in e["ids"]}
    assert ids and set(Entry.objects.filter(id__in=ids).values_list("agent__slug", flat=True)) == {"bob"}
    assert get_ok(alice.client, PAGE, {"types": "item.written"})["results"] == []


def test_the_event_page_refuses_a_bad_position_or_an_unknown_type(alice: Caller, anonymous: APIClient) -> None:
    assert error_of(alice.client.get(PAGE, {"after": -1}))["field"] == "after"
    assert error_of(alice.client.get(PAGE, {"types": "entry.added,entry.eaten"}))["field"] == "types"
    assert error_of(alice.client.get(PAGE, {"limit": 0}))["field"] == "limit"
    assert error_of(alice.client.get(PAGE, {"colour": "blue"}))["field"] == "colour"
    assert error_of(anonymous.get(PAGE), 401)["code"] == "not_authenticated"


def test_pruned_events_are_gone_and_a_reader_from_before_them_is_told_what_it_missed(alice: Caller) -> None:
    post_thread(alice, "t-old")
    for n in range(3):
        post_entry(alice, "t-old", role="user", content=f"turn {n}")
    events_number_now()
    Event.objects.filter(agent=alice.agent, seq__lte=2).update(at=timezone.now() - timedelta(days=40))

    pruned = events_prune(older_than=timezone.now() - timedelta(days=30))

    assert pruned["events"] == 2
    page = get_ok(alice.client, PAGE, {"after": 0})
    assert [e["seq"] for e in page["results"]] == [3]
    assert page["missed"] == {"from_seq": 1, "to_seq": 2}
    assert "missed" not in get_ok(alice.client, PAGE, {"after": 2})


def test_a_write_of_many_entries_is_told_in_events_of_at_most_a_thousand_ids_in_their_order(alice: Caller) -> None:
    thread = ThreadFactory(agent=alice.agent, external_id="t-big")
    written = entries_add(thread=thread, entries=[{"role": "user", "content": f"n{n}"} for n in range(1000)])
    copy = thread_fork(thread=thread, entry_id=written[-1].id, new_thread_id="t-big-fork")
    events_number_now()
    events = events_after(agent_id=alice.agent.pk, after=0)
    assert [(e.type, e.thread_id, len(e.ids)) for e in events] == [
        ("entry.added", "t-big", 1000),
        ("entry.added", "t-big-fork", 1000),
    ]
    entry_add(thread=copy, role="user", content="one more")  # seq 3
    entries_add(thread=thread, entries=[{"role": "user", "content": f"m{n}"} for n in range(2)])  # seq 4
    with transaction.atomic():
        event_record(agent_id=alice.agent.pk, type="entry.added", thread_id="t-big", ids=[f"x{n}" for n in range(2500)])
    events_number_now()
    tail = events_after(agent_id=alice.agent.pk, after=4)
    assert [len(e.ids) for e in tail] == [1000, 1000, 500]
    assert [i for e in tail for i in e.ids] == [f"x{n}" for n in range(2500)]
    assert [e.seq for e in tail] == [5, 6, 7]


def test_an_unknown_event_type_is_a_programming_error(alice: Caller) -> None:
    with pytest.raises(ValueError, match=r"entry\.eaten"):
        event_record(agent_id=alice.agent.pk, type="entry.eaten", ids=["x"])


def test_events_of_an_agent_go_with_the_agent(db: Any) -> None:
    agent = AgentFactory(slug="leaving")
    ThreadFactory(agent=agent, external_id="t", turns=[("user", "hi")])
    events_number_now()
    assert Event.objects.filter(agent=agent).count() == 1
    Agent.objects.filter(pk=agent.pk).delete()
    assert not Event.objects.filter(agent_id=agent.pk).exists()

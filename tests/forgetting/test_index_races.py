"""The subject index against writers on other connections (issue 25 §2), interleaved by who waits
on whom (`pg_blocking_pids`), never by sleeps; every wait bounded.

1. A rebuild inserting a mention that a writer's open transaction inserts too (the writer rewrote a
   row the rebuild's scan had read): the rebuild waits on the writer's row, the writer commits,
   and the rebuild's insert meets it. It must keep the writer's row (ON CONFLICT DO NOTHING) and
   end with the rows its scan found, not fail with the unique violation (and the erasure or the
   export calling it with it).
2. A merge of two entities named in a person's index against that person's erasure: the merge
   holds both entities and deletes the merged one (its index rows go, in its transaction, by the
   trigger of migration 0055) while the erasure rebuilt the person's index (deleting and
   inserting her rows) and waits on an entity it redacts. Each waited on the other: PostgreSQL
   aborted one (a deadlock), the erasure or the staff merge. Both must finish.
3. A thread's delete against the erasure of a person its entries name: the delete's trigger
   waited on the index rows the erasure's rebuild had deleted, while the erasure went on to
   redact the entries the delete held: a deadlock again. Both must finish, neither run again.
4. The same delete against an erasure that holds one of the thread's turns (entries in id order)
   and then wants the thread itself (its metadata names her): the delete, holding the thread,
   waited on the turn. The erasure locks the threads first now, as every cascade does: the delete
   waits for it, and nothing is run again.
5. A writer that takes her out of a row after the erasure's scan read it: the erasure, waiting on
   the row's lock, reads it again and counts no redaction that changed nothing.
6. A run's publish against an erasure holding the run's thread (a turn of it names her) that then
   redacts the run's snapshot: the publish holds the run while its events' key share on the thread
   waited on the erasure's lock. The erasure's thread locks are FOR NO KEY UPDATE: both finish.
7. A fork's delete against the erasure of a turn it copied: the delete locked the fork, then its
   origin (to forget the fork's name); the erasure locks the origin, then the fork. The delete now
   locks the origin with the fork, in pk order: nothing is run again. The same for another person's
   erasure of her threads (a fork among them).
8. A write naming her in flight as her erasure starts, committing after its scan: its row was not
   redacted and its mention dropped from the index. The erasure's mark (memoryapp.subjects.erasing)
   now waits for it, and the scan sees it.
9. Writes naming her between her erasure's scan and its end (a turn, found before it is stored; a
   run's events, found once stored): stored naming her, their mentions dropped. They read the mark
   now, and store the placeholder.
10. A thread's delete against the erasure of a file version of the thread's scope (`thread_id`,
    not placed at it): the erasure did not hold the thread, and the delete took the version from
    under it. The erasure locks the threads of the scopes of its file versions (and of the items
    about an entity naming her) now: the delete waits for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import QuerySet

from memoryapp.forgetting.mentions import mentions_erase
from memoryapp.forgetting.person import _threads_erase
from memoryapp.forgetting.services import thread_delete
from memoryapp.graph.services import entity_merge
from memoryapp.ledger.services import events_check, ledger_publish
from memoryapp.models import (
    Agent,
    Entity,
    Entry,
    MemoryFileVersion,
    MemoryItem,
    RunEvent,
    SubjectMention,
    Thread,
    ThreadRun,
)
from memoryapp.subjects.index import mentions_scan, person_matcher, subject_index_rebuild
from memoryapp.threads.services import thread_update
from tests.kit.api import MEMORY_TOOL, Caller, create_memory_file, post_entry, post_item, post_ok, post_thread
from tests.kit.concurrency import started
from tests.kit.mentions import EMAIL, IDENTIFIERS, NAME, PERSON
from tests.threads.test_run_ledger import SNAP_1

pytestmark = pytest.mark.django_db(transaction=True)

WAIT = 30.0  # seconds any side waits for another before the test fails (never reached when it works)
Table = SubjectMention.Table


def _pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def _blocked_by(waiter: int, holder: int) -> bool:
    """Whether the backend `waiter` waits on a lock `holder` holds (read on this thread's connection)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s = ANY(pg_blocking_pids(%s))", [holder, waiter])
        return bool(cursor.fetchone()[0])


def _until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if done():
            return
        time.sleep(0.01)  # polling a condition, not waiting for a race
    raise AssertionError(f"never: {what}")


class Side:
    """Work on a thread of its own with its own connection: its backend pid once known, whether it
    finished, what it answered."""

    def __init__(self, work: Callable[[], Any], name: str) -> None:
        self.pid: int | None = None
        self.answer: Any = None
        self.errors: list[BaseException] = []
        self.ready = threading.Event()

        def run() -> None:
            self.pid = _pid()
            self.ready.set()
            self.answer = work()

        self.thread = started(run, self.errors, name=name)
        assert self.ready.wait(WAIT), name

    def waits_on(self, other: Side) -> bool:
        assert self.pid is not None and other.pid is not None
        return _blocked_by(self.pid, other.pid)

    def join(self) -> None:
        self.thread.join(WAIT)
        assert not self.thread.is_alive(), f"{self.thread.name} still runs"


def _holding(rows: QuerySet[Any]) -> tuple[Side, threading.Event]:
    """A third transaction holding `rows` locked (FOR UPDATE) until the event answered is set: what
    makes one side wait, holding what it locked before, while the other goes on."""
    release = threading.Event()
    held = threading.Event()

    def holder() -> None:
        with transaction.atomic():
            list(rows.select_for_update())
            held.set()
            assert release.wait(WAIT)

    hold = Side(holder, "holder")
    assert held.wait(WAIT)
    return hold, release


def _key_sharing(thread: Thread) -> tuple[Side, threading.Event]:
    """`_holding` with the key share a row inserted in the thread takes (the ORM has no such lock):
    a delete or a `thread_lock` waits on it, the erasure's FOR NO KEY UPDATE does not."""
    release = threading.Event()
    held = threading.Event()

    def holder() -> None:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM memoryapp_thread WHERE id = %s FOR KEY SHARE", [thread.pk])
            held.set()
            assert release.wait(WAIT)

    hold = Side(holder, "holder")
    assert held.wait(WAIT)
    return hold, release


def _erasing(agent: Agent) -> Side:
    """The erasure of her mentions (registered identifiers), on a connection of its own."""
    return Side(
        lambda: mentions_erase(agent_id=agent.pk, matcher=person_matcher(agent_id=agent.pk, user_id=PERSON)),
        "erasure",
    )


def _finished_once(caplog: pytest.LogCaptureFixture, *sides: Side) -> None:
    """Every side finished without an error, and none was a deadlock's victim run again
    (`atomic_retrying` logs each lock conflict it lost)."""
    for side in sides:
        side.join()
    for side in sides:
        assert not side.errors, (side.thread.name, side.errors)
    assert not [r for r in caplog.records if "lost a lock conflict" in r.getMessage()]


def _register(caller: Caller) -> None:
    answer = caller.client.put(f"/api/v1/users/{PERSON}/identifiers", IDENTIFIERS, format="json")
    assert answer.status_code == 200, answer.content


def _indexed(agent: Agent) -> set[tuple[str, str]]:
    return set(SubjectMention.objects.filter(agent=agent, user_id=PERSON).values_list("table", "row_id"))


def _scanned(agent: Agent) -> set[tuple[str, str]]:
    found = mentions_scan(agent_id=agent.pk, matcher=person_matcher(agent_id=agent.pk, user_id=PERSON))
    return {(table, row_id) for table, ids in found.items() for row_id in ids}


def test_a_rebuild_meeting_a_writers_mention_of_the_same_row_keeps_it(alice: Caller) -> None:
    _register(alice)
    post_thread(alice, "t-carl", user_id="u-carl", metadata={"contact": EMAIL})
    agent = Agent.objects.get(pk=alice.agent.pk)
    thread = Thread.objects.get(agent=agent, external_id="t-carl")
    # The thread was written before the index knew her (a rebuild job's case: identifiers changed).
    SubjectMention.objects.filter(agent=agent, user_id=PERSON).delete()

    commit = threading.Event()
    written = threading.Event()

    def writer() -> None:
        # Another request edits the thread's metadata (still naming her): its mention is inserted,
        # in a transaction held open until the rebuild waits on it.
        with transaction.atomic():
            thread_update(thread=thread, metadata={"note": f"write to {EMAIL}"}, actor="test")
            written.set()
            assert commit.wait(WAIT)

    write = Side(writer, "writer")
    assert written.wait(WAIT)
    rebuild = Side(lambda: subject_index_rebuild(agent_id=agent.pk, user_id=PERSON), "rebuild")
    _until(lambda: rebuild.waits_on(write), "the rebuild waited on the writer's mention")
    commit.set()
    write.join()
    rebuild.join()

    assert not write.errors, write.errors
    assert not rebuild.errors, rebuild.errors  # before: IntegrityError (subject_mention_uniq)
    assert rebuild.answer[Table.THREAD] == [str(thread.pk)]
    assert _indexed(agent) == _scanned(agent) == {(Table.THREAD, str(thread.pk))}


def _entity_named(caller: Caller, name: str, aliases: list[str]) -> Entity:
    item = post_item(caller, kind="fact", subject=name, attribute="meets", value="on Fridays")
    entity = Entity.objects.get(pk=MemoryItem.objects.get(pk=item["id"]).entity_id)
    Entity.objects.filter(pk=entity.pk).update(aliases=aliases)
    return entity


def test_a_merge_and_her_erasure_both_finish_when_each_holds_what_the_other_needs(
    alice: Caller, caplog: pytest.LogCaptureFixture
) -> None:
    _register(alice)
    agent = Agent.objects.get(pk=alice.agent.pk)
    keep = _entity_named(alice, "Boat club", [f"{NAME}'s club"])
    merged = _entity_named(alice, "Sailing club", [NAME])
    subject_index_rebuild(agent_id=agent.pk, user_id=PERSON)
    assert {(Table.ENTITY, keep.pk), (Table.ENTITY, merged.pk)} <= _indexed(agent)
    merged_item = MemoryItem.objects.get(agent=agent, entity_id=merged.pk)

    # A third transaction holds an item about the merged entity: the merge, having locked both
    # entities, waits here until the erasure is under way.
    hold, release = _holding(MemoryItem.objects.filter(pk=merged_item.pk))
    merge = Side(
        lambda: entity_merge(
            agent=agent, keep=Entity.objects.get(pk=keep.pk), merged=Entity.objects.get(pk=merged.pk), actor="test"
        ),
        "merge",
    )
    _until(lambda: merge.waits_on(hold), "the merge waited on the held item")
    erasure = _erasing(agent)
    _until(lambda: erasure.waits_on(merge), "the erasure waited on the merge's entities")
    release.set()
    _finished_once(caplog, hold, merge, erasure)  # before: one of the two aborted, DeadlockDetected
    # The merge went through, then the erasure redacted her from the entity kept, whose other names
    # are the merge's (not the erasure's first read of them), and the index forgot her.
    assert not Entity.objects.filter(pk=merged.pk).exists()
    kept = Entity.objects.get(pk=keep.pk)
    assert "Sailing club" in kept.aliases
    assert not person_matcher(agent_id=agent.pk, user_id=PERSON).holds([kept.name, kept.aliases])
    assert _indexed(agent) == set()
    assert set(MemoryItem.objects.filter(agent=agent).values_list("entity_id", flat=True)) == {keep.pk}


def test_a_thread_delete_and_her_erasure_both_finish_without_a_deadlock(
    alice: Caller, caplog: pytest.LogCaptureFixture
) -> None:
    _register(alice)
    agent = Agent.objects.get(pk=alice.agent.pk)
    post_thread(alice, "t-carl", user_id="u-carl")
    for content in (f"Please call {NAME} about the trip.", f"I will write to {EMAIL} today."):
        post_entry(alice, "t-carl", role="user", content=content)
    item = post_item(alice, kind="fact", subject="Lisbon trip", attribute="organiser", value=f"{NAME} organises it")
    thread = Thread.objects.get(agent=agent, external_id="t-carl")
    entries = {(Table.ENTRY, str(pk)) for pk in Entry.objects.filter(thread=thread).values_list("pk", flat=True)}
    assert entries <= _indexed(agent)

    # A third transaction holds the agent-wide item naming her: the erasure, its index rebuilt,
    # waits here before it reaches the thread's entries.
    hold, release = _holding(MemoryItem.objects.filter(pk=item["id"]))
    erasure = _erasing(agent)
    _until(lambda: erasure.waits_on(hold), "the erasure waited on the held item")
    delete = Side(lambda: thread_delete(thread=thread, actor="test"), "delete")
    # Before: the delete's trigger waited on the index rows the erasure's rebuild held. Now it
    # waits on nothing of the erasure's and is done.
    _until(lambda: not delete.thread.is_alive() or delete.waits_on(erasure), "the delete finished or waited")
    release.set()
    _finished_once(caplog, hold, delete, erasure)
    assert not Thread.objects.filter(pk=thread.pk).exists()
    assert not Entry.objects.filter(pk__in=[row_id for _, row_id in entries]).exists()
    assert NAME not in MemoryItem.objects.get(pk=item["id"]).value
    assert _indexed(agent) == set()


def test_a_thread_delete_and_her_erasure_of_its_entries_and_metadata_lock_in_one_order(
    alice: Caller, caplog: pytest.LogCaptureFixture
) -> None:
    _register(alice)
    agent = Agent.objects.get(pk=alice.agent.pk)
    # One thread names her in its metadata and in a turn; another thread's later turn names her too.
    post_thread(alice, "t-carl", user_id="u-carl", metadata={"contact": EMAIL})
    first = post_entry(alice, "t-carl", role="user", content=f"Please call {NAME} about the trip.")
    post_thread(alice, "t-dora", user_id="u-dora")
    later = post_entry(alice, "t-dora", role="user", content=f"I will write to {EMAIL} today.")
    assert first["id"] < later["id"]
    thread = Thread.objects.get(agent=agent, external_id="t-carl")
    assert {(Table.THREAD, str(thread.pk)), (Table.ENTRY, first["id"]), (Table.ENTRY, later["id"])} <= _indexed(agent)

    # A third transaction holds the later turn: the erasure, going through her entries in id
    # order, waits here holding the first.
    hold, release = _holding(Entry.objects.filter(pk=later["id"]))
    erasure = _erasing(agent)
    _until(lambda: erasure.waits_on(hold), "the erasure waited on the held turn")
    delete = Side(lambda: thread_delete(thread=thread, actor="test"), "delete")
    # Before: the delete locked the thread, then waited on the first turn the erasure held; the
    # erasure, given the later turn, went on to the thread's metadata and waited on the delete.
    # Now the erasure locked the thread before any entry: the delete waits for it.
    _until(lambda: delete.waits_on(erasure), "the delete waited on the erasure")
    release.set()
    _finished_once(caplog, hold, erasure, delete)
    assert erasure.answer.counts["mentions_redacted_entry"] == 2
    assert erasure.answer.counts["mentions_redacted_thread"] == 1
    assert not Thread.objects.filter(pk=thread.pk).exists()
    assert NAME not in Entry.objects.get(pk=later["id"]).text
    assert EMAIL not in Entry.objects.get(pk=later["id"]).text
    assert _indexed(agent) == set()


def test_her_erasure_counts_no_redaction_of_a_row_a_writer_stopped_naming_her(alice: Caller) -> None:
    _register(alice)
    agent = Agent.objects.get(pk=alice.agent.pk)
    post_thread(alice, "t-carl", user_id="u-carl", metadata={"contact": EMAIL})
    thread = Thread.objects.get(agent=agent, external_id="t-carl")
    assert _indexed(agent) == {(Table.THREAD, str(thread.pk))}

    commit = threading.Event()
    written = threading.Event()

    def writer() -> None:
        # Another request rewrites the thread's metadata, naming her no more, in a transaction held
        # open until the erasure (which read the metadata before) waits on the thread.
        with transaction.atomic():
            thread_update(thread=thread, metadata={"contact": "the front desk"}, actor="test")
            written.set()
            assert commit.wait(WAIT)

    write = Side(writer, "writer")
    assert written.wait(WAIT)
    erasure = _erasing(agent)
    _until(lambda: erasure.waits_on(write), "the erasure waited on the writer's thread")
    commit.set()
    write.join()
    erasure.join()

    assert not write.errors, write.errors
    assert not erasure.errors, erasure.errors
    # Before: the erasure's scan found the metadata naming her, the writer's commit took her out,
    # and the erasure counted a redaction that changed nothing.
    assert erasure.answer.counts.get("mentions_redacted_thread", 0) == 0
    assert Thread.objects.get(pk=thread.pk).metadata == {"contact": "the front desk"}
    assert _indexed(agent) == set()


def test_a_runs_publish_and_her_erasure_of_its_snapshot_both_finish_without_a_deadlock(
    alice: Caller, caplog: pytest.LogCaptureFixture
) -> None:
    _register(alice)
    agent = Agent.objects.get(pk=alice.agent.pk)
    # Carl's run published a snapshot naming her; a turn of Carl's thread names her too.
    post_thread(alice, "t-carl", user_id="u-carl")
    run_id = post_ok(alice.client, "/api/v1/threads/t-carl/runs", {})["id"]
    said = {**SNAP_1, "messages": [{"role": "user", "content": f"Book a seat for {EMAIL}."}]}
    post_ok(
        alice.client,
        f"/api/v1/threads/t-carl/runs/{run_id}/events",
        {"events": [{"kind": "snapshot", "snapshot": said}]},
    )
    turn = post_entry(alice, "t-carl", role="user", content=f"Please call {NAME} about the trip.")
    thread = Thread.objects.get(agent=agent, external_id="t-carl")
    assert {(Table.THREAD_RUN, run_id), (Table.ENTRY, turn["id"])} <= _indexed(agent)

    # A third transaction holds the turn: the erasure waits here, holding the thread.
    hold, release = _holding(Entry.objects.filter(pk=turn["id"]))
    erasure = _erasing(agent)
    _until(lambda: erasure.waits_on(hold), "the erasure waited on the held turn")
    # The run goes on streaming: its publish locks the run, then inserts its events (their key
    # share on the thread, which the erasure holds).
    publish = Side(
        lambda: ledger_publish(
            agent=agent, thread=thread, run_id=run_id, events=events_check({"kind": "text_delta", "delta": "ok"})
        ),
        "publish",
    )
    # Before, the erasure held the thread FOR UPDATE: the publish waited on it, holding the run the
    # erasure went on to lock once the turn was released (a deadlock, the publish its victim). Now
    # its lock is FOR NO KEY UPDATE, and the publish goes through.
    _until(lambda: not publish.thread.is_alive() or publish.waits_on(erasure), "the publish ran or waited")
    release.set()
    _finished_once(caplog, hold, erasure, publish)
    assert erasure.answer.counts["mentions_redacted_thread_run"] == 1
    assert EMAIL not in str(ThreadRun.objects.get(pk=run_id).snapshot)


def test_a_forks_delete_and_her_erasure_of_it_and_its_origin_lock_in_one_order(
    alice: Caller, caplog: pytest.LogCaptureFixture
) -> None:
    _register(alice)
    agent = Agent.objects.get(pk=alice.agent.pk)
    post_thread(alice, "t-carl", user_id="u-carl")
    turn = post_entry(alice, "t-carl", role="user", content=f"Please call {NAME} about the trip.")
    post_ok(alice.client, "/api/v1/threads/t-carl/fork", {"entry_id": turn["id"], "new_thread_id": "t-carl-b"})
    origin = Thread.objects.get(agent=agent, external_id="t-carl")
    fork = Thread.objects.get(agent=agent, external_id="t-carl-b")
    assert origin.pk < fork.pk and fork.forked_from_id == origin.pk
    copy = Entry.objects.get(thread=fork)
    assert {(Table.ENTRY, turn["id"]), (Table.ENTRY, copy.pk)} <= _indexed(agent)

    # A third transaction holds a key share of the origin (a row being inserted in it): the fork's
    # delete, holding the fork, waits there to make the origin forget the fork's name.
    hold, release = _key_sharing(origin)
    delete = Side(lambda: thread_delete(thread=fork, actor="test"), "delete")
    _until(lambda: delete.waits_on(hold), "the delete waited on the origin")
    # Before, the delete held the fork and waited on the origin, its origin locked after it; the
    # erasure locked the origin, then waited on the fork; the holder gone, the delete waited on the
    # origin the erasure held: a deadlock. Now the delete locks the origin first: it holds nothing
    # of the erasure's while it waits.
    erasure = _erasing(agent)
    _until(lambda: not erasure.thread.is_alive() or erasure.waits_on(delete), "the erasure finished or waited")
    release.set()
    _finished_once(caplog, hold, delete, erasure)
    assert not Thread.objects.filter(pk=fork.pk).exists()
    assert NAME not in Entry.objects.get(pk=turn["id"]).text
    assert _indexed(agent) == set()


def test_anothers_erasure_of_a_fork_and_her_erasure_of_its_origin_lock_in_one_order(
    alice: Caller, caplog: pytest.LogCaptureFixture
) -> None:
    _register(alice)
    agent = Agent.objects.get(pk=alice.agent.pk)
    # Carl's thread names her; Dora's fork of it copied the turn.
    post_thread(alice, "t-carl", user_id="u-carl")
    turn = post_entry(alice, "t-carl", role="user", content=f"Please call {NAME} about the trip.")
    post_ok(alice.client, "/api/v1/threads/t-carl/fork", {"entry_id": turn["id"], "new_thread_id": "t-dora"})
    post_thread(alice, "t-dora", user_id="u-dora", status=200)
    origin = Thread.objects.get(agent=agent, external_id="t-carl")
    fork = Thread.objects.get(agent=agent, external_id="t-dora")
    assert origin.pk < fork.pk and fork.forked_from_id == origin.pk
    assert (Table.ENTRY, Entry.objects.get(thread=fork).pk) in _indexed(agent)

    # A key share of the origin held (a row being inserted in it): Dora's erasure of her threads,
    # holding the fork, waits there to make the origin forget the fork's name.
    hold, release = _key_sharing(origin)
    dora = Side(lambda: _threads_erase(agent_id=agent.pk, thread_pks=[fork.pk], actor="test"), "dora")
    _until(lambda: dora.waits_on(hold), "Dora's erasure waited on the origin")
    # Before, Dora's erasure locked the origin after the fork, and hers locks the origin, then the
    # fork: each waited on the other. Now Dora's locks the origin with the fork, in pk order.
    erasure = _erasing(agent)
    _until(lambda: not erasure.thread.is_alive() or erasure.waits_on(dora), "her erasure finished or waited")
    release.set()
    _finished_once(caplog, hold, dora, erasure)
    assert not Thread.objects.filter(pk=fork.pk).exists()
    assert NAME not in Entry.objects.get(pk=turn["id"]).text


def _agent_wide_item_held(caller: Caller) -> tuple[Side, threading.Event]:
    """An agent-wide item naming her (no thread: the erasure locks none for it), held by a third
    transaction: the erasure, marked and scanned, waits there before it redacts anything."""
    item = post_item(caller, kind="fact", subject="Lisbon trip", attribute="organiser", value=f"{NAME} organises it")
    return _holding(MemoryItem.objects.filter(pk=item["id"]))


def test_a_write_naming_her_in_flight_as_her_erasure_starts_is_redacted(alice: Caller) -> None:
    _register(alice)
    agent = Agent.objects.get(pk=alice.agent.pk)
    post_thread(alice, "t-carl", user_id="u-carl", metadata={"contact": "the front desk"})
    thread = Thread.objects.get(agent=agent, external_id="t-carl")
    assert _indexed(agent) == set()

    commit = threading.Event()
    written = threading.Event()

    def writer() -> None:
        # Another request writes the thread's metadata naming her (its mention recorded), in a
        # transaction held open until the erasure is under way.
        with transaction.atomic():
            thread_update(thread=thread, metadata={"contact": f"write to {EMAIL}"}, actor="test")
            written.set()
            assert commit.wait(WAIT)

    write = Side(writer, "writer")
    assert written.wait(WAIT)
    hold, release = _agent_wide_item_held(alice)
    erasure = _erasing(agent)
    # Before: the erasure scanned (the metadata named no one then) and waited on the held item.
    # Now: it waits for the writer before its scan.
    _until(lambda: erasure.waits_on(hold) or erasure.waits_on(write), "the erasure waited")
    commit.set()  # the writer commits: after the scan before, before it now
    write.join()
    release.set()
    hold.join()
    erasure.join()
    assert not write.errors, write.errors
    assert not erasure.errors, erasure.errors

    # Before: the metadata kept her e-mail, and the erasure dropped its mention from the index.
    assert EMAIL not in str(Thread.objects.get(pk=thread.pk).metadata)
    assert Thread.objects.get(pk=thread.pk).metadata == {"contact": "write to [erased person]"}
    assert erasure.answer.counts["mentions_redacted_thread"] == 1
    assert erasure.answer.counts["mentions_redacted_item"] == 1
    assert _indexed(agent) == set()


def test_writes_naming_her_between_her_erasures_scan_and_its_end_store_the_placeholder(alice: Caller) -> None:
    _register(alice)
    agent = Agent.objects.get(pk=alice.agent.pk)
    post_thread(alice, "t-dora", user_id="u-dora")
    run_id = post_ok(alice.client, "/api/v1/threads/t-dora/runs", {})["id"]
    hold, release = _agent_wide_item_held(alice)
    erasure = _erasing(agent)
    _until(lambda: erasure.waits_on(hold), "the erasure, its scan done, waited on the held item")

    def writer() -> None:
        # Requests of another client while the erasure runs: a turn (its people found before it
        # is stored) and a run's events (found once stored), both naming her.
        post_entry(alice, "t-dora", role="user", content=f"Please call {NAME} or write to {EMAIL}.")
        post_ok(
            alice.client,
            f"/api/v1/threads/t-dora/runs/{run_id}/events",
            {"events": [{"kind": "text_delta", "delta": f"I will write to {EMAIL}."}]},
        )

    write = Side(writer, "writer")
    write.join()  # committed while the erasure waits
    assert not write.errors, write.errors
    release.set()
    hold.join()
    erasure.join()
    assert not erasure.errors, erasure.errors

    # Before: both rows kept her name and e-mail, and the erasure dropped their mentions.
    turn = Entry.objects.get(thread__external_id="t-dora", agent=agent)
    assert turn.text == "Please call [erased person] or write to [erased person]."
    events = RunEvent.objects.filter(agent=agent, thread__external_id="t-dora")
    assert events.exists()
    assert all(EMAIL not in str(e.body) for e in events)
    assert "I will write to [erased person]." in str([e.body for e in events])
    assert not turn.key_people
    # The erasure counts the rows it changed: the held item, not what the writes stored redacted.
    counts = erasure.answer.counts
    assert counts["mentions_redacted_item"] == 1
    assert "mentions_redacted_entry" not in counts and "mentions_redacted_run_event" not in counts
    assert _indexed(agent) == set()
    assert _scanned(agent) == set()


def test_a_thread_delete_waits_for_her_erasure_of_a_file_of_the_threads_scope(
    alice: Caller, caplog: pytest.LogCaptureFixture
) -> None:
    _register(alice)
    agent = Agent.objects.get(pk=alice.agent.pk)
    post_thread(alice, "t-carl", user_id="u-carl")
    create_memory_file(alice, "/memories/contacts.md", f"Organiser: {NAME}\n", url=f"{MEMORY_TOOL}&thread_id=t-carl")
    thread = Thread.objects.get(agent=agent, external_id="t-carl")
    version = MemoryFileVersion.objects.get(agent=agent, path="/memories/contacts.md")
    assert version.thread_id == "t-carl" and version.place_id is None
    assert (Table.FILE_VERSION, str(version.pk)) in _indexed(agent)

    hold, release = _agent_wide_item_held(alice)
    erasure = _erasing(agent)
    _until(lambda: erasure.waits_on(hold), "the erasure waited on the held item")
    # The delete takes the thread, then the file versions of its scope. Before, the erasure had not
    # locked the thread of the version's scope (only the thread it was placed at): the delete went
    # through under it, and the erasure found the version it was to redact taken from it. Now the
    # erasure holds the thread, as for every row it changes, and the delete waits for it.
    delete = Side(lambda: thread_delete(thread=thread, actor="test"), "delete")
    _until(lambda: not delete.thread.is_alive() or delete.waits_on(erasure), "the delete finished or waited")
    assert delete.thread.is_alive(), "the delete went through while the erasure held the version's scope"
    release.set()
    _finished_once(caplog, hold, erasure, delete)
    assert erasure.answer.counts["mentions_redacted_file_version"] == 1
    assert not Thread.objects.filter(pk=thread.pk).exists()
    assert NAME not in str(list(MemoryFileVersion.objects.filter(agent=agent).values_list("content", flat=True)))

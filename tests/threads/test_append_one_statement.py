"""A plain single append in one statement (issue 26, memoryapp.threads.services._append_one_fast):
what it stores is what the transaction of `thread_append` stores, writers of one thread keep their
seqs gap-free and the thread's counters equal to its rows under concurrency, a thread deleted while
an append waits on it answers 404 with nothing written, and every append that is not a plain one
goes the other way (`thread_append`), as before."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from governance.models import AuditRecord
from memoryapp.api import threads as threads_api
from memoryapp.forgetting.services import thread_delete
from memoryapp.models import Entry, Event, Thread
from memoryapp.models.choices import EntryType
from memoryapp.threads import services
from memoryapp.threads.hashing import content_hash, hashed_turn
from memoryapp.tokens import count_message_tokens
from tests.forgetting.test_index_races import WAIT, Side, _until
from tests.kit.api import THREADS, Caller, answered, error_of, post_entry, post_ok, post_thread
from tests.kit.concurrency import in_threads
from tests.kit.crypto import encrypted  # noqa: F401  (fixture)
from tests.kit.mentions import IDENTIFIERS, NAME, PERSON


@pytest.fixture
def slow_path(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """The appends that went the way of `thread_append` (the transaction), counted."""
    calls: list[int] = []
    original = services.thread_append

    def counted(**kwargs: Any) -> Any:
        calls.append(len(kwargs["entries"]))
        return original(**kwargs)

    monkeypatch.setattr(services, "thread_append", counted)
    monkeypatch.setattr(threads_api, "thread_append", counted)  # the view's own (a run's writes)
    yield calls


def _client(caller: Caller) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {caller.key}")
    return client


def _stored_as_the_other_path_stores(thread: Thread) -> list[Entry]:
    """The thread's entries, checked to be one chain from seq 1 on, each hashed over its parent, and
    the thread's counters equal to them: next seq, leaf, history tokens (a thread started at 0)."""
    entries = list(Entry.objects.filter(thread=thread).order_by("seq"))
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    for before, entry in zip([None, *entries], entries, strict=False):
        assert entry.parent_id == (before.id if before else None)
        assert entry.content_hash == content_hash(
            parent_id=entry.parent_id, turn=hashed_turn(entry), created_at=entry.created_at
        )
    thread.refresh_from_db()
    assert thread.next_seq == len(entries) + 1
    assert thread.active_leaf_id == entries[-1].id
    assert thread.history_tokens == sum(count_message_tokens(e.content, e.tool_calls) for e in entries)
    assert thread.branch_epoch == 0
    added = list(Event.objects.filter(agent_id=thread.agent_id, type="entry.added", thread_id=thread.external_id))
    assert sorted(i for event in added for i in event.ids) == sorted(e.id for e in entries)
    return entries


@pytest.mark.django_db
def test_a_plain_append_is_one_statement_storing_what_the_transaction_stores(
    alice: Caller, slow_path: list[int]
) -> None:
    post_thread(alice, "t-1")
    # Quotes, a backslash, control characters and non-ASCII in the text the statement hashes.
    first = post_entry(alice, "t-1", role="user", content='Plan "Roma" \\ day\n\tcafé ☕ \u2028', sender_name="Ana")
    with CaptureQueriesContext(connection) as captured:
        second = post_entry(alice, "t-1", role="assistant", content=[{"type": "text", "text": "Start early"}])
    # Of what it sent (besides the caches a process refreshes now and then), one statement touched
    # the thread and its entries: no lock of its own, no BEGIN (the savepoint pair is the test's).
    touching = [q["sql"] for q in captured.captured_queries if re.search(r"memoryapp_(thread|entry)\b", q["sql"])]
    assert len(touching) == 1 and touching[0].split()[0] == "WITH", touching
    assert slow_path == []
    thread = Thread.objects.get(agent=alice.agent, external_id="t-1")
    first_row, second_row = _stored_as_the_other_path_stores(thread)
    assert (first["seq"], first["parent_id"], second["seq"], second["parent_id"]) == (1, None, 2, first["id"])
    assert second["content_hash"] == second_row.content_hash
    assert first_row.sender_name == "Ana" and second_row.text == "Start early"
    assert second_row.stored_at is not None and second_row.created_at.isoformat() == second["created_at"]
    # The answer is the entry as a read gives it.
    page = answered(alice.client.get(f"{THREADS}/t-1/entries"), 200)
    assert page["results"] == [first, second]
    # A turn the other way after it continues the same chain.
    third = post_entry(alice, "t-1", role="user", content="And lunch?", created_at="2026-03-01T12:00:00Z")
    assert slow_path == [1] and third["parent_id"] == second["id"] and third["seq"] == 3
    _stored_as_the_other_path_stores(thread)


@pytest.mark.django_db
def test_another_agents_thread_and_a_missing_one_answer_404_and_nothing_is_written(
    alice: Caller, mallory: Caller
) -> None:
    post_thread(alice, "t-1")
    for caller, thread_id in ((mallory, "t-1"), (alice, "t-none")):
        error = error_of(
            caller.client.post(f"{THREADS}/{thread_id}/entries", {"role": "user", "content": "hi"}, format="json"), 404
        )
        assert error["code"] == "not_found"
    assert not Entry.objects.exists()
    assert not Event.objects.filter(type="entry.added").exists()
    # A bad entry to a missing thread answers the 404 first, as before; to her thread the 400.
    assert error_of(alice.client.post(f"{THREADS}/t-none/entries", {"content": "hi"}, format="json"), 404)
    error = error_of(alice.client.post(f"{THREADS}/t-1/entries", {"content": "hi"}, format="json"), 400)
    assert error["field"] == "role"
    assert not Entry.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "extra",
    [
        {"created_at": "2026-03-01T12:00:00Z"},  # a retry's node is looked for
        {"activate": False},
        {"tool_calls": [{"id": "c1", "name": "weather", "arguments": {}}]},  # audited
        {"metadata": {"note": f"call {NAME}"}},  # a registered person named: a mention recorded
        {"content": "my card is 4111 1111 1111 1111"},  # redacted: the decision audited
    ],
    ids=["client-time", "not-activated", "tool-calls", "person-named", "screened"],
)
def test_an_append_that_is_not_plain_goes_the_transactions_way(
    alice: Caller, slow_path: list[int], extra: dict[str, Any]
) -> None:
    answered(alice.client.put(f"/api/v1/users/{PERSON}/identifiers", IDENTIFIERS, format="json"), 200)
    post_thread(alice, "t-1")
    body = {"role": "assistant" if "tool_calls" in extra else "user", "content": "hello", **extra}
    written = post_entry(alice, "t-1", **body)
    assert slow_path == [1]
    stored = Entry.objects.get(pk=written["id"])
    if "card" in str(extra.get("content")):
        assert stored.content == "my card is [payment_card]"
        assert AuditRecord.objects.filter(action="screening.screened", agent_id=alice.agent.pk).exists()


@pytest.mark.django_db
def test_with_encryption_on_an_append_goes_the_transactions_way_sealed(
    encrypted: Any,  # noqa: F811  (the fixture imported above; first, so it is torn down after the database)
    alice: Caller,
    slow_path: list[int],
) -> None:
    post_thread(alice, "t-1", user_id="u-ana")
    written = post_entry(alice, "t-1", role="user", content="a sealed turn")
    assert slow_path == [1]
    with connection.cursor() as cursor:
        cursor.execute("SELECT text FROM memoryapp_entry WHERE id = %s", [written["id"]])
        assert "a sealed turn" not in cursor.fetchone()[0]
    assert Entry.objects.get(pk=written["id"]).text == "a sealed turn"


@pytest.mark.django_db
def test_with_a_run_id_an_append_goes_the_transactions_way(alice: Caller, slow_path: list[int]) -> None:
    post_thread(alice, "t-1")
    run = post_ok(alice.client, f"{THREADS}/t-1/runs", {})
    answer = alice.client.post(
        f"{THREADS}/t-1/entries", {"role": "user", "content": "hi"}, format="json", HTTP_X_RUN_ID=run["id"]
    )
    answered(answer, 201)
    assert slow_path == [1]


@pytest.mark.django_db(transaction=True)
def test_many_writers_of_one_thread_keep_its_seqs_gap_free_and_its_counters_equal_to_its_rows(
    alice: Caller, slow_path: list[int]
) -> None:
    """Eight writers, 15 appends each, at once; every third writer sends its turns with a time of
    its own (the transaction's way), the others plain (one statement): both queue on the thread."""
    post_thread(alice, "t-1")
    writers, each = 8, 15
    start = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

    def writer(number: int) -> list[int]:
        client = _client(alice)
        seqs: list[int] = []
        for turn in range(each):
            body: dict[str, Any] = {"role": "user", "content": f"writer {number} turn {turn}"}
            if number % 3 == 0:
                body["created_at"] = (start + timedelta(seconds=number * 100 + turn)).isoformat()
            seqs.append(post_ok(client, f"{THREADS}/t-1/entries", body)["seq"])
        return seqs

    outcomes = in_threads(*(lambda n=n: writer(n) for n in range(writers)))
    for outcome in outcomes:
        assert not isinstance(outcome, BaseException), outcome
    # Each writer's own turns came back in the order it sent them; all seqs were handed out once.
    assert all(seqs == sorted(seqs) for seqs in outcomes)
    assert sorted(s for seqs in outcomes for s in seqs) == list(range(1, writers * each + 1))
    assert len(slow_path) == 3 * each  # writers 0, 3 and 6
    entries = _stored_as_the_other_path_stores(Thread.objects.get(agent=alice.agent, external_id="t-1"))
    assert len(entries) == writers * each
    assert {e.type for e in entries} == {EntryType.MESSAGE}


def _waiting(side: Side) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT cardinality(pg_blocking_pids(%s)) > 0", [side.pid])
        return bool(cursor.fetchone()[0])


@pytest.mark.django_db(transaction=True)
def test_appends_that_waited_on_a_writer_continue_from_what_it_committed(alice: Caller) -> None:
    """Three plain appends wait on the lock of a writer that appended (its transaction held open):
    each statement, once it has the lock, reads the thread as the one before it left it."""
    post_thread(alice, "t-1")
    post_entry(alice, "t-1", role="user", content="first")
    appended, commit = threading.Event(), threading.Event()

    def writer() -> None:
        with transaction.atomic():
            services.thread_append(agent=alice.agent, external_id="t-1", entries=[{"role": "user", "content": "held"}])
            appended.set()
            assert commit.wait(WAIT)

    writing = Side(writer, "writer")
    assert appended.wait(WAIT)
    body = {"role": "assistant", "content": "waited"}
    appending = [
        Side(lambda: _client(alice).post(f"{THREADS}/t-1/entries", body, format="json"), f"append {n}")
        for n in range(3)
    ]
    for side in appending:
        _until(lambda side=side: _waiting(side), f"{side.thread.name} waited on the thread")
    commit.set()
    for side in (writing, *appending):
        side.join()
        assert not side.errors, (side.thread.name, side.errors)
    assert sorted(answered(side.answer, 201)["seq"] for side in appending) == [3, 4, 5]
    entries = _stored_as_the_other_path_stores(Thread.objects.get(agent=alice.agent, external_id="t-1"))
    assert [e.text for e in entries] == ["first", "held", "waited", "waited", "waited"]


def _delete_held(thread: Thread, deleted: threading.Event, commit: threading.Event) -> None:
    """The thread's delete, its transaction held open once it deleted the thread until `commit`."""
    with transaction.atomic():
        thread_delete(thread=thread, actor="test")
        deleted.set()
        assert commit.wait(WAIT)


@pytest.mark.django_db(transaction=True)
def test_an_append_waiting_on_a_thread_delete_answers_404_and_writes_nothing(alice: Caller) -> None:
    post_thread(alice, "t-1")
    post_entry(alice, "t-1", role="user", content="before the delete")
    thread = Thread.objects.get(agent=alice.agent, external_id="t-1")
    deleted, commit = threading.Event(), threading.Event()
    deleting = Side(lambda: _delete_held(thread, deleted, commit), "delete")
    assert deleted.wait(WAIT)
    appending = Side(
        lambda: _client(alice).post(f"{THREADS}/t-1/entries", {"role": "user", "content": "after"}, format="json"),
        "append",
    )
    _until(lambda: appending.waits_on(deleting), "the append waited on the delete's lock")
    commit.set()
    deleting.join()
    appending.join()
    assert not deleting.errors and not appending.errors, (deleting.errors, appending.errors)
    assert error_of(appending.answer, 404)["code"] == "not_found"
    assert not Thread.objects.filter(pk=thread.pk).exists()
    assert not Entry.objects.filter(thread_id=thread.pk).exists()
    assert Event.objects.filter(agent_id=alice.agent.pk, type="entry.added").count() == 1  # the first turn's


@pytest.mark.django_db(transaction=True)
def test_a_thread_delete_waiting_on_an_append_takes_the_appended_entry_with_it(alice: Caller) -> None:
    post_thread(alice, "t-1")
    thread = Thread.objects.get(agent=alice.agent, external_id="t-1")
    appended, commit = threading.Event(), threading.Event()

    def append_held() -> Any:
        # The statement in a caller's transaction (its savepoint), held open until the delete waits.
        with transaction.atomic():
            answer = _client(alice).post(f"{THREADS}/t-1/entries", {"role": "user", "content": "first"}, format="json")
            appended.set()
            assert commit.wait(WAIT)
        return answer

    appending = Side(append_held, "append")
    assert appended.wait(WAIT)
    deleting = Side(lambda: thread_delete(thread=thread, actor="test"), "delete")
    _until(lambda: deleting.waits_on(appending), "the delete waited on the append's lock")
    commit.set()
    appending.join()
    deleting.join()
    assert not deleting.errors and not appending.errors, (deleting.errors, appending.errors)
    assert answered(appending.answer, 201)["seq"] == 1
    assert deleting.answer is not None
    assert not Thread.objects.filter(pk=thread.pk).exists()
    assert not Entry.objects.filter(thread_id=thread.pk).exists()
    types = list(Event.objects.filter(agent_id=alice.agent.pk).order_by("seq").values_list("type", flat=True))
    assert types[-2:] == ["entry.added", "thread.deleted"]


# JSON values with what a COPY's text format escapes (tab, newline, backslash) and non-ASCII.
AWKWARD = {
    "role": "assistant",
    "content": [{"type": "text", "text": 'Plan "Roma" \\ day\n\tcafé ☕ \u2028'}],
    "tool_calls": [{"id": "c-1", "name": "look\tup", "arguments": {"q": "a\\b\nc", "n": [1, 2.5, None, True]}}],
    "metadata": {"note": "tab\there", "nested": {"é": ["\\", "\n"]}},
}


@pytest.mark.django_db
@pytest.mark.parametrize("sealed", [False, True])
def test_a_batch_stores_its_json_values_as_a_single_append_stores_them(
    request: pytest.FixtureRequest, alice: Caller, sealed: bool
) -> None:
    # A batch's COPY writes JSON values as text, one entry's INSERT through psycopg's Jsonb (issue 26):
    # the jsonb PostgreSQL keeps, read back by SQL and by the model, is the same.
    if sealed:
        request.getfixturevalue("encrypted")
    post_thread(alice, "t-1", user_id="u-ana")
    single = post_entry(alice, "t-1", **AWKWARD)
    batch = post_ok(alice.client, f"{THREADS}/t-1/entries", {"entries": [AWKWARD, AWKWARD]})["entries"]
    ids = [single["id"], *(e["id"] for e in batch)]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT content, tool_calls, metadata FROM memoryapp_entry WHERE id = ANY(%s) ORDER BY seq", [ids]
        )
        stored = cursor.fetchall()
    if not sealed:  # jsonb as PostgreSQL prints it (raw cursors read JSON as text)
        assert stored[0] == stored[1] == stored[2]
        assert json.loads(stored[0][0]) == AWKWARD["content"] and json.loads(stored[0][2]) == AWKWARD["metadata"]
    for entry_id in ids:
        row = Entry.objects.get(pk=entry_id)
        assert (row.content, row.tool_calls, row.metadata) == (
            AWKWARD["content"],
            AWKWARD["tool_calls"],
            AWKWARD["metadata"],
        )


@pytest.mark.django_db
@pytest.mark.parametrize("count", [1, 3])
def test_screenings_audit_record_goes_with_the_writes_statement(alice: Caller, count: int) -> None:
    """A write whose screening decided something appends its `screening.screened` record by the
    query string of the write's own statement (the chain's lock and the INSERT after it): no round
    trip of its own, the record whole and the chain unbroken."""
    from governance.audit.chain import audit_verify

    post_thread(alice, "t-1")
    specs = [{"role": "user", "content": f"turn {n}: my card is 4111 1111 1111 1111"} for n in range(count)]
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        services.thread_append(agent=alice.agent, external_id="t-1", entries=specs)
    audited = [q["sql"] for q in captured.captured_queries if "governance_auditrecord" in q["sql"]]
    assert len(audited) == 1 and "memoryapp_thread" in audited[0] and "pg_advisory_xact_lock" in audited[0]
    stored = list(Entry.objects.filter(thread__external_id="t-1").values_list("content", flat=True))
    assert stored == [f"turn {n}: my card is [payment_card]" for n in range(count)]
    record = AuditRecord.objects.get(action="screening.screened", agent_id=alice.agent.pk)
    assert record.outcome == "redact" and record.details["count"] >= 1
    assert {(d["category"], d["action"]) for d in record.details["decisions"]} == {("payment_card", "redact")}
    assert "4111" not in json.dumps(record.details)
    assert audit_verify().ok

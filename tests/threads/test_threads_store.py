"""The thread store's algorithms through its services: hashing, JSONL round trips, concurrent writers,
and random sequences of tree operations (hypothesis)."""

from __future__ import annotations

import hashlib
import itertools
import json
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from governance.models import AuditRecord
from memoryapp.errors import DomainError
from memoryapp.forgetting.services import entry_delete, entry_redact, thread_delete
from memoryapp.ids import entry_id_imported
from memoryapp.models import Entry, Thread
from memoryapp.threads import services as threads_services
from memoryapp.threads.branch import branch_rows_sql
from memoryapp.threads.columns import ENTRY_COLUMNS
from memoryapp.threads.hashing import content_hash
from memoryapp.threads.selectors import path_entries, thread_for_agent
from memoryapp.threads.services import (
    entries_add,
    entry_add,
    thread_checkout,
    thread_create,
    thread_fork,
    thread_rewind,
)
from tests.kit.api import Caller, content_of, exported_lines, import_jsonl
from tests.kit.audit_names import audit_name
from tests.kit.concurrency import in_threads

# What an export and import keep exactly: every column but where the entry lives, when it was embedded
# and when this service stored it (an import stores it again, now).
EXACT_FIELDS = tuple(c for c in ENTRY_COLUMNS if c not in ("agent_id", "thread_id", "embedded_at", "stored_at"))


def snapshot(thread: Thread) -> list[dict[str, Any]]:
    return list(Entry.objects.filter(thread=thread).order_by("seq").values(*EXACT_FIELDS))


def branchy_thread(caller: Caller, external_id: str = "t1") -> Thread:
    """A thread with branches, tool calls, an event, a redaction and metadata everywhere."""
    thread = thread_create(agent=caller.agent, external_id=external_id, user_id="u-ana", metadata={"topic": "rome"})
    q = entry_add(thread=thread, role="user", content="Plan a day in Rome", sender_name="Ana", metadata={"k": [1]})
    entry_add(
        thread=thread,
        role="assistant",
        content=[{"type": "text", "text": "Let me look"}],
        tool_calls=[{"id": "c1", "name": "maps", "arguments": {"q": "Rome"}}],
    )
    entry_add(thread=thread, type="tool_result", content="Colosseum, Vatican", tool_call_id="c1")
    entry_add(thread=thread, type="model_change", event={"model": "m2"})
    entry_add(thread=thread, role="assistant", content="Start at the Colosseum")
    other = entry_add(thread=thread, role="assistant", content="Start at the Vatican", parent_id=q.id, activate=False)
    secret = entry_add(thread=thread, role="user", content="my card 4111", parent_id=other.id, activate=False)
    entry_redact(entry=Entry.objects.select_related("thread").get(id=secret.id), reason="card")
    # A spliced-out entry: its child's parent (and so its content hash) changes.
    spliced = entry_add(thread=thread, role="user", content="one more", parent_id=secret.id, activate=False)
    entry_add(thread=thread, role="assistant", content="after it", parent_id=spliced.id, activate=False)
    entry_delete(entry=Entry.objects.select_related("thread").get(id=spliced.id))
    return thread


# --- hashing -------------------------------------------------------------------------------


def test_content_hash_is_000_hash_node_over_parent_turn_and_created_at_with_sorted_keys() -> None:
    at = datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
    turn = {"type": "message", "role": "user", "content": "hi"}
    expected = hashlib.sha256(
        json.dumps(
            {"parent": None, "turn": turn, "createdAt": 1714564800123}, separators=(",", ":"), sort_keys=True
        ).encode()
    ).hexdigest()[:32]
    assert content_hash(parent_id=None, turn=turn, created_at=at) == expected
    assert content_hash(parent_id="ent_x", turn=turn, created_at=at) != expected
    # With a parent, and a time before 1970 (the parent and the milliseconds are written without the
    # encoder: the same text as JSON.stringify).
    for parent, when in (("ent_x:1@a+b~c.d-e", at), ("ent_y", datetime(1969, 7, 20, 20, 17, 40, 5000, tzinfo=UTC))):
        millis = int(when.timestamp() * 1000)
        chained = {"parent": parent, "turn": turn, "createdAt": millis}
        text = json.dumps(chained, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
        assert (
            content_hash(parent_id=parent, turn=turn, created_at=when) == hashlib.sha256(text.encode()).hexdigest()[:32]
        )


@pytest.mark.django_db
def test_entry_add_stores_the_hash_of_its_parent_content_and_time(alice: Caller) -> None:
    thread = thread_create(agent=alice.agent, external_id="t1")
    first = entry_add(thread=thread, role="user", content="hi")
    second = entry_add(thread=thread, role="user", content="hi")
    assert first.content_hash != second.content_hash  # same words, another parent
    assert Entry.objects.get(id=second.id).content_hash == content_hash(
        parent_id=first.id, turn={"type": "message", "role": "user", "content": "hi"}, created_at=second.created_at
    )


# --- JSONL -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_jsonl_export_then_import_round_trips_exactly_over_the_api(alice: Caller) -> None:
    thread = branchy_thread(alice)
    before = snapshot(thread)
    leaf = Thread.objects.get(pk=thread.pk).active_leaf_id
    response = alice.client.get("/api/v1/threads/t1/export")
    assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson"
    text = content_of(response).decode()
    records = [json.loads(line) for line in text.splitlines()]
    assert [r["type"] for r in records] == ["thread"] + ["node"] * len(before) + ["head"]
    assert records[-1] == {"type": "head", "leaf": leaf}
    node = records[1]["node"]
    assert {"id", "parent", "turn", "createdAt"} <= set(node) and node["parent"] is None
    assert alice.client.delete("/api/v1/threads/t1").status_code == 204
    response = import_jsonl(alice, text)
    assert response.status_code == 201, response.content
    assert response.json()["id"] == "t1" and response.json()["active_leaf_id"] == leaf
    copy = Thread.objects.get(agent=alice.agent, external_id="t1")
    assert snapshot(copy) == before
    assert copy.created_at.isoformat() == records[0]["thread"]["created_at"]
    assert copy.metadata == {"topic": "rome"} and copy.user_id == "u-ana" and copy.next_seq == before[-1]["seq"] + 1
    assert copy.branched  # a tree with branches stays known as one
    named = audit_name(agent_id=alice.agent.pk, user_id="u-ana", value="t1")
    assert AuditRecord.objects.filter(action="thread.import", subject=named).exists()
    # The imported thread goes on like the original.
    assert entry_add(thread=copy, role="user", content="next").seq == before[-1]["seq"] + 1


@pytest.mark.django_db
def test_jsonl_round_trip_through_the_management_commands(alice: Caller, tmp_path: Path) -> None:
    thread = branchy_thread(alice)
    before = snapshot(thread)
    target = tmp_path / "t1.jsonl"
    call_command("thread_export", "alice", "t1", "--output", str(target))
    thread_delete(thread=thread)
    call_command("thread_import", "alice", str(target), "--id", "t1-again")
    copy = Thread.objects.get(agent=alice.agent, external_id="t1-again")
    assert snapshot(copy) == before
    assert copy.active_leaf_id == json.loads(target.read_text().splitlines()[-1])["leaf"]


@pytest.mark.django_db
def test_import_refuses_ids_that_exist_and_broken_files_writing_nothing(alice: Caller) -> None:
    branchy_thread(alice)
    text = exported_lines(alice, "t1")  # entries still exist: their ids are taken
    response = import_jsonl(alice, text, "?id=other")
    assert response.status_code == 409 and response.json()["error"]["code"] == "entry_exists"
    node = {"id": "ent_a", "parent": "ent_missing", "turn": {"role": "user", "content": "x"}, "createdAt": 1}
    cases = [
        ("{not json", "malformed_jsonl"),
        (json.dumps({"type": "node", "node": node}), "unknown_parent"),
        (
            json.dumps({"type": "node", "node": {**node, "parent": None}})
            + "\n"
            + json.dumps({"type": "head", "leaf": "zz"}),
            "unknown_leaf",
        ),
        (
            json.dumps({"type": "node", "node": {**node, "parent": None, "turn": {"role": "user", "content": None}}}),
            "required",
        ),
    ]
    for body, code in cases:
        response = import_jsonl(alice, body, "?id=fresh")
        assert response.status_code == 400 and response.json()["error"]["code"] == code, (body, response.content)
    assert not Thread.objects.filter(external_id__in=["other", "fresh"]).exists()


@pytest.mark.django_db
def test_a_plain_000_session_file_imports_in_file_order(alice: Caller) -> None:
    lines = [
        {
            "type": "node",
            "node": {"id": "n1", "parent": None, "turn": {"role": "user", "content": "a"}, "createdAt": 1000},
        },
        {"type": "head", "leaf": "n1"},
        {
            "type": "node",
            "node": {"id": "n2", "parent": "n1", "turn": {"role": "assistant", "content": "b"}, "createdAt": 2000},
        },
        {"type": "head", "leaf": "n2"},
    ]
    body = "\n".join(json.dumps(line) for line in lines)
    response = import_jsonl(alice, body, "?id=s1")
    assert response.status_code == 201
    thread = Thread.objects.get(external_id="s1")
    # The file's ids were not made for alice: they are stored under ids derived from them.
    n1, n2 = (entry_id_imported(n, agent_id=alice.agent.pk) for n in ("n1", "n2"))
    assert thread.active_leaf_id == n2
    assert [(e.id, e.seq, e.parent_id) for e in path_entries(thread=thread)] == [(n1, 1, None), (n2, 2, n1)]


# --- path reads ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_path_of_a_long_thread_reads_only_the_asked_entries(alice: Caller) -> None:
    """The CTE stops after `limit` rows: the plan's branch scan reaches only limit rows."""
    thread = thread_create(agent=alice.agent, external_id="long")
    entries_add(thread=thread, entries=[{"role": "user", "content": f"n{i}"} for i in range(500)])
    page = path_entries(thread=thread, limit=5)
    assert [e.content for e in page] == [f"n{i}" for i in range(495, 500)]
    with connection.cursor() as cursor:
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + branch_rows_sql(columns=ENTRY_COLUMNS, types=True, limit=True),
            {"start": thread.active_leaf_id, "thread": thread.pk, "types": ["message"], "limit": 5},
        )
        plan = json.dumps(cursor.fetchone()[0])
    # The recursive union is pulled only as far as the limit needs (5 rows, not 500).
    assert '"Node Type": "Recursive Union"' in plan
    unions = [p for p in _plan_nodes(json.loads(plan)) if p.get("Node Type") == "Recursive Union"]
    assert unions and all(p["Actual Rows"] <= 6 for p in unions)


def _plan_nodes(plan: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(plan, dict):
        found.append(plan)
        for value in plan.values():
            found += _plan_nodes(value)
    elif isinstance(plan, list):
        for value in plan:
            found += _plan_nodes(value)
    return found


# --- concurrency -----------------------------------------------------------------------------

WRITERS = 8
PER_WRITER = 200


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_concurrent_writers_never_lose_an_entry_or_share_a_seq(alice: Caller, monkeypatch: pytest.MonkeyPatch) -> None:
    # The hook only schedules background jobs on commit; here it counts what it is handed, so
    # 1,600 commits do not each run the (eager, in tests) embedding and extraction jobs.
    handed: list[str] = []
    monkeypatch.setattr(
        threads_services, "after_entries_added", lambda *, thread, entries: handed.extend(e.id for e in entries)
    )
    thread = thread_create(agent=alice.agent, external_id="busy")

    def writer(number: int) -> list[str]:
        mine = Thread.objects.get(pk=thread.pk)
        return [entry_add(thread=mine, role="user", content=f"w{number} n{i}").id for i in range(PER_WRITER)]

    outcomes = in_threads(*(lambda n=n: writer(n) for n in range(WRITERS)), timeout=300)
    assert [o for o in outcomes if not isinstance(o, list)] == []
    written = [entry_id for ids in outcomes for entry_id in ids]
    rows = list(Entry.objects.filter(thread=thread).values_list("id", "parent_id", "seq"))
    total = WRITERS * PER_WRITER
    assert len(rows) == total and {r[0] for r in rows} == set(written)
    assert sorted(r[2] for r in rows) == list(range(1, total + 1))
    ids = {r[0] for r in rows}
    assert all(parent is None or parent in ids for _, parent, _ in rows)
    assert sum(1 for _, parent, _ in rows if parent is None) == 1
    # Every writer appended at the leaf: the tree is one chain, seq order.
    chain = sorted(rows, key=lambda r: r[2])
    assert all(child[1] == parent[0] for parent, child in itertools.pairwise(chain))
    final = Thread.objects.get(pk=thread.pk)
    assert final.active_leaf_id in ids and final.active_leaf_id == chain[-1][0]
    assert final.next_seq == total + 1
    assert sorted(handed) == sorted(written)


# --- random operation sequences --------------------------------------------------------------

operation = st.tuples(
    st.sampled_from(["add", "add", "add_branch", "batch", "rewind", "checkout", "fork", "delete", "redact"]),
    st.integers(min_value=0, max_value=10_000),
)


def check_tree(thread: Thread) -> None:
    """The invariants every operation keeps."""
    thread = Thread.objects.get(pk=thread.pk)
    rows = {e.id: e for e in Entry.objects.filter(thread=thread)}
    seqs = [e.seq for e in rows.values()]
    assert len(seqs) == len(set(seqs)) and all(0 < s < thread.next_seq for s in seqs)
    for entry in rows.values():
        assert entry.agent_id == thread.agent_id
        # Parents are in the thread and older, so walking up always ends at a root (no cycle).
        if entry.parent_id is not None:
            assert entry.parent_id in rows and rows[entry.parent_id].seq < entry.seq
    # The leaf is an entry of the thread; it is None only when the thread is empty or when
    # the active branch was its root alone and that root was deleted (the next add starts anew).
    if thread.active_leaf_id is not None:
        assert thread.active_leaf_id in rows
        path = path_entries(thread=thread, types=None)
        assert path[-1].id == thread.active_leaf_id and path[0].parent_id is None
        assert all(b.parent_id == a.id for a, b in itertools.pairwise(path))
    # An unbranched thread is one chain ending at the leaf: its active branch is all of it.
    if not thread.branched:
        ordered = sorted(rows.values(), key=lambda e: e.seq)
        assert all(b.parent_id == a.id for a, b in itertools.pairwise(ordered))
        assert thread.active_leaf_id == (ordered[-1].id if ordered else None) or (
            not ordered and thread.active_leaf_id is None
        )


@pytest.mark.slow
@pytest.mark.django_db
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(operation, min_size=1, max_size=12))
def test_random_tree_operations_keep_the_tree_invariants(alice: Caller, ops: list[tuple[str, int]]) -> None:
    thread = thread_create(agent=alice.agent, external_id=f"p-{uuid.uuid4().hex[:8]}")
    for kind, pick in ops:
        ids = list(Entry.objects.filter(thread=thread).order_by("seq").values_list("id", flat=True))
        target = ids[pick % len(ids)] if ids else None
        thread = Thread.objects.get(pk=thread.pk)
        if kind == "add":
            entry_add(thread=thread, role="user", content=f"n{pick}")
        elif kind == "add_branch" and target:
            entry_add(thread=thread, role="assistant", content=f"b{pick}", parent_id=target, activate=pick % 2 == 0)
        elif kind == "batch":
            entries_add(thread=thread, entries=[{"role": "user", "content": f"x{i}"} for i in range(pick % 3 + 1)])
        elif kind == "rewind" and target:
            path_ids = [e.id for e in path_entries(thread=thread, types=None)]
            if target in path_ids:
                thread_rewind(thread=thread, entry_id=target)
                assert Thread.objects.get(pk=thread.pk).active_leaf_id == target
            else:
                with pytest.raises(DomainError):
                    thread_rewind(thread=thread, entry_id=target)
        elif kind == "checkout" and target:
            thread_checkout(thread=thread, entry_id=target)
        elif kind == "fork" and target:
            original = [(e.content, e.type) for e in path_entries(thread=thread, leaf_id=target, types=None)]
            copy = thread_fork(thread=thread, entry_id=target)
            check_tree(copy)
            assert [(e.content, e.type) for e in path_entries(thread=copy, types=None)] == original
        elif kind == "delete" and target:
            count = len(ids)
            # keep_replies: the entry alone goes (a user message's replies are the forgetting tests').
            entry_delete(entry=Entry.objects.select_related("thread").get(id=target), keep_replies=True)
            assert Entry.objects.filter(thread=thread).count() == count - 1
        elif kind == "redact" and target:
            entry = Entry.objects.select_related("thread").get(id=target)
            before = (entry.parent_id, entry.seq, entry.role)
            entry_redact(entry=entry, reason="test")
            after = Entry.objects.get(id=target)
            assert (after.parent_id, after.seq, after.role) == before and after.text == "[redacted]"
        check_tree(thread)
    assert thread_for_agent(agent=alice.agent, external_id=thread.external_id).pk == thread.pk


# --- cost ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_append_is_a_handful_of_queries_however_long_the_thread(
    alice: Caller, django_assert_max_num_queries: Any
) -> None:
    thread = thread_create(agent=alice.agent, external_id="t1")
    entries_add(thread=thread, entries=[{"role": "user", "content": f"n{i}"} for i in range(300)])
    # lock the thread; one entry: its insert, the thread's update and the change event (numbered by
    # the commit's trigger, no query of its own) in one statement; a batch: its COPY, then the
    # thread's update and the event in one statement (+ a savepoint pair inside the test's transaction)
    with django_assert_max_num_queries(4):
        entry_add(thread=thread, role="user", content="one more")
    with django_assert_max_num_queries(5):
        entries_add(thread=thread, entries=[{"role": "user", "content": f"m{i}"} for i in range(100)])


@pytest.mark.django_db
def test_a_page_of_threads_costs_the_same_queries_however_many_forks(
    alice: Caller, django_assert_max_num_queries: Any
) -> None:
    origin = thread_create(agent=alice.agent, external_id="origin")
    first = entry_add(thread=origin, role="user", content="hi")
    for index in range(10):
        thread_fork(thread=origin, entry_id=first.id, new_thread_id=f"fork-{index}")
    # the key lookup, its last-used stamp, the page of threads with their origins
    with django_assert_max_num_queries(4):
        page = alice.client.get("/api/v1/threads?limit=20").json()
    assert len(page["results"]) == 11
    assert sorted(t["forked_from"] for t in page["results"] if t["forked_from"]) == ["origin"] * 10


@pytest.mark.django_db
def test_a_thread_is_marked_branched_at_its_first_branch_rewind_or_checkout(alice: Caller) -> None:
    def branched(thread: Thread) -> bool:
        return Thread.objects.get(pk=thread.pk).branched

    line = thread_create(agent=alice.agent, external_id="line")
    first = entry_add(thread=line, role="user", content="one")
    entries_add(thread=line, entries=[{"role": "assistant", "content": "two"}, {"role": "user", "content": "three"}])
    last = entry_add(thread=line, role="assistant", content="four", parent_id=line.active_leaf_id)
    thread_checkout(thread=line, entry_id=last.id)  # to the leaf it stands on: nothing moves
    entry_delete(entry=Entry.objects.get(pk=first.id))  # a splice keeps one chain
    assert not branched(line)
    fork = thread_fork(thread=line, entry_id=last.id, new_thread_id="line-fork")
    assert not branched(fork)
    exported = exported_lines(alice, "line")
    assert alice.client.delete("/api/v1/threads/line").status_code == 204  # entries keep their ids
    imported = import_jsonl(alice, exported)
    assert imported.status_code == 201, imported.content
    assert not Thread.objects.get(agent=alice.agent, external_id="line").branched

    for make_branch in (
        lambda t, e: entry_add(thread=t, role="user", content="aside", activate=False),
        lambda t, e: entry_add(thread=t, role="user", content="again", parent_id=e.id),
        lambda t, e: thread_rewind(thread=t, entry_id=e.id),
        lambda t, e: thread_checkout(thread=t, entry_id=e.id),
    ):
        thread = thread_create(agent=alice.agent, external_id=f"b-{uuid.uuid4().hex[:6]}")
        root = entry_add(thread=thread, role="user", content="root")
        entry_add(thread=thread, role="assistant", content="reply")
        make_branch(thread, root)
        assert branched(thread)


@pytest.mark.django_db
def test_an_event_stored_before_payloads_were_required_still_imports(alice: Caller) -> None:
    lines = [
        json.dumps({"type": "thread", "thread": {"id": "old"}}),
        json.dumps(
            {
                "type": "node",
                "node": {
                    "id": "e1",
                    "parent": None,
                    "turn": {"role": "user", "content": "hi"},
                    "createdAt": 1700000000000,
                    "seq": 1,
                    "entryType": "message",
                },
            }
        ),
        json.dumps(
            {
                "type": "node",
                "node": {
                    "id": "e2",
                    "parent": "e1",
                    "turn": {"role": "", "content": None},
                    "createdAt": 1700000001000,
                    "seq": 2,
                    "entryType": "label",
                },
            }
        ),
        json.dumps({"type": "head", "leaf": "e2"}),
    ]
    response = import_jsonl(alice, lines)
    assert response.status_code == 201, response.content
    e2 = Entry.objects.get(pk=entry_id_imported("e2", agent_id=alice.agent.pk))
    assert e2.type == "label" and e2.event is None


def test_a_node_marked_redacted_imports_redacted_without_its_words_text_or_vector(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    def node(node_id: str, parent: str | None, seq: int, turn: dict[str, Any], **more: Any) -> str:
        body = {"id": node_id, "parent": parent, "turn": turn, "createdAt": 1700000000000 + seq, "seq": seq, **more}
        return json.dumps({"type": "node", "node": body})

    at = "2025-03-01T10:00:00+00:00"
    lines = [
        node("r1", None, 1, {"role": "user", "content": "my card is 4111 1111"}, senderName="Ana", redactedAt=at),
        node(
            "r2",
            "r1",
            2,
            {
                "role": "assistant",
                "content": [{"type": "text", "text": "noted 4111 1111"}],
                "toolCalls": [{"id": "c1", "name": "vault", "arguments": {"card": "4111 1111"}}],
            },
            redactedAt=at,
            metadata={"redacted": {"at": at, "reason": "card"}},
        ),
        node("r3", "r2", 3, {"role": "user", "content": "plan a day in Rome"}),
        json.dumps({"type": "head", "leaf": "r3"}),
    ]
    with django_capture_on_commit_callbacks(execute=True):  # the embedding job runs
        response = import_jsonl(alice, lines, "?id=t-red")
    assert response.status_code == 201, response.content
    user, assistant, kept = Entry.objects.order_by("seq")
    assert (user.content, user.text, user.sender_name) == ("[redacted]", "[redacted]", "")
    assert assistant.content == [{"type": "text", "text": "[redacted]"}]
    assert assistant.tool_calls == [{"id": "c1", "name": "vault", "arguments": "[redacted]"}]
    assert user.metadata["redacted"] == {"at": at, "reason": ""}
    assert assistant.metadata["redacted"] == {"at": at, "reason": "card"}
    assert user.redacted_at == assistant.redacted_at == datetime(2025, 3, 1, 10, tzinfo=UTC)
    assert user.embedding is None and assistant.embedding is None and kept.embedding is not None
    # The hash is that of what is stored, as after a redaction (a guess cannot be checked against it).
    assert user.content_hash == content_hash(
        parent_id=None, turn={"type": "message", "role": "user", "content": "[redacted]"}, created_at=user.created_at
    )
    r1, r2 = (entry_id_imported(r, agent_id=alice.agent.pk) for r in ("r1", "r2"))
    for url in (f"/api/v1/entries/{r1}", f"/api/v1/entries/{r2}", "/api/v1/threads/t-red/export"):
        response = alice.client.get(url)
        body = content_of(response)
        # The card's words, not "4111" alone: an entry id or a content hash may hold those digits.
        assert response.status_code == 200 and b"4111 1111" not in body, url
    assert b'"redactedAt"' in body
    assert not Entry.objects.filter(text__contains="4111 1111").exists()


def test_an_event_node_marked_redacted_is_refused(alice: Caller) -> None:
    node = {"id": "ev1", "parent": None, "turn": {"role": "", "content": None}, "seq": 1, "entryType": "label"}
    node.update(event={"label": "x"}, redactedAt="2025-03-01T10:00:00+00:00")
    response = import_jsonl(alice, json.dumps({"type": "node", "node": node}), "?id=t-ev")
    assert response.status_code == 400 and response.json()["error"]["field"] == "nodes[0].redacted_at"
    assert not Thread.objects.filter(external_id="t-ev").exists()

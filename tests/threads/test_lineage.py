"""Derived memory goes with its source: deleting or redacting entries, or a thread, takes what stands on them."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
from django.db import connection

from governance.models import AuditRecord, JobRun
from memoryapp.compaction.services import compaction_run
from memoryapp.content import REDACTED_TEXT
from memoryapp.forgetting import lineage
from memoryapp.forgetting import services as forgetting_services
from memoryapp.models import Entity, Entry, Event, Evidence, MemoryFileVersion, MemoryItem, Thread
from memoryapp.search import embedders
from memoryapp.search.embedders import embed_texts
from memoryapp.search.indexing import embed_pending, entry_embedding_text
from memoryapp.threads import services as threads_services
from tests.kit.api import Caller, build_context, create_memory_file, post_entry, post_item, post_ok, post_thread
from tests.kit.audit_names import audit_name
from tests.kit.concurrency import started
from tests.kit.events import events_number_now
from tests.kit.factories import EntryFactory, MemoryItemFactory, tool_thread

SECRET = "passport number is X12345678"


def _thread(caller: Caller, thread_id: str = "t-1") -> None:
    post_thread(caller, thread_id, user_id="u-ana")


def _say(caller: Caller, text: str, thread_id: str = "t-1", role: str = "user") -> str:
    return str(post_entry(caller, thread_id, role=role, content=text)["id"])


def _item(caller: Caller, subject: str, attribute: str, value: str, quotes: list[tuple[str, str]]) -> str:
    evidence = [{"entry_id": entry_id, "quote": quote} for entry_id, quote in quotes]
    body = post_item(
        caller, kind="fact", subject=subject, attribute=attribute, value=value, user_id="u-ana", evidence=evidence
    )
    return str(body["id"])


def _write_file(caller: Caller, path: str, text: str, place: str | None) -> None:
    url = "/api/v1/memory-tool?thread_id=t-1" + (f"&place={place}" if place else "")
    create_memory_file(caller, path, text, url)


def _rows_holding(text: str, agent_id: int) -> dict[str, int]:
    """How many rows of the agent's memory tables hold `text`, table by table (the whole row as text)."""
    counts = {}
    with connection.cursor() as cursor:
        for table in ("memoryapp_evidence", "memoryapp_memoryitem", "memoryapp_entry", "memoryapp_memoryfileversion"):
            cursor.execute(
                f"SELECT count(*) FROM {table} t WHERE agent_id = %s AND t::text LIKE %s", [agent_id, f"%{text}%"]
            )
            counts[table] = cursor.fetchone()[0]
    return counts


def _lineage_audit() -> AuditRecord:
    return AuditRecord.objects.filter(action="lineage.forget").latest("seq")


def test_redacting_an_entry_purges_what_stands_only_on_it_and_trims_what_stands_on_more(
    alice: Caller, mallory: Caller
) -> None:
    _thread(alice)
    told = _say(alice, f"My {SECRET} and I live in Porto.")
    again = _say(alice, "Yes, Porto is home.")
    passport = _item(alice, "Passport", "number", "X12345678", [(told, SECRET)])
    city = _item(alice, "Ana", "city", "Porto", [(told, "I live in Porto"), (again, "Porto is home")])
    _thread(mallory, "m-1")
    theirs = _item(mallory, "Passport", "number", "X12345678", [(_say(mallory, f"My {SECRET}.", "m-1"), SECRET)])

    response = alice.client.post(f"/api/v1/entries/{told}/redact", {"reason": "the user asked"}, format="json")

    assert response.status_code == 200, response.json()
    assert not MemoryItem.objects.filter(pk=passport).exists()
    assert not Evidence.objects.filter(item_id=passport).exists()
    assert not Entity.objects.filter(agent=alice.agent, name="Passport").exists()
    assert _rows_holding("X12345678", alice.agent.pk) == dict.fromkeys(_rows_holding("", alice.agent.pk), 0)
    kept = MemoryItem.objects.get(pk=city)
    assert list(kept.evidence.values_list("entry_id", "quote")) == [(again, "Porto is home")]
    assert kept.verified is True
    assert Entity.objects.filter(agent=alice.agent, name="Ana").exists()
    # mallory's memory with the same words is none of this cascade's business
    assert MemoryItem.objects.get(pk=theirs).evidence.get().quote == SECRET
    assert Entity.objects.filter(agent=mallory.agent, name="Passport").exists()
    record = _lineage_audit()
    assert record.agent_id == alice.agent.pk and record.subject == told
    # The thread by its owner's pseudonym (governance.audit.pseudonyms), as every record names one.
    assert record.thread_id == audit_name(agent_id=alice.agent.pk, user_id="u-ana", value="t-1")
    assert record.details["because"] == "entry.redact"
    assert record.details["items_purged"] == 1 and record.details["items_trimmed"] == 1
    assert record.details["evidence_removed"] == 2 and record.details["entities_deleted"] == 1
    assert record.details["purged_item_ids"] == [passport]
    assert not any("X12345678" in json.dumps([r.subject, r.details]) for r in AuditRecord.objects.all())


def test_a_trimmed_item_is_verified_again_when_the_quotes_it_keeps_hold(alice: Caller) -> None:
    _thread(alice)
    first = _say(alice, "I moved last spring.")
    second = _say(alice, "I live in Porto now.")
    # The quote of the first entry is a paraphrase that does not hold: the item is not verified.
    item = _item(alice, "Ana", "city", "Porto", [(first, "she moved to Porto"), (second, "I live in Porto")])
    assert MemoryItem.objects.get(pk=item).verified is False

    assert alice.client.delete(f"/api/v1/entries/{first}").status_code == 204

    kept = MemoryItem.objects.get(pk=item)
    assert kept.verified is True
    assert list(kept.evidence.values_list("entry_id", "status")) == [(second, "verified")]


def test_a_state_a_purged_item_had_closed_holds_again(alice: Caller) -> None:
    _thread(alice)
    porto = _say(alice, "I live in Porto.")
    lisbon = _say(alice, "I moved to Lisbon.")
    old = MemoryItemFactory(
        agent=alice.agent,
        attribute="city",
        value="Porto",
        user_id="",
        evidence=[{"entry_id": porto, "quote": "I live in Porto"}],
    )
    new = MemoryItemFactory(
        agent=alice.agent,
        attribute="city",
        value="Lisbon",
        user_id="",
        evidence=[{"entry_id": lisbon, "quote": "I moved to Lisbon"}],
    )
    old.refresh_from_db()
    assert old.status == "superseded"

    assert alice.client.delete(f"/api/v1/entries/{lisbon}").status_code == 204

    assert not MemoryItem.objects.filter(pk=new.pk).exists()
    old.refresh_from_db()
    assert old.status == "active" and old.valid_to is None


def test_a_state_a_rewound_item_had_replaced_holds_again_as_after_a_delete(alice: Caller) -> None:
    _thread(alice)
    porto = _say(alice, "I live in Porto.")
    lisbon = _say(alice, "I moved to Lisbon.")
    old = MemoryItemFactory(
        agent=alice.agent,
        attribute="city",
        value="Porto",
        user_id="",
        evidence=[{"entry_id": porto, "quote": "I live in Porto"}],
    )
    new = MemoryItemFactory(
        agent=alice.agent,
        attribute="city",
        value="Lisbon",
        user_id="",
        evidence=[{"entry_id": lisbon, "quote": "I moved to Lisbon"}],
    )
    old.refresh_from_db()
    assert old.status == "superseded"

    post_ok(alice.client, "/api/v1/threads/t-1/rewind", {"entry_id": porto}, status=200)

    new.refresh_from_db()
    old.refresh_from_db()
    assert new.status == "stale"
    assert old.status == "active" and old.valid_to is None
    built = build_context(alice, "t-1", strategy="recent", max_tokens=4000)
    assert [f["id"] for f in built["facts"]] == [old.pk]


def test_file_versions_written_at_a_deleted_entry_are_redacted_and_stay_on_its_branch(alice: Caller) -> None:
    _thread(alice)
    root = _say(alice, "Hello.")
    told = _say(alice, f"My {SECRET}.")
    later = _say(alice, "Thanks.")
    _write_file(alice, "/memories/ana.md", f"Ana's {SECRET}", place=told)
    _write_file(alice, "/memories/later.md", "Ana said thanks", place=later)
    _write_file(alice, "/memories/nowhere.md", "No place", place=None)

    assert alice.client.delete(f"/api/v1/entries/{told}?keep_replies=true").status_code == 204

    written_there = MemoryFileVersion.objects.filter(agent=alice.agent, path="/memories/ana.md").earliest("sequence")
    assert written_there.content == REDACTED_TEXT and written_there.redacted_at is not None
    # Its version in front was redacted: the file is then deleted (004), its path leaves the listing.
    head = MemoryFileVersion.objects.filter(agent=alice.agent, path="/memories/ana.md").latest("sequence")
    assert head.content is None
    assert written_there.size == len(REDACTED_TEXT)
    # like the entry's children, the version now hangs on the entry's parent
    assert written_there.place_id == root
    untouched = MemoryFileVersion.objects.filter(
        agent=alice.agent, path__in=["/memories/later.md", "/memories/nowhere.md"]
    )
    assert all(v.redacted_at is None and v.content != REDACTED_TEXT for v in untouched)
    assert _lineage_audit().details["file_versions_redacted"] == 1
    assert _rows_holding("X12345678", alice.agent.pk)["memoryapp_memoryfileversion"] == 0


def test_file_versions_written_at_a_redacted_entry_are_redacted_in_place(alice: Caller) -> None:
    _thread(alice)
    told = _say(alice, f"My {SECRET}.")
    _write_file(alice, "/memories/ana.md", f"Ana's {SECRET}", place=told)

    assert alice.client.post(f"/api/v1/entries/{told}/redact", {}, format="json").status_code == 200

    version = MemoryFileVersion.objects.filter(agent=alice.agent, path="/memories/ana.md").earliest("sequence")
    assert (version.content, version.place_id) == (REDACTED_TEXT, told)
    view = alice.client.post(
        "/api/v1/memory-tool?thread_id=t-1", {"command": "view", "path": "/memories/ana.md"}, format="json"
    )
    assert "X12345678" not in json.dumps(view.json())


def _turns(caller: Caller, n: int) -> list[str]:
    return [_say(caller, f"turn {i} words", role="user" if i % 2 == 0 else "assistant") for i in range(n)]


def _context(caller: Caller) -> dict[str, Any]:
    return build_context(caller, "t-1", strategy="recent", max_tokens=5000, system_prompt="Hi.")


def _summarize(caller: Caller, first_kept: str) -> Entry:
    thread = Thread.objects.get(agent=caller.agent, external_id="t-1")
    return EntryFactory(
        thread=thread,
        type="compaction",
        role="user",
        content="[condensed earlier context] They talked about turns 0 to 5.",
        event={"summary": "They talked about turns 0 to 5.", "first_kept_entry_id": first_kept},
    )


def test_a_compaction_covering_a_deleted_entry_is_removed_and_the_context_shows_the_kept_history(
    alice: Caller,
) -> None:
    _thread(alice)
    turns = _turns(alice, 8)
    summary = _summarize(alice, first_kept=turns[6])
    after = _say(alice, "turn 8 words")
    before = _context(alice)
    assert "turns 0 to 5" in before["messages"][1]["content"]

    assert alice.client.delete(f"/api/v1/entries/{turns[2]}?keep_replies=true").status_code == 204

    assert not Entry.objects.filter(pk=summary.pk).exists()
    assert Entry.objects.get(pk=after).parent_id == turns[7]  # spliced like a deleted entry
    thread = Thread.objects.get(agent=alice.agent, external_id="t-1")
    assert thread.active_leaf_id == after
    built = _context(alice)
    assert not any("condensed earlier context" in str(m.get("content")) for m in built["messages"])
    assert [m["entry_id"] for m in built["messages"] if "entry_id" in m] == [*turns[:2], *turns[3:], after]
    record = _lineage_audit()
    assert record.details["summaries_removed"] == 1 and record.details["summary_ids"] == [summary.pk]


def test_a_compaction_survives_the_deletion_of_an_entry_it_keeps_verbatim(alice: Caller) -> None:
    _thread(alice)
    turns = _turns(alice, 8)
    summary = _summarize(alice, first_kept=turns[6])

    assert alice.client.delete(f"/api/v1/entries/{turns[7]}").status_code == 204

    assert Entry.objects.filter(pk=summary.pk, parent_id=turns[6]).exists()
    built = _context(alice)
    assert "turns 0 to 5" in built["messages"][1]["content"]
    assert [m["entry_id"] for m in built["messages"] if "entry_id" in m] == [turns[6]]


def test_a_compaction_that_is_the_active_leaf_leaves_the_leaf_to_its_parent(alice: Caller) -> None:
    _thread(alice)
    turns = _turns(alice, 8)
    summary = _summarize(alice, first_kept=turns[6])

    assert alice.client.post(f"/api/v1/entries/{turns[0]}/redact", {}, format="json").status_code == 200

    assert not Entry.objects.filter(pk=summary.pk).exists()
    assert Thread.objects.get(agent=alice.agent, external_id="t-1").active_leaf_id == turns[7]
    assert len(_context(alice)["messages"]) == 1 + 8


def test_a_clearing_compaction_naming_a_redacted_tool_result_goes_and_the_handle_serves_redacted(
    alice: Caller,
) -> None:
    thread = tool_thread(alice.agent, rounds=3, external_id="t-1")
    compaction = compaction_run(thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 1}).entry
    assert compaction is not None
    cleared = sorted(compaction.event["cleared"], key=lambda i: Entry.objects.get(pk=i).seq)
    handle = cleared[0]
    assert "PAGE-0-BODY" in alice.client.get(f"/api/v1/tool-results/{handle}").json()["text"]

    assert alice.client.post(f"/api/v1/entries/{handle}/redact", {}, format="json").status_code == 200

    assert not Entry.objects.filter(pk=compaction.pk).exists()
    served = alice.client.get(f"/api/v1/tool-results/{handle}").json()
    assert served["redacted"] is True and served["text"] == REDACTED_TEXT and served["content"] == REDACTED_TEXT


def test_deleting_a_thread_purges_items_on_its_entries_and_trims_those_standing_elsewhere(
    alice: Caller, mallory: Caller
) -> None:
    _thread(alice, "t-1")
    _thread(alice, "t-2")
    told = _say(alice, f"My {SECRET}. I live in Porto.", "t-1")
    elsewhere = _say(alice, "Porto, as I said.", "t-2")
    passport = _item(alice, "Passport", "number", "X12345678", [(told, SECRET)])
    city = _item(alice, "Ana", "city", "Porto", [(told, "I live in Porto"), (elsewhere, "Porto, as I said")])
    _write_file(alice, "/memories/ana.md", f"Ana's {SECRET}", place=told)
    _thread(mallory, "t-1")
    theirs = _item(mallory, "Passport", "number", "X12345678", [(_say(mallory, f"My {SECRET}.", "t-1"), SECRET)])

    assert mallory.client.delete("/api/v1/threads/t-2").status_code == 404
    assert alice.client.delete("/api/v1/threads/t-1").status_code == 204

    assert not MemoryItem.objects.filter(pk=passport).exists()
    assert list(MemoryItem.objects.get(pk=city).evidence.values_list("entry_id", flat=True)) == [elsewhere]
    version = MemoryFileVersion.objects.filter(agent=alice.agent, path="/memories/ana.md").earliest("sequence")
    assert version.content == REDACTED_TEXT and version.place_id is None
    # A file of the thread's own scope goes with the thread (004): deleted after its redaction.
    assert (
        MemoryFileVersion.objects.filter(agent=alice.agent, path="/memories/ana.md").latest("sequence").content is None
    )
    assert _rows_holding("X12345678", alice.agent.pk) == dict.fromkeys(_rows_holding("", alice.agent.pk), 0)
    assert MemoryItem.objects.filter(pk=theirs).exists()
    assert Thread.objects.filter(agent=mallory.agent, external_id="t-1").exists()
    record = _lineage_audit()
    assert record.details["because"] == "thread.delete" and record.details["entries"] == 1
    assert AuditRecord.objects.filter(action="thread.delete", seq__gt=record.seq).exists()


def test_another_agent_cannot_start_a_cascade_and_a_rewind_forgets_nothing(alice: Caller, mallory: Caller) -> None:
    _thread(alice)
    told = _say(alice, f"My {SECRET}.")
    _say(alice, "Later.")
    passport = _item(alice, "Passport", "number", "X12345678", [(told, SECRET)])

    assert mallory.client.delete(f"/api/v1/entries/{told}").status_code == 404
    assert mallory.client.post(f"/api/v1/entries/{told}/redact", {}, format="json").status_code == 404
    assert alice.client.post("/api/v1/threads/t-1/rewind", {"entry_id": told}, format="json").status_code == 200

    assert MemoryItem.objects.get(pk=passport).evidence.get().quote == SECRET
    assert not AuditRecord.objects.filter(action="lineage.forget").exists()


# --- copies in forks go with their originals (004: forkOf, forks of forks followed) ----------


def _fork(caller: Caller, thread_id: str, entry_id: str, new_thread_id: str) -> dict[str, str]:
    post_ok(caller.client, f"/api/v1/threads/{thread_id}/fork", {"entry_id": entry_id, "new_thread_id": new_thread_id})
    rows = Entry.objects.filter(thread__external_id=new_thread_id, thread__agent=caller.agent)
    return {row.metadata["forkOf"]: row.id for row in rows}


def _forked_rome(alice: Caller) -> tuple[str, str, str, dict[str, str], dict[str, str]]:
    """t-1: hello -> secret -> after; fork f-1 at `after` (+ its own turn); f-2 forked from f-1."""
    _thread(alice)
    hello = _say(alice, "Hello, plan a day in Rome.")
    told = _say(alice, f"My {SECRET}.")
    after = _say(alice, "Start at the Colosseum.", role="assistant")
    first = _fork(alice, "t-1", after, "f-1")
    _say(alice, "And lunch near the Pantheon?", "f-1")
    second = _fork(alice, "f-1", Thread.objects.get(external_id="f-1").active_leaf_id, "f-2")
    return hello, told, after, first, second


def test_redacting_an_entry_redacts_its_copies_in_forks_and_forks_of_forks(alice: Caller) -> None:
    hello, told, after, first, second = _forked_rome(alice)
    copy_in_f2 = second[first[told]]

    response = alice.client.post(f"/api/v1/entries/{told}/redact", {"reason": "the user asked"}, format="json")

    assert response.status_code == 200, response.json()
    for entry_id in (told, first[told], copy_in_f2):
        row = Entry.objects.get(pk=entry_id)
        assert row.text == REDACTED_TEXT and row.redacted_at is not None and row.embedding is None
    assert Entry.objects.get(pk=first[hello]).text == "Hello, plan a day in Rome."
    assert _rows_holding("X12345678", alice.agent.pk) == dict.fromkeys(_rows_holding("", alice.agent.pk), 0)
    copies = AuditRecord.objects.filter(action="entry.redact", details__fork=True)
    assert sorted(i for r in copies for i in r.details["redacted_ids"]) == sorted(
        [first[told], first[after], copy_in_f2, second[first[after]]]
    )  # the copies of the message and of its reply
    assert not any("X12345678" in json.dumps([r.subject, r.details]) for r in AuditRecord.objects.all())


def test_deleting_an_entry_splices_out_its_copies_in_forks(alice: Caller) -> None:
    _, told, after, first, second = _forked_rome(alice)

    assert alice.client.delete(f"/api/v1/entries/{told}?keep_replies=true").status_code == 204

    gone = [told, first[told], second[first[told]]]
    assert not Entry.objects.filter(pk__in=gone).exists()
    # In each fork the copy's child now hangs under the copy's parent, as in the origin.
    assert Entry.objects.get(pk=after).parent_id == Entry.objects.get(pk=after).thread.entries.get(seq=1).id
    for fork in (first, second):
        copy_after = Entry.objects.get(pk=fork[after] if fork is first else fork[first[after]])
        assert copy_after.parent_id == copy_after.thread.entries.get(seq=1).id
    assert _rows_holding("X12345678", alice.agent.pk) == dict.fromkeys(_rows_holding("", alice.agent.pk), 0)


def test_deleting_a_thread_takes_the_copies_of_its_entries_in_its_forks(alice: Caller, mallory: Caller) -> None:
    _thread(mallory, "t-1")
    _say(mallory, f"My {SECRET}.", "t-1")
    _, _, _, first, _ = _forked_rome(alice)
    own = Entry.objects.get(thread__external_id="f-1", thread__agent=alice.agent, text__contains="Pantheon")

    assert alice.client.delete("/api/v1/threads/t-1").status_code == 204

    fork = Thread.objects.get(agent=alice.agent, external_id="f-1")
    assert list(fork.entries.values_list("id", flat=True)) == [own.id]
    assert Entry.objects.get(pk=own.id).parent_id is None and fork.active_leaf_id == own.id
    assert not Entry.objects.filter(pk__in=list(first.values())).exists()
    # f-2's copies of f-1's copies went too; its copy of f-1's own turn stays.
    assert list(
        Entry.objects.filter(thread__external_id="f-2", thread__agent=alice.agent).values_list("text", flat=True)
    ) == [own.text]
    assert _rows_holding("X12345678", alice.agent.pk) == dict.fromkeys(_rows_holding("", alice.agent.pk), 0)
    assert _rows_holding("X12345678", mallory.agent.pk)["memoryapp_entry"] == 1
    assert AuditRecord.objects.get(action="thread.delete").details["fork_copies"] == 6  # 3 in f-1, 3 in f-2


# --- concurrent cascades and forks (transactions commit: real locks) --------------------------


@pytest.mark.django_db(transaction=True)
def test_a_fork_made_while_an_entry_is_deleted_never_keeps_its_copy(alice: Caller, monkeypatch: Any) -> None:
    _thread(alice)
    told = _say(alice, f"My {SECRET}.")
    _say(alice, "Later.")
    copies_read, fork_tried = threading.Event(), threading.Event()
    real_fork_copies = forgetting_services.fork_copies

    def slow_fork_copies(entries: Any) -> Any:
        found = real_fork_copies(entries)
        copies_read.set()
        fork_tried.wait(5)
        time.sleep(0.3)  # the fork below is waiting for the thread's lock by now
        return found

    monkeypatch.setattr(forgetting_services, "fork_copies", slow_fork_copies)
    errors: list[BaseException] = []
    deleting = started(lambda: forgetting_services.entry_delete(entry=Entry.objects.get(pk=told)), errors)
    copies_read.wait(5)
    origin = Thread.objects.get(agent=alice.agent, external_id="t-1")
    leaf = origin.active_leaf_id or ""

    def fork() -> None:
        fork_tried.set()
        threads_services.thread_fork(thread=origin, entry_id=leaf, new_thread_id="f-late")

    forking = started(fork, errors)
    deleting.join(10)
    forking.join(10)
    assert errors == []
    assert not Entry.objects.filter(fork_of=told).exists()
    assert _rows_holding("X12345678", alice.agent.pk)["memoryapp_entry"] == 0


@pytest.mark.django_db(transaction=True)
def test_a_cascade_into_a_fork_and_a_redaction_in_that_fork_do_not_deadlock(alice: Caller, monkeypatch: Any) -> None:
    _thread(alice)
    told = _say(alice, f"My {SECRET}.")
    after = _say(alice, "Later.")
    _fork(alice, "t-1", after, "f-1")
    own = _say(alice, "A turn of the fork's own.", "f-1")
    fork_locked, delete_started = threading.Event(), threading.Event()
    real_lock_files = lineage.files_lock

    def lock_files_later(access: Any) -> None:
        # The redaction in f-1 holds f-1's row; it takes the agent's file lock only once the
        # cascade from t-1 has started (the order that used to deadlock).
        if threading.current_thread().name == "redactor":
            fork_locked.set()
            delete_started.wait(5)
            time.sleep(0.3)
        real_lock_files(access)

    monkeypatch.setattr(lineage, "files_lock", lock_files_later)
    errors: list[BaseException] = []
    redactor = started(
        lambda: forgetting_services.entry_redact(entry=Entry.objects.get(pk=own)), errors, name="redactor"
    )
    fork_locked.wait(5)

    def delete() -> None:
        delete_started.set()
        forgetting_services.entry_delete(entry=Entry.objects.get(pk=told))

    deleting = started(delete, errors)
    redactor.join(15)
    deleting.join(15)
    assert errors == []
    assert Entry.objects.get(pk=own).redacted_at is not None
    assert not Entry.objects.filter(pk=told).exists() and not Entry.objects.filter(fork_of=told).exists()


# --- vectors: a short turn is embedded with the words of the turn it answers -----------------------

CARD = "my card number is 4111 1111 1111"


def _embedding_text(entry_id: str) -> str:
    entry = Entry.objects.get(pk=entry_id)
    return entry_embedding_text(entry=entry, previous=Entry.objects.filter(pk=entry.parent_id).first())


def _stored_vector(entry_id: str) -> list[float] | None:
    vector = Entry.objects.get(pk=entry_id).embedding
    return None if vector is None else [float(v) for v in vector]


def _same_vector(stored: list[float] | None, text: str) -> bool:
    expected = embed_texts([text])[0]
    return stored is not None and max(abs(a - b) for a, b in zip(stored, expected, strict=True)) < 1e-5


def _vector_score(caller: Caller, text: str, entry_id: str) -> float:
    answer = caller.client.post("/api/v1/search", {"text": text, "method": "vector", "limit": 100}, format="json")
    assert answer.status_code == 200, answer.json()
    scores = {hit["id"]: hit["score"] for hit in answer.json()["results"]}
    return float(scores.get(entry_id, 0.0))


@pytest.mark.parametrize("forget", ["redact", "delete"])
def test_a_short_reply_loses_the_vector_that_carried_its_parents_words_and_is_embedded_again_without_them(
    alice: Caller, forget: str, django_capture_on_commit_callbacks: Any
) -> None:
    _thread(alice)
    _say(alice, "Hello, I need help with a payment.")
    told = _say(alice, CARD)
    reply = _say(alice, "ok", role="assistant")
    embed_pending(agent_id=alice.agent.pk)
    said_with_card = _embedding_text(reply)
    assert "4111" in said_with_card and _same_vector(_stored_vector(reply), said_with_card)
    score_with_card = _vector_score(alice, CARD, reply)

    with django_capture_on_commit_callbacks() as after_commit:
        if forget == "redact":
            forgetting_services.entry_redact(entry=Entry.objects.get(pk=told), keep_replies=True)
        else:  # the reply goes under the turn before: a splice
            forgetting_services.entry_delete(entry=Entry.objects.get(pk=told), keep_replies=True)
    row = Entry.objects.get(pk=reply)
    assert (row.embedding, row.embedded_at) == (None, None)
    assert _lineage_audit().details["vectors_cleared"] == 1
    said_now = _embedding_text(reply)
    assert "4111" not in said_now and said_now.startswith("assistant said: ok")

    # Once the cascade commits, the embedding job is sent and embeds the reply from what remains.
    with django_capture_on_commit_callbacks(execute=True):  # and what the job sends after its own commit
        for callback in after_commit:
            callback()
    assert JobRun.objects.filter(kind="embedding", agent_id=alice.agent.pk, status="succeeded").exists()
    assert _same_vector(_stored_vector(reply), said_now)
    assert not _same_vector(_stored_vector(reply), said_with_card)
    # Searching by vector for the number: the reply's vector no longer carries it.
    assert _vector_score(alice, CARD, reply) < score_with_card


@pytest.mark.django_db(transaction=True)
def test_a_reply_embedded_while_its_parent_is_redacted_never_stores_the_parents_words(
    alice: Caller, monkeypatch: Any
) -> None:
    with monkeypatch.context() as quiet:
        quiet.setattr(threads_services, "after_entries_added", lambda *, thread, entries: None)
        _thread(alice)
        told = _say(alice, CARD)
        reply = _say(alice, "ok", role="assistant")
    said_with_card = _embedding_text(reply)
    fake = embedders.embedder()
    embedding, release = threading.Event(), threading.Event()

    class HeldEmbedder:
        name, dimensions = fake.name, fake.dimensions

        def embed(self, texts: list[str]) -> list[list[float]]:
            embedding.set()
            release.wait(10)
            return fake.embed(texts)

    monkeypatch.setattr(embedders, "embedder", lambda: HeldEmbedder())
    # The job below embeds the reply again; the one the redaction sends would wait for it.
    monkeypatch.setattr(lineage, "after_vectors_cleared", lambda *, agent_id: None)
    errors: list[BaseException] = []
    # The job reads the reply and its parent's words, then the model takes its time...
    job = started(lambda: embed_pending(agent_id=alice.agent.pk), errors)
    assert embedding.wait(10)
    # ...while the parent is redacted (not waiting for the model).
    redaction = started(
        lambda: forgetting_services.entry_redact(entry=Entry.objects.get(pk=told), keep_replies=True), errors
    )
    redaction.join(10)
    finished_while_the_model_ran = not redaction.is_alive()
    release.set()
    job.join(10)
    assert errors == [] and finished_while_the_model_ran
    said_now = _embedding_text(reply)
    assert "4111" not in said_now
    # The vector made from the parent's words was not stored; the job's second look embedded the rest.
    assert not _same_vector(_stored_vector(reply), said_with_card)
    assert _same_vector(_stored_vector(reply), said_now)


def test_what_the_cascade_takes_away_is_in_the_agents_change_events_ids_only(alice: Caller, mallory: Caller) -> None:
    """Deleting an entry purged the items standing on it, redacted the file versions written at it
    and removed the compaction covering it, with no change event for any of them: a follower that
    mirrors items or files (SSE, webhooks) kept what the person had taken away."""
    _thread(alice)
    told = _say(alice, f"My {SECRET}.")
    for n in range(5):
        _say(alice, f"turn {n}", role="assistant" if n % 2 == 0 else "user")
    passport = _item(alice, "Passport", "number", "X12345678", [(told, SECRET)])
    _write_file(alice, "/memories/ana.md", f"Ana's {SECRET}", place=told)
    version = MemoryFileVersion.objects.get(agent=alice.agent, path="/memories/ana.md")
    turns = [e.id for e in Entry.objects.filter(agent=alice.agent).order_by("seq")]
    summary = _summarize(alice, first_kept=turns[4])
    _thread(mallory, "m-1")
    events_number_now()
    before = Event.objects.filter(agent=alice.agent).count()

    assert alice.client.delete(f"/api/v1/entries/{told}").status_code == 204
    events_number_now()

    after = {
        (e.type, e.thread_id, tuple(e.ids)) for e in Event.objects.filter(agent=alice.agent).order_by("seq")[before:]
    }
    assert ("item.forgotten", "", (passport,)) in after, after
    assert ("file.redacted", "", (version.pk,)) in after, after
    assert ("entry.deleted", "t-1", (summary.pk,)) in after, after
    # The message goes with its reply (004: a user message takes its replies).
    assert any(kind == "entry.deleted" and told in ids for kind, _, ids in after), after
    assert SECRET not in json.dumps(sorted(after))
    assert not Event.objects.filter(agent=mallory.agent, type__in=["item.forgotten", "file.redacted"]).exists()

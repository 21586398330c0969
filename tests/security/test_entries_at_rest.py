"""Entries with encryption on: sealed in the database, whole through the API, found by keyword."""

from __future__ import annotations

from typing import Any

from django.db import connection

from governance.jobs.runs import job_finish
from governance.models import JobRun
from memoryapp.models import Entry, Evidence
from tests.kit.api import Caller, answered
from tests.kit.crypto import assert_none_planted, pg_dump
from tests.kit.factories import JobRunFactory, MemoryItemFactory
from tests.kit.servers import database_conninfo

PLANTED = ["Zanzibarquill", "plumbago-vortex", "Marmalade Fjord", "quokkaparade", "tangerinecipher"]


def _write_conversation(caller: Caller, *, thread_id: str = "t-secret", user_id: str = "u-ana") -> list[dict[str, Any]]:
    answered(caller.client.post("/api/v1/threads", {"id": thread_id, "user_id": user_id}, format="json"), (200, 201))
    batch = [
        {"role": "user", "content": "I keep my Zanzibarquill notebook in the Marmalade Fjord cabin"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "Let me look up plumbago-vortex for you."}],
            "tool_calls": [{"id": "call-1", "name": "lookup", "arguments": {"q": "quokkaparade"}}],
        },
        {"type": "tool_result", "content": "tangerinecipher is the answer", "tool_call_id": "call-1"},
    ]
    written = answered(
        caller.client.post(f"/api/v1/threads/{thread_id}/entries", {"entries": batch}, format="json"), 201
    )["entries"]
    one = answered(
        caller.client.post(
            f"/api/v1/threads/{thread_id}/entries",
            {"role": "user", "content": "thanks, Zanzibarquill it is"},
            format="json",
        ),
        201,
    )
    return [*written, one]


def test_entries_written_with_encryption_on_are_sealed_in_a_dump_and_whole_through_the_api(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    written = _write_conversation(alice)

    dump = pg_dump(database_conninfo())
    assert "memoryapp_entry" in dump and "enc:v1:dk" in dump
    assert_none_planted(dump, PLANTED)

    path = answered(alice.client.get("/api/v1/threads/t-secret/path?types=all"), 200)
    contents = [e["content"] for e in path["results"]]
    assert contents[0] == "I keep my Zanzibarquill notebook in the Marmalade Fjord cabin"
    assert contents[1] == [{"type": "text", "text": "Let me look up plumbago-vortex for you."}]
    assert path["results"][1]["tool_calls"] == [{"id": "call-1", "name": "lookup", "arguments": {"q": "quokkaparade"}}]
    # The tool result took its name from the sealed tool call it answers.
    assert path["results"][2]["tool_name"] == "lookup"
    assert [e["id"] for e in path["results"]] == [e["id"] for e in written]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*), count(*) FILTER (WHERE length(search_vector) = 0),"
            " count(*) FILTER (WHERE keyword_hashes IS NOT NULL) FROM memoryapp_entry"
        )
        assert cursor.fetchone() == (4, 4, 4)


def test_keyword_search_finds_planted_words_through_the_blind_index(encrypted: Any, db: None, alice: Caller) -> None:
    _write_conversation(alice)

    answer = answered(
        alice.client.post(
            "/api/v1/search", {"text": "where is the zanzibarquill notebook", "method": "keyword"}, format="json"
        ),
        200,
    )
    texts = [hit["text"] for hit in answer["results"]]
    assert texts[0] == "I keep my Zanzibarquill notebook in the Marmalade Fjord cabin"
    assert "thanks, Zanzibarquill it is" in texts
    assert all("keyword" in hit["channels"] for hit in answer["results"])

    plural = answered(alice.client.post("/api/v1/search", {"text": "cabins", "method": "keyword"}, format="json"), 200)
    assert [h["text"] for h in plural["results"]][:1] == [
        "I keep my Zanzibarquill notebook in the Marmalade Fjord cabin"
    ]

    tool = answered(
        alice.client.post("/api/v1/search", {"text": "tangerinecipher", "method": "keyword"}, format="json"), 200
    )
    assert [h["text"] for h in tool["results"]] == ["tangerinecipher is the answer"]


def test_keyword_search_with_encryption_on_never_finds_another_agents_entries(
    encrypted: Any, db: None, alice: Caller, mallory: Caller
) -> None:
    _write_conversation(alice)
    _write_conversation(mallory, thread_id="t-other", user_id="u-bo")
    Entry.objects.filter(thread__agent=mallory.agent).count()

    answer = answered(
        alice.client.post("/api/v1/search", {"text": "Zanzibarquill", "method": "keyword"}, format="json"), 200
    )
    threads = {hit["thread_id"] for hit in answer["results"]}
    assert threads == {"t-secret"}
    # The same word hashes differently for each agent: equality does not cross agents.
    with connection.cursor() as cursor:
        cursor.execute("SELECT e.agent_id, e.keyword_hashes FROM memoryapp_entry e WHERE e.seq = 4 ORDER BY e.agent_id")
        (_, first), (_, second) = cursor.fetchall()
    assert not set(first) & set(second)


def test_evidence_quotes_and_job_results_are_sealed_and_read_whole(
    encrypted: Any, transactional_db: None, alice: Caller
) -> None:
    _write_conversation(alice)
    entry = Entry.objects.get(seq=1)
    item = MemoryItemFactory(
        agent=alice.agent, value="keeps notebooks", evidence=[{"entry_id": entry.id, "quote": "Zanzibarquill notebook"}]
    )
    run = JobRunFactory(agent_id=alice.agent.pk)
    job_finish(run, {"summary": "quokkaparade handled"})

    assert_none_planted(pg_dump(database_conninfo()), ["Zanzibarquill", "quokkaparade"])
    assert [e.quote for e in Evidence.objects.filter(item=item)] == ["Zanzibarquill notebook"]
    assert JobRun.objects.get(pk=run.pk).result == {"summary": "quokkaparade handled"}
    with connection.cursor() as cursor:
        cursor.execute("SELECT quote FROM memoryapp_evidence")
        assert all(row[0].startswith("enc:v1:") for row in cursor.fetchall())

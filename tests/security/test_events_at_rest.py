"""Session events with encryption on: a compaction's summary and atoms, and the placeholders of the
tool results it cleared, sealed in the database and whole through the API, the context builder and
the admin; what looked inside events in the database (a job run's compaction, the tool results a
retention prune empties) still finds them."""

from __future__ import annotations

import json
from typing import Any

from django.db import connection
from django.test import Client
from django.utils import timezone

from governance.crypto.rotation import encryption_rotate
from governance.models import JobRun
from governance.retention.services import retention_prune
from memoryapp.compaction.history import SUMMARY_HEADING
from memoryapp.compaction.services import compaction_run
from memoryapp.llm.port import use_model
from memoryapp.llm.scripted import ScriptedModel
from memoryapp.models import Entry, Thread
from tests.kit.api import Caller, answered, build_context
from tests.kit.crypto import K1, assert_none_planted, keys_set, pg_dump
from tests.kit.factories import tool_round, tool_thread
from tests.kit.servers import database_conninfo
from tests.retention.world import days_ago, policy

PLANTED = ["Quillfeather", "obsidianlatch", "marzipanvault", "Periwinkle Gorge"]
EVERYTHING = {"keep_recent_tokens": None, "keep_recent": 0}
ATOMS = [
    {
        "kind": "constraint",
        "status": "open",
        "text": "The Quillfeather ledger stays behind the obsidianlatch door",
        "evidence": [{"message": 1, "quote": "keep the Quillfeather ledger behind the obsidianlatch door"}],
    },
    {
        "kind": "decision",
        "status": "open",
        "text": "The marzipanvault backup runs at noon",
        "evidence": [{"message": 2, "quote": "the marzipanvault backup runs at noon"}],
    },
    {
        "kind": "question",
        "status": "open",
        "text": "What about the Periwinkle Gorge cabin?",
        "evidence": [{"message": 3, "quote": "What about the Periwinkle Gorge cabin?"}],
    },
]


def _atoms_then_nothing(system: str, messages: list[dict[str, str]]) -> str:
    """The compaction's call finds the atoms; the extraction sent after it finds nothing."""
    return json.dumps(ATOMS) if "Items still open:" in system else "[]"


def _compacted_thread(caller: Caller) -> dict[str, Any]:
    """Thread t-atoms of u-ana, three turns, compacted by the hierarchical strategy over HTTP."""
    answered(caller.client.post("/api/v1/threads", {"id": "t-atoms", "user_id": "u-ana"}, format="json"), 201)
    turns = [
        {"role": "user", "content": "We must keep the Quillfeather ledger behind the obsidianlatch door."},
        {"role": "assistant", "content": "Decided: the marzipanvault backup runs at noon."},
        {"role": "user", "content": "What about the Periwinkle Gorge cabin?"},
    ]
    answered(caller.client.post("/api/v1/threads/t-atoms/entries", {"entries": turns}, format="json"), 201)
    with use_model(ScriptedModel(_atoms_then_nothing)):
        body = answered(
            caller.client.post(
                "/api/v1/threads/t-atoms/compact",
                {"strategy": "hierarchical", "async": False, **EVERYTHING},
                format="json",
            ),
            201,
        )
    assert body["compacted"] is True
    return dict(body)


def _stored_events() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT event::text FROM memoryapp_entry WHERE event IS NOT NULL ORDER BY seq")
        return [row[0] for row in cursor.fetchall()]


def test_a_compactions_summary_and_atoms_are_sealed_in_a_dump_and_whole_where_they_are_read(
    encrypted: Any, transactional_db: None, alice: Caller, admin_client: Client
) -> None:
    body = _compacted_thread(alice)
    entry_id = body["entry"]["id"]

    assert_none_planted(pg_dump(database_conninfo()), PLANTED)
    assert [e[:8] for e in _stored_events()] == ['"enc:v1:']

    # The thread's path: the compaction's event whole, atoms and their quotes.
    path = answered(alice.client.get("/api/v1/threads/t-atoms/path?types=all"), 200)["results"]
    event = next(e["event"] for e in path if e["id"] == entry_id)
    assert event["strategy"] == "hierarchical" and event["summary"].startswith(SUMMARY_HEADING)
    atoms = json.dumps(event["levels"])
    assert all(word in atoms for word in ("Quillfeather", "obsidianlatch", "marzipanvault", "Periwinkle Gorge"))

    # The context builder reads the window as raw rows: the summary comes from the opened event.
    context = build_context(alice, "t-atoms", max_tokens=4000)
    said = json.dumps(context["messages"])
    assert "The marzipanvault backup runs at noon" in said and "Quillfeather" in said

    # The admin: the thread as a conversation (the summary, the strategy), the entry with its event.
    thread = Thread.objects.get(external_id="t-atoms")
    page = admin_client.get(f"/admin/memoryapp/thread/{thread.pk}/change/").content.decode()
    assert "The marzipanvault backup runs at noon" in page and "hierarchical" in page
    page = admin_client.get(f"/admin/memoryapp/entry/{entry_id}/change/").content.decode()
    assert "obsidianlatch door" in page and "hierarchical_v1" in page

    # A redelivered job finds the compaction its run wrote, inside the sealed event.
    run = JobRun.objects.get(pk=body["job_run"]["id"])
    again = compaction_run(thread=thread, strategy="hierarchical", options=EVERYTHING, run=run)
    assert again.entry is not None and again.entry.id == entry_id
    assert again.reason == "already written by this job run"
    assert Entry.objects.filter(thread=thread, type="compaction").count() == 1


def test_a_redelivered_compaction_job_finds_its_entry_inside_the_sealed_event_and_no_other_runs(
    encrypted: Any, db: None, alice: Caller
) -> None:
    thread = tool_thread(alice.agent, rounds=2)
    clear = {"keep_tool_uses": 1}
    first = JobRun.objects.create(kind="compaction", agent_id=alice.agent.pk)
    written = compaction_run(thread=thread, strategy="clear-old-tool-results", options=clear, run=first)
    assert written.entry is not None and _stored_events()[0].startswith('"enc:v1:')

    again = compaction_run(thread=thread, strategy="clear-old-tool-results", options=clear, run=first)

    assert again.entry is not None and again.entry.id == written.entry.id
    assert again.reason == "already written by this job run"
    tool_round(thread, 2)
    tool_round(thread, 3)
    thread.refresh_from_db()
    other = JobRun.objects.create(kind="compaction", agent_id=alice.agent.pk)
    anew = compaction_run(thread=thread, strategy="clear-old-tool-results", options=clear, run=other)
    assert anew.entry is not None and anew.entry.id != written.entry.id
    assert anew.entry.event["job_run_id"] == other.pk
    assert Entry.objects.filter(thread=thread, type="compaction").count() == 2


def test_externalised_tool_results_are_served_by_handle_and_emptied_by_the_retention_prune(
    encrypted: Any, db: None, alice: Caller
) -> None:
    thread = tool_thread(alice.agent, rounds=3)
    compacted = answered(
        alice.client.post(
            f"/api/v1/threads/{thread.external_id}/compact",
            {"strategy": "clear-old-tool-results", "keep_tool_uses": 1},
            format="json",
        ),
        201,
    )
    assert compacted["cleared"] == 2
    stored = _stored_events()
    assert len(stored) == 1 and stored[0].startswith('"enc:v1:') and "PAGE-" not in stored[0]
    results = {e.tool_call_id: e for e in Entry.objects.filter(thread=thread, type="tool_result")}
    served = answered(alice.client.get(f"/api/v1/tool-results/{results['c0'].id}"), 200)
    assert served["content"].startswith("PAGE-0-BODY") and served["tool_name"] == "fetch_page"
    # Old: the first result (cleared) and the newest (kept in the history, never cleared).
    Entry.objects.filter(pk__in=[results["c0"].id, results["c2"].id]).update(created_at=days_ago(40))
    policy(tool_result_days=30)

    report = retention_prune(as_of=timezone.now()).report()

    assert report["counts"]["tool_results_expired"] == 1
    expired = {e.tool_call_id for e in Entry.objects.filter(thread=thread, redacted_at__isnull=False)}
    assert expired == {"c0"}
    gone = answered(alice.client.get(f"/api/v1/tool-results/{results['c0'].id}"), 200)
    assert "PAGE-0-BODY" not in json.dumps(gone)
    kept = answered(alice.client.get(f"/api/v1/tool-results/{results['c1'].id}"), 200)
    assert kept["content"].startswith("PAGE-1-BODY")


def test_events_written_with_encryption_off_are_sealed_by_the_rotation(
    encrypted: Any, transactional_db: None, settings: Any, alice: Caller
) -> None:
    keys_set(settings, "")
    answered(alice.client.post("/api/v1/threads", {"id": "t-label", "user_id": "u-ana"}, format="json"), 201)
    label = {"type": "label", "role": "user", "event": {"label": "Quillfeather", "note": "obsidianlatch"}}
    answered(alice.client.post("/api/v1/threads/t-label/entries", label, format="json"), 201)
    assert "Quillfeather" in _stored_events()[0]

    keys_set(settings, K1)
    result = encryption_rotate(settle=0)

    assert result["rows_resealed"]["memoryapp_entry"] == 1
    assert_none_planted(pg_dump(database_conninfo()), ["Quillfeather", "obsidianlatch"])
    path = answered(alice.client.get("/api/v1/threads/t-label/path?types=all"), 200)["results"]
    assert [e["event"] for e in path] == [{"label": "Quillfeather", "note": "obsidianlatch"}]

"""A tour of the agent API: every operation called, its answers in each of their forms kept.

The schema tests check every answer of the tour against the OpenAPI schema the service
publishes, so a response shape cannot drift from what the docs page and generated clients see.
Each visit names the operation by its schema path (`/api/v1/threads/{thread_id}`), so the
check finds the declared response of the status the call got.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.http import HttpResponseBase

from memoryapp.consolidation.observations import observation_file, observation_path
from memoryapp.files.access import FileAccess
from memoryapp.files.services import file_put
from memoryapp.graph.services import relation_write
from memoryapp.items.services import item_write
from memoryapp.llm.port import use_model
from memoryapp.llm.scripted import ScriptedModel
from tests.kit.api import Caller
from tests.kit.events import events_number_now

V1 = "/api/v1"


@dataclass
class Visit:
    method: str
    path: str  # the operation's path as the schema names it
    url: str
    response: HttpResponseBase
    # A stream's text, read once.
    streamed: str | None = None

    @property
    def status(self) -> int:
        return self.response.status_code

    @property
    def content_type(self) -> str:
        return self.response.get("Content-Type", "").split(";")[0]

    def released(self) -> Visit:
        """A stream read whole and its resources closed (its stream slot given back), without
        `response.close()`, whose request_finished signal would close the test's connection."""
        self.body()
        for closer in getattr(self.response, "_resource_closers", []):
            closer()
        return self

    def body(self) -> Any:
        if getattr(self.response, "streaming", False):
            if self.streamed is None:
                self.streamed = b"".join(self.response.streaming_content).decode()  # type: ignore[attr-defined]
            return self.streamed
        raw = self.response.content
        if not raw:
            return None
        return json.loads(raw) if self.content_type == "application/json" else raw.decode()


class Tour:
    def __init__(self, caller: Caller):
        self.client = caller.client
        self.visits: list[Visit] = []

    def call(
        self,
        method: str,
        path: str,
        url: str | None = None,
        body: Any = None,
        *,
        raw: str | None = None,
        query: dict[str, Any] | None = None,
    ) -> Visit:
        target = url or path
        kwargs: dict[str, Any] = {}
        if raw is not None:
            kwargs = {"data": raw, "content_type": "application/x-ndjson"}
        elif body is not None:
            kwargs = {"data": body, "format": "json"}
        if query:
            target += "?" + urlencode(query)
        response = getattr(self.client, method.lower())(target, **kwargs)
        visit = Visit(method.upper(), path, target, response)
        self.visits.append(visit)
        return visit


def api_tour(caller: Caller) -> list[Visit]:
    """Call every operation of the agent API, each answer form at least once (errors included)."""
    tour = Tour(caller)
    call = tour.call
    thread = f"{V1}/threads/{{thread_id}}"

    call("GET", f"{V1}/")

    # Threads.
    call("POST", f"{V1}/threads", body={"id": "tour", "user_id": "u-ana", "metadata": {"topic": "trip"}})
    call("POST", f"{V1}/threads", body={"id": "tour", "metadata": {"mood": "fine"}})
    call("POST", f"{V1}/threads", body={"id": "tour-b"})
    call("GET", f"{V1}/threads")
    page = call("GET", f"{V1}/threads", query={"limit": 1}).body()
    assert page["next"], page
    call("GET", thread, f"{V1}/threads/tour")
    call("PATCH", thread, f"{V1}/threads/tour", body={"metadata": {"mood": None}})

    # Entries: every optional field of an entry set once, a batch, the pages.
    entries = f"{thread}/entries"
    at = f"{V1}/threads/tour/entries"
    first = call("POST", entries, at, body={"role": "user", "content": "I fly to Lisbon on Friday."}).body()
    call(
        "POST",
        entries,
        at,
        body={
            "role": "assistant",
            "content": "",
            "sender_name": "planner",
            "tool_calls": [{"id": "c1", "name": "fetch_page", "arguments": {"page": 1}}],
        },
    )
    fetched = call(
        "POST",
        entries,
        at,
        body={"type": "tool_result", "tool_call_id": "c1", "tool_name": "fetch_page", "content": "page one " * 300},
    ).body()
    batch = call(
        "POST",
        entries,
        at,
        body={
            "entries": [
                {"role": "assistant", "content": "Lisbon on Friday, noted."},
                {"type": "label", "event": {"label": "booked"}, "metadata": {"source": "tour"}},
                {"role": "user", "content": [{"type": "text", "text": "I am vegetarian."}]},
            ]
        },
    ).body()
    last_id = batch["entries"][-1]["id"]
    call("GET", entries, at)
    call("GET", entries, at, query={"limit": 2, "types": "all"})
    call("GET", f"{thread}/path", f"{V1}/threads/tour/path")
    call("GET", f"{thread}/path", f"{V1}/threads/tour/path", query={"limit": 2})
    call("GET", f"{V1}/entries/{{entry_id}}", f"{V1}/entries/{first['id']}")
    call("POST", f"{thread}/checkout", f"{V1}/threads/tour/checkout", body={"entry_id": first["id"]})
    call("POST", f"{thread}/checkout", f"{V1}/threads/tour/checkout", body={"entry_id": last_id})
    label_id = batch["entries"][1]["id"]
    call("POST", f"{thread}/rewind", f"{V1}/threads/tour/rewind", body={"entry_id": label_id})
    call("POST", f"{thread}/fork", f"{V1}/threads/tour/fork", body={"entry_id": last_id, "new_thread_id": "tour-fork"})
    # Busy threads: a run started, read, a second start refused (the thread rejects), a write with
    # the run's id, the run finished.
    call("PATCH", thread, f"{V1}/threads/tour-b", body={"on_busy": "reject", "busy_timeout_seconds": 30})
    runs = f"{thread}/runs"
    run = call("POST", runs, f"{V1}/threads/tour-b/runs").body()
    call("POST", runs, f"{V1}/threads/tour-b/runs")  # 409 thread_busy
    call("GET", f"{runs}/{{run_id}}", f"{V1}/threads/tour-b/runs/{run['id']}")
    tour.client.post(
        f"{V1}/threads/tour-b/entries", {"role": "user", "content": "in a run"}, format="json", HTTP_X_RUN_ID=run["id"]
    )
    call("POST", f"{runs}/{{run_id}}/finish", f"{V1}/threads/tour-b/runs/{run['id']}/finish")
    call("POST", f"{runs}/{{run_id}}/finish", f"{V1}/threads/tour-b/runs/run_none/finish")  # 404
    call("PATCH", thread, f"{V1}/threads/tour-b", body={"on_busy": "interrupt"})
    ended = call("POST", runs, f"{V1}/threads/tour-b/runs").body()
    call("POST", runs, f"{V1}/threads/tour-b/runs")  # interrupts it
    call("GET", f"{runs}/{{run_id}}", f"{V1}/threads/tour-b/runs/{ended['id']}")  # ended_by the new run
    # The run's event ledger: a batch, one event, its end, a refused event after it, the stream, the snapshot.
    ledger = f"{runs}/{{run_id}}/events"
    at_ledger = f"{V1}/threads/tour-b/runs/{ended['id']}/events"
    snapshot = {"runId": "r-1", "sessionId": "tour-b", "phase": "streaming", "messages": [], "pending": []}
    call(
        "POST",
        ledger,
        at_ledger,
        body={"events": [{"kind": "snapshot", "snapshot": snapshot}, {"kind": "text_delta", "delta": "Hi"}]},
    )
    call("POST", ledger, at_ledger, body={"kind": "tool_started", "id": "c1", "name": "search"})
    call("POST", ledger, at_ledger, body={"kind": "text_delta"})  # 400: no delta
    call("POST", ledger, at_ledger, body={"kind": "settled", "snapshot": {**snapshot, "phase": "settled"}})
    call("POST", ledger, at_ledger, body={"kind": "text_delta", "delta": "late"})  # 409 run_settled
    call("GET", f"{runs}/{{run_id}}/snapshot", f"{V1}/threads/tour-b/runs/{ended['id']}/snapshot")
    call("GET", f"{thread}/export", f"{V1}/threads/tour-fork/export")
    # Channel sessions: made, found again, listed, read, closed, a second reopen refused, reopened.
    sessions = f"{V1}/sessions"
    session_body = {"user_id": "u-ana", "channel_type": "telegram", "channel_id": "chat-1"}
    opened = call("POST", sessions, body=session_body).body()
    assert "session" in opened, opened
    session = opened["session"]
    call("POST", sessions, body=session_body)  # 200: the same session
    call("POST", sessions, body={**session_body, "channel_id": ""})  # 400
    call("GET", sessions, query={"user_id": "u-ana", "status": "active", "limit": 1})
    one = f"{sessions}/{{session_id}}"
    call("GET", one, f"{sessions}/{session['id']}")
    call("GET", one, f"{sessions}/ses_none")  # 404
    call("POST", f"{one}/close", f"{sessions}/{session['id']}/close")
    newer = call("POST", sessions, body=session_body).body()["session"]
    call("POST", f"{one}/reopen", f"{sessions}/{session['id']}/reopen")  # 409 session_active
    call("POST", f"{one}/close", f"{sessions}/{newer['id']}/close")
    call("POST", f"{one}/reopen", f"{sessions}/{session['id']}/reopen")
    # A longer conversation, imported: recall and a summary need turns older than the kept history.
    turns = [("user", "My sister Marta moved to Porto in 2019 and works as a nurse there")]
    turns += [(("user", "assistant")[n % 2], f"turn {n}: we talk about the weather and the trains") for n in range(40)]
    nodes = [
        {
            "type": "node",
            "node": {
                "id": f"tour-n{n}",
                "parent": f"tour-n{n - 1}" if n else None,
                "seq": n + 1,
                "turn": {"role": role, "content": text},
            },
        }
        for n, (role, text) in enumerate(turns)
    ]
    lines = "".join(
        json.dumps(record) + "\n" for record in [*nodes, {"type": "head", "leaf": f"tour-n{len(turns) - 1}"}]
    )
    call("POST", f"{V1}/threads/import", raw=lines, query={"id": "tour-copy"})

    # Standing instructions: context documents (placed by the context builds below), the memory switch.
    document = f"{V1}/context-documents/{{name}}"
    call("PUT", document, f"{V1}/context-documents/AGENTS.md", body={"content": "Answer briefly."})
    call("PUT", document, f"{V1}/context-documents/AGENTS.md", body={"content": "Answer briefly and kindly."})
    call("PUT", document, f"{V1}/context-documents/style.md?thread_id=tour", body={"content": "Use metric units."})
    call("GET", f"{V1}/context-documents")
    call("GET", f"{V1}/context-documents", query={"thread_id": "tour"})
    call("GET", document, f"{V1}/context-documents/AGENTS.md")
    # Knowledge documents (the semantic context), searched and placed by the context builds below.
    knowledge = call(
        "POST", f"{V1}/knowledge", body={"name": "manual.md", "content": "Returns within 30 days with the receipt."}
    ).body()
    call("POST", f"{V1}/knowledge", body={"name": "manual.md", "content": "again"})  # 409
    call("POST", f"{V1}/knowledge", body={"name": "", "content": "x"})  # 400
    call("GET", f"{V1}/knowledge")
    call("GET", f"{V1}/knowledge", query={"project_id": "p-tour"})
    one_document = f"{V1}/knowledge/{{document_id}}"
    call("GET", one_document, f"{V1}/knowledge/{knowledge['id']}")
    call("GET", one_document, f"{V1}/knowledge/kdoc_missing")  # 404
    call("PUT", one_document, f"{V1}/knowledge/{knowledge['id']}", body={"content": "Returns within 30 days."})
    call("POST", f"{V1}/knowledge/search", body={"text": "How long do returns take?"})
    memory = f"{thread}/memory"
    call("GET", memory, f"{V1}/threads/tour/memory")
    call("PUT", memory, f"{V1}/threads/tour/memory", body={"memory": "off"})
    call("PUT", memory, f"{V1}/threads/tour/memory", body={"memory": "on"})

    # What memory is collected for (purpose-bound recall), then items and facts.
    purposes = f"{V1}/settings/purposes"
    call("GET", purposes)
    call("PATCH", purposes, body={"purposes": ["Not a slug"]})  # 400
    call("PATCH", purposes, body={"purposes": ["support"]})
    item = call(
        "POST",
        f"{V1}/items",
        body={
            "kind": "preference",
            "subject": "user",
            "attribute": "diet",
            "value": "vegetarian",
            "user_id": "u-ana",
            "prompt_version": "tour_v1",
            "evidence": [{"entry_id": last_id, "quote": "I am vegetarian"}],
        },
    ).body()
    call("GET", f"{V1}/items")
    call("GET", f"{V1}/items", query={"limit": 1})
    call("GET", f"{V1}/items/{{item_id}}", f"{V1}/items/{item['id']}")
    call("GET", f"{V1}/items/{{item_id}}/history", f"{V1}/items/{item['id']}/history")
    # An active item (written by the service: an agent's key writes suggested ones) for recall.
    marta = item_write(agent=caller.agent, kind="fact", subject="Marta", attribute="job", value="nurse", trust="system")
    # An edge of the knowledge graph about Marta (extraction writes them; no agent endpoint does).
    relation_write(
        agent=caller.agent,
        subject="Marta",
        predicate="flies to",
        object="Lisbon",
        evidence=[{"entry_id": first["id"], "quote": "I fly to Lisbon"}],
    )
    # An observation of Marta, as the observations pass writes it (memory itself, past the reserved paths).
    assert marta.entity is not None
    file_put(
        access=FileAccess(agent=caller.agent, reserved=(), author="memory"),
        path=observation_path(marta.entity),
        text=observation_file(
            entity=marta.entity, based_on="tour", facts=1, statements=[f"Marta works shifts. [item:{marta.pk}]"]
        ),
    )
    card = {"kind": "knowledge", "text": "Marta is a nurse.", "quote": "Marta job: nurse", "source": f"item:{marta.pk}"}
    with use_model(ScriptedModel(lambda system, messages: json.dumps([card]))):
        call(
            "POST",
            f"{V1}/threads/{{thread_id}}/context",
            f"{V1}/threads/tour/context",
            body={"max_tokens": 2000, "current_input": "What does Marta do?", "brief_cards": 2, "file_index": True},
        )
    call(
        "POST",
        f"{V1}/threads/{{thread_id}}/context",
        f"{V1}/threads/tour/context",
        body={
            "max_tokens": 2000,
            "current_input": "Does Marta know the returns policy?",
            "include_graph_context": True,
            "include_semantic_context": True,
        },
    )
    call("POST", f"{V1}/search", body={"text": "Lisbon Friday", "method": "keyword"})
    call("POST", f"{V1}/search", body={"text": "Marta nurse", "kinds": ["entries", "items"]})
    facts = f"{V1}/facts/{{path}}"
    call("PUT", facts, f"{V1}/facts/users/u-ana/city", body={"value": "Lisbon", "purposes": ["support"]})
    call("PUT", facts, f"{V1}/facts/users/u-ana/trip", body={"value": {"day": "Friday"}, "ttl_secs": 3600})
    call("GET", facts, f"{V1}/facts/users/u-ana/city")
    fact_items = call("GET", f"{V1}/items", query={"kind": "fact", "user_id": "u-ana"}).body()["results"]
    trip = next(i for i in fact_items if i.get("expires_at"))  # facts are items: namespace, value_json, TTL
    call("GET", f"{V1}/items/{{item_id}}", f"{V1}/items/{trip['id']}")
    call("GET", facts, f"{V1}/facts/users/u-ana", query={"q": "Lisbon", "purpose": "support"})
    call("GET", facts, f"{V1}/facts/users", query={"limit": 5})
    tools = f"{V1}/memory-tools"
    call("GET", tools)  # what MCP's tools/list names
    call("POST", tools, body={"name": "remember", "input": {"key": "seat", "value": "aisle"}, "user_id": "u-ana"})
    call("POST", tools, body={"name": "search_memory", "input": {"query": "seat"}, "user_id": "u-ana"})
    call("POST", tools, body={"name": "forget", "input": {"key": "nothing"}, "user_id": "u-ana"})
    call("POST", tools, body={"name": "remember", "input": {"key": "seat"}, "user_id": "u-ana"})
    call(
        "POST",
        f"{thread}/context",
        f"{V1}/threads/tour/context",
        body={
            "max_tokens": 700,
            "system_prompt": "You plan trips.",
            "brief": "Ana travels often.",
            "current_input": "Where do I fly on Friday?",
        },
    )
    call(
        "POST",
        f"{thread}/context",
        f"{V1}/threads/tour/context",
        body={"max_tokens": 4000, "strategy": "recent", "time_zone": "Europe/Lisbon", "project_id": "p-tour"},
    )
    call("DELETE", facts, f"{V1}/facts/users/u-ana/city")
    call("DELETE", facts, f"{V1}/facts/users/u-ana", query={"all": "true"})
    call("POST", f"{V1}/items/{{item_id}}/forget", f"{V1}/items/{item['id']}/forget")

    # Memory files and the working note.
    tool = f"{V1}/memory-tool"
    created = call(
        "POST", tool, body={"command": "create", "path": "/memories/trip.md", "file_text": "Lisbon\nFriday\n"}
    ).body()
    # Evidence of a tool call and of a memory file's lines (004 toolCallId, fileRange).
    call(
        "POST",
        f"{V1}/items",
        body={
            "kind": "fact",
            "subject": "user",
            "attribute": "trip day",
            "value": "Friday",
            "user_id": "u-ana",
            "evidence": [
                {
                    "file_range": {"version_id": created["version_id"], "start_line": 2, "end_line": 2},
                    "quote": "Friday",
                },
                {"entry_id": fetched["id"], "tool_call_id": "c1", "quote": "page one"},
            ],
        },
    )
    viewed = call("POST", tool, body={"command": "view", "path": "/memories/trip.md"}).body()
    call("POST", tool, body={"command": "view", "path": "/memories"})
    call(
        "POST",
        tool,
        body={
            "command": "str_replace",
            "path": "/memories/trip.md",
            "old_str": "Friday",
            "new_str": "Saturday",
            "expected_sha256": viewed["sha256"],
        },
    )
    call("POST", tool, body={"command": "insert", "path": "/memories/trip.md", "insert_line": 0, "insert_text": "#"})
    call("POST", tool, body={"command": "rename", "old_path": "/memories/trip.md", "new_path": "/memories/t.md"})
    call("POST", tool, body={"command": "view", "path": "/memories/missing.md"})
    listed = call("GET", f"{V1}/memory-files").body()
    history = call("GET", f"{V1}/memory-files/history", query={"path": "/memories/trip.md"}).body()
    call("POST", tool, body={"command": "delete", "path": "/memories/t.md"})
    for version in (listed["files"][0], history["versions"][-1]):
        call("GET", f"{V1}/memory-files/versions/{{version_id}}", f"{V1}/memory-files/versions/{version['version_id']}")
    call("GET", f"{V1}/working-note")
    call("POST", f"{V1}/working-note", body={"action": "append", "content": "check the passport"})
    call("POST", f"{V1}/working-note", body={"action": "replace"})

    # Compaction, extraction, cleared tool results.
    compact = f"{thread}/compact"
    call(
        "POST",
        compact,
        f"{V1}/threads/tour/compact",
        body={"strategy": "clear-old-tool-results", "keep_tool_uses": 0, "clear_at_least": 0},
    )
    call("POST", compact, f"{V1}/threads/tour/compact", body={"strategy": "clear-old-tool-results"})
    with use_model(ScriptedModel(lambda system, messages: "They talked about a trip to Lisbon.")):
        call(
            "POST",
            compact,
            f"{V1}/threads/tour-copy/compact",
            body={"strategy": "summarize-old-preserve-recent", "preserve_recent_turns": 2, "async": False},
        )
        call("POST", compact, f"{V1}/threads/tour-b/compact", body={"strategy": "summarize-old-preserve-recent"})
    # Automatic compaction: the agent's settings, and a thread's own over them.
    call("GET", f"{V1}/settings/compaction")
    call("PATCH", f"{V1}/settings/compaction", body={"enabled": False, "context_window": 200_000, "keep_recent": 6})
    call("PATCH", f"{V1}/settings/compaction", body={"trigger_ratio": 2})
    settings_of_thread = f"{thread}/settings/compaction"
    call("GET", settings_of_thread, f"{V1}/threads/tour/settings/compaction")
    call("PATCH", settings_of_thread, f"{V1}/threads/tour/settings/compaction", body={"context_window": 32_000})
    call("PATCH", settings_of_thread, f"{V1}/threads/tour/settings/compaction", body={"context_window": None})
    call(
        "POST",
        f"{thread}/context",
        f"{V1}/threads/tour-copy/context",
        body={
            "max_tokens": 400,
            "reserve_tokens": 0,
            "current_input": "Where does my sister Marta work?",
            "include_facts": False,
        },
    )
    call("POST", f"{thread}/context", f"{V1}/threads/tour-copy/context", body={"max_tokens": 150, "strategy": "recent"})
    with use_model(ScriptedModel(lambda system, messages: "[]")):
        call("POST", f"{thread}/extract", f"{V1}/threads/tour/extract", body={"async": False})
        call("POST", f"{thread}/extract", f"{V1}/threads/tour-b/extract")
    results = call("GET", f"{thread}/entries", at, query={"types": "tool_result"}).body()["results"]
    tool_result = results[0]["id"]
    call("GET", f"{V1}/tool-results/{{handle}}", f"{V1}/tool-results/{tool_result}")
    call("POST", f"{V1}/entries/{{entry_id}}/redact", f"{V1}/entries/{first['id']}/redact", body={"reason": "tour"})

    # Change events: the stream (what is there, then closed) and the JSON pages.
    events_number_now()
    call("GET", f"{V1}/events", query={"after": 0, "max_seconds": 0}).released()
    # A run's events (after the change events' stream: an agent holds one stream slot by default).
    streamed = call("GET", ledger, at_ledger, query={"after": 0, "max_seconds": 0}).released().body()
    assert "event: settled" in streamed, streamed
    call("GET", f"{V1}/events/page")
    call("GET", f"{V1}/events/page", query={"after": 1, "limit": 2, "types": "entry.added"})

    # Refusals: each error status the API answers.
    call("POST", f"{V1}/threads", body={"id": "tour", "colour": "blue"})  # 400 unknown field
    call("GET", thread, f"{V1}/threads/nowhere")  # 404
    call("POST", f"{thread}/fork", f"{V1}/threads/tour/fork", body={"entry_id": last_id, "new_thread_id": "tour-b"})
    call("POST", entries, at, body={"entries": [{"role": "user", "content": "x"}] * 1001})  # 413
    call(
        "POST", f"{V1}/items", body={"kind": "fact", "subject": "s", "attribute": "a", "value": "v", "trust": "system"}
    )

    # Screening and the people memory is about.
    screening = f"{V1}/settings/screening"
    call("GET", screening)
    call("PATCH", screening, body={"email": "shred"})  # 400
    call("PATCH", screening, body={"email": "redact"})
    identifiers = f"{V1}/users/{{user_id}}/identifiers"
    call("PUT", identifiers, f"{V1}/users/u-tour-gone/identifiers", body={"phones": ["12"]})  # 400
    call("PUT", identifiers, f"{V1}/users/u-tour-gone/identifiers", body={"emails": ["gone@example.com"]})
    call("GET", identifiers, f"{V1}/users/u-tour-gone/identifiers")

    # Deletions last.
    forget = f"{V1}/users/{{user_id}}/forget"
    call("POST", forget, f"{V1}/users/u-tour-gone/forget", body={"mode": "sideways"})  # 400
    call("POST", f"{V1}/threads", body={"id": "tour-gone", "user_id": "u-tour-gone"})
    call("POST", forget, f"{V1}/users/u-tour-gone/forget", body={})
    call("DELETE", document, f"{V1}/context-documents/style.md?thread_id=tour")
    call("DELETE", one_document, f"{V1}/knowledge/{knowledge['id']}")
    call("DELETE", f"{V1}/entries/{{entry_id}}", f"{V1}/entries/{last_id}")
    call("DELETE", thread, f"{V1}/threads/tour-fork")
    return tour.visits

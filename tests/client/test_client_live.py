"""The client against the real service: gunicorn on the tests' database, no mocked HTTP. The same
tour runs with the sync client and with the async one (each call awaited on one event loop)."""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx2
import pytest

from memoryapp.events.services import events_prune
from memoryapp.models import Entry, Event, MemoryFileVersion, MemoryItem, Thread
from tests.kit.api import Caller
from tests.kit.servers import gunicorn_serving

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def service(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with gunicorn_serving(var_dir=tmp_path_factory.mktemp("client-service"), env={"LLM_PROVIDER": "none"}) as where:
        yield f"http://{where}"


class Recorded:
    """A client whose calls are counted by method name (the tour must call every one); an async
    client's coroutines are run to their end and its async iterators read whole."""

    def __init__(self, client: Any, loop: asyncio.AbstractEventLoop | None = None):
        self.client, self.loop, self.called = client, loop, set[str]()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            self.called.add(name)
            answer = method(*args, **kwargs)
            if self.loop is None:
                return answer
            if inspect.isasyncgen(answer):
                return self.loop.run_until_complete(_listed(answer))
            return self.loop.run_until_complete(answer)

        return call


async def _listed(items: Any) -> list[Any]:
    return [item async for item in items]


# The helpers that follow pages (no operation of their own); the tour calls them too.
ITERATORS = {"iter_threads", "iter_entries", "iter_path", "iter_items", "iter_events", "iter_sessions"}


def client_tour(memory: Any, who: Caller) -> None:
    """Every operation the client exposes, each answer checked (and the database after some)."""
    from memory_client import ApiError, ConflictError, NotFoundError

    assert memory.root()["agent"]["slug"] == who.agent.slug
    # Threads: an upsert, reads, a page of one and every page.
    thread = memory.create_thread(id="t-rome", user_id="ana", metadata={"topic": "rome"})
    assert (thread["id"], thread["user_id"], thread["metadata"]) == ("t-rome", "ana", {"topic": "rome"})
    memory.create_thread(id="t-two")
    memory.create_thread(id="t-three", metadata={"topic": "rome"})
    assert memory.get_thread("t-rome")["metadata"] == {"topic": "rome"}
    assert memory.update_thread("t-two", metadata={"k": 1})["metadata"] == {"k": 1}
    page = memory.list_threads(limit=1)
    assert len(page["results"]) == 1 and page["next"] and page["next_cursor"]
    assert [t["id"] for t in memory.iter_threads(page_size=1)] == ["t-two", "t-three", "t-rome"]
    assert {t["id"] for t in memory.iter_threads(metadata={"topic": "rome"}, page_size=1)} == {"t-rome", "t-three"}
    # Entries: one, a batch, pages of every branch and of the path.
    first = memory.append("t-rome", role="user", content="Plan a day in Rome, we are vegetarian.")
    call = {"id": "c1", "name": "fetch_page", "arguments": {"page": 1}}
    batch = memory.append_batch(
        "t-rome",
        [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"type": "tool_result", "tool_call_id": "c1", "tool_name": "fetch_page", "content": "page " * 300},
            {"role": "assistant", "content": "Start at the Colosseum at eight."},
            {"role": "user", "content": "And lunch?"},
        ],
    )
    ids = [first["id"], *(e["id"] for e in batch["entries"])]
    # Busy threads: a run holds t-two; a second start is refused; its writes carry its id.
    assert memory.update_thread("t-two", on_busy="reject")["on_busy"] == "reject"
    run = memory.start_run("t-two")
    try:
        memory.start_run("t-two")
        raise AssertionError("a second run started on a rejecting thread")
    except ConflictError as error:
        assert error.code == "thread_busy" and run["id"] in error.message
    memory.append("t-two", role="user", content="within the run", run_id=run["id"])
    memory.append_batch("t-two", [{"role": "assistant", "content": "noted"}], run_id=run["id"])
    assert memory.get_run("t-two", run["id"])["status"] == "running"
    # The run's event ledger: published, followed to its end, its snapshot; nothing after it.
    ledger = memory.publish_run_events(
        "t-two",
        run["id"],
        [{"kind": "text_delta", "delta": "Ro"}, {"kind": "snapshot", "snapshot": {"phase": "streaming"}}],
    )
    assert [e["seq"] for e in ledger["events"]] == [1, 2] and ledger["outcome"] == ""
    memory.publish_run_events("t-two", run["id"], [{"kind": "settled", "snapshot": {"phase": "settled"}}])
    followed = list(memory.run_events("t-two", run["id"]))
    assert [(e.type, e.last_event_id) for e in followed] == [("text_delta", "1"), ("snapshot", "2"), ("settled", "3")]
    assert followed[0].body["delta"] == "Ro"
    assert memory.run_snapshot("t-two", run["id"])["snapshot"] == {"phase": "settled"}
    try:
        memory.publish_run_events("t-two", run["id"], [{"kind": "text_delta", "delta": "late"}])
        raise AssertionError("an event was taken after settled")
    except ConflictError as error:
        assert error.code == "run_settled"
    assert memory.finish_run("t-two", run["id"])["status"] == "finished"
    # Channel sessions: made once, listed, closed, a second made, the first's reopen refused meanwhile.
    opened = memory.open_session(user_id="ana", channel_type="telegram", channel_id="chat-7")
    assert opened["created"] and opened["thread"]["user_id"] == "ana" and "compaction" in opened
    again = memory.open_session(user_id="ana", channel_type="telegram", channel_id="chat-7")
    assert not again["created"] and again["session"]["id"] == opened["session"]["id"]
    sid = opened["session"]["id"]
    assert memory.get_session(sid)["session"]["thread_id"] == opened["thread"]["id"]
    assert memory.close_session(sid)["session"]["status"] == "closed"
    newer = memory.open_session(user_id="ana", channel_type="telegram", channel_id="chat-7")["session"]
    try:
        memory.reopen_session(sid)
        raise AssertionError("two sessions of one channel were active")
    except ConflictError as error:
        assert error.code == "session_active" and newer["id"] in error.message
    assert [s["id"] for s in memory.list_sessions(user_id="ana", limit=1)["results"]] == [newer["id"]]
    assert [s["id"] for s in memory.iter_sessions(user_id="ana", page_size=1)] == [newer["id"], sid]
    memory.close_session(newer["id"])
    assert memory.reopen_session(sid)["session"]["status"] == "active"
    assert [s["id"] for s in memory.iter_sessions(status="closed")] == [newer["id"]]
    assert batch["active_leaf_id"] == ids[-1]
    assert Entry.objects.filter(thread__external_id="t-rome", agent=who.agent).count() == 5
    older = memory.list_entries("t-rome", limit=2, types="all")
    assert [e["id"] for e in older["results"]] == ids[-2:] and older["next"]
    assert sorted(e["id"] for e in memory.iter_entries("t-rome", types="all", page_size=2)) == sorted(ids)
    assert memory.path("t-rome", limit=2)["results"][-1]["id"] == ids[-1]
    assert sorted(e["id"] for e in memory.iter_path("t-rome", types="all", page_size=2)) == sorted(ids)
    assert memory.rewind("t-rome", ids[3])["active_leaf_id"] == ids[3]
    assert memory.checkout("t-rome", ids[-1])["active_leaf_id"] == ids[-1]
    assert memory.fork("t-rome", ids[3], new_thread_id="t-fork")["forked_from"] == "t-rome"
    assert memory.get_entry(ids[0])["content"] == "Plan a day in Rome, we are vegetarian."
    exported = memory.export_thread("t-rome")
    assert isinstance(exported, str) and exported.count("\n") >= 5
    # Recall and the context.
    hits = memory.search("vegetarian", thread_id="t-rome", method="keyword")
    assert ids[0] in {h["id"] for h in hits["results"]}
    built = memory.build_context("t-rome", max_tokens=2000, current_input="lunch for vegetarians?")
    assert built["messages"] and built["token_count"] <= 2000
    # Compaction, the tool result it keeps readable, extraction.
    compacted = memory.compact("t-rome", strategy="clear-old-tool-results", keep_tool_uses=0)
    assert compacted.get("compacted") is True, compacted
    assert memory.tool_result(ids[2])["content"].startswith("page ")
    # Automatic compaction settings: the agent's, then a thread's own over them (None: the agent's).
    assert memory.compaction_settings()["trigger_tokens"] > 0
    changed = memory.set_compaction_settings(enabled=False, trigger_ratio=0.5, context_window=10_000)
    assert (changed["enabled"], changed["trigger_tokens"]) == (False, 5_000)
    own = memory.set_thread_compaction_settings("t-rome", trigger_ratio=0.25)
    assert own["own"] == {"trigger_ratio": 0.25} and own["effective"]["trigger_tokens"] == 2_500
    back = memory.set_thread_compaction_settings("t-rome", trigger_ratio=None)
    assert memory.thread_compaction_settings("t-rome")["own"] == {} == back["own"]
    with pytest.raises(ApiError) as refused:
        memory.set_compaction_settings(trigger_ratio=2)
    assert refused.value.status == 400 and refused.value.field == "trigger_ratio"
    extracted = memory.extract("t-rome", async_=False)
    assert "job_run" in extracted
    # Redaction and deletion of entries.
    assert memory.redact_entry(ids[4], reason="test")["redacted_at"]
    memory.delete_entry(ids[0], keep_replies=True)
    assert not Entry.objects.filter(pk=ids[0]).exists() and Entry.objects.filter(pk=ids[1]).exists()
    memory.delete_entry(ids[4])
    assert not Entry.objects.filter(pk=ids[4]).exists()
    # Items.
    item = memory.create_item(kind="fact", subject="ana", attribute="city", value="Lisbon", user_id="ana")
    memory.create_item(kind="preference", subject="ana", attribute="food", value="vegetarian", user_id="ana")
    assert memory.get_item(item["id"])["value"] == "Lisbon"
    assert [i["value"] for i in memory.item_history(item["id"])["results"]] == ["Lisbon"]
    assert len(memory.list_items(limit=1, user_id="ana")["results"]) == 1
    assert len({i["id"] for i in memory.iter_items(user_id="ana", limit=1)}) == 2
    assert memory.forget_item(item["id"])["expired_at"]
    memory.create_thread(id="t-gone", user_id="u-gone")
    registered = memory.set_user_identifiers("u-gone", emails=["Gone@Example.com"], names=["Ana Gone"])
    assert registered["emails"] == ["gone@example.com"] and memory.user_identifiers("u-gone")["names"] == ["ana gone"]
    forgotten = memory.forget_user("u-gone", mode="erase")
    assert forgotten["counts"]["threads"] == 1 and not Thread.objects.filter(external_id="t-gone").exists()
    assert memory.user_identifiers("u-gone")["emails"] == []
    # Screening at write.
    assert memory.screening_settings()["secret"] == "refuse"
    assert memory.set_screening_settings(email="redact")["email"] == "redact"
    # Purposes: recall bound to what memory was collected for.
    assert memory.purpose_settings() == {"purposes": []}
    assert memory.set_purpose_settings(["support"]) == {"purposes": ["support"]}
    # Facts, and the model's facts tools.
    assert memory.put_fact("users/ana", "tea", "green")["value"] == "green"
    assert memory.get_fact("users/ana", "tea")["value"] == "green"
    assert [f["key"] for f in memory.search_facts("users/ana", q="tea")["results"]] == ["tea"]
    assert memory.forget_fact("users/ana", "tea")["forgotten"] is True
    names = {tool["name"] for tool in memory.memory_tools_list()["tools"]}
    assert {"remember", "search_memory", "read_result"} <= names
    assert memory.memory_tools("remember", {"key": "city", "value": "Lisbon"}, user_id="ana")["result"].startswith(
        "Remembered city"
    )
    assert memory.forget_namespace("users/ana")["deleted"] == 1
    assert not MemoryItem.objects.filter(agent=who.agent, namespace="users/ana").exists()
    # Memory files: the memory tool (a refusal carries the model's text), lists, history, versions.
    created = memory.memory_tool(
        {"command": "create", "path": "/memories/plan.md", "file_text": "Colosseum\n"}, user_id="ana"
    )
    assert created["result"] == "File created successfully at: /memories/plan.md"
    with pytest.raises(ConflictError) as refused:
        memory.memory_tool({"command": "create", "path": "/memories/plan.md", "file_text": "again\n"}, user_id="ana")
    assert (
        refused.value.code == "file_exists" and refused.value.result == "Error: File /memories/plan.md already exists"
    )
    assert isinstance(refused.value, ApiError) and refused.value.status == 409
    listed = memory.list_memory_files(user_id="ana")
    assert [f["path"] for f in listed["files"]] == ["/memories/plan.md"]
    history = memory.memory_file_history("/memories/plan.md", user_id="ana")
    assert memory.memory_file_version(history["versions"][0]["version_id"])["content"] == "Colosseum\n"
    assert memory.working_note("append", "ask about lunch", user_id="ana")["text"] == "ask about lunch"
    assert memory.read_working_note(user_id="ana")["text"] == "ask about lunch"
    assert MemoryFileVersion.objects.filter(agent=who.agent, user_id="ana").count() == 2
    # The export imports again once its entries' ids are free.
    memory.delete_thread("t-rome")
    assert not Thread.objects.filter(agent=who.agent, external_id="t-rome").exists()
    assert memory.import_thread(exported, id="t-copy")["id"] == "t-copy"
    assert Entry.objects.filter(thread__external_id="t-copy", agent=who.agent).count() == 5
    # Standing instructions: context documents (sha256 locking) and the thread's memory switch.
    doc = memory.put_context_document("AGENTS.md", "Answer in Portuguese.\n", expected_sha256=None)
    assert (doc["name"], doc["scope"], doc["version"], doc["content"]) == (
        "AGENTS.md",
        "agent",
        1,
        "Answer in Portuguese.\n",
    )
    with pytest.raises(ConflictError):
        memory.put_context_document("AGENTS.md", "Answer in Latin.\n", expected_sha256=None)  # it exists
    changed = memory.put_context_document("AGENTS.md", "Answer briefly.\n", expected_sha256=doc["sha256"])
    assert changed["version"] == 2 and changed["sha256"] != doc["sha256"]
    memory.put_context_document("STYLE.md", "Short sentences.\n", project_id="p-rome")  # not checked
    assert [d["name"] for d in memory.list_context_documents()["documents"]] == ["AGENTS.md"]
    assert [d["scope"] for d in memory.list_context_documents(project_id="p-rome")["documents"]] == ["project"]
    assert memory.get_context_document("AGENTS.md")["content"] == "Answer briefly.\n"
    memory.delete_context_document("STYLE.md", project_id="p-rome")
    with pytest.raises(NotFoundError):
        memory.get_context_document("STYLE.md", project_id="p-rome")
    assert [d["name"] for d in memory.build_context("t-copy", max_tokens=2000)["documents"]] == ["AGENTS.md"]
    # Knowledge documents (the semantic context): added, read, searched, replaced, listed, deleted.
    guide = memory.add_knowledge("rome-guide", "The Vatican Museums close on Sundays.\n", project_id="p-rome")
    assert guide["chunk_count"] >= 1 and guide["project_id"] == "p-rome"
    assert memory.get_knowledge(guide["id"])["content"] == "The Vatican Museums close on Sundays.\n"
    found = memory.search_knowledge("when do the Vatican Museums close", project_id="p-rome")
    assert [hit["document_id"] for hit in found["results"]][:1] == [guide["id"]]
    replaced = memory.replace_knowledge(guide["id"], "The Colosseum opens at 9.\n")
    assert replaced["sha256"] != guide["sha256"] and replaced["name"] == "rome-guide"
    assert [d["id"] for d in memory.list_knowledge(project_id="p-rome")["documents"]] == [guide["id"]]
    memory.delete_knowledge(guide["id"])
    with pytest.raises(NotFoundError):
        memory.get_knowledge(guide["id"])
    assert memory.get_thread_memory("t-copy") == {"thread_id": "t-copy", "memory": "on", "off_ranges": []}
    assert memory.set_thread_memory("t-copy", "off")["memory"] == "off"
    assert Thread.objects.get(agent=who.agent, external_id="t-copy").memory_enabled is False
    assert memory.build_context("t-copy", max_tokens=2000)["metadata"]["memory"] == "off"
    assert memory.set_thread_memory("t-copy", "on")["memory"] == "on"
    # Change events: every write above recorded one; pages, then the stream, then resumed after an id.
    stored = list(Event.objects.filter(agent=who.agent).order_by("seq").values_list("seq", "type"))
    assert [seq for seq, _ in stored] == list(range(1, len(stored) + 1)) and len(stored) > 10
    page = memory.events_page(limit=3)
    assert [(e["seq"], e["type"]) for e in page["results"]] == stored[:3]
    assert (page["next_after"], page["last_seq"]) == (3, len(stored))
    assert [(e["seq"], e["type"]) for e in memory.iter_events(page_size=7)] == stored
    added = [seq for seq, kind in stored if kind == "entry.added" and seq > 3]
    assert [e["seq"] for e in memory.iter_events(after=3, types=["entry.added"], page_size=2)] == added
    streamed = list(memory.events(after=0, max_seconds=0.5))
    assert [(e.change["seq"], e.type) for e in streamed if e.change] == stored
    assert [e.last_event_id for e in streamed] == [str(seq) for seq, _ in stored]
    resumed = list(memory.events(last_event_id=streamed[4].last_event_id, max_seconds=0.5))
    assert resumed == streamed[5:]  # Last-Event-ID: nothing repeated, nothing left out
    assert list(memory.events(max_seconds=0.3)) == []  # no position: only what comes next
    # Retention takes the oldest events: the page and the stream say what a reader missed.
    cut = Event.objects.filter(agent=who.agent, seq__gt=1).order_by("seq").values_list("seq", "at")
    kept_from, older_than = next((seq, at) for seq, at in cut if at > Event.objects.get(agent=who.agent, seq=1).at)
    events_prune(older_than=older_than)
    assert memory.events_page(after=0, limit=1)["missed"] == {"from_seq": 1, "to_seq": kept_from - 1}
    gap, first_kept = list(memory.events(after=0, max_seconds=0.3))[:2]
    assert (gap.type, gap.missed, gap.change) == ("gap", {"from_seq": 1, "to_seq": kept_from - 1}, None)
    assert first_kept.change is not None and first_kept.change["seq"] == kept_from


def test_the_sync_client_runs_every_operation_against_the_service(
    transactional_db: None, service: str, alice: Caller
) -> None:
    from memory_client import OPERATIONS, MemoryClient

    with MemoryClient(service, key=alice.key) as client:
        memory = Recorded(client)
        client_tour(memory, alice)
    assert set(OPERATIONS) | ITERATORS == memory.called


def test_the_async_client_runs_every_operation_against_the_service(
    transactional_db: None, service: str, alice: Caller
) -> None:
    from memory_client import OPERATIONS, AsyncMemoryClient

    loop = asyncio.new_event_loop()
    try:
        client = AsyncMemoryClient(service, key=alice.key)
        memory = Recorded(client, loop)
        # The tour checks the database between calls: each call runs to its end before the next.
        client_tour(memory, alice)
        loop.run_until_complete(client.aclose())
    finally:
        loop.close()
    assert set(OPERATIONS) | ITERATORS == memory.called


def test_the_services_errors_are_exceptions_carrying_the_error_shape(
    transactional_db: None, service: str, alice: Caller, bob: Caller
) -> None:
    from memory_client import (
        AuthenticationError,
        BadRequestError,
        MemoryClient,
        NotFoundError,
        PayloadTooLargeError,
        PermissionDeniedError,
    )

    with MemoryClient(service, key=alice.key) as memory:
        memory.create_thread(id="t-alice")
        with pytest.raises(BadRequestError) as bad:
            memory.append("t-alice", role="wizard", content="hi")
        assert (bad.value.status, bad.value.field) == (400, "role") and bad.value.message
        assert bad.value.body["error"]["code"] == bad.value.code
        with pytest.raises(BadRequestError) as unknown:
            memory.create_thread(id="t-alice", metadata={"a": 1}, user_id="x" * 200)
        assert unknown.value.field == "user_id"
        with pytest.raises(PayloadTooLargeError) as large:
            memory.append_batch("t-alice", [{"role": "user", "content": "x"}] * 1001)
        assert (large.value.code, large.value.field) == ("batch_too_large", "entries")
        with pytest.raises(PermissionDeniedError):
            memory.memory_tool({"command": "create", "path": "/memories/a.md", "file_text": "a"}, read_only=True)
    with MemoryClient(service, key=bob.key) as other:
        with pytest.raises(NotFoundError) as missing:
            other.get_thread("t-alice")  # alice's: the same 404 as a missing one
        assert (missing.value.status, missing.value.code) == (404, "not_found")
    with MemoryClient(service, key="mk_not_a_key") as stranger, pytest.raises(AuthenticationError) as refused:
        stranger.root()
    assert (refused.value.status, refused.value.code) == (401, "invalid_key")
    assert Entry.objects.count() == 0


def _write_later(service: str, key: str, thread_id: str, at: list[float]) -> threading.Thread:
    """Appends an entry to the thread at each of these seconds from now (the stream's writes)."""
    from memory_client import MemoryClient

    def write() -> None:
        started = time.monotonic()
        with MemoryClient(service, key=key) as writer:
            for n, when in enumerate(at):
                time.sleep(max(0.0, started + when - time.monotonic()))
                writer.append(thread_id, role="user", content=f"turn {n}")

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def _stream_requests(transport: Any) -> list[str | None]:
    """The Last-Event-ID of each GET /events the transport sent (None: without one)."""
    return [last for path, last in transport.sent if path == "/api/v1/events"]


class Counting(httpx2.HTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str | None]] = []

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append((request.url.path, request.headers.get("last-event-id")))
        return super().handle_request(request)


class AsyncCounting(httpx2.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str | None]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.sent.append((request.url.path, request.headers.get("last-event-id")))
        return await super().handle_async_request(request)


def test_the_event_stream_reconnects_after_the_service_closes_it_and_misses_nothing(
    transactional_db: None, service: str, alice: Caller
) -> None:
    """Each stream is closed after 0.4 s; the writes come over three of them: with `reconnect` the
    client resumes with the last id read, and reads each event once, in order (sync and async)."""
    from memory_client import AsyncMemoryClient, MemoryClient

    counted = Counting()
    with MemoryClient(service, key=alice.key, transport=counted) as memory:
        memory.create_thread(id="t-live")
        start = memory.events_page()["last_seq"]  # the writes may come before the stream is open
        writer = _write_later(service, alice.key, "t-live", [0.1, 0.7, 1.4])
        read = []
        stream = memory.events(after=start, types="entry.added", max_seconds=0.4, reconnect=True)
        for event in stream:
            read.append(event)
            if len(read) == 3:
                break
        stream.close()
        writer.join()

    async_counted = AsyncCounting()

    async def follow(last_event_id: str | None) -> list[Any]:
        async with AsyncMemoryClient(service, key=alice.key, transport=async_counted) as memory:
            writer = _write_later(service, alice.key, "t-live", [0.1, 0.7, 1.4])
            read = []
            stream = memory.events(last_event_id=last_event_id, types="entry.added", max_seconds=0.4, reconnect=True)
            async for event in stream:
                read.append(event)
                if len(read) == 3:
                    break
            await stream.aclose()
            await asyncio.to_thread(writer.join)
            return read

    events = read + asyncio.run(follow(read[-1].last_event_id))
    # Over more than one stream each: every one after the first resumed after the last id read.
    for sent in (_stream_requests(counted), _stream_requests(async_counted)):
        assert len(sent) >= 2 and all(sent[1:]), sent
    entries = Entry.objects.filter(thread__external_id="t-live", agent=alice.agent).order_by("seq")
    assert [e.change["ids"] for e in events if e.change] == [[entry.id] for entry in entries]
    seqs = [e.change["seq"] for e in events if e.change]
    assert seqs == sorted(set(seqs)) and [e.last_event_id for e in events] == [str(s) for s in seqs]


def test_a_context_document_name_with_url_characters_reaches_that_document(
    transactional_db: None, service: str, alice: Caller
) -> None:
    """The name went into the path unescaped: `AGENTS#old.md` was sent as AGENTS (the rest a
    fragment) and `a?b.md` as a, so the client wrote, read and deleted another document."""
    from memory_client import AsyncMemoryClient, MemoryClient, NotFoundError

    names = ["AGENTS#old.md", "a?b.md", "50%.md", "my notes.md"]
    with MemoryClient(service, key=alice.key) as memory:
        for name in names:
            assert memory.put_context_document(name, f"text of {name}")["name"] == name
        assert sorted(d["name"] for d in memory.list_context_documents()["documents"]) == sorted(names)
        assert [memory.get_context_document(name)["content"] for name in names] == [f"text of {n}" for n in names]
        memory.delete_context_document("AGENTS#old.md")
        with pytest.raises(NotFoundError):
            memory.get_context_document("AGENTS#old.md")

    async def read_async() -> str:
        async with AsyncMemoryClient(service, key=alice.key) as client:
            return (await client.get_context_document("a?b.md"))["content"]

    assert asyncio.run(read_async()) == "text of a?b.md"
    assert not MemoryFileVersion.objects.filter(
        agent=alice.agent, path__in=["/memories/context/AGENTS", "/memories/context/a"]
    ).exists()

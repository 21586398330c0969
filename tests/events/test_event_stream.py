"""GET /api/v1/events: the agent's changes as Server-Sent Events, read from the real service under
gunicorn (gthread, as `make run` serves it) while other clients write over HTTP."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from memoryapp.agents.services import agent_key_create
from memoryapp.events.stream import STREAM_SLOTS
from tests.kit.api import Caller, error_of, post_entry, post_thread
from tests.kit.concurrency import in_threads
from tests.kit.events import SseClient, events_number_now, gunicorn_service, http_json

STREAM = "/api/v1/events"


@pytest.fixture
def service(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    # Streams close after 2 s (so readers reconnect several times), poll every 50 ms, two at a time.
    env = {"EVENTS_STREAM_SECONDS": "2", "EVENTS_POLL_SECONDS": "0.05", "EVENTS_MAX_STREAMS": "2"}
    with gunicorn_service(tmp_path, threads=6, env=env) as where:
        yield where


@pytest.mark.slow
def test_a_reader_gets_every_event_once_and_in_order_across_disconnects_while_clients_write(
    service: str, alice: Caller, bob: Caller
) -> None:
    """1. The reader connects live (no position): the stream's first line sets its last event id (0).
    2. Four clients append 15 entries each, one request at a time, to threads of their own, while
       the reader reads: it hangs up after 5 events (a dropped connection), and the server closes
       every stream after 2 s; each time it reconnects with Last-Event-ID, as EventSource does.
    3. It ends with events 1..60 exactly once, naming every entry written, and nothing else; bob's
       stream, read meanwhile from the start, holds none of them."""
    for n in range(4):
        assert http_json(service, "POST", "/api/v1/threads", alice.key, {"id": f"w-{n}"})[0] == 201
    reader = SseClient(service, alice.key)
    reader.read(until=lambda: reader.last_event_id is not None)
    assert reader.last_event_id == "0" and reader.retry_ms == 1000 and reader.events == []

    def writer(n: int) -> list[str]:
        ids = []
        for turn in range(15):
            status, body = http_json(
                service, "POST", f"/api/v1/threads/w-{n}/entries", alice.key, {"role": "user", "content": f"{n}:{turn}"}
            )
            assert status == 201, body
            ids.append(body["id"])
        return ids

    written: list[Any] = []
    writers = threading.Thread(target=lambda: written.extend(in_threads(*[lambda n=n: writer(n) for n in range(4)])))
    writers.start()
    reader.read(stop_after_events=5)  # the client drops the connection mid-stream
    assert len(reader.change_events()) == 5
    deadline = time.monotonic() + 120
    while len(reader.change_events()) < 60 and time.monotonic() < deadline:
        reader.read(until=lambda: len(reader.change_events()) >= 60)
    writers.join(timeout=120)
    reader.read()  # once more, until the server closes the stream (after 2 s): nothing new, nothing again

    events = reader.change_events()
    assert [int(e.id or 0) for e in events] == list(range(1, 61))
    assert [e.body["seq"] for e in events] == list(range(1, 61))
    assert {e.event for e in events} == {"entry.added"}
    assert all(isinstance(w, list) for w in written), written
    assert sorted(i for e in events for i in e.body["ids"]) == sorted(i for w in written for i in w)
    assert reader.connections >= 4
    assert any("reconnect with Last-Event-ID" in c for c in reader.comments)
    assert all("content" not in e.body for e in events)

    # Another agent's stream, from its very start, holds none of it.
    other = SseClient(service, bob.key, query="after=0&max_seconds=0.3")
    other.read()
    assert other.status == 200 and other.change_events() == []


@pytest.mark.slow
def test_streams_past_the_limit_of_a_process_answer_503_and_a_bad_position_400(
    service: str, alice: Caller, bob: Caller, mallory: Caller
) -> None:
    # Two slots, one an agent (EVENTS_MAX_STREAMS_PER_AGENT's default: half): alice and bob hold one each.
    holding = [SseClient(service, who.key, query="max_seconds=3") for who in (alice, bob)]
    readers = [threading.Thread(target=h.read) for h in holding]
    for r in readers:
        r.start()
    time.sleep(1.0)  # both streams are open (each holds one of the process's slots)
    status, body = http_json(service, "GET", STREAM, alice.key)
    assert status == 429 and body["error"]["code"] == "too_many_streams_for_agent", body
    status, body = http_json(service, "GET", STREAM, mallory.key)
    assert status == 503 and body["error"]["code"] == "too_many_streams", body
    for r in readers:
        r.join(timeout=30)
    assert all(h.status == 200 for h in holding)
    # The slots were given back when the streams closed.
    again = SseClient(service, alice.key, query="max_seconds=0")
    again.read()
    assert again.status == 200

    refused = SseClient(service, alice.key, last_event_id="yesterday")
    with pytest.raises(AssertionError, match="answered 400"):
        refused.read()


def test_one_agent_holds_at_most_its_share_of_the_streams_and_another_agent_still_gets_one(
    alice: Caller, bob: Caller, mallory: Caller, settings: Any
) -> None:
    """One agent reconnecting in a loop held every slot of a process, and another agent got 15
    refusals of 15 (issue 23): an agent holds at most EVENTS_MAX_STREAMS_PER_AGENT of them, every
    key of it together (429), while the process still serves the others (503 only once it is full)."""
    settings.EVENTS_MAX_STREAMS, settings.EVENTS_MAX_STREAMS_PER_AGENT = 3, 2
    _, other_key = agent_key_create(agent=alice.agent)
    alices_other_key = APIClient()
    alices_other_key.credentials(HTTP_AUTHORIZATION=f"Bearer {other_key}")
    held: list[Any] = []  # a stream holds its slot until it is read to its end (or the client goes)
    try:
        for client in (alice.client, alices_other_key):
            held.append(client.get(STREAM, {"max_seconds": 0}))
            assert held[-1].status_code == 200
        for client in (alice.client, alices_other_key):
            refused = client.get(STREAM, {"max_seconds": 0})
            assert error_of(refused, 429)["code"] == "too_many_streams_for_agent"
            assert refused["Retry-After"] == "1"
        held.append(bob.client.get(STREAM, {"max_seconds": 0}))
        assert held[-1].status_code == 200  # bob is served beside alice
        full = mallory.client.get(STREAM, {"max_seconds": 0})
        assert error_of(full, 503)["code"] == "too_many_streams"
        assert (STREAM_SLOTS.open, STREAM_SLOTS.held_by(alice.agent.pk), STREAM_SLOTS.held_by(bob.agent.pk)) == (
            3,
            2,
            1,
        )

        b"".join(held.pop(0).streaming_content)  # alice's first stream ends: her slot is back
        held.append(alice.client.get(STREAM, {"max_seconds": 0}))
        assert held[-1].status_code == 200
    finally:
        for response in held:
            b"".join(response.streaming_content)
    assert STREAM_SLOTS.open == 0 and STREAM_SLOTS.held_by(alice.agent.pk) == 0


def test_the_stream_in_process_starts_after_the_position_and_sends_ids_only(alice: Caller, bob: Caller) -> None:
    """The same stream through Django's test client (max_seconds=0: what is there, then closed)."""
    post_thread(alice, "t-s")
    first = post_entry(alice, "t-s", role="user", content="the secret word is ZEBRA")
    second = post_entry(alice, "t-s", role="assistant", content="noted")
    post_thread(bob, "t-b")
    post_entry(bob, "t-b", role="user", content="bob's")
    events_number_now()

    response = alice.client.get(STREAM, {"max_seconds": 0}, HTTP_LAST_EVENT_ID="1", HTTP_ACCEPT="text/event-stream")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/event-stream")
    text = b"".join(response.streaming_content).decode()  # type: ignore[attr-defined]
    assert "id: 2\nevent: entry.added\n" in text and f'"ids":["{second["id"]}"]' in text
    assert first["id"] not in text and "ZEBRA" not in text and "bob" not in text
    assert text.startswith("retry: 1000\n\n")
    assert STREAM_SLOTS.open == 0

    live = alice.client.get(STREAM, {"max_seconds": 0})
    assert b"".join(live.streaming_content).decode().split("\n\n")[1] == "id: 2"  # type: ignore[attr-defined]
    assert error_of(alice.client.get(STREAM, {"after": "x"}))["field"] == "after"
    assert (
        error_of(alice.client.get(STREAM, HTTP_LAST_EVENT_ID="-3", HTTP_ACCEPT="text/event-stream"))["field"]
        == "Last-Event-ID"
    )
    assert error_of(alice.client.get(STREAM, {"types": "nope"}))["field"] == "types"

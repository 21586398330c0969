"""The run event ledger across two web processes (gunicorn, the tests' database): a publisher on one,
subscribers on both; order, resume on the other process, and a subscriber that stopped reading or
crashed holding up neither the publisher nor the others."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from memoryapp.models import RunEvent
from tests.kit.api import Caller
from tests.kit.events import SseClient, http_json
from tests.kit.servers import gunicorn_serving

pytestmark = pytest.mark.slow

# Streams per process: the stuck one, two readers and room for the publisher's requests besides.
SERVER_ENV = {"EVENTS_MAX_STREAMS": "4", "EVENTS_MAX_STREAMS_PER_AGENT": "4", "EVENTS_STREAM_SECONDS": "120"}


@pytest.fixture(scope="module")
def servers(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with (
        gunicorn_serving(var_dir=tmp_path_factory.mktemp("ledger-one"), threads=8, env=SERVER_ENV) as one,
        gunicorn_serving(var_dir=tmp_path_factory.mktemp("ledger-two"), threads=8, env=SERVER_ENV) as two,
    ):
        yield one, two


def stuck_subscriber(where: str, key: str, path: str) -> socket.socket:
    """A subscriber that asks for the stream and never reads it: a small receive buffer, so the
    server's writes to it block once a few frames are in flight."""
    host, port = where.rsplit(":", 1)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {where}\r\nAuthorization: Bearer {key}\r\nAccept: text/event-stream\r\n\r\n"
    )
    sock.sendall(request.encode())
    return sock


@pytest.mark.django_db(transaction=True)
def test_subscribers_on_two_processes_follow_in_order_and_a_stuck_one_holds_up_nobody(
    servers: tuple[str, str], alice: Caller
) -> None:
    one, two = servers
    status, _ = http_json(one, "POST", "/api/v1/threads", alice.key, {"id": "t-live", "user_id": "u-ana"})
    assert status == 201
    status, run = http_json(one, "POST", "/api/v1/threads/t-live/runs", alice.key, {})
    assert status == 201
    path = f"/api/v1/threads/t-live/runs/{run['id']}/events"

    # The stuck subscriber, on the publisher's own process, and one that crashes after 5 events.
    stuck = stuck_subscriber(one, alice.key, path)
    crashing = SseClient(two, alice.key, path=path)
    crashed = threading.Thread(target=lambda: crashing.read(stop_after_events=5))
    crashed.start()
    # The reader on the other process, following the whole run.
    reader = SseClient(two, alice.key, path=path)
    reading = threading.Thread(target=reader.read)
    reading.start()
    time.sleep(1.0)  # all three streams open before the first event

    # 60 batches of 5 deltas of 2 KB: far more than the stuck subscriber's buffers hold.
    chunk = "x" * 2048
    published = 0
    for batch in range(60):
        events = [{"kind": "text_delta", "delta": f"{batch}.{n}:{chunk}"} for n in range(5)]
        status, body = http_json(one, "POST", path, alice.key, {"events": events})
        assert status == 201, body
        published = body["last_seq"]
    status, body = http_json(one, "POST", path, alice.key, {"kind": "settled", "snapshot": {"phase": "settled"}})
    assert status == 201 and body["last_seq"] == published + 1 == 301
    reading.join(timeout=120)
    crashed.join(timeout=60)

    assert not reading.is_alive(), "the reader did not get to settled"
    ids = [int(e.id) for e in reader.events if e.id is not None]
    assert ids == list(range(1, 302)), ids[:10]
    assert reader.events[-1].event == "settled" and reader.events[0].body["delta"].startswith("0.0:")
    assert [int(e.id) for e in crashing.events if e.id] == [1, 2, 3, 4, 5]
    # All this while the stuck subscriber held its stream open without reading a byte past its buffer.
    stuck.setblocking(False)
    try:
        assert stuck.recv(1) != b""  # still open, frames waiting in it
    finally:
        stuck.close()

    # Resume on the other process (the publisher's) after event 200: the rest, in order, no repeat.
    resumed = SseClient(one, alice.key, path=path, last_event_id="200")
    resumed.read()
    assert [int(e.id) for e in resumed.events if e.id] == list(range(201, 302))
    assert RunEvent.objects.filter(run_id=run["id"]).count() == 301
    # And the publisher's process serves a new stream at once: the stuck one's slot was given back.
    status, snapshot = http_json(one, "GET", f"/api/v1/threads/t-live/runs/{run['id']}/snapshot", alice.key)
    assert status == 200 and (snapshot["snapshot"], snapshot["outcome"]) == ({"phase": "settled"}, "settled")


@pytest.mark.django_db(transaction=True)
def test_a_subscriber_waiting_on_one_process_gets_what_the_other_publishes_as_it_comes(
    servers: tuple[str, str], alice: Caller
) -> None:
    """Live, not replayed: the reader is connected before anything is published, and each event
    reaches it while the run is still going (woken across processes, not at the stream's end)."""
    one, two = servers
    http_json(one, "POST", "/api/v1/threads", alice.key, {"id": "t-wait"})
    _, run = http_json(one, "POST", "/api/v1/threads/t-wait/runs", alice.key, {})
    path = f"/api/v1/threads/t-wait/runs/{run['id']}/events"
    reader = SseClient(two, alice.key, path=path)
    seen_at: dict[int, float] = {}

    def arrived() -> bool:
        seen_at.setdefault(len(reader.events), time.monotonic())
        return False

    reading = threading.Thread(target=lambda: reader.read(until=arrived))
    reading.start()
    time.sleep(0.5)
    sent_at: list[float] = []
    for n in range(3):
        sent_at.append(time.monotonic())
        http_json(one, "POST", path, alice.key, {"kind": "text_delta", "delta": f"d{n}"})
        deadline = time.monotonic() + 20
        while len(reader.events) < n + 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(reader.events) == n + 1, f"event {n + 1} did not reach the other process's stream"
    http_json(one, "POST", path, alice.key, {"kind": "faulted", "error": "stopped", "snapshot": {}})
    reading.join(timeout=30)
    assert [e.event for e in reader.events] == ["text_delta", "text_delta", "text_delta", "faulted"]

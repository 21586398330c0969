"""Retries: the service has no rate limiter of its own, so a local HTTP server answers 429 and 5xx
(this test alone; every other client test talks to the real service)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

THREAD = {
    "id": "t-1",
    "user_id": "",
    "metadata": {},
    "active_leaf_id": None,
    "forked_from": None,
    "created_at": "2026-01-01T00:00:00+00:00",
    "updated_at": "2026-01-01T00:00:00+00:00",
}


@contextmanager
def answering(replies: list[tuple[int, dict[str, str]]]) -> Iterator[tuple[str, list[str]]]:
    """A server answering each request with the next (status, headers), then 200 with a thread."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            seen.append(self.command)
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            status, headers = replies.pop(0) if replies else (200, {})
            body = json.dumps(THREAD if status < 400 else {"error": {"code": "busy", "message": "Try again."}})
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body.encode())

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_a_503_then_a_200_is_retried_and_answers_the_200() -> None:
    from memory_client import MemoryClient, RetryPolicy

    with (
        answering([(503, {"Retry-After": "0"})]) as (url, seen),
        MemoryClient(url, key="k", retry=RetryPolicy(backoff=0.01)) as memory,
    ):
        assert memory.create_thread(id="t-1")["id"] == "t-1"
    assert seen == ["POST", "POST"]


def test_a_429_waits_the_retry_after_it_gives_then_retries_the_async_client_too() -> None:
    from memory_client import AsyncMemoryClient, RetryPolicy

    async def main(url: str) -> Any:
        async with AsyncMemoryClient(url, key="k", retry=RetryPolicy(backoff=0.01)) as memory:
            loop = asyncio.get_running_loop()
            started = loop.time()
            thread = await memory.get_thread("t-1")
            return thread, loop.time() - started

    with answering([(429, {"Retry-After": "1"}), (429, {"Retry-After": "0"})]) as (url, seen):
        thread, waited = asyncio.run(main(url))
    assert thread["id"] == "t-1" and seen == ["GET", "GET", "GET"]
    assert waited >= 1.0  # the server's Retry-After, not the 10 ms backoff


def test_a_500_of_a_write_is_not_sent_again_but_a_500_of_a_read_is() -> None:
    from memory_client import MemoryClient, RetryPolicy, ServerError

    policy = RetryPolicy(backoff=0.01)
    with answering([(500, {})]) as (url, seen), MemoryClient(url, key="k", retry=policy) as memory:
        with pytest.raises(ServerError) as failed:
            memory.create_thread(id="t-1")  # it may have been written: the caller decides
        assert (failed.value.status, failed.value.code) == (500, "busy")
    assert seen == ["POST"]
    with answering([(500, {}), (502, {})]) as (url, seen), MemoryClient(url, key="k", retry=policy) as memory:
        assert memory.get_thread("t-1")["id"] == "t-1"
    assert seen == ["GET", "GET", "GET"]


def test_when_the_retries_are_spent_the_last_error_is_raised() -> None:
    from memory_client import MemoryClient, RateLimitedError, RetryPolicy

    with (
        answering([(429, {"Retry-After": "0"})] * 5) as (url, seen),
        MemoryClient(url, key="k", retry=RetryPolicy(attempts=3, backoff=0.01)) as memory,
        pytest.raises(RateLimitedError) as limited,
    ):
        memory.get_thread("t-1")
    assert limited.value.status == 429 and len(seen) == 3


def _frame(seq: int) -> bytes:
    data = json.dumps({"seq": seq, "type": "entry.added", "ids": [f"e{seq}"], "at": "2026-01-01T00:00:00+00:00"})
    return f"id: {seq}\nevent: entry.added\ndata: {data}\n\n".encode()


@contextmanager
def streaming() -> Iterator[tuple[str, list[str | None]]]:
    """GET /events answered: 503 (busy), then a stream cut after its first event (the length it
    announced never comes), then the rest of the stream; records each request's Last-Event-ID."""
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append(self.headers.get("Last-Event-ID"))
            if len(seen) == 1:
                body = b'{"error": {"code": "too_many_streams", "message": "Busy."}}'
                self.send_response(503)
                self.send_header("Content-Type", "application/json")
                self.send_header("Retry-After", "0")
            else:
                body = b": hello\n\nretry: 10\n\n" + (_frame(1) if len(seen) == 2 else _frame(2) + _frame(3))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
            cut = len(seen) == 2
            self.send_header("Content-Length", str(len(body) + (100 if cut else 0)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_the_event_stream_is_opened_again_when_busy_and_resumes_after_a_cut_with_the_last_id() -> None:
    from memory_client import AsyncMemoryClient, MemoryClient, RetryPolicy

    policy = RetryPolicy(backoff=0.01)
    with streaming() as (url, seen), MemoryClient(url, key="k", retry=policy) as memory:
        read = list(memory.events())
    assert [e.change["seq"] for e in read if e.change] == [1, 2, 3]
    assert [e.last_event_id for e in read] == ["1", "2", "3"]
    assert seen == [None, None, "1"]  # the busy answer, the cut stream, the stream after event 1

    async def main(url: str) -> list[Any]:
        async with AsyncMemoryClient(url, key="k", retry=policy) as memory:
            return [event async for event in memory.events(last_event_id=0)]

    with streaming() as (url, seen):
        assert [e.last_event_id for e in asyncio.run(main(url))] == ["1", "2", "3"]
    assert seen == ["0", "0", "1"]


def test_the_event_decoder_reads_the_event_stream_format() -> None:
    from memory_client._core import SseDecoder

    decoder = SseDecoder()
    lines = [
        ": a comment",
        "retry: 2500",
        "",
        "id: 7",
        "",
        "event: gap",
        'data: {"from_seq": 8,',
        'data:  "to_seq": 9}',
    ]
    assert [decoder.feed(line) for line in lines] == [None] * len(lines)
    assert decoder.last_event_id == "7" and decoder.retry_ms == 2500  # an id alone moves the position
    gap = decoder.feed("")
    assert gap is not None and (gap.type, gap.missed, gap.last_event_id) == ("gap", {"from_seq": 8, "to_seq": 9}, "7")
    decoder.feed('data: {"seq": 10')
    decoder.restart()  # a new connection: the half-read event is dropped
    assert decoder.feed("") is None and decoder.last_event_id == "7"

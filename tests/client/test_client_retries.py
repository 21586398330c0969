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

"""Helpers of the compaction, extraction and model-port tests: threads, entries, a local model server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from memoryapp.models import Agent, Entry, Thread
from memoryapp.services.threads import entry_add, thread_create


def make_thread(agent: Agent, external_id: str = "t-1", user_id: str = "u-ana", **metadata: Any) -> Thread:
    return thread_create(agent=agent, external_id=external_id, user_id=user_id, metadata=metadata or None)


def say(thread: Thread, role: str, content: Any, *, at: datetime | None = None, **fields: Any) -> Entry:
    return entry_add(thread=thread, role=role, content=content, created_at=at, **fields)


def tool_round(thread: Thread, n: int, *, tool: str = "fetch_page", body: str | None = None) -> tuple[Entry, Entry]:
    """An assistant tool call and its result (about 1,200 tokens of body by default)."""
    call = entry_add(
        thread=thread,
        role="assistant",
        content="",
        tool_calls=[{"id": f"c{n}", "name": tool, "arguments": {"page": n}}],
    )
    result = entry_add(
        thread=thread,
        type="tool_result",
        tool_call_id=f"c{n}",
        content=body if body is not None else f"PAGE-{n}-BODY " + "lorem ipsum " * 400,
    )
    return call, result


def tool_thread(agent: Agent, rounds: int = 4, external_id: str = "t-tools") -> Thread:
    """The acceptance check's thread: a user question, a tool call and its result, `rounds` times."""
    thread = make_thread(agent, external_id)
    for i in range(rounds):
        say(thread, "user", f"look up page {i}")
        tool_round(thread, i)
    return thread


# --- a local HTTP server speaking a model provider's protocol --------------------------------------


@dataclass
class Reply:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class SeenRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class ModelServer:
    """A real HTTP server on localhost answering from a list of replies, recording each request."""

    def __init__(self, replies: list[Reply]):
        self.replies = list(replies)
        self.seen: list[SeenRequest] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                server.seen.append(
                    SeenRequest(self.path, {k.lower(): v for k, v in self.headers.items()}, json.loads(raw or b"{}"))
                )
                reply = server.replies.pop(0) if server.replies else Reply(500, {"error": "no reply left"})
                payload = json.dumps(reply.body).encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @contextmanager
    def running(self) -> Iterator[ModelServer]:
        self.thread.start()
        try:
            yield self
        finally:
            self.httpd.shutdown()
            self.httpd.server_close()

"""Bodies sent with `Transfer-Encoding: chunked` (no Content-Length) are read in full, or refused:
never taken as empty. Checked against the real servers: gunicorn (gthread, as `make run` starts
it) decodes the chunks; Django's test server cannot, and answers 411."""

from __future__ import annotations

import http.client
import io
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memoryapp.api.parsers import MAX_JSON_BODY_BYTES
from memoryapp.models import Entry, Thread
from tests.kit.api import Caller
from tests.kit.servers import gunicorn_serving


@pytest.fixture
def gunicorn(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    """The service's WSGI application under gunicorn's gthread worker, on the tests' database."""
    with gunicorn_serving(var_dir=tmp_path) as where:
        yield where


def pieces(body: bytes, size: int = 7) -> Iterator[bytes]:
    """The body in small chunks, cut through the middle of JSON tokens."""
    for start in range(0, len(body), size):
        yield body[start : start + size]


def send_chunked(
    where: str, method: str, path: str, body: bytes | Iterator[bytes], key: str, content_type: str = "application/json"
) -> tuple[int, dict[str, str], Any]:
    host, port = where.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        chunks = pieces(body) if isinstance(body, bytes) else body
        headers = {"Authorization": f"Bearer {key}", "Content-Type": content_type, "Transfer-Encoding": "chunked"}
        conn.request(method, path, body=chunks, headers=headers, encode_chunked=True)
        response = conn.getresponse()
        raw = response.read()
        head = {k.lower(): v for k, v in response.getheaders()}
        return response.status, head, json.loads(raw) if raw else None
    finally:
        conn.close()


@pytest.mark.slow
def test_chunked_bodies_reach_the_views_whole_under_gunicorn(gunicorn: str, alice: Caller) -> None:
    created = send_chunked(
        gunicorn,
        "POST",
        "/api/v1/threads",
        json.dumps({"id": "t-chunked", "metadata": {"topic": "rome"}}).encode(),
        alice.key,
    )
    assert created[0] == 201, created
    assert created[2]["id"] == "t-chunked" and created[2]["metadata"] == {"topic": "rome"}

    patched = send_chunked(
        gunicorn, "PATCH", "/api/v1/threads/t-chunked", json.dumps({"metadata": {"topic": "paris"}}).encode(), alice.key
    )
    assert patched[0] == 200, patched
    assert Thread.objects.get(external_id="t-chunked").metadata == {"topic": "paris"}

    batch = {"entries": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}
    added = send_chunked(gunicorn, "POST", "/api/v1/threads/t-chunked/entries", json.dumps(batch).encode(), alice.key)
    assert added[0] == 201, added
    assert Entry.objects.filter(thread__external_id="t-chunked").count() == 2

    lines = [
        {"type": "node", "node": {"id": f"ck{i}", "parent": f"ck{i - 1}" if i > 1 else None, "seq": i,
                                  "turn": {"role": "user", "content": f"turn {i}"}}}
        for i in range(1, 4)
    ]  # fmt: skip
    jsonl = "\n".join(json.dumps(line) for line in lines).encode()
    imported = send_chunked(
        gunicorn, "POST", "/api/v1/threads/import?id=t-imported", jsonl, alice.key, content_type="application/x-ndjson"
    )
    assert imported[0] == 201, imported
    # Stored under ids derived from the file's (memoryapp.ids), chained as the file chains them.
    rows = list(Entry.objects.filter(thread__external_id="t-imported").order_by("seq").values_list("id", "parent_id"))
    assert [parent for _, parent in rows] == [None, rows[0][0], rows[1][0]]


@pytest.mark.slow
def test_a_chunked_body_over_the_limit_is_a_413_under_gunicorn(gunicorn: str, alice: Caller) -> None:
    def oversized() -> Iterator[bytes]:
        head = b'{"id": "t-big", "metadata": {"pad": "'
        yield head
        left = MAX_JSON_BODY_BYTES + 1 - len(head)
        while left > 0:
            piece = min(left, 1024 * 1024)
            yield b"x" * piece
            left -= piece

    status, _, body = send_chunked(gunicorn, "POST", "/api/v1/threads", oversized(), alice.key)
    assert status == 413 and body["error"]["code"] == "request_too_large"
    assert not Thread.objects.filter(external_id="t-big").exists()


class _Kept(io.BytesIO):
    """What a server sent, read by http.client as from its socket; left open for what follows."""

    def close(self) -> None:
        pass

    def makefile(self, mode: str) -> _Kept:
        return self


def send_raw(where: str, request: bytes, *, then_stop: bool) -> tuple[int, Any, bytes]:
    """Send bytes as they are (http.client cannot make a malformed chunked body), and with
    `then_stop` say that nothing more comes (a half close). Reads until the server closes the
    connection; answers the status, the JSON body, and whatever the server sent after its answer."""
    host, port = where.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(request)
        if then_stop:
            sock.shutdown(socket.SHUT_WR)
        received = bytearray()
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except TimeoutError:
            raise AssertionError(f"the server kept the connection open after: {bytes(received)!r}") from None
    sent = _Kept(bytes(received))
    response = http.client.HTTPResponse(sent)  # type: ignore[arg-type]
    response.begin()
    raw = response.read()
    return response.status, json.loads(raw) if raw else None, sent.read()


MALFORMED_CHUNKS = {
    "a chunk size that is not hex": (b"zz\r\n{}\r\n0\r\n\r\n", False),
    "a chunk without its line end": (b"2\r\n{}XX0\r\n\r\n", False),
    "a body cut off mid-chunk": (b"10\r\n{}", True),
}


@pytest.mark.parametrize("body, then_stop", list(MALFORMED_CHUNKS.values()), ids=list(MALFORMED_CHUNKS))
def test_a_malformed_chunked_body_is_a_400_naming_the_body_and_the_connection_closes(
    gunicorn: str, alice: Caller, body: bytes, then_stop: bool
) -> None:
    head = (
        "POST /api/v1/threads HTTP/1.1\r\nHost: localhost\r\n"
        f"Authorization: Bearer {alice.key}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    status, answer, after = send_raw(gunicorn, head + body, then_stop=then_stop)
    assert status == 400, answer
    assert (answer["error"]["code"], answer["error"]["field"]) == ("invalid_body", "body"), answer
    assert "chunked" in answer["error"]["message"]
    # Where a next request would start on this connection is unknown: the server closed it, and
    # sent nothing more (no second answer to the rest of the bytes).
    assert after == b""
    assert not Thread.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_server_that_cannot_decode_chunks_answers_411_and_writes_nothing(live_server: Any, alice: Caller) -> None:
    host, port = live_server.url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({"id": "t-dev", "metadata": {"topic": "rome"}}).encode()
    # The whole request in one write: the server answers as soon as it has read the headers and
    # closes, and a client still sending chunks then would fail on a broken pipe, not on the answer.
    request = (
        b"POST /api/v1/threads HTTP/1.1\r\n"
        + f"Host: {host}:{port}\r\nAuthorization: Bearer {alice.key}\r\n".encode()
        + b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        + f"{len(body):x}\r\n".encode()
        + body
        + b"\r\n0\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=120) as conn:
        conn.sendall(request)
        response = http.client.HTTPResponse(conn)
        response.begin()
        status, head, answer = (
            response.status,
            {k.lower(): v for k, v in response.getheaders()},
            json.loads(response.read()),
        )
    assert status == 411 and answer["error"]["code"] == "length_required"
    # The unread chunks must not be read as a next request on the same connection.
    assert head.get("connection") == "close"
    assert not Thread.objects.exists()

"""A batch append's answer written out (memoryapp.api.threads.batch_added_json): byte for byte what
the API's JSON renderer writes of `entry_json` for every entry, plain turns and every other kind, and
the headers DRF's view gives any answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.renderers import JSONRenderer

from memoryapp.api import threads as threads_api
from memoryapp.api.threads import batch_added_json, entry_json
from memoryapp.models import Entry, Thread
from tests.kit.api import THREADS, Caller, post_ok

TURNS: list[dict[str, Any]] = [
    {"role": "user", "content": "Start at the Colosseum at eight."},
    # Quotes, a backslash, control characters, non-ASCII and the two separators JSON leaves raw.
    {"role": "assistant", "content": 'Plan "Roma" \\ day\n\tcafé ☕ \u2028 \u2029 \x7f 𝄞'},
    {"role": "user", "content": ""},
    {"role": "assistant", "content": [{"type": "text", "text": "Then the Forum \u2028."}]},
    {"role": "user", "content": "with metadata", "metadata": {"a": [1, "é"]}},
    {"role": "user", "content": "from Ana", "sender_name": "Ana \u2029"},
    {"role": "assistant", "content": "calling", "tool_calls": [{"id": "c1", "name": "f", "arguments": {"x": 1}}]},
    {"type": "tool_result", "tool_call_id": "c1", "tool_name": "f", "content": "done"},
    {"type": "label", "event": {"label": "checkpoint"}},
    {"role": "user", "content": "counted", "token_count": 7},
    {"role": "user", "content": "at a time of its own", "created_at": "2026-03-01T12:00:00.123456+02:00"},
]


@pytest.mark.django_db
def test_a_batchs_answer_is_the_renderers_bytes(alice: Caller, monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[tuple[list[Entry], str, str | None, bytes]] = []

    def kept(entries: list[Entry], thread_id: str, active_leaf_id: str | None) -> bytes:
        answer = batch_added_json(entries, thread_id, active_leaf_id)
        written.append((list(entries), thread_id, active_leaf_id, answer))
        return answer

    monkeypatch.setattr(threads_api, "batch_added_json", kept)
    post_ok(alice.client, THREADS, {"id": "t-batch"})
    response = alice.client.post(f"{THREADS}/t-batch/entries", {"entries": TURNS}, format="json")
    assert response.status_code == 201, response.content
    ((entries, thread_id, leaf, answer),) = written
    # What DRF's Response rendered before: the renderer over each entry's `entry_json`.
    rendered = JSONRenderer().render({"entries": [entry_json(e, thread_id) for e in entries], "active_leaf_id": leaf})
    assert response.content == answer == rendered
    assert b"\\u2028" in response.content and "\u2028".encode() not in response.content
    thread = Thread.objects.get(agent=alice.agent, external_id="t-batch")
    stored = list(Entry.objects.filter(thread=thread).order_by("seq"))
    parsed = json.loads(response.content)
    assert [e["id"] for e in parsed["entries"]] == [e.id for e in stored]
    assert parsed["active_leaf_id"] == stored[-1].id == thread.active_leaf_id
    # The headers of any answer of the view through DRF's Response (a read of the same thread's).
    read = alice.client.get(f"{THREADS}/t-batch/entries")
    assert {name: value for name, value in response.items() if name != "Content-Length"} == {
        name: value for name, value in read.items() if name != "Content-Length"
    }


@pytest.mark.django_db
def test_written_out_and_rendered_agree_for_the_entries_as_built(alice: Caller) -> None:
    post_ok(alice.client, THREADS, {"id": "t-built"})
    answer = alice.client.post(f"{THREADS}/t-built/entries", {"entries": TURNS[:3]}, format="json").json()
    thread = Thread.objects.get(agent=alice.agent, external_id="t-built")
    entries = list(Entry.objects.filter(thread=thread).order_by("seq"))
    # A leaf of none, a parent of none, a count of none: each written as null.
    entries[0].token_count = None
    expected = JSONRenderer().render({"entries": [entry_json(e, "t-built") for e in entries], "active_leaf_id": None})
    assert batch_added_json(entries, "t-built", None) == expected
    assert len(answer["entries"]) == 3


@pytest.mark.django_db
def test_a_batch_answers_an_accept_with_indent_as_drf_does(alice: Caller) -> None:
    # Found in review: DRF's JSONRenderer indents for `Accept: application/json; indent=2` and names that media type;
    # the single append's fast path (_single_append) hands such a request to DRF for this reason.
    post_ok(alice.client, THREADS, {"id": "t-indent"})
    single = alice.client.post(
        f"{THREADS}/t-indent/entries",
        {"role": "user", "content": "one"},
        format="json",
        HTTP_ACCEPT="application/json; indent=2",
    )
    assert single.status_code == 201
    assert b'\n  "id"' in single.content, single.content
    batch = alice.client.post(
        f"{THREADS}/t-indent/entries",
        {"entries": [{"role": "user", "content": "two"}]},
        format="json",
        HTTP_ACCEPT="application/json; indent=2",
    )
    assert batch.status_code == 201
    assert b'\n  "entries"' in batch.content


@pytest.mark.django_db
def test_two_client_times_of_one_instant_keep_their_own_offsets(alice: Caller) -> None:
    post_ok(alice.client, THREADS, {"id": "t-offsets"})
    batch = alice.client.post(
        f"{THREADS}/t-offsets/entries",
        {
            "entries": [
                {"role": "user", "content": "a", "created_at": "2026-03-01T12:00:00+02:00"},
                {"role": "user", "content": "b", "created_at": "2026-03-01T10:00:00+00:00"},
            ]
        },
        format="json",
    )
    assert batch.status_code == 201, batch.content
    times = [e["created_at"] for e in json.loads(batch.content)["entries"]]
    # entry_json (what the renderer was given before) writes each entry's own created_at.isoformat().
    assert times == ["2026-03-01T12:00:00+02:00", "2026-03-01T10:00:00+00:00"]

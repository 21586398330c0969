"""The rows of a context build's window (memoryapp.context.history.PathEntry) hold what the ORM reads of
the same entries (issue 26): content, tool calls and events decoded from the jsonb text PostgreSQL
sends (a string without a backslash taken from between its quotes, anything else decoded), sender
names, and every sealed value opened with encryption on."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.db import connection

from governance.crypto.sealing import PREFIX
from memoryapp.context import history
from memoryapp.models import Entry, Thread
from memoryapp.threads.services import entries_add
from tests.kit.crypto import encrypted  # noqa: F401  (the fixture)
from tests.kit.factories import ThreadFactory

# Strings whose JSON text has every kind of escape PostgreSQL writes, and some that only look like JSON.
TEXTS = [
    "plain words",
    "",
    'she said "yes"',
    "a back\\slash",
    "ends with a backslash \\",
    "two\nlines\tand a tab\r",
    "bell \x07 and unit \x1f separators",
    "é ü 東京 🙂",
    "line\u2028separator",
    '{"looks": "like json"}',
    '"quoted whole"',
    "[1, 2]",
    "null",
]


def _specs() -> list[dict[str, Any]]:
    specs: list[dict[str, Any]] = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": text, "sender_name": 'Ann "A." O\\Neil' if i else ""}
        for i, text in enumerate(TEXTS)
    ]
    specs += [
        {"role": "user", "content": [{"type": "text", "text": 'blocks "quoted"\n'}, {"type": "text", "text": "é"}]},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "call-1", "name": "look_up", "arguments": {"q": 'a "b" \\ c\n'}}],
        },
        {"type": "tool_result", "tool_call_id": "call-1", "tool_name": "look_up", "content": '{"found": "x\\"y"}'},
    ]
    return specs


def _window_rows(thread: Thread) -> list[history.PathEntry]:
    thread.refresh_from_db()
    rows, _ = history._path_chunk(
        thread=thread, start=str(thread.active_leaf_id), limit=100, chain_below=history._chain_below(thread)
    )
    return rows


def _same_as_the_orm(thread: Thread, written: list[Entry]) -> None:
    rows = _window_rows(thread)
    assert [r.id for r in rows] == [e.id for e in written]
    for row in rows:
        entry = Entry.objects.get(pk=row.id)
        assert (row.content, row.text, row.sender_name, row.tool_calls, row.event) == (
            entry.content,
            entry.text,
            entry.sender_name,
            entry.tool_calls,
            entry.event,
        ), row.id


def test_window_rows_hold_what_the_orm_reads_of_escaped_and_structured_values(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent)
    written = entries_add(thread=thread, entries=_specs())
    _same_as_the_orm(thread, written)
    rows = {r.id: r for r in _window_rows(thread)}
    # The reference is right too: each text came back as it was written.
    assert [rows[e.id].content for e in written[: len(TEXTS)]] == TEXTS


def test_window_rows_of_a_compaction_hold_its_event(alice: Any) -> None:
    thread = ThreadFactory(agent=alice.agent)
    written = entries_add(thread=thread, entries=_specs()[:3])
    summary = 'They said "hello"\nand left.'
    written += entries_add(
        thread=thread,
        entries=[
            {
                "type": "compaction",
                "role": "user",
                "content": summary,
                "event": {"summary": summary, "first_kept_entry_id": written[1].id, "first_kept_seq": written[1].seq},
            }
        ],
    )
    _same_as_the_orm(thread, written)
    assert _window_rows(thread)[-1].event["summary"] == summary


def test_window_rows_with_encryption_on_hold_the_opened_values(encrypted: Any, alice: Any) -> None:  # noqa: F811
    thread = ThreadFactory(agent=alice.agent)
    written = entries_add(thread=thread, entries=_specs())
    with connection.cursor() as cursor:
        cursor.execute("SELECT content::text, text FROM memoryapp_entry WHERE id = %s", [written[2].pk])
        content, text = cursor.fetchone()
    assert content.startswith('"' + PREFIX) and text.startswith(PREFIX), "sealed at rest"
    _same_as_the_orm(thread, written)


@pytest.mark.parametrize("text", TEXTS)
def test_a_json_string_is_read_as_the_decoder_reads_it(text: str) -> None:
    assert history._json(json.dumps(text)) == text
    assert history._json(json.dumps(text, ensure_ascii=False)) == text

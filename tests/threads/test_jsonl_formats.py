"""JSONL format versions (000's migrators): an export says its format; an import brings every older
format to the current one through the chain of migrators, and refuses a newer one naming its line."""

from __future__ import annotations

import json
from typing import Any

from memoryapp.extraction.services import entries_to_extract
from memoryapp.models import Entry, Thread
from memoryapp.threads.formats import FORMAT_VERSION, MIGRATORS, records_upgraded
from memoryapp.threads.selectors import path_entries
from tests.kit.api import Caller, answered, content_of, error_of, post_entry, post_thread

IMPORT = "/api/v1/threads/import"


def _export(caller: Caller, thread_id: str) -> list[dict[str, Any]]:
    response = caller.client.get(f"/api/v1/threads/{thread_id}/export")
    return [json.loads(line) for line in content_of(response).decode().splitlines()]


def _import(caller: Caller, records: list[dict[str, Any]], thread_id: str) -> Any:
    body = "\n".join(json.dumps(r) for r in records)
    return caller.client.post(f"{IMPORT}?id={thread_id}", body, content_type="application/x-ndjson")


def _entries(thread_id: str) -> list[tuple[int, str, str, str, Any]]:
    thread = Thread.objects.get(external_id=thread_id)
    return [(e.seq, e.type, e.role, e.tool_name, e.content) for e in path_entries(thread=thread, types=None)]


def _renamed(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same thread under new entry ids (the originals still exist)."""
    text = json.dumps(records)
    for record in records:
        if record["type"] == "node":
            text = text.replace(record["node"]["id"], "c" + record["node"]["id"][3:])
    return list(json.loads(text))


def test_an_export_says_its_format_and_a_round_trip_keeps_the_memory_switch_and_its_off_ranges(alice: Caller) -> None:
    post_thread(alice, "t-on")
    post_entry(alice, "t-on", role="user", content="on the record")
    alice.client.put("/api/v1/threads/t-on/memory", {"memory": "off"}, format="json")
    post_entry(alice, "t-on", role="user", content="off the record")
    records = _export(alice, "t-on")

    assert records[0]["type"] == "thread" and records[0]["format"] == FORMAT_VERSION == 2
    assert records[0]["thread"]["memory"] == "off"
    assert records[0]["thread"]["memory_off"] == [{"from_seq": 2, "to_seq": None}]
    answered(_import(alice, _renamed(records), "t-copy"), 201)
    copy = Thread.objects.get(external_id="t-copy")
    assert not copy.memory_enabled and copy.extraction["memory_off"] == [{"from_seq": 2, "to_seq": None}]
    assert _entries("t-copy") == _entries("t-on")


def test_an_import_with_memory_off_keeps_the_turns_written_after_it_out_of_extraction(alice: Caller) -> None:
    """A file saying memory "off" without an open range (or one opening past its last node) left the
    turns written after the import out of every range: turning memory on extracted them."""
    for thread_id, off_ranges in (("t-none", []), ("t-far", [{"from_seq": 50, "to_seq": None}])):
        post_thread(alice, f"src-{thread_id}")
        post_entry(alice, f"src-{thread_id}", role="user", content="on the record")
        records = _renamed(_export(alice, f"src-{thread_id}"))
        records[0]["thread"].update(memory="off", memory_off=off_ranges)
        answered(_import(alice, records, thread_id), 201)
        post_entry(alice, thread_id, role="user", content="said after the import, memory off")
        back_on = answered(
            alice.client.put(f"/api/v1/threads/{thread_id}/memory", {"memory": "on"}, format="json"), 200
        )
        assert back_on["off_ranges"] == [{"from_seq": 2, "to_seq": 2}], (thread_id, back_on)
        _, branch = entries_to_extract(Thread.objects.get(agent=alice.agent, external_id=thread_id))
        assert [e.text for e in branch] == ["on the record"], thread_id


def test_a_format_1_export_is_brought_to_the_current_format_with_memory_on(alice: Caller) -> None:
    post_thread(alice, "t-1", metadata={"topic": "rome"})
    post_entry(alice, "t-1", role="user", content="hello")
    post_entry(alice, "t-1", role="assistant", content="", tool_calls=[{"id": "c1", "name": "look", "arguments": {}}])
    post_entry(alice, "t-1", type="tool_result", tool_call_id="c1", content="found")
    records = _renamed(_export(alice, "t-1"))
    # As this service wrote them before formats were numbered: no format, no memory switch.
    header = records[0]
    del header["format"]
    del header["thread"]["memory"], header["thread"]["memory_off"]

    version, upgraded = records_upgraded(list(enumerate(records, start=1)))
    assert version == 1 and upgraded[0][1]["format"] == 2 and upgraded[0][1]["thread"]["memory"] == "on"
    answered(_import(alice, records, "t-1-copy"), 201)
    copy = Thread.objects.get(external_id="t-1-copy")
    assert copy.memory_enabled and copy.metadata == {"topic": "rome"}
    assert _entries("t-1-copy") == _entries("t-1")
    assert _entries("t-1-copy")[2][1:4] == ("tool_result", "tool", "look")


def test_a_session_file_of_000_goes_through_the_whole_chain(alice: Caller) -> None:
    """No thread record, no seq (the file's order is the order), the entry's type and tool name in its turn."""
    nodes = [
        {"id": "s1", "parent": None, "turn": {"role": "user", "content": "look it up"}, "createdAt": 1000},
        {
            "id": "s2",
            "parent": "s1",
            "turn": {"role": "assistant", "content": "", "toolCalls": [{"id": "k", "name": "find", "arguments": {}}]},
            "createdAt": 2000,
        },
        {
            "id": "s3",
            "parent": "s2",
            "turn": {"role": "tool", "type": "tool_result", "toolCallId": "k", "toolName": "find", "content": "ok"},
            "createdAt": 3000,
        },
    ]
    records: list[dict[str, Any]] = [{"type": "node", "node": n} for n in nodes] + [{"type": "head", "leaf": "s3"}]
    records.append({"type": "summary", "text": "a record no version knows: skipped"})

    version, upgraded = records_upgraded(list(enumerate(records, start=1)))
    assert version == 0
    assert [r["node"]["seq"] for _, r in upgraded if r["type"] == "node"] == [1, 2, 3]
    answered(_import(alice, records, "t-000"), 201)
    assert _entries("t-000") == [
        (1, "message", "user", "", "look it up"),
        (2, "message", "assistant", "", ""),
        (3, "tool_result", "tool", "find", "ok"),
    ]
    assert Thread.objects.get(external_id="t-000").memory_enabled


def test_a_newer_format_is_refused_naming_its_line_and_nothing_is_written(alice: Caller) -> None:
    node = {"type": "node", "node": {"id": "x1", "parent": None, "seq": 1, "turn": {"role": "user", "content": "hi"}}}
    newer = [{"type": "thread", "format": FORMAT_VERSION + 1, "thread": {"id": "t-new"}}, node]
    error = error_of(_import(alice, newer, "t-new"))
    assert error["code"] == "unsupported_format" and error["field"] == "line 1.format"
    assert f"format {FORMAT_VERSION + 1}" in error["message"] and f"0 to {FORMAT_VERSION}" in error["message"]
    later = [node, {"type": "thread", "format": 7, "thread": {}}]
    assert error_of(_import(alice, later, "t-new"))["field"] == "line 2.format"
    for wrong in ("two", -1, True, 2.0):
        bad = [{"type": "thread", "format": wrong, "thread": {}}, node]
        assert error_of(_import(alice, bad, "t-new"))["field"] == "line 1.format", wrong
    memory = [{"type": "thread", "format": 2, "thread": {"memory": "maybe"}}, node]
    assert error_of(_import(alice, memory, "t-new"))["field"] == "line 1.thread.memory"
    ranges = [{"type": "thread", "format": 2, "thread": {"memory": "on", "memory_off": [{"from_seq": 3}]}}, node]
    assert error_of(_import(alice, ranges, "t-new"))["field"] == "line 1.thread.memory_off[0]"
    no_seq = [{"type": "thread", "format": 2, "thread": {}}, {"type": "node", "node": {**node["node"], "seq": None}}]
    assert error_of(_import(alice, no_seq, "t-new"))["field"] == "line 2.seq"
    assert not Thread.objects.filter(external_id="t-new").exists() and not Entry.objects.filter(id="x1").exists()


def test_a_newer_formats_thread_record_of_another_shape_is_refused_not_read_as_a_000_file(alice: Caller) -> None:
    """A thread record whose `thread` is not an object was passed over when the format was read: a
    newer file that shaped it otherwise was read as a 000 session file (format 0) and imported."""
    node = {"type": "node", "node": {"id": "x2", "parent": None, "seq": 1, "turn": {"role": "user", "content": "hi"}}}
    for header in (
        {"type": "thread", "format": FORMAT_VERSION + 1, "thread": "t-new"},
        {"type": "thread", "format": FORMAT_VERSION + 1},
    ):
        error = error_of(_import(alice, [header, node], "t-shape"))
        assert (error["code"], error["field"]) == ("unsupported_format", "line 1.format"), header
    # Of a format this service reads, a thread record without its object is refused naming it.
    error = error_of(_import(alice, [{"type": "thread", "format": FORMAT_VERSION, "thread": []}, node], "t-shape"))
    assert error["field"] == "line 1.thread"
    assert not Thread.objects.filter(external_id="t-shape").exists() and not Entry.objects.filter(id="x2").exists()


def test_the_migrators_are_one_chain_from_000s_files_to_the_current_format() -> None:
    assert [m.from_version for m in MIGRATORS] == list(range(FORMAT_VERSION))
    assert len({m.id for m in MIGRATORS}) == len(MIGRATORS)

"""Evidence of a tool call and of lines of a memory file version (004 Evidence `toolCallId`,
`fileRange`): checked as they are written, shown in place to reviewers, taken by the cascades."""

from __future__ import annotations

from typing import Any

import pytest

from memoryapp.files.access import FileAccess
from memoryapp.files.services import files_redact
from memoryapp.forgetting.services import entry_redact
from memoryapp.models import Entry, Evidence, MemoryFileVersion, MemoryItem
from tests.kit.api import Caller, use_memory_tool
from tests.kit.factories import EntryFactory, ThreadFactory
from tests.kit.review_staff import staff

NOTES = "# Ana\nprefers the window seat\nallergic to peanuts, severe\nlikes early flights\nbirthday in May"


def _tool_thread(caller: Caller) -> tuple[Entry, Entry]:
    thread = ThreadFactory(agent=caller.agent, external_id="t-tools", user_id="u-ana")
    EntryFactory(thread=thread, role="user", content="What is the weather in Lisbon?")
    call = EntryFactory(
        thread=thread,
        role="assistant",
        content="",
        tool_calls=[{"id": "call_7", "name": "get_weather", "arguments": {"city": "Lisbon"}}],
    )
    result = EntryFactory(thread=thread, type="tool_result", tool_call_id="call_7", content="Sunny, 24C in Lisbon")
    return call, result


def _notes_version(caller: Caller) -> MemoryFileVersion:
    status, answer = use_memory_tool(caller, {"command": "create", "path": "/memories/ana.md", "file_text": NOTES})
    assert status == 201, answer
    return MemoryFileVersion.objects.get(agent=caller.agent, path="/memories/ana.md")


def _item(caller: Caller, *evidence: dict[str, Any], attribute: str = "allergy") -> Any:
    body = {"kind": "fact", "subject": "Ana", "attribute": attribute, "value": "peanuts", "user_id": "u-ana"}
    return caller.client.post("/api/v1/items", {**body, "evidence": list(evidence)}, format="json")


# --- written and checked --------------------------------------------------------------------------


def test_a_quote_of_a_tool_call_is_checked_in_the_call_and_its_result(alice: Caller) -> None:
    call, result = _tool_thread(alice)

    of_result = _item(alice, {"entry_id": result.id, "tool_call_id": "call_7", "quote": "24C in Lisbon"})
    of_call = _item(alice, {"entry_id": call.id, "tool_call_id": "call_7", "quote": "Lisbon"}, attribute="city")
    not_said = _item(alice, {"entry_id": result.id, "tool_call_id": "call_7", "quote": "rain"}, attribute="x")

    assert of_result.status_code == 201, of_result.json()
    [quote] = of_result.json()["evidence"]
    assert quote == {
        "id": quote["id"],
        "entry_id": result.id,
        "tool_call_id": "call_7",
        "quote": "24C in Lisbon",
        "status": "verified",
    }
    assert of_call.json()["evidence"][0]["status"] == "verified"
    assert not_said.json()["evidence"][0]["status"] == "suggested"


@pytest.mark.parametrize("call_id", ["call_8", "call_"])
def test_a_tool_call_the_entry_does_not_hold_is_a_400_and_nothing_is_written(alice: Caller, call_id: str) -> None:
    _, result = _tool_thread(alice)

    answer = _item(alice, {"entry_id": result.id, "tool_call_id": call_id, "quote": "Sunny"})

    assert answer.status_code == 400 and answer.json()["error"]["field"] == "evidence.0.tool_call_id"
    assert not MemoryItem.objects.exists() and not Evidence.objects.exists()


def test_a_quote_of_file_lines_is_checked_against_the_range_of_the_version(alice: Caller) -> None:
    version = _notes_version(alice)
    lines = {"version_id": version.pk, "start_line": 2, "end_line": 3}

    inside = _item(alice, {"file_range": lines, "quote": "allergic to peanuts"})
    outside = _item(alice, {"file_range": lines, "quote": "birthday in May"}, attribute="birthday")

    assert inside.status_code == 201, inside.json()
    [quote] = inside.json()["evidence"]
    assert quote["entry_id"] is None and quote["status"] == "verified"
    assert quote["file_range"] == {"version_id": version.pk, "start_line": 2, "end_line": 3}
    assert outside.json()["evidence"][0]["status"] == "suggested"  # in the file, not in the lines named


@pytest.mark.parametrize(
    ("file_range", "field"),
    [
        ({"start_line": 4, "end_line": 6}, "evidence.0.file_range.end_line"),  # 5 lines
        ({"start_line": 3, "end_line": 2}, "evidence.0.file_range.end_line"),
        ({"start_line": 0, "end_line": 2}, "evidence.0.file_range.start_line"),
        ({"version_id": "ver_nothing", "start_line": 1, "end_line": 1}, "evidence.0.file_range.version_id"),
    ],
)
def test_a_range_that_does_not_fit_its_version_is_a_400_naming_the_field(
    alice: Caller, file_range: dict[str, Any], field: str
) -> None:
    version = _notes_version(alice)

    answer = _item(alice, {"file_range": {"version_id": version.pk, **file_range}, "quote": "peanuts"})

    assert answer.status_code == 400, answer.json()
    assert answer.json()["error"]["field"] == field
    assert not MemoryItem.objects.exists()


def test_another_agents_file_version_and_tool_call_are_not_found(alice: Caller, mallory: Caller) -> None:
    version = _notes_version(alice)
    _, result = _tool_thread(alice)

    lines = mallory.client.post(
        "/api/v1/items",
        {
            "kind": "fact",
            "subject": "Ana",
            "attribute": "allergy",
            "value": "peanuts",
            "evidence": [{"file_range": {"version_id": version.pk, "start_line": 1, "end_line": 2}, "quote": "Ana"}],
        },
        format="json",
    )
    call = _item(mallory, {"entry_id": result.id, "tool_call_id": "call_7", "quote": "Sunny"})

    assert lines.status_code == 400 and lines.json()["error"]["field"] == "evidence.0.file_range.version_id"
    assert call.status_code == 400 and call.json()["error"]["field"] == "evidence.0.tool_call_id"
    assert not MemoryItem.objects.filter(agent=mallory.agent).exists()


# --- the cascades follow them -----------------------------------------------------------------------


def test_redacting_the_file_takes_its_quotes_and_the_items_standing_only_on_them(alice: Caller) -> None:
    version = _notes_version(alice)
    _, result = _tool_thread(alice)
    lines = {"version_id": version.pk, "start_line": 3, "end_line": 3}
    alone = _item(alice, {"file_range": lines, "quote": "allergic to peanuts"}).json()
    both = _item(
        alice,
        {"file_range": lines, "quote": "peanuts, severe"},
        {"entry_id": result.id, "tool_call_id": "call_7", "quote": "Sunny"},
        attribute="weather",
    ).json()

    files_redact(access=FileAccess(agent=alice.agent, user_id="u-ana"), paths=["/memories/ana.md"])

    assert not MemoryItem.objects.filter(pk=alone["id"]).exists()  # it stood on the lines alone
    kept = MemoryItem.objects.get(pk=both["id"])
    assert list(kept.evidence.values_list("tool_call_id", flat=True)) == ["call_7"]
    assert kept.verified  # what is left still holds


def test_redacting_the_tool_result_takes_its_quotes_like_an_entrys(alice: Caller) -> None:
    _, result = _tool_thread(alice)
    item = _item(alice, {"entry_id": result.id, "tool_call_id": "call_7", "quote": "Sunny"}).json()

    entry_redact(entry=Entry.objects.get(pk=result.id), reason="asked")

    assert not MemoryItem.objects.filter(pk=item["id"]).exists()
    assert not Evidence.objects.filter(tool_call_id="call_7").exists()


# --- shown in place -----------------------------------------------------------------------------------


def test_the_item_page_shows_the_quoted_lines_and_the_tool_call_in_place(alice: Caller) -> None:
    version = _notes_version(alice)
    _, result = _tool_thread(alice)
    item = _item(
        alice,
        {"file_range": {"version_id": version.pk, "start_line": 3, "end_line": 3}, "quote": "allergic to peanuts"},
        {"entry_id": result.id, "tool_call_id": "call_7", "quote": "Sunny"},
    ).json()

    page = staff("reviewer").get(f"/admin/memoryapp/memoryitem/{item['id']}/change/").content.decode()

    assert (
        '<span class="rq-line rq-quoted" data-line="3"><span class="rq-ln">3</span><mark>allergic to peanuts, severe</mark>'
        in page
    )
    assert 'data-line="1"' in page and 'data-line="5"' in page  # two lines around
    assert "/memories/ana.md" in page and "version 1" in page
    assert 'tool call <code title="call_7">call_7</code>' in page and "<mark>Sunny</mark>" in page

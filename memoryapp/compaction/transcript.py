"""Rendering entries as the transcript a summarizer reads."""

from __future__ import annotations

import json
from collections.abc import Sequence

from memoryapp.content import content_text
from memoryapp.models import Entry
from memoryapp.models.choices import EntryType


def tool_call_names(entries: Sequence[Entry]) -> dict[str, tuple[str, str]]:
    """{tool call id: (id of the assistant entry that made it, tool name)} over a branch."""
    calls: dict[str, tuple[str, str]] = {}
    for entry in entries:
        for call in entry.tool_calls or []:
            if isinstance(call, dict) and call.get("id"):
                calls[str(call["id"])] = (entry.id, str(call.get("name") or ""))
    return calls


def tool_name_of(entry: Entry, calls: dict[str, tuple[str, str]]) -> str:
    return entry.tool_name or calls.get(entry.tool_call_id, ("", ""))[1] or "tool"


def entry_body(entry: Entry) -> str:
    """What the entry says (its content; tool calls are rendered apart by `entry_line`)."""
    body = content_text(entry.content)
    return body if body or entry.tool_calls else entry.text


def entry_line(entry: Entry, calls: dict[str, tuple[str, str]], *, prefix: str = "") -> str:
    """One entry as `role: text`, tool calls and results named."""
    body = entry_body(entry)
    if entry.type == EntryType.TOOL_RESULT or entry.role == "tool":
        return f"{prefix}tool result ({tool_name_of(entry, calls)}): {body}"
    if entry.type == EntryType.COMPACTION:
        return f"{prefix}earlier summary: {body}"
    line = f"{prefix}{entry.role or 'message'}: {body}"
    for call in entry.tool_calls or []:
        if isinstance(call, dict):
            arguments = json.dumps(call.get("arguments"), ensure_ascii=False, separators=(",", ":"))
            line += f"\n{prefix}  -> calls {call.get('name')}({arguments})"
    return line


def budgeted_transcript(blocks: list[str], char_budget: int) -> tuple[str, int]:
    """The blocks joined, the OLDEST left out (with a marker saying how many) past `char_budget`.

    A budget of 0 or less means no limit. Returns the text and how many blocks were elided.
    """
    text = "\n\n".join(blocks)
    if char_budget <= 0 or len(text) <= char_budget:
        return text, 0
    kept: list[str] = []
    used = 0
    for block in reversed(blocks):
        # Room for the marker line too.
        if used + len(block) + 2 > char_budget - 100 and kept:
            break
        if used + len(block) + 2 > char_budget - 100:
            block = block[-max(char_budget - 100, 0) :]
        kept.append(block)
        used += len(block) + 2
    elided = len(blocks) - len(kept)
    marker = f"[{elided} earlier messages elided to fit the summarizer's input budget]"
    return "\n\n".join([marker, *reversed(kept)]), elided

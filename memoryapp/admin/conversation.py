"""A page of a thread drawn as a transcript: what each turn shows (speaker, time, text with the
quotes memory took from it marked, tool calls, results, summaries, redactions).

The reads are `memoryapp.threads.conversation`; this module only turns them into what the
template draws, and escapes every piece of text it marks up.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote as url_quote

from django.contrib.admin.utils import quote
from django.urls import reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from memoryapp.content import content_text
from memoryapp.models import Entry
from memoryapp.models.choices import EntryType
from memoryapp.threads.conversation import ConversationPage, ForkLink, QuoteMark, SideBranch

# A turn longer than this (characters or lines) is drawn folded to a few lines, with "show all".
LONG_CHARS = 700
LONG_LINES = 10


@dataclass(frozen=True)
class ToolCall:
    name: str
    call_id: str
    arguments: str  # pretty JSON, or the text the model wrote


@dataclass(frozen=True)
class QuoteRef:
    number: int
    mark: QuoteMark
    url: str
    found: bool  # the quote was found in the turn's text (else it is listed only)


@dataclass
class Turn:
    entry: Entry
    kind: str  # message, tool_result, compaction, event
    speaker: str
    text: SafeString
    long: bool
    entry_url: str
    link: str  # this turn on the thread's page
    anchor: bool = False
    leaf: bool = False
    redacted: bool = False
    redaction_reason: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    event_label: str = ""
    compaction: dict[str, Any] = field(default_factory=dict)
    first_kept_link: str = ""
    quotes: list[QuoteRef] = field(default_factory=list)
    side_branches: list[tuple[SideBranch, str]] = field(default_factory=list)  # with the link showing it
    forks_here: list[tuple[ForkLink, str]] = field(default_factory=list)


def thread_url(thread_pk: int, **params: str) -> str:
    """The thread's page, with query parameters (entry ids hold characters a URL escapes)."""
    base = reverse("admin:memoryapp_thread_change", args=[thread_pk])
    query = "&".join(f"{k}={url_quote(v, safe='')}" for k, v in params.items() if v)
    return base + (f"?{query}" if query else "")


def turn_link(thread_pk: int, entry_id: str, *, leaf: str = "") -> str:
    """The thread's page opened at this turn (scrolled to it and marked)."""
    params = {"entry": entry_id, **({"leaf": leaf} if leaf else {})}
    return thread_url(thread_pk, **params) + f"#entry-{entry_id}"


def _quote_pattern(quote_text: str) -> re.Pattern[str] | None:
    """A quote as `verify_evidence` reads it: whitespace aside."""
    chars = [re.escape(c) for c in quote_text if not c.isspace()]
    return re.compile(r"\s*".join(chars)) if chars else None


def marked_text(text: str, refs: list[QuoteRef]) -> tuple[SafeString, set[int]]:
    """The text escaped, each quote found in it in <mark> with a numbered link to its item.

    Returns the HTML and the numbers of the quotes found. Overlapping quotes share one mark.
    """
    spans: list[tuple[int, int, int]] = []
    for ref in refs:
        pattern = _quote_pattern(ref.mark.quote)
        if pattern is None:
            continue
        spans.extend((m.start(), m.end(), ref.number) for m in pattern.finditer(text) if m.end() > m.start())
    spans.sort()
    merged: list[tuple[int, int, list[int]]] = []
    for start, end, number in spans:
        if merged and start <= merged[-1][1]:
            last = merged[-1]
            merged[-1] = (last[0], max(end, last[1]), last[2] + ([number] if number not in last[2] else []))
        else:
            merged.append((start, end, [number]))
    by_number = {ref.number: ref for ref in refs}
    parts: list[str] = []
    cursor = 0
    for start, end, numbers in merged:
        parts.append(escape(text[cursor:start]))
        title = "; ".join(f"[{n}] {by_number[n].mark.slot} ({by_number[n].mark.status})" for n in numbers)
        links = "".join(
            f'<a class="qref" href="{escape(by_number[n].url)}" title="{escape(title)}">[{n}]</a>' for n in numbers
        )
        parts.append(f'<mark class="quote" title="{escape(title)}">{escape(text[start:end])}</mark>{links}')
        cursor = end
    parts.append(escape(text[cursor:]))
    found = {n for _, _, numbers in merged for n in numbers}
    return mark_safe("".join(parts)), found  # every piece escaped above


def _is_long(text: str) -> bool:
    return len(text) > LONG_CHARS or text.count("\n") >= LONG_LINES


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return value
    return json.dumps(value, ensure_ascii=False, indent=2)


def _speaker(entry: Entry) -> str:
    if entry.type == EntryType.TOOL_RESULT:
        return f"tool · {entry.tool_name}" if entry.tool_name else "tool"
    if entry.type not in (EntryType.MESSAGE, EntryType.TOOL_RESULT):
        return entry.type.replace("_", " ")
    if entry.sender_name:
        return f"{entry.sender_name} ({entry.role})" if entry.role else entry.sender_name
    return entry.role or "?"


def _event_label(entry: Entry) -> str:
    event = entry.event if isinstance(entry.event, dict) else {}
    if entry.type == EntryType.MODEL_CHANGE:
        return f"model changed to {event.get('model') or event.get('to') or '?'}"
    if entry.type == EntryType.LABEL:
        return f"label: {event.get('label') or event.get('name') or json.dumps(event, ensure_ascii=False)[:200]}"
    body = json.dumps(event, ensure_ascii=False)
    return f"{entry.type.replace('_', ' ')}: {body[:300]}{'…' if len(body) > 300 else ''}"


def conversation_turns(page: ConversationPage, *, item_links: bool) -> list[Turn]:
    """The page's entries as turns to draw, oldest first."""
    thread = page.thread
    turns: list[Turn] = []
    leaf = (page.leaf_id or "") if not page.active else ""
    numbering = 0
    for entry in page.entries:
        refs: list[QuoteRef] = []
        for mark in page.quotes.get(entry.id, []):
            numbering += 1
            url = reverse("admin:memoryapp_memoryitem_change", args=[quote(mark.item_id)]) if item_links else ""
            refs.append(QuoteRef(number=numbering, mark=mark, url=url, found=False))
        redacted = entry.redacted_at is not None
        if entry.type == EntryType.MESSAGE:
            body = content_text(entry.content)
            kind = "message"
        elif entry.type == EntryType.TOOL_RESULT:
            body = entry.text or content_text(entry.content)
            kind = "tool_result"
        elif entry.type == EntryType.COMPACTION:
            body = content_text(entry.content) or str((entry.event or {}).get("summary") or "")
            kind = "compaction"
        else:
            body = ""
            kind = "event"
        html, found = marked_text(body, refs)
        refs = [QuoteRef(number=r.number, mark=r.mark, url=r.url, found=r.number in found) for r in refs]
        turn = Turn(
            entry=entry,
            kind=kind,
            speaker=_speaker(entry),
            text=html,
            long=_is_long(body),
            entry_url=reverse("admin:memoryapp_entry_change", args=[quote(entry.pk)]),
            link=turn_link(thread.pk, entry.id, leaf=leaf),
            anchor=entry.id == page.anchor_id,
            leaf=entry.id == thread.active_leaf_id,
            redacted=redacted,
            redaction_reason=str(((entry.metadata or {}).get("redacted") or {}).get("reason") or "")
            if redacted
            else "",
            quotes=refs,
        )
        for call in entry.tool_calls or []:
            if isinstance(call, dict):
                turn.tool_calls.append(
                    ToolCall(
                        name=str(call.get("name") or "?"),
                        call_id=str(call.get("id") or ""),
                        arguments=_pretty(call.get("arguments")),
                    )
                )
        if kind == "event":
            turn.event_label = _event_label(entry)
        if kind == "compaction":
            event = entry.event if isinstance(entry.event, dict) else {}
            turn.compaction = {
                "strategy": event.get("strategy", ""),
                "tokens_before": event.get("tokens_before"),
                "tokens_after": event.get("tokens_after"),
                "cleared": len(event.get("cleared") or {}),
            }
            first_kept = event.get("first_kept_entry_id")
            if isinstance(first_kept, str) and first_kept:
                turn.first_kept_link = turn_link(thread.pk, first_kept, leaf=leaf)
        for branch in page.side_branches.get(entry.id, []):
            turn.side_branches.append((branch, turn_link(thread.pk, branch.first_id, leaf=branch.newest_id)))
        for fork in page.forks_at.get(entry.id, []):
            turn.forks_here.append((fork, thread_url(fork.thread_pk)))
        turns.append(turn)
    return turns

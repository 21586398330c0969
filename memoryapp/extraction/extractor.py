"""Reading memory items out of a thread (004 `MemoryExtractor`): windows, the model call, the checks.

Nothing here writes; `memoryapp.extraction.services` writes what survives through the items
services, so the activation rules apply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from memoryapp.compaction.policy import entry_tokens
from memoryapp.compaction.transcript import entry_body, tool_call_names, tool_name_of
from memoryapp.extraction.times import resolve_time
from memoryapp.items.evidence import verify_evidence
from memoryapp.llm.arrays import ask_for_array
from memoryapp.models import Entry
from memoryapp.models.choices import TRUST_RANK, EntryType, EvidenceStatus, ItemKind, Role, Trust
from memoryapp.models.people import message_sender
from memoryapp.prompts import EXTRACTION, EXTRACTION_CONTINUE, prompt

WINDOW_TOKENS = 4000
# What one call may answer (004 SummarizeOptions.maxTokens); a longer answer is continued.
ANSWER_MAX_TOKENS = 8000
EXTRACTION_CONTINUATIONS = 4
EXTRACTION_TRIES = 3
MAX_VALUE_CHARS = 2000


@dataclass
class ExtractedItem:
    kind: str
    subject: str
    attribute: str
    value: str
    trust: str
    evidence: list[dict[str, str]]
    confidence: float | None
    valid_from: datetime
    valid_to: datetime | None


@dataclass
class ExtractedRelation:
    """An edge of the knowledge graph the window states: subject -[predicate]-> object."""

    subject: str
    predicate: str
    object: str
    trust: str
    evidence: list[dict[str, str]]
    confidence: float | None


RELATION_KIND = "relation"


@dataclass
class WindowResult:
    items: list[ExtractedItem] = field(default_factory=list)
    relations: list[ExtractedRelation] = field(default_factory=list)
    # Elements that were not items, or had no quote that holds.
    left_out: int = 0
    quotes_dropped: int = 0
    calls: int = 0
    continuations: int = 0


def extraction_windows(entries: list[Entry], window_tokens: int = WINDOW_TOKENS) -> list[list[Entry]]:
    """Consecutive windows of about `window_tokens` (an entry larger than that is a window alone)."""
    windows: list[list[Entry]] = []
    current: list[Entry] = []
    used = 0
    for entry in entries:
        tokens = entry_tokens(entry)
        if current and used + tokens > window_tokens:
            windows.append(current)
            current, used = [], 0
        current.append(entry)
        used += tokens
    if current:
        windows.append(current)
    return windows


def render_window(
    entries: list[Entry], zone: ZoneInfo, branch: list[Entry] | None = None
) -> tuple[str, dict[int, Entry]]:
    """The numbered transcript, each message with its date: `[n] 2026-03-02 14:05 (Monday) user: ...`."""
    calls = tool_call_names(branch or entries)
    numbered: dict[int, Entry] = {}
    lines = []
    for number, entry in enumerate(entries, start=1):
        numbered[number] = entry
        local = entry.created_at.astimezone(zone)
        when = f"{local:%Y-%m-%d %H:%M} ({local:%A})"
        if entry.type == EntryType.TOOL_RESULT or entry.role == Role.TOOL:
            who = f"tool result ({tool_name_of(entry, calls)})"
        else:
            who = entry.role + (f" ({entry.sender_name})" if entry.sender_name else "")
        body = entry_body(entry)
        for call in entry.tool_calls or []:
            if isinstance(call, dict):
                body += f"\n  -> calls {call.get('name')}"
        lines.append(f"[{number}] {when} {who}: {body}")
    return "\n\n".join(lines), numbered


def trust_of_entry(entry: Entry, user_id: str) -> str:
    """How far what an entry says can be trusted as the thread's user's (004 `trustOfEntry`).

    The thread's user -> user; another person's message (its sender, `metadata.userId` by the one
    rule `message_sender`, naming someone else) -> model; the assistant -> model; a tool result -> tool (web when its metadata
    says source "web"); a system message -> system.
    """
    metadata = entry.metadata or {}
    if entry.type == EntryType.TOOL_RESULT or entry.role == Role.TOOL:
        return Trust.WEB if metadata.get("source") == "web" else Trust.TOOL
    if entry.role == Role.SYSTEM:
        return Trust.SYSTEM
    if entry.role == Role.USER:
        speaker = message_sender(metadata)
        if speaker and speaker != user_id:
            return Trust.MODEL
        return Trust.USER
    return Trust.MODEL


def least_trusted(trusts: list[str]) -> str:
    return max(trusts, key=lambda t: TRUST_RANK.get(t, len(TRUST_RANK)))  # type: ignore[call-overload]


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _message_number(ref: Any) -> int | None:
    if isinstance(ref, bool):
        return None
    if isinstance(ref, int):
        return ref
    if isinstance(ref, str):
        digits = ref.strip().lstrip("[#").rstrip("]")
        return int(digits) if digits.isdigit() else None
    return None


def quote_holds(quote: str, entry: Entry) -> bool:
    return verify_evidence(quote, entry) == EvidenceStatus.VERIFIED  # type: ignore[arg-type]


def parse_extraction(elements: list[Any], numbered: dict[int, Entry], *, user_id: str, zone: ZoneInfo) -> WindowResult:
    """The items of a model's answer that fit, each standing on quotes that hold.

    1. An element that is not an object, or without a known kind, an attribute and a value, is
       left out (a null or blank field counts as absent; a missing subject is "user").
    2. Each quote must name a message of the window and be in it (whitespace aside); the others
       are dropped, and an item left with no quote that holds is left out.
    3. Trust: that of the least trusted entry a holding quote is in.
    4. Dates: `valid_from` / `valid_to` resolved from the message that said them (the first
       holding quote's); without one the item holds from that message's time.
    5. An element of kind "relation" is an edge of the graph (subject, predicate, object), checked
       the same way (`_parse_relation`).
    """
    result = WindowResult()
    for element in elements:
        if not isinstance(element, dict):
            result.left_out += 1
            continue
        kind = element.get("kind")
        kind = kind.strip().lower() if isinstance(kind, str) else ""
        if kind == RELATION_KIND:
            _parse_relation(element, numbered, user_id=user_id, result=result)
            continue
        attribute, value, subject = element.get("attribute"), element.get("value"), element.get("subject")
        if (
            kind not in ItemKind.values
            or _absent(attribute)
            or _absent(value)
            or not isinstance(attribute, str)
            or not isinstance(value, (str, int, float))
        ):
            result.left_out += 1
            continue
        subject = subject.strip() if isinstance(subject, str) and subject.strip() else "user"
        evidence: list[dict[str, str]] = []
        quoted: list[Entry] = []
        raw_evidence = element.get("evidence")
        for quote in raw_evidence if isinstance(raw_evidence, list) else []:
            if not isinstance(quote, dict) or not isinstance(quote.get("quote"), str):
                result.quotes_dropped += 1
                continue
            entry = numbered.get(_message_number(quote.get("message", quote.get("n"))) or 0)
            text = quote["quote"].strip()
            if entry is None or not text or not quote_holds(text, entry):
                result.quotes_dropped += 1
                continue
            evidence.append({"entry_id": entry.id, "quote": text})
            quoted.append(entry)
        if not evidence:
            result.left_out += 1
            continue
        confidence = element.get("confidence")
        if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 <= confidence <= 1:
            confidence = None
        said_at = quoted[0].created_at
        valid_from = resolve_time(element.get("valid_from"), said_at, zone) or said_at
        valid_to = resolve_time(element.get("valid_to"), said_at, zone)
        if valid_to is not None and valid_to <= valid_from:
            valid_to = None
        result.items.append(
            ExtractedItem(
                kind=kind,
                subject=subject[:300],
                attribute=attribute.strip()[:300],
                value=str(value).strip()[:MAX_VALUE_CHARS],
                trust=least_trusted([trust_of_entry(e, user_id) for e in quoted]),
                evidence=evidence,
                confidence=float(confidence) if confidence is not None else None,
                valid_from=valid_from,
                valid_to=valid_to,
            )
        )
    return result


def _held_quotes(
    element: dict[str, Any], numbered: dict[int, Entry], result: WindowResult
) -> tuple[list[dict[str, str]], list[Entry]]:
    """The quotes of an element that name a message of the window and are in it (the others counted dropped)."""
    evidence: list[dict[str, str]] = []
    quoted: list[Entry] = []
    raw_evidence = element.get("evidence")
    for quote in raw_evidence if isinstance(raw_evidence, list) else []:
        if not isinstance(quote, dict) or not isinstance(quote.get("quote"), str):
            result.quotes_dropped += 1
            continue
        entry = numbered.get(_message_number(quote.get("message", quote.get("n"))) or 0)
        text = quote["quote"].strip()
        if entry is None or not text or not quote_holds(text, entry):
            result.quotes_dropped += 1
            continue
        evidence.append({"entry_id": entry.id, "quote": text})
        quoted.append(entry)
    return evidence, quoted


def _parse_relation(element: dict[str, Any], numbered: dict[int, Entry], *, user_id: str, result: WindowResult) -> None:
    """A relation element: two named ends that differ and a predicate, standing on quotes that hold
    (else left out); trust that of the least trusted quoted entry, as for items."""
    subject, predicate, obj = element.get("subject"), element.get("predicate"), element.get("object")
    names = [v.strip() if isinstance(v, str) else "" for v in (subject, predicate, obj)]
    if not all(names) or names[0].lower() == names[2].lower():
        result.left_out += 1
        return
    evidence, quoted = _held_quotes(element, numbered, result)
    if not evidence:
        result.left_out += 1
        return
    confidence = element.get("confidence")
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 <= confidence <= 1:
        confidence = None
    result.relations.append(
        ExtractedRelation(
            subject=names[0][:300],
            predicate=names[1][:200],
            object=names[2][:300],
            trust=least_trusted([trust_of_entry(e, user_id) for e in quoted]),
            evidence=evidence,
            confidence=float(confidence) if confidence is not None else None,
        )
    )


def extract_window(
    entries: list[Entry], *, user_id: str, zone: ZoneInfo, branch: list[Entry] | None = None
) -> WindowResult:
    """One window: one model call (continued when cut, up to 4 times), then the checks.

    Raises NoArrayError when no answer held a JSON array after three tries.
    """
    transcript, numbered = render_window(entries, zone, branch)
    answer = ask_for_array(
        system=prompt(EXTRACTION).text,
        user="Conversation:\n\n" + transcript,
        max_tokens=ANSWER_MAX_TOKENS,
        tries=EXTRACTION_TRIES,
        continuations=EXTRACTION_CONTINUATIONS,
        continuation_prompt=prompt(EXTRACTION_CONTINUE).text,
    )
    result = parse_extraction(answer.elements, numbered, user_id=user_id, zone=zone)
    result.left_out += answer.malformed
    result.calls = answer.calls
    result.continuations = answer.continuations
    return result

"""The reviewers' queue as the admin shows it: cards with their quotes highlighted in their turns,
the suggestions of one slot gathered into one decision, the decisions posted by the page.

Reads come from `governance.console.review`, writes go through `memoryapp.items.services`; this
module turns one into pages and the page's posts into calls of the other.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.http import HttpRequest, QueryDict
from django.urls import NoReverseMatch, reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from governance.console.review import (
    ORDERS,
    QueueFilters,
    QueuePage,
    QuotesRead,
    quotes_with_turns,
    review_queue_page,
    slot_values_now,
    suggestions_waiting,
)
from governance.retention.policies import retention_policies, suggested_deadline
from memoryapp.admin.files import history_url
from memoryapp.errors import DomainError
from memoryapp.items.evidence import tool_call_text
from memoryapp.items.services import (
    item_approve,
    item_reject,
    items_bulk_review,
    items_review_undo,
    items_slot_decide,
    new_decision_id,
    slot_clusters,
)
from memoryapp.models import Agent, Entry, Evidence, MemoryFileVersion, MemoryItem
from memoryapp.models.choices import EvidenceStatus, ItemKind, Trust

# Who reviews memory (governance.staff.roles: Reviewers): the queue, the item pages, what the agent knew.
REVIEW_PERMISSION = "memoryapp.change_memoryitem"
ENTRY_WINDOW = 280  # characters of an entry shown on each side of its quotes
TURN_CHARS = 220  # characters of the turns shown around a quoted entry
FILE_CONTEXT_LINES = 2  # lines of a memory file shown before and after the lines a quote names
# A quote may name hundreds of lines: a longer range shows its first and last lines, with how many
# lie between (the whole file is one link away), so one card stays a card.
RANGE_LINES_SHOWN = 10
TOOL_CALL_ID_SHOWN = 40  # characters of a tool call's id (up to 200) shown; all of it on hover
REJECT_REASONS = ("wrong", "not about this person", "too vague", "duplicate", "sensitive", "a guess, not said")
# The session key of the last decision this reviewer made (the undo button of a page without script).
LAST_DECISION = "review_last_decision"


# --- quotes highlighted in their entries --------------------------------------------------------


def quote_spans(text: str, quotes: list[str]) -> list[tuple[int, int]]:
    """Where each quote stands in the text, whitespace aside (as `verify_evidence` reads it), merged."""
    spans: list[tuple[int, int]] = []
    for quote in quotes:
        words = quote.split()
        if not words:
            continue
        pattern = r"\s*".join(re.escape(w) for w in words)
        spans.extend(m.span() for m in re.finditer(pattern, text))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def highlighted(text: str, quotes: list[str], *, window: int = ENTRY_WINDOW) -> SafeString:
    """The entry's text, escaped, each quote in <mark>, cut to `window` characters around the quotes."""
    spans = quote_spans(text, quotes)
    if not spans:
        return mark_safe(escape(cut(text, window * 2)))  # escaped above
    parts: list[str] = []
    cursor = max(0, spans[0][0] - window)
    if cursor > 0:
        parts.append("… ")
    for start, end in spans:
        if start - cursor > window * 2:  # a long stretch between two quotes: keep its ends
            parts.append(escape(text[cursor : cursor + window]) + " … ")
            cursor = start - window
        parts.append(escape(text[cursor:start]))
        parts.append(f"<mark>{escape(text[start:end])}</mark>")
        cursor = end
    tail_end = min(len(text), cursor + window)
    parts.append(escape(text[cursor:tail_end]))
    if tail_end < len(text):
        parts.append(" …")
    return mark_safe("".join(parts))  # every piece escaped


def cut(text: str, limit: int) -> str:
    text = text or ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def thread_entry_url(thread_pk: int | None, entry_id: str | None) -> str:
    """The thread's admin page (the threads area's) scrolled to the entry."""
    if thread_pk is None:
        return "#"
    try:
        base = reverse("admin:memoryapp_thread_change", args=[thread_pk])
    except NoReverseMatch:  # the thread admin is not registered: the conventional address
        base = f"/admin/memoryapp/thread/{thread_pk}/change/"
    return f"{base}#{entry_id}" if entry_id else base


# --- cards ---------------------------------------------------------------------------------------


@dataclass
class Turn:
    role: str
    text: str
    entry_id: str


@dataclass
class Quoted:
    entry: Entry
    thread_pk: int
    thread_external_id: str
    html: SafeString
    url: str
    quotes: list[str]
    holds: bool
    before: Turn | None = None
    after: Turn | None = None
    tool_call_id: str = ""  # the quotes are of this tool call (004 Evidence toolCallId)

    @property
    def tool_call_shown(self) -> str:
        """The call's id, both ends of a long one (a client's ids run to 200 characters)."""
        limit, call = TOOL_CALL_ID_SHOWN, self.tool_call_id
        return call if len(call) <= limit else f"{call[: limit - 11]}…{call[-10:]}"


@dataclass
class QuotedLine:
    number: int
    text: str
    quoted: bool  # within the range a quote names
    folded_before: int = 0  # lines left out between the line shown before this one and this one


@dataclass
class FileQuoted:
    """Quotes of lines of one memory file version (004 Evidence fileRange), with the lines around."""

    version: MemoryFileVersion
    lines: list[QuotedLine]
    ranges: list[tuple[int, int]]
    quotes: list[str]
    holds: bool
    url: str


@dataclass
class Card:
    item: MemoryItem
    quoted: list[Quoted] = field(default_factory=list)
    filed: list[FileQuoted] = field(default_factory=list)  # quotes of memory file lines
    unplaced: list[Evidence] = field(default_factory=list)  # quotes whose entry (or file version) is gone
    now_value: str | None = None
    # When it expires unreviewed under its agent's retention policy (None: it waits for good).
    deadline: datetime | None = None


@dataclass
class Option:
    """One value of a slot: its best source, and the near-duplicates that say it again."""

    card: Card
    duplicates: list[Card] = field(default_factory=list)


@dataclass
class Unit:
    """The suggestions of one slot on the page: decided as one."""

    options: list[Option]

    @property
    def cards(self) -> list[Card]:
        return [c for o in self.options for c in (o.card, *o.duplicates)]

    @property
    def first(self) -> Card:
        return self.options[0].card

    @property
    def ids(self) -> str:
        return ",".join(c.item.pk for c in self.cards)

    @property
    def kind(self) -> str:
        if len(self.options) > 1:
            return "conflict"
        return "duplicates" if self.options[0].duplicates else "single"


@dataclass
class Group:
    agent: Agent
    user_id: str
    units: list[Unit] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(len(u.cards) for u in self.units)


def _turn(entry: Entry | None) -> Turn | None:
    if entry is None:
        return None
    text = "[redacted]" if entry.redacted_at else cut(entry.text, TURN_CHARS)
    return Turn(role=entry.sender_name or entry.role or entry.type, text=text, entry_id=entry.id)


def cards_for(
    items: list[MemoryItem], read: QuotesRead, *, now_values: dict[Any, str] | None = None, window: int = ENTRY_WINDOW
) -> dict[str, Card]:
    """A card per item: its quotes grouped by entry (each entry once), highlighted, with the turns around."""
    now_values = now_values or {}
    policies = retention_policies()
    cards: dict[str, Card] = {}
    for item in items:
        card = Card(item=item, deadline=suggested_deadline(item, policies=policies))
        by_entry: OrderedDict[tuple[str, str], list[Evidence]] = OrderedDict()
        by_version: OrderedDict[str, list[Evidence]] = OrderedDict()
        for ev in read.evidence.get(item.pk, []):
            if ev.line_start is not None and ev.file_version is not None:
                by_version.setdefault(ev.file_version.pk, []).append(ev)
            elif ev.entry is None:
                card.unplaced.append(ev)
            else:
                by_entry.setdefault((ev.entry.id, ev.tool_call_id), []).append(ev)
        for (_, call_id), quotes in by_entry.items():
            entry = quotes[0].entry
            assert entry is not None
            texts = list(dict.fromkeys(q.quote for q in quotes))
            source = entry.text
            if call_id:  # the call's result, or its name and arguments in the entry that makes it
                source = tool_call_text(entry, call_id) or entry.text
            card.quoted.append(
                Quoted(
                    entry=entry,
                    thread_pk=entry.thread_id,
                    thread_external_id=entry.thread.external_id,
                    html=highlighted("[redacted]" if entry.redacted_at else source, texts, window=window),
                    url=thread_entry_url(entry.thread_id, entry.id),
                    quotes=texts,
                    holds=all(q.status == EvidenceStatus.VERIFIED for q in quotes),
                    before=_turn(read.before.get(entry.id)),
                    after=_turn(read.after.get(entry.id)),
                    tool_call_id=call_id,
                )
            )
        card.filed = [_file_quoted(quotes) for quotes in by_version.values()]
        i = item
        card.now_value = now_values.get((i.agent_id, i.user_id, i.project_id, i.thread_id, i.subject, i.attribute))
        cards[item.pk] = card
    return cards


def _file_quoted(quotes: list[Evidence]) -> FileQuoted:
    """The quoted lines of one version, numbered, with FILE_CONTEXT_LINES around each range; of a
    range longer than RANGE_LINES_SHOWN, its first and last lines, the count of those between."""
    version = quotes[0].file_version
    assert version is not None
    ranges = sorted({(q.line_start or 1, q.line_end or q.line_start or 1) for q in quotes})
    text = "[redacted]" if version.redacted_at is not None else (version.content or "")
    all_lines = text.split("\n")
    last = len(all_lines)
    shown: set[int] = set()
    head = RANGE_LINES_SHOWN // 2
    for start, named_end in ranges:
        end = min(named_end, last)  # a range may name lines past the file's end: its last are the file's
        first, final = max(1, start - FILE_CONTEXT_LINES), min(last, end + FILE_CONTEXT_LINES)
        if end - start + 1 <= RANGE_LINES_SHOWN:
            shown.update(range(first, final + 1))
        else:
            shown.update(range(first, min(final, start + head - 1) + 1))
            shown.update(range(max(first, end - (RANGE_LINES_SHOWN - head) + 1), final + 1))
    lines = []
    before = 0
    for n in sorted(shown):
        quoted = any(a <= n <= b for a, b in ranges)
        lines.append(QuotedLine(n, cut(all_lines[n - 1], TURN_CHARS), quoted, n - before - 1 if before else 0))
        before = n
    return FileQuoted(
        version=version,
        lines=lines,
        ranges=ranges,
        quotes=list(dict.fromkeys(q.quote for q in quotes)),
        holds=all(q.status == EvidenceStatus.VERIFIED for q in quotes),
        url=history_url(version),
    )


def _slot(item: MemoryItem) -> tuple[int, str, str, str, str, str]:
    return (item.agent_id, item.user_id, item.project_id, item.thread_id, item.subject, item.attribute)


def queue_groups(page: QueuePage) -> list[Group]:
    """The page as groups (agent and person, in the page's order) of units (one per slot)."""
    everything = [*page.items, *page.siblings]
    read = quotes_with_turns(item_ids=[i.pk for i in everything])
    cards = cards_for(everything, read, now_values=slot_values_now(everything))
    by_slot: OrderedDict[tuple[int, str, str, str, str, str], list[MemoryItem]] = OrderedDict()
    for item in everything:
        by_slot.setdefault(_slot(item), []).append(item)
    groups: OrderedDict[tuple[int, str], Group] = OrderedDict()
    placed: set[tuple[int, str, str, str, str, str]] = set()
    for item in page.items:
        slot = _slot(item)
        if slot in placed:
            continue
        placed.add(slot)
        members = sorted(by_slot[slot], key=lambda i: (i.recorded_at, i.pk))
        options = [Option(card=cards[c[0].pk], duplicates=[cards[d.pk] for d in c[1:]]) for c in slot_clusters(members)]
        group = groups.setdefault((item.agent_id, item.user_id), Group(agent=item.agent, user_id=item.user_id))
        group.units.append(Unit(options=options))
    return list(groups.values())


# --- the page and its posts ----------------------------------------------------------------------


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def queue_filters(params: QueryDict) -> QueueFilters:
    user_id = params.get("user_id")
    kind, trust = params.get("kind", ""), params.get("trust", "")
    return QueueFilters(
        agent_id=_int(params.get("agent")),
        user_id=user_id.strip() if user_id and user_id.strip() else None,
        kind=kind if kind in ItemKind.values else "",
        trust=trust if trust in Trust.values else "",
    )


def queue_context(request: HttpRequest) -> dict[str, Any]:
    """What the queue's template shows: the page, its groups, counts, filters, paging links."""
    params = request.GET
    filters = queue_filters(params)
    order = params.get("order", "oldest")
    order = order if order in ORDERS else "oldest"
    error = ""
    try:
        page = review_queue_page(filters=filters, order=order, after=params.get("after"), before=params.get("before"))
    except DomainError as exc:  # a cursor changed by hand: the first page, and say so
        error = exc.message
        page = review_queue_page(filters=filters, order=order)
    kept = params.copy()
    for key in ("after", "before"):
        kept.pop(key, None)
    base = kept.urlencode()

    def link(**cursor: str) -> str:
        query = "&".join(filter(None, [base, "&".join(f"{k}={v}" for k, v in cursor.items())]))
        return "?" + query if query else "?"

    return {
        "groups": queue_groups(page),
        "page": page,
        "shown": len(page.items),
        "first_shown": page.before + 1 if page.items else 0,
        "last_shown": page.before + len(page.items),
        "pulled_in": len(page.siblings),
        "next_url": link(after=page.next_cursor) if page.next_cursor else "",
        "previous_url": link(before=page.previous_cursor) if page.previous_cursor else "",
        "filters": {
            "agent": filters.agent_id or "",
            "user_id": filters.user_id or "",
            "kind": filters.kind,
            "trust": filters.trust,
            "order": order,
        },
        "agents": Agent.objects.order_by("slug").only("id", "slug"),
        "kinds": ItemKind.values,
        "trusts": Trust.values,
        "reasons": REJECT_REASONS,
        "query": params.urlencode(),
        "last_decision": request.session.get(LAST_DECISION, ""),
        "cursor_error": error,
    }


def _ids(values: list[str]) -> list[str]:
    """Item ids posted as repeated fields or comma-joined (a unit's checkbox carries all of its)."""
    return [part for value in values for part in value.split(",") if part.strip()]


@dataclass
class Outcome:
    message: str
    status: str
    ids: list[str]
    decision: str = ""
    restored: list[dict[str, str]] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def queue_decide(request: HttpRequest, *, actor: str) -> Outcome:
    """Carry out one decision posted by the queue (or the item page) through the services."""
    post = request.POST
    action = post.get("action", "")
    decision = new_decision_id()
    if action in ("approve", "reject"):
        item = MemoryItem.objects.filter(pk=post.get("item", "")).first()
        if item is None:
            raise DomainError("not_found", "That item no longer exists.", status=404)
        if action == "approve":
            done = item_approve(item=item, actor=actor, value=post.get("value"), decision=decision)
            edited = done.metadata.get("edited_by_reviewer")
            return Outcome(
                "Approved" + (" with the edited value." if edited else "."), done.status, [done.pk], decision
            )
        reason = post.get("reason", "").strip()
        if not reason:
            raise DomainError("invalid_value", "Say why it is rejected.", field="reason")
        done = item_reject(item=item, actor=actor, reason=reason, decision=decision)
        return Outcome("Rejected.", done.status, [done.pk], decision)
    if action in ("bulk_approve", "bulk_reject", "reject_all"):
        ids = _ids(post.getlist("selected") if action != "reject_all" else post.getlist("items"))
        if not ids:
            raise DomainError("invalid_value", "Select items first (x).", field="selected")
        reason = post.get("reason", "").strip()
        approve = action == "bulk_approve"
        if not approve and not reason:
            raise DomainError("invalid_value", "Say why they are rejected.", field="reason")
        counts = items_bulk_review(item_ids=ids, actor=actor, approve=approve, reason=reason, decision=decision)
        verb = "approved" if approve else "rejected"
        text = f"{counts['done']} {verb}" + (f", {counts['skipped']} already decided." if counts["skipped"] else ".")
        return Outcome(text, "active" if approve else "rejected", ids, decision, extra=counts)
    if action == "choose":
        ids = _ids(post.getlist("items"))
        items = {i.pk: i for i in MemoryItem.objects.filter(pk__in=ids)}
        keep = items.get(post.get("keep", ""))
        if keep is None:
            raise DomainError("invalid_value", "Choose the value to keep.", field="keep")
        chosen = items_slot_decide(
            keep=keep, others=list(items.values()), actor=actor, value=post.get("value"), decision=decision
        )
        parts = [f"Kept “{cut(chosen.approved.value, 60)}”"]
        if chosen.duplicates:
            parts.append(f"{len(chosen.duplicates)} duplicate{'s' if len(chosen.duplicates) != 1 else ''} rejected")
        if chosen.conflicting:
            n = len(chosen.conflicting)
            parts.append(f"{n} other value{'s' if n != 1 else ''} rejected")
        if chosen.skipped:
            parts.append(f"{len(chosen.skipped)} already decided")
        return Outcome(
            "; ".join(parts) + ".",
            "active",
            list(items),
            decision,
            extra={"kept": keep.pk, "rejected": chosen.duplicates + chosen.conflicting},
        )
    if action == "undo":
        asked = post.get("decision", "")
        restored = items_review_undo(decision=asked, actor=actor)
        n = len(restored)
        return Outcome(
            f"Undone: {n} item{'s' if n != 1 else ''} waiting for review again.",
            "suggested",
            [i.pk for i in restored],
            asked,
            restored=[{"id": i.pk, "status": i.status, "value": i.value} for i in restored],
        )
    raise DomainError("invalid_value", "Unknown decision.", field="action")


def waiting_under(query: str) -> int:
    """The suggestions waiting under the filters of the page that posted (its query string)."""
    return suggestions_waiting(queue_filters(QueryDict(query))).count()

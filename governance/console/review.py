"""Reads of the reviewers' work: the queue of suggested items a page at a time, the quotes items
stand on with the turns around them, an item's review history, the backlog.

Every read here is a fixed number of queries whatever the page holds (pinned by the tests at 20 and
500 suggested items): one for the page, one for the other suggestions of its slots, one each for
quotes, turns before, turns after and the values the slots hold now.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Count, Min, Q, QuerySet
from django.utils import timezone

from memoryapp.errors import DomainError
from memoryapp.models import Entry, Evidence, ItemReview, MemoryItem
from memoryapp.models.choices import ItemStatus
from memoryapp.models.items import subject_lookup
from memoryapp.paging import decode_cursor, encode_cursor

QUEUE_PAGE = 50
# Other suggestions of the page's slots shown with them (a conflict is decided whole); a bound, so a
# slot suggested ten thousand times does not make one page ten thousand cards.
SLOT_SIBLINGS_MAX = 200
ORDERS = ("oldest", "newest")


@dataclass(frozen=True)
class QueueFilters:
    agent_id: int | None = None
    user_id: str | None = None
    kind: str = ""
    trust: str = ""


@dataclass
class QueuePage:
    items: list[MemoryItem]  # this page's suggestions, in the order asked for
    siblings: list[MemoryItem]  # other suggestions of the same slots, from other pages
    waiting: int  # suggestions waiting under the filters
    before: int  # how many of them come before this page
    next_cursor: str | None
    previous_cursor: str | None
    order: str


def suggestions_waiting(filters: QueueFilters) -> QuerySet[MemoryItem]:
    waiting = MemoryItem.objects.filter(status=ItemStatus.SUGGESTED, expired_at__isnull=True)
    if filters.agent_id:
        waiting = waiting.filter(agent_id=filters.agent_id)
    if filters.user_id is not None:
        waiting = waiting.filter(user_id=filters.user_id)
    if filters.kind:
        waiting = waiting.filter(kind=filters.kind)
    if filters.trust:
        waiting = waiting.filter(trust=filters.trust)
    return waiting


def _position(cursor: str) -> tuple[datetime, str]:
    values = decode_cursor(cursor, keys=("r", "i"))
    try:
        at = datetime.fromisoformat(str(values["r"]))
    except ValueError as exc:
        raise DomainError("invalid_cursor", "The cursor is not one this page gave.", field="cursor") from exc
    if timezone.is_naive(at):
        raise DomainError("invalid_cursor", "The cursor is not one this page gave.", field="cursor")
    return at, str(values["i"])


def _cursor(item: MemoryItem) -> str:
    return encode_cursor({"r": item.recorded_at.isoformat(), "i": item.pk})


def review_queue_page(
    *,
    filters: QueueFilters,
    order: str = "oldest",
    after: str | None = None,
    before: str | None = None,
    limit: int = QUEUE_PAGE,
) -> QueuePage:
    """One page of the suggestions waiting, keyset-paged on (recorded_at, id).

    1. `order` oldest (first come, first decided) or newest; `after` pages forward from a row,
       `before` back (read in the other direction, then turned round).
    2. The page's slots (agent, scope, subject, attribute) bring their other waiting suggestions
       along, whatever page they would be on: a conflict or a duplicate is decided whole.
    3. Counts: the suggestions waiting under the filters and how many come before the page.
    """
    if order not in ORDERS:
        order = "oldest"
    waiting = suggestions_waiting(filters)
    ascending = order == "oldest"
    backwards = bool(before) and not after
    rows = waiting.select_related("agent").defer("embedding", "search_vector")
    anchor = _position(after or before or "") if (after or before) else None
    if anchor is not None:
        at, pk = anchor
        later = ascending != backwards  # the rows wanted come after the anchor in time
        rows = rows.filter(
            Q(recorded_at__gt=at) | Q(recorded_at=at, id__gt=pk)
            if later
            else Q(recorded_at__lt=at) | Q(recorded_at=at, id__lt=pk)
        )
    forward_time = ascending != backwards
    ordering = ("recorded_at", "id") if forward_time else ("-recorded_at", "-id")
    fetched = list(rows.order_by(*ordering)[: limit + 1])
    more = len(fetched) > limit
    items = fetched[:limit]
    if backwards:
        items.reverse()
    has_next = more if not backwards else True
    has_previous = (anchor is not None) if not backwards else more

    if items:
        counts = waiting.aggregate(waiting=Count("id"), before=_count_before(items[0], ascending))
    else:
        counts = {"waiting": waiting.count(), "before": 0}
    return QueuePage(
        items=items,
        siblings=_slot_siblings(items),
        waiting=counts["waiting"],
        before=counts["before"],
        next_cursor=_cursor(items[-1]) if items and has_next else None,
        previous_cursor=_cursor(items[0]) if items and has_previous else None,
        order=order,
    )


def _count_before(first: MemoryItem, ascending: bool) -> Count:
    at, pk = first.recorded_at, first.pk
    if ascending:
        earlier = Q(recorded_at__lt=at) | Q(recorded_at=at, id__lt=pk)
    else:
        earlier = Q(recorded_at__gt=at) | Q(recorded_at=at, id__gt=pk)
    return Count("id", filter=earlier)


def _slot_q(items: list[MemoryItem]) -> Q:
    wanted = Q(pk__in=[])
    for i in items:
        wanted |= Q(
            subject_lookup(agent_id=i.agent_id, subject=i.subject),
            agent_id=i.agent_id,
            user_id=i.user_id,
            project_id=i.project_id,
            thread_id=i.thread_id,
            attribute=i.attribute,
        )
    return wanted


def _slot_siblings(items: list[MemoryItem]) -> list[MemoryItem]:
    if not items:
        return []
    return list(
        MemoryItem.objects.filter(_slot_q(items), status=ItemStatus.SUGGESTED, expired_at__isnull=True)
        .exclude(pk__in=[i.pk for i in items])
        .select_related("agent")
        .defer("embedding", "search_vector")
        .order_by("recorded_at", "id")[:SLOT_SIBLINGS_MAX]
    )


# --- quotes in their turns -------------------------------------------------------------------------


@dataclass
class QuotesRead:
    evidence: dict[str, list[Evidence]] = field(default_factory=dict)  # item id -> its quotes, oldest first
    before: dict[str, Entry] = field(default_factory=dict)  # entry id -> the turn it answers (its parent)
    after: dict[str, Entry] = field(default_factory=dict)  # entry id -> the first turn under it


def quotes_with_turns(*, item_ids: list[str]) -> QuotesRead:
    """The quotes of these items with their entries (thread loaded), and the turns before and after
    each quoted entry; three queries whatever the number of items."""
    read = QuotesRead()
    if not item_ids:
        return read
    evidence = list(
        Evidence.objects.filter(item_id__in=item_ids)
        .select_related("entry", "entry__thread", "file_version")
        .defer("entry__embedding", "entry__search_vector", "entry__thread__metadata")
        .order_by("created_at", "id")
    )
    for ev in evidence:
        read.evidence.setdefault(ev.item_id, []).append(ev)
    entries = {ev.entry_id: ev.entry for ev in evidence if ev.entry is not None}
    parent_ids = {e.parent_id for e in entries.values() if e.parent_id}
    if parent_ids:
        parents = {
            p.id: p
            for p in Entry.objects.filter(id__in=list(parent_ids)).only(
                "id", "role", "type", "text", "redacted_at", "sender_name"
            )
        }
        for entry in entries.values():
            if entry.parent_id in parents:
                read.before[entry.id] = parents[str(entry.parent_id)]
    if entries:
        for child in (
            Entry.objects.filter(parent_id__in=list(entries))
            .only("id", "parent_id", "role", "type", "text", "redacted_at", "seq", "sender_name")
            .order_by("seq")
        ):
            read.after.setdefault(str(child.parent_id), child)
    return read


def slot_values_now(items: list[MemoryItem]) -> dict[tuple[int, str, str, str, str, str], str]:
    """The value each item's slot holds now in its exact scope: what approving the item would replace."""
    if not items:
        return {}
    now = timezone.now()
    held = (
        MemoryItem.objects.filter(_slot_q(items), status__in=[ItemStatus.ACTIVE, ItemStatus.SUPERSEDED])
        .filter(Q(valid_from__lte=now), Q(valid_to__isnull=True) | Q(valid_to__gt=now), expired_at__isnull=True)
        .only("agent_id", "user_id", "project_id", "thread_id", "subject", "attribute", "value")
    )
    return {(h.agent_id, h.user_id, h.project_id, h.thread_id, h.subject, h.attribute): h.value for h in held}


# --- history and backlog ---------------------------------------------------------------------------


def item_reviews(*, item: MemoryItem) -> list[ItemReview]:
    """The item's review history, oldest first: decisions, undos, forgetting."""
    return list(ItemReview.objects.filter(item=item).order_by("at", "id"))


def last_decision_undoable(*, item: MemoryItem, actor: str) -> ItemReview | None:
    """The item's last step when it is a decision of this reviewer that an undo may still take back."""
    last = ItemReview.objects.filter(item=item).order_by("-at", "-id").first()
    if (
        last is not None
        and last.actor == actor
        and last.action in (ItemReview.Action.APPROVED, ItemReview.Action.REJECTED)
        and last.undone_at is None
        and item.expired_at is None
    ):
        return last
    return None


@dataclass(frozen=True)
class Backlog:
    waiting: int
    oldest_at: datetime | None
    agents: list[dict[str, Any]]  # [{"agent_id", "agent__slug", "waiting", "oldest"}], the most waiting first


def review_backlog(*, agents_shown: int = 8) -> Backlog:
    """The suggestions waiting for a reviewer and since when, in total and for the agents with the most."""
    waiting = MemoryItem.objects.filter(status=ItemStatus.SUGGESTED, expired_at__isnull=True)
    total = waiting.aggregate(n=Count("id"), oldest=Min("recorded_at"))
    per_agent = [
        dict(row)
        for row in waiting.values("agent_id", "agent__slug")
        .annotate(waiting=Count("id"), oldest=Min("recorded_at"))
        .order_by("-waiting", "agent__slug")[:agents_shown]
    ]
    return Backlog(waiting=total["n"], oldest_at=total["oldest"], agents=per_agent)

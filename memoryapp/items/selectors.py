"""Reads of memory items (owned by the items area).

Contract used by the context builder (recall area):

    context_facts(*, agent, user_id="", project_id="", thread_id="", as_of=None) -> list[ContextFact]
        the active items the scope sees that hold at `as_of` (now by default), one state per slot
        (the one that started last, the narrowest scope on a tie), instructions and preferences
        first, then newest first; `text` is the line the `facts` partition shows, with
        "(previously: X)" for a replaced value the scope still sees.

    items_for_recall(*, agent, user_id="", project_id="", thread_id="", as_of=None, purpose="") -> QuerySet[MemoryItem]
        the active items the scope sees that hold at `as_of`: hybrid recall searches within it.
        Both take `purpose`: with one, only items collected for it or for none (memoryapp.items.purposes).
        Suggested, rejected and stale items are never in either.

Which state holds is read from the times, not from the status alone: a state that starts later
leaves the one before it `superseded` but holding until it starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from governance.crypto.fields import equality_values
from governance.crypto.keyring import encryption_enabled
from memoryapp.errors import DomainError, NotFound
from memoryapp.items.purposes import purpose_q
from memoryapp.items.rules import TIMELINE_STATUSES, Scope, collapse_spaces, normalized_name, visible_q
from memoryapp.models import Agent, Entity, ItemReview, MemoryItem, Thread
from memoryapp.models.choices import ItemKind, ItemStatus
from memoryapp.models.items import subject_lookup
from memoryapp.paging import Page, decode_cursor, encode_cursor
from memoryapp.precompiled import SCOPE_STAND_INS, SCOPE_TWINS, Precompiled

# The attribute prefix of facts (002) kept as items: `core:<key>`.
FACT_PREFIX = "core:"
MAX_CONTEXT_FACTS = 200
_FIRST_KINDS = (ItemKind.INSTRUCTION, ItemKind.PREFERENCE)


@dataclass(frozen=True)
class ContextFact:
    item_id: str
    kind: str
    text: str


def items_for_agent(*, agent: Agent) -> QuerySet[MemoryItem]:
    """The one way in to an agent's items: every other read starts here."""
    return MemoryItem.objects.filter(agent=agent)


def item_for_agent(*, agent: Agent, item_id: str) -> MemoryItem:
    """One item of the agent; another agent's answers the same 404 as a missing one."""
    item = items_for_agent(agent=agent).filter(pk=item_id).select_related("entity").first()
    if item is None:
        raise NotFound("The item")
    return item


def thread_context_scope(thread: Thread) -> Scope:
    """The scope a thread's context reads (facts, recall, brief, observations) and "what did the agent
    know" shows for the thread: the thread's person, its project (`metadata.project_id`), itself."""
    return Scope(user_id=thread.user_id, project_id=thread.project_scope, thread_id=thread.external_id)


def items_visible(
    *, agent: Agent, user_id: str = "", project_id: str = "", thread_id: str = "", purpose: str = ""
) -> QuerySet[MemoryItem]:
    """The agent's items an access of this scope sees (items of no scope, or of its own), and with a
    `purpose` only those collected for it or for none (memoryapp.items.purposes)."""
    return items_for_agent(agent=agent).filter(
        visible_q(user_id=user_id, project_id=project_id, thread_id=thread_id), purpose_q(purpose)
    )


def holding_q(*, as_of: datetime | None = None, known_at: datetime | None = None, now: datetime | None = None) -> Q:
    """The states that hold at `as_of` (world time) as memory knew them at `known_at` (memory time).

    Defaults as 004: known_at now, as_of known_at. Facts past their time to live never hold.
    With a `known_at` in the past, memory is replayed as it stood then:

    1. a state counts from its activation (`activated_at`: written active, or approved by a
       reviewer), not from when it was suggested; an approval undone later counts between the
       approval and its undo (`ItemReview.undone_at`);
    2. a state closed by a successor activated only after `known_at` was still open then (a state
       told late changes what is known, not what was);
    3. a state reopened by the undo of its successor's approval was closed while that approval
       stood.
    """
    now = now or timezone.now()
    known = known_at or now
    at = as_of or known
    in_memory = Q(status__in=TIMELINE_STATUSES)
    interval = Q(valid_to__isnull=True) | Q(valid_to__gt=at)
    if known_at is not None and known_at < now:
        in_memory = (in_memory & activated_by(known)) | Q(Exists(_approvals_standing(known, item=OuterRef("pk"))))
        closed_then = Exists(
            _same_slot()
            .filter(valid_from=OuterRef("valid_to"), status__in=TIMELINE_STATUSES)
            .filter(activated_by(known))
        )
        # An end the writer gave (metadata valid_until) was known from the start.
        interval |= Q(end_given=False) & Q(~closed_then)
        successor_undone_since = Exists(
            _same_slot()
            .filter(valid_from__gt=OuterRef("valid_from"), valid_from__lte=at)
            .filter(Exists(_approvals_standing(known, item=OuterRef("pk"))))
        )
        interval &= Q(~successor_undone_since)
    return (
        in_memory
        & Q(valid_from__lte=at)
        & interval
        & Q(recorded_at__lte=known)
        & (Q(expired_at__isnull=True) | Q(expired_at__gt=known))
        & (Q(expires_at__isnull=True) | Q(expires_at__gt=now))
    )


def activated_by(known: datetime) -> Q:
    """States in a timeline since `known` or before (rows from before activated_at was kept count from recorded_at)."""
    return Q(activated_at__lte=known) | Q(activated_at__isnull=True, recorded_at__lte=known)


def _approvals_standing(known: datetime, *, item: Any) -> QuerySet[ItemReview]:
    """Approvals of `item` made by `known` and undone only after it."""
    return ItemReview.objects.filter(
        item_id=item, action=ItemReview.Action.APPROVED, at__lte=known, undone_at__gt=known
    )


def _same_slot() -> QuerySet[MemoryItem]:
    """The other states of the outer query's item's slot, in its exact scope (`item_slot_idx`)."""
    return MemoryItem.objects.filter(
        agent_id=OuterRef("agent_id"),
        user_id=OuterRef("user_id"),
        project_id=OuterRef("project_id"),
        thread_id=OuterRef("thread_id"),
        subject_hash=OuterRef("subject_hash"),
        attribute=OuterRef("attribute"),
    )


def items_holding(
    *,
    agent: Agent,
    user_id: str = "",
    project_id: str = "",
    thread_id: str = "",
    as_of: datetime | None = None,
    known_at: datetime | None = None,
    purpose: str = "",
    now: datetime | None = None,
) -> QuerySet[MemoryItem]:
    """What held at `as_of` as known at `known_at` (both now by default), for the scope (and purpose)."""
    return items_visible(
        agent=agent, user_id=user_id, project_id=project_id, thread_id=thread_id, purpose=purpose
    ).filter(holding_q(as_of=as_of, known_at=known_at, now=now))


def items_for_recall(
    *,
    agent: Agent,
    user_id: str = "",
    project_id: str = "",
    thread_id: str = "",
    as_of: datetime | None = None,
    purpose: str = "",
    now: datetime | None = None,
) -> QuerySet[MemoryItem]:
    return items_holding(
        agent=agent,
        user_id=user_id,
        project_id=project_id,
        thread_id=thread_id,
        as_of=as_of,
        purpose=purpose,
        now=now,
    )


def items_agent_wide(
    *, agent: Agent, as_of: datetime | None = None, purpose: str = "", now: datetime | None = None
) -> QuerySet[MemoryItem]:
    """Every item of the agent that holds at `as_of`, whatever its scope (a search of the whole agent),
    with a `purpose` only those collected for it or for none. (`now`: the clock, read by the caller.)"""
    return items_for_agent(agent=agent).filter(holding_q(as_of=as_of, now=now), purpose_q(purpose))


def _narrowness(item: MemoryItem) -> int:
    return sum(1 for v in (item.user_id, item.project_id, item.thread_id) if v)


def slot_key(item: MemoryItem) -> tuple[str, str]:
    return (normalized_name(item.subject), item.attribute)


def one_state_per_slot(items: Iterable[MemoryItem]) -> list[MemoryItem]:
    """Of the states of each slot, the one that started last, the narrowest scope on a tie."""
    chosen: dict[tuple[str, str], MemoryItem] = {}
    for item in items:
        key = slot_key(item)
        held = chosen.get(key)
        if held is None or (item.valid_from, _narrowness(item), item.recorded_at) > (
            held.valid_from,
            _narrowness(held),
            held.recorded_at,
        ):
            chosen[key] = item
    return list(chosen.values())


def fact_line(item: MemoryItem, previous: str | None = None) -> str:
    """The line a model reads for an item: "Ana diet: vegetarian (previously: vegan)"."""
    if item.attribute.startswith(FACT_PREFIX) and item.namespace:
        head = item.attribute[len(FACT_PREFIX) :]
    else:
        head = f"{item.subject} {item.attribute}".strip()
    line = f"{head}: {item.value}"
    if previous is not None and previous != item.value:
        line += f" (previously: {previous})"
    return line


def context_facts(
    *,
    agent: Agent,
    user_id: str = "",
    project_id: str = "",
    thread_id: str = "",
    as_of: datetime | None = None,
    known_at: datetime | None = None,
    purpose: str = "",
    states: list[MemoryItem] | None = None,
) -> list[ContextFact]:
    """The `facts` partition of a context (see the module docstring for the order and the text).

    `known_at` (memory time, now by default) replays what memory knew then ("what did the agent know").
    `states`: the rows of step 1 when the caller read them (`context_facts_read`, sent with its own
    reads), for a present read (no `as_of`, `known_at` or `purpose`).

    1. Read the states the scope sees that hold at `as_of`.
    2. Keep one per slot (the one that started last, the narrowest scope on a tie).
    3. For each, the state it replaced: the one of its exact scope and slot whose interval ends where it
       starts, visible, not let go; its value is shown as "(previously: X)".
    4. Instructions and preferences first, then the newest first.
    """
    at = as_of or timezone.now()
    if states is not None and as_of is None and known_at is None and not purpose:
        held = one_state_per_slot(states)
    elif known_at is None and not purpose:
        # A context's facts (every build reads them): the statement compiled once per process.
        held = one_state_per_slot(_FACTS.rows(agent.pk, user_id, project_id, thread_id, at, timezone.now()))
    else:
        held = one_state_per_slot(_facts_read(agent, user_id, project_id, thread_id, at, known_at, purpose))
    held.sort(key=lambda i: (0 if i.kind in _FIRST_KINDS else 1, -i.valid_from.timestamp(), i.pk))
    held = held[:MAX_CONTEXT_FACTS]
    previous = _previous_values(agent=agent, items=held, known_at=known_at or (at if as_of else None))
    return [ContextFact(item_id=i.pk, kind=i.kind, text=fact_line(i, previous.get(i.pk))) for i in held]


def _facts_read(
    agent: Agent,
    user_id: str,
    project_id: str,
    thread_id: str,
    at: datetime,
    known_at: datetime | None,
    purpose: str,
    now: datetime | None = None,
) -> QuerySet[MemoryItem]:
    """The states `context_facts` chooses from: those the scope sees holding at `at`, newest first."""
    return (
        items_holding(
            agent=agent,
            user_id=user_id,
            project_id=project_id,
            thread_id=thread_id,
            as_of=at,
            known_at=known_at,
            purpose=purpose,
            now=now,
        )
        .defer("embedding", "search_vector")
        .order_by("-valid_from")[: MAX_CONTEXT_FACTS * 5]
    )


# `_facts_read` of the present (no known_at, no purpose), compiled once per process with two sets of
# stand-ins (memoryapp.precompiled: the scope's '' and the statuses are the statement's constants).
_FACTS = Precompiled(
    lambda agent_id, user_id, project_id, thread_id, at, now: _facts_read(
        Agent(pk=agent_id), user_id, project_id, thread_id, at, None, "", now
    ),
    *SCOPE_STAND_INS,
    twins=SCOPE_TWINS,
)


def context_facts_read(
    *, agent: Agent, user_id: str = "", project_id: str = "", thread_id: str = ""
) -> tuple[str, str, tuple[Any, ...]] | None:
    """The statement (database, SQL, parameters) that reads step 1 of `context_facts` of this scope as
    it holds now, for a caller that sends it with its own reads (memoryapp.precompiled.read_together)
    and hands the rows, built by `context_facts_states`, back as `states`. None: not precompiled."""
    now = timezone.now()
    return _FACTS.statement(agent.pk, user_id, project_id, thread_id, now, now)


def context_facts_states(fetched: list[tuple[Any, ...]]) -> list[MemoryItem]:
    """The rows of `context_facts_read`'s statement, built as the ORM builds them."""
    return _FACTS.built(fetched)


def _previous_values(*, agent: Agent, items: list[MemoryItem], known_at: datetime | None) -> dict[str, str]:
    if not items:
        return {}
    wanted = Q()
    for item in items:
        wanted |= Q(
            subject_lookup(agent_id=agent.pk, subject=item.subject),
            user_id=item.user_id,
            project_id=item.project_id,
            thread_id=item.thread_id,
            attribute=item.attribute,
            valid_to=item.valid_from,
        )
    known = known_at or timezone.now()
    candidates = (
        items_for_agent(agent=agent)
        .filter(wanted, activated_by(known), status=ItemStatus.SUPERSEDED, expired_at__isnull=True)
        .only("id", "user_id", "project_id", "thread_id", "subject", "attribute", "value", "valid_to", "recorded_at")
        .order_by("-recorded_at")
    )
    by_slot: dict[tuple[str, str, str, str, str, datetime | None], str] = {}
    for row in candidates:
        key = (row.user_id, row.project_id, row.thread_id, row.subject, row.attribute, row.valid_to)
        by_slot.setdefault(key, row.value)
    found = {}
    for item in items:
        key = (item.user_id, item.project_id, item.thread_id, item.subject, item.attribute, item.valid_from)
        if key in by_slot:
            found[item.pk] = by_slot[key]
    return found


def slot_history(*, item: MemoryItem) -> list[MemoryItem]:
    """Every value the item's slot took in its exact scope, closed and let-go ones included, oldest first."""
    return list(
        MemoryItem.objects.filter(
            subject_lookup(agent_id=item.agent_id, subject=item.subject),
            agent_id=item.agent_id,
            user_id=item.user_id,
            project_id=item.project_id,
            thread_id=item.thread_id,
            attribute=item.attribute,
        )
        .defer("embedding", "search_vector")
        .order_by("valid_from", "recorded_at", "id")
    )


def subject_q(*, agent_id: int, subject: str) -> Q:
    """The items list's `subject` filter: the items whose subject is the text given in any case. With
    encryption on the subject is sealed and SQL compares its keyed hash only: the items whose subject
    is exactly the text (spacing collapsed, as it was written), or whose entity's name is it in any
    case (the entity's normalised name is hashed too: an item about an entity takes its name)."""
    text = collapse_spaces(subject.strip())
    if not encryption_enabled():
        return Q(subject__iexact=text)
    named = equality_values(agent_id=agent_id, text=normalized_name(text))
    return subject_lookup(agent_id=agent_id, subject=text) | Q(entity__normalized_name__in=named)


def items_list(
    *,
    agent: Agent,
    user_id: str | None = None,
    project_id: str | None = None,
    thread_id: str | None = None,
    statuses: Iterable[str] | None = None,
    kind: str | None = None,
    attribute: str | None = None,
    subject: str | None = None,
    as_of: datetime | None = None,
    known_at: datetime | None = None,
    limit: int = 100,
    cursor: str | None = None,
) -> Page:
    """The agent's items the scope sees, newest recorded first, one page at a time (keyset on recorded_at, id).

    With `as_of` or `known_at`, only the states that held then; without, every state (history
    included) unless `statuses` narrows it. A scope value given limits what is seen to items of no
    scope or of that one, as contexts see them.
    """
    items = items_visible(agent=agent, user_id=user_id or "", project_id=project_id or "", thread_id=thread_id or "")
    if as_of is not None or known_at is not None:
        items = items.filter(holding_q(as_of=as_of, known_at=known_at))
    status_list = list(statuses or [])
    for status in status_list:
        if status not in ItemStatus.values:
            raise DomainError("invalid_value", f"status must be one of {', '.join(ItemStatus.values)}.", field="status")
    if status_list:
        items = items.filter(status__in=status_list)
    if kind:
        if kind not in ItemKind.values:
            raise DomainError("invalid_value", f"kind must be one of {', '.join(ItemKind.values)}.", field="kind")
        items = items.filter(kind=kind)
    if attribute:
        items = items.filter(attribute=attribute)
    if subject:
        items = items.filter(subject_q(agent_id=agent.pk, subject=subject))
    if cursor:
        values = decode_cursor(cursor, keys=("r", "i"))
        try:
            at = datetime.fromisoformat(str(values["r"]))
            last_id = str(values["i"])
        except (ValueError, TypeError) as exc:
            raise DomainError("invalid_cursor", "The cursor is not one this service gave.", field="cursor") from exc
        items = items.filter(Q(recorded_at__lt=at) | Q(recorded_at=at, id__lt=last_id))
    rows = list(
        items.defer("embedding", "search_vector").select_related("entity").order_by("-recorded_at", "-id")[: limit + 1]
    )
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = encode_cursor({"r": rows[-1].recorded_at.isoformat(), "i": rows[-1].pk})
    return Page(results=rows, next_cursor=next_cursor)


def item_evidence(*, item: MemoryItem) -> list[Any]:
    return list(item.evidence.select_related("entry", "file_version").order_by("created_at", "id"))


# --- what did the agent know ----------------------------------------------------------------------

# The states one question about a scope lists at most (a person with more is read a slot at a time).
KNOWN_MAX = 1000


def known_reach(item: MemoryItem) -> str:
    """Which contexts a state reaches: one thread's, one person's, one project's, or every one of the agent."""
    if item.thread_id:
        return f"thread {item.thread_id}"
    if item.user_id and item.project_id:
        return f"person · project {item.project_id}"
    if item.user_id:
        return "person"
    if item.project_id:
        return f"project {item.project_id}"
    return "every person"


def items_known(
    *,
    agent: Agent,
    at: datetime,
    user_id: str = "",
    project_id: str = "",
    thread_id: str = "",
    world: bool = False,
    limit: int = KNOWN_MAX,
) -> list[MemoryItem]:
    """The states a scope saw at `at`: what held in the world then, as memory knew it then (`world`:
    as memory knows it now).

    Asked about a person without a thread, the states tied to one of the person's threads come too
    (every context of that thread saw them); `known_reach` labels them.
    """
    seen = visible_q(user_id=user_id, project_id=project_id, thread_id=thread_id)
    if user_id and not thread_id:
        threads = Thread.objects.filter(agent=agent, user_id=user_id).values("external_id")
        seen |= Q(user_id__in=["", user_id], project_id__in=["", project_id or ""]) & Q(thread_id__in=Subquery(threads))
    found = list(
        items_for_agent(agent=agent)
        .filter(seen)
        .filter(holding_q(as_of=at, known_at=None if world else at))
        .defer("embedding", "search_vector")
        .order_by("subject_hash", "attribute", "thread_id", "-valid_from", "id")[:limit]
    )
    # A slot's states come together (its subject's hash); the subjects sort once opened.
    return sorted(found, key=lambda i: (i.subject, i.attribute, i.thread_id, -i.valid_from.timestamp(), i.pk))


@dataclass
class KnownChanges:
    added: list[MemoryItem]
    removed: list[MemoryItem]
    changed: list[tuple[MemoryItem, MemoryItem]]  # (then, later) of one slot whose value differs
    unchanged: int


def known_changes(*, earlier: list[MemoryItem], later: list[MemoryItem]) -> KnownChanges:
    """What changed in what a scope knew between two moments, slot by slot in each exact scope."""

    def key(i: MemoryItem) -> tuple[str, str, str, str, str]:
        return (i.user_id, i.project_id, i.thread_id, normalized_name(i.subject), i.attribute)

    def by_slot(items: list[MemoryItem]) -> dict[tuple[str, str, str, str, str], MemoryItem]:
        slots: dict[tuple[str, str, str, str, str], MemoryItem] = {}
        for item in items:
            held = slots.get(key(item))
            if held is None or (item.valid_from, item.recorded_at) > (held.valid_from, held.recorded_at):
                slots[key(item)] = item
        return slots

    before, after = by_slot(earlier), by_slot(later)
    changes = KnownChanges(added=[], removed=[], changed=[], unchanged=0)
    for slot, item in after.items():
        old = before.get(slot)
        if old is None:
            changes.added.append(item)
        elif old.value != item.value:
            changes.changed.append((old, item))
        else:
            changes.unchanged += 1
    changes.removed = [item for slot, item in before.items() if slot not in after]
    return changes


def items_about(items: QuerySet[MemoryItem], *, subject: str) -> QuerySet[MemoryItem]:
    """The items among these whose subject is `subject` in any case (`subject_q`), over several agents
    (the admin's lists): with encryption on the text is hashed once per agent among the items, each
    agent's subjects being hashed under its own blind key (a whole subject is found, not a part)."""
    if not subject.strip():
        return items.none()
    if not encryption_enabled():
        return items.filter(subject_q(agent_id=0, subject=subject))
    match = Q(pk__in=[])
    for agent_id in items.order_by().values_list("agent_id", flat=True).distinct():
        match |= Q(agent_id=agent_id) & subject_q(agent_id=agent_id, subject=subject)
    return items.filter(match)


def entities_named(entities: QuerySet[Entity], *, name: str) -> QuerySet[Entity]:
    """The entities among these whose name (or what it normalises to) is `name`.

    With encryption on the names are sealed and the normalised name is a keyed hash under each
    agent's own blind key, so the name is hashed once per agent among the entities (a whole name
    is found, not a part of one); an entity the rotation has not hashed yet, by its plaintext.
    """
    wanted = normalized_name(name)
    if not wanted:
        return entities.none()
    if not encryption_enabled():
        return entities.filter(normalized_name=wanted)
    match = Q(pk__in=[])
    for agent_id in entities.order_by().values_list("agent_id", flat=True).distinct():
        match |= Q(agent_id=agent_id, normalized_name__in=equality_values(agent_id=agent_id, text=wanted))
    return entities.filter(match)

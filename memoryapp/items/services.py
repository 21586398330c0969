"""Writes of memory items: the rules of reference 004 "Memory Items".

Writing only adds. A statement said again merges into the state it repeats; a new value is a
new state, and after every write the states of its slot (subject + attribute) in exactly its
scope are laid out by time so that each is closed when the next one starts. Who said a thing
(trust) and whether its quotes hold (verified) decide whether it becomes `active` on its own;
everything else waits, `suggested`, for a reviewer.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict

from django.db import IntegrityError, connection, transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from governance import locks
from governance.audit.chain import audit_append
from governance.crypto.fields import equality_value, equality_values, lookup_keys_reread
from memoryapp.errors import Conflict, DomainError
from memoryapp.events.services import event_record
from memoryapp.ids import new_id, person_id_check
from memoryapp.items.evidence import evidence_status, file_lines, squash, tool_call_text, verify_evidence
from memoryapp.items.purposes import item_purposes_check
from memoryapp.items.rules import (
    TIMELINE_STATUSES,
    VALID_UNTIL_KEY,
    Scope,
    activates,
    better_source,
    collapse_spaces,
    normalized_name,
    same_value,
)
from memoryapp.models import (
    Agent,
    Entity,
    Entry,
    Evidence,
    ItemReview,
    MemoryFileVersion,
    MemoryItem,
    SubjectMention,
)
from memoryapp.models.choices import TRUST_RANK, EvidenceStatus, ItemKind, ItemStatus, Trust
from memoryapp.models.items import STALE_BECAUSE_KEY, subject_lookup
from memoryapp.screening.screen import screener_for
from memoryapp.subjects.detect import Written, key_people_set, mentions_record, rows_named
from memoryapp.subjects.erasing import senders_erasing_refuse

OPINION_REPEAT_GAIN = 0.1
OPINION_CONTRADICTION_LOSS = 0.2
MAX_VALUE_CHARS = 20_000
MAX_EVIDENCE = 50
MAX_QUOTE_CHARS = 4_000


class FileRangeInput(TypedDict):
    version_id: str
    start_line: int
    end_line: int


class EvidenceInput(TypedDict, total=False):
    entry_id: str
    quote: str
    # 004 Evidence `toolCallId`: the call `entry_id` makes or answers.
    tool_call_id: str
    # 004 Evidence `fileRange`: lines of a memory file version (then no entry).
    file_range: FileRangeInput


@dataclass(frozen=True)
class CheckedQuote:
    """A quote as it will be stored: where it points, and whether it holds there."""

    entry: Entry | None
    quote: str
    status: str
    tool_call_id: str = ""
    version: MemoryFileVersion | None = None
    line_start: int | None = None
    line_end: int | None = None

    def key(self) -> tuple[str | None, str, str, str | None, int | None, int | None]:
        version_id = self.version.pk if self.version is not None else None
        entry_id = self.entry.id if self.entry is not None else None
        return (entry_id, self.quote, self.tool_call_id, version_id, self.line_start, self.line_end)


# An item's metadata key naming the categories screening held it for (it waits as suggested).
HELD_KEY = "screening_held"


def slot_lock(*, agent_id: int, scope: Scope, subject_key: str, attribute: str) -> None:
    """Serialize the writers of one slot in one exact scope until the transaction ends."""
    names = (str(agent_id), scope.user_id, scope.project_id, scope.thread_id, subject_key, attribute)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [locks.item_slot(*names)])


def slot_items(*, agent: Agent, scope: Scope, subject: str, attribute: str) -> Any:
    """Every item of a slot in exactly one scope (the `item_slot_hash_idx` query: the subject by its hash)."""
    return MemoryItem.objects.filter(
        agent=agent,
        user_id=scope.user_id,
        project_id=scope.project_id,
        thread_id=scope.thread_id,
        attribute=attribute,
    ).filter(subject_lookup(agent_id=agent.pk, subject=subject))


def _slot_hashes_settle(*, slot: Any, agent: Agent, subject: str) -> None:
    """Give the slot's states written before subjects were sealed (their `subject_hash` still the
    subject itself, until encryption_rotate) the keyed hash a new state gets, under the slot's lock:
    the replays of what memory knew (`holding_q`) match a state with its successor by that column
    alone, so an old state closed by a new one would otherwise still hold in them. So do the states a
    rotation with new keys has not reached yet (their hash under the retired blind key)."""
    hashed = equality_value(agent_id=agent.pk, text=subject)
    if hashed != subject:
        slot.exclude(subject_hash=hashed).update(subject_hash=hashed)


def _check_text(value: Any, field: str, *, max_length: int, required: bool = True) -> str:
    if not isinstance(value, str):
        raise DomainError("invalid_value", f"{field} must be a string.", field=field)
    if "\x00" in value:
        raise DomainError("invalid_value", f"{field} must not hold NUL characters.", field=field)
    value = value.strip()
    if required and not value:
        raise DomainError("invalid_value", f"{field} must not be empty.", field=field)
    if len(value) > max_length:
        raise DomainError("value_too_large", f"{field} holds at most {max_length} characters.", field=field)
    return value


def _entities_visible(*, agent: Agent, scope: Scope, subject: str) -> tuple[list[Entity], list[str]]:
    """The entities of that name the scope sees, narrowest first, and the values their names were
    looked up by."""
    # Also its plaintext with encryption on: an entity written before it was on, not hashed yet.
    keys = equality_values(agent_id=agent.pk, text=normalized_name(subject))
    visible = Entity.objects.filter(
        agent=agent,
        normalized_name__in=keys,
        user_id__in=["", scope.user_id],
        project_id__in=["", scope.project_id],
        thread_id__in=["", scope.thread_id],
    )
    return sorted(visible, key=lambda e: (-_narrowness(e), e.created_at)), keys


def _entity_for(*, agent: Agent, scope: Scope, subject: str) -> tuple[Entity, bool]:
    """The entity a subject names: the narrowest one the scope sees with that name, else a new one
    in the scope; and whether the agent's blind keys were read from the register in the call."""
    found, keys = _entities_visible(agent=agent, scope=scope, subject=subject)
    reread = False
    if not found:
        # In a rotation's settle this process may know the retired blind key alone while another
        # made the entity under the new one: read the keys again before making a second.
        reread = True
        if lookup_keys_reread(agent_id=agent.pk):
            found, keys = _entities_visible(agent=agent, scope=scope, subject=subject)
    if found:
        return found[0], reread
    return _entity_make(agent=agent, scope=scope, subject=subject, keys=keys), reread


def _entity_make(*, agent: Agent, scope: Scope, subject: str, keys: list[str]) -> Entity:
    """A new entity of that name in the scope; the one another writer made first, found by `keys`."""
    in_scope = {"agent": agent, "user_id": scope.user_id, "project_id": scope.project_id, "thread_id": scope.thread_id}
    try:
        with transaction.atomic():
            entity = Entity(
                **in_scope,
                name=collapse_spaces(subject),
                # In clear: its save hashes it with encryption on, and keeps it sealed (a rotation
                # with new keys hashes it again).
                normalized_name=normalized_name(subject),
            )
            # An entity naming a registered person (an agent-wide "Inês Valdomiro") is sealed under
            # their key too: their erasure shreds its old copies.
            named = rows_named(agent=agent, rows=[(SubjectMention.Table.ENTITY, entity.pk, entity)])
            if entity.name != collapse_spaces(subject):
                # Naming a person being erased, it is stored saying the placeholder
                # (memoryapp.subjects.erasing): the scope's entity of that name, when there is one.
                keys = equality_values(agent_id=agent.pk, text=normalized_name(entity.name))
                there = Entity.objects.filter(**in_scope, normalized_name__in=keys).first()
                if there is not None:
                    return there
            key_people_set(entity, named.get(entity.pk, ()))
            entity.save(force_insert=True)
            return entity
    except IntegrityError:  # another writer of another attribute created it first
        return Entity.objects.get(**in_scope, normalized_name__in=keys)


def entity_for(*, agent: Agent, scope: Scope, subject: str) -> Entity:
    """The entity a name stands for in a scope (the narrowest visible, else a new one): items' and
    the graph's edges' (memoryapp.graph.services) one way to an entity."""
    return _entity_for(agent=agent, scope=scope, subject=subject)[0]


def evidence_checked(*, agent: Agent, evidence: Sequence[EvidenceInput]) -> list[tuple[Entry | None, str, str]]:
    """(entry, quote, status) of each quote, checked as an item's are (400 naming the quote)."""
    return [(quote.entry, quote.quote, quote.status) for quote in _checked_evidence(agent=agent, evidence=evidence)]


def _narrowness(row: Any) -> int:
    return sum(1 for v in (row.user_id, row.project_id, row.thread_id) if v)


def _line(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DomainError("invalid_value", "Lines are counted from 1.", field=field)
    return value


def _checked_file_range(*, agent: Agent, value: Any, field: str) -> tuple[MemoryFileVersion, int, int, str]:
    """The version a quote's file range names (the agent's, not a deletion, not redacted), its lines
    `start_line`..`end_line` checked against it, and their text."""
    if not isinstance(value, dict) or set(value) - {"version_id", "start_line", "end_line"}:
        raise DomainError("invalid_value", "file_range is {version_id, start_line, end_line}.", field=field)
    version_id = value.get("version_id")
    start = _line(value.get("start_line"), f"{field}.start_line")
    end = _line(value.get("end_line"), f"{field}.end_line")
    if end < start:
        raise DomainError("invalid_value", "end_line must not come before start_line.", field=f"{field}.end_line")
    version = (
        MemoryFileVersion.objects.filter(agent=agent, pk=version_id if isinstance(version_id, str) else "")
        .select_related("place__thread")
        .first()
    )
    if version is None or version.content is None or version.redacted_at is not None:
        raise DomainError(
            "not_found",
            "The file version was not found (or it is a deletion, or redacted).",
            field=f"{field}.version_id",
        )
    text = file_lines(version.content, start, end)
    if text is None:
        lines = version.content.count("\n") + 1
        raise DomainError(
            "invalid_value", f"The version has {lines} line(s): the range does not fit.", field=f"{field}.end_line"
        )
    return version, start, end, text


def _checked_evidence(*, agent: Agent, evidence: Sequence[EvidenceInput]) -> list[CheckedQuote]:
    """Each quote where it points, the entries and versions loaded within the agent (another agent's
    is missing). A quote of an unknown entry is kept as `suggested` (the extractor's quotes may name
    an entry deleted meanwhile); a tool call the entry does not hold, or a file range that is not in
    its version, is a 400 naming the field (004: they are checked)."""
    if len(evidence) > MAX_EVIDENCE:
        raise DomainError("too_many_quotes", f"An item stands on at most {MAX_EVIDENCE} quotes.", field="evidence")
    ids: list[str] = []
    for index, quote in enumerate(evidence):
        if not isinstance(quote, dict):
            raise DomainError("invalid_value", "Each evidence is {entry_id, quote}.", field=f"evidence.{index}")
        _check_text(quote.get("quote"), f"evidence.{index}.quote", max_length=MAX_QUOTE_CHARS)
        entry_id = quote.get("entry_id") or ""
        if not isinstance(entry_id, str):
            raise DomainError("invalid_value", "entry_id must be a string.", field=f"evidence.{index}.entry_id")
        ids.append(entry_id)
    entries = {
        e.id: e
        # With what says whose words each quote holds (Evidence.encryption_owner, Entry.words_person),
        # read here once for all quotes rather than once per quote as they are sealed.
        for e in Entry.objects.filter(agent=agent, id__in=[i for i in ids if i])
        .select_related("thread")
        .only(
            "id",
            "text",
            "redacted_at",
            "role",
            "metadata",
            "sender",
            "words_of",
            "tool_call_id",
            "tool_calls",
            "thread__user_id",
        )
    }
    checked = []
    for index, (entry_id, quote) in enumerate(zip(ids, evidence, strict=True)):
        entry = entries.get(entry_id)
        text = quote["quote"].strip()
        where = f"evidence.{index}"
        if quote.get("file_range") is not None:
            if entry_id or quote.get("tool_call_id"):
                raise DomainError(
                    "invalid_value", "A quote of a file range names no entry or tool call.", field=f"{where}.file_range"
                )
            version, start, end, lines = _checked_file_range(
                agent=agent, value=quote["file_range"], field=f"{where}.file_range"
            )
            status = EvidenceStatus.VERIFIED if squash(text) in squash(lines) else EvidenceStatus.SUGGESTED
            checked.append(CheckedQuote(None, text, status, version=version, line_start=start, line_end=end))
            continue
        call_id = quote.get("tool_call_id") or ""
        if call_id:
            if not isinstance(call_id, str) or len(call_id) > 200:
                raise DomainError("invalid_value", "tool_call_id must be a call's id.", field=f"{where}.tool_call_id")
            said = tool_call_text(entry, call_id) if entry is not None and entry.redacted_at is None else None
            if said is None:
                raise DomainError(
                    "not_found",
                    "The entry does not make or answer this tool call (or it was not found).",
                    field=f"{where}.tool_call_id",
                )
            status = EvidenceStatus.VERIFIED if text and squash(text) in squash(said) else EvidenceStatus.SUGGESTED
            checked.append(CheckedQuote(entry, text, status, tool_call_id=call_id))
            continue
        checked.append(CheckedQuote(entry, text, verify_evidence(text, entry)))  # type: ignore[arg-type]
    return checked


def _quoted_people(checked: list[CheckedQuote]) -> set[str]:
    """The people whose words the quotes of entries hold (`Entry.words_person`)."""
    return {quote.entry.words_person() for quote in checked if quote.entry is not None}


def _quoted_person(checked: list[CheckedQuote]) -> str | None:
    """The one person whose words every quote of an entry holds (`Entry.words_person`); None when
    the quotes hold several people's words, "" when they quote no entry."""
    people = {quote.entry.words_person() for quote in checked if quote.entry is not None}
    if len(people) > 1:
        return None
    return people.pop() if people else ""


def _add_evidence(*, agent: Agent, item: MemoryItem, checked: list[CheckedQuote]) -> None:
    stored = Evidence.objects.filter(item=item).values_list(
        "entry_id", "quote", "tool_call_id", "file_version_id", "line_start", "line_end"
    )
    known: set[tuple[str | None, str, str, str | None, int | None, int | None]] = set(stored)
    rows = []
    for quote in checked:
        key = quote.key()
        if key in known:
            continue
        known.add(key)
        rows.append(
            Evidence(
                agent_id=item.agent_id,
                item=item,
                entry=quote.entry,
                quote=quote.quote,
                status=quote.status,
                tool_call_id=quote.tool_call_id,
                file_version=quote.version,
                line_start=quote.line_start,
                line_end=quote.line_end,
            )
        )
    # A quote naming registered people besides the quoted turn's person is sealed under their keys too.
    named = rows_named(agent=agent, rows=[(SubjectMention.Table.EVIDENCE, n, row) for n, row in enumerate(rows)])
    for n, row in enumerate(rows):
        if str(n) in named:
            key_people_set(row, named[str(n)])
    Evidence.objects.bulk_create(rows)
    if named:
        mentions_record(
            agent=agent,
            rows=[(SubjectMention.Table.EVIDENCE, row.pk, row) for row in rows],
            named={str(row.pk): named[str(n)] for n, row in enumerate(rows) if str(n) in named},
        )


def item_write(
    *,
    agent: Agent,
    kind: str,
    subject: str,
    attribute: str,
    value: str,
    trust: str,
    user_id: str = "",
    project_id: str = "",
    thread_id: str = "",
    evidence: Sequence[EvidenceInput] = (),
    confidence: float | None = None,
    valid_from: datetime | None = None,
    valid_to: datetime | None = None,
    metadata: dict[str, Any] | None = None,
    prompt_version: str = "",
    shadow: bool = False,
    actor: str = "",
    purposes: Sequence[str] | None = None,
) -> MemoryItem:
    """Write one statement about a slot; returns the item it became (new, or the one it merged into).

    See `item_state_write` for the steps.
    """
    return item_state_write(
        agent=agent,
        kind=kind,
        subject=subject,
        attribute=attribute,
        value=value,
        trust=trust,
        scope=Scope(user_id=user_id or "", project_id=project_id or "", thread_id=thread_id or ""),
        evidence=evidence,
        confidence=confidence,
        valid_from=valid_from,
        valid_to=valid_to,
        metadata=metadata,
        prompt_version=prompt_version,
        shadow=shadow,
        actor=actor,
        purposes=purposes,
    )


@transaction.atomic
def item_state_write(
    *,
    agent: Agent,
    kind: str,
    subject: str,
    attribute: str,
    value: str,
    trust: str,
    scope: Scope,
    evidence: Sequence[EvidenceInput] = (),
    confidence: float | None = None,
    valid_from: datetime | None = None,
    valid_to: datetime | None = None,
    metadata: dict[str, Any] | None = None,
    prompt_version: str = "",
    shadow: bool = False,
    actor: str = "",
    value_json: Any = None,
    namespace: str = "",
    expires_at: datetime | None = None,
    use_entity: bool = True,
    purposes: Sequence[str] | None = None,
) -> MemoryItem:
    """The write of `item_write`, with the extra fields facts keep (value_json, namespace, expires_at).

    `purposes`: what the statement was collected for, each of the agent's purposes (a 400 naming
    `purposes[i]` otherwise); None leaves a merged item's as they are and writes a new one with none.

    1. Check the input and every quote against its entry (loaded within the agent).
    2. Lock the slot in its exact scope (advisory lock), so racing writers go one after another.
    3. The newest state of the slot that is still open and not let go is the one a repeat merges into,
       when nothing else was said after it and its value is the same (`same_value`): the better
       source's trust and verified, the higher confidence (an opinion repeated with holding quotes
       gains 0.1), the quotes added, a suggested one activated when it now qualifies.
    4. Otherwise a new state is added, `active` when `activates` says so, else `suggested`; an
       active opinion it contradicts from a less trusted source loses 0.2 of confidence.
    5. The slot's timeline is laid out again (`slot_layout`).
    """
    if kind not in ItemKind.values:
        raise DomainError("invalid_value", f"kind must be one of {', '.join(ItemKind.values)}.", field="kind")
    if trust not in Trust.values:
        raise DomainError("invalid_value", f"trust must be one of {', '.join(Trust.values)}.", field="trust")
    subject = collapse_spaces(_check_text(subject, "subject", max_length=300))
    attribute = collapse_spaces(_check_text(attribute, "attribute", max_length=300))
    value = _check_text(value, "value", max_length=MAX_VALUE_CHARS)
    person_id_check(scope.user_id)
    for name, scope_value in (
        ("project_id", scope.project_id),
        ("thread_id", scope.thread_id),
    ):
        _check_text(scope_value, name, max_length=128, required=False)
    if confidence is None:
        confidence = 1.0  # a statement made outright; extraction passes the model's own figure
    if not isinstance(confidence, (int, float)) or not 0.0 <= float(confidence) <= 1.0:
        raise DomainError("invalid_value", "confidence must be a number from 0 to 1.", field="confidence")
    confidence = float(confidence)
    now = timezone.now()
    start = valid_from or now
    if valid_to is not None and valid_to <= start:
        raise DomainError("invalid_value", "valid_to must be after valid_from.", field="valid_to")
    if metadata is not None and not isinstance(metadata, dict):
        raise DomainError("invalid_value", "metadata must be an object.", field="metadata")
    checked_purposes = None if purposes is None else item_purposes_check(agent=agent, values=list(purposes))
    if scope.user_id:
        # Memory of a person being erased is refused (409): her erasure took the items and facts of
        # her scope at its first step, and one written after it would outlive it, sealed under her
        # key (memoryapp.subjects.erasing, step 5). Her eraser lock held shared to the end.
        senders_erasing_refuse(
            agent_id=agent.pk, senders={scope.user_id: "namespace" if namespace else "user_id"}, what="memory"
        )
    screener = screener_for(agent=agent)
    held: list[str] = []
    if screener is not None:
        subject = screener.text(subject, field="subject")
        attribute = screener.text(attribute, field="attribute")
        value = screener.text(value, field="value")
        value_json = screener.value(value_json, field="value")
        metadata = screener.value(metadata, field="metadata")
        held = screener.take_held()
        # A held statement waits for a reviewer: suggested (out of recall), never merged into one
        # that stands, and marked with what it was held for.
        if held:
            shadow = True
            metadata = {**(metadata or {}), HELD_KEY: held}
        screener.record(actor=actor, thread_id=scope.thread_id, person=scope.user_id)
    checked = _checked_evidence(agent=agent, evidence=evidence)
    verified = bool(checked) and all(quote.status == EvidenceStatus.VERIFIED for quote in checked)

    subject_key = normalized_name(subject)
    slot_lock(agent_id=agent.pk, scope=scope, subject_key=subject_key, attribute=attribute)
    entity, reread = _entity_for(agent=agent, scope=scope, subject=subject) if use_entity else (None, False)
    slot_subject = entity.name if entity is not None else subject
    slot = slot_items(agent=agent, scope=scope, subject=slot_subject, attribute=attribute)
    _slot_hashes_settle(slot=slot, agent=agent, subject=slot_subject)
    newest = _slot_newest(slot)
    if newest is None and not reread and lookup_keys_reread(agent_id=agent.pk):
        # A first state, as this process's keys see the slot: in a rotation's settle they may be the
        # retired ones alone while another process wrote the slot's state under the new ones (the
        # slot's lock keeps that one committed by now). With the keys read again it is found.
        slot = slot_items(agent=agent, scope=scope, subject=slot_subject, attribute=attribute)
        _slot_hashes_settle(slot=slot, agent=agent, subject=slot_subject)
        newest = _slot_newest(slot)
    if (
        newest is not None
        and not held
        and newest.valid_to is None
        and same_value(newest.value, value)
        and (value_json is None or newest.value_json == value_json)
    ):
        return _merge(
            agent=agent,
            item=newest,
            trust=trust,
            verified=verified,
            confidence=confidence,
            checked=checked,
            shadow=shadow,
            expires_at=expires_at,
            actor=actor,
            purposes=checked_purposes,
        )

    extra = dict(metadata or {})
    if valid_to is not None:
        extra[VALID_UNTIL_KEY] = valid_to.isoformat()
    active = activates(trust=trust, verified=verified, confidence=confidence, shadow=shadow)
    # An item drawn only from another person's words (their message in this person's thread) is
    # sealed under their key (MemoryItem.words_of): their erasure purges it and shreds its old copies.
    quoted = _quoted_person(checked)
    scoped = MemoryItem(agent=agent, user_id=scope.user_id, thread_id=scope.thread_id)
    words_of = quoted if quoted and quoted != scoped.scope_person() else ""
    item = MemoryItem(
        words_of=words_of,
        agent=agent,
        user_id=scope.user_id,
        project_id=scope.project_id,
        thread_id=scope.thread_id,
        kind=kind,
        entity=entity,
        subject=slot_subject,
        attribute=attribute,
        value=value,
        value_json=value_json,
        namespace=namespace,
        trust=trust,
        status=ItemStatus.ACTIVE if active else ItemStatus.SUGGESTED,
        confidence=confidence,
        verified=verified,
        valid_from=start,
        valid_to=valid_to,
        recorded_at=now,
        activated_at=now if active else None,
        expires_at=expires_at,
        prompt_version=prompt_version,
        metadata=extra,
        purposes=checked_purposes or [],
    )
    # Sealed under the keys of every person it names and whose words its quotes hold besides its
    # owner (MemoryItem.key_people): the erasure of any of them shreds its old copies.
    named = rows_named(agent=agent, rows=[(SubjectMention.Table.ITEM, item.pk, item)])
    key_people_set(item, {*named.get(item.pk, ()), *_quoted_people(checked)})
    item.save(force_insert=True)
    _add_evidence(agent=agent, item=item, checked=checked)
    # The item (a fact among them) and the entity it is about: whom of the agent's people they name.
    written: list[Written] = [(SubjectMention.Table.ITEM, item.pk, item)]
    if entity is not None:
        written.append((SubjectMention.Table.ENTITY, entity.pk, entity))
    mentions_record(agent=agent, rows=written)
    if kind == ItemKind.OPINION:
        _weaken_contradicted_opinions(item=item, slot=slot)
    _item_changed(
        item=item,
        lay_out=True,
        refresh=True,
        event="item.written",
        action="item.written",
        actor=actor,
        details={"kind": kind, "trust": trust, "verified": verified, "quotes": len(checked)},
    )
    return item


def _slot_newest(slot: QuerySet[MemoryItem]) -> MemoryItem | None:
    """The newest state of the slot still open and not let go: what a repeat merges into."""
    return (
        slot.filter(status__in=[ItemStatus.SUGGESTED, *TIMELINE_STATUSES], expired_at__isnull=True)
        .order_by("-recorded_at", "-id")
        .first()
    )


def _merge(
    *,
    agent: Agent,
    item: MemoryItem,
    trust: str,
    verified: bool,
    confidence: float,
    checked: list[CheckedQuote],
    shadow: bool,
    expires_at: datetime | None,
    actor: str,
    purposes: list[str] | None = None,
) -> MemoryItem:
    best_trust, best_verified = better_source((item.trust, item.verified), (trust, verified))
    if item.kind == ItemKind.OPINION:
        new_confidence = item.confidence + OPINION_REPEAT_GAIN if verified else item.confidence
    else:
        new_confidence = max(item.confidence, confidence)
    new_confidence = min(1.0, new_confidence)
    changed = (
        best_trust != item.trust
        or best_verified != item.verified
        or new_confidence != item.confidence
        or expires_at != item.expires_at
        # The same value stated again for other purposes: held for those from now on.
        or (purposes is not None and purposes != item.purposes)
    )
    item.trust, item.verified, item.confidence = best_trust, best_verified, new_confidence
    if purposes is not None:
        item.purposes = purposes
    if expires_at != item.expires_at:
        item.expires_at = expires_at
    activated = item.status == ItemStatus.SUGGESTED and activates(
        trust=item.trust, verified=item.verified, confidence=item.confidence, shadow=shadow
    )
    if activated:
        item.status = ItemStatus.ACTIVE
        item.activated_at = timezone.now()
        item.metadata = {**item.metadata, "activatedAt": item.activated_at.isoformat()}
    if changed or activated:
        item.save(
            update_fields=[
                "trust",
                "verified",
                "confidence",
                "expires_at",
                "status",
                "activated_at",
                "metadata",
                "purposes",
            ]
        )
    before = Evidence.objects.filter(item=item).count()
    quoted = _quoted_people(checked) - {item.encryption_owner()[1], *(item.key_people or ())}
    if quoted:
        # A quote of someone else joins: the item holds several people's words now, so it is sealed
        # under the key set of its scope's person and each of them (an erasure of one of them trims
        # it, and reseals it under the others' before their key goes).
        people = {*quoted, *(item.key_people or ()), item.words_of}
        item.words_of = ""
        key_people_set(item, people - {""})
        item.save(update_fields=["words_of", "key_people", "value", "value_json"])
    _add_evidence(agent=agent, item=item, checked=checked)
    if activated:
        _item_changed(item=item, lay_out=True, refresh=True, event="item.activated")
    if changed or activated or Evidence.objects.filter(item=item).count() != before:
        _item_changed(
            item=item,
            action="item.merged",
            actor=actor,
            details={"trust": item.trust, "verified": item.verified, "quotes": len(checked)},
        )
    return item


def _weaken_contradicted_opinions(*, item: MemoryItem, slot: Any) -> None:
    """An active opinion that a less trusted source now contradicts loses confidence (004)."""
    rank = TRUST_RANK[Trust(item.trust)]
    for held in slot.filter(status=ItemStatus.ACTIVE, kind=ItemKind.OPINION, expired_at__isnull=True).exclude(
        pk=item.pk
    ):
        if TRUST_RANK[Trust(held.trust)] < rank and not same_value(held.value, item.value):
            held.confidence = max(0.0, round(held.confidence - OPINION_CONTRADICTION_LOSS, 6))
            held.save(update_fields=["confidence"])


def _item_changed(
    *,
    item: MemoryItem,
    lay_out: bool = False,
    refresh: bool = False,
    event: str = "",
    action: str = "",
    actor: str = "",
    outcome: str | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """What follows every change of an item, in its transaction, each part when asked for:

    1. `lay_out`: its slot's timeline laid out again (a state came, went or changed its value),
       then with `refresh` the item read again (the layout may have closed or superseded it);
    2. `event`: the change event of that type (ids only);
    3. `action`: the audit record, ids and outcome only (`outcome` None: the item's status).
    """
    if lay_out:
        slot_layout(
            agent=item.agent,
            scope=Scope(item.user_id, item.project_id, item.thread_id),
            subject=item.subject,
            attribute=item.attribute,
        )
    if refresh:
        item.refresh_from_db()
    if event:
        event_record(agent_id=item.agent_id, type=event, thread_id=item.thread_id, ids=[item.pk])
    if action:
        audit_append(
            action=action,
            actor=actor,
            agent_id=item.agent_id,
            thread_id=item.thread_id,
            subject=item.pk,
            outcome=item.status if outcome is None else outcome,
            details=details,
            person=item.user_id,
        )


def slot_layout(*, agent: Agent, scope: Scope, subject: str, attribute: str) -> int:
    """Lay the slot's timeline out again; returns how many states changed.

    1. Take the active and superseded states of the slot in exactly this scope (let-go ones too:
       a state let go keeps its place, so the one before it does not come back).
    2. Order them by valid_from (then recorded_at, id): the order the world saw them in.
    3. Each one is closed where the next one starts (superseded, valid_to = next.valid_from, or its
       own given end when that comes first); the last one is left open (active, valid_to = its
       given end or none). A state that starts later thus leaves the current one holding until then.
    Callers hold the slot lock, so racing writers and late statements converge on one timeline.
    """
    states = list(
        slot_items(agent=agent, scope=scope, subject=subject, attribute=attribute)
        .filter(status__in=TIMELINE_STATUSES)
        .order_by("valid_from", "recorded_at", "id")
    )
    changed = 0
    for index, state in enumerate(states):
        following = states[index + 1] if index + 1 < len(states) else None
        own_end = _given_end(state)
        if following is not None:
            end = following.valid_from if own_end is None else min(own_end, following.valid_from)
            status = ItemStatus.SUPERSEDED
        else:
            end = own_end
            status = ItemStatus.ACTIVE
        if state.valid_to != end or state.status != status:
            MemoryItem.objects.filter(pk=state.pk).update(valid_to=end, status=status)
            changed += 1
    return changed


def slots_lock(*, items: Iterable[MemoryItem]) -> None:
    """Lock the slots of `items` (`slot_lock`), in one order, so that two cascades taking several
    slots never wait for each other crosswise. Take them before the items' rows.

    One statement for them all (an erasure purges thousands of items of others): the keys are taken
    in the order given (`WITH ORDINALITY`, sorted; PostgreSQL evaluates a volatile function of the
    select list after the ORDER BY)."""
    slots = sorted(
        {(i.agent_id, i.user_id, i.project_id, i.thread_id, normalized_name(i.subject), i.attribute) for i in items}
    )
    if not slots:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_advisory_xact_lock(k) FROM unnest(%s::bigint[]) WITH ORDINALITY AS t(k, n) ORDER BY n",
            [[locks.item_slot(str(agent_id), *rest) for agent_id, *rest in slots]],
        )


def slots_lay_out(*, agent: Agent, items: Iterable[MemoryItem]) -> int:
    """Lay out again, once each, the slots of the agent's `items` that stood in a timeline (their
    status before they left it: active or superseded), after they left it (purged by a delete
    cascade, marked stale by a rewind): a state one of them had closed holds again. Callers hold
    the slot locks (`slots_lock`); returns how many states changed."""
    slots = sorted(
        {(i.user_id, i.project_id, i.thread_id, i.subject, i.attribute) for i in items if i.status in TIMELINE_STATUSES}
    )
    return sum(
        slot_layout(agent=agent, scope=Scope(user_id, project_id, thread_id), subject=subject, attribute=attribute)
        for user_id, project_id, thread_id, subject, attribute in slots
    )


def _given_end(item: MemoryItem) -> datetime | None:
    raw = (item.metadata or {}).get(VALID_UNTIL_KEY)
    if not raw:
        return None
    try:
        return datetime.fromisoformat(str(raw))
    except ValueError:
        return None


def note_retrieved(*, item_ids: Sequence[str], at: datetime | None = None) -> int:
    """Count that these items went to a model, in one UPDATE; returns how many rows it counted."""
    ids = [i for i in dict.fromkeys(item_ids) if i]
    if not ids:
        return 0
    return MemoryItem.objects.filter(pk__in=ids).update(
        times_retrieved=F("times_retrieved") + 1, last_retrieved_at=at or timezone.now()
    )


def _lock_item(item: MemoryItem) -> MemoryItem:
    slot_lock(
        agent_id=item.agent_id,
        scope=Scope(item.user_id, item.project_id, item.thread_id),
        subject_key=normalized_name(item.subject),
        attribute=item.attribute,
    )
    return MemoryItem.objects.select_for_update().get(pk=item.pk)


def new_decision_id() -> str:
    """The id one reviewer's decision gets: every item it covers carries it, and an undo takes them all back."""
    return new_id("dec")


def _review_step(
    *,
    item: MemoryItem,
    decision: str,
    action: str,
    actor: str,
    at: datetime,
    status_before: str,
    value_before: str | None = None,
    value_after: str | None = None,
    value_json_before: Any = None,
    reason: str = "",
) -> ItemReview:
    return ItemReview.objects.create(
        agent_id=item.agent_id,
        item=item,
        decision=decision,
        action=action,
        actor=actor,
        at=at,
        status_before=status_before,
        status_after=item.status,
        value_before=value_before,
        value_after=value_after,
        value_json_before=value_json_before,
        reason=reason,
    )


@transaction.atomic
def item_approve(*, item: MemoryItem, actor: str, value: str | None = None, decision: str = "") -> MemoryItem:
    """A reviewer makes a suggested item active (with its value edited first, when given) and audits it.

    The value before an edit is kept in the item's review history (`ItemReview`), and the time of the
    decision in `activated_at`: from then on the item counts as known.
    """
    locked = _lock_item(item)
    if locked.status != ItemStatus.SUGGESTED:
        raise Conflict("not_suggested", f"Only a suggested item can be approved; this one is {locked.status}.")
    before, before_json = locked.value, locked.value_json
    edited = False
    if value is not None:
        new_value = _check_text(value, "value", max_length=MAX_VALUE_CHARS)
        if not same_value(new_value, locked.value):
            locked.value = new_value
            locked.value_json = None
            edited = True
    now = timezone.now()
    locked.status = ItemStatus.ACTIVE
    locked.activated_at = now
    locked.metadata = {
        **locked.metadata,
        "activatedAt": now.isoformat(),
        "reviewed_by": actor,
        **({"edited_by_reviewer": True} if edited else {}),
    }
    named: dict[str, set[str]] = {}
    if edited:  # a reviewer's words: whom of the agent's people the item names now seals it too
        named = rows_named(agent_id=locked.agent_id, rows=[(SubjectMention.Table.ITEM, locked.pk, locked)])
        key_people_set(locked, {*named.get(locked.pk, ()), *(locked.key_people or ())})
    locked.save(
        update_fields=["value", "value_json", "keyword_hashes", "status", "activated_at", "metadata", "key_people"]
    )
    if edited:
        mentions_record(
            agent_id=locked.agent_id,
            rows=[(SubjectMention.Table.ITEM, locked.pk, locked)],
            replace=True,
            named=named,
        )
    _review_step(
        item=locked,
        decision=decision or new_decision_id(),
        action=ItemReview.Action.APPROVED,
        actor=actor,
        at=now,
        status_before=ItemStatus.SUGGESTED,
        value_before=before if edited else None,
        value_after=locked.value if edited else None,
        value_json_before=before_json if edited else None,
    )
    _item_changed(
        item=locked,
        lay_out=True,
        refresh=True,
        event="item.activated",
        action="item.reviewed",
        actor=actor,
        outcome="approved_edited" if edited else "approved",
    )
    return locked


@transaction.atomic
def item_reject(*, item: MemoryItem, actor: str, reason: str = "", decision: str = "") -> MemoryItem:
    """A reviewer refuses a suggested item: it stays, rejected, out of every context; audited (without the reason's text)."""
    locked = _lock_item(item)
    if locked.status != ItemStatus.SUGGESTED:
        raise Conflict("not_suggested", f"Only a suggested item can be rejected; this one is {locked.status}.")
    reason = reason.strip()[:1000] if isinstance(reason, str) else ""
    locked.status = ItemStatus.REJECTED
    locked.metadata = {**locked.metadata, "rejected_because": reason, "reviewed_by": actor}
    locked.save(update_fields=["status", "metadata"])
    _review_step(
        item=locked,
        decision=decision or new_decision_id(),
        action=ItemReview.Action.REJECTED,
        actor=actor,
        at=timezone.now(),
        status_before=ItemStatus.SUGGESTED,
        reason=reason,
    )
    _item_changed(
        item=locked,
        event="item.rejected",
        action="item.reviewed",
        actor=actor,
        outcome="rejected",
        details={"with_reason": bool(reason)},
    )
    return locked


@transaction.atomic
def item_forget(*, item: MemoryItem, actor: str) -> MemoryItem:
    """Let a state go: it leaves memory now (expired_at) and keeps its place in the slot's history.

    Letting go twice changes nothing the second time.
    """
    locked = _lock_item(item)
    if locked.expired_at is not None:
        return locked
    locked.expired_at = timezone.now()
    locked.save(update_fields=["expired_at"])
    _review_step(
        item=locked,
        decision=new_decision_id(),
        action=ItemReview.Action.FORGOTTEN,
        actor=actor,
        at=locked.expired_at,
        status_before=locked.status,
    )
    _item_changed(item=locked, event="item.forgotten", action="item.forgotten", actor=actor, outcome="forgotten")
    return locked


def items_bulk_review(
    *, item_ids: Sequence[str], actor: str, approve: bool, reason: str = "", decision: str = ""
) -> dict[str, int]:
    """Approve or reject many suggested items, each in its own transaction, as one decision (one undo
    takes them all back); returns counts by outcome."""
    decision = decision or new_decision_id()
    counts = {"done": 0, "skipped": 0}
    for item in MemoryItem.objects.filter(pk__in=list(item_ids)).order_by("recorded_at"):
        try:
            if approve:
                item_approve(item=item, actor=actor, decision=decision)
            else:
                item_reject(item=item, actor=actor, reason=reason, decision=decision)
            counts["done"] += 1
        except Conflict:
            counts["skipped"] += 1
    return counts


# --- a slot's suggestions decided together -------------------------------------------------------

_NOT_WORD = re.compile(r"[^\w\s]+")
_DIGITS = re.compile(r"\d+")
# Two values this alike (difflib's ratio over their normalised text) are one value written twice.
NEAR_DUPLICATE_RATIO = 0.9


def value_key(text: str) -> str:
    """A value as near-duplicates compare it: Unicode-normalised (NFKC), case folded, punctuation
    dropped, spacing collapsed. "Peanuts (severe)." and "peanuts severe" have one key."""
    folded = unicodedata.normalize("NFKC", text or "").casefold()
    return collapse_spaces(_NOT_WORD.sub(" ", folded))


def near_duplicate(a: str, b: str) -> bool:
    """Whether two values of one slot say the same thing, in this order of tests:

    1. the same key (`value_key`): case, punctuation and spacing aside;
    2. otherwise never when their numbers differ ("10 km" and "100 km" are two values);
    3. the same words in another order ("short answers, bullets" / "bullets, short answers");
    4. a typo apart: difflib's similarity ratio of the keys at least NEAR_DUPLICATE_RATIO (0.9),
       e.g. "vegetarian" / "vegeterian".
    """
    ka, kb = value_key(a), value_key(b)
    if ka == kb:
        return True
    if _DIGITS.findall(ka) != _DIGITS.findall(kb):
        return False
    if sorted(ka.split()) == sorted(kb.split()):
        return True
    return difflib.SequenceMatcher(None, ka, kb, autojunk=False).ratio() >= NEAR_DUPLICATE_RATIO


def _source_rank(item: MemoryItem) -> tuple[int, int, float, datetime, str]:
    """Which of several near-duplicates speaks for them: the most trusted, verified, confident, oldest."""
    return (TRUST_RANK[Trust(item.trust)], 0 if item.verified else 1, -item.confidence, item.recorded_at, item.pk)


def slot_clusters(items: Sequence[MemoryItem]) -> list[list[MemoryItem]]:
    """The suggestions of one slot gathered into values: near-duplicates (`near_duplicate`, linked
    transitively) form one cluster, its best source first; clusters in the order of their oldest item.
    More than one cluster is a conflict: the slot can hold one value at a time."""
    parent = list(range(len(items)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in range(len(items)):
        for j in range(i + 1, len(items)):
            if root(i) != root(j) and near_duplicate(items[i].value, items[j].value):
                parent[root(j)] = root(i)
    clusters: dict[int, list[MemoryItem]] = {}
    for index, item in enumerate(items):
        clusters.setdefault(root(index), []).append(item)
    ordered = sorted(clusters.values(), key=lambda c: min((i.recorded_at, i.pk) for i in c))
    return [sorted(cluster, key=_source_rank) for cluster in ordered]


def _slot_of(item: MemoryItem) -> tuple[int, str, str, str, str, str]:
    return (item.agent_id, item.user_id, item.project_id, item.thread_id, item.subject, item.attribute)


@dataclass
class SlotDecision:
    decision: str
    approved: MemoryItem
    duplicates: list[str] = field(default_factory=list)  # rejected as the same value said again
    conflicting: list[str] = field(default_factory=list)  # rejected: another value was chosen
    skipped: list[str] = field(default_factory=list)  # decided already by someone else


@transaction.atomic
def items_slot_decide(
    *, keep: MemoryItem, others: Sequence[MemoryItem], actor: str, value: str | None = None, decision: str = ""
) -> SlotDecision:
    """One decision over the suggestions of one slot: approve `keep` (its value edited when given),
    reject the others in the same transaction: its near-duplicates as duplicates of it, the other
    values as not chosen. The reasons name the kept item; one undo takes the whole decision back.
    """
    others = [o for o in others if o.pk != keep.pk]
    if any(_slot_of(o) != _slot_of(keep) for o in others):
        raise DomainError("invalid_value", "Only suggestions of one slot are decided together.", field="items")
    decision = decision or new_decision_id()
    same_cluster = next(c for c in slot_clusters([keep, *others]) if any(i.pk == keep.pk for i in c))
    duplicate_ids = {i.pk for i in same_cluster if i.pk != keep.pk}
    approved = item_approve(item=keep, actor=actor, value=value, decision=decision)
    outcome = SlotDecision(decision=decision, approved=approved)
    for other in sorted(others, key=lambda o: o.pk):  # one lock order for every decider of the slot
        duplicate = other.pk in duplicate_ids
        reason = f"duplicate of {keep.pk}" if duplicate else f"another value chosen ({keep.pk})"
        try:
            item_reject(item=other, actor=actor, reason=reason, decision=decision)
        except Conflict:
            outcome.skipped.append(other.pk)
            continue
        (outcome.duplicates if duplicate else outcome.conflicting).append(other.pk)
    return outcome


# --- undo ------------------------------------------------------------------------------------------


@transaction.atomic
def items_review_undo(*, decision: str, actor: str) -> list[MemoryItem]:
    """Take a reviewer's own decision back: a new step of each item's history, audited.

    1. The approvals and rejections of the decision not undone yet, each item locked (id order).
    2. Only the reviewer who decided may undo it, and only while it is each item's last step
       (nothing decided, forgotten or undone about the item since).
    3. Each item is suggested again: an approved one leaves its slot's timeline (the slot is laid
       out again, so the value it replaced holds again) with its value from before an edit; a
       rejected one loses its reason.
    4. The step undone keeps its time and gets `undone_at` (an approval undone was active between
       the two: "what did the agent know" still says so); an `undone` step is added; audit
       `item.reviewed` with outcome `undone`.
    """
    if not isinstance(decision, str) or not decision:
        raise DomainError("invalid_value", "Which decision is to be undone?", field="decision")
    steps = list(
        ItemReview.objects.filter(
            decision=decision,
            action__in=[ItemReview.Action.APPROVED, ItemReview.Action.REJECTED],
            undone_at__isnull=True,
        ).order_by("item_id")
    )
    if not steps:
        raise Conflict("nothing_to_undo", "That decision was undone already, or never made.")
    if any(step.actor != actor for step in steps):
        raise DomainError("forbidden", "Only the reviewer who made a decision can undo it.", status=403)
    now = timezone.now()
    restored: list[MemoryItem] = []
    for step in steps:
        locked = _lock_item(MemoryItem.objects.get(pk=step.item_id))
        last = ItemReview.objects.filter(item_id=locked.pk).order_by("-at", "-id").first()
        if last is None or last.pk != step.pk or locked.expired_at is not None:
            raise Conflict("decided_since", f"Item {locked.pk} changed after that decision; it cannot be undone.")
        approved = step.action == ItemReview.Action.APPROVED
        if locked.status not in (TIMELINE_STATUSES if approved else (ItemStatus.REJECTED,)):
            raise Conflict("decided_since", f"Item {locked.pk} is {locked.status} now; it cannot be undone.")
        status_before, value_now = locked.status, locked.value
        locked.status = ItemStatus.SUGGESTED
        edited_back = approved and step.value_before is not None
        if edited_back:
            locked.value, locked.value_json = step.value_before or "", step.value_json_before
        if approved:
            locked.activated_at = None
        drop = ("activatedAt", "reviewed_by", "edited_by_reviewer", "rejected_because")
        locked.metadata = {k: v for k, v in (locked.metadata or {}).items() if k not in drop}
        locked.save(update_fields=["status", "value", "value_json", "keyword_hashes", "activated_at", "metadata"])
        ItemReview.objects.filter(pk=step.pk).update(undone_at=now)
        _review_step(
            item=locked,
            decision=decision,
            action=ItemReview.Action.UNDONE,
            actor=actor,
            at=now,
            status_before=status_before,
            value_before=value_now if edited_back else None,
            value_after=locked.value if edited_back else None,
        )
        _item_changed(
            item=locked,
            lay_out=approved,
            action="item.reviewed",
            actor=actor,
            outcome="undone",
            details={"undid": step.action},
        )
        restored.append(locked)
    return restored


# --- stale marks (consolidation) -----------------------------------------------------------------

# Who set a stale mark (metadata.stale_because.by): a dedupe pass; only those a reviewer may undo.
STALE_BY_DEDUPE = "dedupe"


@dataclass(frozen=True)
class StaleMark:
    """One item to mark stale and why: `because` goes into its metadata.stale_because."""

    item_id: str
    because: dict[str, Any]


@transaction.atomic
def items_mark_stale(
    *,
    marks: Sequence[StaleMark],
    actor: str,
    only_from: Sequence[str] = (ItemStatus.ACTIVE,),
    lay_out: bool = False,
) -> list[str]:
    """Mark items stale (never delete them), each with its reason; returns the ids it marked (004 markStale).

    1. With `lay_out`, lock the items' slots first (`slots_lock`). Lock the rows; an item whose
       status is no longer one of `only_from` is left as it is (a reviewer or another pass decided
       first).
    2. Each marked item keeps why in metadata.stale_because (with the time), and leaves every
       context and recall: stale is not a status of the slot's timeline.
    3. With `lay_out` (a rewind: the item's turns are abandoned), the slots of the marked items are
       laid out again as the delete cascade lays out a purged item's (`slots_lay_out`), so the state
       a marked one had replaced holds again. Without it (a dedupe pass: the kept duplicate says the
       same), a state the marked one closed does not come back.
    4. One audit record of the ids marked (and of the kept duplicates, when the marks name one).
    """
    wanted = {mark.item_id: mark for mark in marks}
    if not wanted:
        return []
    scope_fields = ("id", "agent_id", "status", "user_id", "project_id", "thread_id", "subject", "attribute")
    if lay_out:
        slots_lock(items=MemoryItem.objects.filter(pk__in=list(wanted)).only(*scope_fields))
    marked: list[str] = []
    now = timezone.now().isoformat()
    agent_ids: set[int] = set()
    marked_by_agent: dict[int, list[MemoryItem]] = {}
    rows = MemoryItem.objects.select_for_update().filter(pk__in=list(wanted), status__in=list(only_from))
    for item in rows.only(*scope_fields, "metadata").order_by("pk"):
        # As it stood before the mark: what `slots_lay_out` reads.
        before = MemoryItem(
            pk=item.pk,
            agent_id=item.agent_id,
            status=item.status,
            user_id=item.user_id,
            project_id=item.project_id,
            thread_id=item.thread_id,
            subject=item.subject,
            attribute=item.attribute,
        )
        because = {**wanted[item.pk].because, "at": now}
        item.metadata = {**(item.metadata or {}), STALE_BECAUSE_KEY: because}
        item.status = ItemStatus.STALE
        item.save(update_fields=["status", "metadata"])
        marked.append(item.pk)
        agent_ids.add(item.agent_id)
        marked_by_agent.setdefault(item.agent_id, []).append(before)
    if lay_out and marked_by_agent:
        agents = Agent.objects.in_bulk(list(marked_by_agent))
        for agent_id, items in sorted(marked_by_agent.items()):
            slots_lay_out(agent=agents[agent_id], items=items)
    for agent_id, items in sorted(marked_by_agent.items()):
        event_record(agent_id=agent_id, type="item.stale", ids=[i.pk for i in items])
    if marked:
        # Only the marks that kept a duplicate name one (a rewind's keep none).
        kept = sorted({str(kept) for i in marked if (kept := wanted[i].because.get("kept"))})
        audit_append(
            action="items.marked_stale",
            actor=actor,
            agent_id=next(iter(agent_ids)) if len(agent_ids) == 1 else None,
            subject=f"{len(marked)} item(s)",
            outcome="stale",
            details={"item_ids": marked, "kept_ids": kept},
        )
    return marked


@transaction.atomic
def item_stale_undo(*, item: MemoryItem, actor: str) -> MemoryItem:
    """A reviewer takes back the stale mark a dedupe pass set: the item is active again, its slot laid
    out again, and no later dedupe pass marks it stale (metadata.stale_undone)."""
    locked = _lock_item(item)
    because = (locked.metadata or {}).get(STALE_BECAUSE_KEY) or {}
    if locked.status != ItemStatus.STALE or because.get("by") != STALE_BY_DEDUPE:
        raise Conflict("not_stale", "Only an item a dedupe pass marked stale can be taken back; this one is not.")
    metadata = {k: v for k, v in (locked.metadata or {}).items() if k != STALE_BECAUSE_KEY}
    metadata["stale_undone"] = {"by": actor, "at": timezone.now().isoformat(), "was": because}
    locked.metadata = metadata
    locked.status = ItemStatus.ACTIVE
    locked.save(update_fields=["status", "metadata"])
    _item_changed(
        item=locked,
        lay_out=True,
        refresh=True,
        event="item.activated",
        action="item.stale_undone",
        actor=actor,
        outcome=ItemStatus.ACTIVE,
        details={"kept_id": str(because.get("kept", ""))},
    )
    return locked


# --- what stands on a source that goes (004 "Forgetting, Redacting and Rewinding") ------------------


@dataclass
class QuotesForgotten:
    evidence_removed: int = 0
    purged_item_ids: list[str] = field(default_factory=list)
    items_trimmed: int = 0


def quotes_forget(*, agent: Agent, quotes: QuerySet[Evidence]) -> QuotesForgotten:
    """Take the quotes of a source that goes (entries deleted or redacted, memory file versions
    redacted or deleted), as a quote is content: call inside the forgetting transaction.

    1. The items quoting it; their slots locked (a writer must not merge into a purged item).
    2. The quotes deleted. Items left with no quote are purged and their slots laid out again.
    3. The others are trimmed: each quote they keep is checked again where it points, and an item
       stays verified only while every one holds (`items_verify_again`).
    """
    outcome = QuotesForgotten()
    quotes = quotes.filter(agent=agent)
    touched_ids = set(quotes.values_list("item_id", flat=True))
    if not touched_ids:
        return outcome
    touched = list(
        MemoryItem.objects.filter(agent=agent, pk__in=list(touched_ids)).only(
            "id",
            "agent_id",
            "user_id",
            "project_id",
            "thread_id",
            "subject",
            "attribute",
            "entity_id",
            "status",
            "verified",
        )
    )
    slots_lock(items=touched)
    outcome.evidence_removed, _ = quotes.delete()
    still_quoted = set(
        Evidence.objects.filter(agent=agent, item_id__in=list(touched_ids)).values_list("item_id", flat=True)
    )
    purged = [i for i in touched if i.pk not in still_quoted]
    trimmed = [i for i in touched if i.pk in still_quoted]
    if purged:
        MemoryItem.objects.filter(agent=agent, pk__in=[i.pk for i in purged]).delete()
        outcome.purged_item_ids = sorted(i.pk for i in purged)
        slots_lay_out(agent=agent, items=purged)
        # Their entities stay: an edge of the graph may still be about one (the entry cascade,
        # which sits above the graph, deletes those nothing is about any more).
    if trimmed:
        outcome.items_trimmed = len(trimmed)
        items_verify_again(agent=agent, items=trimmed)
    return outcome


def items_verify_again(*, agent: Agent, items: list[MemoryItem]) -> None:
    """An item is verified only when every quote it has left still holds where it points."""
    remaining = Evidence.objects.filter(agent=agent, item_id__in=[i.pk for i in items]).select_related(
        "entry", "file_version"
    )
    holds: dict[str, bool] = {}
    for evidence in remaining:
        status = evidence_status(evidence)
        if status != evidence.status:
            Evidence.objects.filter(pk=evidence.pk).update(status=status)
        holds[evidence.item_id] = holds.get(evidence.item_id, True) and status == EvidenceStatus.VERIFIED
    for item in items:
        verified = holds.get(item.pk, False)
        if verified != item.verified:
            MemoryItem.objects.filter(agent=agent, pk=item.pk).update(verified=verified)


def versions_quotes_forget(*, version_ids: Sequence[str]) -> int:
    """Take the quotes of these memory file versions (redacted, or about to be deleted) as
    `quotes_forget` does, agent by agent; the number of items purged."""
    if not version_ids:
        return 0
    quoted = Evidence.objects.filter(file_version_id__in=list(version_ids))
    purged = 0
    for agent in Agent.objects.filter(pk__in=quoted.values("agent_id")).order_by("pk"):
        purged += len(quotes_forget(agent=agent, quotes=quoted).purged_item_ids)
    return purged

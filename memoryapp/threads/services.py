"""Writes of threads and entries: the conversation store as a tree (004 "Threads as Trees").

Concurrency: every write that hands out a `seq` or moves the leaf first locks the thread row
(`SELECT ... FOR UPDATE`). Writers of one thread queue on that lock, so seq comes from
`thread.next_seq` strictly increasing and gap-free, and the leaf always ends on an entry one
of them wrote. Writers of different threads never wait for each other. A plain single append
takes the same lock inside the one statement that writes it (`_append_one_fast`).
"""

from __future__ import annotations

import json
import operator
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from datetime import datetime
from json.encoder import encode_basestring_ascii
from typing import Any

from django.db import IntegrityError, connection, models, transaction
from django.db.models.base import ModelState
from django.utils import timezone
from psycopg.types.json import Jsonb

from governance.audit.chain import (
    AuditEntry,
    audit_append,
    audit_append_many,
    audit_folded,
    audit_stale_end_refused,
)
from governance.audit.pseudonyms import pseudonym_names
from governance.crypto.fields import BatchSealer
from governance.crypto.keyring import encryption_enabled
from governance.crypto.rotation import rows_reseal, sealed_models
from memoryapp.errors import DomainError, NotFound
from memoryapp.events.services import event_insert_one, event_inserted, event_record
from memoryapp.ids import entry_id_new, person_id_check
from memoryapp.models import Agent, Entry, SubjectMention, Thread
from memoryapp.models.choices import HISTORY_TYPES, EntryType
from memoryapp.models.people import FORK_OF_KEY, MEMORY_USERS_KEY, MESSAGE_USER_KEY
from memoryapp.precompiled import ReturnedRows
from memoryapp.screening.recognizers import Memo
from memoryapp.screening.screen import screener_for
from memoryapp.subjects.detect import (
    key_people_set,
    mentions_record,
    rows_name_anyone,
    rows_named,
    thread_key_people_set,
)
from memoryapp.subjects.erasing import participants_erasing_refuse, senders_erasing_refuse
from memoryapp.threads.columns import (
    ENTRY_FORK_COPIED,
    ENTRY_INSERT_COLUMNS,
    ENTRY_JSON_COLUMNS,
    ENTRY_SEALED_FIELDS,
    ENTRY_TABLE,
)
from memoryapp.threads.hashing import content_hash, content_hash_around_parent, hashed_turn
from memoryapp.threads.hooks import after_entries_added
from memoryapp.threads.off_ranges import OFF_RANGES_KEY, off_ranges_of_copies
from memoryapp.threads.screened import entries_screened, thread_screener
from memoryapp.threads.selectors import entry_on_branch, path_entries, thread_for_agent, tool_call_name_on_branch
from memoryapp.threads.validation import (
    MAX_BATCH_ENTRIES,
    entry_from_spec,
    metadata_merged,
    thread_id_or_new,
    thread_metadata_check,
)
from memoryapp.tokens import count_message_tokens

Table = SubjectMention.Table

# --- threads -------------------------------------------------------------------------------

# Where a thread write names the people taking part in it, for a refusal (memoryapp.subjects.erasing).
PARTICIPANTS_FIELD = f"metadata.{MEMORY_USERS_KEY}"


def thread_lock(thread: Thread) -> Thread:
    """The thread's row, locked until the transaction ends; NotFound when it was deleted meanwhile."""
    locked = Thread.objects.select_for_update().filter(pk=thread.pk).first()
    if locked is None:
        raise NotFound("Thread")
    return locked


def thread_sync(target: Thread, source: Thread) -> None:
    """Let the caller's thread object see what the write changed."""
    for name in (
        "active_leaf_id",
        "next_seq",
        "updated_at",
        "metadata",
        "user_id",
        "branch_epoch",
        "history_tokens",
        "compaction",
    ):
        setattr(target, name, getattr(source, name))


@transaction.atomic
def thread_create(
    *,
    agent: Agent,
    external_id: str | None = None,
    user_id: str = "",
    metadata: dict[str, Any] | None = None,
    actor: str = "",
) -> Thread:
    """Create a thread, or update the one of that id (an idempotent upsert, safe on every run).

    An existing thread keeps its entries and `created_at`; the given metadata keys are merged
    into its metadata as PATCH merges them (a null removes the key; the result is size-checked)
    and a given `user_id` replaces the old one (audited as `thread_update` audits it).
    """
    external_id = thread_id_or_new(external_id, field="id")
    user_id = person_id_check("" if user_id is None else user_id)
    metadata = thread_metadata_check({} if metadata is None else metadata)
    screener = screener_for(agent=agent)
    if screener is not None:
        metadata = screener.value(metadata, field="metadata", holdable=False)
        screener.record(actor=actor, thread_id=external_id, subject=external_id, person=user_id)
    existing = Thread.objects.select_for_update().filter(agent=agent, external_id=external_id).first()
    if user_id and (existing is None or existing.user_id != user_id):
        # A thread made about (or given to) a person being erased is refused: her erasure's step
        # for her threads may be past (memoryapp.subjects.erasing, step 5).
        senders_erasing_refuse(agent_id=agent.pk, senders={user_id: "user_id"}, what="thread")
    # Nor may it list her as taking part (her erasure took her out of every list at one step).
    participants_erasing_refuse(
        agent_id=agent.pk, before=existing.metadata if existing else {}, after=metadata, field=PARTICIPANTS_FIELD
    )
    if existing is None:
        try:
            with transaction.atomic():
                created = Thread(
                    agent=agent,
                    external_id=external_id,
                    user_id=user_id,
                    metadata=metadata_merged({}, metadata),
                    history_tokens=0,
                )
                # Metadata naming registered people besides the thread's: sealed under their keys too.
                thread_key_people_set(created)
                created.save(force_insert=True)
            mentions_record(agent=agent, rows=[(Table.THREAD, created.pk, created)])
            return created
        except IntegrityError:
            # Another request created it between our read and our insert: update that one.
            existing = Thread.objects.select_for_update().get(agent=agent, external_id=external_id)
    existing.metadata = metadata_merged(existing.metadata, metadata)
    changed = bool(user_id) and user_id != existing.user_id
    if changed:
        _audit_user_change(existing, old=existing.user_id, new=user_id, actor=actor)
        existing.user_id = user_id
    thread_key_people_set(existing)
    existing.save(update_fields=["metadata", "user_id", "updated_at"])
    if metadata:
        mentions_record(agent=agent, rows=[(Table.THREAD, existing.pk, existing)], replace=True)
    if changed:
        _person_rows_reseal(existing)
    return existing


def _person_rows_reseal(thread: Thread) -> None:
    """The thread's person changed (its row saved, in this transaction): with encryption on, the
    rows of the thread sealed under the old person's key are sealed again under the new one's, in
    this transaction. Otherwise erasing the old person would destroy the key of rows that are now
    the new person's (unreadable), and erasing the new one would not shred them.

    Gone through: every model with sealed fields and a `thread` (entries); the rows scoped to this
    thread only (a scope's `thread_id` and no `user_id`: items, entities, files, pass records, which
    are the thread's person's); and the rows whose owner is read through a foreign key to such a row
    or to the thread's entries (`ENCRYPTION_OWNER_VIA`: an item's review steps and quotes, the quotes
    of the thread's entries). Rows whose owner is not the thread's person are already under their
    owner's key and stay as they are."""
    if not encryption_enabled():
        return
    scope = {"agent_id": thread.agent_id, "thread_id": thread.external_id, "user_id": ""}
    # The thread's own metadata (saved already when the change came with it; a no-op then).
    rows_reseal(Thread.objects.filter(pk=thread.pk))
    for model, _, _ in sealed_models():
        fields = {f.name: f for f in model._meta.concrete_fields}
        thread_field = fields.get("thread")
        if thread_field is not None and thread_field.related_model is Thread:
            rows_reseal(model._default_manager.filter(thread_id=thread.pk))
        elif _thread_scoped(model):
            rows_reseal(model._default_manager.filter(**scope))
        # Only the foreign keys the row's owner is read through (an entry's parent, a file version's
        # place, an item's entity lead to rows whose key does not follow them: read for nothing).
        for name in getattr(model, "ENCRYPTION_OWNER_VIA", ()):
            related = fields[name].related_model
            if isinstance(related, type) and _thread_scoped(related):
                rows_reseal(model._default_manager.filter(**{f"{name}__{k}": v for k, v in scope.items()}))
            elif related is Entry:
                # Quotes of the thread's entries are its person's words (Evidence.encryption_owner).
                rows_reseal(model._default_manager.filter(**{f"{name}__thread_id": thread.pk}))


def _thread_scoped(model: type[models.Model]) -> bool:
    """Whether the model's rows are scoped like memory (memoryapp.models.items.Scoped): an agent, a
    person, a thread by its external id."""
    names = {f.name for f in model._meta.concrete_fields}
    return {"agent", "user_id", "thread_id"} <= names and "thread" not in names


def _audit_user_change(thread: Thread, *, old: str, new: str, actor: str) -> None:
    """Whose thread it is decides what an erasure or an export of a person takes: a change of it is
    audited (the two person ids, which are identifiers, never the metadata)."""
    audit_append(
        action="thread.user_change",
        actor=actor,
        agent_id=thread.agent_id,
        thread_id=thread.external_id,
        subject=thread.external_id,
        outcome="changed",
        # Each person's id as their own pseudonym: either one's erasure unlinks theirs.
        details={
            "from_user_id": pseudonym_names(agent_id=thread.agent_id, user_id=old).get(old, ""),
            "to_user_id": new,
        },
        person=new,
    )


@transaction.atomic
def thread_update(
    *,
    thread: Thread,
    metadata: dict[str, Any] | None = None,
    user_id: str | None = None,
    replace_metadata: bool = False,
    actor: str = "",
) -> Thread:
    """Update a thread's metadata atomically (merged key by key; a null value removes the key) and
    its person (`user_id`: a change is audited as `thread.user_change`, with both ids)."""
    locked = thread_lock(thread)
    if metadata is not None:
        metadata = thread_metadata_check(metadata)
        screener = thread_screener(locked)
        if screener is not None:
            metadata = screener.value(metadata, field="metadata", holdable=False)
            screener.record(
                actor=actor, thread_id=locked.external_id, subject=locked.external_id, person=locked.user_id
            )
        # A person being erased added to its participants is refused (memoryapp.subjects.erasing).
        participants_erasing_refuse(
            agent_id=locked.agent_id, before=locked.metadata, after=metadata, field=PARTICIPANTS_FIELD
        )
        locked.metadata = metadata_merged({} if replace_metadata else locked.metadata, metadata)
        if replace_metadata:
            locked.words_of = ""  # nothing copied from a fork's origin is left: the thread's own
    changed = False
    if user_id is not None:
        user_id = person_id_check("" if user_id is None else user_id)
        changed = user_id != locked.user_id
        # Given to a person being erased, or taken from one (her erasure's step takes the threads
        # about her: one given away before it would outlive it), refused (memoryapp.subjects.erasing).
        people = {person: "user_id" for person in (user_id, locked.user_id) if person}
        if changed and people:
            senders_erasing_refuse(agent_id=locked.agent_id, senders=people, what="thread")
        if changed:
            _audit_user_change(locked, old=locked.user_id, new=user_id, actor=actor)
        locked.user_id = user_id
    thread_key_people_set(locked)
    locked.save(update_fields=["metadata", "words_of", "user_id", "updated_at"])
    if metadata is not None:
        mentions_record(**_agent_of(thread), rows=[(Table.THREAD, locked.pk, locked)], replace=True)
    if changed:
        _person_rows_reseal(locked)
    thread_sync(thread, locked)
    return locked


def _agent_of(thread: Thread) -> dict[str, Any]:
    """The agent of a write into this thread, as `mentions_record` takes it: the row read with the
    thread when it was (the API's writes), else its id (read once, for its registry version)."""
    if Thread.agent.is_cached(thread):
        return {"agent": thread.agent}
    return {"agent_id": thread.agent_id}


# --- entries -------------------------------------------------------------------------------


def _insert(
    *, thread: Thread, specs: Sequence[dict[str, Any]], field_prefix: str = "", locked: Thread | None = None
) -> list[Entry]:
    """Validate and insert entries after one another, under the thread lock the caller holds.

    1. Lock the thread row; read next_seq and the active leaf.
    2. For each entry: its parent is the explicit `parent_id` (checked to be in this thread),
       else the entry before it in the batch, else the active leaf; seq is the next one; a
       tool result without a name takes it from the matching tool call on its branch. An entry
       with a client-given `created_at` that is the same node as one there (`_node_there`) is
       not written: the write answers that one (`entry_was_there`) and goes on from it.
    3. Insert them all in one statement; move the leaf (to the last entry asked to activate),
       advance next_seq in one UPDATE of the thread (its updated_at is left: 004 moves it only
       when the thread is created or its metadata changes).
    4. Hand them to the hooks inside the transaction (they send jobs only on commit).

    `locked` is the thread's row when the caller read it locked in this transaction.
    """
    locked = locked or thread_lock(thread)
    now = timezone.now()
    seq = locked.next_seq
    leaf_id = locked.active_leaf_id
    previous: str | None = leaf_id
    explicit = {
        str(spec["parent_id"]) for spec in specs if isinstance(spec.get("parent_id"), str) and spec.get("parent_id")
    }
    known_parents: set[str] = set()
    if explicit:
        known_parents = set(Entry.objects.filter(thread=locked, id__in=explicit).values_list("id", flat=True))
    batch_calls: dict[str, str] = {}
    entries: list[Entry] = []
    entry_prefixes: list[str] = []
    answered: list[Entry] = []  # in order: the new entries and the nodes that were there already
    screener = thread_screener(thread)
    screened_ids: set[str] = set()
    branched = False  # does this write make the tree more than one chain ending at the leaf?
    fresh: set[str] = set()  # ids of the entries this write makes
    asked: dict[str, set[str]] = {}  # whom the entries compared with the nodes there name (`rows_named`)
    for index, spec in enumerate(specs):
        prefix = f"{field_prefix}[{index}]." if field_prefix else ""
        if not isinstance(spec, dict):
            raise DomainError("invalid_type", "Each entry must be an object.", field=f"{field_prefix}[{index}]")
        parent_id = spec.get("parent_id")
        if parent_id is not None and not isinstance(parent_id, str):
            raise DomainError("invalid_type", "parent_id must be a string.", field=f"{prefix}parent_id")
        if parent_id:
            if parent_id not in known_parents:
                raise DomainError(
                    "unknown_parent", "parent_id is not an entry of this thread.", field=f"{prefix}parent_id"
                )
            branched = branched or parent_id != previous
        else:
            parent_id = previous
        activate = spec.get("activate", True)
        if not isinstance(activate, bool):
            raise DomainError("invalid_type", "activate must be true or false.", field=f"{prefix}activate")
        entry = entry_from_spec(thread=locked, spec=spec, parent_id=parent_id, seq=seq, now=now, field_prefix=prefix)
        # A parent written by this very batch has no child yet: only a node under a parent that was
        # there before can be a retried write (and asking per entry would be a query a row).
        if spec.get("created_at") is not None and parent_id not in fresh:
            if screener is not None:
                # What is stored (and hashed) is the screened turn: compare that.
                entries_screened(entries=[entry], screener=screener, prefixes=[prefix], now=now)
                screened_ids.add(entry.id)
            # And the turn as a person's erasure leaves it (memoryapp.subjects.erasing: naming her
            # while she is being erased, it is stored saying the placeholder, hashed so).
            found = rows_named(
                **_agent_of(thread),
                rows=[(Table.ENTRY, entry.id, entry)],
                memo=screener.memo if screener is not None else None,
            )
            asked[entry.id] = found.get(entry.id, set())
            # Only the write's first entry can be a retry of the leaf itself (see `_node_there`): a
            # later one of a batch goes after an entry of this batch or one it named.
            at_leaf = index == 0 and not spec.get("parent_id") and parent_id == locked.active_leaf_id
            there = _node_there(locked=locked, entry=entry, at_leaf=at_leaf)
            if there is not None:
                # 000 `SessionDag.append`: the same turn at the same time under the same parent is
                # that node (a retried write): advance to it, write nothing.
                setattr(there, _REUSED, True)
                answered.append(there)
                known_parents.add(there.id)
                previous = there.id
                if activate and there.id != leaf_id:
                    leaf_id = there.id
                    branched = True  # the leaf moved onto a node that was off its branch
                continue
        if entry.type == EntryType.TOOL_RESULT and not entry.tool_name:
            entry.tool_name = batch_calls.get(entry.tool_call_id) or tool_call_name_on_branch(
                thread=locked, leaf_id=parent_id, tool_call_id=entry.tool_call_id
            )
        for call in entry.tool_calls or []:
            batch_calls[call["id"]] = call["name"]
        entries.append(entry)
        entry_prefixes.append(prefix)
        answered.append(entry)
        known_parents.add(entry.id)
        fresh.add(entry.id)
        previous = entry.id
        seq += 1
        if activate:
            leaf_id = entry.id
        else:
            branched = True
    if not entries:
        return _advance_only(thread=thread, locked=locked, leaf_id=leaf_id, branched=branched, nodes=answered)
    if screener is not None:
        unscreened = [(e, p) for e, p in zip(entries, entry_prefixes, strict=True) if e.id not in screened_ids]
        entries_screened(
            entries=[e for e, _ in unscreened], screener=screener, prefixes=[p for _, p in unscreened], now=now
        )
    # The screener's memo: what it found of registered people in these texts is not looked for again.
    named = entries_sealed_for_people(
        thread=thread,
        locked=locked,
        entries=entries,
        memo=screener.memo if screener is not None else None,
        asked=asked,
    )
    # A message sent by a person being erased is refused (409), never stored after her erasure
    # took her messages (memoryapp.subjects.erasing, step 5).
    senders = {e.sender: f"{p}metadata.{MESSAGE_USER_KEY}" for e, p in zip(entries, entry_prefixes, strict=True)}
    senders.pop("", None)
    if senders:
        senders_erasing_refuse(agent_id=locked.agent_id, senders=senders)
    changes: dict[str, Any] = {"next_seq": seq, "active_leaf_id": leaf_id}
    if branched:
        changes["branch_epoch"] = locked.branch_epoch = locked.branch_epoch + 1
    changes["history_tokens"] = _history_tokens_after(locked, entries, branched=branched)
    # The screening decisions' audit record goes with the write's statement, unless the write's tool
    # calls are audited too (their record comes first, as it always has).
    audit = (
        screener.audit_entry(thread_id=locked.external_id, subject=locked.external_id, person=locked.user_id)
        if screener is not None and not _tool_calls_audited(entries)
        else None
    )
    _entries_write(entries, locked=locked, changes=changes, audit=audit)
    locked.next_seq, locked.active_leaf_id = seq, leaf_id
    locked.history_tokens = changes["history_tokens"]
    thread_sync(thread, locked)
    _audit_tool_calls(locked, entries)
    if named:
        mentions_record(**_agent_of(thread), rows=[(Table.ENTRY, e.id, e) for e in entries], named=named)
    if screener is not None:
        screener.record(thread_id=locked.external_id, subject=locked.external_id, person=locked.user_id)
    after_entries_added(thread=thread, entries=entries)
    return answered


def entries_sealed_for_people(
    *,
    thread: Thread,
    locked: Thread,
    entries: Sequence[Entry],
    memo: Memo | None = None,
    asked: Mapping[str, set[str]] | None = None,
) -> dict[str, set[str]]:
    """Before new entries of a thread are stored (an append, an import): the registered people each
    names (`rows_named`, by entry id), a tool result naming one other person sealed under her key
    (`words_of`) and each entry naming others under the key set of its person and each of them
    (`key_people`), so the erasure of any of them shreds its old copies. Answers what was found.
    `asked`: what `rows_named` answered already of some of them, by id (not matched again)."""
    asked = asked or {}
    rest = [(Table.ENTRY, e.id, e) for e in entries if e.id not in asked]
    named = rows_named(**_agent_of(thread), rows=rest, memo=memo) if rest else {}
    named.update({e.id: asked[e.id] for e in entries if asked.get(e.id)})
    if named:
        _tool_results_words_of(locked=locked, entries=entries, named=named)
        for e in entries:
            if e.id in named:
                key_people_set(e, named[e.id], owner_person=e.words_person(thread_person=locked.user_id))
    return named


def _tool_results_words_of(*, locked: Thread, entries: Sequence[Entry], named: dict[str, set[str]]) -> None:
    """A tool result that names one registered person other than the thread's (a profile a tool
    looked up) holds their words: it is sealed under their key (`Entry.words_of`), so their erasure
    shreds every old copy of it. One naming several such people is sealed under the key set of the
    thread's person and each of them (`key_people`, docs/security.md "Whose key seals a row")."""
    for entry in entries:
        if entry.type != EntryType.TOOL_RESULT or entry.id not in named:
            continue
        others = named[entry.id] - {locked.user_id}
        if len(others) == 1:
            entry.words_of = next(iter(others))


# Set on an entry `_insert` answers that was there already (a retried write): see `entry_was_there`.
_REUSED = "_reused_node"


def entry_was_there(entry: Entry) -> bool:
    """Whether a write answered this entry because the same node was there already (000
    `SessionDag.append` on a content-hash collision) rather than writing it: the API's 200."""
    return bool(getattr(entry, _REUSED, False))


def _node_there(*, locked: Thread, entry: Entry, at_leaf: bool) -> Entry | None:
    """The entry of the thread that is the same node as `entry` (unsaved): a child of its parent
    with the same content hash (turn, role, type, parent and time, 000 `hashNode`). Only a turn
    whose time the client gave can collide: the server's clock dates every other one anew.

    `at_leaf`: the entry goes after the leaf because it names no parent. A retry of a write that
    landed then finds the leaf is that very write (the leaf's own parent, same turn and time).
    """
    found = Entry.objects.filter(thread=locked, parent_id=entry.parent_id, content_hash=entry.content_hash).first()
    if found is not None or not at_leaf or entry.parent_id is None:
        return found
    leaf = Entry.objects.filter(thread=locked, id=entry.parent_id).first()
    if leaf is None:
        return None
    again = content_hash(parent_id=leaf.parent_id, turn=hashed_turn(entry), created_at=entry.created_at)
    return leaf if again == leaf.content_hash else None


def _advance_only(
    *, thread: Thread, locked: Thread, leaf_id: str | None, branched: bool, nodes: list[Entry]
) -> list[Entry]:
    """A write whose every entry was there already: move the leaf to the last one asked to
    activate (no new row, seq, event or job)."""
    if leaf_id != locked.active_leaf_id:
        changes: dict[str, Any] = {"active_leaf_id": leaf_id, "history_tokens": None}
        if branched:
            changes["branch_epoch"] = locked.branch_epoch = locked.branch_epoch + 1
        Thread.objects.filter(pk=locked.pk).update(**changes)
        locked.active_leaf_id, locked.history_tokens = leaf_id, None
    thread_sync(thread, locked)
    return nodes


def _tool_calls_audited(entries: Sequence[Entry]) -> bool:
    """Whether `_audit_tool_calls` appends a record for these entries."""
    return any(e.tool_calls or e.type == EntryType.TOOL_RESULT for e in entries)


def _audit_tool_calls(thread: Thread, entries: Sequence[Entry]) -> None:
    """002 audits tool calls: one record per write that holds calls or results, ids and counts
    (a write of plain messages takes no audit lock)."""
    calls = [e for e in entries if e.tool_calls]
    results = [e for e in entries if e.type == EntryType.TOOL_RESULT]
    if not calls and not results:
        return
    audit_append(
        action="thread.tool_calls",
        agent_id=thread.agent_id,
        thread_id=thread.external_id,
        subject=thread.external_id,
        outcome="recorded",
        details={
            "tool_calls": sum(len(e.tool_calls or []) for e in calls),
            "tool_results": len(results),
            "entry_ids": [e.id for e in [*calls, *results]][:AUDIT_TOOL_ENTRY_IDS],
        },
        person=thread.user_id,
    )


# A record names at most this many of a write's entries (a batch may hold 1,000).
AUDIT_TOOL_ENTRY_IDS = 50


def _history_tokens_after(locked: Thread, entries: Sequence[Entry], *, branched: bool) -> int | None:
    """The thread's running count of history tokens after this write (see Thread.history_tokens),
    from the row read under the lock this write holds.

    Appends at the leaf add what their messages and tool results weigh (unknown stays unknown);
    a write that branches or adds a compaction changes what the model sees in other ways: unknown.
    """
    if locked.history_tokens is None or branched or any(e.type == EntryType.COMPACTION for e in entries):
        return None
    return locked.history_tokens + sum(
        count_message_tokens(e.content, e.tool_calls) for e in entries if e.type in HISTORY_TYPES
    )


# The positions of the JSON values in an inserted row (`_entry_rows`).
_INSERT_JSON_AT = tuple(i for i, column in enumerate(ENTRY_INSERT_COLUMNS) if column in ENTRY_JSON_COLUMNS)
# The positions of the values sealed (or hashed) from the row when encryption is on, and their fields.
_INSERT_SEALED_AT = tuple(i for i, column in enumerate(ENTRY_INSERT_COLUMNS) if column in ENTRY_SEALED_FIELDS)
_INSERT_SEALED_FIELDS = [ENTRY_SEALED_FIELDS[ENTRY_INSERT_COLUMNS[i]] for i in _INSERT_SEALED_AT]
# The positions of the blind indexes (bigint arrays, null with encryption off).
_INSERT_HASHES_AT = (ENTRY_INSERT_COLUMNS.index("keyword_hashes"), ENTRY_INSERT_COLUMNS.index("sender_name_hashes"))


# UPDATE statements of the thread's row by the columns they set (a handful of shapes).
_THREAD_UPDATES: dict[tuple[str, ...], str] = {}


def _thread_update(pk: int, changes: dict[str, Any]) -> tuple[str, list[Any]]:
    """`Thread.objects.filter(pk=pk).update(**changes)` for plain values of concrete fields (the
    write's counters and leaf), as SQL and parameters, its SQL built once per set of fields rather
    than compiled per append (issue 26). Like QuerySet.update, it leaves updated_at and the signals
    alone."""
    names = tuple(changes)
    sql = _THREAD_UPDATES.get(names)
    if sql is None:
        sets = ", ".join(f"{Thread._meta.get_field(name).column} = %s" for name in names)  # type: ignore[union-attr]
        sql = _THREAD_UPDATES[names] = f"UPDATE {Thread._meta.db_table} SET {sets} WHERE id = %s"
    return sql, [*changes.values(), pk]


def _entries_write(
    entries: Sequence[Entry], *, locked: Thread, changes: dict[str, Any], audit: AuditEntry | None = None
) -> None:
    """Store a write's new entries (`_entries_insert`), move the thread's counters and leaf
    (`changes`, `_thread_update`) and record the `entry.added` event naming them, in the fewest
    statements: each was a round trip of its own, and the thread's row lock is held across them.

    - One entry: one statement, the three as a WITH query (`WITH entry AS (INSERT ... RETURNING
      stored_at), thread AS (UPDATE ...), event AS (INSERT ...) SELECT stored_at FROM entry`).
    - A batch: its COPY, then the UPDATE and the event's INSERT as one statement.

    The parts touch different rows (the entries' foreign keys are checked at commit), so running
    them in one statement stores what running them one after another stored. An event too large
    for one row (more than MAX_EVENT_IDS ids) is recorded by `event_record` as before.

    `audit`: a record to append with them (the write's screening decisions), by the same query
    string (governance.audit.chain `AuditFolded`: the chain's lock and its INSERT after the write's
    statement; one round trip less, a sixth of what screening cost a batch, bench/screening.py);
    appended on its own where the cursor cannot take it.
    """
    rows = _entry_rows(entries)
    thread_sql, thread_params = _thread_update(locked.pk, changes)
    event = event_insert_one(
        agent_id=locked.agent_id, type="entry.added", thread_id=locked.external_id, ids=[e.id for e in entries]
    )
    with connection.cursor() as cursor, audit_stale_end_refused():
        folded = audit_folded(cursor, audit) if audit is not None else None
        tail, tail_params = (f"; {folded.sql}", folded.params) if folded is not None else ("", [])
        if len(rows) == 1 and event is not None:
            cursor.execute(
                f"WITH entry AS ({_INSERT_ONE_SQL}), thread AS ({thread_sql}), event AS ({event[0]})"
                f" SELECT stored_at FROM entry{tail}",
                [*rows[0], *thread_params, *event[1], *tail_params],
            )
            (entries[0].stored_at,) = cursor.fetchone()
        else:
            _entries_insert(entries, rows, cursor)
            if event is not None:
                cursor.execute(
                    f"WITH thread AS ({thread_sql}) {event[0]}{tail}", [*thread_params, *event[1], *tail_params]
                )
            else:
                cursor.execute(f"{thread_sql}{tail}", [*thread_params, *tail_params])
        if folded is not None:
            cursor.nextset()
            folded.read(cursor)
    if audit is not None and folded is None:
        audit_append_many([audit])
    _entries_stored(entries)
    if event is not None:
        event_inserted(agent_id=locked.agent_id)
    else:
        event_record(
            agent_id=locked.agent_id, type="entry.added", thread_id=locked.external_id, ids=[e.id for e in entries]
        )


# One entry: a plain INSERT of the same columns (the SQL built once; a COPY costs a round trip more).
_INSERT_ONE_SQL = (
    f"INSERT INTO {ENTRY_TABLE} ({', '.join(ENTRY_INSERT_COLUMNS)})"
    f" VALUES ({', '.join(['%s'] * len(ENTRY_INSERT_COLUMNS))}) RETURNING stored_at"
)


# Entry's columns are its attribute names (no db_column renames): a row's values in one C call.
_ROW_VALUES = operator.attrgetter(*ENTRY_INSERT_COLUMNS)


def _entry_rows(entries: Sequence[Entry]) -> list[list[Any]]:
    """The rows to insert of the write's new entries, as `Model.save` would store them (sealed by
    their fields when encryption is on). JSON values: as Jsonb for one entry's INSERT, and for a
    batch's COPY as the text psycopg's Jsonb dumper writes (json.dumps), which PostgreSQL reads into
    the jsonb column the same: the dumper's call a value was a fifth of writing a batch (issue 26)."""
    rows = [list(_ROW_VALUES(e)) for e in entries]
    if encryption_enabled():
        _seal_rows(entries, rows)
    as_json = Jsonb if len(rows) == 1 else _copy_json
    for row in rows:
        for at in _INSERT_JSON_AT:
            if row[at] is not None:
                row[at] = as_json(row[at])
    return rows


def _copy_json(value: Any) -> str:
    """json.dumps(value), the most of a batch's values (a text's content, empty metadata) without its
    calls: a string is its JSON by the C function json.dumps ends in (ensure_ascii on), an empty
    object is `{}`."""
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is dict and not value:
        return "{}"
    return json.dumps(value)


def _entries_insert(entries: Sequence[Entry], rows: list[list[Any]], cursor: Any) -> None:
    """Insert the rows of `_entry_rows` without the ORM's per-row compilation: one entry by a plain
    INSERT whose SQL is built once (save() compiled it anew each time: ~15% of a single append's web
    CPU, issue 26), a batch by COPY: psycopg formats the rows in C, which costs a quarter of the
    client-side parsing of one multi-row INSERT (and a tenth of bulk_create's) at 100 rows. The
    generated search_vector and the indexes are filled by PostgreSQL as for an INSERT."""
    if len(rows) == 1:
        cursor.execute(_INSERT_ONE_SQL, rows[0])
        (entries[0].stored_at,) = cursor.fetchone()
        return
    with cursor.copy(_COPY_SQL) as copy:
        for row in rows:
            for at in _INSERT_HASHES_AT:
                hashes = row[at]
                if hashes is not None and not isinstance(hashes, str):
                    # COPY's text format takes the array as its text (psycopg's list dumper costs ten times the join).
                    row[at] = "{" + ",".join(map(str, hashes)) + "}"
            copy.write_row(row)


def _entries_stored(entries: Sequence[Entry]) -> None:
    """The inserted entries are saved rows from now on (`_state.adding` false), as after save()."""
    alias = connection.alias  # the connection proxy's lookup, once (not once an entry)
    for e in entries:
        state = e._state
        state.adding = False
        state.db = alias


_COPY_SQL = f"COPY {ENTRY_TABLE} ({', '.join(ENTRY_INSERT_COLUMNS)}) FROM STDIN"


def _seal_rows(entries: Sequence[Entry], rows: list[list[Any]]) -> None:
    """Put the sealed values and the blind index into the rows to insert, as save() would store them
    (each row under its own person's key). Before the COPY starts: finding a data key queries this
    connection."""
    sealer = BatchSealer(_INSERT_SEALED_FIELDS)
    sealer.prepare(entries)
    for e, row in zip(entries, rows, strict=True):
        for at, value in zip(_INSERT_SEALED_AT, sealer.row(e), strict=True):
            row[at] = value


@transaction.atomic
def entry_add(
    *,
    thread: Thread,
    type: str = "message",
    role: str = "",
    content: Any = None,
    parent_id: str | None = None,
    activate: bool = True,
    tool_calls: list[Any] | None = None,
    tool_call_id: str = "",
    tool_name: str = "",
    sender_name: str = "",
    token_count: int | None = None,
    event: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    created_at: datetime | None = None,
) -> Entry:
    """Add one entry: after the active leaf (moving it there), or under `parent_id`.

    With `activate=False` the leaf stays where it is. See `_insert` for the steps.
    """
    spec = {
        "type": type,
        "role": role,
        "content": content,
        "parent_id": parent_id,
        "activate": activate,
        "tool_calls": tool_calls,
        "tool_call_id": tool_call_id,
        "tool_name": tool_name,
        "sender_name": sender_name,
        "token_count": token_count,
        "event": event,
        "metadata": metadata,
        "created_at": created_at,
    }
    return _insert(thread=thread, specs=[spec])[0]


@transaction.atomic
def entries_add(*, thread: Thread, entries: list[dict[str, Any]]) -> list[Entry]:
    """Add a batch in one transaction, each entry after the one before (unless it names a parent).

    Each dict takes the keyword arguments of `entry_add`. All or nothing: a bad entry is a 400
    naming `entries[i].<field>` and nothing of the batch is written.
    """
    if not isinstance(entries, list) or not entries:
        raise DomainError("required", "entries must be a non-empty list.", field="entries")
    if len(entries) > MAX_BATCH_ENTRIES:
        raise DomainError(
            "batch_too_large",
            f"A batch holds at most {MAX_BATCH_ENTRIES} entries (this one {len(entries)}).",
            field="entries",
            status=413,
        )
    return _insert(thread=thread, specs=entries, field_prefix="entries")


@transaction.atomic
def thread_append(
    *, agent: Agent, external_id: str, entries: list[dict[str, Any]], field_prefix: str = ""
) -> tuple[Thread, list[Entry]]:
    """Add entries to the agent's thread of that id, found and locked by one query (the API's
    write path: one round trip less than a lookup and then a lock). Entries as `entries_add`."""
    thread = thread_for_agent(agent=agent, external_id=external_id, for_update=True)
    return thread, _insert(thread=thread, specs=entries, field_prefix=field_prefix, locked=thread)


def thread_append_one(
    *, agent: Agent, external_id: str, spec: dict[str, Any], field_prefix: str = ""
) -> tuple[Thread, list[Entry]]:
    """Add one entry to the agent's thread of that id (a single append without a run, over REST or
    MCP): in one statement when it is a plain append (`_append_one_fast`), else as `thread_append`,
    whose errors name `{field_prefix}[0].<field>` when a prefix is given (MCP's `entries`)."""
    done = _append_one_fast(agent=agent, external_id=external_id, spec=spec)
    if done is not None:
        return done
    return thread_append(agent=agent, external_id=external_id, entries=[spec], field_prefix=field_prefix)


def _append_one_plain(spec: dict[str, Any]) -> bool:
    """Whether the spec asks for nothing beyond a plain message after the leaf: no parent named, the
    leaf moved to it, no client time (a retry's node to look for), no id (an import's), no tool
    calls (audited) and no other type (tool results, compactions, events)."""
    return (
        not spec.get("parent_id")
        and spec.get("activate", True) is True
        and spec.get("created_at") is None
        and spec.get("id") is None
        and not spec.get("tool_calls")
        and spec.get("event") is None
        and (spec.get("type") or EntryType.MESSAGE) == EntryType.MESSAGE
    )


def _append_one_fast(*, agent: Agent, external_id: str, spec: dict[str, Any]) -> tuple[Thread, list[Entry]] | None:
    """A plain single append in ONE statement, without BEGIN, a separate lock and COMMIT (issue 26);
    None, having written nothing, when the write is not a plain one: the caller then runs
    `thread_append`, which answers it as always (its 404 and 4xx answers included).

    1. Plain (`_append_one_plain`), encryption off (a row is sealed under its thread's person, known
       only once the thread is read): else None.
    2. Build and screen the entry as `_insert` does, before the thread is read: its parent, seq and
       hash are left to the statement. A refusal or a rule broken: None (the other path answers it,
       the thread first, as it always did); a finding to audit or hold, or a registered person
       named (a mention to record, a person being erased: her lock and placeholder): None.
    3. One statement (`_append_one_sql`): lock the agent's thread of that id (FOR UPDATE, as
       `thread_for_agent`: under READ COMMITTED, a writer that waited for it reads the version the
       writer before it committed), move its counters and leaf as `_insert` does, insert the entry
       with the seq and parent read under the lock and its content hash over that parent
       (`content_hash_around_parent`), and the `entry.added` event. All or nothing, one round trip;
       in autocommit its own transaction. No thread (missing, another agent's, deleted meanwhile):
       nothing is written, None.
    4. The thread as the statement left it (RETURNING); the hooks, which send their jobs once the
       write committed: at once in autocommit, where the row is durable when the statement returns.
    """
    if not _append_one_plain(spec) or encryption_enabled():
        return None
    now = timezone.now()
    screener = screener_for(agent=agent)
    try:
        # Its parent, seq and hash are the statement's (the thread is read there).
        entry = entry_from_spec(
            thread=_thread_stand_in(agent.pk), spec=spec, parent_id=None, seq=0, now=now, hashed=False
        )
        if screener is not None:
            entries_screened(entries=[entry], screener=screener, prefixes=[""], now=now)
    except DomainError:
        return None
    if screener is not None and (screener.decisions or entry.held_at is not None):
        return None
    if rows_name_anyone(agent=agent, rows=[(Table.ENTRY, entry.id, entry)], memo=screener.memo if screener else None):
        return None
    if entry.sender:
        # A message naming its sender waits on no one but is refused while they are being erased
        # (`senders_erasing_refuse`): a query the one statement has no place for.
        return None
    (row,) = _entry_rows([entry])
    before, after = content_hash_around_parent(turn=hashed_turn(entry), created_at=entry.created_at)
    tokens = (
        entry.token_count if spec.get("token_count") is None else count_message_tokens(entry.content, entry.tool_calls)
    )
    event = event_insert_one(
        agent_id=agent.pk, type="entry.added", thread_id=external_id, ids=[entry.id], source="thread"
    )
    assert event is not None  # one id
    # The entry's null and empty values are written in the statement, not sent (most of a plain
    # turn's columns: binding each parameter costs some 5 us).
    shape = tuple(_INLINE.get(value) if type(value) in (str, type(None)) else None for value in row)
    params = [
        agent.pk,
        external_id,
        entry.id,
        tokens,
        before,
        after,
        *(
            value
            for column, value, inline in zip(ENTRY_INSERT_COLUMNS, row, shape, strict=True)
            if column not in _FROM_THREAD and inline is None
        ),
        *event[1],
    ]
    # Inside a caller's transaction (a test's), a failed statement leaves it usable, as the
    # savepoint of `thread_append` does; a served request runs it in autocommit.
    savepoint = transaction.atomic() if connection.in_atomic_block else nullcontext()
    with savepoint, connection.cursor() as cursor:
        cursor.execute(_append_one_sql(event[0], shape), params)
        found = cursor.fetchone()
    if found is None:
        return None
    thread = _RETURNED_THREAD.build(found)
    Thread.agent.field.set_cached_value(thread, agent)
    entry.thread_id = thread.pk
    Entry.thread.field.set_cached_value(entry, thread)
    entry.seq, entry.parent_id, entry.content_hash, entry.stored_at = found[-4:]
    _entries_stored([entry])
    event_inserted(agent_id=agent.pk)
    after_entries_added(thread=thread, entries=[entry])
    return thread, [entry]


# The thread a single append's statement returns (every column), built as the ORM builds it.
_RETURNED_THREAD = ReturnedRows(Thread)
# The entry's columns the statement fills from the thread it locked (`thread`, its WITH query).
_FROM_THREAD = {
    "thread_id": "thread.id",
    "parent_id": "thread.entry_parent_id",
    "seq": "thread.entry_seq",
    "content_hash": "thread.entry_hash",
}
# Values written in the statement rather than sent (`_append_one_fast`).
_INLINE: dict[Any, str] = {None: "NULL", "": "''"}
_APPEND_ONE_SQL: dict[tuple[str, tuple[str | None, ...]], str] = {}


def _thread_stand_in(agent_id: int) -> Thread:
    """The thread of an entry built before its thread is read (`entry_from_spec` takes its agent and
    id from it): no Model.__init__, which asks each of Thread's fields for its default (~60 us)."""
    stand_in = Thread.__new__(Thread)
    stand_in.__dict__.update({"_state": ModelState(), "id": None, "agent_id": agent_id})
    return stand_in


def _append_one_sql(event_sql: str, shape: tuple[str | None, ...]) -> str:
    """The single append's statement (`_append_one_fast`), built once per process. Its parameters:
    the agent, the thread's id, the entry's id (the new leaf), the tokens its history grows by (an
    unknown count, null, stays null), the hash's text before and after the parent, the entry's
    other columns in ENTRY_INSERT_COLUMNS' order but those `shape` writes in the statement (a null
    or an empty string, `_INLINE`), the event's. It answers the thread's columns
    (`_RETURNED_THREAD`), then the entry's seq, parent, hash and stored_at; no row without the
    thread."""
    sql = _APPEND_ONE_SQL.get((event_sql, shape))
    if sql is not None:
        return sql
    table = Thread._meta.db_table
    values = ", ".join(
        _FROM_THREAD.get(column) or inline or "%s" for column, inline in zip(ENTRY_INSERT_COLUMNS, shape, strict=True)
    )
    sql = f"""
        WITH locked AS (
            SELECT id, next_seq, active_leaf_id FROM {table}
             WHERE agent_id = %s AND external_id = %s
               FOR UPDATE
        ), thread AS (
            UPDATE {table} t
               SET next_seq = locked.next_seq + 1, active_leaf_id = %s, history_tokens = t.history_tokens + %s
              FROM locked
             WHERE t.id = locked.id
         RETURNING {_RETURNED_THREAD.columns("t")},
                   locked.next_seq AS entry_seq, locked.active_leaf_id AS entry_parent_id,
                   left(encode(sha256(convert_to(
                       %s || COALESCE(to_json(locked.active_leaf_id)::text, 'null') || %s, 'UTF8'
                   )), 'hex'), 32) AS entry_hash
        ), entry AS (
            INSERT INTO {ENTRY_TABLE} ({", ".join(ENTRY_INSERT_COLUMNS)}) SELECT {values} FROM thread
            RETURNING stored_at
        ), event AS ({event_sql})
        SELECT thread.*, entry.stored_at FROM thread, entry"""
    if len(_APPEND_ONE_SQL) < 256:  # a few shapes in practice; never a growing cache
        _APPEND_ONE_SQL[(event_sql, shape)] = sql
    return sql


@transaction.atomic
def thread_rewind(*, thread: Thread, entry_id: str, actor: str = "") -> Thread:
    """Move the active leaf back to an entry of the active branch; nothing is deleted."""
    locked = thread_lock(thread)
    if not Entry.objects.filter(thread=locked, id=entry_id).exists():
        raise DomainError("unknown_entry", "entry_id is not an entry of this thread.", field="entry_id")
    if not entry_on_branch(thread=locked, leaf_id=locked.active_leaf_id, entry_id=entry_id):
        raise DomainError("not_on_branch", "entry_id is not on the active branch.", field="entry_id")
    previous = locked.active_leaf_id
    # The entries after the new leaf are off its branch from now on.
    locked.branch_epoch += entry_id != previous
    locked.active_leaf_id = entry_id
    # Another branch: the running count of its history is not known.
    locked.history_tokens = locked.history_tokens if entry_id == previous else None
    locked.save(update_fields=["active_leaf", "branch_epoch", "history_tokens"])
    audit_append(
        action="thread.rewind",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        subject=entry_id,
        outcome="rewound",
        details={"from": previous, "to": entry_id},
        person=locked.user_id,
    )
    thread_sync(thread, locked)
    return locked


@transaction.atomic
def thread_checkout(*, thread: Thread, entry_id: str, actor: str = "") -> Thread:
    """Make any entry of the thread the active leaf (its branch becomes the active one); audited."""
    locked = thread_lock(thread)
    if not Entry.objects.filter(thread=locked, id=entry_id).exists():
        raise DomainError("unknown_entry", "entry_id is not an entry of this thread.", field="entry_id")
    previous = locked.active_leaf_id
    if entry_id != locked.active_leaf_id:
        locked.branch_epoch += 1
        locked.history_tokens = None  # another branch: its history is counted again
    locked.active_leaf_id = entry_id
    locked.save(update_fields=["active_leaf", "branch_epoch", "history_tokens"])
    audit_append(
        action="thread.checkout",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        subject=entry_id,
        outcome="checked_out",
        details={"from": previous, "to": entry_id},
        person=locked.user_id,
    )
    thread_sync(thread, locked)
    return locked


@transaction.atomic
def thread_fork(*, thread: Thread, entry_id: str, new_thread_id: str | None = None, actor: str = "") -> Thread:
    """Copy the branch from the root to `entry_id` into a new thread.

    1. Lock the origin; check the entry is in it; read the branch (all types) root first.
    2. Create the new thread (409 `thread_exists` when the id is taken) with the origin's
       user_id and metadata plus `forkedFrom` = the origin's id; `forked_from` points at it.
    3. Copy each entry with a new id and the same seq order, parents mapped to the copies,
       `metadata.forkOf` naming the original; the copy of `entry_id` is the new leaf. The
       memory switch and the off ranges (renumbered) go with it (memoryapp.threads.off_ranges).
    4. Append the new id to the origin's `metadata.memoryForks`; audit.
    """

    locked = thread_lock(thread)
    if not Entry.objects.filter(thread=locked, id=entry_id).exists():
        raise DomainError("unknown_entry", "entry_id is not an entry of this thread.", field="entry_id")
    new_external = thread_id_or_new(new_thread_id, field="new_thread_id")
    if Thread.objects.filter(agent_id=locked.agent_id, external_id=new_external).exists():
        raise DomainError(
            "thread_exists", "A thread with new_thread_id exists already.", field="new_thread_id", status=409
        )
    branch = path_entries(thread=locked, leaf_id=entry_id, types=None)
    metadata = {k: v for k, v in (locked.metadata or {}).items() if k not in ("memoryForks", "forkedFrom")}
    metadata["forkedFrom"] = locked.external_id
    # The memory switch goes with the copy: a turn said while memory was off stays out of the
    # fork's extraction too, and a fork of a thread whose memory is off starts off.
    off = off_ranges_of_copies(origin=locked, copied_seqs=[e.seq for e in branch])
    copy = Thread(
        agent_id=locked.agent_id,
        external_id=new_external,
        user_id=locked.user_id,
        metadata=metadata,
        # The copied metadata holds the origin's person's words, whoever the fork is handed to.
        words_of=locked.words_of or locked.user_id,
        forked_from=locked,
        memory_enabled=locked.memory_enabled,
        extraction={OFF_RANGES_KEY: off} if off else {},
    )
    thread_key_people_set(copy)
    copy.save(force_insert=True)
    mapping: dict[str, str] = {}
    copies: list[Entry] = []
    for seq, original in enumerate(branch, start=1):
        new_entry_id = entry_id_new(agent_id=locked.agent_id)
        parent = mapping.get(original.parent_id) if original.parent_id else None
        mapping[original.id] = new_entry_id
        entry = Entry(
            id=new_entry_id,
            thread=copy,
            parent_id=parent,
            seq=seq,
            metadata={**(original.metadata or {}), FORK_OF_KEY: original.id},
            fork_of=original.id,
            **{name: getattr(original, name) for name in ENTRY_FORK_COPIED},
        )
        # The copy holds the original's words: sealed under their person's key whoever the fork is
        # handed to later (a thread given to another person reseals its rows under theirs).
        entry.words_of = original.words_person(thread_person=locked.user_id)
        entry.content_hash = content_hash(parent_id=parent, turn=hashed_turn(entry), created_at=entry.created_at)
        copies.append(entry)
    Entry.objects.bulk_create(copies)
    Thread.objects.filter(pk=copy.pk).update(next_seq=len(copies) + 1, active_leaf_id=copies[-1].id if copies else None)
    copy.refresh_from_db()
    forks = list((locked.metadata or {}).get("memoryForks") or [])
    forks.append(new_external)
    locked.metadata = {**(locked.metadata or {}), "memoryForks": forks}
    locked.save(update_fields=["metadata", "updated_at"])
    thread_sync(thread, locked)
    audit_append(
        action="thread.fork",
        actor=actor,
        agent_id=locked.agent_id,
        thread_id=locked.external_id,
        subject=new_external,
        outcome="forked",
        details={"at": entry_id, "entries": len(copies)},
        person=locked.user_id,
        private=(new_external,),
    )
    event_record(agent_id=copy.agent_id, type="entry.added", thread_id=copy.external_id, ids=[e.id for e in copies])
    # The copies name whom the originals named (and the copied metadata whom the origin's did).
    mentions_record(
        **_agent_of(thread),
        rows=[(Table.THREAD, copy.pk, copy), *((Table.ENTRY, e.id, e) for e in copies)],
    )
    after_entries_added(thread=copy, entries=copies)
    return copy

"""The history of a context build (steps 2 and 4 of memoryapp.context.builder): the branch read into
a window, and the runs of it a strategy keeps.

- `history_window`: the newest part of the branch, grown while the budget could take more, read back
  to the newest compaction's cut, through compacted_history (summary and cleared tool results apply).
- `history_units`: entries grouped so a tool call and its results are never split.
- `recent_run`: one unbroken run back from the newest unit that fits (large tool results as notes).
- `relevant_turns`: the turns most similar to the input that fit, in conversation order.
- `off_branch`: the turns recall leaves out (cached per thread and branch epoch).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, cast

from django.db import connection

from governance.crypto.fields import json_text_open, value_open
from memoryapp.compaction.history import HISTORY_AND_COMPACTION, compacted_history
from memoryapp.content import content_text
from memoryapp.errors import DomainError
from memoryapp.models import Entry, Thread
from memoryapp.models.choices import EntryType, Role
from memoryapp.search.embedders import EmbedderError, embed_query, embed_texts
from memoryapp.search.indexing import entry_embedding_text
from memoryapp.search.retrieval import vector_space_ok
from memoryapp.search.vector import vector_literal
from memoryapp.threads.branch import branch_rows_sql, chain_rows_sql
from memoryapp.threads.columns import ENTRY_TABLE
from memoryapp.threads.selectors import entry_on_branch, off_branch_ids, off_branch_now
from memoryapp.tokens import count_message_tokens

RELEVANT_CANDIDATES = 200
MAX_WINDOW = 20_000


@dataclass
class Unit:
    """Entries that go together: a message, or a tool call with its results."""

    entries: list[Entry]
    tokens: list[int]

    @property
    def cost(self) -> int:
        return sum(self.tokens)

    @property
    def first(self) -> Entry:
        return self.entries[0]


@dataclass
class Run:
    units: list[Unit]  # chronological
    notes: dict[str, int]  # entry id -> tokens of a tool result sent as a short note
    cost: int
    stopped: bool  # the budget ended the run (older entries were there)


def entry_tokens(entry: Entry) -> int:
    return count_message_tokens(entry.content if entry.content is not None else entry.text, entry.tool_calls)


def is_reply(entry: Entry) -> bool:
    return entry.type == EntryType.TOOL_RESULT or entry.role in (Role.ASSISTANT, Role.TOOL)


def history_units(entries: Sequence[Entry]) -> list[Unit]:
    """Group a tool call with the tool results that answer it (they are never split)."""
    units: list[Unit] = []
    open_calls: dict[str, Unit] = {}
    for entry in entries:
        if entry.type == EntryType.TOOL_RESULT and entry.tool_call_id in open_calls:
            unit = open_calls[entry.tool_call_id]
            unit.entries.append(entry)
            unit.tokens.append(entry_tokens(entry))
            continue
        unit = Unit(entries=[entry], tokens=[entry_tokens(entry)])
        units.append(unit)
        for call in entry.tool_calls or []:
            if isinstance(call, dict) and call.get("id"):
                open_calls[str(call["id"])] = unit
    return [unit for unit in units if _without_unanswered_calls(unit)]


def _without_unanswered_calls(unit: Unit) -> bool:
    """Keep only the tool calls whose result is on the branch (a model API refuses a call left
    unanswered, e.g. when the user moved on); False when the message is left with nothing to say."""
    first = unit.first
    if not first.tool_calls:
        return True
    answered = {e.tool_call_id for e in unit.entries[1:]}
    calls = [c for c in first.tool_calls if isinstance(c, dict) and c.get("id") in answered]
    if len(calls) == len(first.tool_calls):
        return True
    first.tool_calls = calls or None  # the row read for this build, never saved
    unit.tokens[0] = entry_tokens(first)
    return bool(calls) or bool(content_text(first.content if first.content is not None else first.text).strip())


def note_text(entry: Entry, tokens: int) -> str:
    name = entry.tool_name or "tool"
    return f"[{name} result of {tokens} tokens left out: too large for the context]"


def _note_tokens(entry: Entry, tokens: int) -> int:
    return count_message_tokens(note_text(entry, tokens))


def _fit_unit(unit: Unit, room: int) -> dict[str, int] | None:
    """The notes that make the unit fit `room` (tool results largest first), or None."""
    if unit.cost <= room:
        return {}
    results = sorted(
        (i for i, e in enumerate(unit.entries) if e.type == EntryType.TOOL_RESULT), key=lambda i: -unit.tokens[i]
    )
    cost = unit.cost
    notes: dict[str, int] = {}
    for i in results:
        entry = unit.entries[i]
        note = _note_tokens(entry, unit.tokens[i])
        if note >= unit.tokens[i]:
            continue
        cost += note - unit.tokens[i]
        notes[entry.id] = unit.tokens[i]
        if cost <= room:
            return notes
    return None


def unit_cost(unit: Unit, notes: dict[str, int]) -> int:
    return sum(_note_tokens(e, t) if e.id in notes else t for e, t in zip(unit.entries, unit.tokens, strict=True))


def recent_run(units: list[Unit], room: int, *, complete: bool) -> Run:
    """One unbroken run back from the newest unit that fits `room`.

    1. Walk from the newest unit back; a unit that fits is kept; one that does not fit is kept
       with its large tool results as short notes when that makes it fit; else the run ends.
    2. A run may not start with a reply (assistant message or tool result) whose question is
       older than the run: such units are dropped from its start (a reply never appears without
       the message it answers), unless the run reaches the start of the history.
    `complete` says whether `units` begin at the start of the history (nothing older unread).
    """
    kept: list[Unit] = []
    notes: dict[str, int] = {}
    cost = 0
    stopped = False
    for unit in reversed(units):
        whole = unit.cost
        if whole <= room - cost:  # fits as it is (most units): `_fit_unit` would give no note
            cost += whole
            kept.append(unit)
            continue
        unit_notes = _fit_unit(unit, room - cost)
        if unit_notes is None:
            stopped = True
            break
        notes.update(unit_notes)
        cost += unit_cost(unit, unit_notes)
        kept.append(unit)
    kept.reverse()
    reaches_start = not stopped and complete
    while kept and not reaches_start and is_reply(kept[0].first):
        dropped = kept.pop(0)
        cost -= unit_cost(dropped, notes)
        for e in dropped.entries:
            notes.pop(e.id, None)
        stopped = True
    return Run(units=kept, notes=notes, cost=cost, stopped=stopped)


def history_message(entry: Entry, note_tokens: int | None = None) -> dict[str, Any]:
    role = "tool" if entry.type == EntryType.TOOL_RESULT else (entry.role or Role.USER)
    content: Any = entry.content if entry.content is not None else entry.text
    if note_tokens is not None:
        content = note_text(entry, note_tokens)
    message: dict[str, Any] = {"role": role, "content": content}
    if entry.tool_calls:
        message["tool_calls"] = entry.tool_calls
    if entry.tool_call_id:
        message["tool_call_id"] = entry.tool_call_id
    if entry.type == EntryType.TOOL_RESULT and entry.tool_name:
        message["name"] = entry.tool_name
    elif entry.sender_name:
        message["name"] = entry.sender_name
    message["entry_id"] = entry.id
    return message


def entry_ref(entry: Entry, tokens: int) -> dict[str, Any]:
    return {"id": entry.id, "seq": entry.seq, "type": entry.type, "role": entry.role, "tokens": tokens}


def _newest_compaction(
    *, thread: Thread, window: list[Entry], complete: bool, first_compaction_seq: int | None, chain: bool = False
) -> Entry | None:
    """The newest compaction entry on the branch: in the window, or before it (then checked to be
    on the branch: a compaction of another branch does not apply). `first_compaction_seq`, the
    seq of the thread's oldest compaction (read with the window), spares that query when no
    compaction of the thread is older than the window (most threads have none at all)."""

    in_window = [e for e in window if e.type == EntryType.COMPACTION]
    if in_window:
        return cast(Entry, in_window[-1])
    if complete or not window:
        return None
    oldest = window[0]
    if first_compaction_seq is None or first_compaction_seq >= oldest.seq:
        return None
    candidates = Entry.objects.filter(thread=thread, type=EntryType.COMPACTION, seq__lt=oldest.seq).order_by("-seq")
    for candidate in candidates.only("id", "seq", "event")[:10]:
        if chain or entry_on_branch(thread=thread, leaf_id=oldest.id, entry_id=candidate.id):
            return candidate
    return None


@dataclass(slots=True)
class PathEntry:
    """One entry of a branch as the builder reads it: the columns it needs, no model instance.

    The hot path of every build: a Django model per row costs more than the query itself, so the
    window is read as plain rows into these (duck-typed like Entry for compacted_history). The
    fields are the columns read, in the order read (`WINDOW_COLUMNS`).
    """

    id: str
    parent_id: str | None
    seq: int
    type: str
    role: str
    content: Any
    text: str
    tool_calls: Any
    tool_call_id: str
    tool_name: str
    sender_name: str
    token_count: int
    event: Any
    # (Not created_at nor redacted_at: no step of the build reads them, and a timestamp per row
    # costs its parsing.)
    held_at: datetime | None

    def __post_init__(self) -> None:
        # Django reads jsonb as text and decodes it itself; so does this reader (and opens sealed
        # values, as the model's fields do).
        self.content = _json(json_text_open(self.content, table=ENTRY_TABLE, column="content"))
        self.text = value_open(self.text, table=ENTRY_TABLE, column="text")
        if self.sender_name:
            self.sender_name = value_open(self.sender_name, table=ENTRY_TABLE, column="sender_name")
        # Most turns have neither (null): nothing to open or decode.
        if self.tool_calls is not None:
            self.tool_calls = _json(json_text_open(self.tool_calls, table=ENTRY_TABLE, column="tool_calls"))
        if self.event is not None:
            self.event = _json(json_text_open(self.event, table=ENTRY_TABLE, column="event"))


WINDOW_COLUMNS = tuple(f.name for f in fields(PathEntry))
# With every row, the seq of the thread's oldest compaction (one lookup in entry_compaction_idx,
# computed once per statement): whether one may lie before the window, without another round trip.
_FIRST_COMPACTION_SQL = (
    f"(SELECT min(c.seq) FROM {ENTRY_TABLE} c WHERE c.thread_id = %(thread)s AND c.type = '{EntryType.COMPACTION}')"
)
_WINDOW_SQL = branch_rows_sql(
    columns=WINDOW_COLUMNS, types=True, limit=True, extra=(_FIRST_COMPACTION_SQL,), carried=True
)
# The same rows of a thread that is one chain, by a range of (thread, seq), newest first.
_CHAIN_WINDOW_SQL = chain_rows_sql(columns=WINDOW_COLUMNS, extra=(_FIRST_COMPACTION_SQL,))


def _json(value: Any) -> Any:
    """A jsonb value read as text, decoded. PostgreSQL writes a JSON string with every quote,
    backslash and control character in it escaped, so one without a backslash is the text between
    its quotes: taken as it is, without the decoder (a turn's content is mostly such a string, and
    decoding it was half the cost of turning a build's window into rows: issue 26)."""
    if not isinstance(value, str):
        return value
    if value.startswith('"') and "\\" not in value:
        return value[1:-1]
    return json.loads(value)


def _chain_below(thread: Thread) -> int | None:
    """The thread's next seq when it is one chain (branch_epoch 0), else None: its branches are then
    read by seq range (`chain_rows_sql`) rather than walked."""
    return int(thread.next_seq) if thread.branch_epoch == 0 else None


def _path_chunk(
    *, thread: Thread, start: str, limit: int, chain_below: int | None = None, read: list[Any] | None = None
) -> tuple[list[PathEntry], int | None]:
    """Up to `limit` history and compaction entries of the branch, from `start` up, oldest first:
    the walk of `path_entries` (memoryapp.threads.branch), read as plain rows; and the seq of the
    thread's oldest compaction (None: none, or no row read). With `chain_below` (the thread is one
    chain, `_chain_below`), the rows are read by seq range instead; a start that range does not know
    (written after the thread was read) is walked. `read`: the rows of that range's statement
    (`window_first_read`), when the caller sent it with its own reads."""
    params = _chunk_params(thread=thread, start=start, limit=limit)
    rows: list[Any] = []
    if read is not None:
        rows = list(read)
        rows.reverse()
    elif chain_below is not None:
        with connection.cursor() as cursor:
            cursor.execute(_CHAIN_WINDOW_SQL, {**params, "below": chain_below})
            rows = cursor.fetchall()
        rows.reverse()
    if not rows:
        with connection.cursor() as cursor:
            cursor.execute(_WINDOW_SQL, params)
            rows = cursor.fetchall()
    first_compaction = rows[0][-1] if rows else None
    return [PathEntry(*row[:-1]) for row in rows], first_compaction


def _chunk_params(*, thread: Thread, start: str, limit: int) -> dict[str, Any]:
    return {"start": start, "thread": thread.pk, "types": [str(t) for t in HISTORY_AND_COMPACTION], "limit": limit}


def window_first_read(*, thread: Thread, want: int) -> tuple[str, dict[str, Any]] | None:
    """The statement of `history_window`'s first read of the thread's active branch for `want`
    entries, for a caller that sends it with its own reads and hands its rows back as `first_rows`;
    None when that read is none of a range (no leaf, or a thread that is no longer one chain)."""
    chain_below = _chain_below(thread)
    if chain_below is None or not thread.active_leaf_id:
        return None
    params = _chunk_params(thread=thread, start=thread.active_leaf_id, limit=max(1, want))
    return _CHAIN_WINDOW_SQL, {**params, "below": chain_below}


def history_window(
    *, thread: Thread, leaf_id: str | None, want: int, room: int, first_rows: list[Any] | None = None
) -> tuple[Any, bool, list[Any]]:
    """The kept history (compacted), whether it starts at the branch's start, and the raw window.

    1. Read the newest `want` entries of the branch (the rows of `window_first_read(want=want)` when
       the caller read them: `first_rows`, for the active leaf).
    2. While the budget could take everything read and the branch goes on, read the next older
       chunk (sized by the tokens a message took so far), up to MAX_WINDOW entries.
    3. When the newest compaction's first kept entry lies before the window (the compaction in the
       window or before it), read back to it so the summary and its cut apply.
    """
    if leaf_id and not Entry.objects.filter(thread=thread, id=leaf_id).exists():
        raise DomainError("unknown_leaf", "The leaf is not an entry of this thread.", field="leaf_id")
    start = leaf_id or thread.active_leaf_id
    if not start:
        return compacted_history([]), True, []
    window: list[Any] = []
    limit = max(1, want)
    complete = False
    next_start: str | None = start
    first_compaction: int | None = None
    tokens = 0
    chain_below = _chain_below(thread)
    if leaf_id or chain_below is None:
        first_rows = None
    while next_start is not None:
        chunk, found = _path_chunk(
            thread=thread, start=next_start, limit=limit, chain_below=chain_below, read=first_rows
        )
        first_rows = None
        if chunk:
            first_compaction = found
        window = chunk + window
        complete = len(chunk) < limit
        next_start = None if complete or not window[0].parent_id else window[0].parent_id
        if next_start is None:
            complete = True
            break
        if any(e.type == EntryType.COMPACTION for e in chunk):
            break
        # What the window holds, counted once per row (each chunk is added to the sum as it comes).
        tokens += sum(entry_tokens(e) for e in window[: len(chunk)] if e.type != EntryType.COMPACTION)
        if tokens >= room or len(window) >= MAX_WINDOW:
            break
        average = max(1.0, tokens / max(1, len(window)))
        limit = min(MAX_WINDOW - len(window), int((room - tokens) / average * 1.3) + 16)
    compaction = _newest_compaction(
        thread=thread,
        window=window,
        complete=complete,
        first_compaction_seq=first_compaction,
        chain=chain_below is not None,
    )
    # The compaction's cut may lie before the window even when the compaction is in it.
    if compaction is not None and not complete:
        event = compaction.event if isinstance(compaction.event, dict) else {}
        first_kept = event.get("first_kept_entry_id")
        first_seq = Entry.objects.filter(thread=thread, id=first_kept).values_list("seq", flat=True).first()
        if first_seq is None and isinstance(event.get("first_kept_seq"), int):
            first_seq = event["first_kept_seq"]
        bound = first_seq if first_seq is not None else compaction.seq
        # Read on until the first kept entry (and the compaction entry itself) are in the window.
        while window and window[0].parent_id and window[0].seq > min(bound, compaction.seq):
            span = Entry.objects.filter(thread=thread, seq__gte=bound, seq__lt=window[0].seq).count() + 2
            window = (
                _path_chunk(thread=thread, start=window[0].parent_id, limit=span, chain_below=chain_below)[0] + window
            )
    # A turn screening held (memoryapp.screening) waits for its reviewer out of every context.
    window = [e for e in window if e.held_at is None]
    history = compacted_history(window)
    return history, complete or compaction is not None, window


def after_seq(entries: list[Entry]) -> int | None:
    return entries[-1].seq + 1 if entries else None


def history_count(window: list[Any]) -> int:
    """How many entries the branch holds up to the leaf, when only its newest part was read: the
    leaf's seq, an upper bound (other branches and events share the numbering). Counting exactly
    would read every row of a long thread for one number."""
    return int(window[-1].seq) if window else 0


# (thread pk, branch_epoch) -> the ids off the active branch. Appends at the leaf leave that set as
# it is and every other change of the tree bumps the epoch, so an entry is never stale; bounded.
_off_branch_cache: OrderedDict[tuple[int, int], tuple[str, ...]] = OrderedDict()


_OFF_BRANCH_CACHE_SIZE = 256


_off_branch_lock = threading.Lock()


def off_branch(thread: Thread, leaf_id: str | None, before_seq: int | None) -> Sequence[str]:
    """The turns recall leaves out: those off the branch the context is built for. For the active
    leaf, walked once per (thread, branch_epoch) and process; for another leaf, every time."""
    if leaf_id and leaf_id != thread.active_leaf_id:
        return off_branch_ids(thread=thread, leaf_id=leaf_id, before_seq=before_seq)
    key = (thread.pk, thread.branch_epoch)
    with _off_branch_lock:
        if key in _off_branch_cache:
            _off_branch_cache.move_to_end(key)
            return _off_branch_cache[key]
    # Leaf and epoch are read with the set (the thread may have moved since this build read it):
    # the set is stored under the epoch it belongs to.
    epoch, ids = off_branch_now(thread_pk=thread.pk)
    found = tuple(ids)
    if epoch is not None:
        with _off_branch_lock:
            _off_branch_cache[(thread.pk, epoch)] = found
            while len(_off_branch_cache) > _OFF_BRANCH_CACHE_SIZE:
                _off_branch_cache.popitem(last=False)
    return found


def relevant_turns(
    *, units: list[Unit], room: int, current_input: str, errors: list[dict[str, str]], complete: bool
) -> tuple[list[Unit], dict[str, int], set[str]]:
    """`relevant`: the turns most similar to the input that fit, in conversation order.

    1. Group units into turns (a user message and the replies and tool calls after it), so a
       reply never comes without its question nor a tool call without its result.
    2. Score each turn by the best cosine of its entries to the input (stored vectors; entries
       not embedded yet are embedded here, without storing).
    3. Take turns best first while they fit; output them in conversation order.
    Without input, or when the embedder fails (reported), it is the recent strategy.
    """
    candidates = units[-RELEVANT_CANDIDATES:]
    if not current_input.strip():
        run = recent_run(units, room, complete=complete)
        return run.units, run.notes, set()

    try:
        ok, message = vector_space_ok()
        if not ok:
            raise EmbedderError(message)
        similarity = _similarities([e for u in candidates for e in u.entries], current_input)
    except EmbedderError as exc:
        errors.append({"source": "relevance", "message": f"{exc}: fell back to the recent strategy"})
        run = recent_run(units, room, complete=complete)
        return run.units, run.notes, set()
    turns: list[list[Unit]] = []
    for unit in candidates:
        if not turns or (unit.first.role == Role.USER and unit.first.type == EntryType.MESSAGE):
            turns.append([unit])
        else:
            turns[-1].append(unit)
    # Candidates that begin inside a turn (the window or the candidate cut fell after its
    # question) begin with replies whose question is not here: they are never sent alone.
    cut_in_turn = bool(turns) and is_reply(turns[0][0].first) and not (complete and len(candidates) == len(units))
    orphans = turns.pop(0) if cut_in_turn else []
    scored = sorted(
        range(len(turns)),
        key=lambda i: (-max(similarity.get(e.id, 0.0) for u in turns[i] for e in u.entries), -i),
    )
    chosen: set[int] = set()
    used = 0
    for i in scored:
        cost = sum(u.cost for u in turns[i])
        if used + cost <= room:
            chosen.add(i)
            used += cost
    selected = [u for i in sorted(chosen) for u in turns[i]]
    candidate_ids = {e.id for u in candidates for e in u.entries} - {e.id for u in orphans for e in u.entries}
    not_selected = {e.id for u in units for e in u.entries if e.id not in candidate_ids}
    return selected, {}, not_selected


def _similarities(entries: list[Entry], text: str) -> dict[str, float]:
    """Cosine of each entry to the text: stored vectors in the database, missing ones embedded now."""

    if not entries:
        return {}
    query = embed_query(text)
    scores: dict[str, float] = {}
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, 1 - (embedding <=> %s::vector) FROM memoryapp_entry "
            "WHERE id = ANY(%s) AND embedding IS NOT NULL",
            [vector_literal(query), [e.id for e in entries]],
        )
        for entry_id, score in cursor.fetchall():
            scores[entry_id] = float(score)
    missing = [e for e in entries if e.id not in scores and (e.text or "").strip()]
    if missing:
        by_id = {e.id: e for e in entries}
        texts = [entry_embedding_text(entry=e, previous=by_id.get(e.parent_id or "")) for e in missing[-64:]]
        for entry, vector in zip(missing[-64:], embed_texts(texts), strict=True):
            scores[entry.id] = sum(a * b for a, b in zip(query, vector, strict=False))
    return scores


def mark_turn_ends(messages: list[dict[str, Any]]) -> None:
    """Cache breakpoints: the last message, and the last message of the turn before it."""
    if not messages:
        return
    messages[-1]["cache_breakpoint"] = True
    last_user = max((i for i, m in enumerate(messages) if m["role"] == Role.USER), default=None)
    if last_user is not None and last_user > 0 and last_user - 1 != len(messages) - 1:
        messages[last_user - 1]["cache_breakpoint"] = True

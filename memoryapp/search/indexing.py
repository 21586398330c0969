"""Background embedding of entries and items (owned by the recall area).

Entries are searchable by keyword the moment they are written (the tsvector is a generated
column) and by vector once this job has embedded them. The job is never on the request path:
`embedding_schedule` only enqueues it (after commit, debounced: while a run for the agent is
pending, more writes send nothing).

What is embedded for a turn is its *contextual* text: who said it, what they said, and for a
short turn ("Yes, last May!") the turn it answers, so the vector carries what the turn is about.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from memoryapp.models import Entry, MemoryItem
from memoryapp.models.choices import HISTORY_TYPES
from memoryapp.search.embedders import embed_texts
from memoryapp.search.space import vector_space_status
from memoryapp.search.vector import vector_literal

JOB_KIND = "embedding"
# pg_advisory_xact_lock(class, agent): one embedding batch of an agent at a time.
EMBED_LOCK_CLASS = 0x454D  # "EM"
# A turn shorter than this many characters is embedded with the turn before it.
SHORT_TURN_CHARS = 200
CONTEXT_CHARS = 300
MAX_EMBED_CHARS = 2000


def embedding_debounce_key(agent_id: int | None) -> str:
    return f"embed:{agent_id}"


def embedding_schedule(*, agent_id: int) -> None:
    """Send the embedding job for the agent's entries and items not embedded yet (debounced).

    Contract: called after commit by memoryapp.services.hooks on every write, so it costs one
    Redis round trip while a run is pending (governance.jobs.job_enqueue_debounced).
    """
    from governance.jobs import job_enqueue_debounced
    from memoryapp.tasks.embedding import embed_pending

    job_enqueue_debounced(
        kind=JOB_KIND,
        task=embed_pending,
        arguments={"agent_id": agent_id},
        agent_id=agent_id,
        debounce_key=embedding_debounce_key(agent_id),
        countdown=1.0,
    )


def speaker_of(*, role: str, sender_name: str, tool_name: str = "", type_: str = "message") -> str:
    if sender_name:
        return sender_name
    if type_ == "tool_result":
        return f"tool {tool_name}".strip()
    return role or "someone"


def entry_embedding_text(*, entry: Entry, previous: Entry | None) -> str:
    """`<speaker> said: <text>`, with the previous turn for a short one (see the module doc)."""
    text = (entry.text or "").strip()
    who = speaker_of(role=entry.role, sender_name=entry.sender_name, tool_name=entry.tool_name, type_=entry.type)
    line = f"{who} said: {text}"
    if previous is not None and len(text) < SHORT_TURN_CHARS and previous.text and not previous.redacted_at:
        before = speaker_of(
            role=previous.role, sender_name=previous.sender_name, tool_name=previous.tool_name, type_=previous.type
        )
        line = f"{line}\n(in reply to {before}: {previous.text.strip()[:CONTEXT_CHARS]})"
    return line[:MAX_EMBED_CHARS]


def item_embedding_text(item: MemoryItem) -> str:
    parts = [p for p in (item.subject, item.attribute) if p]
    head = " ".join(parts)
    return (f"{head}: {item.value}" if head else item.value)[:MAX_EMBED_CHARS]


def _pending_entries(agent_id: int | None, batch: int) -> list[Entry]:
    rows = Entry.objects.filter(type__in=HISTORY_TYPES, embedding__isnull=True, redacted_at__isnull=True).exclude(
        text=""
    )
    if agent_id is not None:
        rows = rows.filter(agent_id=agent_id)
    return list(
        rows.order_by("agent_id", "seq").only(
            "id", "agent_id", "thread_id", "parent_id", "seq", "type", "role", "text", "sender_name", "tool_name"
        )[:batch]
    )


def _pending_items(agent_id: int | None, batch: int) -> list[MemoryItem]:
    rows = MemoryItem.objects.filter(embedding__isnull=True).exclude(value="")
    if agent_id is not None:
        rows = rows.filter(agent_id=agent_id)
    return list(rows.order_by("recorded_at")[:batch])


def _parents(entries: list[Entry]) -> dict[str, Entry]:
    ids = [e.parent_id for e in entries if e.parent_id]
    rows = Entry.objects.filter(id__in=ids).only(
        "id", "type", "role", "text", "sender_name", "tool_name", "redacted_at"
    )
    return {e.id: e for e in rows}


def _store(
    table: str, pairs: list[tuple[str, list[float]]], *, overwrite: bool = False, live_only: bool = False
) -> int:
    """Write vectors; without `overwrite` only where the row has none (a second run writes nothing);
    with `live_only` never into a row redacted while its text was being embedded."""
    if not pairs:
        return 0
    condition = "" if overwrite else "AND t.embedding IS NULL"
    if live_only:
        condition += " AND t.redacted_at IS NULL"
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            UPDATE {table} AS t SET embedding = v.vec::vector, embedded_at = %s
              FROM unnest(%s::text[], %s::text[]) AS v(id, vec)
             WHERE t.id = v.id {condition}
            """,
            [timezone.now(), [p[0] for p in pairs], [vector_literal(p[1]) for p in pairs]],
        )
        return cursor.rowcount


def embed_entries_batch(entries: list[Entry], *, overwrite: bool = False) -> int:
    parents = _parents(entries)
    texts = [entry_embedding_text(entry=e, previous=parents.get(e.parent_id or "")) for e in entries]
    vectors = embed_texts(texts)
    pairs = list(zip([e.id for e in entries], vectors, strict=True))
    return _store(Entry._meta.db_table, pairs, overwrite=overwrite, live_only=True)


def embed_items_batch(items: list[MemoryItem], *, overwrite: bool = False) -> int:
    vectors = embed_texts([item_embedding_text(i) for i in items])
    return _store(
        MemoryItem._meta.db_table, list(zip([i.id for i in items], vectors, strict=True)), overwrite=overwrite
    )


def embed_pending(
    *, agent_id: int | None, progress: Callable[[int], None] | None = None, max_batches: int | None = None
) -> dict[str, Any]:
    """Embed every entry and item of the agent (all agents with None) that has no vector yet.

    1. Refuse (skip) when the stored vectors do not match the configured model.
    2. Entries in batches of EMBEDDING_BATCH_SIZE, oldest first, one batch of the agent at a time
       (an advisory lock: a concurrent run takes the next batch), written only where the vector
       is still NULL and the entry not redacted (a re-run writes nothing twice).
    3. Items the same way.
    Returns counts; raises EmbedderError for the job's retry policy.
    """
    status = vector_space_status()
    if not status.ok:
        return {"skipped": status.message, "entries": 0, "items": 0}
    batch = settings.EMBEDDING_BATCH_SIZE
    done = {"entries": 0, "items": 0}
    batches = 0
    seen: set[str] = set()

    def claim_and_embed(
        pending: Callable[[int | None, int], list[Any]], embed: Callable[[list[Any]], int]
    ) -> int | None:
        # One batch of an agent at a time (a transaction-level advisory lock, held until the vectors
        # are stored): a second run waits for the batch and then takes the next instead of embedding
        # the same rows twice. No row is locked, so writes, deletes and redactions never wait for
        # the model; what a redaction changed meanwhile is not written (`_store`).
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", [EMBED_LOCK_CLASS, (agent_id or 0) % 2**31])
            rows = [r for r in pending(agent_id, batch) if r.id not in seen]
            if not rows:
                return None
            seen.update(r.id for r in rows)
            return embed(rows)

    steps: list[tuple[str, Callable[[int | None, int], list[Any]], Callable[[list[Any]], int]]] = [
        ("entries", _pending_entries, embed_entries_batch),
        ("items", _pending_items, embed_items_batch),
    ]
    for kind, pending, embed in steps:
        while max_batches is None or batches < max_batches:
            count = claim_and_embed(pending, embed)
            if count is None:
                break
            done[kind] += count
            batches += 1
            if progress:
                progress(done["entries"] + done["items"])
    return {**done, "batches": batches}


def reembed_all(*, agent_id: int | None, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Re-embed every entry and item (of one agent, or all), overwriting vectors, in batches.

    Walks by primary key so a crash resumes anywhere without re-reading what is done twice in
    one run; rows written after the walk passed them are embedded by the normal job.
    """
    batch = settings.EMBEDDING_BATCH_SIZE
    done = 0
    entries_q = Entry.objects.filter(type__in=HISTORY_TYPES, redacted_at__isnull=True).exclude(text="")
    items_q = MemoryItem.objects.exclude(value="")
    if agent_id is not None:
        entries_q = entries_q.filter(agent_id=agent_id)
        items_q = items_q.filter(agent_id=agent_id)
    after = ""
    while True:
        entries = list(
            entries_q.filter(id__gt=after)
            .order_by("id")
            .only("id", "parent_id", "type", "role", "text", "sender_name", "tool_name")[:batch]
        )
        if not entries:
            break
        done += embed_entries_batch(entries, overwrite=True)
        after = entries[-1].id
        if progress:
            progress(done)
    after = ""
    while True:
        items = list(items_q.filter(id__gt=after).order_by("id")[:batch])
        if not items:
            break
        done += embed_items_batch(items, overwrite=True)
        after = items[-1].id
        if progress:
            progress(done)
    # Redacted entries keep no vector (derived memory goes with its source).
    Entry.objects.filter(Q(redacted_at__isnull=False) & Q(embedding__isnull=False)).update(
        embedding=None, embedded_at=None
    )
    return {"embedded": done}

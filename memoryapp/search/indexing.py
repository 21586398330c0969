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

from governance import locks
from governance.jobs.broker import job_enqueue, job_enqueue_debounced
from memoryapp.models import Entry, KnowledgeChunk, MemoryItem
from memoryapp.models.choices import HISTORY_TYPES
from memoryapp.search.embedders import embed_texts
from memoryapp.search.space import configured_space, space_claim, space_record, vector_space_status
from memoryapp.search.vector import vector_literal

JOB_KIND = "embedding"
# The job that runs `embed_pending` for one agent (memoryapp.tasks.embedding), sent by name.
JOB_TASK = "memoryapp.tasks.embed_pending"
# A turn shorter than this many characters is embedded with the turn before it.
SHORT_TURN_CHARS = 200
CONTEXT_CHARS = 300
MAX_EMBED_CHARS = 2000


def embedding_debounce_key(agent_id: int | None) -> str:
    return f"embed:{agent_id}"


def embedding_schedule(*, agent_id: int, debounced: bool = True) -> None:
    """Send the embedding job for the agent's entries and items not embedded yet.

    Contract: called after commit by memoryapp.threads.hooks on every write, so it costs one
    Redis round trip while a run is pending (governance.jobs.broker.job_enqueue_debounced). The sweep
    asks with `debounced=False`: Redis marks (lost, or left by a run that never started) are not
    consulted, the agent's queued run is reused (and sent if the broker never took it) or a new
    one is sent.
    """
    key = embedding_debounce_key(agent_id)
    if not debounced:
        job_enqueue(
            kind=JOB_KIND, task_name=JOB_TASK, arguments={"agent_id": agent_id}, agent_id=agent_id, dedupe_key=key
        )
        return
    job_enqueue_debounced(
        kind=JOB_KIND,
        task_name=JOB_TASK,
        arguments={"agent_id": agent_id},
        agent_id=agent_id,
        debounce_key=key,
        countdown=settings.EMBEDDING_DEBOUNCE_SECONDS or None,
    )


def embedding_sweep() -> list[int]:
    """Send the embedding job of every agent with entries or items not embedded yet (beat, every
    few minutes), so writes whose job could not be sent (a broker outage) are embedded anyway.

    The writes' Redis debounce marks are not consulted: a mark left by a run that never started
    must not keep an agent's entries without vectors. Returns the agents asked for.
    """
    pending_entries = Entry.objects.filter(
        Q(embedding__isnull=True), redacted_at__isnull=True, held_at__isnull=True, type__in=HISTORY_TYPES
    ).exclude(text="")
    agents = set(pending_entries.values_list("agent_id", flat=True).distinct()[:1000])
    agents |= set(
        MemoryItem.objects.filter(embedding__isnull=True).values_list("agent_id", flat=True).distinct()[:1000]
    )
    for agent_id in sorted(agents):
        embedding_schedule(agent_id=agent_id, debounced=False)
    return sorted(agents)


def speaker_of(*, role: str, sender_name: str, tool_name: str = "", type_: str = "message") -> str:
    if sender_name:
        return sender_name
    if type_ == "tool_result":
        return f"tool {tool_name}".strip()
    return role or "someone"


def embedding_context(*, entry: Entry, previous: Entry | None) -> Entry | None:
    """The turn whose words go into the entry's vector: the one before a short turn, unless redacted."""
    short = len((entry.text or "").strip()) < SHORT_TURN_CHARS
    if short and previous is not None and previous.text and not previous.redacted_at:
        return previous
    return None


def entry_embedding_text(*, entry: Entry, previous: Entry | None) -> str:
    """`<speaker> said: <text>`, with the previous turn for a short one (see the module doc)."""
    text = (entry.text or "").strip()
    who = speaker_of(role=entry.role, sender_name=entry.sender_name, tool_name=entry.tool_name, type_=entry.type)
    line = f"{who} said: {text}"
    context = embedding_context(entry=entry, previous=previous)
    if context is not None:
        before = speaker_of(
            role=context.role, sender_name=context.sender_name, tool_name=context.tool_name, type_=context.type
        )
        line = f"{line}\n(in reply to {before}: {context.text.strip()[:CONTEXT_CHARS]})"
    return line[:MAX_EMBED_CHARS]


def item_embedding_text(item: MemoryItem) -> str:
    parts = [p for p in (item.subject, item.attribute) if p]
    head = " ".join(parts)
    return (f"{head}: {item.value}" if head else item.value)[:MAX_EMBED_CHARS]


def _pending_entries(agent_id: int | None, batch: int, passed_over: set[str]) -> list[Entry]:
    # A held entry (memoryapp.screening) is sent to no model, the embedder included, until released.
    rows = Entry.objects.filter(
        type__in=HISTORY_TYPES, embedding__isnull=True, redacted_at__isnull=True, held_at__isnull=True
    ).exclude(text="")
    if agent_id is not None:
        rows = rows.filter(agent_id=agent_id)
    if passed_over:
        rows = rows.exclude(id__in=list(passed_over))
    return list(
        rows.order_by("agent_id", "seq").only(
            "id", "agent_id", "thread_id", "parent_id", "seq", "type", "role", "text", "sender_name", "tool_name"
        )[:batch]
    )


def _pending_items(agent_id: int | None, batch: int, passed_over: set[str]) -> list[MemoryItem]:
    rows = MemoryItem.objects.filter(embedding__isnull=True).exclude(value="")
    if agent_id is not None:
        rows = rows.filter(agent_id=agent_id)
    if passed_over:
        rows = rows.exclude(id__in=list(passed_over))
    return list(rows.order_by("recorded_at")[:batch])


def _parents(entries: list[Entry]) -> dict[str, Entry]:
    ids = [e.parent_id for e in entries if e.parent_id]
    rows = Entry.objects.filter(id__in=ids).only(
        "id", "type", "role", "text", "sender_name", "tool_name", "redacted_at"
    )
    return {e.id: e for e in rows}


def _store(
    table: str,
    pairs: list[tuple[str, list[float]]],
    *,
    overwrite: bool = False,
    live_only: bool = False,
    contexts: list[str | None] | None = None,
) -> set[str]:
    """Write vectors and answer the ids written; without `overwrite` only where the row has none (a
    second run writes nothing); with `live_only` never into a row redacted while its text was being
    embedded; with `contexts` (the entry whose words each vector also carries, see
    `embedding_context`) only while that entry is still the row's parent and not redacted: a
    redaction or a splice of the parent while the model ran clears the row's vector, and the words
    read before must not come back in (the row is passed over and embedded again from what remains).

    The rows are first locked in id order with SKIP LOCKED, and only those are updated: a row that a
    delete, a splice or a redaction holds is passed over instead of waited for. A plain multi-row
    UPDATE locks its rows in the order of its plan while a cascade deletes the same rows in its own
    order, and each ends up waiting for a row the other holds ("deadlock detected while deleting
    tuple"). This way the job never waits for a row lock, so it can be in no cycle; the rows it
    passed over are tried again later (`embed_pending`). NO KEY UPDATE is the lock the UPDATE takes
    anyway: it does not block the inserts of children that reference these rows (KEY SHARE).

    The claim and the UPDATE are one transaction of their own (a savepoint inside a caller's): a
    caller in autocommit (`reembed_all`) would otherwise end the claim's locks with its SELECT, and
    the UPDATE would wait, in its own order, for rows a cascade took in between.
    """
    if not pairs:
        return set()
    condition = "" if overwrite else "AND t.embedding IS NULL"
    if live_only:
        condition += " AND t.redacted_at IS NULL"
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT t.id FROM {table} AS t
             WHERE t.id = ANY(%s::text[]) {condition}
             ORDER BY t.id
               FOR NO KEY UPDATE SKIP LOCKED
            """,
            [[p[0] for p in pairs]],
        )
        claimed = {row[0] for row in cursor.fetchall()}
        if not claimed:
            return set()
        space_claim()
        chosen = [i for i, p in enumerate(pairs) if p[0] in claimed]
        columns: list[list[Any]] = [[pairs[i][0] for i in chosen], [vector_literal(pairs[i][1]) for i in chosen]]
        source, guard = "unnest(%s::text[], %s::text[]) AS v(id, vec)", ""
        if contexts is not None:
            columns.append([contexts[i] for i in chosen])
            source = "unnest(%s::text[], %s::text[], %s::text[]) AS v(id, vec, context)"
            guard = f"""
               AND (v.context IS NULL OR (t.parent_id = v.context AND NOT EXISTS (
                    SELECT 1 FROM {table} AS p WHERE p.id = v.context AND p.redacted_at IS NOT NULL)))"""
        cursor.execute(
            f"""
            UPDATE {table} AS t SET embedding = v.vec::vector, embedded_at = %s
              FROM {source}
             WHERE t.id = v.id {condition} {guard}
            RETURNING t.id
            """,
            [timezone.now(), *columns],
        )
        return {row[0] for row in cursor.fetchall()}


def embed_entries_batch(entries: list[Entry], *, overwrite: bool = False) -> set[str]:
    """Embed the entries; answers the ids whose vector was written (see `_store`)."""
    parents = _parents(entries)
    contexts = [embedding_context(entry=e, previous=parents.get(e.parent_id or "")) for e in entries]
    texts = [entry_embedding_text(entry=e, previous=c) for e, c in zip(entries, contexts, strict=True)]
    vectors = embed_texts(texts)
    pairs = list(zip([e.id for e in entries], vectors, strict=True))
    return _store(
        Entry._meta.db_table,
        pairs,
        overwrite=overwrite,
        live_only=True,
        contexts=[c.id if c is not None else None for c in contexts],
    )


def embed_items_batch(items: list[MemoryItem], *, overwrite: bool = False) -> set[str]:
    """Embed the items; answers the ids whose vector was written (see `_store`)."""
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
    3. A row that a delete, splice or redaction held while its batch was written is passed over
       (`_store`), and looked at once more when the other rows are done (the cascade has most
       likely committed by then: a deleted row is gone, a spliced one is embedded). What is still
       held then is left to the next run (the next write's, or the sweep's).
    4. Items the same way.
    5. A batch of fewer rows than EMBEDDING_BATCH_SIZE took every row pending when it read them, so
       no further look is made for rows written since (a transaction, its advisory lock and a read
       that found nothing, in every run): the run of those writes does it (its debounce mark is
       cleared as this run starts, so they sent one), or the sweep.
    Returns counts (`passed_over`: rows left to the next run); raises EmbedderError for the job's
    retry policy.
    """
    status = vector_space_status()
    if not status.ready:
        return {"skipped": status.message, "entries": 0, "items": 0}
    batch = settings.EMBEDDING_BATCH_SIZE
    done = {"entries": 0, "items": 0}
    batches = 0
    left_over = 0

    def claim_and_embed(
        pending: Callable[[int | None, int, set[str]], list[Any]],
        embed: Callable[[list[Any]], set[str]],
        passed_over: set[str],
    ) -> tuple[int, set[str], int] | None:
        # One batch of an agent at a time (a transaction-level advisory lock, held until the vectors
        # are stored): a second run waits for the batch and then takes the next instead of embedding
        # the same rows twice. Rows are locked only to write their vectors, and never waited for,
        # so writes, deletes and redactions never wait for the model (`_store`).
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s, %s)", locks.pair(locks.EMBEDDING, agent_id or 0))
            rows = pending(agent_id, batch, passed_over)
            if not rows:
                return None
            written = embed(rows)
            return len(written), {r.id for r in rows} - written, len(rows)

    steps: list[tuple[str, Callable[[int | None, int, set[str]], list[Any]], Callable[[list[Any]], set[str]]]] = [
        ("entries", _pending_entries, embed_entries_batch),
        ("items", _pending_items, embed_items_batch),
    ]
    for kind, pending, embed in steps:
        passed_over: set[str] = set()
        second_look = False
        while max_batches is None or batches < max_batches:
            outcome = claim_and_embed(pending, embed, passed_over)
            if outcome is None:
                if second_look or not passed_over:
                    break
                second_look, passed_over = True, set()  # step 3: once more, what was held
                continue
            count, held, read = outcome
            passed_over |= held
            done[kind] += count
            batches += 1
            if progress:
                progress(done["entries"] + done["items"])
            if read < batch:  # step 5: every row pending when it was read is taken
                if second_look or not passed_over:
                    break
                second_look, passed_over = True, set()
        left_over += len(passed_over)
    return {**done, "batches": batches, "passed_over": left_over}


def embed_chunks_batch(chunks: list[KnowledgeChunk]) -> set[int]:
    """Embed knowledge chunks again (their text as it was embedded when written); answers the ids
    written. As `_store`: the rows are claimed with SKIP LOCKED, so a document being replaced or
    deleted (its chunks deleted) is passed over, never waited for; a chunk deleted meanwhile is
    simply not there to update (a document's new text comes with new chunks)."""
    if not chunks:
        return set()
    vectors = embed_texts([c.text for c in chunks])
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH claimed AS (
                SELECT id FROM {KnowledgeChunk._meta.db_table}
                 WHERE id = ANY(%s::bigint[]) ORDER BY id FOR NO KEY UPDATE SKIP LOCKED
            )
            UPDATE {KnowledgeChunk._meta.db_table} AS t SET embedding = v.vec::vector
              FROM unnest(%s::bigint[], %s::text[]) AS v(id, vec)
             WHERE t.id = v.id AND t.id IN (SELECT id FROM claimed)
            RETURNING t.id
            """,
            [[c.pk for c in chunks], [c.pk for c in chunks], [vector_literal(v) for v in vectors]],
        )
        return {row[0] for row in cursor.fetchall()}


def reembed_all(*, agent_id: int | None, progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Re-embed every entry, item and knowledge-document chunk (of one agent, or all), overwriting
    vectors, in batches.

    Walks by primary key so a crash resumes anywhere without re-reading what is done twice in
    one run; rows written after the walk passed them are embedded by the normal job. Rows a
    cascade held while their batch was written (`_store`) are embedded again at the end; the
    count of those still held then is `passed_over` (run the command again for them).
    """
    batch = settings.EMBEDDING_BATCH_SIZE
    done = 0
    if agent_id is None:  # the record names the old model until every vector is moved (below)
        space_record(moving_to=configured_space())
    entries_q = Entry.objects.filter(type__in=HISTORY_TYPES, redacted_at__isnull=True, held_at__isnull=True).exclude(
        text=""
    )
    items_q = MemoryItem.objects.exclude(value="")
    chunks_q = KnowledgeChunk.objects.all()
    if agent_id is not None:
        entries_q = entries_q.filter(agent_id=agent_id)
        items_q = items_q.filter(agent_id=agent_id)
        chunks_q = chunks_q.filter(agent_id=agent_id)
    entry_fields = ("id", "parent_id", "type", "role", "text", "sender_name", "tool_name")
    held: dict[str, set[Any]] = {"entries": set(), "items": set(), "chunks": set()}

    def walk(kind: str, rows_after: Callable[[Any], list[Any]], embed: Callable[[list[Any]], set[Any]]) -> None:
        nonlocal done
        after: Any = 0 if kind == "chunks" else ""
        while rows := rows_after(after):
            written = embed(rows)
            done += len(written)
            held[kind] |= {r.id for r in rows} - written
            after = rows[-1].id
            if progress:
                progress(done)

    walk(
        "entries",
        lambda after: list(entries_q.filter(id__gt=after).order_by("id").only(*entry_fields)[:batch]),
        lambda rows: embed_entries_batch(rows, overwrite=True),
    )
    walk(
        "items",
        lambda after: list(items_q.filter(id__gt=after).order_by("id")[:batch]),
        lambda rows: embed_items_batch(rows, overwrite=True),
    )
    walk(
        "chunks",
        lambda after: list(chunks_q.filter(id__gt=after).order_by("id").only("id", "text")[:batch]),
        embed_chunks_batch,
    )
    # A second look at the held rows (a deleted one is gone by now, a spliced one is there).
    again = {kind: sorted(ids) for kind, ids in held.items()}
    held = {"entries": set(), "items": set(), "chunks": set()}
    walk(
        "entries",
        lambda after: list(
            entries_q.filter(id__in=again["entries"], id__gt=after).order_by("id").only(*entry_fields)[:batch]
        ),
        lambda rows: embed_entries_batch(rows, overwrite=True),
    )
    walk(
        "items",
        lambda after: list(items_q.filter(id__in=again["items"], id__gt=after).order_by("id")[:batch]),
        lambda rows: embed_items_batch(rows, overwrite=True),
    )
    walk(
        "chunks",
        lambda after: list(
            chunks_q.filter(id__in=again["chunks"], id__gt=after).order_by("id").only("id", "text")[:batch]
        ),
        embed_chunks_batch,
    )
    # Redacted entries keep no vector (derived memory goes with its source).
    Entry.objects.filter(Q(redacted_at__isnull=False) & Q(embedding__isnull=False)).update(
        embedding=None, embedded_at=None
    )
    if agent_id is None:
        space_record()
    return {"embedded": done, "passed_over": sum(len(ids) for ids in held.values())}

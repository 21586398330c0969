"""The vector space: which model and dimension the stored vectors were made with.

The vector columns are created with EMBEDDING_DIMENSIONS at migration time; a configured model
of another dimension cannot search them. That mismatch is reported (in /readyz and on search)
instead of failing each query with a database error.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone


@dataclass(frozen=True)
class VectorSpaceStatus:
    """`ok`: the vector channel may run (the dimensions match and the recorded model is the
    configured one or a close variant of it). `ready`: the dimensions match (what /readyz and the
    embedding job ask). `recorded` / `configured`: "embedder:model" (recorded None: nothing
    embedded yet). `stale`: the stored vectors are another model's (`reembed` moves them)."""

    ok: bool
    message: str
    column_dimensions: int | None
    configured_dimensions: int
    ready: bool = True
    recorded: str | None = None
    configured: str = ""
    stale: bool = False
    moving_to: str = ""


def space_name(embedder: str, model: str) -> str:
    return f"{embedder}:{model}"


def configured_space() -> str:
    return space_name(settings.EMBEDDER, settings.EMBEDDING_MODEL)


# Models whose vectors are close enough to be searched with one another's queries: all-MiniLM-L6-v2
# and its int8 variants (cosine of a turn's two vectors >= 0.95, median 0.99; LoCoMo recall within
# a point: docs/benchmarks.md). Any other pair of models (e5 and MiniLM, a remote model and a local
# one) makes unrelated vectors, even at the same dimension.
FAMILIES = {
    space_name("local", "all-MiniLM-L6-v2"): "all-MiniLM-L6-v2",
    space_name("local", "all-MiniLM-L6-v2-int8"): "all-MiniLM-L6-v2",
    space_name("local", "all-MiniLM-L6-v2-q8"): "all-MiniLM-L6-v2",
}


# The models whose vectors' sign bits were measured to find a thread's exact nearest turns
# (memoryapp.search.vector.quantized_read, issue 26: all-MiniLM-L6-v2-q8 on LoCoMo, the top 10 the
# exact top 10 for 995 of 999 questions). Another model's vectors are compared whole: a model whose
# dimensions all lean one way (a large mean component) gives bits that tell little apart (e5 small:
# the exact top 10 for 206 of the same 999 questions).
QUANTIZED_MODELS = frozenset(FAMILIES)


def same_family(a: str, b: str) -> bool:
    return a == b or (a in FAMILIES and FAMILIES.get(a) == FAMILIES.get(b))


def column_dimensions() -> int | None:
    """The dimension of the entries' vector column as the database has it."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT a.atttypmod FROM pg_attribute a
            JOIN pg_class c ON c.oid = a.attrelid
            WHERE c.relname = 'memoryapp_entry' AND a.attname = 'embedding' AND NOT a.attisdropped
            """
        )
        row = cursor.fetchone()
    return int(row[0]) if row and row[0] and row[0] > 0 else None


def recorded_space() -> tuple[str, str] | None:
    """(embedder:model, moving_to) of the stored vectors, None before anything was embedded."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT embedder, model, moving_to FROM memoryapp_vectorspace WHERE id = 1")
        row = cursor.fetchone()
    return (space_name(row[0], row[1]), row[2]) if row else None


def space_claim() -> None:
    """Record the configured model as the vectors' if nothing is recorded yet: called where a
    vector is written (the first one of a fresh database records its model). One statement,
    nothing written when a row exists."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO memoryapp_vectorspace (id, embedder, model, dimensions, recorded_at, moving_to)"
            " VALUES (1, %s, %s, %s, now(), '') ON CONFLICT (id) DO NOTHING",
            [settings.EMBEDDER, settings.EMBEDDING_MODEL, settings.EMBEDDING_DIMENSIONS],
        )


def space_record(*, embedder: str | None = None, model: str | None = None, moving_to: str = "") -> None:
    """Record what made the stored vectors (the configured model unless named), or, with
    `moving_to`, only that a reembed is moving them there (the recorded model stays)."""
    from memoryapp.models import VectorSpace

    with transaction.atomic():
        row = VectorSpace.objects.select_for_update().filter(pk=1).first()
        if moving_to:
            if row is None:  # nothing embedded yet: what the reembed writes is the configured model's
                space_record()
            else:
                row.moving_to, row.moving_since = moving_to, timezone.now()
                row.save(update_fields=["moving_to", "moving_since"])
            return
        VectorSpace.objects.update_or_create(
            pk=1,
            defaults={
                "embedder": embedder if embedder is not None else settings.EMBEDDER,
                "model": model if model is not None else settings.EMBEDDING_MODEL,
                "dimensions": column_dimensions() or settings.EMBEDDING_DIMENSIONS,
                "recorded_at": timezone.now(),
                "moving_to": "",
                "moving_since": None,
            },
        )


def vector_space_status() -> VectorSpaceStatus:
    configured_dimensions = settings.EMBEDDING_DIMENSIONS
    configured = configured_space()
    stored = column_dimensions()
    if stored is None:
        return VectorSpaceStatus(
            False, "the vector columns do not exist yet: run migrations", None, configured_dimensions, ready=False
        )
    if stored != configured_dimensions:
        return VectorSpaceStatus(
            False,
            f"stored vectors have {stored} dimensions but the configured embedder "
            f"({configured}) makes {configured_dimensions}: "
            "run `python manage.py reembed --dimensions` to rebuild the vectors",
            stored,
            configured_dimensions,
            ready=False,
            configured=configured,
        )
    found = recorded_space()
    recorded, moving_to = found if found else (None, "")
    here = f"{configured} ({configured_dimensions} dimensions)"
    if recorded is None or recorded == configured:
        return VectorSpaceStatus(
            True, here, stored, configured_dimensions, recorded=recorded, configured=configured, moving_to=moving_to
        )
    moving = (
        f"; a `reembed` to {moving_to} has not finished yet"
        if moving_to == configured
        else ": run `python manage.py reembed` to embed them again"
    )
    if same_family(recorded, configured):
        return VectorSpaceStatus(
            True,
            f"{here}; the stored vectors were made by {recorded}, a close variant: the vector channel"
            f" keeps searching them{moving}",
            stored,
            configured_dimensions,
            stale=True,
            recorded=recorded,
            configured=configured,
            moving_to=moving_to,
        )
    return VectorSpaceStatus(
        False,
        f"{here}; the stored vectors were made by {recorded}, another model: the vector channel is off"
        f" (search answers by keyword){moving}",
        stored,
        configured_dimensions,
        stale=True,
        recorded=recorded,
        configured=configured,
        moving_to=moving_to,
    )


# The vector columns and their HNSW indexes (names as declared in the models' Meta.indexes), and
# whether the table says when its row was embedded (`embedded_at`; a knowledge chunk is embedded
# as it is written, and again by `reembed`).
VECTOR_COLUMNS = (
    ("memoryapp_entry", "entry_embedding_hnsw", True),
    ("memoryapp_memoryitem", "item_embedding_hnsw", True),
    ("memoryapp_knowledgechunk", "knowledge_chunk_embedding_hnsw", False),
)

# The tables whose vectors are kept in the row (migration 0053): pgvector's type is STORAGE
# EXTERNAL, which put the vector of any row over ~2 kB in TOAST (an exact scan of a thread's
# vectors then read ~6 TOAST pages a row). MAIN moves the other columns out first; the target
# keeps a short row (vector, text, search_vector) whole.
INLINE_VECTOR_TABLES = ("memoryapp_entry", "memoryapp_memoryitem", "memoryapp_knowledgechunk")
TOAST_TUPLE_TARGET = 4080


# A thread's vectors read exactly (memoryapp.search.vector.read_exactly) come from an index of their
# own: the thread's embedded turns in seq order, with the columns that read needs (issue 26). An
# index-only scan of it reads the thread's vectors and nothing else, where the table's rows (~2.3 kB
# each: text, content, search_vector) cost a heap visit each: the exact read of a 10,000-entry
# thread 14 -> 8 ms of PostgreSQL CPU. Its predicate is the scope's (memoryapp.search.scope) so the
# planner can use it. It holds a copy of each vector (1.5 kB a turn at 384 dimensions): a B-tree
# row holds at most ~2.7 kB, so above THREAD_VECTORS_MAX_DIMENSIONS there is no such index and
# the thread is read from the table, as before.
THREAD_VECTORS_INDEX = "entry_thread_vectors_idx"
THREAD_VECTORS_MAX_DIMENSIONS = 600


def thread_vectors_indexed(dimensions: int) -> bool:
    return dimensions <= THREAD_VECTORS_MAX_DIMENSIONS


def thread_vectors_index_sql(dimensions: int, *, concurrently: bool = False) -> list[str]:
    """The statements that give the entries' vector column of `dimensions` its thread index (or
    drop it, above THREAD_VECTORS_MAX_DIMENSIONS), and its storage (`vector_storage_sql`), in this
    order: the index takes the column's storage as it is made.

    `concurrently`: each statement on its own, outside a transaction (a migration on a table in
    use): the storage's ACCESS EXCLUSIVE lock is a catalog change's moment, and the build reads
    every embedded entry while the service reads and writes them."""
    how = "CONCURRENTLY " if concurrently else ""
    if not thread_vectors_indexed(dimensions):
        return [f"DROP INDEX {how}IF EXISTS {THREAD_VECTORS_INDEX}", vector_storage_sql("memoryapp_entry", dimensions)]
    return [
        vector_storage_sql("memoryapp_entry", dimensions),
        f"CREATE INDEX {how}IF NOT EXISTS {THREAD_VECTORS_INDEX} ON memoryapp_entry (thread_id, seq)"
        " INCLUDE (agent_id, id, created_at, embedding)"
        " WHERE type IN ('message', 'tool_result') AND redacted_at IS NULL AND held_at IS NULL"
        " AND embedding IS NOT NULL",
    ]


# A compact copy of each entry's vector (issue 26, migration 0063): its sign bits,
# `binary_quantize(embedding)` (1 where a dimension is above 0: 48 bytes at 384 dimensions, a 32nd of
# the vector), written by a trigger at every write of the vector (the embedding job, `reembed`, an
# erasure's re-embedding, a redaction setting it NULL, a COPY), so no writer can leave it stale. A
# thread's nearest rows are found by comparing these bits (Hamming distance) over an index of the
# thread's bits, then the best candidates by their full vectors (memoryapp.search.vector): the
# thread's 10,000 bit strings fit in ~150 index pages where its vectors take ~2,000. The column is
# not a model field: the ORM never reads or writes it. Rows embedded before the migration have no
# bits until `vectors_quantize` (manage.py) fills them; the search compares those by their vectors.
QUANTIZED_COLUMN = "embedding_bits"
THREAD_BITS_INDEX = "entry_thread_bits_idx"
# The embedded entries without bits yet (rows from before migration 0063, until `vectors_quantize`):
# none once it has run, and none is ever added (the trigger fills the bits as the vector is written).
BITS_PENDING_INDEX = "entry_bits_pending_idx"
BITS_TRIGGER_FUNCTION = "memoryapp_entry_embedding_bits"


def embedding_bits_sql() -> list[str]:
    """The column, its trigger function and the two triggers (one statement each; each a
    catalog change: adding a nullable column without a default rewrites nothing)."""
    return [
        f"ALTER TABLE memoryapp_entry ADD COLUMN IF NOT EXISTS {QUANTIZED_COLUMN} bit varying",
        f"""CREATE OR REPLACE FUNCTION {BITS_TRIGGER_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                NEW.{QUANTIZED_COLUMN} := binary_quantize(NEW.embedding)::bit varying;
                RETURN NEW;
            END $$""",
        "DROP TRIGGER IF EXISTS entry_embedding_bits_insert ON memoryapp_entry",
        "CREATE TRIGGER entry_embedding_bits_insert BEFORE INSERT ON memoryapp_entry FOR EACH ROW"
        f" WHEN (NEW.embedding IS NOT NULL OR NEW.{QUANTIZED_COLUMN} IS NOT NULL)"
        f" EXECUTE FUNCTION {BITS_TRIGGER_FUNCTION}()",
        "DROP TRIGGER IF EXISTS entry_embedding_bits_update ON memoryapp_entry",
        # No WHEN comparing the vectors: pg_dump writes `IS DISTINCT FROM` without the schema of
        # pgvector's `=`, and a restore (search_path empty) then fails on the trigger (migration 0065).
        "CREATE TRIGGER entry_embedding_bits_update BEFORE UPDATE OF embedding, embedding_bits ON memoryapp_entry"
        f" FOR EACH ROW EXECUTE FUNCTION {BITS_TRIGGER_FUNCTION}()",
    ]


def thread_bits_index_sql(*, concurrently: bool = False) -> list[str]:
    """The thread index of the bits (the scope's fixed conditions as its predicate, as
    THREAD_VECTORS_INDEX) and the index of the rows still without bits."""
    how = "CONCURRENTLY " if concurrently else ""
    return [
        f"CREATE INDEX {how}IF NOT EXISTS {THREAD_BITS_INDEX} ON memoryapp_entry (thread_id, seq)"
        f" INCLUDE (agent_id, id, created_at, {QUANTIZED_COLUMN})"
        " WHERE type IN ('message', 'tool_result') AND redacted_at IS NULL AND held_at IS NULL"
        f" AND {QUANTIZED_COLUMN} IS NOT NULL",
        f"CREATE INDEX {how}IF NOT EXISTS {BITS_PENDING_INDEX} ON memoryapp_entry (thread_id)"
        f" WHERE embedding IS NOT NULL AND {QUANTIZED_COLUMN} IS NULL",
    ]


def vectors_quantize(*, agent_id: int | None = None, thread_id: int | None = None, batch: int = 500) -> int:
    """Fill the bits of the entries embedded before migration 0063, by primary key, `batch` rows a
    transaction (the trigger computes them: any write of the column does). Safe to stop and run
    again. Each row is a new version (an entry in each of the table's indexes, the HNSW one most
    of the cost). `thread_id` limits it to a thread's entries. Returns the rows written."""
    done, last = 0, None
    scope, params = "", []
    if agent_id is not None:
        scope, params = " AND agent_id = %s", [agent_id]
    if thread_id is not None:
        scope, params = scope + " AND thread_id = %s", [*params, thread_id]
    while True:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM memoryapp_entry WHERE embedding IS NOT NULL AND {QUANTIZED_COLUMN} IS NULL{scope}"
                + (" AND id > %s" if last is not None else "")
                + " ORDER BY id LIMIT %s",
                [*params, *([last] if last is not None else []), batch],
            )
            ids = [row[0] for row in cursor.fetchall()]
            if not ids:
                return done
            last = ids[-1]
            cursor.execute(
                f"UPDATE memoryapp_entry SET {QUANTIZED_COLUMN} = binary_quantize(embedding)::bit varying"
                f" WHERE id = ANY(%s) AND embedding IS NOT NULL AND {QUANTIZED_COLUMN} IS NULL",
                [ids],
            )
            done += cursor.rowcount


def vector_storage_sql(table: str, dimensions: int | None = None) -> str:
    """MAIN (see INLINE_VECTOR_TABLES); PLAIN for the entries' column when it has the thread index:
    an index's column takes its table column's storage, and a MAIN vector in an index row is
    compressed when it can be (the fake embedder's sparse vectors: 10 times smaller), then
    decompressed at every read of it (the thread's exact read 8 -> 25 ms). PLAIN never compresses
    the vector nor moves it out of the row; it is at most ~2.4 kB there."""
    storage = "MAIN"
    if table == "memoryapp_entry" and thread_vectors_indexed(
        dimensions if dimensions is not None else settings.EMBEDDING_DIMENSIONS
    ):
        storage = "PLAIN"
    return (
        f"ALTER TABLE {table} ALTER COLUMN embedding SET STORAGE {storage},"
        f" SET (toast_tuple_target = {TOAST_TUPLE_TARGET})"
    )


def vectors_inline(*, agent_id: int | None = None, thread_id: int | None = None, batch: int = 500) -> dict[str, int]:
    """Rewrite the vectors still in TOAST (rows written before migration 0053) into their rows:
    per table, the rows by primary key, `batch` at a time, each batch its own transaction. The
    value is rebuilt (`::real[]::vector`): `SET embedding = embedding` would keep the TOAST
    pointer. The same floats are written; each row is a new version (its indexes get an entry
    each, the HNSW one ~1-3 ms: VACUUM afterwards). `thread_id` limits it to a thread's entries.
    Returns the rows rewritten per table."""
    done: dict[str, int] = {}
    for table in INLINE_VECTOR_TABLES:
        if thread_id is not None and table != "memoryapp_entry":
            continue
        scope, params = "", []
        if agent_id is not None:
            scope += " AND agent_id = %s"
            params.append(agent_id)
        if thread_id is not None:
            scope += " AND thread_id = %s"
            params.append(thread_id)
        done[table], last = 0, None
        while True:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT id, pg_column_toast_chunk_id(embedding) IS NOT NULL FROM {table}"
                    f" WHERE embedding IS NOT NULL{scope}"
                    + (" AND id > %s" if last is not None else "")
                    + " ORDER BY id LIMIT %s",
                    [*params, *([last] if last is not None else []), batch],
                )
                rows = cursor.fetchall()
                if not rows:
                    break
                last = rows[-1][0]
                toasted = [row[0] for row in rows if row[1]]
                if toasted:
                    cursor.execute(
                        f"UPDATE {table} SET embedding = embedding::real[]::vector WHERE id = ANY(%s)", [toasted]
                    )
                    done[table] += cursor.rowcount
    return done


def vector_columns_resize(dimensions: int) -> None:
    """Give the vector columns another dimension: the stored vectors cannot be kept.

    1. Drop each HNSW index (an index is built for one dimension).
    2. ALTER the column to vector(dimensions), every vector set to NULL (and embedded_at too),
       so the embedding job sees every row as still to embed (knowledge chunks, which the job
       does not read, are embedded again by `reembed`, which the command runs next).
    3. Build the index again (on an empty column that is quick; the job fills it).
    Runs in one transaction: a failure leaves the old columns as they were.
    """

    if dimensions < 1 or dimensions > 16000:
        raise ValueError("dimensions must be between 1 and 16000")
    with transaction.atomic(), connection.cursor() as cursor:
        # Deferred constraint checks of this transaction would block ALTER TABLE: run them now.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        # The thread index holds vectors: it is made again for the new dimension, if it fits one.
        cursor.execute(f"DROP INDEX IF EXISTS {THREAD_VECTORS_INDEX}")
        # The bits' triggers name the column (a type change is refused while they do): made again after.
        cursor.execute("DROP TRIGGER IF EXISTS entry_embedding_bits_insert ON memoryapp_entry")
        cursor.execute("DROP TRIGGER IF EXISTS entry_embedding_bits_update ON memoryapp_entry")
        for table, index, dated in VECTOR_COLUMNS:
            cursor.execute(f"DROP INDEX IF EXISTS {index}")
            cursor.execute(
                f"ALTER TABLE {table} ALTER COLUMN embedding TYPE vector({int(dimensions)}) USING NULL::vector({int(dimensions)})"
            )
            if dated:
                cursor.execute(f"UPDATE {table} SET embedded_at = NULL WHERE embedded_at IS NOT NULL")
            if table == "memoryapp_entry":  # a rewrite by ALTER fires no trigger: the bits go with the vectors
                cursor.execute(f"UPDATE {table} SET {QUANTIZED_COLUMN} = NULL WHERE {QUANTIZED_COLUMN} IS NOT NULL")
            cursor.execute(
                f"CREATE INDEX {index} ON {table} USING hnsw (embedding vector_cosine_ops) "
                "WITH (m = 16, ef_construction = 64)"
            )
            # A new type is a new storage (EXTERNAL, pgvector's): the vector is kept in the row again.
            cursor.execute(vector_storage_sql(table, dimensions))
        for statement in thread_vectors_index_sql(dimensions):
            cursor.execute(statement)
        for statement in embedding_bits_sql():
            cursor.execute(statement)
        # No vector is left: every one written from now on is the configured model's.
        space_record()

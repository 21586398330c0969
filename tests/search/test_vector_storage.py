"""The vectors are kept in their rows (issue 26, migration 0053): pgvector's type is STORAGE
EXTERNAL, which moved the vector of any row over ~2 kB to TOAST, and an exact scan of a thread's
vectors then read ~6 TOAST pages per row (bench/context_build.py at 600,000 entries: the in-thread
hybrid search 2x slower). A later migration that changes the column (its type, e.g.
`reembed --dimensions`) resets its storage: these tests say so."""

from __future__ import annotations

import random
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from memoryapp.models import Entry
from memoryapp.search.space import INLINE_VECTOR_TABLES, TOAST_TUPLE_TARGET, vector_storage_sql
from tests.kit.crypto import encrypted  # noqa: F401  (the fixture)
from tests.kit.factories import ThreadFactory
from tests.kit.recall import embedded

WORDS = [
    "garden",
    "tomato",
    "basil",
    "harvest",
    "watering",
    "soil",
    "compost",
    "seed",
    "tulip",
    "spring",
    "morning",
    "rain",
    "dog",
    "walk",
    "leash",
    "vet",
    "treats",
    "friend",
    "work",
    "meeting",
    "budget",
    "report",
    "travel",
    "train",
    "ticket",
    "hotel",
    "dinner",
    "recipe",
    "oven",
    "flour",
]


def a_turn(words: int = 200) -> str:
    rng = random.Random(words)
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


def where_it_lives(entry_id: str) -> dict[str, Any]:
    """Whether each value of the row is in TOAST (its chunk id) and the vector's size."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_column_toast_chunk_id(embedding),"
            " pg_column_toast_chunk_id(text) IS NOT NULL OR pg_column_toast_chunk_id(content) IS NOT NULL,"
            " pg_column_size(embedding), text LIKE 'enc:v1:%%', pg_column_size(text), pg_column_size(content)"
            " FROM memoryapp_entry WHERE id = %s",
            [entry_id],
        )
        vector_chunk, sealed_toasted, vector_size, sealed, *sizes = cursor.fetchone()
    return {
        "vector_toasted": vector_chunk is not None,
        "text_or_content_toasted": sealed_toasted,
        "vector_size": vector_size,
        "sealed": sealed,
        "text_content_sizes": sizes,
    }


def test_the_vector_columns_are_stored_main_with_a_half_page_toast_target(db: None) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, a.attstorage, c.reloptions FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
            " WHERE a.attname = 'embedding' AND c.relname = ANY(%s) AND NOT a.attisdropped",
            [list(INLINE_VECTOR_TABLES)],
        )
        found = {name: (storage, options) for name, storage, options in cursor.fetchall()}
    # The entries' column is PLAIN at 384 dimensions: its copies in the thread index are never
    # compressed (migration 0059, memoryapp.search.space.vector_storage_sql).
    assert found == {
        table: ("p" if table == "memoryapp_entry" else "m", [f"toast_tuple_target={TOAST_TUPLE_TARGET}"])
        for table in INLINE_VECTOR_TABLES
    }


VECTOR_BYTES = 8 + 4 * 384  # header, dimensions and 384 floats


@pytest.mark.parametrize("words", [10, 60, 120, 200])
def test_a_sealed_turn_keeps_its_vector_in_the_row(encrypted: Any, alice: Any, words: int) -> None:  # noqa: F811
    thread = ThreadFactory(agent=alice.agent, turns=[("user", a_turn(words))])
    embedded(alice.agent)

    found = where_it_lives(Entry.objects.get(thread=thread).pk)
    assert found["sealed"] and not found["vector_toasted"] and found["vector_size"] == VECTOR_BYTES, repr(found)
    if words == 200:
        # ~1.9 kB of sealed text, as much of sealed content and the vector: over the target, the
        # text or the content went to TOAST, not the vector.
        assert found["text_or_content_toasted"], repr(found)


@pytest.mark.parametrize("words", [10, 60, 120])
def test_with_the_type_s_storage_a_turn_had_its_vector_in_toast(encrypted: Any, alice: Any, words: int) -> None:  # noqa: F811
    """What the migration changed: the same rows under pgvector's own storage (EXTERNAL). The
    vector was the row's largest value, the first moved out; a longer turn (200 words) had its
    sealed text and content moved out first when written, before its vector was added."""
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE memoryapp_entry ALTER COLUMN embedding SET STORAGE EXTERNAL, RESET (toast_tuple_target)"
        )
    thread = ThreadFactory(agent=alice.agent, turns=[("user", a_turn(words))])
    embedded(alice.agent)

    assert where_it_lives(Entry.objects.get(thread=thread).pk)["vector_toasted"]
    # The test's transaction rolls the storage back.


def test_vectors_inline_moves_the_vectors_written_before_into_their_rows(alice: Any) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "ALTER TABLE memoryapp_entry ALTER COLUMN embedding SET STORAGE EXTERNAL, RESET (toast_tuple_target)"
        )
    thread = ThreadFactory(agent=alice.agent, turns=[("user", a_turn(10)), ("assistant", a_turn(60))])
    embedded(alice.agent)
    before = {e.pk: list(e.embedding) for e in Entry.objects.filter(thread=thread)}
    toasted = [pk for pk in before if where_it_lives(pk)["vector_toasted"]]
    assert toasted
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the writes' deferred checks would block ALTER TABLE
        cursor.execute(vector_storage_sql("memoryapp_entry"))
        # What the command's rewrite avoids: an unchanged value keeps its TOAST pointer.
        cursor.execute("UPDATE memoryapp_entry SET embedding = embedding WHERE id = ANY(%s)", [toasted])
    assert all(where_it_lives(pk)["vector_toasted"] for pk in toasted)

    out = StringIO()
    call_command("vectors_inline", "--agent", alice.agent.slug, "--batch", "1", stdout=out)

    assert f"memoryapp_entry: {len(toasted)} vectors moved into their rows" in out.getvalue()
    assert not any(where_it_lives(pk)["vector_toasted"] for pk in before)
    assert {e.pk: list(e.embedding) for e in Entry.objects.filter(thread=thread)} == before

"""The vector space: which model and dimension the stored vectors were made with.

The vector columns are created with EMBEDDING_DIMENSIONS at migration time; a configured model
of another dimension cannot search them. That mismatch is reported (in /readyz and on search)
instead of failing each query with a database error.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.db import connection


@dataclass(frozen=True)
class VectorSpaceStatus:
    ok: bool
    message: str
    column_dimensions: int | None
    configured_dimensions: int


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


def vector_space_status() -> VectorSpaceStatus:
    configured = settings.EMBEDDING_DIMENSIONS
    stored = column_dimensions()
    if stored is None:
        return VectorSpaceStatus(False, "the vector columns do not exist yet: run migrations", None, configured)
    if stored != configured:
        return VectorSpaceStatus(
            False,
            f"stored vectors have {stored} dimensions but the configured embedder "
            f"({settings.EMBEDDER}:{settings.EMBEDDING_MODEL}) makes {configured}: "
            "run `python manage.py reembed --dimensions` to rebuild the vectors",
            stored,
            configured,
        )
    return VectorSpaceStatus(
        True, f"{settings.EMBEDDER}:{settings.EMBEDDING_MODEL} ({configured} dimensions)", stored, configured
    )

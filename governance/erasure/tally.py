"""What an erasure did to each table, as the database said it: rows deleted, redacted, cleared for
re-embedding, otherwise updated, inserted; vectors apart (a vector is a column of a row, not a row).

The erasure's steps count things by their own kinds (threads, items purged, file versions...), and
a sum of those mixed rows with their vectors and with edited rows. The report's table counts are
measured instead: `rows_tallied` wraps every statement the erasure sends on its connection
(`connection.execute_wrapper`) and reads the number of rows each DELETE, UPDATE and INSERT touched
(`cursor.rowcount`). A DELETE or UPDATE of a table with a vector column is preceded by a count of
the rows it will find holding a vector (the same WHERE, the same parameters).

A statement counts only if its transaction commits: each one is registered with
`transaction.on_commit`, so a batch rolled back (a lock conflict run again by `atomic_retrying`, a
savepoint rolled back) is not counted twice. Inside a transaction that has not committed yet (a
dry run, a test's transaction) the callbacks still waiting in `connection.run_on_commit` are counted
too: they are what that transaction did, and they leave that list when it rolls back.

What an UPDATE is: `redacted` when it sets a column of content (text, JSON, sealed), `re_embedded`
when it clears a row's vector so it is embedded again from what remains, `updated` otherwise
(links and marks: a fork's origin, an evidence's entry, a key's destruction time).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django.apps import apps
from django.db import connection, models, transaction

from memoryapp.search.space import QUANTIZED_COLUMN

# What `held_before` says instead of a data key id for values that are keyed pseudonyms only, and
# for values that are an equality column's keyed hash (`bh:<hex>`: an item's subject, an entity's
# normalised name, with encryption on): neither is plaintext, neither opens with a key.
PSEUDONYMS = "pseudonyms"
HASHES = "keyed hashes"
KINDS = ("deleted", "redacted", "re_embedded", "updated", "inserted")
VECTOR_KINDS = ("vectors_deleted", "vectors_cleared")
# Columns outside the models that copy a vector, per table (memoryapp.search.space: an entry's sign bits,
# written by a trigger from its vector).
VECTOR_COPIES: dict[str, tuple[str, ...]] = {"memoryapp_entry": (QUANTIZED_COLUMN,)}

_STATEMENT = re.compile(
    r'^\s*(?:(?P<delete>DELETE\s+FROM)|(?P<update>UPDATE)|(?P<insert>INSERT\s+INTO))\s+"?(?P<table>[A-Za-z_][\w]*)"?',
    re.IGNORECASE,
)
_SET_COLUMN = re.compile(r'(?:SET|,)\s*"?([A-Za-z_]\w*)"?\s*=', re.IGNORECASE)
_WHERE = re.compile(r"\sWHERE\s", re.IGNORECASE)


@dataclass(frozen=True)
class _Columns:
    content: frozenset[str]
    vectors: frozenset[str]
    # Columns outside the model that copy a vector (written by a trigger from it): a copy made before
    # the erasure keeps them as it keeps the vector, so they are counted with it.
    copies: frozenset[str] = frozenset()


@cache
def _columns_of_tables() -> dict[str, _Columns]:
    """For each table of the service's models: its columns of content and its vector columns."""
    from django.contrib.postgres.fields import ArrayField
    from pgvector.django import VectorField

    found: dict[str, _Columns] = {}
    for model in apps.get_models():
        meta = model._meta
        if meta.proxy or not meta.managed:
            continue
        content = frozenset(
            f.column
            for f in meta.concrete_fields
            if (
                isinstance(f, (models.CharField, models.TextField, models.JSONField))
                or (isinstance(f, ArrayField) and isinstance(f.base_field, (models.CharField, models.TextField)))
            )
            and not f.choices
            and not f.primary_key
            and f.column
        )
        vectors = frozenset(f.column for f in meta.concrete_fields if isinstance(f, VectorField) and f.column)
        copies = frozenset(VECTOR_COPIES.get(meta.db_table, ()))
        found[meta.db_table] = _Columns(content=content, vectors=vectors, copies=copies)
    return found


@dataclass
class _Counted:
    """One statement's rows, added to its tally when its transaction commits (an on_commit callback)."""

    tally: RowTally
    table: str
    kind: str
    rows: int
    vectors: int
    # What the rows held before the statement, per column: {(column, data key id or ""): rows}
    # ("" for plaintext): what a copy made before the erasure keeps of them.
    held: dict[tuple[str, str], int] = field(default_factory=dict)
    # The rows whose copies of a vector (`_Columns.copies`) the statement deleted or changed, per column.
    copies: dict[str, int] = field(default_factory=dict)
    ran: bool = False

    def __call__(self) -> None:
        if not self.ran:
            self.ran = True
            self.tally._add(self)


@dataclass
class RowTally:
    """The rows (and vectors) the wrapped statements touched, per table and kind."""

    _committed: list[_Counted] = field(default_factory=list)
    _sent: list[_Counted] = field(default_factory=list)
    _paused: int = 0

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Statements not counted: the job's own bookkeeping (its progress), not the erasure's."""
        self._paused += 1
        try:
            yield
        finally:
            self._paused -= 1

    def _add(self, counted: _Counted) -> None:
        self._committed.append(counted)

    def _pending(self) -> list[_Counted]:
        """Statements of the transaction still open (not committed, not rolled back)."""
        waiting = {id(entry[1]) for entry in getattr(connection, "run_on_commit", [])}
        return [c for c in self._sent if not c.ran and id(c) in waiting]

    def held_before(self) -> dict[tuple[str, str, str], int]:
        """{(table, column, data key id or "" for plaintext): rows} over the rows deleted or redacted:
        what their columns of content held before the erasure (a copy made before keeps that)."""
        out: dict[tuple[str, str, str], int] = {}
        for counted in [*self._committed, *self._pending()]:
            for (column, key), n in counted.held.items():
                out[(counted.table, column, key)] = out.get((counted.table, column, key), 0) + n
        return out

    def tables(self) -> dict[str, dict[str, int]]:
        """{table: {kind: rows, vectors_deleted, vectors_cleared}}, kinds with nothing left out."""
        out: dict[str, dict[str, int]] = {}
        for counted in [*self._committed, *self._pending()]:
            row = out.setdefault(counted.table, {})
            if counted.rows:
                row[counted.kind] = row.get(counted.kind, 0) + counted.rows
            if counted.vectors:
                kind = "vectors_deleted" if counted.kind == "deleted" else "vectors_cleared"
                row[kind] = row.get(kind, 0) + counted.vectors
        return {table: dict(sorted(kinds.items())) for table, kinds in sorted(out.items()) if kinds}

    def copies(self) -> dict[tuple[str, str], int]:
        """{(table, column): rows} whose copy of a vector (`_Columns.copies`) was deleted or changed."""
        out: dict[tuple[str, str], int] = {}
        for counted in [*self._committed, *self._pending()]:
            for column, n in counted.copies.items():
                out[(counted.table, column)] = out.get((counted.table, column), 0) + n
        return dict(sorted(out.items()))

    def __call__(self, execute: Callable[..., Any], sql: str, params: Any, many: bool, context: dict[str, Any]) -> Any:
        match = _STATEMENT.match(sql) if isinstance(sql, str) and not self._paused else None
        if match is None:
            return execute(sql, params, many, context)
        table = match.group("table")
        columns = _columns_of_tables().get(table, _Columns(frozenset(), frozenset()))
        cursor = context["cursor"]
        kind = "inserted"
        set_columns: set[str] = set()
        vectors = 0
        copies: dict[str, int] = {}
        # A statement naming its table by an alias is not counted for vectors (the WHERE says the alias).
        plain = not re.match(r'^\s*\S+(\s+FROM)?\s+"?\w+"?\s+AS\s', sql, re.IGNORECASE)
        if match.group("delete"):
            kind = "deleted"
            if columns.vectors and not many and plain:
                vectors, copies = _vectors_in(cursor, table, columns, columns.vectors, sql, params, set_part="")
        elif match.group("update"):
            head = _WHERE.split(sql, maxsplit=1)[0]
            set_columns = set(_SET_COLUMN.findall(head))
            if set_columns & columns.content:
                kind = "redacted"
            elif set_columns & columns.vectors:
                kind = "re_embedded"
            else:
                kind = "updated"
            if set_columns & columns.vectors and not many and plain:
                vectors, copies = _vectors_in(
                    cursor, table, columns, columns.vectors & set_columns, sql, params, set_part=head
                )
        held: dict[tuple[str, str], int] = {}
        if kind == "deleted" and columns.content and not many and plain:
            held = _held_in(cursor, table, columns.content, sql, params, set_part="")
        elif kind == "redacted" and not many and plain:
            held = _held_in(cursor, table, set_columns & columns.content, sql, params, set_part=head)
        result = execute(sql, params, many, context)
        rows = max(int(cursor.rowcount or 0), 0)
        if kind == "re_embedded" and not vectors:
            kind = "updated"  # a vector cleared where there was none: nothing to embed again
        if rows or vectors:
            counted = _Counted(self, table, kind, rows, vectors, held, copies)
            if connection.in_atomic_block:
                self._sent.append(counted)
                transaction.on_commit(counted)
            else:
                counted()
        return result


def _where_of(sql: str, params: Any, *, set_part: str) -> tuple[str, Any]:
    """The WHERE of a DELETE or UPDATE and its parameters (an UPDATE's SET parameters come first)."""
    parts = _WHERE.split(sql, maxsplit=1)
    where = parts[1] if len(parts) == 2 else "TRUE"
    if " RETURNING " in where.upper():
        where = where[: where.upper().rindex(" RETURNING ")]
    where_params: Any = params
    if set_part and isinstance(params, Sequence) and not isinstance(params, str):
        where_params = list(params)[set_part.replace("%%", "").count("%s") :]
    return where, where_params


def _held_in(
    cursor: Any, table: str, content: frozenset[str] | set[str], sql: str, params: Any, *, set_part: str
) -> dict[tuple[str, str], int]:
    """What the rows the statement will change hold in their columns of content, before it runs:
    per column, the rows holding something, by the data key it is sealed under ("" for plaintext,
    PSEUDONYMS for keyed pseudonyms only, HASHES for an equality column's keyed hash)."""
    if not content:
        return {}
    where, where_params = _where_of(sql, params, set_part=set_part)
    values = ", ".join(f'(\'{c}\', "{table}"."{c}"::text)' for c in sorted(content))
    # A value that is only keyed pseudonyms (a thread's participants with encryption on) is told
    # apart from plaintext: it names no one once the person's pseudonym secret is deleted. So is an
    # equality column's keyed hash: it confirms a guessed value only to the holder of the agent's key.
    key = (
        f"coalesce(substring(v.val from '^\"?enc:v1:([^:\"]+):'),"
        f" CASE WHEN v.val ~ '^[{{]?psn_[0-9a-f]{{24}}(,psn_[0-9a-f]{{24}})*[}}]?$' THEN '{PSEUDONYMS}'"
        f" WHEN v.val ~ '^bh:[0-9a-f]{{64}}$' THEN '{HASHES}' ELSE '' END)"
    )
    cursor.execute(
        f'SELECT v.col, {key}, count(*) FROM "{table}"'
        f" CROSS JOIN LATERAL (VALUES {values}) AS v(col, val)"
        f" WHERE ({where}) AND v.val IS NOT NULL AND v.val NOT IN ('', '\"\"', '{{}}', '[]', 'null')"
        " GROUP BY 1, 2",
        where_params,
    )
    return {(column, key): int(n) for column, key, n in cursor.fetchall()}


def _vectors_in(
    cursor: Any,
    table: str,
    columns: _Columns,
    vector_columns: frozenset[str] | set[str],
    sql: str,
    params: Any,
    *,
    set_part: str,
) -> tuple[int, dict[str, int]]:
    """How many rows the DELETE or UPDATE `sql` will find with a vector, and with each copy of a
    vector (`_Columns.copies`, which follow the vector): the same WHERE, counted in one statement.

    An UPDATE's parameters for its SET come first; those of its WHERE follow (`%s` counted in the
    SET part). A statement with no WHERE counts every row of the table."""
    where, where_params = _where_of(sql, params, set_part=set_part)
    having = " OR ".join(f'"{table}"."{c}" IS NOT NULL' for c in sorted(vector_columns))
    copies = sorted(columns.copies)
    counts = "".join(f', count("{table}"."{c}")' for c in copies)
    found = " OR ".join([having, *(f'"{table}"."{c}" IS NOT NULL' for c in copies)])
    cursor.execute(
        f'SELECT count(*) FILTER (WHERE {having}){counts} FROM "{table}" WHERE ({where}) AND ({found})', where_params
    )
    row = cursor.fetchone()
    if not row:
        return 0, {}
    return int(row[0]), {c: int(n) for c, n in zip(copies, row[1:], strict=True) if n}


@contextmanager
def rows_tallied() -> Iterator[RowTally]:
    """Count what the statements sent on this connection inside the block do (module docstring)."""
    tally = RowTally()
    with connection.execute_wrapper(tally):
        yield tally


def tally_totals(tables: dict[str, dict[str, int]]) -> dict[str, int]:
    """The sums over every table, per kind (rows) and vectors apart."""
    totals = dict.fromkeys((*KINDS, *VECTOR_KINDS), 0)
    for kinds in tables.values():
        for kind, n in kinds.items():
            totals[kind] = totals.get(kind, 0) + n
    return totals

"""The walk of a branch: one SQL builder for every reader that follows parent pointers.

A branch is an entry and its ancestors up to the root. Every reader of one (a page of history,
the context builder's window, "is this entry on that branch", the entries off it, the memory files
seen from a place) walks it with the same recursive CTE, built here:

    branch(id, parent_id, depth, <carried columns>)

starting at one entry of the thread `%(thread)s` (depth 0) and following `parent_id` within that
thread, nearest first. PostgreSQL evaluates a recursive CTE lazily, so a reader that stops early
(`LIMIT`, `EXISTS`) never reads the rest of the branch.

A thread that is one chain (`branch_epoch` 0: no write, rewind, checkout, import or prune ever made
a second branch) needs no walk: the branch up to one of its entries is the thread's entries up to
that entry's seq (seq grows from parent to child, and an entry written later takes a larger seq
than every entry there, so a branch made after the thread was read never lands below its leaf).
`chain_rows_sql` reads it as a range of `entry_thread_seq_uniq`, newest first: the rows a window
needs and no others, where the walk pays two index lookups a row (the parent's, then the row's).
"""

from __future__ import annotations

from collections.abc import Sequence

from memoryapp.threads.columns import ENTRY_TABLE

# The parameter a walk starts at, unless the caller gives an SQL expression of its own.
START = "%(start)s"


def branch_cte(*, start: str = START, carry: Sequence[str] = (), above_seq: str | None = None) -> str:
    """The CTE `branch(id, parent_id, depth, *carry)`, to follow `WITH RECURSIVE` (alone, or
    after or before other CTEs). `start` is an SQL expression naming the first entry; `carry`
    the further columns of Entry each row keeps (to filter on them while walking). With
    `above_seq` (an SQL expression), the walk stops at the first entry whose seq is not above it:
    seq grows from parent to child on every branch, so what lies beyond is older still."""
    names = "".join(f", {c}" for c in carry)
    carried = "".join(f", p.{c}" for c in carry)
    bound = f" AND seq > {above_seq}" if above_seq else ""
    parent_bound = f" AND p.seq > {above_seq}" if above_seq else ""
    return f"""branch(id, parent_id, depth{names}) AS (
        SELECT id, parent_id, 0{names} FROM {ENTRY_TABLE} WHERE id = {start} AND thread_id = %(thread)s{bound}
        UNION ALL
        SELECT p.id, p.parent_id, b.depth + 1{carried}
          FROM {ENTRY_TABLE} p JOIN branch b ON p.id = b.parent_id
         WHERE p.thread_id = %(thread)s{parent_bound}
    )"""


def branch_sql(select: str, *, start: str = START, carry: Sequence[str] = (), above_seq: str | None = None) -> str:
    """A whole statement: the walk, then `select` over `branch`."""
    return f"WITH RECURSIVE {branch_cte(start=start, carry=carry, above_seq=above_seq)}\n{select}"


def branch_rows_sql(
    *, columns: Sequence[str], types: bool, limit: bool, extra: Sequence[str] = (), carried: bool = False
) -> str:
    """The entries of a branch with `columns` (of Entry, as `e.<column>`), oldest first.

    With `types`, only entries whose type is in `%(types)s`; with `limit`, only the nearest
    `%(limit)s` of them, and the walk stops once it has found them. The walk is a chain (one
    parent each), so depth orders the rows. `extra`: SQL expressions selected after the columns
    on every row (uncorrelated ones are computed once, so a reader folds a lookup into its walk).
    With `carried`, the walk carries the columns itself instead of looking each row up again after
    it (half the index lookups; for few, small columns: the walk holds them in memory).
    """
    where = "WHERE b.type = ANY(%(types)s)" if types else ""
    nearest = "LIMIT %(limit)s" if limit else ""
    if carried:
        carry = [c for c in columns if c not in ("id", "parent_id")]
        carry += ["type"] if types and "type" not in carry else []
        selected = ", ".join([*(f"w.{c}" for c in columns), *extra])
        return branch_sql(
            f"SELECT {selected} FROM (SELECT * FROM branch b {where} {nearest}) w ORDER BY w.depth DESC", carry=carry
        )
    selected = ", ".join([*(f"e.{c}" for c in columns), *extra])
    return branch_sql(
        f"""SELECT {selected} FROM (SELECT b.id, b.depth FROM branch b {where} {nearest}) w
              JOIN {ENTRY_TABLE} e ON e.id = w.id
             ORDER BY w.depth DESC""",
        carry=("type",) if types else (),
    )


def chain_rows_sql(*, columns: Sequence[str], extra: Sequence[str] = ()) -> str:
    """`branch_rows_sql(types=True, limit=True)` for a thread that is one chain (see above): the
    nearest `%(limit)s` entries of `%(types)s` up to the entry `%(start)s` (included), **newest
    first**, read by a backward range of (thread, seq) that stops once it has them.

    `%(below)s`: the thread's next seq when it was seen to be one chain. A start written after that
    (the thread may have branched since) gives no row, and the caller walks instead."""
    selected = ", ".join([*(f"e.{c}" for c in columns), *extra])
    return f"""SELECT {selected} FROM {ENTRY_TABLE} e
             WHERE e.thread_id = %(thread)s AND e.type = ANY(%(types)s)
               AND e.seq <= (SELECT s.seq FROM {ENTRY_TABLE} s WHERE s.id = %(start)s AND s.thread_id = %(thread)s
                                AND s.seq < %(below)s)
             ORDER BY e.seq DESC LIMIT %(limit)s"""

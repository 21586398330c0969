"""What a search may see, as one SQL condition: applied before anything else is read.

Entries: the agent's messages and tool results that are not redacted, narrowed to a thread or
to the threads of a person, to those written by `as_of`, and (for recall) to those older than
the history a context keeps. Every channel (keyword, vector, neighbours) uses this one
condition, so no channel can reach another agent's rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class EntryScope:
    agent_id: int
    thread_pk: int | None = None
    user_id: str | None = None
    as_of: datetime | None = None
    before_seq: int | None = None  # only entries of the thread with a lower seq
    exclude_ids: tuple[str, ...] = field(default_factory=tuple)

    def where(self, alias: str = "e") -> tuple[str, dict[str, Any]]:
        """The condition over `memoryapp_entry AS alias` and its parameters (named, prefixed s_)."""
        clauses = [
            f"{alias}.agent_id = %(s_agent)s",
            f"{alias}.type IN ('message', 'tool_result')",
            f"{alias}.redacted_at IS NULL",
            # held by screening: out of search until a reviewer releases it
            f"{alias}.held_at IS NULL",
        ]
        params: dict[str, Any] = {"s_agent": self.agent_id}
        if self.thread_pk is not None:
            # bigint as the column: psycopg sends a small int as int2, and the GIN index that
            # holds thread ids (entry_search_thread_gin, btree_gin) has no int2 = int8 operator.
            clauses.append(f"{alias}.thread_id = %(s_thread)s::bigint")
            params["s_thread"] = self.thread_pk
        if self.user_id is not None:
            clauses.append(
                f"{alias}.thread_id IN (SELECT t.id FROM memoryapp_thread t "
                "WHERE t.agent_id = %(s_agent)s AND t.user_id = %(s_user)s)"
            )
            params["s_user"] = self.user_id
        if self.as_of is not None:
            clauses.append(f"{alias}.created_at <= %(s_as_of)s")
            params["s_as_of"] = self.as_of
        if self.before_seq is not None:
            clauses.append(f"{alias}.seq < %(s_before_seq)s")
            params["s_before_seq"] = self.before_seq
        if self.exclude_ids:
            clauses.append(f"NOT ({alias}.id = ANY(%(s_exclude)s))")
            params["s_exclude"] = list(self.exclude_ids)
        return " AND ".join(clauses), params

    @property
    def cache_key(self) -> tuple[Any, ...]:
        return (self.agent_id, self.thread_pk, self.user_id)

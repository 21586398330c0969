"""Where each consolidation pass of a scope stands (ConsolidationState): read it, and keep it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memoryapp.items.rules import Scope
from memoryapp.models import Agent, ConsolidationState

# A cursor over items: (the time they are ordered by, their id), as JSON [iso, id].
Cursor = tuple[datetime, str]


def state_of(*, agent: Agent, scope: Scope, kind: str, for_update: bool = False) -> ConsolidationState:
    """The state of one pass over exactly `scope` (an unsaved one when the pass never ran there).

    `for_update` locks the row (inside a transaction): two passes of one scope take turns.
    """
    rows = ConsolidationState.objects.filter(
        agent=agent, user_id=scope.user_id, project_id=scope.project_id, thread_id=scope.thread_id, pass_kind=kind
    )
    if for_update:
        ConsolidationState.objects.get_or_create(
            agent=agent, user_id=scope.user_id, project_id=scope.project_id, thread_id=scope.thread_id, pass_kind=kind
        )
        rows = rows.select_for_update()
    found = rows.first()
    if found is not None:
        return found
    return ConsolidationState(
        agent=agent, user_id=scope.user_id, project_id=scope.project_id, thread_id=scope.thread_id, pass_kind=kind
    )


def scope_of(row: Any) -> Scope:
    return Scope(user_id=row.user_id, project_id=row.project_id, thread_id=row.thread_id)


def cursor_read(value: Any) -> Cursor | None:
    if not isinstance(value, list) or len(value) != 2:
        return None
    try:
        return datetime.fromisoformat(str(value[0])), str(value[1])
    except ValueError:
        return None


def cursor_json(cursor: Cursor | None) -> list[str] | None:
    return [cursor[0].isoformat(), cursor[1]] if cursor is not None else None


def cursor_max(a: Cursor | None, b: Cursor | None) -> Cursor | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)

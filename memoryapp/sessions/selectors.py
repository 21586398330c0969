"""Reads of channel sessions: every query filtered by the agent first."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Q

from memoryapp.errors import DomainError, NotFound
from memoryapp.models import Agent, ChannelSession
from memoryapp.paging import Page, decode_cursor, encode_cursor
from memoryapp.storable import time_in_range

STATUSES = tuple(ChannelSession.Status.values)


def session_for_agent(*, agent: Agent, session_id: str) -> ChannelSession:
    """A session of the agent by id; another agent's or none: the same 404."""
    session = ChannelSession.objects.select_related("thread").filter(agent=agent, pk=session_id).first()
    if session is None:
        raise NotFound("Session")
    return session


def sessions_list(
    *,
    agent: Agent,
    user_id: str | None = None,
    status: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Page:
    """The agent's sessions, newest first, one page at a time (004 `list({ userId, status, limit })`).

    Keyset paging on (created_at, id); the cursor carries the filters it was made with, so the next
    page may be asked for with the cursor alone (other filters with it are a 400)."""
    if status is not None and status not in STATUSES:
        raise DomainError("invalid_value", f"status must be one of {', '.join(STATUSES)}.", field="status")
    filters = {"user_id": user_id, "status": status}
    position: tuple[datetime, str] | None = None
    if cursor:
        values = decode_cursor(cursor, keys=("c", "i", "f"))
        saved = values["f"]
        if not isinstance(saved, dict) or any(not isinstance(saved.get(k), str | None) for k in filters):
            raise DomainError("invalid_cursor", "The cursor is not one this service gave.", field="cursor")
        made_with = {k: saved.get(k) for k in filters}
        if any(v is not None for v in filters.values()) and filters != made_with:
            raise DomainError("invalid_cursor", "The cursor was made with other filters.", field="cursor")
        filters = made_with
        try:
            position = (time_in_range(datetime.fromisoformat(str(values["c"])), field="cursor"), str(values["i"]))
        except (ValueError, TypeError) as exc:
            raise DomainError("invalid_cursor", "The cursor is not one this service gave.", field="cursor") from exc
    rows = ChannelSession.objects.filter(agent=agent).select_related("thread")
    if filters["user_id"] is not None:
        rows = rows.filter(user_id=filters["user_id"])
    if filters["status"] is not None:
        rows = rows.filter(status=filters["status"])
    if position is not None:
        at, last_id = position
        rows = rows.filter(Q(created_at__lt=at) | Q(created_at=at, id__lt=last_id))
    found = list(rows.order_by("-created_at", "-id")[: limit + 1])
    next_cursor = None
    if len(found) > limit:
        found = found[:limit]
        last = found[-1]
        next_cursor = encode_cursor({"c": last.created_at.isoformat(), "i": last.pk, "f": filters})
    return Page(results=found, next_cursor=next_cursor)

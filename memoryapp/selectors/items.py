"""Reads of memory items (owned by the items area).

Contract used by the context builder (recall area):

    context_facts(*, agent, user_id="", project_id="", thread_id="", as_of=None) -> list[ContextFact]
        the active items the scope sees that hold at `as_of` (now by default), one state per slot
        (the one that started last, the narrowest scope on a tie), instructions and preferences
        first, then newest first; `text` is the line the `facts` partition shows, with
        "(previously: X)" for a replaced value the scope still sees.

    items_for_recall(*, agent, user_id="", project_id="", thread_id="", as_of=None) -> QuerySet[MemoryItem]
        the active items the scope sees that hold at `as_of`: hybrid recall searches within it.
        Suggested, rejected and stale items are never in either.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import QuerySet

from memoryapp.models import Agent, MemoryItem


@dataclass(frozen=True)
class ContextFact:
    item_id: str
    kind: str
    text: str


def context_facts(
    *, agent: Agent, user_id: str = "", project_id: str = "", thread_id: str = "", as_of: datetime | None = None
) -> list[ContextFact]:
    return []  # placeholder until the items area lands


def items_for_recall(
    *, agent: Agent, user_id: str = "", project_id: str = "", thread_id: str = "", as_of: datetime | None = None
) -> QuerySet[MemoryItem]:
    return MemoryItem.objects.none()  # placeholder until the items area lands

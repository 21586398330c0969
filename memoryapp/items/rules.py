"""The rules of memory items (004 "Memory Items"): scopes, how values compare, which source wins,
what becomes active on its own."""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q

from memoryapp.models.choices import TRUST_RANK, ItemStatus, Trust
from memoryapp.models.items import VALID_UNTIL_KEY as VALID_UNTIL_KEY  # kept in metadata; `end_given` for SQL
from memoryapp.models.items import name_normalized

# An item from `user` becomes active on its own only at this confidence or above (004 activationConfidence).
ACTIVATION_CONFIDENCE: float = float(getattr(settings, "ITEM_ACTIVATION_CONFIDENCE", 0.7))


# The states that take part in a slot's timeline; suggested, rejected and stale ones never do.
TIMELINE_STATUSES = (ItemStatus.ACTIVE, ItemStatus.SUPERSEDED)


_SPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Scope:
    user_id: str = ""
    project_id: str = ""
    thread_id: str = ""


def same_value(a: str, b: str) -> bool:
    """Values of a slot compare by text: spacing aside, case and signs count (004 sameValue)."""
    return collapse_spaces(a) == collapse_spaces(b)


def collapse_spaces(text: str) -> str:
    return _SPACE.sub(" ", text or "").strip()


def normalized_name(name: str) -> str:
    """The name an entity is matched on: lower-cased, spacing collapsed (the model's own, which its
    keyed hash with encryption on is computed from)."""
    return name_normalized(name)


def better_source(a: tuple[str, bool], b: tuple[str, bool]) -> tuple[str, bool]:
    """Of two (trust, verified) sources the better one: the more trusted first, then the one whose quotes hold."""
    rank_a, rank_b = TRUST_RANK[Trust(a[0])], TRUST_RANK[Trust(b[0])]
    if rank_a != rank_b:
        return a if rank_a < rank_b else b
    return a if a[1] or not b[1] else b


def activates(*, trust: str, verified: bool, confidence: float, shadow: bool = False) -> bool:
    """Whether an item becomes active on its own: from `system`, or from `user` with holding quotes at
    the activation confidence. In shadow mode nothing new does."""
    if shadow:
        return False
    if trust == Trust.SYSTEM:
        return True
    return trust == Trust.USER and verified and confidence >= ACTIVATION_CONFIDENCE


def visible_q(*, user_id: str = "", project_id: str = "", thread_id: str = "") -> Q:
    """What an access of scope (user, project, thread) sees: items not limited, or limited to it."""
    return Q(
        user_id__in=["", user_id or ""], project_id__in=["", project_id or ""], thread_id__in=["", thread_id or ""]
    )

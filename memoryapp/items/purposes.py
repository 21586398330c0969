"""Purpose-bound recall (GDPR art. 5(1)(b), purpose limitation; issue 25 §8).

An agent lists the purposes it collects memory for (`Agent.purposes`: short slugs such as
`support`, `marketing`); an item or fact may carry the purposes it was collected for
(`MemoryItem.purposes`). A search or a context that names a purpose recalls only the items of
that purpose or of none; without one, every item is recalled as before. The condition is
`purpose_q`, applied by the items' recall selectors (memoryapp.items.selectors), so every path
(REST search and context, the facts search, the MCP tools) obeys the same rule.

A purpose an agent takes off its list stays on the items that carry it (the record of why they
were collected), but can no longer be named: neither on a write nor on a recall (400).
"""

from __future__ import annotations

import re
from typing import Any

from django.db import transaction
from django.db.models import Q

from governance.audit.chain import audit_append
from memoryapp.errors import DomainError
from memoryapp.models import Agent

# A purpose is a short slug: lower-case letters, digits, `-` and `_`, starting with a letter.
PURPOSE_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
MAX_PURPOSES = 32


def purpose_q(purpose: str | None) -> Q:
    """The items a recall for `purpose` sees: those collected for it or for no purpose in particular
    (the GIN index `item_purposes_gin` serves the `@>`). No purpose: every item (an empty Q)."""
    if not purpose:
        return Q()
    return Q(purposes=[]) | Q(purposes__contains=[purpose])


def purposes_list_check(values: Any, *, field: str = "purposes") -> list[str]:
    """A list of purpose slugs, checked (400 naming `field` or `field[i]`), without repeats, in order."""
    if not isinstance(values, list):
        raise DomainError("invalid_type", f"{field} must be a list of purpose names.", field=field)
    if len(values) > MAX_PURPOSES:
        raise DomainError("invalid_value", f"{field} holds at most {MAX_PURPOSES} purposes.", field=field)
    checked: list[str] = []
    for index, value in enumerate(values):
        if not isinstance(value, str) or not PURPOSE_PATTERN.match(value):
            raise DomainError(
                "invalid_value",
                "A purpose is a short slug: a lower-case letter, then up to 31 letters, digits, - or _.",
                field=f"{field}[{index}]",
            )
        if value not in checked:
            checked.append(value)
    return checked


def item_purposes_check(*, agent: Agent, values: Any, field: str = "purposes") -> list[str]:
    """The purposes of an item or fact being written: each one of the agent's list (400 naming the
    field otherwise)."""
    if values is None:
        return []
    checked = purposes_list_check(values, field=field)
    allowed = set(agent.purposes or [])
    for index, value in enumerate(checked):
        if value not in allowed:
            raise DomainError(
                "unknown_purpose",
                f"{value!r} is not one of the agent's purposes (set them with PATCH /api/v1/settings/purposes).",
                field=f"{field}[{index}]",
            )
    return checked


def recall_purpose_check(*, agent: Agent, purpose: str | None) -> str:
    """The purpose a search or context names, checked against the agent's list ("" for none); an
    unknown one is a 400 naming `purpose`."""
    if purpose is None or purpose == "":
        return ""
    if not isinstance(purpose, str) or purpose not in (agent.purposes or []):
        raise DomainError(
            "unknown_purpose",
            "purpose must be one of the agent's purposes (GET /api/v1/settings/purposes).",
            field="purpose",
        )
    return purpose


def thread_purposes(*, agent: Agent, metadata: Any) -> list[str] | None:
    """The purposes extraction gives the items it draws from a thread: the thread's
    `metadata.purpose` when it is one of the agent's purposes (the conversation was held for it),
    else None (no purpose; a repeat keeps the purposes its item has). A purpose the agent does not
    list fails nothing: extraction runs in the background, after the thread was written."""
    purpose = metadata.get("purpose") if isinstance(metadata, dict) else None
    if isinstance(purpose, str) and purpose in (agent.purposes or []):
        return [purpose]
    return None


@transaction.atomic
def agent_purposes_set(*, agent: Agent, values: Any, actor: str) -> list[str]:
    """Replace the agent's purposes; audited with the names added and removed (slugs, no content)."""
    purposes = purposes_list_check(values)
    locked = Agent.objects.select_for_update().only("id", "purposes").get(pk=agent.pk)
    before = list(locked.purposes or [])
    Agent.objects.filter(pk=agent.pk).update(purposes=purposes)
    agent.purposes = purposes
    added = [p for p in purposes if p not in before]
    removed = [p for p in before if p not in purposes]
    if added or removed:
        audit_append(
            action="purposes.set",
            actor=actor,
            agent_id=agent.pk,
            subject=agent.slug,
            outcome="changed",
            details={"added": added, "removed": removed},
        )
    return purposes

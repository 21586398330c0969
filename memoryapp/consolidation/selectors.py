"""Reads of consolidation: which scopes have work, the drafts waiting, the stale marks, an entity's page.

Every agent query starts from the agent (the scopes of one agent); the admin's reads across
agents are for staff and filter by agent when one is chosen.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Max, Q, QuerySet

from memoryapp.consolidation.fold import PLAYBOOK_DRAFT_PATH, PLAYBOOK_PATH, parse_playbook, rule_lessons
from memoryapp.consolidation.observations import OBSERVATIONS_DIRECTORY, Observation, parse_observation
from memoryapp.consolidation.state import scope_of
from memoryapp.files.selectors import version_content, versions_for_agent
from memoryapp.items.rules import Scope
from memoryapp.items.selectors import holding_q, items_for_agent
from memoryapp.items.services import STALE_BY_DEDUPE
from memoryapp.models import Agent, Entity, Evidence, MemoryFileVersion, MemoryItem
from memoryapp.models.choices import ItemKind, ItemStatus

_SCOPE = ("user_id", "project_id", "thread_id")


def _scopes(rows: Any) -> list[Scope]:
    return [Scope(*row) for row in rows]


def dedupe_scopes(*, agent: Agent) -> list[tuple[Scope, datetime]]:
    """The exact scopes of the agent with active items about an entity, with their newest item's time."""
    rows = (
        items_for_agent(agent=agent)
        .filter(status=ItemStatus.ACTIVE, expired_at__isnull=True, namespace="", entity__isnull=False)
        .values(*_SCOPE)
        .annotate(newest=Max("recorded_at"))
        .values_list(*_SCOPE, "newest")
    )
    return [(Scope(u, p, t), newest) for u, p, t, newest in rows]


def fold_scopes(*, agent: Agent) -> list[Scope]:
    """Scopes a fold may have work in: those of active lessons, and those with a playbook or a draft."""
    lessons = (
        items_for_agent(agent=agent)
        .filter(kind=ItemKind.LESSON, status=ItemStatus.ACTIVE, expired_at__isnull=True)
        .values_list(*_SCOPE)
        .distinct()
    )
    files = versions_for_agent(agent=agent).filter(path__in=[PLAYBOOK_PATH, PLAYBOOK_DRAFT_PATH]).values_list(*_SCOPE)
    return sorted(
        set(_scopes(lessons)) | set(_scopes(files.distinct())), key=lambda s: (s.user_id, s.project_id, s.thread_id)
    )


def observation_scopes(*, agent: Agent) -> list[Scope]:
    """Scopes with facts about entities that hold now, and those with observation files."""
    facts = (
        items_for_agent(agent=agent)
        .filter(holding_q(), namespace="", entity__isnull=False)
        .exclude(kind=ItemKind.LESSON)
        .values_list(*_SCOPE)
        .distinct()
    )
    files = (
        versions_for_agent(agent=agent)
        .filter(path__startswith=OBSERVATIONS_DIRECTORY + "/")
        .values_list(*_SCOPE)
        .distinct()
    )
    return sorted(set(_scopes(facts)) | set(_scopes(files)), key=lambda s: (s.user_id, s.project_id, s.thread_id))


# --- the admin's reads ---------------------------------------------------------------------------


def drafts_waiting(*, agent_id: int | None = None) -> list[MemoryFileVersion]:
    """The playbook drafts that stand, one per agent and scope (the newest version, not a deletion)."""
    heads = MemoryFileVersion.objects.filter(path=PLAYBOOK_DRAFT_PATH)
    if agent_id is not None:
        heads = heads.filter(agent_id=agent_id)
    newest = (
        heads.defer("content")
        .select_related("agent")
        .order_by("agent_id", *_SCOPE, "-sequence")
        .distinct("agent_id", *_SCOPE)
    )
    return sorted((v for v in newest if v.sha256), key=lambda v: v.created_at, reverse=True)


@dataclass
class Quote:
    quote: str
    entry_id: str | None
    thread_pk: int | None
    entry_text: str
    holds: bool


@dataclass
class CitedLesson:
    item_id: str
    text: str
    trust: str
    status: str
    quotes: list[Quote] = field(default_factory=list)


@dataclass
class RuleChange:
    kind: str  # "added" | "rewritten" | "removed"
    rule: str
    old: str = ""
    lessons: list[CitedLesson] = field(default_factory=list)


@dataclass
class DraftReview:
    draft: MemoryFileVersion
    playbook: MemoryFileVersion | None
    draft_text: str
    playbook_text: str
    changes: list[RuleChange]


def draft_review(*, draft: MemoryFileVersion) -> DraftReview:
    """A draft beside the playbook its scope reads now, and each changed rule with the lessons it names
    and their quotes (the entries they stand in).

    A rule of the draft not in the playbook is added, or rewritten when it keeps a lesson of a
    playbook rule that is gone from the draft; a playbook rule gone and not rewritten is removed.
    """
    scope = scope_of(draft)
    playbook = (
        versions_for_agent(agent=draft.agent)
        .filter(path=PLAYBOOK_PATH)
        .filter(Q(user_id__in=["", scope.user_id]), Q(project_id__in=["", scope.project_id]))
        .filter(thread_id__in=["", scope.thread_id])
        .order_by("-sequence")
    )
    standing = _narrowest(list(playbook))
    playbook_text = version_content(standing) or "" if standing is not None else ""
    draft_text = version_content(draft) or ""
    old_rules, new_rules = parse_playbook(playbook_text), parse_playbook(draft_text)
    gone = [r for r in old_rules if r not in new_rules]
    changes: list[RuleChange] = []
    for rule in new_rules:
        if rule in old_rules:
            continue
        cited = set(rule_lessons(rule))
        replaced = next((g for g in gone if set(rule_lessons(g)) & cited), "")
        if replaced:
            gone.remove(replaced)
        changes.append(RuleChange(kind="rewritten" if replaced else "added", rule=rule, old=replaced))
    changes += [RuleChange(kind="removed", rule=r) for r in gone]
    lesson_ids = {i for c in changes for i in rule_lessons(c.rule)}
    lessons = _cited_lessons(agent=draft.agent, ids=lesson_ids)
    for change in changes:
        change.lessons = [lessons[i] for i in rule_lessons(change.rule) if i in lessons]
    return DraftReview(
        draft=draft, playbook=standing, draft_text=draft_text, playbook_text=playbook_text, changes=changes
    )


def _narrowest(versions: list[MemoryFileVersion]) -> MemoryFileVersion | None:
    """The head of the narrowest scope among versions (newest first), None when it is a deletion."""
    if not versions:
        return None
    best = max(versions, key=lambda v: (bool(v.thread_id), bool(v.project_id), bool(v.user_id), v.sequence))
    return best if best.sha256 else None


def _cited_lessons(*, agent: Agent, ids: set[str]) -> dict[str, CitedLesson]:
    found: dict[str, CitedLesson] = {}
    for item in items_for_agent(agent=agent).filter(pk__in=ids).defer("embedding", "search_vector"):
        head = f"{item.subject} {item.attribute}".strip()
        found[item.pk] = CitedLesson(
            item_id=item.pk, text=f"{head}: {item.value}" if head else item.value, trust=item.trust, status=item.status
        )
    for evidence in (
        Evidence.objects.filter(agent=agent, item_id__in=list(found))
        .select_related("entry")
        .defer("entry__embedding", "entry__search_vector")
        .order_by("created_at", "id")
    ):
        entry = evidence.entry
        found[evidence.item_id].quotes.append(
            Quote(
                quote=evidence.quote,
                entry_id=entry.pk if entry is not None else None,
                thread_pk=entry.thread_id if entry is not None else None,
                entry_text="[redacted]" if entry is not None and entry.redacted_at else (entry.text if entry else ""),
                holds=evidence.status == "verified",
            )
        )
    return found


def stale_by_dedupe(*, agent_id: int | None = None) -> QuerySet[MemoryItem]:
    """Items a dedupe pass marked stale (a reviewer may take the mark back), newest marks first."""
    # Who set the mark (metadata.stale_because.by) has a column of its own: the metadata is sealed.
    items = MemoryItem.objects.filter(status=ItemStatus.STALE, stale_by=STALE_BY_DEDUPE)
    if agent_id is not None:
        items = items.filter(agent_id=agent_id)
    return items.defer("embedding", "search_vector").order_by("-recorded_at")


@dataclass
class EntityPage:
    entity: Entity
    items: list[MemoryItem]
    observations: list[tuple[MemoryFileVersion, Observation | None]]


def entity_page(*, entity: Entity, limit: int = 300) -> EntityPage:
    """An entity with every item about it (newest first) and the observation files written about it
    in any scope (one written by a model is shown as such, never as an observation)."""
    items = list(
        items_for_agent(agent=entity.agent)
        .filter(entity=entity)
        .defer("embedding", "search_vector")
        .order_by("-recorded_at", "-id")[:limit]
    )
    files = (
        versions_for_agent(agent=entity.agent)
        .filter(path__startswith=OBSERVATIONS_DIRECTORY + "/", path__endswith=f"-{entity.pk}.md")
        .order_by(*_SCOPE, "path", "-sequence")
        .distinct(*_SCOPE, "path")
    )
    observations = [(v, parse_observation(v)) for v in files if v.sha256]
    return EntityPage(entity=entity, items=items, observations=observations)

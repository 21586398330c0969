"""Dedupe (004 `MemoryConsolidator.dedupe`): mark stale the items of one scope that repeat or
contradict another, as a model finds them and as code allows.

A subject is an entity with the entities its name or other names match (aliases), so "Ana" and
"Ana Silva" are one subject once either is known as the other. Subjects are looked at by the time
of their newest active item, oldest first; `since` (and `since_key`, for subjects whose newest items
tie) leaves out those with nothing newer. Nothing is deleted: an item dropped is `stale`, with why
in metadata.stale_because, and a reviewer may take the mark back.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from django.db import transaction
from django.db.models import Max

from governance.audit.chain import audit_append
from governance.crypto.fields import is_equality_hash
from memoryapp.consolidation.answers import ask
from memoryapp.consolidation.prompts import DEDUPE, ShownItem, ShownSubject, dedupe_message
from memoryapp.items.rules import Scope, collapse_spaces, normalized_name
from memoryapp.items.services import STALE_BY_DEDUPE, StaleMark, items_mark_stale
from memoryapp.models import Agent, Entity, MemoryItem
from memoryapp.models.choices import TRUST_RANK, ItemStatus, Trust
from memoryapp.prompts import prompt
from memoryapp.subjects.detect import entity_names_merged
from memoryapp.tokens import count_tokens

DEFAULT_MAX_CHANGES = 10
DEFAULT_MAX_SUBJECTS = 10
# Items of one subject shown at most (its newest): a subject larger than this is seen in part.
MAX_ITEMS_A_SUBJECT = 80
# Subjects are asked about together up to about this many tokens a call.
BATCH_TOKENS = 3000
ANSWER_MAX_TOKENS = 2000
REASONS = ("duplicate", "contradiction")
MAX_ALIASES = 50


class EntityName(NamedTuple):
    """What a subject needs of an entity: read as plain rows, since a pass reads every entity of the scope."""

    pk: str
    name: str
    normalized_name: str
    aliases: list[Any]


@dataclass
class Subject:
    key: str  # the smallest entity id of the subject: the tie-break of the order
    entities: list[EntityName]
    newest: datetime  # recorded_at of its newest active item
    items: list[MemoryItem] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.entities[0].name

    @property
    def aliases(self) -> list[str]:
        seen = {self.entities[0].normalized_name}
        names: list[str] = []
        for entity in self.entities:
            for name in [entity.name, *(a for a in entity.aliases or [] if isinstance(a, str))]:
                if normalized_name(name) not in seen:
                    seen.add(normalized_name(name))
                    names.append(name)
        return names


@dataclass(frozen=True)
class StaleReport:
    item_id: str
    kept_id: str
    reason: str


@dataclass
class DedupeOutcome:
    stale: list[StaleReport] = field(default_factory=list)
    # False when a cap (max_changes, max_subjects) or an unfinished answer stopped the pass.
    complete: bool = True
    # Every subject whose newest item is at or before (through, through_key) was looked at.
    through: datetime | None = None
    through_key: str = ""
    subjects: int = 0
    calls: int = 0
    unfinished: bool = False
    refused: list[dict[str, Any]] = field(default_factory=list)
    aliases_written: int = 0

    def as_result(self) -> dict[str, Any]:
        return {
            "stale": [{"item_id": s.item_id, "kept_id": s.kept_id, "reason": s.reason} for s in self.stale],
            "complete": self.complete,
            "through": self.through.isoformat() if self.through else None,
            "subjects": self.subjects,
            "calls": self.calls,
            "unfinished": self.unfinished,
            "refused": self.refused,
            "aliases_written": self.aliases_written,
            "prompt_version": DEDUPE,
        }


def _scope_items(*, agent: Agent, scope: Scope) -> Any:
    """The active items of exactly this scope that are about an entity (facts of 002 left out)."""
    return MemoryItem.objects.filter(
        agent=agent,
        user_id=scope.user_id,
        project_id=scope.project_id,
        thread_id=scope.thread_id,
        status=ItemStatus.ACTIVE,
        expired_at__isnull=True,
        namespace="",
        entity__isnull=False,
    )


def _clusters(entities: Iterable[EntityName]) -> list[list[EntityName]]:
    """Entities joined when a name or other name of one is a name or other name of another."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    by_name: dict[str, str] = {}
    listed = sorted(entities, key=lambda e: e.pk)
    for entity in listed:
        parent[entity.pk] = entity.pk
    for entity in listed:
        names = {entity.normalized_name} | {normalized_name(a) for a in entity.aliases or [] if isinstance(a, str)}
        for name in names:
            if not name:
                continue
            other = by_name.setdefault(name, entity.pk)
            if other != entity.pk:
                a, b = find(other), find(entity.pk)
                if a != b:
                    parent[max(a, b)] = min(a, b)
    groups: dict[str, list[EntityName]] = defaultdict(list)
    for entity in listed:
        groups[find(entity.pk)].append(entity)
    return list(groups.values())


def matched_name(normalized: str, name: str) -> str:
    """The name an entity is matched on: its column (kept by a staff rename, so items about the old
    name still find it), or, with encryption on, where the column holds a keyed hash no one can
    read, the name normalised."""
    return normalized_name(name) if not normalized or is_equality_hash(normalized) else normalized


def dedupe_subjects(*, agent: Agent, scope: Scope, since: datetime | None = None, since_key: str = "") -> list[Subject]:
    """The subjects of exactly the scope with an item recorded after `since` (after (since, since_key)
    when a key is given), the subject whose newest item is oldest first. Items are not loaded here.

    1. The newest active item of every entity of the scope, with its names (one aggregate query).
    2. Entities joined by their names and other names into subjects; a subject's newest item is
       the newest of its entities'.
    3. Subjects after the cursor, ordered by (newest, key).
    """
    rows = (
        _scope_items(agent=agent, scope=scope)
        .values("entity_id", "entity__name", "entity__normalized_name", "entity__aliases")
        .annotate(newest=Max("recorded_at"))
        .values_list("entity_id", "entity__name", "entity__normalized_name", "entity__aliases", "newest")
    )
    newest: dict[str, datetime] = {}
    entities: list[EntityName] = []
    for entity_id, name, normalized, aliases, at in rows:
        newest[entity_id] = at
        entities.append(EntityName(entity_id, name, matched_name(normalized, name), aliases))
    if not entities:
        return []
    subjects = []
    for cluster in _clusters(entities):
        subject = Subject(
            key=min(e.pk for e in cluster),
            # The entity with the newest item names the subject (the name in use now).
            entities=sorted(cluster, key=lambda e: (-newest[e.pk].timestamp(), e.pk)),
            newest=max(newest[e.pk] for e in cluster),
        )
        if since is not None:
            after = (subject.newest, subject.key) > (since, since_key) if since_key else subject.newest > since
            if not after:
                continue
        subjects.append(subject)
    subjects.sort(key=lambda s: (s.newest, s.key))
    return subjects


def _load_items(*, agent: Agent, scope: Scope, subjects: Sequence[Subject]) -> None:
    by_entity = {e.pk: s for s in subjects for e in s.entities}
    rows = (
        _scope_items(agent=agent, scope=scope)
        .filter(entity_id__in=list(by_entity))
        .only("id", "entity_id", "kind", "attribute", "value", "trust", "recorded_at", "metadata", "subject")
        .order_by("-recorded_at", "-id")
    )
    for row in rows:
        subject = by_entity[str(row.entity_id)]
        if len(subject.items) < MAX_ITEMS_A_SUBJECT:
            subject.items.append(row)
    for subject in subjects:
        subject.items.reverse()  # oldest first, as they were said


def _batches(subjects: Sequence[Subject]) -> list[list[Subject]]:
    batches: list[list[Subject]] = []
    used = 0
    for subject in subjects:
        cost = sum(count_tokens(i.value) + 20 for i in subject.items)
        if batches and used + cost <= BATCH_TOKENS:
            batches[-1].append(subject)
            used += cost
        else:
            batches.append([subject])
            used = cost
    return batches


@dataclass
class CheckedGroup:
    keep: MemoryItem
    drops: list[MemoryItem]
    reason: str
    subjects: set[int]  # positions (in the pass) of the subjects its items are about


def check_group(
    element: Any,
    *,
    shown: dict[str, MemoryItem],
    position: dict[str, int],
    dropped: set[str],
) -> tuple[CheckedGroup | None, list[dict[str, Any]]]:
    """What code lets a group of the model's answer do: (the group, what it refused and why).

    1. A group is {"keep": id, "drop": [ids], "reason": "duplicate" | "contradiction"}; anything
       else is refused.
    2. A group naming an item the model was not shown is refused whole.
    3. Each dropped item must not be more trusted than the kept one; for a contradiction it must
       have been said (recorded) before the kept one; an item a reviewer took back from stale is
       never dropped again. Items failing a check are kept, the rest of the group stands.
    """
    refused: list[dict[str, Any]] = []
    if not isinstance(element, dict):
        return None, [{"why": "not a group"}]
    keep_id, drop_ids, reason = element.get("keep"), element.get("drop"), element.get("reason")
    if isinstance(drop_ids, str):
        drop_ids = [drop_ids]
    if not isinstance(keep_id, str) or not isinstance(drop_ids, list) or not all(isinstance(d, str) for d in drop_ids):
        return None, [{"why": "not a group"}]
    named = [keep_id, *drop_ids]
    unknown = [i for i in named if i not in shown]
    if unknown:
        return None, [{"why": "names an item it was not shown", "ids": unknown[:10]}]
    if reason not in REASONS:
        return None, [{"why": "unknown reason", "keep": keep_id}]
    if keep_id in dropped:
        return None, [{"why": "keeps an item an earlier group dropped", "keep": keep_id}]
    keep = shown[keep_id]
    drops: list[MemoryItem] = []
    for drop_id in dict.fromkeys(drop_ids):
        item = shown[drop_id]
        if drop_id == keep_id or drop_id in dropped:
            continue
        if (item.metadata or {}).get("stale_undone"):
            refused.append({"why": "a reviewer took it back from stale", "item": drop_id})
        elif TRUST_RANK[Trust(keep.trust)] > TRUST_RANK[Trust(item.trust)]:
            refused.append({"why": "more trusted than the item kept", "item": drop_id, "keep": keep_id})
        elif reason == "contradiction" and not item.recorded_at < keep.recorded_at:
            refused.append({"why": "said after the item kept", "item": drop_id, "keep": keep_id})
        else:
            drops.append(item)
    if not drops:
        return None, refused
    subjects = {position[i.pk] for i in [keep, *drops]}
    return CheckedGroup(keep=keep, drops=drops, reason=reason, subjects=subjects), refused


def scope_dedupe(
    *,
    agent: Agent,
    scope: Scope,
    since: datetime | None = None,
    since_key: str = "",
    max_changes: int = DEFAULT_MAX_CHANGES,
    max_subjects: int = DEFAULT_MAX_SUBJECTS,
    actor: str = "job:consolidation",
) -> DedupeOutcome:
    """Look over the subjects of exactly `scope` after the cursor and mark stale what repeats or is contradicted.

    1. The subjects after (since, since_key), oldest newest-item first, at most `max_subjects`
       (more left: the pass is not complete).
    2. Their active items (the newest MAX_ITEMS_A_SUBJECT of each), asked about in batches of
       about BATCH_TOKENS, one call each.
    3. An answer the model did not finish stops the pass before the batch's first subject.
    4. Every group is checked (`check_group`); the groups are applied in the order of the last
       subject they touch, whole, until `max_changes` items are marked (`items_mark_stale`).
       A group that joins items of two entities writes the dropped entity's name as an other
       name of the kept one's, so the next pass sees one subject.
    5. `through` is the cursor of the last subject all of whose groups were applied: a later pass
       with since=through goes on from there.
    """
    outcome = DedupeOutcome(through=since, through_key=since_key)
    subjects = dedupe_subjects(agent=agent, scope=scope, since=since, since_key=since_key)
    if len(subjects) > max_subjects:
        subjects = subjects[:max_subjects]
        outcome.complete = False
    _load_items(agent=agent, scope=scope, subjects=subjects)
    offset = 0
    for batch in _batches(subjects):
        if len(outcome.stale) >= max_changes:
            outcome.complete = False
            return outcome
        position: dict[str, int] = {}
        shown: dict[str, MemoryItem] = {}
        for index, subject in enumerate(batch, start=offset):
            for item in subject.items:
                shown[item.pk] = item
                position[item.pk] = index
        answer = ask(
            system=prompt(DEDUPE).text,
            user=dedupe_message(
                [
                    ShownSubject(
                        name=s.name,
                        aliases=s.aliases,
                        items=[ShownItem(i.pk, i.kind, i.attribute, i.value, i.recorded_at, i.trust) for i in s.items],
                    )
                    for s in batch
                ]
            ),
            max_tokens=ANSWER_MAX_TOKENS,
        )
        outcome.calls += 1
        elements = answer.whole
        if elements is None:
            outcome.unfinished = True
            outcome.complete = False
            return outcome
        groups: list[CheckedGroup] = []
        dropped: set[str] = set()
        for element in elements:
            group, refused = check_group(element, shown=shown, position=position, dropped=dropped)
            outcome.refused.extend(refused)
            if group is not None:
                groups.append(group)
                dropped.update(i.pk for i in group.drops)
        groups.sort(key=lambda g: max(g.subjects))
        applied, stopped_at = _apply(groups, room=max_changes - len(outcome.stale), actor=actor)
        outcome.stale.extend(applied)
        if applied:
            outcome.aliases_written += _aliases_of(groups, applied, actor=actor)
        # The subjects done: all of this batch, or those before the first a group left out touches.
        last_done = offset + len(batch) - 1
        if stopped_at is not None:
            last_done = min(min(g.subjects) for g in groups[stopped_at:]) - 1
        if last_done >= 0:
            outcome.through, outcome.through_key = subjects[last_done].newest, subjects[last_done].key
        outcome.subjects = last_done + 1
        if stopped_at is not None:
            outcome.complete = False
            return outcome
        offset += len(batch)
    outcome.subjects = len(subjects)
    return outcome


def _apply(groups: list[CheckedGroup], *, room: int, actor: str) -> tuple[list[StaleReport], int | None]:
    """Mark the groups' items stale, whole groups only, while `room` lasts; (marked, index of the
    first group left out, or None)."""
    marks: list[StaleMark] = []
    stopped_at: int | None = None
    for index, group in enumerate(groups):
        drops = group.drops
        if len(marks) + len(drops) > room:
            stopped_at = index
            if marks:
                break
            # One group larger than the whole cap: its first items now, the rest asked about again.
            drops = drops[: max(0, room)]
        marks += [
            StaleMark(
                item_id=item.pk,
                because={
                    "by": STALE_BY_DEDUPE,
                    "reason": group.reason,
                    "kept": group.keep.pk,
                    "prompt_version": DEDUPE,
                },
            )
            for item in drops
        ]
        if stopped_at is not None:
            break
    marked = set(items_mark_stale(marks=marks, actor=actor)) if marks else set()
    reports = [
        StaleReport(item_id=m.item_id, kept_id=str(m.because["kept"]), reason=str(m.because["reason"]))
        for m in marks
        if m.item_id in marked
    ]
    return reports, stopped_at


@transaction.atomic
def _aliases_of(groups: list[CheckedGroup], applied: list[StaleReport], *, actor: str) -> int:
    """Where a group the pass applied dropped an item about another entity than the kept one's, that
    entity's name becomes an other name of the kept one's entity (004: aliases written when the
    model merges names). Returns how many names were added."""
    marked = {r.item_id for r in applied}
    wanted: dict[str, set[str]] = defaultdict(set)  # kept entity id -> dropped entity ids
    for group in groups:
        for item in group.drops:
            if item.pk in marked and item.entity_id and group.keep.entity_id and item.entity_id != group.keep.entity_id:
                wanted[str(group.keep.entity_id)].add(str(item.entity_id))
    if not wanted:
        return 0
    ids = set(wanted) | {e for es in wanted.values() for e in es}
    entities = {e.pk: e for e in Entity.objects.select_for_update().filter(pk__in=ids).order_by("pk")}
    added = 0
    for kept_id, others in wanted.items():
        kept = entities.get(kept_id)
        if kept is None:
            continue
        aliases = [a for a in kept.aliases or [] if isinstance(a, str)]
        known = {matched_name(kept.normalized_name, kept.name)} | {normalized_name(a) for a in aliases}
        new: list[str] = []
        for other_id in sorted(others):
            other = entities.get(other_id)
            if other is None:
                continue
            for name in [other.name, *(a for a in other.aliases or [] if isinstance(a, str))]:
                if normalized_name(name) not in known and len(aliases) + len(new) < MAX_ALIASES:
                    known.add(normalized_name(name))
                    new.append(collapse_spaces(name))
        if new:
            kept.aliases = [*aliases, *new]
            # Its other names now name whom the others named: sealed under their keys too.
            entity_names_merged(kept, [entities[o] for o in sorted(others) if o in entities])
            added += len(new)
            audit_append(
                action="entity.aliases_added",
                actor=actor,
                agent_id=kept.agent_id,
                subject=kept.pk,
                outcome="merged",
                details={"from_entities": sorted(others), "added": len(new)},
            )
    return added

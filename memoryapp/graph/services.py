"""Writes of the knowledge graph (004 "Knowledge Graph"): edges between entities, with quotes.

An edge (`Relation`) is `subject -[predicate]-> object` in a scope like a memory item's. It stands
on quotes of entries (`RelationEvidence`); said again, it merges into the edge it repeats (the
quotes added, the better source kept). Deleting or redacting a quoted entry takes the quote, and
an edge left with none goes (`relations_forget`, called by memoryapp.forgetting.lineage). Merging
two entities moves their items and edges to the one kept, quotes and all (`entity_merge`).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from governance.audit.chain import audit_append
from memoryapp.errors import DomainError, NotFound
from memoryapp.ids import person_id_check
from memoryapp.items.evidence import verify_evidence
from memoryapp.items.rules import Scope, better_source, collapse_spaces, normalized_name
from memoryapp.items.services import EvidenceInput, entity_for, evidence_checked
from memoryapp.models import Agent, Entity, Entry, MemoryItem, Relation, RelationEvidence, SubjectMention
from memoryapp.models.choices import EvidenceStatus, ItemStatus, Trust
from memoryapp.retry import atomic_retrying
from memoryapp.subjects.detect import entity_names_merged, key_people_set, mentions_record, rows_named
from memoryapp.subjects.erasing import senders_erasing_refuse

MAX_PREDICATE_CHARS = 200
MAX_NAME_CHARS = 300
# An entity keeps at most this many other names (memoryapp.consolidation.dedupe keeps as many).
MAX_ALIASES = 20
NO_SCOPE = Scope()


def predicate_normalized(predicate: str) -> str:
    """How a predicate is kept and compared: lower-cased, spacing collapsed ("Friend of" = "friend  of")."""
    return collapse_spaces(predicate).lower()


def _text(value: object, field_name: str, max_length: int) -> str:
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise DomainError("invalid_value", f"{field_name} must be a non-empty string.", field=field_name)
    value = collapse_spaces(value)
    if len(value) > max_length:
        raise DomainError("value_too_large", f"{field_name} holds at most {max_length} characters.", field=field_name)
    return value


@transaction.atomic
def relation_write(
    *,
    agent: Agent,
    subject: str,
    predicate: str,
    object: str,
    trust: str = Trust.MODEL,
    scope: Scope = NO_SCOPE,
    evidence: Sequence[EvidenceInput] = (),
    confidence: float | None = None,
    shadow: bool = False,
    prompt_version: str = "",
    actor: str = "",
) -> Relation:
    """Write one edge; returns it (new, or the one it merged into).

    1. Check the names, the predicate and every quote against its entry (loaded within the agent);
       an edge names two different entities.
    2. The entities are found by name in the scope as items find theirs (`entity_for`).
    3. The same edge in the same scope merges: the quotes added, the better source's trust and
       verified, the higher confidence, a suggested one activated when it now qualifies.
    4. Else a new edge: `active` when its quotes hold and it is not shadow mode, else `suggested`.

    In the scope of a person being erased: 409 `person_being_erased`, field `user_id`, nothing written.
    """
    subject = _text(subject, "subject", MAX_NAME_CHARS)
    object_name = _text(object, "object", MAX_NAME_CHARS)
    predicate = predicate_normalized(_text(predicate, "predicate", MAX_PREDICATE_CHARS))
    if normalized_name(subject) == normalized_name(object_name):
        raise DomainError("invalid_value", "An edge joins two different entities.", field="object")
    if trust not in Trust.values:
        raise DomainError("invalid_value", f"trust must be one of {', '.join(Trust.values)}.", field="trust")
    person_id_check(scope.user_id)
    if confidence is None:
        confidence = 1.0
    if isinstance(confidence, bool) or not isinstance(confidence, int | float) or not 0 <= confidence <= 1:
        raise DomainError("invalid_value", "confidence must be a number from 0 to 1.", field="confidence")
    checked = evidence_checked(agent=agent, evidence=evidence)
    if scope.user_id:
        # An edge of a person being erased is refused (409), as an item of her scope is: her
        # erasure took her entities and edges at one step, and the edge and the entities it makes
        # after it would outlive it (memoryapp.subjects.erasing, step 5). Her eraser lock held
        # shared to the end, so an erasure starting meanwhile waits and takes the edge.
        senders_erasing_refuse(agent_id=agent.pk, senders={scope.user_id: "user_id"}, what="memory")
    verified = bool(checked) and all(status == EvidenceStatus.VERIFIED for _, _, status in checked)
    head = entity_for(agent=agent, scope=scope, subject=subject)
    tail = entity_for(agent=agent, scope=scope, subject=object_name)
    if head.pk == tail.pk:
        raise DomainError("invalid_value", "An edge joins two different entities.", field="object")
    active = verified and not shadow
    edge = (
        Relation.objects.select_for_update()
        .filter(
            agent=agent,
            user_id=scope.user_id,
            project_id=scope.project_id,
            thread_id=scope.thread_id,
            subject=head,
            predicate=predicate,
            object=tail,
        )
        .first()
    )
    if edge is None:
        try:
            with transaction.atomic():
                edge = Relation.objects.create(
                    agent=agent,
                    user_id=scope.user_id,
                    project_id=scope.project_id,
                    thread_id=scope.thread_id,
                    subject=head,
                    predicate=predicate,
                    object=tail,
                    trust=trust,
                    status=ItemStatus.ACTIVE if active else ItemStatus.SUGGESTED,
                    confidence=float(confidence),
                    verified=verified,
                    prompt_version=prompt_version,
                )
            outcome = "written"
        except IntegrityError:  # a racing writer created it first: merge into theirs
            edge = Relation.objects.select_for_update().get(
                agent=agent,
                user_id=scope.user_id,
                project_id=scope.project_id,
                thread_id=scope.thread_id,
                subject=head,
                predicate=predicate,
                object=tail,
            )
            outcome = "merged"
    else:
        outcome = "merged"
    if outcome == "merged":
        edge.trust, edge.verified = better_source((edge.trust, edge.verified), (trust, verified))
        edge.confidence = max(edge.confidence, float(confidence))
        if edge.status == ItemStatus.SUGGESTED and active:
            edge.status = ItemStatus.ACTIVE
        edge.save(update_fields=["trust", "verified", "confidence", "status", "updated_at"])
    _add_evidence(relation=edge, checked=checked)
    audit_append(
        action=f"relation.{outcome}",
        actor=actor,
        agent_id=agent.pk,
        thread_id=scope.thread_id,
        person=scope.user_id,
        subject=edge.pk,
        outcome=edge.status,
        details={"subject_entity": head.pk, "object_entity": tail.pk, "quotes": len(checked)},
    )
    return edge


def _add_evidence(*, relation: Relation, checked: list[tuple[Entry | None, str, str]]) -> None:
    known: set[tuple[str | None, str]] = set(
        RelationEvidence.objects.filter(relation=relation).values_list("entry_id", "quote")
    )
    rows = []
    for entry, quote, status in checked:
        key = (entry.id if entry else None, quote)
        if key in known:
            continue
        known.add(key)
        rows.append(
            RelationEvidence(agent_id=relation.agent_id, relation=relation, entry=entry, quote=quote, status=status)
        )
    # A quote naming registered people besides the quoted turn's person is sealed under their keys
    # too (key_people), and is in the subject index from now (memoryapp.subjects.detect).
    table = SubjectMention.Table.RELATION_EVIDENCE
    named = rows_named(agent_id=relation.agent_id, rows=[(table, n, q) for n, q in enumerate(rows)])
    for n, q in enumerate(rows):
        if str(n) in named:
            key_people_set(q, named[str(n)])
    RelationEvidence.objects.bulk_create(rows)
    if named:
        mentions_record(
            agent_id=relation.agent_id,
            rows=[(table, q.pk, q) for q in rows],
            named={str(q.pk): named[str(n)] for n, q in enumerate(rows) if str(n) in named},
        )


# --- lineage ------------------------------------------------------------------------------------------


@dataclass
class GraphForgotten:
    """What `relations_forget` took: edges purged (no quote left) and trimmed (lost some)."""

    edges_purged: int = 0
    edges_trimmed: int = 0
    quotes_removed: int = 0
    entities_deleted: int = 0
    purged_ids: list[str] = field(default_factory=list)


def relations_forget(*, agent: Agent, entry_ids: Collection[str]) -> GraphForgotten:
    """The edges quoting these entries lose those quotes (call inside the cascade's transaction).

    1. Lock the edges quoting them (id order), delete the quotes (a quote is content: it does not
       outlive a redaction).
    2. An edge left with no quote is purged; the others are verified again (every quote left holds).
    3. The entities of purged edges that no item and no edge is about any more are deleted.
    """
    report = GraphForgotten()
    ids = list(entry_ids)
    touched = sorted(
        set(RelationEvidence.objects.filter(agent=agent, entry_id__in=ids).values_list("relation_id", flat=True))
    )
    if not touched:
        return report
    edges = list(
        Relation.objects.select_for_update().filter(agent=agent, pk__in=touched).order_by("pk").only("id", "verified")
    )
    report.quotes_removed, _ = RelationEvidence.objects.filter(agent=agent, entry_id__in=ids).delete()
    quoted = set(
        RelationEvidence.objects.filter(agent=agent, relation_id__in=touched).values_list("relation_id", flat=True)
    )
    purged = [e.pk for e in edges if e.pk not in quoted]
    trimmed = [e for e in edges if e.pk in quoted]
    if purged:
        ends = set(Relation.objects.filter(pk__in=purged).values_list("subject_id", "object_id"))
        Relation.objects.filter(agent=agent, pk__in=purged).delete()
        report.edges_purged, report.purged_ids = len(purged), purged
        report.entities_deleted = entities_unused_delete(agent=agent, entity_ids={i for pair in ends for i in pair})
    if trimmed:
        report.edges_trimmed = len(trimmed)
        _verify_again(agent=agent, edges=trimmed)
    return report


def _verify_again(*, agent: Agent, edges: list[Relation]) -> None:
    holds: dict[str, bool] = {}
    for quote in RelationEvidence.objects.filter(agent=agent, relation__in=edges).select_related("entry"):
        status = verify_evidence(quote.quote, quote.entry)  # type: ignore[arg-type]
        if status != quote.status:
            RelationEvidence.objects.filter(pk=quote.pk).update(status=status)
        holds[quote.relation_id] = holds.get(quote.relation_id, True) and status == EvidenceStatus.VERIFIED
    for edge in edges:
        verified = holds.get(edge.pk, False)
        if verified != edge.verified:
            Relation.objects.filter(pk=edge.pk).update(verified=verified)


def entities_in_use(*, agent_id: int, entity_ids: Collection[str]) -> set[str]:
    """Of these entities, those an item or an edge is about (a cascade keeps them)."""
    ids = list(entity_ids)
    used = set(MemoryItem.objects.filter(agent_id=agent_id, entity_id__in=ids).values_list("entity_id", flat=True))
    for head, tail in Relation.objects.filter(
        Q(subject_id__in=ids) | Q(object_id__in=ids), agent_id=agent_id
    ).values_list("subject_id", "object_id"):
        used.update((head, tail))
    return {i for i in used if i in set(ids)}


def entities_unused_delete(*, agent: Agent, entity_ids: Collection[str]) -> int:
    """Delete those of these entities no item and no edge is about; returns how many went."""
    if not entity_ids:
        return 0
    unused = set(entity_ids) - entities_in_use(agent_id=agent.pk, entity_ids=entity_ids)
    if not unused:
        return 0
    return Entity.objects.filter(agent=agent, pk__in=list(unused)).delete()[1].get("memoryapp.Entity", 0)


def scope_relations_delete(*, agent_id: int, user_id: str = "", thread_id: str = "") -> int:
    """The edges kept for one person's scope, or one thread's alone (erasure, a thread's delete)."""
    if not user_id and not thread_id:
        return 0
    rows = Relation.objects.filter(agent_id=agent_id)
    rows = rows.filter(user_id=user_id) if user_id else rows.filter(thread_id=thread_id)
    return rows.delete()[1].get("memoryapp.Relation", 0)


def entity_relations_delete(*, agent_id: int, entities: Any) -> int:
    """The edges about these entities (a queryset or ids), before the entities are deleted: the
    caller's count of entities then counts entities only."""
    rows = Relation.objects.filter(Q(subject__in=entities) | Q(object__in=entities), agent_id=agent_id)
    return rows.delete()[1].get("memoryapp.Relation", 0)


# --- merging entities -------------------------------------------------------------------------------


@atomic_retrying
def entity_merge(*, agent: Agent, keep: Entity, merged: Entity, actor: str = "") -> Entity:
    """Fold `merged` into `keep` (004 mergeNodes keeps the evidence of the merged nodes).

    1. Both entities of the agent and different (404 / 400 otherwise); locked in id order.
    2. Items about `merged` are about `keep` now (their quotes stay with them).
    3. Each edge of `merged` is re-pointed to `keep`; where `keep` already has that edge in that scope,
       the quotes move to it and the duplicate goes; an edge that would join `keep` to itself goes
       with its quotes moved nowhere (it said nothing about two entities any more).
    4. `merged`'s name and other names become other names of `keep`; `merged` is deleted.
    5. The subject index follows, in this transaction: `merged`'s mentions go with its row (the
       trigger of migration 0055), `keep`'s are found again in its names (`entity_names_merged`), so
       a person either named is indexed on `keep` once, as the rebuild would find her.

    Its locks go entities, then index rows (the trigger's, then `keep`'s); a writer taking them
    the other way round (an erasure of someone either names) may still meet it in a deadlock, so
    it runs again when it was the one aborted (`atomic_retrying`; inside a caller's transaction,
    such as the rotation's walk, once).
    """
    if keep.agent_id != agent.pk or merged.agent_id != agent.pk:
        raise NotFound("The entity", field="entity_id")
    if keep.pk == merged.pk:
        raise DomainError("invalid_value", "An entity is not merged into itself.", field="merged_id")
    locked = {e.pk: e for e in Entity.objects.select_for_update().filter(pk__in=[keep.pk, merged.pk]).order_by("pk")}
    keep, merged = locked[keep.pk], locked[merged.pk]
    items_moved = MemoryItem.objects.filter(agent=agent, entity=merged).update(entity=keep)
    moved = folded = 0
    for edge in (
        Relation.objects.select_for_update().filter(Q(subject=merged) | Q(object=merged), agent=agent).order_by("pk")
    ):
        head = keep.pk if edge.subject_id == merged.pk else edge.subject_id
        tail = keep.pk if edge.object_id == merged.pk else edge.object_id
        twin = None
        if head != tail:
            twin = (
                Relation.objects.filter(
                    agent=agent,
                    user_id=edge.user_id,
                    project_id=edge.project_id,
                    thread_id=edge.thread_id,
                    subject_id=head,
                    predicate=edge.predicate,
                    object_id=tail,
                )
                .exclude(pk=edge.pk)
                .first()
            )
        if head == tail:
            edge.delete()
            folded += 1
        elif twin is not None:
            RelationEvidence.objects.filter(relation=edge).update(relation=twin)
            twin.verified = twin.verified and edge.verified
            twin.confidence = max(twin.confidence, edge.confidence)
            if edge.status == ItemStatus.ACTIVE:
                twin.status = ItemStatus.ACTIVE
            twin.save(update_fields=["verified", "confidence", "status", "updated_at"])
            edge.delete()
            folded += 1
        else:
            Relation.objects.filter(pk=edge.pk).update(subject_id=head, object_id=tail)
            moved += 1
    aliases = [a for a in keep.aliases or [] if isinstance(a, str)]
    known = {normalized_name(keep.name)} | {normalized_name(a) for a in aliases}
    for name in [merged.name, *(a for a in merged.aliases or [] if isinstance(a, str))]:
        if normalized_name(name) not in known and len(aliases) < MAX_ALIASES:
            known.add(normalized_name(name))
            aliases.append(collapse_spaces(name))
    merged_id = merged.pk
    merged.delete()
    keep.aliases = aliases
    # Its other names now name whom the merged one named: sealed under their keys too.
    entity_names_merged(keep, [merged])
    audit_append(
        action="entity.merged",
        actor=actor,
        agent_id=agent.pk,
        subject=keep.pk,
        outcome="merged",
        details={"merged_entity": merged_id, "items": items_moved, "edges_moved": moved, "edges_folded": folded},
    )
    return keep


def entity_collision_merge(keep_id: str, merged_id: str) -> None:
    """Fold an entity into another of its name in its scope that a rotation with new keys found
    (governance.crypto.rotation.collisions_merge_with: two processes made it under two blind keys
    in the rotation's settle), as a staff merge does (`entity_merge`): its items, its edges with
    their quotes and its other names go to the one kept; audited as the rotation's."""
    keep = Entity.objects.select_related("agent").get(pk=keep_id)
    entity_merge(agent=keep.agent, keep=keep, merged=Entity.objects.get(pk=merged_id), actor="rotation")

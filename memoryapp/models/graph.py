"""The knowledge graph (004 "Knowledge Graph", GraphEdge): relations between entities.

An entity (memoryapp.models.items.Entity) is a node; a `Relation` is an edge from a subject entity
to an object entity under a predicate ("Caroline" -[friend of]-> "Melanie"), scoped like memory
items, and standing on quotes of the entries that said it (`RelationEvidence`), so the lineage
cascades take it when those entries go (memoryapp.forgetting.lineage).
"""

from __future__ import annotations

from typing import ClassVar

from django.contrib.postgres.indexes import GinIndex
from django.db import models
from django.db.models import F, Q, Value
from django.db.models.expressions import Expression
from django.db.models.functions import Coalesce, NullIf

from governance.crypto.fields import OWNER_PERSON, KeyPeopleField, SealedTextField
from memoryapp.ids import new_id
from memoryapp.models.agents import Agent
from memoryapp.models.choices import EvidenceStatus, ItemStatus, Trust
from memoryapp.models.items import Entity, Scoped, scope_person_sql
from memoryapp.models.threads import Entry


def new_relation_id() -> str:
    return new_id("rel")


class Relation(Scoped):
    """An edge of the graph: `subject` -[predicate]-> `object`, both entities of the agent."""

    id = models.CharField(max_length=40, primary_key=True, default=new_relation_id, editable=False)
    # Deleting an entity (an erasure of the person it names, a cascade that left it without items
    # or edges) takes the edges about it.
    subject = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="relations_out")
    object = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="relations_in")
    # Lower-cased, spacing collapsed ("friend of", "works at"): plaintext like an item's attribute.
    predicate = models.CharField(max_length=200)
    trust = models.CharField(max_length=10, choices=Trust.choices, default=Trust.MODEL)
    # Active edges are read into contexts and searches; suggested ones wait (shadow mode), rejected never.
    status = models.CharField(max_length=12, choices=ItemStatus.choices, default=ItemStatus.ACTIVE)
    confidence = models.FloatField(default=0.5)
    verified = models.BooleanField(default=False)
    prompt_version = models.CharField(max_length=40, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "user_id", "project_id", "thread_id", "subject", "predicate", "object"],
                name="relation_scope_edge_uniq",
            ),
        ]
        indexes = [
            # traversal: the edges leaving or entering a set of entities (memoryapp.graph.selectors).
            models.Index(fields=["agent", "subject"], name="relation_subject_idx"),
            models.Index(fields=["agent", "object"], name="relation_object_idx"),
            # the edges of one thread's scope (a thread's delete takes them).
            models.Index(fields=["agent", "thread_id"], name="relation_thread_scope_idx", condition=~Q(thread_id="")),
        ]

    def __str__(self) -> str:
        return f"{self.subject_id} -[{self.predicate}]-> {self.object_id}"


class RelationEvidence(models.Model):
    """A quote of an entry an edge stands on (as `Evidence` is for an item)."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+")
    # Both indexed by the Meta's relation_evidence_rel_idx and relation_evidence_entry_idx.
    relation = models.ForeignKey(Relation, on_delete=models.CASCADE, related_name="evidence", db_index=False)
    entry = models.ForeignKey(
        Entry, null=True, blank=True, on_delete=models.SET_NULL, related_name="relation_evidence", db_index=False
    )
    # Sealed at rest when encryption is on, under the key of the person whose words it quotes.
    quote = SealedTextField()
    # The registered people the quote names besides that person: their keys seal it too
    # (governance.crypto.fields.KEY_PEOPLE).
    key_people = KeyPeopleField()
    status = models.CharField(max_length=10, choices=EvidenceStatus.choices, default=EvidenceStatus.SUGGESTED)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name_plural = "relation evidence"
        indexes = [
            # the erasure: the quotes sealed under a person's key among others.
            GinIndex(
                fields=["key_people"],
                name="relation_evidence_people_gin",
                condition=models.Q(key_people__isnull=False),
            ),
            # cascades and the evidence-to-turn channel: what stands on an entry, the entries of edges.
            models.Index(fields=["entry"], name="relation_evidence_entry_idx"),
            models.Index(fields=["relation"], name="relation_evidence_rel_idx"),
        ]

    def __str__(self) -> str:
        return self.quote[:60]

    # The foreign keys encryption_owner reads the owner through (memoryapp.threads.services).
    ENCRYPTION_OWNER_VIA: ClassVar[tuple[str, ...]] = ("entry", "relation")

    def encryption_owner(self) -> tuple[int | None, str]:
        """The person whose words the quote holds (the quoted entry's thread's), else the edge's owner."""
        annotated: str | None = getattr(self, OWNER_PERSON, None)
        if annotated is not None:
            return (self.agent_id, annotated)
        if self.entry_id is not None:
            entry = self.entry if RelationEvidence.entry.is_cached(self) else None
            if entry is not None and Entry.thread.is_cached(entry):
                person = entry.thread.user_id
            else:
                person = Entry.objects.filter(pk=self.entry_id).values_list("thread__user_id", flat=True).first() or ""
            if person:
                return (self.agent_id, person)
        return self.relation.encryption_owner()

    @classmethod
    def encryption_owner_person(cls) -> Expression:
        """encryption_owner's person in SQL (governance.crypto.fields.OWNER_PERSON)."""
        return Coalesce(NullIf(F("entry__thread__user_id"), Value("")), scope_person_sql("relation__"))

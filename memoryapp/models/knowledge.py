"""Knowledge documents (004 `includeSemanticContext`, "Semantic context"): texts an operator or an
agent adds for an agent or one of its projects (a product manual, a policy), chunked and embedded,
searched as a channel of their own and placed in the context's semantic partition. They are not
conversation memory: no thread, no person, no lineage; they go when they are deleted or replaced.
"""

from __future__ import annotations

from django.conf import settings
from django.contrib.postgres.indexes import GinIndex
from django.contrib.postgres.search import SearchVector, SearchVectorField
from django.db import models
from django.db.models import Case, F, Value, When
from pgvector.django import HnswIndex, VectorField

from governance.crypto.fields import KeyPeopleField, SealedTextField
from governance.crypto.sealing import PREFIX as SEALED_PREFIX
from memoryapp.ids import new_id
from memoryapp.models.agents import Agent
from memoryapp.models.items import Scoped


def new_document_id() -> str:
    return new_id("kdoc")


class KnowledgeDocument(Scoped):
    """One document of an agent (project_id "") or of one of its projects; user_id and thread_id stay ""."""

    id = models.CharField(max_length=40, primary_key=True, default=new_document_id, editable=False)
    name = models.CharField(max_length=255)
    # Sealed at rest when encryption is on, under the agent's own key (a document is about no one).
    content = SealedTextField()
    # The registered people its text names: their keys seal it (and its chunks) with the agent's
    # (governance.crypto.fields.KEY_PEOPLE).
    key_people = KeyPeopleField()
    sha256 = models.CharField(max_length=64)
    chunk_count = models.IntegerField(default=0)
    # Who added it: "agent" (the API) or a staff member's username (the admin).
    added_by = models.CharField(max_length=150, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["agent", "project_id", "name"], name="knowledge_doc_name_uniq"),
        ]
        indexes = [
            # listing: an agent's documents by project, newest first.
            models.Index(fields=["agent", "project_id", "-updated_at"], name="knowledge_doc_list_idx"),
            # the erasure: the documents sealed under a person's key among others.
            GinIndex(
                fields=["key_people"], name="knowledge_doc_key_people_gin", condition=models.Q(key_people__isnull=False)
            ),
        ]

    def __str__(self) -> str:
        return self.name


class KnowledgeChunk(models.Model):
    """A passage of a document, embedded and indexed for search (the semantic channel)."""

    # Indexed by knowledge_chunk_scope_idx and knowledge_chunk_seq_uniq, which lead with them.
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="+", db_index=False)
    document = models.ForeignKey(KnowledgeDocument, on_delete=models.CASCADE, related_name="chunks", db_index=False)
    # The document's project, copied so a search filters chunks without a join.
    project_id = models.CharField(max_length=128, blank=True, default="")
    seq = models.IntegerField()
    text = SealedTextField()
    # Its document's (the chunk holds its words).
    key_people = KeyPeopleField()
    tokens = models.IntegerField(default=0)
    # Empty for a sealed text: with encryption on, the semantic channel reads vectors only.
    search_vector = models.GeneratedField(
        expression=SearchVector(
            Case(
                When(text__startswith=SEALED_PREFIX, then=Value("")),
                default=F("text"),
                output_field=models.TextField(),
            ),
            config="english",
        ),
        output_field=SearchVectorField(),
        db_persist=True,
    )
    embedding = VectorField(dimensions=settings.EMBEDDING_DIMENSIONS, null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["document", "seq"], name="knowledge_chunk_seq_uniq"),
        ]
        indexes = [
            # the semantic channel: an agent's chunks of some projects.
            models.Index(fields=["agent", "project_id"], name="knowledge_chunk_scope_idx"),
            # the erasure: the chunks sealed under a person's key among others.
            GinIndex(
                fields=["key_people"], name="knowledge_chunk_people_gin", condition=models.Q(key_people__isnull=False)
            ),
            GinIndex(fields=["search_vector"], name="knowledge_chunk_search_gin"),
            HnswIndex(
                name="knowledge_chunk_embedding_hnsw",
                fields=["embedding"],
                m=16,
                ef_construction=64,
                opclasses=["vector_cosine_ops"],
            ),
        ]

    def __str__(self) -> str:
        return f"{self.document_id}#{self.seq}"

    def encryption_owner(self) -> tuple[int | None, str]:
        """The agent's own key: a document is about no one."""
        return (self.agent_id, "")

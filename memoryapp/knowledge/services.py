"""Knowledge documents: writes (chunked and embedded on the way in) and the semantic search.

A document belongs to an agent, or to one of its projects (`project_id`). A search for a project
reads the agent's documents and that project's, never another project's nor another agent's
(004: "entries without an agentId (shared documents, knowledge bases) are visible to everyone" of
the agent here: the service never shares across agents).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from django.contrib.postgres.search import SearchQuery, SearchRank
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from pgvector.django import CosineDistance

from governance.audit.chain import audit_append
from memoryapp.errors import Conflict, DomainError, NotFound
from memoryapp.models import Agent, KnowledgeChunk, KnowledgeDocument, SubjectMention
from memoryapp.search.embedders import EmbedderError, embed_query, embed_texts
from memoryapp.search.retrieval import vector_space_ok
from memoryapp.search.space import space_claim
from memoryapp.subjects.detect import key_people_set, mentions_record, rows_named
from memoryapp.tokens import count_tokens

Table = SubjectMention.Table

MAX_DOCUMENT_CHARS = 1_048_576  # 1 MiB of text, as a memory file
MAX_NAME_CHARS = 255
MAX_DOCUMENTS = 1000  # per agent
CHUNK_TOKENS = 200
_PARAGRAPH = re.compile(r"\n\s*\n")
_SENTENCE = re.compile(r"(?<=[.!?])\s+")


def _name_check(name: Any) -> str:
    if not isinstance(name, str) or not name.strip():
        raise DomainError("invalid_value", "name must be a non-empty string.", field="name")
    name = name.strip()
    if len(name) > MAX_NAME_CHARS:
        raise DomainError("value_too_large", f"name holds at most {MAX_NAME_CHARS} characters.", field="name")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise DomainError("invalid_value", "name must not hold control characters.", field="name")
    return name


def _content_check(content: Any) -> str:
    if not isinstance(content, str) or not content.strip():
        raise DomainError("invalid_value", "content must be a non-empty string.", field="content")
    if "\x00" in content:
        raise DomainError("invalid_value", "content must not hold NUL characters.", field="content")
    if len(content) > MAX_DOCUMENT_CHARS:
        raise DomainError("value_too_large", f"content holds at most {MAX_DOCUMENT_CHARS} characters.", field="content")
    return content


def _project_check(project_id: Any) -> str:
    if project_id is None:
        return ""
    if not isinstance(project_id, str) or len(project_id) > 128 or any(ord(c) < 32 for c in project_id):
        raise DomainError("invalid_value", "project_id must be a string of at most 128 characters.", field="project_id")
    return project_id.strip()


def chunks_of(content: str, *, size: int = CHUNK_TOKENS) -> list[str]:
    """The passages of a text, about `size` tokens each: paragraphs packed together, a paragraph
    longer than that cut between sentences (and a sentence longer than that between words)."""
    pieces: list[str] = []
    for paragraph in _PARAGRAPH.split(content):
        paragraph = " ".join(paragraph.split())
        if not paragraph:
            continue
        if count_tokens(paragraph) <= size:
            pieces.append(paragraph)
            continue
        for sentence in _SENTENCE.split(paragraph):
            if count_tokens(sentence) <= size:
                pieces.append(sentence)
                continue
            words: list[str] = []
            for word in sentence.split():
                if words and count_tokens(" ".join([*words, word])) > size:
                    pieces.append(" ".join(words))
                    words = []
                words.append(word)
            if words:
                pieces.append(" ".join(words))
    chunks: list[str] = []
    for piece in pieces:
        if chunks and count_tokens(chunks[-1] + "\n\n" + piece) <= size:
            chunks[-1] = chunks[-1] + "\n\n" + piece
        else:
            chunks.append(piece)
    return chunks


def _people_named(document: KnowledgeDocument) -> dict[str, set[str]]:
    """The registered people the document names (memoryapp.subjects.detect): their keys seal it and
    its chunks with the agent's (`key_people`), so the erasure of any of them shreds its old copies."""
    named = rows_named(agent_id=document.agent_id, rows=[(Table.KNOWLEDGE_DOCUMENT, document.pk, document)])
    key_people_set(document, named.get(document.pk, ()), owner_person="")
    return named


def _chunks_write(document: KnowledgeDocument) -> bool:
    """Replace the document's chunks; returns whether they were embedded (an embedder failure leaves
    them without vectors: found by their words only, and embedded again by the next write)."""
    KnowledgeChunk.objects.filter(document=document).delete()
    texts = chunks_of(document.content)
    try:
        vectors: list[list[float] | None] = list(embed_texts(texts)) if texts else []
        embedded = True
    except EmbedderError:
        vectors, embedded = [None] * len(texts), False
    KnowledgeChunk.objects.bulk_create(
        KnowledgeChunk(
            agent_id=document.agent_id,
            document=document,
            project_id=document.project_id,
            seq=seq,
            text=text,
            key_people=document.key_people,
            tokens=count_tokens(text),
            embedding=vector,
        )
        for seq, (text, vector) in enumerate(zip(texts, vectors, strict=True))
    )
    if embedded and texts:
        space_claim()
    KnowledgeDocument.objects.filter(pk=document.pk).update(chunk_count=len(texts))
    document.chunk_count = len(texts)
    return embedded


def _audit(action: str, document: KnowledgeDocument, actor: str, **details: Any) -> None:
    audit_append(
        action=action,
        actor=actor,
        agent_id=document.agent_id,
        subject=document.pk,
        outcome="done",
        details={"chunks": document.chunk_count, **details},
    )


@transaction.atomic
def knowledge_document_add(
    *, agent: Agent, name: Any, content: Any, project_id: Any = "", added_by: str = "agent", actor: str = ""
) -> KnowledgeDocument:
    """Add a document (409 `name_taken` when the agent's project already has one of that name)."""
    name, content, project = _name_check(name), _content_check(content), _project_check(project_id)
    if KnowledgeDocument.objects.filter(agent=agent).count() >= MAX_DOCUMENTS:
        raise DomainError("too_many_documents", f"An agent keeps at most {MAX_DOCUMENTS} knowledge documents.")
    try:
        with transaction.atomic():
            document = KnowledgeDocument(
                agent=agent,
                project_id=project,
                name=name,
                content=content,
                sha256=hashlib.sha256(content.encode()).hexdigest(),
                added_by=added_by[:150],
            )
            named = _people_named(document)
            document.save(force_insert=True)
    except IntegrityError as exc:
        raise Conflict("name_taken", f"A knowledge document is already named {name!r} here.", field="name") from exc
    mentions_record(agent_id=document.agent_id, rows=[(Table.KNOWLEDGE_DOCUMENT, document.pk, document)], named=named)
    embedded = _chunks_write(document)
    _audit("knowledge.added", document, actor or added_by, embedded=embedded)
    return document


@transaction.atomic
def knowledge_document_replace(
    *, document: KnowledgeDocument, content: Any, name: Any = None, actor: str = ""
) -> KnowledgeDocument:
    """Replace a document's text (and name): its chunks are cut and embedded again."""
    locked = KnowledgeDocument.objects.select_for_update().get(pk=document.pk)
    content = _content_check(content)
    if name is not None:
        locked.name = _name_check(name)
    locked.content = content
    locked.sha256 = hashlib.sha256(content.encode()).hexdigest()
    named = _people_named(locked)
    try:
        with transaction.atomic():
            locked.save()
    except IntegrityError as exc:
        raise Conflict("name_taken", "A knowledge document is already named so here.", field="name") from exc
    mentions_record(
        agent_id=locked.agent_id, rows=[(Table.KNOWLEDGE_DOCUMENT, locked.pk, locked)], named=named, replace=True
    )
    embedded = _chunks_write(locked)
    _audit("knowledge.replaced", locked, actor or "agent", embedded=embedded)
    return locked


@transaction.atomic
def knowledge_document_delete(*, document: KnowledgeDocument, actor: str = "") -> None:
    _audit("knowledge.deleted", document, actor or "agent")
    KnowledgeDocument.objects.filter(pk=document.pk).delete()


def knowledge_for_agent(*, agent: Agent, document_id: str) -> KnowledgeDocument:
    """One of the agent's documents (another agent's answers 404, as a missing one)."""
    document = KnowledgeDocument.objects.filter(agent=agent, pk=document_id).first()
    if document is None:
        raise NotFound("Knowledge document")
    return document


def knowledge_documents(*, agent: Agent, project_id: str | None = None) -> Any:
    rows = KnowledgeDocument.objects.filter(agent=agent).defer("content")
    if project_id is not None:
        rows = rows.filter(project_id=project_id)
    return rows.order_by("-updated_at", "pk")


@dataclass
class KnowledgeHit:
    chunk_id: int
    document_id: str
    name: str
    seq: int
    text: str
    tokens: int
    score: float
    channels: list[str]

    def as_json(self) -> dict[str, Any]:
        return {
            "document_id": self.document_id,
            "name": self.name,
            "seq": self.seq,
            "text": self.text,
            "score": round(self.score, 6),
            "channels": self.channels,
        }


def knowledge_search(
    *, agent: Agent, text: str, project_id: str = "", limit: int = 5, min_similarity: float = 0.3
) -> list[KnowledgeHit]:
    """The passages of the agent's documents (of no project, or of `project_id`) best for `text`:
    vectors (a cosine of `min_similarity` or more and 0.6 of the best) and words (full text),
    fused by reciprocal rank. An embedder failure leaves the words alone."""
    if not text.strip():
        return []
    chunks = KnowledgeChunk.objects.filter(Q(project_id="") | Q(project_id=project_id), agent=agent)
    depth = max(limit * 3, 15)
    lists: list[tuple[str, list[int]]] = []
    vector = None
    # Vectors another model made answer nothing meaningful to this one's query (the vector space's
    # record, memoryapp.search.space): then only the words search.
    if vector_space_ok()[0]:
        try:
            vector = embed_query(text)
        except EmbedderError:
            vector = None
    if vector is not None:
        rows = list(
            chunks.filter(embedding__isnull=False)
            .annotate(distance=CosineDistance("embedding", vector))
            .order_by("distance")
            .values_list("pk", "distance")[:depth]
        )
        if rows:
            floor = max(min_similarity, 0.6 * (1 - float(rows[0][1])))
            lists.append(("vector", [pk for pk, distance in rows if 1 - float(distance) >= floor]))
    words = " | ".join(w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 2)
    if words:
        query = SearchQuery(words, search_type="raw", config="english")
        matched: list[int] = list(
            chunks.filter(search_vector=query)
            .annotate(rank=SearchRank(F("search_vector"), query))
            .order_by("-rank", "pk")
            .values_list("pk", flat=True)[:depth]
        )
        lists.append(("keyword", matched))
    score: dict[int, float] = {}
    channels: dict[int, list[str]] = {}
    for channel, ids in lists:
        for rank, pk in enumerate(ids, start=1):
            score[pk] = score.get(pk, 0.0) + 1.0 / (10 + rank)
            channels.setdefault(pk, []).append(channel)
    best = sorted(score, key=lambda pk: (-score[pk], pk))[:limit]
    rows_by_pk = {c.pk: c for c in KnowledgeChunk.objects.filter(pk__in=best).select_related("document")}
    return [
        KnowledgeHit(
            chunk_id=pk,
            document_id=rows_by_pk[pk].document_id,
            name=rows_by_pk[pk].document.name,
            seq=rows_by_pk[pk].seq,
            text=rows_by_pk[pk].text,
            tokens=rows_by_pk[pk].tokens,
            score=score[pk],
            channels=channels[pk],
        )
        for pk in best
        if pk in rows_by_pk
    ]

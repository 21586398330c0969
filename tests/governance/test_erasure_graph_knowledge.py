"""A person's mentions in the graph's quotes and in knowledge documents (issue 25 §4, review of
ab19531 and 6f5d8e0): a staff erasure with her identifiers leaves no quote of an edge and no
knowledge document (nor its chunks) naming her, and the export of her mentions lists them."""

from __future__ import annotations

from typing import Any

from governance.erasure.services import erasure_request_file
from governance.models import ErasureRequest
from memoryapp.graph.services import relation_write
from memoryapp.models import Entry, KnowledgeChunk, KnowledgeDocument, RelationEvidence
from memoryapp.subjects.index import subject_index_rebuild
from tests.kit.api import Caller
from tests.kit.mentions import EMAIL, IDENTIFIERS, NAME, PERSON, PHONE, plant, rows_naming_her

REQUEST_TABLE = ErasureRequest._meta.db_table


def _plant_graph_and_knowledge(caller: Caller, turn_id: str) -> None:
    turn = Entry.objects.get(pk=turn_id)
    # An agent-wide edge between two other entities, standing on Carl's turn that names her.
    relation_write(
        agent=caller.agent,
        subject="Carl",
        predicate="asks about",
        object="Lisbon trip",
        evidence=[{"entry_id": turn.pk, "quote": turn.text}],
    )
    added = caller.client.post(
        "/api/v1/knowledge",
        {"name": "bookings.md", "content": f"Bookings: ask {NAME} ({EMAIL}, {PHONE}) before paying."},
        format="json",
    )
    assert added.status_code == 201, added.content


def test_the_index_finds_her_in_edge_quotes_and_knowledge_documents(alice: Caller) -> None:
    planted = plant(alice)
    _plant_graph_and_knowledge(alice, planted["turn"]["id"])

    found = subject_index_rebuild(agent_id=alice.agent.pk, user_id=PERSON, given=IDENTIFIERS)

    quote = RelationEvidence.objects.get(agent=alice.agent)
    document = KnowledgeDocument.objects.get(agent=alice.agent)
    assert found["relation_evidence"] == [str(quote.pk)]
    assert found["knowledge_document"] == [document.pk]


def test_a_staff_erasure_redacts_her_in_edge_quotes_and_knowledge_documents(
    alice: Caller, django_capture_on_commit_callbacks: Any
) -> None:
    planted = plant(alice)
    _plant_graph_and_knowledge(alice, planted["turn"]["id"])
    assert RelationEvidence._meta.db_table in rows_naming_her()
    assert KnowledgeChunk._meta.db_table in rows_naming_her()

    with django_capture_on_commit_callbacks(execute=True):
        request = erasure_request_file(user_id=PERSON, identifiers=[EMAIL, PHONE, NAME], actor="staff:pat")
    request.refresh_from_db()

    assert request.status == ErasureRequest.Status.DONE, request.error
    left = rows_naming_her()
    left.pop(REQUEST_TABLE, None)
    assert left == {}
    assert request.counts["mentions_redacted_relation_evidence"] == 1
    assert request.counts["mentions_redacted_knowledge_document"] == 1
    document = KnowledgeDocument.objects.get(agent=alice.agent)
    assert "[erased person]" in document.content and "before paying" in document.content
    chunks = list(KnowledgeChunk.objects.filter(document=document))
    assert chunks and all("[erased person]" in c.text and c.embedding is not None for c in chunks)

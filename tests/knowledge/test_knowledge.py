"""Knowledge documents (004 semantic context): REST CRUD and search, chunking, the semantic partition
of a context build, the admin page, and every endpoint kept to its agent."""

from __future__ import annotations

from typing import Any

import pytest

from governance.models import AuditRecord
from memoryapp.knowledge.services import chunks_of
from memoryapp.models import KnowledgeChunk, KnowledgeDocument
from tests.kit.admin import staff_client
from tests.kit.api import Caller, build_context
from tests.kit.factories import EntryFactory, ThreadFactory

MANUAL = (
    "Returns are accepted within 30 days of delivery with the receipt.\n\n"
    "Warranty covers manufacturing defects for two years; batteries for one year.\n\n"
    "Shipping to the islands takes five working days."
)


def _add(caller: Caller, name: str = "manual.md", content: str = MANUAL, **extra: Any) -> dict[str, Any]:
    response = caller.client.post("/api/v1/knowledge", {"name": name, "content": content, **extra}, format="json")
    assert response.status_code == 201, response.content
    return dict(response.json())


def test_documents_are_added_chunked_read_replaced_and_deleted(alice: Caller) -> None:
    added = _add(alice)
    assert added["chunk_count"] == 1 and added["content"] == MANUAL and added["project_id"] == ""
    document = KnowledgeDocument.objects.get(pk=added["id"])
    assert KnowledgeChunk.objects.filter(document=document, embedding__isnull=False).count() == 1
    listed = alice.client.get("/api/v1/knowledge").json()["documents"]
    assert [d["id"] for d in listed] == [added["id"]] and "content" not in listed[0]
    long_text = "\n\n".join(f"Paragraph {n}: " + "words of policy " * 40 for n in range(6))
    replaced = alice.client.put(f"/api/v1/knowledge/{added['id']}", {"content": long_text}, format="json").json()
    assert replaced["chunk_count"] == len(chunks_of(long_text)) > 1
    assert replaced["sha256"] != added["sha256"]
    again = alice.client.post("/api/v1/knowledge", {"name": "manual.md", "content": "x"}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "name_taken"
    assert alice.client.delete(f"/api/v1/knowledge/{added['id']}").status_code == 204
    assert not KnowledgeChunk.objects.filter(agent=alice.agent).exists()
    actions = list(
        AuditRecord.objects.filter(agent_id=alice.agent.pk, action__startswith="knowledge.").values_list(
            "action", flat=True
        )
    )
    assert sorted(actions) == ["knowledge.added", "knowledge.deleted", "knowledge.replaced"]


def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(alice: Caller) -> None:
    for body, field in (
        ({"name": "", "content": "x"}, "name"),
        ({"name": "a", "content": ""}, "content"),
        ({"name": "a", "content": "x", "project_id": "p" * 129}, "project_id"),
        ({"name": "a\x01b", "content": "x"}, "name"),
        ({"name": "a", "content": "x", "extra": 1}, "extra"),
    ):
        response = alice.client.post("/api/v1/knowledge", body, format="json")
        assert response.status_code == 400, (body, response.content)
        assert response.json()["error"]["field"] == field
    assert not KnowledgeDocument.objects.exists()
    assert alice.client.post("/api/v1/knowledge/search", {"limit": 3}, format="json").status_code == 400


def test_search_finds_the_passage_of_the_agents_documents_and_project(alice: Caller) -> None:
    _add(alice)
    _add(alice, name="islands.md", content="Ferries to the islands leave at noon.", project_id="travel")
    _add(alice, name="other.md", content="Ferries to the islands are free on Sundays.", project_id="other")
    found = alice.client.post(
        "/api/v1/knowledge/search", {"text": "How long is the warranty?", "limit": 3}, format="json"
    ).json()["results"]
    assert found and found[0]["name"] == "manual.md" and "Warranty" in found[0]["text"]
    ferries = alice.client.post(
        "/api/v1/knowledge/search", {"text": "When do ferries leave?", "project_id": "travel"}, format="json"
    ).json()["results"]
    assert {r["name"] for r in ferries} <= {"manual.md", "islands.md"} and "islands.md" in {r["name"] for r in ferries}


def test_every_knowledge_endpoint_keeps_to_its_agent(alice: Caller, mallory: Caller) -> None:
    added = _add(alice)
    url = f"/api/v1/knowledge/{added['id']}"
    assert mallory.client.get(url).status_code == 404
    assert mallory.client.put(url, {"content": "mine now"}, format="json").status_code == 404
    assert mallory.client.delete(url).status_code == 404
    assert mallory.client.get("/api/v1/knowledge").json()["documents"] == []
    assert mallory.client.post("/api/v1/knowledge/search", {"text": "warranty"}, format="json").json()["results"] == []
    # mallory may name a document as alice did: it is another document, and alice's is unchanged.
    theirs = _add(mallory)
    assert theirs["id"] != added["id"]
    assert KnowledgeDocument.objects.get(pk=added["id"]).content == MANUAL
    thread = ThreadFactory(agent=mallory.agent, external_id="t-m")
    EntryFactory(thread=thread, role="user", content="hello")
    mallory.client.delete(f"/api/v1/knowledge/{theirs['id']}")
    built = build_context(
        mallory, "t-m", max_tokens=2000, current_input="How long is the warranty?", include_semantic_context=True
    )
    assert built["semantic_results"] == []


def test_the_semantic_partition_places_passages_and_reports_what_did_not_fit(alice: Caller) -> None:
    _add(alice)
    thread = ThreadFactory(agent=alice.agent, external_id="t-k")
    EntryFactory(thread=thread, role="user", content="My order arrived broken.")
    built = build_context(
        alice,
        "t-k",
        max_tokens=2000,
        strategy="recent",
        current_input="Is it under warranty?",
        include_semantic_context=True,
    )
    assert built["semantic_results"] and built["semantic_results"][0]["name"] == "manual.md"
    assert "Relevant context:\n- [manual.md] Returns are accepted" in built["memory_context"]
    assert built["partitions"]["semantic"] > 0 and built["metadata"]["semantic_context_included"] == 1
    tight = build_context(
        alice,
        "t-k",
        max_tokens=300,
        strategy="recent",
        current_input="Is it under warranty?",
        include_semantic_context=True,
        partitions={"facts": 0, "recall": 0.05},
    )
    assert tight["semantic_results"] == [] and tight["dropped"]["semantic_results"]
    assert any(b["partition"] == "semantic" for b in tight["dropped"]["blocks"])
    plain = build_context(alice, "t-k", max_tokens=2000, current_input="Is it under warranty?")
    assert plain["semantic_results"] == [] and "Relevant context" not in (plain["memory_context"] or "")


def test_staff_add_a_document_in_the_admin_through_the_service(alice: Caller) -> None:
    client = staff_client(is_superuser=True)
    response = client.post(
        "/admin/memoryapp/knowledgedocument/add/",
        {"agent": alice.agent.pk, "project_id": "", "name": "faq.md", "content": MANUAL},
    )
    assert response.status_code == 302, response.content[:2000]
    document = KnowledgeDocument.objects.get(agent=alice.agent, name="faq.md")
    assert document.chunk_count == 1 and document.added_by
    assert AuditRecord.objects.filter(action="knowledge.added", subject=document.pk).exists()
    listing = client.get("/admin/memoryapp/knowledgedocument/")
    assert listing.status_code == 200 and b"faq.md" in listing.content


@pytest.mark.parametrize(
    ("group", "may_edit"), [("Operators", True), ("Reviewers", False), ("Privacy officers", False)]
)
def test_knowledge_documents_are_the_operators_to_keep(alice: Caller, group: str, may_edit: bool) -> None:
    """Operators add and remove an agent's knowledge documents; the other roles do not reach them."""
    client = staff_client(groups=[group])
    response = client.post(
        "/admin/memoryapp/knowledgedocument/add/",
        {"agent": alice.agent.pk, "project_id": "", "name": "policy.md", "content": MANUAL},
    )
    made = KnowledgeDocument.objects.filter(agent=alice.agent, name="policy.md")
    if not may_edit:
        assert response.status_code == 403 and not made.exists()
        assert client.get("/admin/memoryapp/knowledgedocument/").status_code == 403
        return
    assert response.status_code == 302, response.content[:2000]
    document = made.get()
    assert client.get("/admin/memoryapp/knowledgedocument/").status_code == 200
    gone = client.post(f"/admin/memoryapp/knowledgedocument/{document.pk}/delete/", {"post": "yes"})
    assert gone.status_code == 302 and not made.exists()

"""The agent API of memory items: write, read, list with scope and time filters, history, forget."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from governance.models import AuditRecord
from memoryapp.items.selectors import context_facts
from memoryapp.models import MemoryItem
from tests.kit.api import post_entry, post_item, post_thread
from tests.kit.factories import MemoryItemFactory

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ANA = {"kind": "preference", "subject": "Ana", "attribute": "diet", "value": "vegetarian, strictly", "user_id": "u-ana"}


def test_an_agent_written_item_arrives_suggested_and_stays_out_of_contexts(alice):
    response = alice.client.post("/api/v1/items", ANA, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["status"], body["trust"], body["value"]) == ("suggested", "model", "vegetarian, strictly")
    item = MemoryItem.objects.get(pk=body["id"])
    assert (item.agent_id, item.user_id, item.status) == (alice.agent.pk, "u-ana", "suggested")
    assert context_facts(agent=alice.agent, user_id="u-ana") == []
    assert AuditRecord.objects.filter(action="item.written", subject=item.pk, outcome="suggested").exists()


def test_a_key_may_not_write_more_trusted_items_than_it_is_allowed(alice):
    response = alice.client.post("/api/v1/items", {**ANA, "trust": "system"}, format="json")
    assert response.status_code == 403
    assert response.json()["error"] == {
        "code": "trust_not_allowed",
        "message": response.json()["error"]["message"],
        "field": "trust",
    }
    assert not MemoryItem.objects.exists()


def test_a_key_allowed_system_trust_writes_active_items(alice):
    key = alice.agent.keys.get()
    key.max_trust = "system"
    key.save()
    response = alice.client.post("/api/v1/items", ANA, format="json")
    assert response.status_code == 201
    assert (response.json()["status"], response.json()["trust"]) == ("active", "system")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"kind": "rumour"}, "kind"),
        ({"value": ""}, "value"),
        ({"colour": "red"}, "colour"),
        ({"confidence": 2}, "confidence"),
        ({"trust": "boss"}, "trust"),
        ({"evidence": [{"entry_id": "ent_x"}]}, "evidence.0.quote"),
    ],
)
def test_bad_item_input_is_a_400_naming_the_field_and_writes_nothing(alice, change, field):
    response = alice.client.post("/api/v1/items", {**ANA, **change}, format="json")
    assert response.status_code == 400, response.json()
    assert response.json()["error"]["field"] == field
    assert not MemoryItem.objects.exists()


def test_an_item_is_read_with_its_evidence(alice):
    post_thread(alice, "t-1", user_id="u-ana")
    entry_id = post_entry(alice, "t-1", role="user", content="I am vegetarian, strictly.")["id"]
    created = post_item(alice, **ANA, evidence=[{"entry_id": entry_id, "quote": "vegetarian, strictly"}])
    body = alice.client.get(f"/api/v1/items/{created['id']}").json()
    assert body["evidence"] == [
        {"id": body["evidence"][0]["id"], "entry_id": entry_id, "quote": "vegetarian, strictly", "status": "verified"}
    ]
    assert body["verified"] is True and body["status"] == "suggested"  # a model's word, even quoted


def test_another_agents_item_answers_404_on_every_endpoint(alice, mallory):
    item_id = post_item(alice, **ANA)["id"]
    for method, url in [
        ("get", f"/api/v1/items/{item_id}"),
        ("get", f"/api/v1/items/{item_id}/history"),
        ("post", f"/api/v1/items/{item_id}/forget"),
    ]:
        response = getattr(mallory.client, method)(url)
        assert response.status_code == 404, url
        assert response.json()["error"]["code"] == "not_found"
    assert mallory.client.get("/api/v1/items?user_id=u-ana").json() == {"results": [], "next": None}
    assert MemoryItem.objects.get(pk=item_id).expired_at is None


def test_a_missing_item_answers_404(alice):
    assert alice.client.get("/api/v1/items/mem_nothing").status_code == 404


def test_the_list_pages_newest_first_with_next_links(alice):
    for n in range(5):
        MemoryItemFactory(agent=alice.agent, attribute=f"a{n}", value=f"v{n}", user_id="")
    first = alice.client.get("/api/v1/items?limit=2").json()
    assert [i["value"] for i in first["results"]] == ["v4", "v3"]
    second = alice.client.get(first["next"]).json()
    third = alice.client.get(second["next"]).json()
    assert [i["value"] for i in second["results"] + third["results"]] == ["v2", "v1", "v0"]
    assert third["next"] is None


def test_the_list_filters_by_scope_status_kind_attribute_and_subject(alice):
    MemoryItemFactory(agent=alice.agent, kind="fact", subject="Ana", attribute="diet", value="vegan")
    MemoryItemFactory(agent=alice.agent, kind="fact", subject="Ben", attribute="diet", value="keto", user_id="u-ben")
    MemoryItemFactory(
        agent=alice.agent, kind="preference", subject="Ana", attribute="tea", value="green", trust="model"
    )
    MemoryItemFactory(agent=alice.agent, kind="fact", subject="Team", attribute="office", value="Lisbon", user_id="")

    def values(query: str) -> list[str]:
        response = alice.client.get(f"/api/v1/items?{query}")
        assert response.status_code == 200, response.json()
        return sorted(i["value"] for i in response.json()["results"])

    assert values("user_id=u-ana") == ["Lisbon", "green", "vegan"]
    assert values("user_id=u-ana&status=suggested") == ["green"]
    assert values("user_id=u-ana&status=active,suggested&kind=fact") == ["Lisbon", "vegan"]
    assert values("attribute=diet&user_id=u-ben") == ["keto"]
    assert values("subject=ana&user_id=u-ana") == ["green", "vegan"]
    assert alice.client.get("/api/v1/items?status=lost").json()["error"]["field"] == "status"
    assert alice.client.get("/api/v1/items?as_of=yesterday").json()["error"]["field"] == "as_of"


def test_the_list_reads_what_held_as_of_and_as_known_at(alice):
    from freezegun import freeze_time

    with freeze_time(T0):
        MemoryItemFactory(agent=alice.agent, attribute="city", value="Lisbon", user_id="")
    with freeze_time(T0 + timedelta(days=10)):
        MemoryItemFactory(agent=alice.agent, attribute="city", value="Porto", user_id="")

    def values(query: str) -> list[str]:
        return [i["value"] for i in alice.client.get(f"/api/v1/items?{query}").json()["results"]]

    assert values("as_of=" + (T0 + timedelta(days=1)).isoformat().replace("+00:00", "Z")) == ["Lisbon"]
    assert values("as_of=" + (T0 + timedelta(days=11)).isoformat().replace("+00:00", "Z")) == ["Porto"]
    assert values("known_at=" + (T0 + timedelta(days=1)).isoformat().replace("+00:00", "Z")) == ["Lisbon"]
    assert values("") == ["Porto", "Lisbon"]  # without a time, every state


def test_history_lists_every_value_of_the_slot_oldest_first(alice):
    for n, city in enumerate(["Lisbon", "Porto", "Faro"]):
        last = MemoryItemFactory(
            agent=alice.agent, attribute="city", value=city, valid_from=T0 + timedelta(days=n), user_id=""
        )
    body = alice.client.get(f"/api/v1/items/{last.pk}/history").json()
    assert [(i["value"], i["status"]) for i in body["results"]] == [
        ("Lisbon", "superseded"),
        ("Porto", "superseded"),
        ("Faro", "active"),
    ]
    assert body["results"][0]["valid_to"] == body["results"][1]["valid_from"]


def test_forget_lets_a_state_go_and_keeps_it_in_history(alice):
    item = MemoryItemFactory(agent=alice.agent, attribute="city", value="Lisbon", user_id="")
    response = alice.client.post(f"/api/v1/items/{item.pk}/forget")
    assert response.status_code == 200
    assert response.json()["expired_at"] is not None
    assert context_facts(agent=alice.agent) == []
    assert [i["id"] for i in alice.client.get(f"/api/v1/items/{item.pk}/history").json()["results"]] == [item.pk]
    assert AuditRecord.objects.filter(action="item.forgotten", subject=item.pk, actor="agent:alice").count() == 1
    again = alice.client.post(f"/api/v1/items/{item.pk}/forget")
    assert again.status_code == 200
    assert AuditRecord.objects.filter(action="item.forgotten", subject=item.pk).count() == 1


def test_items_need_a_key(anonymous):
    assert anonymous.get("/api/v1/items").status_code == 401


def test_a_suggested_item_never_reaches_a_built_context_but_an_approved_one_does(alice):
    from memoryapp.items.services import item_approve

    created = post_item(alice, **ANA)
    post_thread(alice, "t-ctx", user_id="u-ana")
    post_entry(alice, "t-ctx", role="user", content="What should I cook tonight?")
    ask = {
        "strategy": "hybrid",
        "max_tokens": 4000,
        "current_input": "what is my diet? vegetarian?",
        "include_facts": True,
    }
    context = alice.client.post("/api/v1/threads/t-ctx/context", ask, format="json")
    assert context.status_code == 200, context.json()
    assert "vegetarian, strictly" not in context.content.decode()
    item_approve(item=MemoryItem.objects.get(pk=created["id"]), actor="staff:rita")
    again = alice.client.post("/api/v1/threads/t-ctx/context", ask, format="json")
    assert "vegetarian, strictly" in again.content.decode()


def test_the_openapi_schema_documents_items_facts_and_memory_tools(client):
    body = client.get("/api/schema/").content.decode()
    for route in ("/api/v1/items", "/api/v1/items/{item_id}/history", "/api/v1/facts/{path}", "/api/v1/memory-tools"):
        assert route in body, route

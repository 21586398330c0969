"""Mallory never reaches Alice's data: the endpoints and inputs the per-area isolation tests leave out.

Each area tests its own 404s (test_threads_api, test_items_api, test_files_tool, test_facts,
test_search, test_context, test_compaction). Here: the ways one agent could name another's rows
from inside its own requests (an upsert by the same id, a leaf, a page boundary, a place, a
quote's entry, a tool call), and the admin's doors (staff only; approving needs the permission).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from governance.models import AuditRecord, JobRun
from memoryapp.models import Entry, Evidence, MemoryFileVersion, MemoryItem, Thread
from memoryapp.models.choices import ItemStatus
from tests.kit.admin import staff_client
from tests.kit.api import (
    Caller,
    exported_lines,
    get_ok,
    import_jsonl,
    jsonl_node,
    post_entries,
    post_entry,
    post_item,
    post_thread,
    put_ok,
    use_fact_tool,
)

pytestmark = pytest.mark.django_db

SECRET = "my passport number is X12345678"


def alices_thread(alice: Caller) -> dict[str, str]:
    """Alice's thread `t-ana` with a question and its answer; the ids Mallory might learn."""
    post_thread(alice, "t-ana", status=201, user_id="u-ana", metadata={"who": "alice"})
    said = post_entries(
        alice, "t-ana", [{"role": "user", "content": SECRET}, {"role": "assistant", "content": "Noted."}]
    )
    return {"told": said[0]["id"], "answer": said[1]["id"]}


def mallorys_thread(mallory: Caller, thread_id: str = "t-mal") -> str:
    post_thread(mallory, thread_id)
    return str(post_entry(mallory, thread_id, role="user", content="hello")["id"])


def assert_nothing_of_alice(response: Any, ids: dict[str, str]) -> None:
    text = response.content.decode()
    assert "X12345678" not in text and "u-ana" not in text
    assert all(entry_id not in text for entry_id in ids.values()), text


# --- an id Mallory chooses is hers, never Alice's --------------------------------------------------


def test_posting_a_thread_with_alices_id_creates_mallorys_own_and_leaves_alices_alone(
    alice: Caller, mallory: Caller
) -> None:
    ids = alices_thread(alice)
    response = mallory.client.post("/api/v1/threads", {"id": "t-ana", "metadata": {"who": "mallory"}}, format="json")
    assert response.status_code == 201  # created, not "updated": Alice's thread is not found for her
    assert response.json()["active_leaf_id"] is None
    assert_nothing_of_alice(response, ids)
    theirs = Thread.objects.get(agent=alice.agent, external_id="t-ana")
    assert (theirs.metadata, theirs.user_id, theirs.active_leaf_id) == ({"who": "alice"}, "u-ana", ids["answer"])
    assert Thread.objects.get(agent=mallory.agent, external_id="t-ana").metadata == {"who": "mallory"}


def test_importing_a_thread_under_alices_id_makes_mallorys_own(alice: Caller, mallory: Caller) -> None:
    alices_thread(alice)
    response = mallory.client.post("/api/v1/threads/import", {"id": "t-ana", "records": []}, format="json")
    assert response.status_code == 201, response.content
    assert Thread.objects.filter(external_id="t-ana").count() == 2
    assert Entry.objects.filter(agent=alice.agent).count() == 2


def test_two_agents_import_the_same_entry_ids_and_both_succeed_whoever_came_first(
    alice: Caller, mallory: Caller
) -> None:
    head = json.dumps({"type": "head", "leaf": "shared-2"})
    lines = [jsonl_node("shared-1"), jsonl_node("shared-2", parent="shared-1", seq=2), head]
    first = import_jsonl(mallory, lines, "?id=t-squat")
    second = import_jsonl(alice, lines, "?id=t-ana-import")

    assert first.status_code == 201 and second.status_code == 201, (first.content, second.content)
    alices = [e["id"] for e in get_ok(alice.client, "/api/v1/threads/t-ana-import/path")["results"]]
    mallorys = [e["id"] for e in get_ok(mallory.client, "/api/v1/threads/t-squat/path")["results"]]
    assert len(alices) == len(mallorys) == 2 and not set(alices) & set(mallorys)
    # Each reaches its own entries by their ids, and the other's answer 404 as missing ones do.
    assert alice.client.get(f"/api/v1/entries/{alices[1]}").json()["parent_id"] == alices[0]
    assert mallory.client.get(f"/api/v1/entries/{alices[0]}").status_code == 404


def test_importing_another_agents_entry_ids_tells_nothing_about_them(alice: Caller, mallory: Caller) -> None:
    ids = alices_thread(alice)
    alices_file = exported_lines(alice, "t-ana")

    # Alice's ids, in a file of mallory's: imported as mallory's own, no 409 naming alice's entries.
    taken = import_jsonl(mallory, alices_file, "?id=t-probe")
    again = import_jsonl(alice, alices_file, "?id=t-copy")

    assert taken.status_code == 201, taken.content
    probed = [e["id"] for e in get_ok(mallory.client, "/api/v1/threads/t-probe/path")["results"]]
    assert not set(probed) & set(ids.values()) and Entry.objects.filter(agent=alice.agent).count() == 2
    # Alice's own ids are hers: importing them while they stand is her own 409, not mallory's.
    assert again.status_code == 409 and again.json()["error"]["code"] == "entry_exists"


def test_forking_into_alices_thread_id_makes_mallorys_own(alice: Caller, mallory: Caller) -> None:
    alices_thread(alice)
    mine = mallorys_thread(mallory)
    response = mallory.client.post(
        "/api/v1/threads/t-mal/fork", {"entry_id": mine, "new_thread_id": "t-ana"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert Thread.objects.get(agent=alice.agent, external_id="t-ana").forked_from_id is None
    assert Entry.objects.filter(thread__agent=alice.agent).count() == 2


# --- Alice's entry ids inside Mallory's own requests --------------------------------------------------


def test_alices_entry_is_no_leaf_nor_page_boundary_of_mallorys_path(alice: Caller, mallory: Caller) -> None:
    ids = alices_thread(alice)
    mallorys_thread(mallory)
    for params, field in [({"leaf": ids["answer"]}, "leaf"), ({"before": ids["answer"]}, "before")]:
        response = mallory.client.get("/api/v1/threads/t-mal/path", params)
        assert response.status_code == 400 and response.json()["error"]["field"] == field
        assert_nothing_of_alice(response, {})


def test_alices_entry_is_no_leaf_of_mallorys_context(alice: Caller, mallory: Caller) -> None:
    ids = alices_thread(alice)
    mallorys_thread(mallory)
    response = mallory.client.post(
        "/api/v1/threads/t-mal/context", {"max_tokens": 2000, "leaf_id": ids["answer"]}, format="json"
    )
    assert 400 <= response.status_code < 500
    assert_nothing_of_alice(response, {"told": ids["told"]})


def test_alices_entries_are_not_rewind_or_checkout_targets_in_mallorys_thread(alice: Caller, mallory: Caller) -> None:
    ids = alices_thread(alice)
    mallorys_thread(mallory)
    for action in ("rewind", "checkout"):
        response = mallory.client.post(f"/api/v1/threads/t-mal/{action}", {"entry_id": ids["told"]}, format="json")
        assert 400 <= response.status_code < 500, (action, response.content)
    assert Thread.objects.get(agent=alice.agent).active_leaf_id == ids["answer"]


def test_alices_entry_is_no_place_of_mallorys_memory_files(alice: Caller, mallory: Caller) -> None:
    ids = alices_thread(alice)
    response = mallory.client.get("/api/v1/memory-files", {"place": ids["told"]})
    assert response.status_code == 404 and response.json()["error"]["field"] == "place"
    created = mallory.client.post(
        f"/api/v1/memory-tool?place={ids['told']}",
        {"command": "create", "path": "/memories/a.md", "file_text": "x"},
        format="json",
    )
    assert created.status_code == 404
    assert not MemoryFileVersion.objects.exists()


def test_a_quote_of_alices_entry_counts_as_a_quote_of_no_entry(alice: Caller, mallory: Caller) -> None:
    """Otherwise `verified` would tell Mallory whether her guess of Alice's words was right."""
    ids = alices_thread(alice)

    def write(entry_id: str) -> dict[str, Any]:
        evidence = [{"entry_id": entry_id, "quote": SECRET}]
        return dict(
            post_item(mallory, kind="fact", subject="Ana", attribute="passport", value="X12345678", evidence=evidence)
        )

    guessed = write(ids["told"])
    made_up = write("ent_00000000000000000000000000")
    assert guessed["verified"] is made_up["verified"] is False
    assert guessed["evidence"][0]["status"] == made_up["evidence"][0]["status"]
    assert guessed["evidence"][0]["entry_id"] is None
    assert not Evidence.objects.filter(agent=mallory.agent, entry__agent=alice.agent).exists()


def test_search_and_items_filtered_by_alices_person_find_nothing_of_hers(alice: Caller, mallory: Caller) -> None:
    ids = alices_thread(alice)
    post_item(alice, kind="fact", subject="Ana", attribute="passport", value="X12345678", user_id="u-ana")
    for method in ("keyword", "vector", "hybrid"):
        response = mallory.client.post(
            "/api/v1/search", {"text": "passport number X12345678", "user_id": "u-ana", "method": method}, format="json"
        )
        assert response.status_code == 200 and response.json()["results"] == []
    for params in ({"user_id": "u-ana"}, {"thread_id": "t-ana"}, {"subject": "Ana"}, {"status": "suggested"}):
        response = mallory.client.get("/api/v1/items", params)
        assert response.json()["results"] == [], params
        assert_nothing_of_alice(response, ids)


def test_mallorys_memory_tools_neither_read_nor_forget_alices_facts(alice: Caller, mallory: Caller) -> None:
    put_ok(alice.client, "/api/v1/facts/users/u-ana/passport", {"value": "X12345678"})

    def tool(name: str, tool_input: dict[str, Any]) -> str:
        return str(use_fact_tool(mallory, name, tool_input, user_id="u-ana")["result"])

    assert "X12345678" not in tool("search_memory", {"query": "passport"})
    assert tool("forget", {"key": "passport"}) == "Nothing was remembered as passport."
    assert alice.client.get("/api/v1/facts/users/u-ana/passport").json()["value"] == "X12345678"
    assert mallory.client.get("/api/v1/facts/users/u-ana?q=passport").json()["results"] == []


def test_the_api_root_names_only_the_calling_agent(alice: Caller, mallory: Caller) -> None:
    body = mallory.client.get("/api/v1/").json()
    assert body["agent"]["slug"] == "mallory"
    assert "alice" not in str(body)


def test_mallorys_key_never_writes_into_alices_rows(alice: Caller, mallory: Caller) -> None:
    """After every attempt above in one go, each row of Alice's is still hers and unchanged."""
    ids = alices_thread(alice)
    before = sorted(Entry.objects.filter(agent=alice.agent).values_list("id", "content_hash", "redacted_at"))
    for method, url, body in [
        ("post", "/api/v1/threads/t-ana/entries", {"role": "user", "content": "x"}),
        ("post", f"/api/v1/entries/{ids['told']}/redact", {}),
        ("delete", f"/api/v1/entries/{ids['told']}", None),
        ("post", "/api/v1/threads/t-ana/compact", {"strategy": "clear-old-tool-results", "async": False}),
        ("post", "/api/v1/threads/t-ana/extract", {"async": False}),
        ("get", f"/api/v1/tool-results/{ids['told']}", None),
    ]:
        response = getattr(mallory.client, method)(url, body, format="json")
        assert response.status_code == 404, (url, response.content)
    assert sorted(Entry.objects.filter(agent=alice.agent).values_list("id", "content_hash", "redacted_at")) == before
    assert not JobRun.objects.exists()


# --- the admin ---------------------------------------------------------------------------------------


def suggested_item(alice: Caller) -> str:
    item = post_item(alice, kind="fact", subject="Ana", attribute="city", value="Lisbon", user_id="u-ana")
    assert item["status"] == ItemStatus.SUGGESTED
    return str(item["id"])


@pytest.mark.parametrize(
    "url",
    [
        "/admin/",
        "/admin/memoryapp/thread/",
        "/admin/memoryapp/memoryitem/",
        "/admin/memoryapp/memoryitem/review/",
        "/admin/memoryapp/memoryfileversion/tree/",
        "/admin/governance/auditrecord/",
    ],
)
def test_a_logged_in_user_who_is_not_staff_is_sent_to_the_login_page(alice: Caller, url: str) -> None:
    suggested_item(alice)
    response = staff_client(username="norma", is_staff=False).get(url)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_an_agent_key_opens_no_admin_page(alice: Caller) -> None:
    response = alice.client.get("/admin/memoryapp/memoryitem/")
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_staff_without_the_change_permission_cannot_approve_from_the_queue(alice: Caller) -> None:
    item_id = suggested_item(alice)
    viewer = staff_client(username="vera", permissions=("view_memoryitem", "view_entity"))
    audits = AuditRecord.objects.count()
    response = viewer.post("/admin/memoryapp/memoryitem/review/", {"action": "approve", "item": item_id})
    assert response.status_code == 403
    bulk = viewer.post("/admin/memoryapp/memoryitem/review/", {"action": "bulk_approve", "selected": [item_id]})
    assert bulk.status_code == 403
    assert MemoryItem.objects.get(pk=item_id).status == ItemStatus.SUGGESTED
    assert AuditRecord.objects.count() == audits


def test_staff_without_the_change_permission_cannot_approve_by_admin_action_or_form(alice: Caller) -> None:
    item_id = suggested_item(alice)
    viewer = staff_client(username="vera", permissions=("view_memoryitem", "view_entity"))
    viewer.post("/admin/memoryapp/memoryitem/", {"action": "approve_selected", "_selected_action": [item_id]})
    change = viewer.post(f"/admin/memoryapp/memoryitem/{item_id}/change/", {"status": ItemStatus.ACTIVE})
    assert change.status_code == 403
    assert MemoryItem.objects.get(pk=item_id).status == ItemStatus.SUGGESTED


def test_a_reviewer_with_the_permission_can_approve(alice: Caller) -> None:
    """The positive case, so the refusals above are for the permission and not for a broken form."""
    item_id = suggested_item(alice)
    reviewer = staff_client(username="rita", permissions=("change_memoryitem", "view_memoryitem", "view_entity"))
    response = reviewer.post("/admin/memoryapp/memoryitem/review/", {"action": "approve", "item": item_id})
    assert response.status_code == 302
    assert MemoryItem.objects.get(pk=item_id).status == ItemStatus.ACTIVE


def test_staff_without_the_thread_change_permission_cannot_start_jobs(alice: Caller) -> None:
    alices_thread(alice)
    thread = Thread.objects.get(agent=alice.agent)
    viewer = staff_client(username="vera", permissions=("view_thread",))
    for action in ("compact", "extract"):
        viewer.post(f"/admin/memoryapp/thread/{thread.pk}/{action}/")
    assert not JobRun.objects.exists()


def test_verifying_the_audit_chain_needs_the_permission_to_read_the_audit(alice: Caller) -> None:
    alices_thread(alice)
    assert staff_client(username="vera").get("/admin/governance/auditrecord/verify/").status_code == 403
    auditor = staff_client(username="aldo", permissions=("view_auditrecord",))
    assert auditor.get("/admin/governance/auditrecord/verify/").status_code == 302

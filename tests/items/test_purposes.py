"""Purpose-bound recall (issue 25 §8, GDPR purpose limitation): items and facts carry the purposes
they were collected for; a search, a context, a facts search or a memory tool run for a purpose
recalls only memory of that purpose or of none."""

from __future__ import annotations

import json
import zipfile
from typing import Any

from django.test import Client

from governance.export.services import export_archive_path, export_request_create, export_run
from governance.models import AuditRecord
from memoryapp.extraction.services import extraction_now
from memoryapp.llm.port import use_model
from memoryapp.llm.scripted import ScriptedModel
from memoryapp.models import MemoryItem
from tests.kit.api import (
    Caller,
    build_context,
    error_of,
    get_ok,
    patch_ok,
    post_item,
    post_ok,
    post_thread,
    put_ok,
    use_fact_tool,
)
from tests.kit.factories import EntryFactory, ThreadFactory
from tests.mcp.test_mcp_in_process import mcp_post

PURPOSES = "/api/v1/settings/purposes"


def _system_trusted(caller: Caller) -> None:
    """The caller's key writes active items (a model's would wait for review, out of recall)."""
    caller.agent.keys.update(max_trust="system")


def _three_items(caller: Caller) -> None:
    """One item collected for support, one for marketing, one for no purpose in particular."""
    _system_trusted(caller)
    patch_ok(caller.client, PURPOSES, {"purposes": ["support", "marketing"]})
    for attribute, value, purposes in (
        ("ticket", "zephyr support ticket open", ["support"]),
        ("campaign", "zephyr marketing newsletter", ["marketing"]),
        ("home", "zephyr lives in Porto", []),
    ):
        post_item(
            caller,
            kind="fact",
            subject="Ana",
            attribute=attribute,
            value=value,
            trust="system",
            purposes=purposes,
        )


def _search(caller: Caller, **body: Any) -> list[str]:
    """The items a keyword search for "zephyr" finds, by what they were collected for."""
    answer = post_ok(caller.client, "/api/v1/search", {"text": "zephyr", "method": "keyword", **body}, status=200)
    labels = {"support ticket": "support", "marketing newsletter": "marketing", "Porto": "none", "mallory": "mallory"}
    texts = [hit["text"] for hit in answer["results"] if hit["kind"] == "item"]
    return sorted(label for text in texts for words, label in labels.items() if words in text)


def test_the_agents_purposes_are_set_and_read_and_a_bad_one_is_a_400_naming_it(alice: Caller) -> None:
    assert get_ok(alice.client, PURPOSES) == {"purposes": []}
    assert patch_ok(alice.client, PURPOSES, {"purposes": ["support", "support", "billing-2"]}) == {
        "purposes": ["support", "billing-2"]
    }
    assert get_ok(alice.client, PURPOSES) == {"purposes": ["support", "billing-2"]}
    assert AuditRecord.objects.get(action="purposes.set").details == {
        "added": ["support", "billing-2"],
        "removed": [],
    }
    for body, field in (
        ({"purposes": ["ok", "Not A Slug"]}, "purposes[1]"),
        ({"purposes": ["x" * 33]}, "purposes[0]"),
        ({"purposes": "support"}, "purposes"),
        ({"colour": "blue"}, "colour"),
    ):
        response = alice.client.patch(PURPOSES, body, format="json")
        assert error_of(response)["field"] == field, body
    assert get_ok(alice.client, PURPOSES) == {"purposes": ["support", "billing-2"]}


def test_an_item_or_fact_of_a_purpose_the_agent_does_not_list_is_a_400_naming_the_field(alice: Caller) -> None:
    _system_trusted(alice)
    patch_ok(alice.client, PURPOSES, {"purposes": ["support"]})
    item = {"kind": "fact", "subject": "Ana", "attribute": "a", "value": "v", "trust": "system"}
    response = alice.client.post("/api/v1/items", {**item, "purposes": ["support", "marketing"]}, format="json")
    assert (error_of(response)["code"], error_of(response)["field"]) == ("unknown_purpose", "purposes[1]")
    response = alice.client.put("/api/v1/facts/users/ana/tea", {"value": "green", "purposes": ["sales"]}, format="json")
    assert error_of(response)["field"] == "purposes[0]"
    assert not MemoryItem.objects.filter(agent=alice.agent).exists()
    written = post_item(alice, **item, purposes=["support"])
    assert written["purposes"] == ["support"]
    assert put_ok(alice.client, "/api/v1/facts/users/ana/tea", {"value": "green", "purposes": ["support"]})[
        "purposes"
    ] == ["support"]


def test_a_search_for_support_sees_support_and_none_never_marketing_and_without_a_purpose_all(
    alice: Caller,
) -> None:
    _three_items(alice)
    everything = ["marketing", "none", "support"]
    assert _search(alice) == everything
    assert _search(alice, purpose="") == everything
    assert _search(alice, purpose="support") == ["none", "support"]
    assert _search(alice, purpose="marketing") == ["marketing", "none"]
    post_thread(alice, "t-p", user_id="ana")
    assert _search(alice, purpose="support", thread_id="t-p") == ["none", "support"]
    assert _search(alice, purpose="support", user_id="ana") == ["none", "support"]


def test_a_context_for_support_holds_support_and_none_never_marketing(alice: Caller) -> None:
    _three_items(alice)
    post_thread(alice, "t-p")
    without = json.dumps(build_context(alice, "t-p", max_tokens=4000, current_input="zephyr?")["facts"])
    assert "marketing newsletter" in without and "support ticket" in without and "Porto" in without
    support = build_context(alice, "t-p", max_tokens=4000, current_input="zephyr?", purpose="support")
    text = json.dumps(support)
    assert "support ticket" in text and "Porto" in text
    assert "marketing newsletter" not in text


def test_an_unknown_purpose_on_a_search_or_context_is_a_400_naming_purpose(alice: Caller, mallory: Caller) -> None:
    _three_items(alice)
    patch_ok(mallory.client, PURPOSES, {"purposes": ["profiling"]})
    post_thread(alice, "t-p")
    for response in (
        alice.client.post("/api/v1/search", {"text": "zephyr", "purpose": "profiling"}, format="json"),
        alice.client.post("/api/v1/threads/t-p/context", {"max_tokens": 500, "purpose": "sales"}, format="json"),
        alice.client.get("/api/v1/facts/users/ana", {"q": "tea", "purpose": "profiling"}),
        alice.client.post(
            "/api/v1/memory-tools",
            {"name": "search_memory", "input": {"query": "tea"}, "user_id": "ana", "purpose": "profiling"},
            format="json",
        ),
    ):
        assert (error_of(response)["code"], error_of(response)["field"]) == ("unknown_purpose", "purpose")


def test_mallorys_purposes_change_nothing_of_alices_recall(alice: Caller, mallory: Caller) -> None:
    _three_items(alice)
    _system_trusted(mallory)
    patch_ok(mallory.client, PURPOSES, {"purposes": ["marketing"]})
    post_item(
        mallory,
        kind="fact",
        subject="Ana",
        attribute="x",
        value="zephyr mallory",
        trust="system",
        purposes=["marketing"],
    )
    assert _search(alice, purpose="support") == ["none", "support"]
    patch_ok(mallory.client, PURPOSES, {"purposes": []})
    assert get_ok(alice.client, PURPOSES) == {"purposes": ["support", "marketing"]}
    assert _search(alice, purpose="marketing") == ["marketing", "none"]
    assert _search(mallory) == ["mallory"]


def test_the_facts_search_and_the_memory_tools_run_for_a_purpose(alice: Caller) -> None:
    patch_ok(alice.client, PURPOSES, {"purposes": ["support", "marketing"]})
    put_ok(alice.client, "/api/v1/facts/users/ana/tea", {"value": "green tea", "purposes": ["support"]})
    put_ok(alice.client, "/api/v1/facts/users/ana/offer", {"value": "tea discount", "purposes": ["marketing"]})
    put_ok(alice.client, "/api/v1/facts/users/ana/cup", {"value": "blue tea cup"})
    keys = sorted(h["key"] for h in get_ok(alice.client, "/api/v1/facts/users/ana", {"q": "tea"})["results"])
    assert keys == ["cup", "offer", "tea"]
    found = get_ok(alice.client, "/api/v1/facts/users/ana", {"q": "tea", "purpose": "support"})["results"]
    assert sorted(h["key"] for h in found) == ["cup", "tea"]

    # The memory tools: the run's purpose is the configuration's, for what is remembered and found.
    answer = use_fact_tool(alice, "search_memory", {"query": "tea"}, user_id="ana", purpose="support")
    assert "green tea" in answer["result"] and "discount" not in answer["result"]
    use_fact_tool(alice, "remember", {"key": "mug", "value": "a tea mug"}, user_id="ana", purpose="marketing")
    mug = MemoryItem.objects.get(agent=alice.agent, attribute="core:mug")
    assert mug.purposes == ["marketing"]
    answer = use_fact_tool(alice, "search_memory", {"query": "tea"}, user_id="ana", purpose="support")
    assert "mug" not in answer["result"]


def _mcp_tool(client: Client, key: str, name: str, arguments: dict[str, Any], query: str) -> Any:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return mcp_post(client, key, call, query)


def test_mcp_tools_recall_for_the_connections_purpose_and_an_unknown_one_is_a_400(
    alice: Caller, client: Client
) -> None:
    _three_items(alice)
    put_ok(alice.client, "/api/v1/facts/users/ana/tea", {"value": "green tea", "purposes": ["support"]})
    put_ok(alice.client, "/api/v1/facts/users/ana/offer", {"value": "tea discount", "purposes": ["marketing"]})
    post_thread(alice, "t-mcp", user_id="ana")

    answer = _mcp_tool(client, alice.key, "search_memory", {"query": "tea"}, "?user_id=ana&purpose=support")
    assert answer.status_code == 200, answer.content
    text = answer.json()["result"]["content"][0]["text"]
    assert "green tea" in text and "discount" not in text

    arguments = {"max_tokens": 4000, "thread_id": "t-mcp", "current_input": "zephyr?"}
    answer = _mcp_tool(client, alice.key, "get_context", arguments, "?user_id=ana&purpose=support")
    built = json.dumps(answer.json()["result"])
    assert "support ticket" in built and "marketing newsletter" not in built
    answer = _mcp_tool(client, alice.key, "get_context", {**arguments, "purpose": "support"}, "?user_id=ana")
    built = json.dumps(answer.json()["result"])
    assert "support ticket" in built and "marketing newsletter" not in built
    answer = _mcp_tool(client, alice.key, "get_context", arguments, "?user_id=ana")
    assert "marketing newsletter" in json.dumps(answer.json()["result"])

    refused = mcp_post(client, alice.key, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, "?purpose=profiling")
    assert refused.status_code == 400
    assert (refused.json()["error"]["code"], refused.json()["error"]["field"]) == ("unknown_purpose", "purpose")


def test_extraction_gives_items_the_purpose_the_threads_metadata_names_when_the_agent_lists_it(
    alice: Caller,
) -> None:
    patch_ok(alice.client, PURPOSES, {"purposes": ["support"]})
    for external_id, purpose in (("t-support", "support"), ("t-sales", "sales"), ("t-none", None)):
        thread = ThreadFactory(
            agent=alice.agent, external_id=external_id, metadata={"purpose": purpose} if purpose else {}
        )
        EntryFactory(thread=thread, role="user", content="I am vegetarian.")
        # One slot a thread: a repeat of the same statement would merge into the first item.
        said = {"kind": "preference", "subject": "user", "attribute": f"diet {external_id}", "value": "vegetarian"}
        quoted = [{"message": 1, "quote": "I am vegetarian"}]
        with use_model(ScriptedModel([json.dumps([{**said, "evidence": quoted}])])):
            extraction_now(thread=thread)
    by_thread = {i.metadata["extracted_from_thread"]: i.purposes for i in MemoryItem.objects.filter(agent=alice.agent)}
    # A purpose the agent does not list (sales) is no purpose: extraction runs after the write.
    assert by_thread == {"t-support": ["support"], "t-sales": [], "t-none": []}


def test_staff_see_the_agents_purposes_an_items_purposes_and_a_persons_export_holds_them(
    alice: Caller, admin_client: Client
) -> None:
    _three_items(alice)
    page = admin_client.get(f"/admin/memoryapp/agent/{alice.agent.pk}/change/")
    assert page.status_code == 200
    assert "support, marketing" in page.content.decode()
    ticket = MemoryItem.objects.get(agent=alice.agent, attribute="ticket")
    page = admin_client.get(f"/admin/memoryapp/memoryitem/{ticket.pk}/change/")
    assert page.status_code == 200
    assert '<td colspan="3" id="ip-purposes">support</td>' in page.content.decode()
    for attribute, value, purposes in (("ticket", "open", ["support"]), ("home", "Porto", [])):
        post_item(
            alice,
            kind="fact",
            subject="Ana",
            attribute=attribute,
            value=value,
            trust="system",
            user_id="u-ana",
            purposes=purposes,
        )
    put_ok(alice.client, "/api/v1/facts/users/u-ana/tea", {"value": "green", "purposes": ["marketing"]})
    request = export_request_create(user_id="u-ana", agent_ids=[], actor="staff:officer")
    export_run(request_id=request.pk)
    request.refresh_from_db()
    path = export_archive_path(request)
    assert path is not None
    with zipfile.ZipFile(path) as archive:
        lines = {name: archive.read(name).decode().splitlines() for name in ("items.jsonl", "facts.jsonl")}
    items = {r["item"]["attribute"]: r["item"]["purposes"] for r in map(json.loads, lines["items.jsonl"])}
    facts = {r["fact"]["attribute"]: r["fact"]["purposes"] for r in map(json.loads, lines["facts.jsonl"])}
    assert (items, facts) == ({"ticket": ["support"], "home": []}, {"core:tea": ["marketing"]})

"""The MCP view in the test process (Django's test client): where its tools' work runs."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.test import Client

from memoryapp.mcp import server
from memoryapp.models import MemoryItem
from tests.kit.api import Caller, answered, post_thread
from tests.threads.test_append_one_statement import slow_path  # noqa: F401  (fixture)


def mcp_post(client: Client, key: str, message: dict[str, Any], query: str = "") -> Any:
    return client.post(
        f"/mcp/{query}",
        json.dumps(message),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
        HTTP_ACCEPT="application/json, text/event-stream",
        HTTP_MCP_PROTOCOL_VERSION="2025-06-18",
    )


def test_mcp_tools_run_on_the_requests_own_thread_and_database_connection(
    alice: Caller, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK would run a plain function in a worker thread of its own, where Django opens a
    connection no request ever closes: the work comes back to the request's thread instead (and so
    sees this test's transaction, which no other connection could)."""
    threads: list[int] = []
    guarded = server._guarded

    def spy(work: Any, caller: server.McpCaller) -> Any:
        threads.append(threading.get_ident())
        return guarded(work, caller)

    monkeypatch.setattr(server, "_guarded", spy)
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "remember", "arguments": {"key": "tea", "value": "green"}},
    }
    answer = mcp_post(client, alice.key, call, "?user_id=ana")
    assert answer.status_code == 200, answer.content
    assert answer.json()["result"]["content"][0]["text"] == "Remembered tea: green"
    assert threads == [threading.get_ident()]
    assert MemoryItem.objects.get(agent=alice.agent, attribute="core:tea").namespace == "users/ana"


def test_an_mcp_request_with_a_scope_value_that_is_too_long_is_a_400_naming_it(alice: Caller, client: Client) -> None:
    answer = mcp_post(client, alice.key, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, "?user_id=" + "u" * 129)
    assert answer.status_code == 400
    assert (answer.json()["error"]["code"], answer.json()["error"]["field"]) == ("invalid_scope", "user_id")


def _tool(client: Client, key: str, name: str, arguments: dict[str, Any], query: str = "") -> dict[str, Any]:
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    answer = mcp_post(client, key, call, query)
    assert answer.status_code == 200, answer.content
    return dict(answer.json()["result"])


def test_mcp_get_context_takes_the_connections_project_documents_and_a_time_zone(
    alice: Caller, bob: Caller, client: Client
) -> None:
    """get_context had neither the REST endpoint's `project_id` nor its `time_zone`: a connection
    opened for a project got none of the project's standing instructions, and no zone could be asked."""
    post_thread(alice, "t-mcp")
    answered(
        alice.client.put(
            "/api/v1/context-documents/AGENTS.md?project_id=p1", {"content": "Cite sources."}, format="json"
        ),
        201,
    )
    answered(
        bob.client.put("/api/v1/context-documents/AGENTS.md?project_id=p1", {"content": "Bob's rule."}, format="json"),
        201,
    )
    built = _tool(client, alice.key, "get_context", {"max_tokens": 2000}, "?project_id=p1&thread_id=t-mcp")
    context = built["structuredContent"]
    assert [(d["name"], d["scope"]) for d in context["documents"]] == [("AGENTS.md", "project")]
    assert "Cite sources." in json.dumps(context["messages"]) and "Bob's rule." not in json.dumps(context)

    zoned = _tool(client, alice.key, "get_context", {"max_tokens": 2000, "time_zone": "Asia/Tokyo"}, "?thread_id=t-mcp")
    assert zoned["structuredContent"]["metadata"]["time_zone"] == "Asia/Tokyo"
    assert zoned["structuredContent"]["documents"] == []  # no project named: the thread's own (none)
    bad = _tool(client, alice.key, "get_context", {"max_tokens": 2000, "time_zone": "Mars/Base"}, "?thread_id=t-mcp")
    assert bad["isError"] and bad["structuredContent"]["error"]["field"] == "time_zone", bad


@pytest.mark.parametrize(
    "headers",
    [
        {"HTTP_ACCEPT": "text/event-stream"},
        {},
        {"HTTP_ACCEPT": "text/event-stream", "HTTP_LAST_EVENT_ID": "0"},
        {"HTTP_ACCEPT": "application/json, text/event-stream", "HTTP_MCP_PROTOCOL_VERSION": "2025-06-18"},
    ],
    ids=["event-stream", "no-accept", "last-event-id", "mcp-client"],
)
def test_a_get_of_the_mcp_endpoint_answers_405_at_once_and_never_holds_the_thread(
    alice: Caller, client: Client, headers: dict[str, str]
) -> None:
    """Stateless, there is no GET event stream: the SDK would open one and wait on it forever (issue 23).
    Asked in a thread of its own, so a hang fails the test instead of hanging it."""
    answers: list[Any] = []
    asking = threading.Thread(
        target=lambda: answers.append(client.get("/mcp/", HTTP_AUTHORIZATION=f"Bearer {alice.key}", **headers)),
        daemon=True,
    )
    asking.start()
    asking.join(timeout=60)  # a generous deadline: a hang is what fails, not a slow answer
    assert answers, "GET /mcp/ did not answer"
    answer = answers[0]
    assert answer.status_code == 405
    assert answer["Allow"] == "POST"
    assert answer.json()["error"]["code"] == "method_not_allowed"


def test_a_delete_or_a_get_without_a_key_at_the_mcp_endpoint_is_a_405_too(client: Client) -> None:
    for answer in (client.get("/mcp"), client.delete("/mcp/")):
        assert answer.status_code == 405 and answer.json()["error"]["code"] == "method_not_allowed"


def test_get_memory_tools_answers_the_mcp_tools_list_and_needs_a_key(
    alice: Caller, mallory: Caller, client: Client
) -> None:
    listed = mcp_post(client, alice.key, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert listed.status_code == 200, listed.content
    by_mcp = [(tool["name"], tool["inputSchema"]) for tool in listed.json()["result"]["tools"]]
    answer = client.get("/api/v1/memory-tools", HTTP_AUTHORIZATION=f"Bearer {alice.key}")
    assert answer.status_code == 200, answer.content
    by_rest = [(tool["name"], tool["input_schema"]) for tool in answer.json()["tools"]]
    assert by_rest == by_mcp and len(by_rest) == 9
    # The same list for every agent; none without a key.
    assert client.get("/api/v1/memory-tools", HTTP_AUTHORIZATION=f"Bearer {mallory.key}").json() == answer.json()
    assert client.get("/api/v1/memory-tools").status_code == 401


def test_mcp_single_turn_is_one_statement_and_a_batch_one_transaction(
    alice: Caller,
    client: Client,
    monkeypatch: pytest.MonkeyPatch,
    slow_path: list[int],  # noqa: F811  (the fixture imported above: the appends that took the transaction)
) -> None:
    """thread_append with one plain turn is the REST single append's one statement
    (threads.services._append_one_fast), not the batch's transaction; a batch and a turn that is not
    plain go the transaction's way, whose errors still name `entries[0].<field>`."""
    from memoryapp.models import Entry
    from memoryapp.threads import services

    batched = slow_path
    monkeypatch.setattr(server, "thread_append", services.thread_append)  # the counted one
    post_thread(alice, "t-one")
    one = _tool(
        client, alice.key, "thread_append", {"entries": [{"role": "user", "content": "hello"}], "thread_id": "t-one"}
    )
    assert not one["isError"], one
    assert batched == []
    two = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    assert not _tool(client, alice.key, "thread_append", {"entries": two, "thread_id": "t-one"})["isError"]
    assert batched == [2]
    stored = list(Entry.objects.filter(thread__external_id="t-one", thread__agent=alice.agent).order_by("seq"))
    assert [(e.seq, e.content) for e in stored] == [(1, "hello"), (2, "a"), (3, "b")]
    assert [e.parent_id for e in stored] == [None, stored[0].id, stored[1].id]

    wrong = _tool(
        client,
        alice.key,
        "thread_append",
        {"entries": [{"role": "user", "content": "c", "parent_id": "e_missing"}], "thread_id": "t-one"},
    )
    assert wrong["isError"]
    assert wrong["structuredContent"]["error"]["field"] == "entries[0].parent_id"
    assert batched == [2, 1]

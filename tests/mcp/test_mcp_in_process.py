"""The MCP view in the test process (Django's test client): where its tools' work runs."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from django.test import Client

from memoryapp.mcp import server
from memoryapp.models import MemoryItem
from tests.kit.api import Caller


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

"""The MCP server at /mcp/, reached by the SDK's own client (mcp.Client over streamable HTTP) on a
real gunicorn serving the tests' database, as `make run` serves it."""

from __future__ import annotations

import asyncio
import http.client
import json
import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, TextContent, TextResourceContents

from governance.models import AuditRecord
from memoryapp.compaction.services import compaction_now
from memoryapp.items.facts import fact_recall, fact_remember
from memoryapp.models import ChannelSession, Entry, MemoryFileVersion, MemoryItem, Thread
from tests.forgetting.test_index_races import WAIT
from tests.kit.api import Caller
from tests.kit.erasing import eraser_holding
from tests.kit.factories import tool_thread
from tests.kit.mentions import PERSON
from tests.kit.servers import gunicorn_serving

pytestmark = pytest.mark.slow

T = TypeVar("T")
TOOLS = {
    "remember",
    "forget",
    "search_memory",
    "memory",
    "working_note",
    "get_context",
    "thread_append",
    "read_result",
    "session_open",
}


@pytest.fixture(scope="module")
def service(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The service under gunicorn for the module's tests (each takes transactional_db)."""
    with gunicorn_serving(var_dir=tmp_path_factory.mktemp("mcp-service"), threads=4) as where:
        yield f"http://{where}"


def over_mcp(url: str, key: str, work: Callable[[Client], Awaitable[T]]) -> T:
    """Connect the SDK's client to `url` with the agent's key and run `work` with it."""

    async def main() -> T:
        headers = {"Authorization": f"Bearer {key}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            return await work(client)

    return asyncio.run(main())


def leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def text_of(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


def test_an_mcp_client_calls_every_tool_and_reads_every_resource_over_http(
    transactional_db: None, service: str, alice: Caller
) -> None:
    url = f"{service}/mcp/?user_id=ana&thread_id=t-mcp"
    seen: dict[str, Any] = {}

    async def tour(client: Client) -> None:
        seen["tools"] = {tool.name for tool in (await client.list_tools()).tools}
        seen["append"] = await client.call_tool(
            "thread_append",
            {
                "entries": [
                    {"role": "user", "content": "I moved to Lisbon and shellfish makes me ill."},
                    {"role": "assistant", "content": "Noted: Lisbon, and no shellfish."},
                ]
            },
        )
        seen["remember"] = await client.call_tool("remember", {"key": "city", "value": "Lisbon"})
        seen["search"] = await client.call_tool("search_memory", {"query": "city"})
        seen["remember_bad"] = await client.call_tool("remember", {"key": "a/b", "value": "x"})
        seen["create"] = await client.call_tool(
            "memory", {"command": "create", "path": "/memories/notes.md", "file_text": "likes tea\n"}
        )
        seen["replace"] = await client.call_tool(
            "memory",
            {"command": "str_replace", "path": "/memories/notes.md", "old_str": "tea", "new_str": "green tea"},
        )
        seen["view"] = await client.call_tool("memory", {"command": "view", "path": "/memories/notes.md"})
        seen["view_missing"] = await client.call_tool("memory", {"command": "view", "path": "/memories/none.md"})
        seen["note"] = await client.call_tool("working_note", {"action": "append", "content": "ask about the move"})
        seen["context"] = await client.call_tool("get_context", {"max_tokens": 2000, "current_input": "dinner?"})
        seen["context_bad"] = await client.call_tool("get_context", {"max_tokens": 0})
        seen["resources"] = {str(r.uri) for r in (await client.list_resources()).resources}
        seen["index"] = await client.read_resource("memory://files")
        seen["file"] = await client.read_resource("memory://files/memories/notes.md")
        seen["forget"] = await client.call_tool("forget", {"key": "city"})
        seen["search_after"] = await client.call_tool("search_memory", {"query": "city"})

    over_mcp(url, alice.key, tour)

    assert seen["tools"] == TOOLS
    # thread_append: the thread of the connection's URL, created for its person, two entries chained.
    appended = seen["append"].structured_content
    assert not seen["append"].is_error and len(appended["entries"]) == 2, text_of(seen["append"])
    thread = Thread.objects.get(agent=alice.agent, external_id="t-mcp")
    assert thread.user_id == "ana" and thread.active_leaf_id == appended["active_leaf_id"]
    assert Entry.objects.filter(thread=thread).count() == 2
    # The facts tools answer the REST endpoint's texts, in the person's namespace.
    assert text_of(seen["remember"]) == "Remembered city: Lisbon"
    assert text_of(seen["search"]) == "Found 1 memory:\n- city: Lisbon"
    assert seen["remember_bad"].is_error and text_of(seen["remember_bad"]).startswith("Error: key must")
    assert text_of(seen["forget"]) == "Forgot city."
    assert text_of(seen["search_after"]) == "No memories matched."
    fact = MemoryItem.objects.get(agent=alice.agent, attribute="core:city")
    assert (fact.namespace, fact.user_id, fact.expired_at is not None) == ("users/ana", "ana", True)
    # The memory tool: the texts of Anthropic's tool, versions written in the connection's scope.
    assert text_of(seen["create"]) == "File created successfully at: /memories/notes.md"
    assert "green tea" in text_of(seen["replace"])
    assert seen["view_missing"].is_error
    assert text_of(seen["view_missing"]) == "The path /memories/none.md does not exist. Please provide a valid path."
    assert seen["view_missing"].structured_content["error"]["code"] == "path_not_found"
    versions = MemoryFileVersion.objects.filter(agent=alice.agent, path="/memories/notes.md")
    assert {(v.user_id, v.thread_id, v.author) for v in versions} == {("ana", "t-mcp", "model")}
    assert versions.count() == 2
    # The same view over REST answers the same text.
    rest = alice.client.post(
        "/api/v1/memory-tool?user_id=ana&thread_id=t-mcp",
        {"command": "view", "path": "/memories/notes.md"},
        format="json",
    )
    assert rest.status_code == 200 and rest.json()["result"] == text_of(seen["view"])
    # The working note is a file of the scope like any other.
    assert text_of(seen["note"]) == "ask about the move"
    assert MemoryFileVersion.objects.filter(agent=alice.agent, path="/memories/working.md", user_id="ana").exists()
    # get_context builds from the thread, with the API's checks on its input.
    built = seen["context"].structured_content
    assert not seen["context"].is_error, text_of(seen["context"])
    assert any("Lisbon" in str(m["content"]) for m in built["messages"]), built["messages"]
    assert seen["context_bad"].is_error
    assert seen["context_bad"].structured_content["error"]["field"] == "max_tokens"
    # Resources: the index and each file of the scope.
    assert {"memory://files", "memory://files/memories/notes.md", "memory://files/memories/working.md"} <= seen[
        "resources"
    ]
    index = json.loads(seen["index"].contents[0].text)
    assert {f["path"] for f in index["files"]} == {"/memories/notes.md", "/memories/working.md"}
    file = seen["file"].contents[0]
    assert isinstance(file, TextResourceContents) and file.text == "likes green tea\n"
    # Audited as the REST API audits: the agent as the actor, ids and counts only.
    actions = set(AuditRecord.objects.filter(actor="agent:alice").values_list("action", flat=True))
    assert {"item.written", "item.forgotten"} <= actions, actions
    assert not AuditRecord.objects.filter(details__icontains="Lisbon").exists()


def test_another_agents_key_sees_none_of_the_first_agents_memory_through_mcp(
    transactional_db: None, service: str, alice: Caller, bob: Caller
) -> None:
    url = f"{service}/mcp/?user_id=ana&thread_id=t-mcp"

    async def alice_writes(client: Client) -> None:
        await client.call_tool("thread_append", {"entries": [{"role": "user", "content": "my pin is 4242"}]})
        await client.call_tool("remember", {"key": "pin", "value": "4242"})
        await client.call_tool("memory", {"command": "create", "path": "/memories/secret.md", "file_text": "4242\n"})

    over_mcp(url, alice.key, alice_writes)
    seen: dict[str, Any] = {}

    async def bob_looks(client: Client) -> None:
        seen["search"] = await client.call_tool("search_memory", {"query": "pin"})
        seen["view"] = await client.call_tool("memory", {"command": "view", "path": "/memories"})
        seen["note"] = await client.call_tool("working_note", {"action": "read"})
        seen["context"] = await client.call_tool("get_context", {"max_tokens": 2000, "current_input": "pin"})
        seen["resources"] = {str(r.uri) for r in (await client.list_resources()).resources}
        try:
            await client.read_resource("memory://files/memories/secret.md")
            seen["read"] = "answered"
        except Exception as exc:
            seen["read"] = str(exc)

    over_mcp(url, bob.key, bob_looks)
    assert text_of(seen["search"]) == "No memories matched."
    assert "secret.md" not in text_of(seen["view"])
    assert text_of(seen["note"]) == ""
    # Bob has no thread t-mcp: not found, as the REST API answers another agent's thread.
    assert seen["context"].is_error and seen["context"].structured_content["error"]["code"] == "not_found"
    assert seen["resources"] == {"memory://files"}
    assert "secret.md" in seen["read"] and seen["read"] != "answered"
    assert Entry.objects.filter(agent=alice.agent).count() == 1 and not Entry.objects.filter(agent=bob.agent).exists()


def test_a_client_of_the_initialize_handshake_era_lists_and_calls_the_tools(
    transactional_db: None, service: str, alice: Caller
) -> None:
    """Clients that speak the 2025 protocol (an initialize handshake first) are served too."""

    async def handshake(client: Client) -> tuple[set[str], str]:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        return tools, text_of(await client.call_tool("remember", {"key": "tea", "value": "green"}))

    async def main() -> tuple[set[str], str]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {alice.key}"}, timeout=60) as http:
            transport = streamable_http_client(f"{service}/mcp?user_id=ana", http_client=http)
            async with Client(transport, mode="legacy") as client:
                assert client.protocol_version < "2026"
                return await handshake(client)

    tools, remembered = asyncio.run(main())
    assert tools == TOOLS and remembered == "Remembered tea: green"
    assert MemoryItem.objects.get(agent=alice.agent, attribute="core:tea").user_id == "ana"


def test_a_bad_or_missing_key_is_refused_at_the_mcp_endpoint(
    transactional_db: None, service: str, alice: Caller
) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    for key in ("mk_not_a_key", None):
        auth = {"Authorization": f"Bearer {key}"} if key else {}
        answer = httpx2.post(f"{service}/mcp/", json=initialize, headers={**headers, **auth}, timeout=30)
        assert answer.status_code == 401, answer.text
        assert answer.headers["www-authenticate"] == "Bearer"
        assert answer.json()["error"]["code"] == ("invalid_key" if key else "not_authenticated")

    async def list_tools(client: Client) -> Any:
        return await client.list_tools()

    # The SDK's client, refused with a 401, raises (its error says the server answered an error).
    with pytest.raises(BaseException) as refused:
        over_mcp(f"{service}/mcp/", "mk_not_a_key", list_tools)
    assert any(isinstance(leaf, MCPError) for leaf in leaves(refused.value)), repr(refused.value)
    # An unknown query parameter (a typo of the scope) is refused too, before anything runs.
    typo = httpx2.post(
        f"{service}/mcp/?user=ana",
        json=initialize,
        headers={**headers, "Authorization": f"Bearer {alice.key}"},
        timeout=30,
    )
    assert typo.status_code == 400 and typo.json()["error"]["field"] == "user"


def test_a_chunked_mcp_request_larger_than_a_pages_upload_limit_is_read_whole(
    transactional_db: None, service: str, alice: Caller
) -> None:
    """A chunked body to /mcp/ is held to the API's 32 MiB, not to the admin pages' 2.5 MB."""
    text = "turn " * 180_000  # 900 kB an entry: three of them pass Django's DATA_UPLOAD_MAX_MEMORY_SIZE
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "thread_append", "arguments": {"entries": [{"role": "user", "content": text}] * 3}},
    }
    body = json.dumps(call).encode()
    host, port = service.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=120)
    headers = {
        "Authorization": f"Bearer {alice.key}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
        "Transfer-Encoding": "chunked",
    }
    pieces = (body[start : start + 65536] for start in range(0, len(body), 65536))
    connection.request("POST", "/mcp/?thread_id=t-big", body=pieces, headers=headers, encode_chunked=True)
    answer = connection.getresponse()
    raw = answer.read()
    connection.close()
    assert answer.status == 200, raw[:500]
    assert json.loads(raw)["result"]["isError"] is False
    assert Entry.objects.filter(agent=alice.agent, thread__external_id="t-big").count() == 3


# --- scope: the configuration decides whose memory the model touches ---------------------------------


def _error_of(result: CallToolResult) -> Any:
    assert result.is_error, text_of(result)
    return (result.structured_content or {}).get("error")


def test_a_connection_for_one_person_reaches_no_other_persons_facts_or_threads_through_tool_arguments(
    transactional_db: None, service: str, alice: Caller
) -> None:
    """A connection scoped to user_id=ben read and changed ana's facts through `namespace`, and read
    and appended to ana's thread through `thread_id`. Every such argument stays inside the
    connection's scope; outside, the answer is the one a missing object gets."""
    fact_remember(agent=alice.agent, namespace="users/ana", key="pin", value="4242")
    fact_remember(agent=alice.agent, namespace="users/ana/health", key="allergy", value="shellfish")
    fact_remember(agent=alice.agent, namespace="team", key="wifi", value="guest-net")
    anas = tool_thread(alice.agent, rounds=1, external_id="t-ana")
    Thread.objects.filter(pk=anas.pk).update(user_id="ana")
    anas_result = Entry.objects.get(thread=anas, type="tool_result")
    anas_entries = Entry.objects.filter(thread=anas).count()
    seen: dict[str, Any] = {}

    async def ben(client: Client) -> None:
        seen["search_ana"] = await client.call_tool("search_memory", {"query": "pin", "namespace": "users/ana"})
        seen["search_ana_nested"] = await client.call_tool("search_memory", {"namespace": "users/ana/health"})
        seen["search_everyone"] = await client.call_tool("search_memory", {"query": "shellfish", "namespace": "users"})
        seen["remember_ana"] = await client.call_tool(
            "remember", {"key": "pin", "value": "0000", "namespace": "users/ana"}
        )
        seen["forget_ana"] = await client.call_tool("forget", {"key": "pin", "namespace": "users/ana"})
        seen["forget_missing"] = await client.call_tool("forget", {"key": "pin"})
        seen["context_ana"] = await client.call_tool("get_context", {"max_tokens": 2000, "thread_id": "t-ana"})
        seen["context_none"] = await client.call_tool("get_context", {"max_tokens": 2000, "thread_id": "t-none"})
        entries = [{"role": "user", "content": "ben was here"}]
        seen["append_ana"] = await client.call_tool("thread_append", {"entries": entries, "thread_id": "t-ana"})
        seen["append_none"] = await client.call_tool("thread_append", {"entries": entries, "thread_id": "t-none"})
        seen["read_ana"] = await client.call_tool("read_result", {"handle": anas_result.id})
        seen["read_none"] = await client.call_tool("read_result", {"handle": "ent_missing"})
        # Inside the scope: ben's own namespace and a shared one.
        seen["remember_own"] = await client.call_tool(
            "remember", {"key": "tea", "value": "green", "namespace": "users/ben/prefs"}
        )
        seen["search_shared"] = await client.call_tool("search_memory", {"query": "wifi", "namespace": "team"})

    over_mcp(f"{service}/mcp/?user_id=ben", alice.key, ben)

    assert text_of(seen["search_ana"]) == "No memories matched."
    assert text_of(seen["search_ana_nested"]) == "Nothing is remembered yet."
    assert text_of(seen["search_everyone"]) == "No memories matched."
    assert seen["remember_ana"].is_error and "4242" not in text_of(seen["remember_ana"])
    assert text_of(seen["forget_ana"]) == text_of(seen["forget_missing"]) == "Nothing was remembered as pin."
    assert fact_recall(agent=alice.agent, namespace="users/ana", key="pin")["value"] == "4242"  # type: ignore[index]
    assert _error_of(seen["context_ana"]) == _error_of(seen["context_none"])
    assert _error_of(seen["context_ana"])["code"] == "not_found"
    assert _error_of(seen["append_ana"]) == _error_of(seen["append_none"])
    assert Entry.objects.filter(thread=anas).count() == anas_entries
    assert not Thread.objects.filter(agent=alice.agent, external_id="t-none").exists()
    assert _error_of(seen["read_ana"]) == _error_of(seen["read_none"])
    assert "PAGE-0-BODY" not in json.dumps(seen["read_ana"].model_dump(mode="json"))
    assert text_of(seen["remember_own"]) == "Remembered tea: green"
    assert text_of(seen["search_shared"]) == "Found 1 memory:\n- wifi: guest-net"


def test_a_connection_for_one_thread_reaches_no_other_thread_and_writes_no_message_as_another_person(
    transactional_db: None, service: str, alice: Caller
) -> None:
    """With a thread named in the URL, `thread_id` may only repeat it; a message the model says
    another person wrote (`metadata.userId`, what that person's erasure follows) is refused."""
    other = tool_thread(alice.agent, rounds=1, external_id="t-other")
    Thread.objects.filter(pk=other.pk).update(user_id="ben")
    seen: dict[str, Any] = {}

    async def ben(client: Client) -> None:
        seen["own"] = await client.call_tool("thread_append", {"entries": [{"role": "user", "content": "hi"}]})
        seen["other"] = await client.call_tool(
            "get_context", {"max_tokens": 2000, "thread_id": "t-other", "current_input": "page"}
        )
        seen["as_ana"] = await client.call_tool(
            "thread_append", {"entries": [{"role": "user", "content": "I am ana", "metadata": {"userId": "ana"}}]}
        )
        seen["as_ben"] = await client.call_tool(
            "thread_append", {"entries": [{"role": "user", "content": "me", "metadata": {"userId": "ben"}}]}
        )
        seen["project"] = await client.call_tool("get_context", {"max_tokens": 2000, "project_id": "p-other"})

    over_mcp(f"{service}/mcp/?user_id=ben&thread_id=t-ben&project_id=p-ben", alice.key, ben)

    assert not seen["own"].is_error, text_of(seen["own"])
    assert _error_of(seen["other"])["code"] == "not_found"
    refused = _error_of(seen["as_ana"])
    assert refused["code"] == "not_found" and refused["field"] == "entries[0].metadata.userId"
    assert not seen["as_ben"].is_error, text_of(seen["as_ben"])
    assert _error_of(seen["project"])["code"] == "not_found"
    assert not Entry.objects.filter(agent=alice.agent, metadata__userId="ana").exists()
    assert Thread.objects.get(agent=alice.agent, external_id="t-ben").user_id == "ben"


def test_session_open_gets_or_creates_the_connections_persons_channel_session(
    transactional_db: None, service: str, alice: Caller, bob: Caller
) -> None:
    """`session_open` as `POST /api/v1/sessions`: made once, then found; for the connection's person
    only (another person answers as missing), never from a connection bound to one thread."""
    seen: dict[str, Any] = {}

    async def ana(client: Client) -> None:
        seen["made"] = await client.call_tool("session_open", {"channel_type": "telegram", "channel_id": "chat-9"})
        seen["again"] = await client.call_tool(
            "session_open", {"channel_type": "telegram", "channel_id": "chat-9", "user_id": "ana"}
        )
        seen["as_ben"] = await client.call_tool(
            "session_open", {"channel_type": "telegram", "channel_id": "chat-9", "user_id": "ben"}
        )
        seen["bad"] = await client.call_tool("session_open", {"channel_type": "tele gram", "channel_id": "chat-9"})

    async def bound(client: Client) -> None:
        seen["bound"] = await client.call_tool("session_open", {"channel_type": "telegram", "channel_id": "chat-9"})

    async def bobs(client: Client) -> None:
        seen["bob"] = await client.call_tool("session_open", {"channel_type": "telegram", "channel_id": "chat-9"})

    over_mcp(f"{service}/mcp/?user_id=ana", alice.key, ana)
    over_mcp(f"{service}/mcp/?user_id=ana&thread_id=t-ana", alice.key, bound)
    over_mcp(f"{service}/mcp/?user_id=ana", bob.key, bobs)

    made, again = seen["made"].structured_content, seen["again"].structured_content
    assert not seen["made"].is_error and made["created"] is True, text_of(seen["made"])
    assert again["created"] is False and again["session_id"] == made["session_id"]
    assert again["thread_id"] == made["thread_id"] and made["status"] == "active"
    session = ChannelSession.objects.get(pk=made["session_id"])
    assert (session.agent_id, session.user_id, session.thread.user_id) == (alice.agent.pk, "ana", "ana")
    assert _error_of(seen["as_ben"])["code"] == "not_found"
    assert _error_of(seen["bad"])["field"] == "channel_type"
    assert _error_of(seen["bound"])["field"] == "thread_id"
    bobs_session = seen["bob"].structured_content
    assert bobs_session["created"] is True and bobs_session["thread_id"] != made["thread_id"]
    assert ChannelSession.objects.filter(agent=alice.agent).count() == 1


# --- read_result: the tool the cleared placeholders name -----------------------------------------------


def test_read_result_reads_back_a_cleared_tool_result_of_the_connections_thread_only(
    transactional_db: None, service: str, alice: Caller, bob: Caller
) -> None:
    """Clearing old tool results (and automatic compaction) leaves placeholders saying `read it again
    with read_result(handle=...)`: the MCP server has that tool, scoped like the others."""
    thread = tool_thread(alice.agent, rounds=2, external_id="t-tools")
    Thread.objects.filter(pk=thread.pk).update(user_id="ana")
    elsewhere = tool_thread(alice.agent, rounds=1, external_id="t-elsewhere")
    Thread.objects.filter(pk=elsewhere.pk).update(user_id="ana")
    compaction_now(thread=thread, strategy="clear-old-tool-results", options={"keep_tool_uses": 1})
    seen: dict[str, Any] = {}

    async def model(client: Client) -> None:
        seen["context"] = await client.call_tool("get_context", {"max_tokens": 100_000})
        placeholder = json.dumps(seen["context"].structured_content)
        handle = re.search(r'read_result\(handle=\\"([^"\\]+)\\"\)', placeholder)
        assert handle is not None, placeholder[:2000]
        seen["handle"] = handle.group(1)
        seen["read"] = await client.call_tool("read_result", {"handle": seen["handle"]})

    over_mcp(f"{service}/mcp/?user_id=ana&thread_id=t-tools", alice.key, model)

    read = seen["read"]
    assert not read.is_error and text_of(read).startswith("PAGE-0-BODY"), text_of(read)[:200]
    assert read.structured_content["handle"] == seen["handle"]
    assert (read.structured_content["thread_id"], read.structured_content["tool_name"]) == ("t-tools", "fetch_page")
    handle = seen["handle"]
    other_thread = Entry.objects.get(thread=elsewhere, type="tool_result").id
    user_message = Entry.objects.filter(thread=thread, role="user").first().id  # type: ignore[union-attr]
    answers: dict[str, Any] = {}

    def read_as(url: str, key: str, label: str, handles: dict[str, str]) -> None:
        async def work(client: Client) -> None:
            for name, value in handles.items():
                answers[f"{label}:{name}"] = await client.call_tool("read_result", {"handle": value})

        over_mcp(url, key, work)

    read_as(f"{service}/mcp/?user_id=ana&thread_id=t-tools", alice.key, "same", {"other thread": other_thread})
    read_as(f"{service}/mcp/?user_id=ana&thread_id=t-tools", alice.key, "msg", {"not a result": user_message})
    read_as(f"{service}/mcp/?user_id=ben", alice.key, "person", {"another person": handle})
    read_as(f"{service}/mcp/?user_id=ana&thread_id=t-elsewhere", alice.key, "thread", {"another thread": handle})
    read_as(f"{service}/mcp/?user_id=ana&thread_id=t-tools", bob.key, "agent", {"another agent": handle})
    read_as(f"{service}/mcp/?user_id=ana&thread_id=t-tools", alice.key, "none", {"missing": "ent_missing"})
    missing = _error_of(answers["none:missing"])
    assert missing["code"] == "not_found"
    for name, answer in answers.items():
        assert _error_of(answer) == missing, name
        assert "PAGE-" not in text_of(answer), name


def test_an_mcp_client_that_writes_a_secret_is_refused_naming_the_field_and_nothing_is_stored(
    transactional_db: None, service: str, alice: Caller
) -> None:
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    url = f"{service}/mcp/?user_id=ana&thread_id=t-secret"
    seen: dict[str, Any] = {}

    async def leak(client: Client) -> None:
        seen["append"] = await client.call_tool(
            "thread_append", {"entries": [{"role": "user", "content": f"my token is {token}"}]}
        )
        seen["remember"] = await client.call_tool("remember", {"key": "token", "value": f"token {token}"})

    over_mcp(url, alice.key, leak)

    appended = seen["append"]
    assert appended.is_error and token not in text_of(appended)
    error = appended.structured_content["error"]
    assert (error["code"], error["field"]) == ("sensitive_data", "entries[0].content"), error
    # The facts tool answers a model in 002's words: an error text naming the field and the category.
    remembered = text_of(seen["remember"])
    assert seen["remember"].is_error and remembered.startswith("Error: value holds") and "(secret)" in remembered
    assert token not in remembered
    assert not Entry.objects.filter(agent=alice.agent).exists()
    assert not MemoryItem.objects.filter(agent=alice.agent).exists()
    refused = AuditRecord.objects.filter(agent_id=alice.agent.pk, action="screening.refused")
    assert sorted(r.details["field"] for r in refused) == ["entries[0].content", "value"]
    assert all(token not in json.dumps(r.details) for r in refused)


def test_an_mcp_memory_command_in_the_scope_of_a_person_being_erased_is_refused_as_the_tool_errs(
    transactional_db: None, service: str, alice: Caller
) -> None:
    seen: dict[str, Any] = {}

    async def write(client: Client) -> None:
        seen["create"] = await client.call_tool(
            "memory", {"command": "create", "path": "/memories/passport.md", "file_text": "Passport PX4471.\n"}
        )

    side, release = eraser_holding(alice.agent.pk)
    try:
        over_mcp(f"{service}/mcp/?user_id={PERSON}", alice.key, write)
    finally:
        release.set()
        side.join(WAIT)
    refused = seen["create"]
    # Before: created, a file of her scope made while her erasure ran (after its files step, it outlives it).
    assert refused.is_error, text_of(refused)
    assert text_of(refused).startswith("Error: ") and "being erased" in text_of(refused)
    error = refused.structured_content["error"]
    assert (error["code"], error["field"]) == ("person_being_erased", "user_id"), error
    assert not MemoryFileVersion.objects.filter(agent=alice.agent, user_id=PERSON).exists()


def test_the_rest_list_of_memory_tools_is_the_mcp_servers_tools_list(
    transactional_db: None, service: str, alice: Caller
) -> None:
    async def listed(client: Client) -> list[Any]:
        return list((await client.list_tools()).tools)

    by_mcp = [(tool.name, tool.input_schema, tool.description or "") for tool in _mcp_tools(service, alice, listed)]
    answer = httpx2.get(f"{service}/api/v1/memory-tools", headers={"Authorization": f"Bearer {alice.key}"})
    assert answer.status_code == 200, answer.text
    over_rest = [(tool["name"], tool["input_schema"], tool["description"]) for tool in answer.json()["tools"]]
    assert over_rest == by_mcp
    assert {name for name, _, _ in over_rest} == TOOLS
    schemas = dict((name, schema) for name, schema, _ in over_rest)
    assert schemas["remember"]["required"] == ["key", "value"] and "query" in schemas["search_memory"]["properties"]
    # A key is required, as for every call of the tools.
    assert httpx2.get(f"{service}/api/v1/memory-tools").status_code == 401


def _mcp_tools(service: str, caller: Caller, listed: Callable[[Client], Awaitable[list[Any]]]) -> list[Any]:
    return over_mcp(f"{service}/mcp/", caller.key, listed)

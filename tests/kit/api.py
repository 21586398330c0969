"""The agent API as the tests call it: the fixed cast's callers, calls that check their status and
say what came back when it is not the one expected, and the one check of the error shape."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from rest_framework.test import APIClient

from memoryapp.agents.services import agent_key_create
from memoryapp.models import Agent
from tests.kit.factories import AgentFactory

THREADS = "/api/v1/threads"
# The memory tool in u-ana's scope, as the model of an agent serving Ana calls it.
MEMORY_TOOL = "/api/v1/memory-tool?user_id=u-ana"


@dataclass
class Caller:
    """An agent of the cast with a key of its own and a client that sends it."""

    agent: Agent
    key: str
    client: APIClient


def agent_caller(slug: str) -> Caller:
    agent = AgentFactory(slug=slug)
    _, raw = agent_key_create(agent=agent)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return Caller(agent=agent, key=raw, client=client)


# --- answers ------------------------------------------------------------------------------------


def content_of(response: Any) -> bytes:
    """The body of a response, streamed (an export) or not."""
    if getattr(response, "streaming", False):
        return b"".join(part if isinstance(part, bytes) else part.encode() for part in response.streaming_content)
    return bytes(response.content)


def answered(response: Any, status: int | tuple[int, ...]) -> Any:
    """The JSON body of a response that has the status expected (None when it has no body).

    Otherwise the test fails naming the request, the status and what the body said."""
    expected = (status,) if isinstance(status, int) else status
    if response.status_code not in expected:
        request = getattr(response, "request", {}) or {}
        asked = f"{request.get('REQUEST_METHOD', '?')} {request.get('PATH_INFO', '?')}"
        if request.get("QUERY_STRING"):
            asked += f"?{request['QUERY_STRING']}"
        wanted = " or ".join(str(s) for s in expected)
        raise AssertionError(
            f"{asked} answered {response.status_code}, not {wanted}: {content_of(response)[:2000].decode(errors='replace')}"
        )
    body = content_of(response)
    return json.loads(body) if body else None


def error_of(response: Any, status: int = 400) -> dict[str, Any]:
    """The error of a refused request, after checking the shape every error has:
    `{"error": {"code", "message", "field"?}}`, code and message not empty, and the status expected."""
    body = answered(response, status)
    assert isinstance(body, dict) and isinstance(body.get("error"), dict), body
    error = body["error"]
    assert {"code", "message"} <= set(error) <= {"code", "message", "field"}, error
    assert error["code"] and error["message"], error
    return dict(error)


def post_ok(client: APIClient, url: str, body: Any = None, *, status: int | tuple[int, ...] = 201) -> Any:
    return answered(client.post(url, body, format="json"), status)


def get_ok(client: APIClient, url: str, params: dict[str, Any] | None = None, *, status: int = 200) -> Any:
    return answered(client.get(url, params), status)


def patch_ok(client: APIClient, url: str, body: Any, *, status: int = 200) -> Any:
    return answered(client.patch(url, body, format="json"), status)


def put_ok(client: APIClient, url: str, body: Any, *, status: int = 200) -> Any:
    return answered(client.put(url, body, format="json"), status)


def delete_ok(client: APIClient, url: str, *, status: int = 204) -> Any:
    return answered(client.delete(url), status)


# --- the calls many areas make ---------------------------------------------------------------------


def post_thread(caller: Caller, thread_id: str, *, status: int | tuple[int, ...] = (200, 201), **fields: Any) -> Any:
    """Create (201) or update (200) the caller's thread of that id."""
    return post_ok(caller.client, THREADS, {"id": thread_id, **fields}, status=status)


def post_entry(caller: Caller, thread_id: str, **body: Any) -> Any:
    """Add one entry to the caller's thread; its body as the API answers it."""
    return post_ok(caller.client, f"{THREADS}/{thread_id}/entries", body)


def post_entries(caller: Caller, thread_id: str, entries: list[dict[str, Any]]) -> list[Any]:
    """Add a batch of entries to the caller's thread, each after the one before."""
    return list(post_ok(caller.client, f"{THREADS}/{thread_id}/entries", {"entries": entries})["entries"])


def post_item(caller: Caller, **body: Any) -> Any:
    return post_ok(caller.client, "/api/v1/items", body)


def build_context(caller: Caller, thread_id: str = "t-1", **body: Any) -> dict[str, Any]:
    return dict(post_ok(caller.client, f"{THREADS}/{thread_id}/context", body, status=200))


def use_memory_tool(caller: Caller, command: dict[str, Any], url: str = MEMORY_TOOL) -> tuple[int, dict[str, Any]]:
    """One command of the memory tool: its status and its answer, errors included (the model reads both)."""
    response = caller.client.post(url, command, format="json")
    return response.status_code, dict(response.json())


def create_memory_file(caller: Caller, path: str, text: str, url: str = MEMORY_TOOL) -> dict[str, Any]:
    status, answer = use_memory_tool(caller, {"command": "create", "path": path, "file_text": text}, url)
    assert status == 201, answer
    return answer


# --- JSONL export and import ------------------------------------------------------------------------


def jsonl_node(node_id: Any, *, parent: str | None = None, seq: int = 1, **more: Any) -> str:
    """One `node` line of a thread file: a user's turn `turn <seq>` unless `turn` says otherwise."""
    node = {"id": node_id, "parent": parent, "turn": {"role": "user", "content": f"turn {seq}"}, "seq": seq, **more}
    return json.dumps({"type": "node", "node": node})


def import_jsonl(caller: Caller, lines: str | bytes | list[str], query: str = "") -> Any:
    """POST a thread file (JSON lines) to the import; the response, whatever it is."""
    body = "\n".join(lines) if isinstance(lines, list) else lines
    return caller.client.generic("POST", f"{THREADS}/import{query}", body, content_type="application/x-ndjson")


def exported_lines(caller: Caller, thread_id: str) -> str:
    """The caller's thread as the export streams it (JSON lines)."""
    response = caller.client.get(f"{THREADS}/{thread_id}/export")
    assert response.status_code == 200, content_of(response)
    return content_of(response).decode()


def use_fact_tool(caller: Caller, name: str, tool_input: dict[str, Any], **scope: Any) -> dict[str, Any]:
    """One of the model's fact tools (remember, search_memory, forget) over /api/v1/memory-tools;
    its answer (an error the model should read is an answer too: `is_error`)."""
    body = {"name": name, "input": tool_input, **scope}
    return dict(post_ok(caller.client, "/api/v1/memory-tools", body, status=200))

"""The MCP server's tools and resources, on the official `mcp` SDK's MCPServer.

Every tool and resource reads its caller (the agent of the key, and the scope the connection's URL
names) from `CALLER`, set by the view in `memoryapp.mcp.http` for the one request it serves, and
runs its work through the same services, input checks and output shapes as the REST API:

| tool | REST counterpart | service |
| --- | --- | --- |
| `remember`, `forget`, `search_memory` | `POST /api/v1/memory-tools` | `items.fact_tools.fact_tool_run` |
| `memory` (view, create, str_replace, insert, delete, rename) | `POST /api/v1/memory-tool` | `files.protocol.memory_tool_run` |
| `working_note` | `/api/v1/working-note` | `files.working_note.working_note_run` |
| `get_context` | `POST /api/v1/threads/{id}/context` | `context.builder.context_build` |
| `thread_append` | `POST /api/v1/threads/{id}/entries` | `threads.services.thread_append` |
| `read_result` | `GET /api/v1/tool-results/{handle}` | `items.tool_scope.ToolScope.tool_result` |
| `session_open` | `POST /api/v1/sessions` | `sessions.services.session_open` |

`GET /api/v1/memory-tools` lists these tools as tools/list does, read from this server
(`tools_listed`, registered with `memoryapp.api.tool_catalog`): one definition of each tool.

Every argument naming a person, a namespace, a thread or a handle stays inside the connection's
scope (`items.tool_scope.ToolScope`, the one check): outside it answers as missing (not found).

Resources: `memory://files` (the index of the files the scope sees, as `GET /api/v1/memory-files`
answers it) and `memory://files/memories/{+path}` (one file's text).

The SDK runs a plain function's work in a worker thread of its own, where Django would open a
database connection that no request ever closes; so each tool is a coroutine that hands its work
to `sync_to_async(thread_sensitive=True)`, which runs it on the thread that serves the HTTP
request (the view waits there in `async_to_sync`): the request's own connection, closed with it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from asgiref.sync import async_to_sync, sync_to_async
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from mcp_types import Resource as McpResource
from pydantic import Field

from memoryapp.api.base import validated
from memoryapp.api.compaction import ToolResultOut
from memoryapp.api.errors import error_body, exception_handler
from memoryapp.api.files import MemoryFilesOut
from memoryapp.api.search import ContextInput
from memoryapp.api.threads import entry_input, entry_json
from memoryapp.api.tool_catalog import memory_tools_source
from memoryapp.compaction.auto import compaction_pre_step
from memoryapp.context.builder import ContextRequest, context_build
from memoryapp.errors import DomainError, NotFound
from memoryapp.files.access import FileAccess, file_access_for
from memoryapp.files.errors import MemoryFileError
from memoryapp.files.paths import MEMORY_ROOT, path_normalize
from memoryapp.files.protocol import COMMANDS, memory_tool_run
from memoryapp.files.selectors import file_heads, version_content
from memoryapp.files.services import expected_sha_parse, files_list
from memoryapp.files.working_note import ACTIONS, working_note_run
from memoryapp.items.fact_tools import fact_tool_run, tool_result_text
from memoryapp.items.tool_scope import ToolScope
from memoryapp.models import Agent, Thread
from memoryapp.sessions.services import session_open
from memoryapp.threads.services import thread_append, thread_append_one, thread_create
from memoryapp.threads.validation import MAX_BATCH_ENTRIES

logger = logging.getLogger(__name__)

INDEX_URI = "memory://files"
FILE_URI_PREFIX = "memory://files/memories/"


@dataclass(frozen=True)
class McpCaller:
    """Who calls, for one request: the key's agent and the scope the connection's URL names."""

    agent: Agent
    user_id: str = ""
    project_id: str = ""
    thread_id: str = ""
    purpose: str = ""

    @property
    def actor(self) -> str:
        return f"agent:{self.agent.slug}"

    def scope(self) -> ToolScope:
        """The scope every tool argument naming a person, namespace, thread or handle stays in."""
        return ToolScope(
            agent=self.agent,
            user_id=self.user_id,
            project_id=self.project_id,
            thread_id=self.thread_id,
            purpose=self.purpose,
        )

    def file_access(self) -> FileAccess:
        return file_access_for(
            agent=self.agent,
            user_id=self.user_id,
            project_id=self.project_id,
            thread_id=self.thread_id,
            actor=self.actor,
        )


CALLER: ContextVar[McpCaller] = ContextVar("mcp_caller")


def _text_result(text: str, structured: dict[str, Any] | None = None, *, is_error: bool = False) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured, is_error=is_error
    )


def _error_result(exc: Exception) -> CallToolResult:
    """Any error as the API answers it: the one error shape, for the model and for programs alike.

    A memory file refusal keeps the memory tool's own text (what a model trained on it expects)."""
    if isinstance(exc, MemoryFileError):
        body = {**error_body(exc.code, exc.message, exc.field), "result": exc.message}
        return _text_result(exc.message, body, is_error=True)
    response = exception_handler(exc, {"view": "mcp"})
    body = response.data if response is not None else error_body("internal_error", "Something went wrong.")
    return _text_result(json.dumps(body, ensure_ascii=False), body, is_error=True)


def _guarded(work: Callable[[McpCaller], CallToolResult], caller: McpCaller) -> CallToolResult:
    try:
        return work(caller)
    except Exception as exc:
        return _error_result(exc)


async def _run(work: Callable[[McpCaller], CallToolResult]) -> CallToolResult:
    """Run a tool's work on the request's own thread (see the module's docstring), errors as results."""
    return await sync_to_async(_guarded, thread_sensitive=True)(work, CALLER.get())


def _given(**arguments: Any) -> dict[str, Any]:
    """The arguments the model gave (None: left out), as the REST endpoints receive a body."""
    return {name: value for name, value in arguments.items() if value is not None}


class MemoryMcpServer(MCPServer):
    """MCPServer whose resource list also names each memory file the caller's scope sees."""

    async def list_resources(self) -> list[McpResource]:
        listed = await super().list_resources()
        files = await sync_to_async(_file_resources, thread_sensitive=True)(CALLER.get())
        return [*listed, *files]


def _file_resources(caller: McpCaller) -> list[McpResource]:
    return [
        McpResource(
            uri=FILE_URI_PREFIX + version.path[len(MEMORY_ROOT) + 1 :],
            name=version.path,
            mime_type="text/markdown" if version.path.endswith(".md") else "text/plain",
            size=version.size,
        )
        for version in files_list(access=caller.file_access())
    ]


mcp_server = MemoryMcpServer(
    name="memory",
    title="Memory governance service",
    instructions=(
        "Long-term memory for this agent. `remember`, `forget` and `search_memory` keep facts; `memory` is "
        "Anthropic's memory tool over the files under /memories; `working_note` is a scratch note; "
        "`get_context` builds the messages for the next model call; `thread_append` records turns; "
        "`read_result` reads back a tool result that compaction cleared; `session_open` gets or creates the "
        "thread of a channel conversation."
    ),
    # The view of memoryapp.mcp.http answers each request on its own: nothing to keep between them.
    subscriptions=False,
)


# --- facts: remember, forget, search_memory ------------------------------------------------------

Namespace = Annotated[
    str | None,
    Field(description="Where the fact lives (default: users/<user_id> of the connection's URL)."),
]


@mcp_server.tool(annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
async def remember(
    key: Annotated[str, Field(description="The fact's key, e.g. favourite_food.")],
    value: Annotated[Any, Field(description="Any JSON value.")],
    ttl_secs: Annotated[int | None, Field(description="Forget it after this many seconds.")] = None,
    namespace: Namespace = None,
) -> CallToolResult:
    """Remember a fact under a key (a new value replaces the old one; its history is kept)."""
    return await _facts_tool("remember", _given(key=key, value=value, ttl_secs=ttl_secs, namespace=namespace))


@mcp_server.tool(annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True))
async def forget(
    key: Annotated[str, Field(description="The fact's key.")],
    namespace: Namespace = None,
) -> CallToolResult:
    """Forget the fact remembered under a key (its history is kept for the people who govern memory)."""
    return await _facts_tool("forget", _given(key=key, namespace=namespace))


@mcp_server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def search_memory(
    query: Annotated[
        str, Field(description="What to look for: words of the facts' keys and values, or their meaning.")
    ] = "",
    limit: Annotated[int, Field(ge=1, le=1000, description="At most this many facts.")] = 5,
    namespace: Namespace = None,
    mode: Annotated[
        Literal["hybrid", "keyword", "semantic"] | None,
        Field(description="keyword (by words), semantic (by meaning) or hybrid (both, the default)."),
    ] = None,
) -> CallToolResult:
    """Search the remembered facts by their words and their meaning, best match first (all of them,
    newest first, without a query)."""
    return await _facts_tool("search_memory", _given(query=query, limit=limit, namespace=namespace, mode=mode))


async def _facts_tool(name: str, tool_input: dict[str, Any]) -> CallToolResult:
    def work(caller: McpCaller) -> CallToolResult:
        outcome = fact_tool_run(scope=caller.scope(), name=name, tool_input=tool_input, actor=caller.actor)
        return _text_result(
            outcome.result, {"result": outcome.result, "is_error": outcome.is_error}, is_error=outcome.is_error
        )

    return await _run(work)


# --- memory files: the memory tool, the working note ----------------------------------------------


@mcp_server.tool()
async def memory(
    command: Annotated[Literal[COMMANDS], Field(description="view, create, str_replace, insert, delete or rename.")],  # type: ignore[valid-type]
    path: str | None = None,
    view_range: Annotated[list[int] | None, Field(description="view: [first, last] line (-1: to the end).")] = None,
    file_text: str | None = None,
    old_str: str | None = None,
    new_str: str | None = None,
    insert_line: int | None = None,
    insert_text: str | None = None,
    old_path: str | None = None,
    new_path: str | None = None,
    expected_sha256: Annotated[
        str | None, Field(description="The sha256 you last read: refused if the file changed since.")
    ] = None,
) -> CallToolResult:
    """Anthropic's memory tool (memory_20250818) over the files under /memories: view a file or a
    directory, create, str_replace, insert, delete, rename. Every change is a new version."""
    tool_input = _given(
        command=command,
        path=path,
        view_range=view_range,
        file_text=file_text,
        old_str=old_str,
        new_str=new_str,
        insert_line=insert_line,
        insert_text=insert_text,
        old_path=old_path,
        new_path=new_path,
    )

    def work(caller: McpCaller) -> CallToolResult:
        expected = expected_sha_parse(expected_sha256)
        answer = memory_tool_run(access=caller.file_access(), command=tool_input, expected_sha256=expected)
        return _text_result(answer.result, {"result": answer.result, **answer.details})

    return await _run(work)


@mcp_server.tool()
async def working_note(
    action: Annotated[Literal[ACTIONS], Field(description="read, replace (with content) or append (one line).")],  # type: ignore[valid-type]
    content: str | None = None,
) -> CallToolResult:
    """The working-memory note (/memories/working.md): read it, replace it, or append a line to it."""

    def work(caller: McpCaller) -> CallToolResult:
        answer = working_note_run(access=caller.file_access(), action=action, content=content)
        return _text_result(
            answer.text, {"text": answer.text, "details": answer.details, "version_id": answer.version_id}
        )

    return await _run(work)


# --- threads: the context of the next call, appending turns ---------------------------------------


@mcp_server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def get_context(
    max_tokens: Annotated[int, Field(description="The budget of the context, in tokens.")],
    thread_id: Annotated[str | None, Field(description="The thread (default: the connection's).")] = None,
    strategy: Literal["recent", "relevant", "hybrid"] | None = None,
    current_input: Annotated[str | None, Field(description="The turn being answered: what recall looks for.")] = None,
    system_prompt: str | None = None,
    pinned: list[str] | None = None,
    reserve_tokens: int | None = None,
    include_facts: bool | None = None,
    facts_recall: Annotated[
        int | None,
        Field(
            ge=0, le=200, description="At most this many facts: the best matches for current_input, then the newest."
        ),
    ] = None,
    file_index: bool | None = None,
    brief_cards: Annotated[int | None, Field(description="Ask for up to this many pre-turn brief cards.")] = None,
    include_graph_context: Annotated[
        bool | None, Field(description="The knowledge graph around the entities current_input names.")
    ] = None,
    graph_hops: Annotated[int | None, Field(description="How far the graph context reaches (0-3, default 2).")] = None,
    include_semantic_context: Annotated[
        bool | None, Field(description="Passages of the agent's knowledge documents found for current_input.")
    ] = None,
    time_zone: Annotated[
        str | None, Field(description="IANA zone the memory context's dates are written in (Europe/Lisbon ...).")
    ] = None,
    project_id: Annotated[
        str | None,
        Field(description="The project whose context documents apply (default: the connection's, else the thread's)."),
    ] = None,
    purpose: Annotated[
        str | None,
        Field(description="Recall for this purpose only: facts and items collected for it or for none."),
    ] = None,
) -> CallToolResult:
    """Build the messages for the next model call within a token budget: the system message, the
    standing instructions (context documents), the compaction summary, the kept history and a
    <memory_context> block (facts, recalled turns, items)."""
    body = _given(
        max_tokens=max_tokens,
        strategy=strategy,
        current_input=current_input,
        system_prompt=system_prompt,
        pinned=pinned,
        reserve_tokens=reserve_tokens,
        include_facts=include_facts,
        facts_recall=facts_recall,
        file_index=file_index,
        brief_cards=brief_cards,
        include_graph_context=include_graph_context,
        graph_hops=graph_hops,
        include_semantic_context=include_semantic_context,
        time_zone=time_zone,
        project_id=project_id,
        purpose=purpose,
    )

    def work(caller: McpCaller) -> CallToolResult:
        scope = caller.scope()
        thread = scope.thread(thread_id)
        project = scope.project_for(body.get("project_id"))
        if project is not None:
            body["project_id"] = project  # the connection's project, as the memory tool's scope
        body["purpose"] = scope.purpose_for(body.get("purpose"))
        request = ContextRequest(**validated(ContextInput, body))
        compaction_pre_step(thread=thread)  # as the context endpoint: 003 preStep
        built = context_build(agent=caller.agent, thread=thread, request=request).as_json()
        return _text_result(json.dumps(built, ensure_ascii=False), built)

    return await _run(work)


@mcp_server.tool(name="thread_append")
async def thread_append_tool(
    entries: Annotated[
        list[dict[str, Any]],
        Field(description='Entries as the REST API takes them: {"role", "content", "type"?, "tool_calls"?, ...}.'),
    ],
    thread_id: Annotated[str | None, Field(description="The thread (default: the connection's).")] = None,
) -> CallToolResult:
    """Append entries (turns, tool calls, tool results) after the thread's active leaf, in one
    transaction; the thread is created (for the connection's person) when it does not exist yet."""

    def work(caller: McpCaller) -> CallToolResult:
        if not entries:
            raise DomainError("invalid_type", "entries must be a non-empty list.", field="entries")
        if len(entries) > MAX_BATCH_ENTRIES:
            raise DomainError(
                "batch_too_large",
                f"A batch holds at most {MAX_BATCH_ENTRIES} entries (this one {len(entries)}).",
                field="entries",
                status=413,
            )
        scope = caller.scope()
        for index, raw in enumerate(entries):
            metadata = raw.get("metadata") if isinstance(raw, dict) else None
            if isinstance(metadata, dict):  # who wrote it: what that person's erasure follows
                scope.person_check(metadata.get("userId"), field=f"entries[{index}].metadata.userId")
        specs = [entry_input(raw, f"entries[{index}].") for index, raw in enumerate(entries)]
        external_id = _thread_ensure(caller, scope, thread_id).external_id
        if len(specs) == 1:  # a plain single turn is one statement, as over REST
            thread, created = thread_append_one(
                agent=caller.agent, external_id=external_id, spec=specs[0], field_prefix="entries"
            )
        else:
            thread, created = thread_append(
                agent=caller.agent, external_id=external_id, entries=specs, field_prefix="entries"
            )
        answer = {
            "entries": [entry_json(e, thread.external_id) for e in created],
            "active_leaf_id": thread.active_leaf_id,
        }
        return _text_result(json.dumps(answer, ensure_ascii=False), answer)

    return await _run(work)


def _thread_ensure(caller: McpCaller, scope: ToolScope, given: str | None) -> Thread:
    """The thread to append to, in scope. Only the connection's own thread (its URL's) is created
    when it does not exist: a thread the model names must exist in scope, so that a thread of
    another person answers as a missing one does (creating it would say it exists)."""
    try:
        return scope.thread(given)
    except NotFound:
        external_id = scope.thread_id_for(given)
        if (
            external_id != caller.thread_id
            or Thread.objects.filter(agent=caller.agent, external_id=external_id).exists()
        ):
            raise
        return thread_create(agent=caller.agent, external_id=external_id, user_id=caller.user_id, actor=caller.actor)


# --- cleared tool results: read_result -------------------------------------------------------------


@mcp_server.tool(annotations=ToolAnnotations(read_only_hint=True))
async def read_result(
    handle: Annotated[
        str,
        Field(
            description='The handle a cleared tool result names: [tool result cleared: ...; read_result(handle="...")].'
        ),
    ],
) -> CallToolResult:
    """Read again a tool result that compaction cleared from the context, by the handle its
    placeholder names (a result of this connection's thread or person only)."""

    def work(caller: McpCaller) -> CallToolResult:
        entry = caller.scope().tool_result(handle)
        answer = dict(ToolResultOut(entry).data)
        return _text_result(tool_result_text(entry), answer)

    return await _run(work)


# --- channel sessions: session_open -----------------------------------------------------------------


@mcp_server.tool(name="session_open", annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True))
async def session_open_tool(
    channel_type: Annotated[str, Field(description="The kind of channel: telegram, slack, web ...")],
    channel_id: Annotated[str, Field(description="The conversation within the channel (a chat id ...).")],
    user_id: Annotated[
        str | None, Field(description="The person of the conversation (default and only: the connection's).")
    ] = None,
) -> CallToolResult:
    """Get or create the session of a channel conversation (the connection's person on this channel):
    its thread id, to append turns to and build contexts from, and whether this call made it."""

    def work(caller: McpCaller) -> CallToolResult:
        person = caller.scope().session_person(user_id)
        opened = session_open(
            agent=caller.agent, user_id=person, channel_type=channel_type, channel_id=channel_id, actor=caller.actor
        )
        session = opened.session
        answer = {
            "session_id": session.id,
            "thread_id": session.thread.external_id,
            "status": session.status,
            "created": opened.created,
        }
        return _text_result(json.dumps(answer, ensure_ascii=False), answer)

    return await _run(work)


# --- resources: the file index and the files ------------------------------------------------------


@mcp_server.resource(INDEX_URI, name="memory files", mime_type="application/json")
async def file_index() -> str:
    """The memory files the connection's scope sees: path, sha256, size, version (as GET /api/v1/memory-files)."""

    def read(caller: McpCaller) -> str:
        files = files_list(access=caller.file_access())
        return json.dumps(MemoryFilesOut({"files": files}).data, ensure_ascii=False)

    return await sync_to_async(read, thread_sensitive=True)(CALLER.get())


@mcp_server.resource(FILE_URI_PREFIX + "{+path}", name="memory file", mime_type="text/markdown")
async def memory_file(path: str) -> str:
    """One memory file's text, as the connection's scope sees it (the narrowest scope holding the path)."""

    def read(caller: McpCaller) -> str:
        try:
            full = path_normalize(f"{MEMORY_ROOT}/{path}")
            standing = file_heads(access=caller.file_access(), under=full).file(full)
        except DomainError as exc:
            raise ResourceError(exc.message) from exc
        if standing is None:
            raise ResourceNotFoundError(f"No memory file {full}.")
        return version_content(standing) or ""

    return await sync_to_async(read, thread_sensitive=True)(CALLER.get())


# --- the tools listed over REST (001 `/memory tools`) ------------------------------------------------


def tools_listed() -> list[dict[str, Any]]:
    """This server's tools/list, as `GET /api/v1/memory-tools` answers it: each tool's name, title,
    description, input schema and hints, read from the server itself (no second definition)."""
    return [
        {
            "name": tool.name,
            "title": tool.title,
            "description": tool.description or "",
            "input_schema": tool.input_schema,
            "annotations": tool.annotations.model_dump(mode="json", by_alias=True, exclude_none=True)
            if tool.annotations is not None
            else {},
        }
        for tool in async_to_sync(mcp_server.list_tools)()
    ]


memory_tools_source(tools_listed)

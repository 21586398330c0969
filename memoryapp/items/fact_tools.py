"""The model's facts tools (002 `remember`, `forget`, `search_memory`): a tool call in, the text the model reads out.

The REST endpoint `POST /api/v1/memory-tools` and the MCP server's tools of the same names both
answer through `fact_tool_run`, so the texts, the namespaces and the limits are the same.

1. The namespace: the one the model's input names, else the caller's, else `users/<user_id>`
   (002 `Memory.byState("user_id", "users")`). The model's stays inside the connection's scope
   (`ToolScope.fact_namespace`): another person's namespace is answered as an empty one.
2. A mistake of the model's (a bad key, a namespace it named that is not one) is answered as a
   tool result with `is_error`: the model reads it and tries again.
3. A mistake of the developer's (no namespace and no person) raises a DomainError (a 400).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from memoryapp.errors import DomainError, NotFound
from memoryapp.ids import person_id_check
from memoryapp.items.facts import (
    SEARCH_MODES,
    fact_forget,
    fact_remember,
    fact_search,
    key_check,
    namespace_check,
    value_text,
)
from memoryapp.items.tool_scope import ToolScope
from memoryapp.models import Agent, Entry
from memoryapp.screening.screen import refusal_record

FACT_TOOL_NAMES = ("remember", "forget", "search_memory")
# Every tool POST /api/v1/memory-tools runs: the facts tools and read_result (cleared tool results).
MEMORY_TOOL_NAMES = (*FACT_TOOL_NAMES, "read_result")
DEFAULT_TOOL_SEARCH_LIMIT = 5
SHORT_VALUE_CHARS = 500


@dataclass(frozen=True)
class FactToolResult:
    """What a tool call answers: the text the model reads, and whether its input was wrong."""

    result: str
    is_error: bool = False


def _error(text: str) -> FactToolResult:
    return FactToolResult(f"Error: {text}", is_error=True)


def _short(text: str, limit: int = SHORT_VALUE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def fact_tool_run(
    *,
    scope: ToolScope,
    name: str,
    tool_input: dict[str, Any],
    ttl_secs: int | None = None,
    actor: str = "",
) -> FactToolResult:
    """Run one facts tool call as the model gave it (see the module's docstring for who is at fault)."""
    if name not in FACT_TOOL_NAMES:
        raise DomainError("invalid_value", f"name must be one of: {', '.join(FACT_TOOL_NAMES)}.", field="name")
    person_id_check(scope.user_id)
    given = tool_input.get("namespace")
    if given is not None and not isinstance(given, str):
        return _error("namespace must be a string.")
    if given:
        try:
            namespace_check(given)
        except DomainError as exc:
            return _error(exc.message)
    try:
        chosen = scope.fact_namespace(given or "")
    except NotFound as exc:
        return _outside(name, tool_input, exc)
    namespace_check(chosen)  # the configuration's: a 400 for the developer
    agent = scope.agent
    try:
        if name == "remember":
            return _remember(agent, chosen, tool_input, ttl_secs, actor, purpose=scope.purpose)
        if name == "forget":
            return _forget(agent, chosen, tool_input, actor)
        return _search(agent, chosen, tool_input, purpose=scope.purpose)
    except DomainError as exc:
        if exc.status >= 500:
            raise
        refusal_record(exc)  # a write screening refused rolled back: audited now
        return _error(exc.message)


def _outside(name: str, tool_input: dict[str, Any], refusal: NotFound) -> FactToolResult:
    """A namespace outside the connection's scope, answered as an empty one would be: nothing to
    forget, nothing found; a write there is refused as not found."""
    if name == "remember":
        return _error(refusal.message)
    if name == "forget":
        try:
            key = key_check(tool_input.get("key"))
        except DomainError as exc:
            return _error(exc.message)
        return FactToolResult(f"Nothing was remembered as {key}.")
    query = tool_input.get("query", tool_input.get("text", ""))
    return FactToolResult("No memories matched." if query else "Nothing is remembered yet.")


def read_result_run(*, scope: ToolScope, tool_input: dict[str, Any]) -> FactToolResult:
    """The `read_result` tool: the content of a tool result that compaction cleared, by the handle its
    placeholder names, in the connection's scope (another thread's, person's or agent's: not found)."""
    try:
        entry = scope.tool_result(tool_input.get("handle"))
    except DomainError as exc:
        return _error(exc.message)
    return FactToolResult(tool_result_text(entry))


def tool_result_text(entry: Entry) -> str:
    """What a tool result said, as the model reads it again."""
    if entry.text:
        return entry.text
    content = entry.content
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


def _remember(
    agent: Agent, namespace: str, tool_input: dict[str, Any], ttl_secs: int | None, actor: str, *, purpose: str
) -> FactToolResult:
    if "value" not in tool_input:
        return _error("remember needs a key and a value.")
    value = tool_input["value"]
    fact = fact_remember(
        agent=agent,
        namespace=namespace,
        key=tool_input.get("key"),  # type: ignore[arg-type]  # checked by fact_remember
        value=value,
        ttl_secs=tool_input.get("ttl_secs", ttl_secs),
        actor=actor,
        # The run's purpose, not the model's: the configuration says what memory is collected for.
        purposes=[purpose] if purpose else None,
    )
    return FactToolResult(f"Remembered {fact['key']}: {_short(value_text(fact['value']))}")


def _forget(agent: Agent, namespace: str, tool_input: dict[str, Any], actor: str) -> FactToolResult:
    key = tool_input.get("key")
    try:
        fact_forget(agent=agent, namespace=namespace, key=key, actor=actor)  # type: ignore[arg-type]
    except NotFound:
        return FactToolResult(f"Nothing was remembered as {key}.")
    return FactToolResult(f"Forgot {key}.")


def _search(agent: Agent, namespace: str, tool_input: dict[str, Any], *, purpose: str) -> FactToolResult:
    query = tool_input.get("query", tool_input.get("text", ""))
    if query is None:
        query = ""
    limit = tool_input.get("limit", DEFAULT_TOOL_SEARCH_LIMIT)
    mode = tool_input.get("mode") or "hybrid"
    if mode not in SEARCH_MODES:
        return _error(f"mode must be one of: {', '.join(SEARCH_MODES)}.")
    hits = fact_search(agent=agent, namespace=namespace, text=query, limit=limit, purpose=purpose, mode=mode)
    if not hits:
        return FactToolResult("No memories matched." if query else "Nothing is remembered yet.")
    lines = [f"- {h.fact['key']}: {_short(value_text(h.fact['value']))}" for h in hits]
    return FactToolResult(f"Found {len(hits)} memor{'y' if len(hits) == 1 else 'ies'}:\n" + "\n".join(lines))

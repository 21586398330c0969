"""The token-budgeted context builder (004 "Context Builder", "Partitions", "Built Context").

`context_build(agent=, thread=, request=)` returns the `BuiltContext` of one turn (`as_json()` is
the API's answer). It runs these steps in order, each a function of the build so far (`_Build`):

1. Budget (`_build_start`): max_tokens - reserve_tokens. The required partitions (system prompt,
   pinned, index, the brief, and the current input, which is counted but not sent) are placed
   first (`_place_required`); a system prompt larger than the budget is still sent whole, with a
   warning (`_measure_available`).
2. History (`_read_history`): the newest part of the branch is read (growing while the budget
   could take more), through compacted_history, so a compaction's summary and cleared tool
   results apply; the summary is a required partition too (`_place_summary`).
3. The shared partitions split what is left (`_fit_partitions`, fit_in_order): facts first
   (`_load_facts`, `_place_facts`), then recall, then recent, each no more than its share unless
   the others leave room.
4. Strategy (`_select_history`): `recent` keeps one unbroken run back from the newest message;
   `relevant` keeps the turns most similar to the input, in conversation order; `hybrid` keeps a
   recent run and recalls older turns and memory items by the search selector into the memory
   context (`_recall`), then gives what recall left back to the run (`_give_back_recall_room`).
5. Duplicates: a fact or recalled block that a kept block of a more lasting partition holds word
   for word is left out (reason duplicate); every block left out is reported with its partition
   and reason (`_report_dropped_history` for the history).
6. Messages (`_assemble`): one system message, the summary, the history (cache breakpoints on its
   last message and on the last message of the turn before), then the <memory_context> user message.
A part that fails to load is left out and reported in `errors`; build never fails for it.

The history (reading the branch, the runs a strategy keeps) is `memoryapp.context.history`; the
<memory_context> block (its sections, lines and their cost) is `memoryapp.context.memory_block`.

Dates in the memory block (recalled turns, the interval an item held, the brief's sources) are
rendered in the build's time zone (004 `timeZone`: the request's, else the thread's
`metadata.time_zone`, else UTC). A thread whose memory is off (memoryapp.threads.memory_switch)
gets nothing recalled: no facts, observations, recall, brief or file index; its context documents
(standing instructions, `_place_documents`) still go in the pinned partition.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.db import DEFAULT_DB_ALIAS
from django.db.models import QuerySet
from django.utils import timezone

from memoryapp.compaction.history import SUMMARY_HEADING
from memoryapp.consolidation.brief import BriefCard, brief_block, memory_brief
from memoryapp.consolidation.observations import (
    OBSERVATIONS_DIRECTORY,
    Observation,
    observations_of,
    observations_q,
    observations_seen,
)
from memoryapp.consolidation.prompts import BriefSource
from memoryapp.context.fact_recall import facts_recalled
from memoryapp.context.history import (
    MAX_WINDOW,
    RELEVANT_CANDIDATES,
    Unit,
    after_seq,
    entry_ref,
    history_count,
    history_message,
    history_units,
    history_window,
    mark_turn_ends,
    off_branch,
    recent_run,
    relevant_turns,
    unit_cost,
    window_first_read,
)
from memoryapp.context.memory_block import (
    MemoryBlock,
    day_of,
    memory_text,
    named_in,
    observation_line,
    observation_sent,
    recall_cost,
    recall_entry_line,
    recall_item_line,
)
from memoryapp.context.partitions import (
    DroppedBlock,
    fit_in_order,
    held_in,
    partition_shares,
    words_of,
)
from memoryapp.errors import DomainError
from memoryapp.extraction.times import zone_check, zone_of
from memoryapp.files.access import FileAccess
from memoryapp.files.context_documents import (
    CONTEXT_ROOT,
    FRAMING,
    ContextDocument,
    context_document_scopes,
    context_documents_for,
    context_documents_of,
    context_documents_q,
)
from memoryapp.files.selectors import snapshot_of, versions_for_agent
from memoryapp.files.services import files_index_text
from memoryapp.graph.context import DEFAULT_HOPS, NodeBlock, graph_blocks
from memoryapp.items.purposes import recall_purpose_check
from memoryapp.items.rules import Scope
from memoryapp.items.selectors import (
    context_facts,
    context_facts_read,
    context_facts_states,
    thread_context_scope,
)
from memoryapp.knowledge.services import KnowledgeHit, knowledge_search
from memoryapp.llm.model import ModelError
from memoryapp.models import AccessLog, Agent, Entry, MemoryFileVersion, MemoryItem, Thread
from memoryapp.precompiled import Precompiled, read_together
from memoryapp.search.access_log import access_log_record
from memoryapp.search.retrieval import search
from memoryapp.tokens import MESSAGE_OVERHEAD, count_message_tokens, count_tokens

logger = logging.getLogger(__name__)

STRATEGIES = ("recent", "relevant", "hybrid")
MAX_TOKENS_LIMIT = 2_000_000
RECALL_LIMIT = 20
# Recall sends only turns and items that are about the input: a vector hit needs this cosine (004:
# 0.45, and 0.6 of the best; all-MiniLM-L6-v2 puts paraphrases above ~0.4, unrelated chat below ~0.25).
RECALL_MIN_SIMILARITY = 0.45
FIRST_WINDOW = 64
# Observations of the entities a turn names or recalls, at most (004 "Observations").
MAX_OBSERVATIONS = 3
# What memory found for a turn that the brief's model is shown, at most.
BRIEF_SOURCES = 8
FILE_INDEX_HEADING = "Memory files (read them with the memory tool):"


@dataclass
class ContextRequest:
    max_tokens: int
    strategy: str = "hybrid"
    reserve_tokens: int | None = None
    system_prompt: str = ""
    pinned: list[str] = field(default_factory=list)
    index: str = ""
    brief: str = ""
    current_input: str = ""
    leaf_id: str | None = None
    as_of: datetime | None = None
    include_facts: bool = True
    # 002 `recall`: at most this many facts, the best matches for current_input then the newest
    # (memoryapp.context.fact_recall); None: every fact of the scope the facts partition has room for.
    facts_recall: int | None = None
    partitions: dict[str, Any] | None = None
    # The pre-turn brief: up to this many checked cards about what memory found (0: none asked).
    brief_cards: int = 0
    # Observations of the entities the turn names or recalls, next to the facts.
    include_observations: bool = True
    # The memory files the run's scope sees, listed in the index partition (004 files.index).
    file_index: bool = False
    # 004 `timeZone`: the IANA zone dates are rendered in ("" = the thread's metadata.time_zone, else UTC).
    time_zone: str = ""
    # The project whose context documents apply ("" = the thread's metadata.project_id, if any).
    project_id: str = ""
    # The purpose memory is recalled for ("" = any): only items and facts collected for it or for none
    # (memoryapp.items.purposes); checked against the agent's purposes by the caller.
    purpose: str = ""
    # 004 `includeGraphContext`: the entities the input names and what the graph relates them to,
    # within `graph_hops`, in the graph partition (charged to recall's share), cut node by node.
    include_graph_context: bool = False
    graph_hops: int = DEFAULT_HOPS
    # 004 `includeSemanticContext`: passages of the agent's knowledge documents (of no project or
    # the build's project) found for the input, in the semantic partition (recall's share).
    include_semantic_context: bool = False


@dataclass(slots=True)
class BuiltContext:
    """The context of one turn (004 "Built Context"): the messages for the next model call, and
    what went into them. `as_json` is the API's answer (memoryapp.api.search.ContextOut)."""

    messages: list[dict[str, Any]]
    memory_context: str | None
    partitions: dict[str, int]  # tokens each partition took, in the order they were placed
    facts: list[dict[str, Any]]
    observations: list[dict[str, Any]]
    brief_cards: list[BriefCard]
    recalled_entries: list[dict[str, Any]]
    recalled_items: list[dict[str, Any]]
    documents: list[dict[str, Any]]  # the context documents placed, nearest scope first
    graph: dict[str, Any] | None  # with include_graph_context: the nodes and edges placed
    dropped_graph_nodes: list[dict[str, Any]]  # nodes cut from the graph context
    semantic_results: list[dict[str, Any]]  # with include_semantic_context: the passages placed
    dropped_semantic_results: list[dict[str, Any]]  # passages found that did not fit
    time_zone: str
    memory: bool  # the thread's memory switch (off: nothing was recalled)
    truncated: bool  # some of the history was left out
    dropped_entries: list[dict[str, Any]]
    dropped_blocks: list[DroppedBlock]
    errors: list[dict[str, str]]
    warnings: list[str]
    strategy: str
    budget: int
    reserve_tokens: int
    original_message_count: int
    included_message_count: int

    @property
    def token_count(self) -> int:
        # The current input is counted against the budget (`final`) but is not in the messages.
        return sum(tokens for name, tokens in self.partitions.items() if name != "final")

    def as_json(self) -> dict[str, Any]:
        return {
            "messages": self.messages,
            "memory_context": self.memory_context,
            "partitions": self.partitions,
            "facts": self.facts,
            "observations": self.observations,
            "brief_cards": [card.as_json() for card in self.brief_cards],
            "recalled": {"entries": self.recalled_entries, "items": self.recalled_items},
            "documents": self.documents,
            "graph": self.graph,
            "semantic_results": self.semantic_results,
            "token_count": self.token_count,
            "truncated": self.truncated,
            "dropped": {
                "entries": self.dropped_entries,
                "blocks": [b.as_json() for b in self.dropped_blocks],
                "graph_nodes": self.dropped_graph_nodes,
                "semantic_results": self.dropped_semantic_results,
                "token_count": sum(b.tokens for b in self.dropped_blocks),
            },
            "errors": self.errors,
            "warnings": self.warnings,
            "metadata": {
                "strategy": self.strategy,
                "budget": self.budget,
                "reserve_tokens": self.reserve_tokens,
                "original_message_count": self.original_message_count,
                "included_message_count": self.included_message_count,
                "facts_included": len(self.facts),
                "semantic_results_included": len(self.recalled_entries) + len(self.recalled_items),
                "recalled_entries": len(self.recalled_entries),
                "recalled_items": len(self.recalled_items),
                "graph_nodes_included": len(self.graph["nodes"]) if self.graph else 0,
                "graph_edges_included": len(self.graph["edges"]) if self.graph else 0,
                "semantic_context_included": len(self.semantic_results),
                "time_zone": self.time_zone,
                "memory": "on" if self.memory else "off",
            },
        }


@dataclass(slots=True)
class _Build:
    """What one build has found and decided so far, handed from step to step (`context_build`)."""

    agent: Agent
    thread: Thread
    request: ContextRequest
    shares: dict[str, float]
    budget: int
    reserve: int
    recall_wanted: bool  # hybrid, with an input to recall by
    zone: ZoneInfo  # dates are rendered in it
    memory_on: bool  # the thread's memory switch: off, nothing is recalled into the context
    partitions: dict[str, int] = field(default_factory=dict)
    memory: MemoryBlock = field(default_factory=MemoryBlock)
    errors: list[dict[str, str]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    dropped_blocks: list[DroppedBlock] = field(default_factory=list)
    dropped_entries: list[dict[str, Any]] = field(default_factory=list)
    system_parts: list[tuple[str, str]] = field(default_factory=list)  # (partition, text)
    brief_text: str = ""  # the brief given, then the checked cards
    brief_cards: list[BriefCard] = field(default_factory=list)
    # The history read: compacted, and whether it starts at the branch's start.
    history_entries: list[Entry] = field(default_factory=list)
    complete: bool = True
    summary: str | None = None
    summary_text: str = ""
    compaction_id: str | None = None
    available: int = 0  # what the required partitions leave for facts, recall and recent
    lasting: list[str] = field(default_factory=list)  # words of the kept texts a later block may repeat
    fact_lines: list[tuple[str, str, int]] = field(default_factory=list)  # (item id, line, tokens)
    # The facts' rows, when read with the memory files (`_memory_heads_and_facts`); None: not read yet.
    fact_states: list[MemoryItem] | None = None
    # The history's first read, when read with the memory files: (the entries it asked for, its rows).
    window_first: tuple[int, list[Any]] | None = None
    # Whether the items recall searches (`_recall_items`: the same scope, time and purpose as the
    # facts) hold any, as the facts' read found: recall then asks no more. None: the facts were not read.
    items_live: bool | None = None
    # The memory block as the facts and observations would leave it: what each line would cost.
    probe: MemoryBlock = field(default_factory=MemoryBlock)
    observations: list[Observation] = field(default_factory=list)  # of the thread's scope
    observations_read: bool = False  # read with the context documents (`_documents_and_observations`)
    observation_lines: list[tuple[Observation, str, int]] = field(default_factory=list)  # named by the input
    kept_observation_lines: list[str] = field(default_factory=list)
    observations_sent: list[dict[str, Any]] = field(default_factory=list)
    observations_used: int = 0  # tokens of the observations recall's items brought
    room: dict[str, int] = field(default_factory=dict)  # of each shared partition
    kept_fact_lines: list[str] = field(default_factory=list)
    facts_sent: list[dict[str, Any]] = field(default_factory=list)
    spare_from_facts: int = 0
    units: list[Unit] = field(default_factory=list)
    recent_room: int = 0
    selected: list[Unit] = field(default_factory=list)
    notes: dict[str, int] = field(default_factory=dict)  # entry id -> tokens of a result sent as a note
    not_selected: set[str] = field(default_factory=set)
    history_cost: int = 0
    recall_room: int = 0
    memory_before_recall: tuple[bool, set[str]] = field(default_factory=lambda: (False, set()))
    recall_blocks: list[tuple[str, str, str]] = field(default_factory=list)  # (section, line, source id)
    recall_used: int = 0
    recalled_entries: list[dict[str, Any]] = field(default_factory=list)
    recalled_items: list[dict[str, Any]] = field(default_factory=list)
    documents_sent: list[dict[str, Any]] = field(default_factory=list)
    graph_blocks: list[tuple[NodeBlock, int]] = field(default_factory=list)  # (block, what it would cost)
    graph_lines: list[str] = field(default_factory=list)
    graph_nodes_sent: dict[str, dict[str, Any]] = field(default_factory=dict)
    graph_edges_sent: list[dict[str, Any]] = field(default_factory=list)
    graph_dropped: list[dict[str, Any]] = field(default_factory=list)
    semantic_found: list[tuple[KnowledgeHit, str, int]] = field(default_factory=list)  # (hit, line, cost)
    semantic_lines: list[str] = field(default_factory=list)
    semantic_sent: list[dict[str, Any]] = field(default_factory=list)
    semantic_dropped: list[dict[str, Any]] = field(default_factory=list)


def context_build(*, agent: Agent, thread: Thread, request: ContextRequest) -> BuiltContext:
    """Build the context of one turn: the module's steps, in order, each a function of the build."""
    build = _build_start(agent=agent, thread=thread, request=request)
    _place_required(build)
    _read_history(build)
    _place_summary(build)
    _measure_available(build)
    _load_facts(build)
    _load_observations(build)
    _load_semantic(build)
    _load_graph(build)
    _fit_partitions(build)
    _place_facts(build)
    _place_semantic(build)
    _place_graph(build)
    _select_history(build)
    if build.recall_wanted:
        _recall(build)
        _recall_observations(build)
        _give_back_recall_room(build)
    _charge_recall_and_recent(build)
    _report_dropped_history(build)
    built = _assemble(build)
    _count_retrievals(build)
    return built


def _build_start(*, agent: Agent, thread: Thread, request: ContextRequest) -> _Build:
    """The budget: max_tokens less the reserve (partition shares and the time zone checked first: a
    400 before any read, as is an unknown purpose); the zone (the request's, else the thread's, else UTC); the memory switch."""
    shares = partition_shares(request.strategy, request.partitions)
    # A purpose of the agent's list, or a 400 naming `purpose` (REST and MCP alike).
    recall_purpose_check(agent=agent, purpose=request.purpose)
    metadata = thread.metadata or {}
    zone = (
        zone_check(request.time_zone)
        if request.time_zone
        else zone_of(metadata.get("time_zone") or metadata.get("timezone"))
    )
    memory_on = bool(thread.memory_enabled)
    reserve = request.reserve_tokens
    if reserve is None:
        # 004: 10% of the budget, at least 100; half of a budget too small to keep anything after that.
        reserve = max(100, math.ceil(request.max_tokens * 0.1))
        if reserve >= request.max_tokens:
            reserve = request.max_tokens // 2
    return _Build(
        agent=agent,
        thread=thread,
        request=request,
        shares=shares,
        budget=request.max_tokens - reserve,
        reserve=reserve,
        recall_wanted=memory_on and request.strategy == "hybrid" and bool(request.current_input.strip()),
        zone=zone,
        memory_on=memory_on,
    )


def _place_required(build: _Build) -> None:
    """Step 1: the required partitions known before reading: system prompt, pinned (the context
    documents, then the request's own), index (one system message), the current input (counted,
    not sent), the brief (opens the memory block)."""
    request, partitions = build.request, build.partitions
    parts = build.system_parts
    if request.system_prompt:
        parts.append(("system", request.system_prompt))
    documents_at = len(parts)
    parts += [("pinned", text) for text in request.pinned if text]
    index_text = request.index
    if request.file_index and build.memory_on:
        listing = _file_index(build)
        if listing:
            index_text = "\n\n".join(part for part in (index_text, f"{FILE_INDEX_HEADING}\n{listing}") if part)
    if index_text:
        parts.append(("index", index_text))
    if not build.memory_on:
        build.warnings.append("memory is off for this thread: nothing was recalled into this context")
    documents = _place_documents(build, room=build.budget - _parts_cost(parts) - _input_cost(request))
    if documents:
        parts.insert(documents_at, ("pinned", documents))
    for position, (name, text) in enumerate(parts):
        cost = count_tokens(text) + MESSAGE_OVERHEAD if position == 0 else count_tokens("\n\n" + text)
        partitions[name] = partitions.get(name, 0) + cost
    if request.current_input:
        partitions["final"] = count_message_tokens(request.current_input)
    build.brief_text = request.brief
    if request.brief_cards and request.current_input.strip() and build.memory_on:
        build.brief_cards = _brief(build)
        build.brief_text = "\n\n".join(part for part in (request.brief, brief_block(build.brief_cards)) if part)
    if build.brief_text:
        partitions["brief"] = build.memory.line_cost(None, build.brief_text)
        build.memory.take(None)


def _parts_cost(parts: list[tuple[str, str]]) -> int:
    """What these parts of the system message cost, joined as `_place_required` joins them."""
    return sum(
        count_tokens(text) + MESSAGE_OVERHEAD if position == 0 else count_tokens("\n\n" + text)
        for position, (_, text) in enumerate(parts)
    )


def _input_cost(request: ContextRequest) -> int:
    return count_message_tokens(request.current_input) if request.current_input else 0


def _place_documents(build: _Build, *, room: int) -> str:
    """The context documents of the thread's scopes (001 "Project-Context Files"), nearest scope first
    (thread, project, agent), each under its own heading, after 001's framing, as far as `room`
    (what the budget leaves after the other required parts) takes them: one that does not fit is
    left out (partition pinned, reason budget) and the next, smaller, may still go. A failure to
    read them leaves them out, reported."""
    thread, request = build.thread, build.request
    project_id = request.project_id or str((thread.metadata or {}).get("project_id") or "")[:128]
    try:
        documents = (
            _documents_and_observations(build, project_id, room)
            if _observations_wanted(build)
            else context_documents_for(agent=build.agent, thread_id=thread.external_id, project_id=project_id)
        )
    except Exception as exc:
        logger.exception("context documents failed")
        build.errors.append({"source": "documents", "message": str(exc)})
        return ""
    if not documents:
        return ""
    sections: list[str] = []
    used = count_tokens("\n\n" + FRAMING)
    for document in documents:
        section = f"## {document.name} ({document.scope.label})\n{document.content.strip()}"
        cost = count_tokens("\n\n" + section)
        if used + cost > room:
            reason = "oversized" if cost > room else "budget"
            build.dropped_blocks.append(DroppedBlock("pinned", reason, cost, document.version_id))
            continue
        used += cost
        sections.append(section)
        build.documents_sent.append(
            {"name": document.name, "scope": document.scope.kind, "version_id": document.version_id}
        )
    return "\n\n".join([FRAMING, *sections]) if sections else ""


def _observations_wanted(build: _Build) -> bool:
    """Whether the build reads the observations of the thread's scope (`_load_observations`)."""
    request = build.request
    # A context for one purpose leaves them out: an observation summarises an entity's facts whatever
    # they were collected for, and would pass on another purpose's facts in a summary.
    return bool(
        request.include_observations and request.current_input.strip() and build.memory_on and not request.purpose
    )


def _documents_and_observations(build: _Build, project_id: str, room: int) -> list[ContextDocument]:
    """The context documents, and the observations `_load_observations` takes (`build.observations`),
    in one read of the memory files' heads: what `context_documents_for` and `observations_seen`
    each read, in one statement (their paths never meet). A failure of it leaves both to their own
    reads (each reporting its own error)."""
    agent, thread = build.agent, build.thread
    scopes = context_document_scopes(thread_id=thread.external_id, project_id=project_id)
    try:
        heads = _memory_heads_and_facts(build, project_id, room)
        observed = [
            h for h in heads if h.path == OBSERVATIONS_DIRECTORY or h.path.startswith(OBSERVATIONS_DIRECTORY + "/")
        ]
        observations = observations_of(snapshot_of(observed))
    except Exception:
        logger.exception("context memory files failed")
        return context_documents_for(agent=agent, thread_id=thread.external_id, project_id=project_id)
    build.observations, build.observations_read = observations, True
    return context_documents_of([h for h in heads if h.path.startswith(CONTEXT_ROOT + "/") and not h.user_id], scopes)


def _memory_heads_and_facts(build: _Build, project_id: str, room: int) -> list[MemoryFileVersion]:
    """`context_memory_heads`, in one round trip with (issue 26: a round trip each; the first two
    return nothing in most threads):
    - when the build reads the facts as they hold now (`_load_facts`: no `as_of`, no purpose), their
      rows (`build.fact_states`);
    - when the history's first read is a range of the active branch (`window_first_read`), its rows
      for the window the history's room would ask for were the documents to take none of `room` (what
      the budget leaves after the other required parts): `build.window_first`, used by
      `_read_history` when the room it finds asks for that window (no document placed, most threads).
    """
    agent, thread, request = build.agent, build.thread, build.request
    scope = thread_context_scope(thread)
    values = (scope.user_id, scope.project_id, thread.external_id, project_id)
    heads_read = _memory_heads_statement(tuple(bool(v) for v in values))
    heads_statement = heads_read.statement(agent.pk, *(v for v in values if v))
    if heads_statement is None or heads_statement[0] != DEFAULT_DB_ALIAS:
        return context_memory_heads(agent=agent, thread=thread, project_id=project_id)
    statements: list[tuple[str, Sequence[Any] | Mapping[str, Any]]] = [heads_statement[1:]]
    facts_statement = (
        context_facts_read(agent=agent, user_id=scope.user_id, project_id=scope.project_id, thread_id=scope.thread_id)
        if request.include_facts and build.memory_on and request.as_of is None and not request.purpose
        else None
    )
    if facts_statement is not None and facts_statement[0] == DEFAULT_DB_ALIAS:
        statements.append(facts_statement[1:])
    else:
        facts_statement = None
    want = 0
    window_statement = None
    if request.leaf_id is None and not (request.brief_cards and request.current_input.strip() and build.memory_on):
        # The room `_read_history` finds when no document is placed: `room` less the brief given.
        brief = MemoryBlock().line_cost(None, request.brief) if request.brief else 0
        want = _window_want(build, max(0, room - brief))
        window_statement = window_first_read(thread=thread, want=want)
        if window_statement is not None:
            statements.append(window_statement)
    if len(statements) == 1:
        return context_memory_heads(agent=agent, thread=thread, project_id=project_id)
    found = read_together(DEFAULT_DB_ALIAS, statements)
    heads = heads_read.built(found[0])
    for head in heads:
        head.is_deletion = head.content is None  # type: ignore[attr-defined]
    if facts_statement is not None:
        build.fact_states = context_facts_states(found[1])
    if window_statement is not None:
        build.window_first = (want, found[-1])
    return heads


def _window_want(build: _Build, room: int) -> int:
    """How many entries the history's first read asks for, in this room: a first guess of how many
    the budget can take (about 16 tokens a short message); the reader grows the window from what it
    finds."""
    want = FIRST_WINDOW if build.request.strategy != "relevant" else RELEVANT_CANDIDATES
    return max(want, min(MAX_WINDOW, room // 16))


def _read_history(build: _Build) -> None:
    """Step 2: the newest part of the branch, compacted; it holds the summary, a required partition
    the rest is split after. A store failure leaves the history out, reported."""
    room = max(0, build.budget - sum(build.partitions.values()))
    want = _window_want(build, room)
    # The first read's rows, when they came with the memory files' (`_memory_heads_and_facts`) for
    # the window this room asks for.
    first = build.window_first
    try:
        compacted, complete, _ = history_window(
            thread=build.thread,
            leaf_id=build.request.leaf_id,
            want=want,
            room=room,
            first_rows=first[1] if first is not None and first[0] == want else None,
        )
    except DomainError:
        raise
    except Exception as exc:
        logger.exception("context history failed")
        build.errors.append({"source": "history", "message": str(exc)})
        return
    build.history_entries, build.complete = compacted.entries, complete
    build.summary, build.compaction_id = compacted.summary, compacted.compaction_id


def _place_summary(build: _Build) -> None:
    """The compaction's summary, under its heading, as a required partition."""
    summary = build.summary
    if summary:
        build.summary_text = summary if summary.startswith(SUMMARY_HEADING) else f"{SUMMARY_HEADING}\n{summary}"
        build.partitions["summaries"] = count_message_tokens(build.summary_text)


def _measure_available(build: _Build) -> None:
    """What the required partitions leave for the shared ones (a warning when they do not fit), and
    the texts of the required partitions a shared block may repeat (then left out as a duplicate)."""
    required = sum(build.partitions.values())
    system_cost = build.partitions.get("system", 0)
    if system_cost > build.budget:
        build.warnings.append(
            f"the system prompt ({system_cost} tokens) is larger than the budget ({build.budget} tokens): sent whole"
        )
    elif required > build.budget:
        build.warnings.append(
            f"the required partitions ({required} tokens) are larger than the budget ({build.budget} tokens)"
        )
    build.available = max(0, build.budget - required)
    build.lasting = [words_of(text) for _, text in build.system_parts]
    if build.summary_text:
        build.lasting.append(words_of(build.summary_text))
    if build.brief_text:
        build.lasting.append(words_of(build.brief_text))


def _load_facts(build: _Build) -> None:
    """Step 3a: the facts of the thread's scope that are not duplicates, each with what it would cost."""
    memory = build.memory
    build.probe.open, build.probe.sections = memory.open, set(memory.sections)
    if not (build.request.include_facts and build.memory_on):
        return
    thread = build.thread
    try:
        scope = thread_context_scope(thread)
        facts = context_facts(
            agent=build.agent,
            user_id=scope.user_id,
            project_id=scope.project_id,
            thread_id=scope.thread_id,
            as_of=build.request.as_of,
            purpose=build.request.purpose,
            states=build.fact_states,
        )
        build.items_live = bool(facts)
    except Exception as exc:
        logger.exception("context facts failed")
        build.errors.append({"source": "facts", "message": str(exc)})
        facts = []
    probe = build.probe
    fresh = []
    for fact in facts:
        if held_in(fact.text, build.lasting):
            tokens = count_tokens(f"- {fact.text}\n")
            build.dropped_blocks.append(DroppedBlock("facts", "duplicate", tokens, fact.item_id))
        else:
            fresh.append(fact)
    if build.request.facts_recall is not None:
        fresh, passed, error = facts_recalled(
            agent=build.agent, facts=fresh, text=build.request.current_input, count=build.request.facts_recall
        )
        if error:
            build.errors.append({"source": "facts", "message": error})
        for fact in passed:
            tokens = count_tokens(f"- {fact.text}\n")
            build.dropped_blocks.append(DroppedBlock("facts", "not-selected", tokens, fact.item_id))
    for fact in fresh:
        line = f"- {fact.text}"
        cost = probe.line_cost("facts", line)
        probe.take("facts")
        build.fact_lines.append((fact.item_id, line, cost))


def _load_observations(build: _Build) -> None:
    """Step 3a, continued: the observations of the entities the input names, next to the facts (more
    come with recall's items, `_recall_observations`)."""
    request = build.request
    if not _observations_wanted(build):
        return
    try:
        if not build.observations_read:  # else read with the context documents
            build.observations = observations_seen(agent=build.agent, scope=thread_context_scope(build.thread))
    except Exception as exc:
        logger.exception("context observations failed")
        build.errors.append({"source": "observations", "message": str(exc)})
    said = f" {words_of(request.current_input)} "
    for observation in [o for o in build.observations if named_in(o, said)][:MAX_OBSERVATIONS]:
        line = observation_line(observation)
        cost = build.probe.line_cost("observations", line)
        build.probe.take("observations")
        build.observation_lines.append((observation, line, cost))


def _fit_partitions(build: _Build) -> None:
    """Step 3: the shared partitions split what is left, in fill order (facts, recall, recent)."""
    recall_need = math.floor(build.shares["recall"] * build.available) if build.recall_wanted else 0
    extra = sum(cost for _, cost in build.graph_blocks) + sum(cost for _, _, cost in build.semantic_found)
    if extra and not build.recall_wanted:
        # The graph and semantic contexts take recall's share (004: recall holds recall, search
        # results and graph).
        recall_need = min(extra, math.floor(build.shares["recall"] * build.available))
    needs = {
        "facts": sum(cost for _, _, cost in build.fact_lines) + sum(cost for _, _, cost in build.observation_lines),
        "recall": recall_need,
        "recent": build.available,
    }
    build.room = fit_in_order(build.available, build.shares, needs)


def _place_facts(build: _Build) -> None:
    """The facts that fit their room go into the memory block; the room they leave is recall's."""
    room, memory = build.room["facts"], build.memory
    used = 0
    for item_id, line, _ in build.fact_lines:
        cost = memory.line_cost("facts", line)
        if used + cost > room:
            build.dropped_blocks.append(DroppedBlock("facts", "oversized" if cost > room else "budget", cost, item_id))
            continue
        memory.take("facts")
        used += cost
        build.kept_fact_lines.append(line)
        build.facts_sent.append({"id": item_id, "text": line[2:]})
        build.lasting.append(words_of(line[2:]))
    for observation, line, _ in build.observation_lines:
        cost = memory.line_cost("observations", line)
        if used + cost > room:
            reason = "oversized" if cost > room else "budget"
            build.dropped_blocks.append(DroppedBlock("facts", reason, cost, observation.entity_id))
            continue
        memory.take("observations")
        used += cost
        build.kept_observation_lines.append(line)
        build.observations_sent.append(observation_sent(observation))
    if used:
        build.partitions["facts"] = used
    build.spare_from_facts = room - used


def _load_semantic(build: _Build) -> None:
    """Step 3a, continued: the passages of the knowledge documents found for the input (of no project
    or the build's), each with what it would cost; a failure leaves them out, reported (semantic)."""
    request, thread = build.request, build.thread
    if not (request.include_semantic_context and request.current_input.strip()):
        return
    project_id = request.project_id or str((thread.metadata or {}).get("project_id") or "")[:128]
    try:
        hits = knowledge_search(agent=build.agent, text=request.current_input, project_id=project_id)
    except Exception as exc:
        logger.exception("context semantic search failed")
        build.errors.append({"source": "semantic", "message": str(exc)})
        return
    for hit in hits:
        line = f"- [{hit.name}] {' '.join(hit.text.split())}"
        if held_in(hit.text, build.lasting):
            build.dropped_blocks.append(
                DroppedBlock("semantic", "duplicate", count_tokens(line + "\n"), f"{hit.document_id}#{hit.seq}")
            )
            continue
        cost = build.probe.line_cost("semantic", line)
        build.probe.take("semantic")
        build.semantic_found.append((hit, line, cost))


def _place_semantic(build: _Build) -> None:
    """The passages that fit recall's room, best first (what they use is recall's no more); one that
    does not fit is left out (partition semantic) and in `dropped.semantic_results`."""
    if not build.semantic_found:
        return
    memory, room = build.memory, build.room["recall"]
    used = 0
    for hit, line, _ in build.semantic_found:
        cost = memory.line_cost("semantic", line)
        if used + cost > room:
            reason = "oversized" if cost > room else "budget"
            build.dropped_blocks.append(DroppedBlock("semantic", reason, cost, f"{hit.document_id}#{hit.seq}"))
            build.semantic_dropped.append(hit.as_json())
            continue
        memory.take("semantic")
        used += cost
        build.semantic_lines.append(line)
        build.semantic_sent.append(hit.as_json())
        build.lasting.append(words_of(hit.text))
    if used:
        build.partitions["semantic"] = used
        build.room["recall"] = room - used


def _load_graph(build: _Build) -> None:
    """Step 3a, continued: the graph context's node blocks (`graph_blocks`), each with what it would
    cost; a failure to read the graph leaves it out, reported (source graph)."""
    request = build.request
    if not (request.include_graph_context and request.current_input.strip() and build.memory_on):
        return
    try:
        blocks = graph_blocks(
            agent=build.agent,
            scope=thread_context_scope(build.thread),
            text=request.current_input,
            hops=request.graph_hops,
        )
    except Exception as exc:
        logger.exception("context graph failed")
        build.errors.append({"source": "graph", "message": str(exc)})
        return
    probe = build.probe
    for block in blocks:
        cost = 0
        for line in block.lines:
            cost += probe.line_cost("graph", line)
            probe.take("graph")
        build.graph_blocks.append((block, cost))


def _place_graph(build: _Build) -> None:
    """The graph context's nodes, nearest first, as far as recall's room takes them (what they use is
    recall's no more): a node whose edges do not fit is cut (in `dropped.graph_nodes` and a block of
    partition graph, reason budget), and so are the edges that reach it."""
    if not build.graph_blocks:
        return
    memory, room = build.memory, build.room["recall"]
    used = 0
    for block, _ in build.graph_blocks:
        if not block.lines:  # the first seed: placed with the first edge that reaches it
            continue
        # An edge to a node cut before is not sent: only edges between placed nodes are.
        cut = {d["id"] for d in build.graph_dropped}
        kept = [
            (edge, line)
            for edge, line in zip(block.edges, block.lines, strict=True)
            if edge.subject_id not in cut and edge.object_id not in cut
        ]
        saved = (memory.open, set(memory.sections))
        cost = 0
        for _, line in kept:
            cost += memory.line_cost("graph", line)
            memory.take("graph")
        if not kept or used + cost > room:
            memory.open, memory.sections = saved
            reason = "oversized" if kept and cost > room else "budget"
            build.dropped_blocks.append(DroppedBlock("graph", reason, cost, block.node.id))
            build.graph_dropped.append(block.node.as_json())
            continue
        used += cost
        for edge, line in kept:
            build.graph_lines.append(line)
            build.graph_edges_sent.append(edge.as_json())
            build.graph_nodes_sent.setdefault(edge.subject_id, {})
            build.graph_nodes_sent.setdefault(edge.object_id, {})
    nodes = {b.node.id: b.node.as_json() for b, _ in build.graph_blocks}
    for node_id in build.graph_nodes_sent:
        build.graph_nodes_sent[node_id] = nodes[node_id]
    if used:
        build.partitions["graph"] = used
        build.room["recall"] = room - used


def _select_history(build: _Build) -> None:
    """Step 3b and 4: the history the strategy keeps in the room of `recent` (and of recall, when
    there is no recall)."""
    strategy = build.request.strategy
    build.units = history_units(build.history_entries)
    recent_room = build.room["recent"]
    if strategy == "hybrid" and not build.recall_wanted:
        recent_room += build.spare_from_facts
        build.spare_from_facts = 0
    if strategy != "hybrid":
        recent_room += build.spare_from_facts + build.room["recall"]
    build.recent_room = recent_room
    if strategy == "relevant":
        build.selected, build.notes, build.not_selected = relevant_turns(
            units=build.units,
            room=recent_room,
            current_input=build.request.current_input,
            errors=build.errors,
            complete=build.complete,
        )
        build.history_cost = sum(unit_cost(u, build.notes) for u in build.selected)
    else:
        run = recent_run(build.units, recent_room, complete=build.complete)
        build.selected, build.notes, build.history_cost = run.units, run.notes, run.cost


def _recall(build: _Build) -> None:
    """Step 3c (hybrid): older turns of the branch and memory items found by the search selector,
    as memory block lines; a duplicate of a kept block or one past the room is left out."""
    agent, thread, request, memory = build.agent, build.thread, build.request, build.memory
    # Recall comes before recent in the fill order: the room the history run could not use (a short
    # thread) is recall's too; the run gets back whatever recall leaves (`_give_back_recall_room`).
    recall_room = build.room["recall"] + build.spare_from_facts + max(0, build.recent_room - build.history_cost)
    build.recall_room = recall_room
    build.memory_before_recall = (memory.open, set(memory.sections))
    kept_ids = {e.id for u in build.selected for e in u.entries}
    oldest_kept = build.selected[0].first.seq if build.selected else None
    before_seq = oldest_kept if oldest_kept is not None else after_seq(build.history_entries)
    hits, search_errors = _recall_search(
        agent=agent,
        thread=thread,
        text=request.current_input,
        before_seq=before_seq,
        # Turns of other branches (left by a rewind or a checkout) are not this conversation's past.
        exclude_ids=off_branch(thread, request.leaf_id, before_seq) if thread.branched else (),
        purpose=request.purpose,
        as_of=request.as_of,
        items_live=build.items_live,
    )
    build.errors.extend(search_errors)
    fact_ids = {f["id"] for f in build.facts_sent}
    at = request.as_of or timezone.now()
    used = 0
    for hit in hits:
        if hit.kind == "item":
            section, line = "recall_items", recall_item_line(hit, at, build.zone)
        else:
            section, line = "recall_entries", recall_entry_line(hit, build.zone)
        if hit.id in kept_ids or hit.id in fact_ids or held_in(hit.text, build.lasting):
            build.dropped_blocks.append(DroppedBlock("recall", "duplicate", count_tokens(line + "\n"), hit.id))
            continue
        cost = memory.line_cost(section, line)
        if used + cost > recall_room:
            reason = "oversized" if cost > recall_room else "budget"
            build.dropped_blocks.append(DroppedBlock("recall", reason, cost, hit.id))
            continue
        memory.take(section)
        used += cost
        build.recall_blocks.append((section, line, hit.id))
        if hit.kind == "item":
            build.recalled_items.append(
                {"id": hit.id, "text": hit.text, "kind": hit.item_kind, "score": round(hit.score, 6)}
            )
        else:
            build.recalled_entries.append(
                {
                    "id": hit.id,
                    "seq": hit.seq,
                    "text": hit.text,
                    "created_at": hit.created_at.astimezone(build.zone).isoformat() if hit.created_at else None,
                    "sender_name": hit.sender_name,
                    "role": hit.role,
                    "score": round(hit.score, 6),
                    "channels": hit.channels,
                }
            )
    build.recall_used = used


def _recall_observations(build: _Build) -> None:
    """Observations of the entities whose items recall found, in the room recall left (charged to facts)."""
    memory = build.memory
    recalled_ids = {i["id"] for i in build.recalled_items}
    sent_entities = {o["entity_id"] for o in build.observations_sent}
    used = 0
    for observation in build.observations:
        if len(build.observations_sent) >= MAX_OBSERVATIONS or not recalled_ids:
            break
        if observation.entity_id in sent_entities or not recalled_ids & set(observation.item_ids):
            continue
        line = observation_line(observation)
        cost = memory.line_cost("observations", line)
        if build.recall_used + used + cost > build.recall_room:
            build.dropped_blocks.append(DroppedBlock("facts", "budget", cost, observation.entity_id))
            continue
        memory.take("observations")
        used += cost
        build.kept_observation_lines.append(line)
        build.observations_sent.append(observation_sent(observation))
    if used:
        build.partitions["facts"] = build.partitions.get("facts", 0) + used
    build.observations_used = used


def _give_back_recall_room(build: _Build) -> None:
    """What recall left goes to the history: the run goes further back. A recalled turn the longer
    run now holds is a duplicate of it (its line and its room are freed)."""
    extra = build.recall_room - build.recall_used - build.observations_used
    if extra <= 0 or not build.units:
        return
    run = recent_run(build.units, build.history_cost + extra, complete=build.complete)
    build.selected, build.notes, build.history_cost = run.units, run.notes, run.cost
    now_kept = {e.id for u in build.selected for e in u.entries}
    moved_ids = {r["id"] for r in build.recalled_entries if r["id"] in now_kept}
    if not moved_ids:
        return
    build.recalled_entries = [r for r in build.recalled_entries if r["id"] not in moved_ids]
    for _section, line, source_id in build.recall_blocks:
        if source_id in moved_ids:
            build.dropped_blocks.append(DroppedBlock("recall", "duplicate", count_tokens(line + "\n"), source_id))
    build.recall_blocks = [b for b in build.recall_blocks if b[2] not in moved_ids]
    build.recall_used = recall_cost(build.memory_before_recall, build.recall_blocks)


def _charge_recall_and_recent(build: _Build) -> None:
    """The tokens recall and the history took, once recall gave back what it left."""
    if build.recall_used:
        build.partitions["recall"] = build.recall_used
    if build.history_cost:
        build.partitions["recent"] = build.history_cost


def _report_dropped_history(build: _Build) -> None:
    """Step 5 for the history: what the loaded window had and the strategy left out (an entry sent
    as a recalled line is not dropped; a tool result sent as a short note is, as oversized)."""
    kept_ids = {e.id for u in build.selected for e in u.entries}
    recalled_ids = {r["id"] for r in build.recalled_entries}
    notes, not_selected = build.notes, build.not_selected
    for unit in build.units:
        for entry, tokens in zip(unit.entries, unit.tokens, strict=True):
            if entry.id in kept_ids:
                if entry.id in notes:
                    build.dropped_blocks.append(DroppedBlock("recent", "oversized", tokens, entry.id))
                continue
            if entry.id in recalled_ids:
                continue
            reason = "not-selected" if entry.id in not_selected else "budget"
            build.dropped_blocks.append(DroppedBlock("recent", reason, tokens, entry.id))
            build.dropped_entries.append(entry_ref(entry, tokens))


def _assemble(build: _Build) -> BuiltContext:
    """Step 6: one system message, the summary, the history (cache breakpoints on its last message
    and on the last message of the turn before), then the <memory_context> user message."""
    messages: list[dict[str, Any]] = []
    if build.system_parts:
        messages.append({"role": "system", "content": "\n\n".join(text for _, text in build.system_parts)})
    if build.summary_text:
        messages.append({"role": "user", "content": build.summary_text, "compaction_id": build.compaction_id})
    notes = build.notes
    history_messages = [
        history_message(e, notes.get(e.id) if e.id in notes else None) for u in build.selected for e in u.entries
    ]
    mark_turn_ends(history_messages)
    messages += history_messages
    memory_context = memory_text(
        build.brief_text,
        build.kept_fact_lines,
        [(b[0], b[1]) for b in build.recall_blocks],
        build.kept_observation_lines,
        build.graph_lines,
        build.semantic_lines,
    )
    if memory_context:
        messages.append({"role": "user", "content": memory_context})
    history, complete = build.history_entries, build.complete
    return BuiltContext(
        messages=messages,
        memory_context=memory_context or None,
        partitions=build.partitions,
        facts=build.facts_sent,
        observations=build.observations_sent,
        brief_cards=build.brief_cards,
        recalled_entries=build.recalled_entries,
        recalled_items=build.recalled_items,
        documents=build.documents_sent,
        graph=(
            {"nodes": list(build.graph_nodes_sent.values()), "edges": build.graph_edges_sent}
            if build.request.include_graph_context
            else None
        ),
        dropped_graph_nodes=build.graph_dropped,
        semantic_results=build.semantic_sent,
        dropped_semantic_results=build.semantic_dropped,
        time_zone=str(build.zone.key),
        memory=build.memory_on,
        truncated=bool(build.dropped_entries) or not complete,
        dropped_entries=build.dropped_entries,
        dropped_blocks=build.dropped_blocks,
        errors=build.errors,
        warnings=build.warnings,
        strategy=build.request.strategy,
        budget=build.budget,
        reserve_tokens=build.reserve,
        original_message_count=len(history) if complete else history_count(history),
        included_message_count=len(history_messages),
    )


def _count_retrievals(build: _Build) -> None:
    """What was sent goes to the access log (the entries of the history, the summary and those
    recalled; the facts and items), and the items are counted as retrieved in the same statement
    (best effort: never fails the build)."""
    entry_ids = [e.id for u in build.selected for e in u.entries]
    if build.summary_text and build.compaction_id:
        entry_ids.append(build.compaction_id)
    entry_ids += [r["id"] for r in build.recalled_entries]
    access_log_record(
        agent_id=build.agent.pk,
        thread=build.thread,
        source=AccessLog.Source.CONTEXT,
        item_ids=[f["id"] for f in build.facts_sent] + [i["id"] for i in build.recalled_items],
        entry_ids=entry_ids,
    )


def _recall_search(
    *,
    agent: Agent,
    thread: Thread,
    text: str,
    before_seq: int | None,
    exclude_ids: Sequence[str],
    purpose: str,
    as_of: datetime | None,
    items_live: bool | None = None,
) -> tuple[list[Any], list[dict[str, str]]]:
    """Recall's and the brief's search of the thread: its turns, and the items holding in its scope
    (`thread_context_scope`, the search's own items of a thread) of the request's purpose or none,
    read only when `items_live` (what the facts' read found) or the search's own check says any hold."""
    try:
        outcome = search(
            agent=agent,
            text=text,
            thread=thread,
            kinds=("entries", "items"),
            limit=RECALL_LIMIT,
            method="hybrid",
            as_of=as_of,
            purpose=purpose,
            before_seq=before_seq,
            exclude_ids=exclude_ids,
            min_similarity=RECALL_MIN_SIMILARITY,
            skip_small_talk=True,
            items_live=items_live,
        )
    except Exception as exc:
        logger.exception("recall search failed")
        return [], [{"source": "semantic", "message": str(exc)}]
    errors = [{"source": "semantic", "message": e["message"]} for e in outcome.errors]
    return outcome.hits, errors


def _memory_heads_read(agent_id: int, values: dict[str, str]) -> QuerySet[MemoryFileVersion]:
    """The heads `_documents_and_observations` reads (`heads_of` less its `is_deletion` annotation):
    the context documents of the thread's scopes and the observations its scope sees. `values`: the
    thread's person, project and id (its context scope) and the documents' project."""
    agent = Agent(pk=agent_id)
    scopes = context_document_scopes(thread_id=values["thread"], project_id=values["documents_project"])
    scope = Scope(user_id=values["user"], project_id=values["project"], thread_id=values["thread"])
    return (
        versions_for_agent(agent=agent)
        .filter(context_documents_q(scopes) | observations_q(agent=agent, scope=scope))
        .order_by("user_id", "project_id", "thread_id", "path", "-sequence")
        .distinct("user_id", "project_id", "thread_id", "path")
    )


_MEMORY_HEAD_VALUES = ("user", "project", "thread", "documents_project")
# `_memory_heads_read` compiled once per process for each shape of its scopes (which of the values
# are '': an empty limit is one value fewer in an IN list, a scope fewer), the others its parameters
# (memoryapp.precompiled; issue 26: the ORM built it anew on every context build).
_MEMORY_HEADS: dict[tuple[bool, ...], Precompiled[MemoryFileVersion]] = {}


def _memory_heads_statement(shape: tuple[bool, ...]) -> Precompiled[MemoryFileVersion]:
    found = _MEMORY_HEADS.get(shape)
    if found is None:
        given = [name for name, present in zip(_MEMORY_HEAD_VALUES, shape, strict=True) if present]

        def read(agent_id: int, *args: str) -> QuerySet[MemoryFileVersion]:
            values = dict.fromkeys(_MEMORY_HEAD_VALUES, "") | dict(zip(given, args, strict=True))
            return _memory_heads_read(agent_id, values)

        found = _MEMORY_HEADS.setdefault(
            shape,
            Precompiled(
                read,
                -26,
                *(f"\x00{name}" for name in given),
                twins=(-27, *(f"\x00{name}2" for name in given)),
            ),
        )
    return found


def context_memory_heads(*, agent: Agent, thread: Thread, project_id: str) -> list[MemoryFileVersion]:
    """The head versions of the thread's context documents (of the documents' `project_id`) and of the
    observations its scope (`thread_context_scope`) sees, in `heads_of`'s order, each marked
    `is_deletion` as `heads_of` marks it."""
    scope = thread_context_scope(thread)
    values = (scope.user_id, scope.project_id, thread.external_id, project_id)
    shape = tuple(bool(v) for v in values)
    heads = _memory_heads_statement(shape).rows(agent.pk, *(v for v in values if v))
    for head in heads:
        head.is_deletion = head.content is None  # type: ignore[attr-defined]
    return heads


# --- between runs: the memory-file index, the brief, observations -----------------------------------


def _file_index(build: _Build) -> str:
    """The memory files the thread's scope sees on its branch (paths and sizes), as the index lists them."""
    thread, leaf_id = build.thread, build.request.leaf_id
    try:
        place = None
        if leaf_id:
            place = Entry.objects.filter(thread=thread, pk=leaf_id).first()
        elif thread.active_leaf_id:
            place = Entry.objects.filter(pk=thread.active_leaf_id).first()
        access = FileAccess(
            agent=build.agent, user_id=thread.user_id, thread_id=thread.external_id, read_only=True, place=place
        )
        return files_index_text(access=access)
    except Exception as exc:  # the index is a convenience: a failure leaves it out, reported
        logger.exception("context file index failed")
        build.errors.append({"source": "index", "message": str(exc)})
        return ""


def _brief(build: _Build) -> list[BriefCard]:
    """The pre-turn brief's cards: what a search of memory finds for the input, briefed by the model
    (no call when it finds nothing); a failure leaves the brief out, reported."""
    agent, thread, request = build.agent, build.thread, build.request
    hits, search_errors = _recall_search(
        agent=agent,
        thread=thread,
        text=request.current_input,
        before_seq=None,
        exclude_ids=off_branch(thread, request.leaf_id, None) if thread.branched else (),
        purpose=request.purpose,
        as_of=request.as_of,
    )
    build.errors.extend({**e, "source": "brief"} for e in search_errors)
    sources = [
        BriefSource(
            ref=f"{'item' if hit.kind == 'item' else 'turn'}:{hit.id}",
            text=hit.text,
            date=day_of(hit.created_at if hit.kind == "entry" else hit.valid_from, build.zone),
        )
        for hit in hits[:BRIEF_SOURCES]
    ]
    try:
        return memory_brief(text=request.current_input, sources=sources, max_cards=request.brief_cards)
    except ModelError as exc:
        build.errors.append({"source": "brief", "message": str(exc)})
        return []

"""Compaction strategies (003): summarize-old-preserve-recent, clear-old-tool-results, hierarchical, custom.

A strategy reads a `CompactionContext` (the active branch, the history as the model sees it now,
the options) and returns a `CompactionPlan` (what the compaction entry will say) or None when
there is nothing worth compacting. Strategies never write: the service re-checks and writes.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memoryapp.compaction.hierarchical import hierarchical_plan
from memoryapp.compaction.history import SUMMARY_HEADING, CompactedHistory
from memoryapp.compaction.plan import (
    CLEAR_TOOL_RESULTS,
    CUSTOM,
    HIERARCHICAL,
    SUMMARIZE,
    ClearOptions,
    CompactionContext,
    CompactionPlan,
    Strategy,
    SummarizeOptions,
)
from memoryapp.compaction.policy import (
    entry_tokens,
    find_cut_point,
    history_tokens,
    is_tool_result,
    should_compact_tokens,
)
from memoryapp.compaction.transcript import (
    budgeted_transcript,
    entry_body,
    entry_line,
    tool_call_names,
    tool_name_of,
)
from memoryapp.errors import DomainError
from memoryapp.llm.model import ModelUnavailable
from memoryapp.llm.port import complete, model_available, model_named
from memoryapp.models import Entry
from memoryapp.models.choices import EntryType, Role
from memoryapp.prompts import SUMMARY, summary_template
from memoryapp.tokens import count_message_tokens

PRESERVED_USER_HEADING = "[recent user messages, verbatim]"


# --- context and plan ------------------------------------------------------------------------


def _kept_tokens(entries: list[Entry]) -> int:
    return sum(entry_tokens(e) for e in entries)


# --- summarize-old-preserve-recent ---------------------------------------------------------------


@dataclass
class Summary:
    cut: int
    content: str
    summarized_ids: set[str]
    elided: int
    # The template version that wrote it and the model asked (None: the provider's own).
    prompt_version: str = SUMMARY
    summarizer_model: str | None = None

    def details(self) -> dict[str, Any]:
        details: dict[str, Any] = {"summarized": len(self.summarized_ids), "elided": self.elided}
        if self.summarizer_model:
            details["summarizer_model"] = self.summarizer_model
        return details


def summarize_history(
    *,
    entries: list[Entry],
    previous_summary: str | None,
    branch: list[Entry],
    options: SummarizeOptions,
) -> Summary | None:
    """Summarize the entries before the tool-safe cut; None when the cut keeps everything.

    1. Cut with `find_cut_point(entries, preserve_recent_turns)`.
    2. Render the earlier summary (if any) and the entries before the cut as a transcript; past
       `summarizer_input_char_budget` characters the oldest are elided with a marker.
    3. Ask the model (summary prompt + `prompt`), within `summarizer_timeout`.
    4. The content is the heading, the summary, then the newest `preserve_user_messages` user
       messages of the summarized window, verbatim.
    """
    cut = find_cut_point(entries, options.preserve_recent_turns)
    if cut == 0:
        return None
    older = entries[:cut]
    calls = tool_call_names(branch)
    blocks = []
    if previous_summary:
        blocks.append(f"earlier summary: {previous_summary}")
    blocks.extend(entry_line(e, calls) for e in older)
    transcript, elided = budgeted_transcript(blocks, options.summarizer_input_char_budget)
    template = summary_template(options.template_name)
    system = template.text
    if options.prompt:
        system += "\n\n" + options.prompt
    completion = complete(
        system=system,
        messages=[{"role": "user", "content": "Transcript to condense:\n\n" + transcript}],
        max_tokens=options.summary_max_tokens,
        timeout=options.summarizer_timeout,
        model=model_named(options.summarizer_model),
    )
    parts = [SUMMARY_HEADING, completion.text.strip()]
    if options.preserve_user_messages > 0:
        users = [e for e in older if e.type == EntryType.MESSAGE and e.role == Role.USER]
        preserved = users[-options.preserve_user_messages :]
        if preserved:
            parts.append(PRESERVED_USER_HEADING + "\n" + "\n\n".join(f"user: {entry_body(e)}" for e in preserved))
    return Summary(
        cut=cut,
        content="\n\n".join(p for p in parts if p),
        summarized_ids={e.id for e in older},
        elided=elided,
        prompt_version=template.version,
        summarizer_model=options.summarizer_model,
    )


def summarize_old_preserve_recent(ctx: CompactionContext) -> CompactionPlan | None:
    options: SummarizeOptions = ctx.options
    entries = ctx.view.entries
    if not model_available():
        raise ModelUnavailable("summarize-old-preserve-recent needs a language model.")
    summary = summarize_history(entries=entries, previous_summary=ctx.view.summary, branch=ctx.branch, options=options)
    if summary is None:
        return None
    kept = entries[summary.cut :]
    return CompactionPlan(
        strategy=SUMMARIZE,
        content=summary.content,
        first_kept_entry_id=kept[0].id if kept else None,
        first_kept_seq=kept[0].seq if kept else None,
        summary=summary.content,
        tokens_before=history_tokens(ctx.view),
        tokens_after=count_message_tokens(summary.content) + _kept_tokens(kept),
        prompt_version=summary.prompt_version,
        covered_ids=summary.summarized_ids,
        details=summary.details(),
    )


# --- clear-old-tool-results ------------------------------------------------------------------------


def _tokens_label(tokens: int) -> str:
    return f"{tokens / 1000:.1f}k" if tokens >= 1000 else str(tokens)


def cleared_placeholder(*, tool_name: str, tokens: int, handle: str | None, read_tool: str | None) -> str:
    """What a cleared tool result says instead of its content."""
    text = f"[tool result cleared: {tool_name}; {_tokens_label(tokens)} tokens"
    if handle and read_tool:
        text += f'; read it again with {read_tool}(handle="{handle}")'
    elif handle:
        text += f'; stored as handle "{handle}"'
    return text + "]"


def _cleared_view(view: CompactedHistory, cleared: dict[str, str], cleared_inputs: dict[str, list[str]]) -> list[Entry]:
    """The view's entries with a new clearing applied (copies)."""
    entries = []
    for entry in view.entries:
        if entry.id in cleared or entry.id in cleared_inputs:
            entry = copy.copy(entry)
            if entry.id in cleared:
                entry.content = cleared[entry.id]
                entry.text = cleared[entry.id]
            if entry.id in cleared_inputs and isinstance(entry.tool_calls, list):
                ids = set(cleared_inputs[entry.id])
                entry.tool_calls = [
                    {**c, "arguments": {}} if isinstance(c, dict) and c.get("id") in ids else c
                    for c in entry.tool_calls
                ]
        entries.append(entry)
    return entries


def clear_old_tool_results(ctx: CompactionContext) -> CompactionPlan | None:
    """Replace the oldest tool results with placeholders, with no model (003 clear-old-tool-results).

    1. Candidates: tool results of the current view not cleared before, oldest first; the newest
       `keep_tool_uses` stay, and results of `exclude_tools` are never cleared.
    2. Each cleared result gets a placeholder naming the tool, its size, and (with `externalize`)
       the handle `read_result_tool_name` reads it back with: the entry id, as nothing is deleted.
    3. With `clear_tool_inputs`, the paired assistant tool call arguments are blanked too.
    4. Reclaiming less than `clear_at_least` tokens clears nothing.
    5. Still at or over `context_window * trigger_ratio` afterwards: summarize the cleared history
       (`summarize_fallback`), when a model exists; otherwise the job says the fallback was skipped.
    """
    options: ClearOptions = ctx.options
    view = ctx.view
    calls = tool_call_names(ctx.branch)
    already = ctx.cleared_ids()
    candidates = [e for e in view.entries if is_tool_result(e) and e.id not in already]
    keep = max(options.keep_tool_uses, 0)
    # Fewer candidates than `keep`: none is cleared (a negative slice end would clear some).
    to_clear = candidates[: max(len(candidates) - keep, 0)]
    to_clear = [e for e in to_clear if tool_name_of(e, calls) not in options.exclude_tools]

    cleared: dict[str, str] = {}
    cleared_inputs: dict[str, list[str]] = {}
    reclaimed = 0
    for entry in to_clear:
        tokens = entry_tokens(entry)
        placeholder = cleared_placeholder(
            tool_name=tool_name_of(entry, calls),
            tokens=tokens,
            handle=entry.id if options.externalize else None,
            read_tool=options.read_result_tool_name,
        )
        cleared[entry.id] = placeholder
        reclaimed += tokens - count_message_tokens(placeholder)
        if options.clear_tool_inputs and entry.tool_call_id in calls:
            assistant_id = calls[entry.tool_call_id][0]
            cleared_inputs.setdefault(assistant_id, []).append(entry.tool_call_id)
    if cleared_inputs:
        by_id = {e.id: e for e in view.entries}
        for assistant_id, call_ids in cleared_inputs.items():
            assistant = by_id.get(assistant_id)
            for call in (assistant.tool_calls or []) if assistant else []:
                if isinstance(call, dict) and call.get("id") in call_ids:
                    reclaimed += count_message_tokens(None, [call]) - count_message_tokens(
                        None, [{**call, "arguments": {}}]
                    )
    if reclaimed < options.clear_at_least:
        cleared, cleared_inputs, reclaimed = {}, {}, 0

    tokens_before = history_tokens(view)
    after_entries = _cleared_view(view, cleared, cleared_inputs)
    summary_text = view.summary
    tokens_after = (count_message_tokens(summary_text) if summary_text else 0) + _kept_tokens(after_entries)
    first_kept = view.entries[0] if view.entries else None
    newest = ctx.compactions[-1] if ctx.compactions else None
    # A hierarchical tree stays in force under a clearing written after it.
    levels = (newest.event or {}).get("levels") if newest is not None and view.summary else None
    covered = set(cleared) | set(cleared_inputs)
    details: dict[str, Any] = {"reclaimed_tokens": reclaimed}
    # A carried summary keeps the version of the prompt that wrote it.
    prompt_version = str((newest.event or {}).get("prompt_version") or "") if newest and view.summary else ""

    fallback = options.summarize_fallback
    over = should_compact_tokens(tokens_after, options.context_window, options.trigger_ratio)
    if fallback is not False and over:
        if not model_available():
            ctx.notes.append("summarize fallback skipped: no language model is configured")
        else:
            fallback_options = fallback if isinstance(fallback, SummarizeOptions) else SummarizeOptions()
            cleared_history = CompactedHistory(summary=view.summary, entries=after_entries)
            summary = summarize_history(
                entries=after_entries,
                previous_summary=cleared_history.summary,
                branch=ctx.branch,
                options=fallback_options,
            )
            if summary is not None:
                kept = after_entries[summary.cut :]
                summary_text = summary.content
                first_kept = kept[0] if kept else None
                tokens_after = count_message_tokens(summary.content) + _kept_tokens(kept)
                covered |= summary.summarized_ids
                prompt_version = summary.prompt_version
                levels = None
                details.update(fallback="summarize", **summary.details())

    if not cleared and "fallback" not in details:
        return None
    note = f"[{len(cleared)} older tool results cleared; {_tokens_label(max(reclaimed, 0))} tokens reclaimed]"
    return CompactionPlan(
        strategy=CLEAR_TOOL_RESULTS,
        content=summary_text if "fallback" in details and summary_text else note,
        first_kept_entry_id=first_kept.id if first_kept else None,
        first_kept_seq=first_kept.seq if first_kept else None,
        summary=summary_text,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        cleared=cleared,
        cleared_inputs=cleared_inputs,
        prompt_version=prompt_version,
        levels=levels,
        covered_ids=covered,
        details=details,
    )


# --- custom ------------------------------------------------------------------------------------

CUSTOM_STRATEGIES: dict[str, Strategy] = {}


def register_compaction_strategy(name: str) -> Callable[[Strategy], Strategy]:
    """Register a Python callable as the custom strategy `name` (strategy "custom", option name)."""

    def register(fn: Strategy) -> Strategy:
        CUSTOM_STRATEGIES[name] = fn
        return fn

    return register


def custom(ctx: CompactionContext) -> CompactionPlan | None:
    options = dict(ctx.options)
    name = options.pop("name", None)
    if not isinstance(name, str) or name not in CUSTOM_STRATEGIES:
        raise DomainError(
            "unknown_strategy",
            f"No custom compaction strategy is registered as {name!r}.",
            field="name",
        )
    ctx.options = options
    return CUSTOM_STRATEGIES[name](ctx)


def hierarchical(ctx: CompactionContext) -> CompactionPlan | None:

    return hierarchical_plan(ctx)


STRATEGIES: dict[str, Strategy] = {
    SUMMARIZE: summarize_old_preserve_recent,
    CLEAR_TOOL_RESULTS: clear_old_tool_results,
    HIERARCHICAL: hierarchical,
    CUSTOM: custom,
}

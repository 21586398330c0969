"""What a compaction strategy is given (the context: thread, branch, view, options) and what it
returns (the plan of the compaction entry), the strategies' names and their options."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from memoryapp.compaction.history import CompactedHistory
from memoryapp.compaction.policy import (
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_KEEP_RECENT,
    DEFAULT_TRIGGER_RATIO,
)
from memoryapp.errors import DomainError
from memoryapp.models import Entry, Thread
from memoryapp.models.choices import EntryType
from memoryapp.prompts import DEFAULT_SUMMARY_TEMPLATE, SUMMARY_TEMPLATES

SUMMARIZE = "summarize-old-preserve-recent"
CLEAR_TOOL_RESULTS = "clear-old-tool-results"
HIERARCHICAL = "hierarchical"
CUSTOM = "custom"
STRATEGY_NAMES = (SUMMARIZE, CLEAR_TOOL_RESULTS, HIERARCHICAL, CUSTOM)


@dataclass(frozen=True)
class SummarizeOptions:
    preserve_recent_turns: int = DEFAULT_KEEP_RECENT
    # Recent user messages of the summarized window re-inserted verbatim after the summary.
    preserve_user_messages: int = 2
    # Characters of transcript the summarizer reads at most; the oldest are elided. 0 = no limit.
    summarizer_input_char_budget: int = 96_000
    summarizer_timeout: float | None = None
    # Added to the summary prompt (004 summaryPrompt): "Keep names, decisions and open questions."
    prompt: str = ""
    summary_max_tokens: int = 2000
    # 003 summarizerModel: the model the summary is asked of, on the configured provider
    # (None: the provider's own model, LLM_MODEL), so a small cheap model can summarize.
    summarizer_model: str | None = None
    # 003 templateName: the named summary prompt (memoryapp.prompts.SUMMARY_TEMPLATES).
    template_name: str = DEFAULT_SUMMARY_TEMPLATE


@dataclass(frozen=True)
class ClearOptions:
    keep_tool_uses: int = 3
    exclude_tools: tuple[str, ...] = ()
    # Clear only when at least this many tokens would be reclaimed.
    clear_at_least: int = 0
    # Blank the paired assistant tool call arguments too.
    clear_tool_inputs: bool = False
    # Name the handle the cleared result stays readable behind (GET /api/v1/tool-results/<handle>).
    externalize: bool = True
    read_result_tool_name: str | None = "read_result"
    # Summarize the cleared history when clearing did not get under the trigger; False = never.
    summarize_fallback: bool | SummarizeOptions = True
    context_window: int = DEFAULT_CONTEXT_WINDOW
    trigger_ratio: float = DEFAULT_TRIGGER_RATIO


@dataclass(frozen=True)
class HierarchicalOptions:
    keep_recent: int = 0
    # Newest tokens kept verbatim in whole turns; None keeps the newest `keep_recent` entries.
    keep_recent_tokens: int | None = 8000
    chapter_tokens: int = 4000
    chapter_concurrency: int = 1
    chapters_per_arc: int = 4
    arcs_per_saga: int = 4
    prompt: str = ""
    summarizer_timeout: float | None = None
    atoms_max_tokens: int = 4000
    # 004 summaryModel: the model the chapters are read by (None: the provider's own).
    summarizer_model: str | None = None


def _options(cls: type, given: dict[str, Any], *, field_prefix: str = "") -> Any:
    known = {f.name for f in fields(cls)}
    values: dict[str, Any] = {}
    for name, value in given.items():
        if name not in known:
            raise DomainError("unknown_option", f"{name} is not an option of this strategy.", field=field_prefix + name)
        if value is None and name not in ("summarizer_timeout", "read_result_tool_name", "keep_recent_tokens"):
            continue
        values[name] = value
    if "template_name" in values and values["template_name"] not in SUMMARY_TEMPLATES:
        raise DomainError(
            "unknown_template",
            f"template_name must be one of {', '.join(SUMMARY_TEMPLATES)}.",
            field=field_prefix + "template_name",
        )
    if values.get("summarizer_model") == "":
        values["summarizer_model"] = None
    if "exclude_tools" in values:
        values["exclude_tools"] = tuple(values["exclude_tools"] or ())
    fallback = values.get("summarize_fallback")
    if isinstance(fallback, dict):
        values["summarize_fallback"] = _options(SummarizeOptions, fallback, field_prefix="summarize_fallback.")
    try:
        return cls(**values)
    except TypeError as exc:  # pragma: no cover - the serializer checks types first
        raise DomainError("invalid_value", str(exc), field=field_prefix or None) from exc


def strategy_options(strategy: str, given: dict[str, Any]) -> Any:
    if strategy == SUMMARIZE:
        return _options(SummarizeOptions, given)
    if strategy == CLEAR_TOOL_RESULTS:
        return _options(ClearOptions, given)
    if strategy == HIERARCHICAL:
        return _options(HierarchicalOptions, given)
    return dict(given)


@dataclass
class CompactionContext:
    thread: Thread
    # The active branch: messages, tool results and compaction entries, oldest first.
    branch: list[Entry]
    # The branch as the model sees it now (earlier compactions applied).
    view: CompactedHistory
    options: Any
    # What the zero-model tier left out, said on the job run ("partial").
    notes: list[str] = field(default_factory=list)

    @property
    def compactions(self) -> list[Entry]:
        return [e for e in self.branch if e.type == EntryType.COMPACTION]

    def cleared_ids(self) -> set[str]:
        cleared: set[str] = set()
        for compaction in self.compactions:
            cleared.update((compaction.event or {}).get("cleared") or {})
        return cleared


@dataclass
class CompactionPlan:
    strategy: str
    # The compaction entry's content: the summary (heading first) or a short note for clearing.
    content: str
    first_kept_entry_id: str | None
    first_kept_seq: int | None
    summary: str | None
    tokens_before: int
    tokens_after: int
    cleared: dict[str, str] = field(default_factory=dict)
    cleared_inputs: dict[str, list[str]] = field(default_factory=dict)
    prompt_version: str = ""
    levels: dict[str, Any] | None = None
    # Entries the compaction stands on: re-checked (present, not redacted, on the branch) before writing.
    covered_ids: set[str] = field(default_factory=set)
    details: dict[str, Any] = field(default_factory=dict)

    def event(self) -> dict[str, Any]:
        event: dict[str, Any] = {
            "strategy": self.strategy,
            "first_kept_entry_id": self.first_kept_entry_id,
            "first_kept_seq": self.first_kept_seq,
            "summary": self.summary,
            "cleared": self.cleared,
            "cleared_inputs": self.cleared_inputs,
            "tokens_before": self.tokens_before,
            "tokens_after": self.tokens_after,
            "prompt_version": self.prompt_version,
        }
        if self.levels is not None:
            event["levels"] = self.levels
        event.update(self.details)
        return event


Strategy = Callable[[CompactionContext], CompactionPlan | None]

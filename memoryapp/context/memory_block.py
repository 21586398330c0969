"""The <memory_context> block of a context build (memoryapp.context.builder): its sections, their
lines (recalled turns, items and observations, dated in the build's time zone) and what they cost.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from memoryapp.consolidation.observations import Observation
from memoryapp.context.partitions import words_of
from memoryapp.search.indexing import speaker_of
from memoryapp.tokens import MESSAGE_OVERHEAD, count_tokens

RECALL_TEXT_CHARS = 1200
MEMORY_OPEN = "<memory_context>"
MEMORY_CLOSE = "</memory_context>"
HEADERS = {
    "facts": "Known facts:",
    "observations": "Observations:",
    "semantic": "Relevant context:",
    "graph": "Graph context:",
    "recall_entries": "Earlier in this conversation:",
    "recall_items": "From memory:",
}


class MemoryBlock:
    """Charges of the <memory_context> message: its wrapper goes to the first partition that
    opens it, each section header to the partition of its first line."""

    def __init__(self) -> None:
        self.open = False
        self.sections: set[str] = set()

    def wrapper_cost(self) -> int:
        return 0 if self.open else MESSAGE_OVERHEAD + count_tokens(MEMORY_OPEN + "\n") + count_tokens(MEMORY_CLOSE)

    def line_cost(self, section: str | None, line: str) -> int:
        cost = self.wrapper_cost() + count_tokens(line + "\n")
        if section is not None and section not in self.sections:
            cost += count_tokens("\n" + HEADERS[section] + "\n")
        return cost

    def take(self, section: str | None) -> None:
        self.open = True
        if section is not None:
            self.sections.add(section)


UTC = ZoneInfo("UTC")


def day_of(at: datetime | None, zone: ZoneInfo = UTC) -> str:
    """The day of `at` in the build's zone: a turn at 23:30 UTC in Lisbon's summer is the next day."""
    return at.astimezone(zone).date().isoformat() if at else "undated"


def recall_entry_line(hit: Any, zone: ZoneInfo = UTC) -> str:
    text = " ".join((hit.text or "").split())
    if len(text) > RECALL_TEXT_CHARS:
        text = text[:RECALL_TEXT_CHARS] + "…"
    who = speaker_of(role=hit.role, sender_name=hit.sender_name)
    return f"- [{day_of(hit.created_at, zone)}] {who}: {text}"


def recall_item_line(hit: Any, at: datetime, zone: ZoneInfo = UTC) -> str:
    line = f"- {hit.text}"
    if hit.valid_to is not None and hit.valid_to <= at:
        line += f" (held from {day_of(hit.valid_from, zone)} to {day_of(hit.valid_to, zone)})"
    return line


def recall_cost(before: tuple[bool, set[str]], blocks: list[tuple[str, str, str]]) -> int:
    """What the recall blocks cost, given the memory block as it was before recall."""
    memory = MemoryBlock()
    memory.open, memory.sections = before[0], set(before[1])
    cost = 0
    for section, line, _ in blocks:
        cost += memory.line_cost(section, line)
        memory.take(section)
    return cost


def memory_text(
    brief: str,
    fact_lines: list[str],
    recall_lines: list[tuple[str, str]],
    observation_lines: Sequence[str] = (),
    graph_lines: Sequence[str] = (),
    semantic_lines: Sequence[str] = (),
) -> str:
    parts: list[str] = []
    if brief:
        parts.append(brief)
    if fact_lines:
        parts.append("\n" + HEADERS["facts"] + "\n" + "\n".join(fact_lines))
    if observation_lines:
        parts.append("\n" + HEADERS["observations"] + "\n" + "\n".join(observation_lines))
    if semantic_lines:
        parts.append("\n" + HEADERS["semantic"] + "\n" + "\n".join(semantic_lines))
    if graph_lines:
        parts.append("\n" + HEADERS["graph"] + "\n" + "\n".join(graph_lines))
    for section in ("recall_entries", "recall_items"):
        lines = [line for s, line in recall_lines if s == section]
        if lines:
            parts.append("\n" + HEADERS[section] + "\n" + "\n".join(lines))
    if not parts:
        return ""
    body = "\n".join(parts).lstrip("\n")
    return f"{MEMORY_OPEN}\n{body}\n{MEMORY_CLOSE}"


def named_in(observation: Observation, said: str) -> bool:
    """Whether the input (its words, padded) names the entity: its name or another, as words of their own."""
    for name in [observation.name, *observation.aliases]:
        words = words_of(name)
        if words and f" {words} " in said:
            return True
    return False


def observation_line(observation: Observation) -> str:
    return f"- {observation.name}: {observation.text}"


def observation_sent(observation: Observation) -> dict[str, Any]:
    return {"entity_id": observation.entity_id, "name": observation.name, "path": observation.path}

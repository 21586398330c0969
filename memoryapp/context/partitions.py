"""Partitions of a built context and how the budget is split between them (004 "Partitions").

| partition | holds                                   | default                      |
| system    | the system prompt                       | required, sent whole         |
| pinned    | pinned texts                            | required                     |
| index     | the index text                          | required                     |
| summaries | the compaction summary                  | required                     |
| brief     | the brief text                          | required                     |
| facts     | facts (memory items of the scope)       | 15%                          |
| recall    | recalled turns and items (hybrid)       | 35% (60% for hybrid)         |
| recent    | history, selected by the strategy       | what the others leave        |
| final     | current_input, counted, not in messages | required, always counted     |
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from memoryapp.content import words_of
from memoryapp.errors import DomainError

PARTITIONS = ("system", "pinned", "index", "summaries", "brief", "facts", "recall", "recent", "final")
REQUIRED = ("system", "pinned", "index", "summaries", "brief", "final")
SHARED = ("facts", "recall", "recent")
FILL_ORDER = ("facts", "recall", "recent")
# From the most lasting to the least: a block repeating a kept block of an earlier partition
# is a duplicate.
LASTING_ORDER = ("system", "pinned", "index", "summaries", "brief", "facts", "recall", "recent")

DROP_REASONS = ("budget", "duplicate", "not-selected", "oversized")


def default_shares(strategy: str) -> dict[str, float]:
    recall = 0.6 if strategy == "hybrid" else 0.35
    return {"facts": 0.15, "recall": recall}


def partition_shares(strategy: str, overrides: Mapping[str, Any] | None) -> dict[str, float]:
    """The shares of facts, recall and recent: defaults merged with the request's overrides.

    Required partitions take no share (400); the shares may add up to 1 at most (400); recent
    gets what the others leave unless it is given a share of its own.
    """
    shares: dict[str, float] = dict(default_shares(strategy))
    for name, value in (overrides or {}).items():
        if name in REQUIRED:
            raise DomainError(
                "required_partition", f"The {name} partition is required: it takes no share.", field="partitions"
            )
        if name not in SHARED:
            raise DomainError("unknown_partition", f"There is no partition {name!r}.", field="partitions")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise DomainError("invalid_share", f"The share of {name} must be a number from 0 to 1.", field="partitions")
        shares[name] = float(value)
    given_recent = "recent" in (overrides or {})
    total = shares["facts"] + shares["recall"] + (shares["recent"] if given_recent else 0.0)
    if total > 1 + 1e-9:
        raise DomainError(
            "partition_shares_over_budget",
            f"The shares of facts, recall and recent add up to {total:g}: at most 1.",
            field="partitions",
        )
    if not given_recent:
        shares["recent"] = max(0.0, 1.0 - shares["facts"] - shares["recall"])
    return shares


def fit_in_order(available: int, shares: Mapping[str, float], needs: Mapping[str, int]) -> dict[str, int]:
    """How many tokens each shared partition may take.

    1. Each takes its share of `available`, no more than it needs.
    2. What that leaves goes to those still short of room, in fill order (facts, recall, recent).
    """
    available = max(0, available)
    room = {p: min(max(0, needs.get(p, 0)), math.floor(shares.get(p, 0.0) * available)) for p in FILL_ORDER}
    spare = available - sum(room.values())
    for p in FILL_ORDER:
        if spare <= 0:
            break
        extra = min(max(0, needs.get(p, 0)) - room[p], spare)
        if extra > 0:
            room[p] += extra
            spare -= extra
    return room


@dataclass
class DroppedBlock:
    partition: str
    reason: str
    tokens: int
    source_id: str

    def as_json(self) -> dict[str, Any]:
        return {"partition": self.partition, "reason": self.reason, "tokens": self.tokens, "source_id": self.source_id}


def held_in(text: str, kept: list[str]) -> bool:
    """Whether one of the kept texts (already `words_of`) holds `text` in full, word for word."""
    needle = words_of(text)
    if not needle:
        return False
    padded = f" {needle} "
    return any(padded in f" {hay} " for hay in kept)

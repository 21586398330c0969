"""The search's channels, as one registry: each finds entries or items its own way, best first.

A channel is a name, the kind of row it finds ("entry" or "item"), its weight for each kind of
question (memoryapp.search.query: temporal, aggregate, update, preference, general), the search
methods it takes part in, and a function from a `ChannelInput` to a ranked list of `ChannelHit`.
The selector (memoryapp.search.retrieval) runs the registered channels in order and fuses their
lists by weighted reciprocal rank (memoryapp.search.hybrid); `eval_retrieval` runs each one alone
to show what it is worth.

A channel never raises for a failed read it can do without: it returns [] and may add a note to
`errors`. A channel may read the lists of the channels that ran before it (`found`): the turns
reached through the evidence of the best items, for one, read the items found so far.

To add one: `register(Channel(...))` at import time of its module, and import that module at the
end of `memoryapp.search.channel_set` (whose `search_channels` the selector reads) so the selector
sees it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import QuerySet

from memoryapp.models import MemoryItem
from memoryapp.search.keyword import ChannelHit
from memoryapp.search.query import QueryAnalysis
from memoryapp.search.scope import EntryScope

ENTRY = "entry"
ITEM = "item"
QUERY_KINDS = ("temporal", "aggregate", "update", "preference", "general")
ALL_METHODS = frozenset({"keyword", "vector", "hybrid"})
HYBRID_ONLY = frozenset({"hybrid"})


@dataclass
class ChannelInput:
    """What every channel of one search reads."""

    agent_id: int
    scope: EntryScope  # the entries the search may see (one SQL condition)
    analysis: QueryAnalysis  # words, names, kind and named time of the question
    depth: int  # rows each channel returns at most
    items: QuerySet[MemoryItem] | None = None  # the items the search may see (None: no item kinds asked)
    no_items: bool = False  # the item scope is empty: item channels return [] without reading
    vector: list[float] | None = None  # the question's embedding (None: vectors are off or failed)
    # The embedding the vector channel ranks turns by: the question without the names that only
    # address a speaker of the conversation (memoryapp.search.speakers); `vector` when it names none.
    turn_vector: list[float] | None = None
    # Those speakers' names (lower-cased): the keyword channel counts them for a turn only as its
    # sender, not as words of its text (memoryapp.search.keyword.sender_only_terms).
    addressed: frozenset[str] = frozenset()
    min_similarity: float | None = None  # recall's cosine floor for vector channels
    anchor: datetime | None = None  # "now" for the question: relative times resolve against it
    time_zone: str = ""  # the thread's metadata.time_zone ("" = UTC)
    errors: list[dict[str, str]] = field(default_factory=list)
    # The lists of the channels that ran before, by (kind, channel name).
    found: dict[tuple[str, str], list[ChannelHit]] = field(default_factory=dict)
    # Anything a channel wants to share with later ones within this search (computed once).
    memo: dict[str, Any] = field(default_factory=dict)


ChannelFn = Callable[[ChannelInput], list[ChannelHit]]


@dataclass(frozen=True)
class Channel:
    name: str
    kind: str  # ENTRY | ITEM
    run: ChannelFn
    # The weight of the channel's list in the fusion, by kind of question; a kind not named takes
    # `default_weight`. A weight of 0 leaves the channel out for that kind of question.
    weights: Mapping[str, float] = field(default_factory=dict)
    default_weight: float = 1.0
    methods: frozenset[str] = HYBRID_ONLY  # the search methods that run it
    needs_vector: bool = False  # skipped when the question has no embedding
    uses_vector: bool = False  # ranks by the question's embedding when there is one (asks for it)
    # A boolean Django setting that switches the channel on ("": always on). A search may ask for a
    # channel by name (`channels=`, eval_retrieval's "that channel alone") whatever the setting says.
    setting: str = ""
    # A test without SQL of whether the question gives the channel anything to read (the time
    # channel: whether it names or asks for a time); False: the channel is not run (None: always run).
    applies: Callable[[ChannelInput], bool] | None = None

    def weight(self, query_kind: str) -> float:
        return float(self.weights.get(query_kind, self.default_weight))


_REGISTRY: dict[tuple[str, str], Channel] = {}


def register(channel: Channel) -> Channel:
    """Add (or replace, by kind and name) a channel; the registry keeps the order of first registration."""
    if channel.kind not in (ENTRY, ITEM):
        raise ValueError(f"a channel finds {ENTRY!r} or {ITEM!r} rows, not {channel.kind!r}")
    for query_kind in channel.weights:
        if query_kind not in QUERY_KINDS:
            raise ValueError(f"unknown kind of question {query_kind!r}: one of {', '.join(QUERY_KINDS)}")
    _REGISTRY[(channel.kind, channel.name)] = channel
    return channel


def unregister(kind: str, name: str) -> None:
    _REGISTRY.pop((kind, name), None)


def registered(kind: str | None = None) -> list[Channel]:
    """The channels in registration order (of one kind of row, when given). The built-in channels
    are registered when memoryapp.search.channel_set is imported: read them through its
    `search_channels`."""
    return [c for c in _REGISTRY.values() if kind is None or c.kind == kind]

"""The built-in channels, registered in the order the selector runs them.

Turns (entries): keyword (BM25 over the scope), vector (cosine, with recall's floor), then the
channels of their own modules (the time the question names, the entities it names). Items:
keyword and vector. A module that adds channels registers them when imported here.
"""

from __future__ import annotations

from importlib import import_module

from memoryapp.search.channels import ENTRY, ITEM, Channel, ChannelInput, register, registered
from memoryapp.search.keyword import ChannelHit, keyword_entries, keyword_items
from memoryapp.search.vector import vector_entries, vector_items

# The relative floor of a vector channel: with a floor asked for (recall's), a hit also needs this
# share of the best cosine (004: "a cosine of 0.45 or more and 0.6 of the best").
RELATIVE_FLOOR = 0.6
# Words weigh a little more than vectors (tuned on two LoCoMo conversations only, conv-26 and
# conv-30; see memoryapp.search.retrieval).
KEYWORD_WEIGHT = 1.2
VECTOR_WEIGHT = 1.0


def floored(hits: list[ChannelHit], min_similarity: float | None) -> list[ChannelHit]:
    if min_similarity is None or not hits:
        return hits
    floor = max(min_similarity, RELATIVE_FLOOR * hits[0].score)
    return [h for h in hits if h.score >= floor]


def _keyword_entries(ci: ChannelInput) -> list[ChannelHit]:
    return keyword_entries(scope=ci.scope, analysis=ci.analysis, limit=ci.depth, addressed=ci.addressed)


def _vector_entries(ci: ChannelInput) -> list[ChannelHit]:
    assert ci.turn_vector is not None
    return floored(
        vector_entries(scope=ci.scope, vector=ci.turn_vector, limit=ci.depth, memo=ci.memo), ci.min_similarity
    )


def _keyword_items(ci: ChannelInput) -> list[ChannelHit]:
    if ci.items is None or ci.no_items:
        return []
    return keyword_items(items=ci.items, agent_id=ci.agent_id, analysis=ci.analysis, limit=ci.depth)


def _vector_items(ci: ChannelInput) -> list[ChannelHit]:
    if ci.items is None or ci.no_items:
        return []
    assert ci.vector is not None
    return floored(vector_items(items=ci.items, vector=ci.vector, limit=ci.depth), ci.min_similarity)


register(
    Channel(
        name="keyword",
        kind=ENTRY,
        run=_keyword_entries,
        default_weight=KEYWORD_WEIGHT,
        methods=frozenset({"keyword", "hybrid"}),
    )
)
register(
    Channel(
        name="vector",
        kind=ENTRY,
        run=_vector_entries,
        default_weight=VECTOR_WEIGHT,
        methods=frozenset({"vector", "hybrid"}),
        needs_vector=True,
    )
)
register(
    Channel(
        name="keyword",
        kind=ITEM,
        run=_keyword_items,
        default_weight=KEYWORD_WEIGHT,
        methods=frozenset({"keyword", "hybrid"}),
    )
)
register(
    Channel(
        name="vector",
        kind=ITEM,
        run=_vector_items,
        default_weight=VECTOR_WEIGHT,
        methods=frozenset({"vector", "hybrid"}),
        needs_vector=True,
    )
)


def search_channels(kind: str | None = None) -> list[Channel]:
    """Every registered channel (of one kind of row, when given), in the order the selector runs them."""
    return registered(kind)


def channel_names(kind: str) -> list[str]:
    return [c.name for c in search_channels(kind)]


# Channels of their own modules register when imported: after the built-in ones, in this order
# (a channel may read the lists of those before it). Add a module here to plug its channels in.
CHANNEL_MODULES = (
    "memoryapp.search.turn_time",  # turns of the time the question names
    "memoryapp.search.turn_entities",  # turns of the entities it names
    "memoryapp.search.graph_channels",  # items by entities, the walk, evidence
)
for _module in CHANNEL_MODULES:
    import_module(_module)

"""Recall of facts (002 `MemoryOptions.recall`): the N facts a context holds, the best matches for
the turn's input, then the newest.

1. Relevance to the input, 0..1: the share of the input's words (common words left out) that the
   fact's line holds, or the cosine between the input's vector and the fact's (002
   `Memory.semantic`), whichever is better. A fact with no vector yet counts by its words only;
   a failing embedder leaves the words alone (said in `errors`).
2. Best first, then the newest (when it was recorded), then the item id: the same input and the
   same facts always give the same N.
3. Without an input, the N newest.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db.models import F
from pgvector.django import CosineDistance

from memoryapp.items.facts import FACT_MIN_SIMILARITY, significant_words
from memoryapp.items.selectors import ContextFact
from memoryapp.models import Agent, MemoryItem
from memoryapp.search.embedders import EmbedderError, embed_query
from memoryapp.search.retrieval import vector_space_ok


def facts_recalled(
    *, agent: Agent, facts: Sequence[ContextFact], text: str, count: int
) -> tuple[list[ContextFact], list[ContextFact], str]:
    """(the `count` best facts in their rank, the others, why meaning was not used or "")."""
    if not facts:
        return [], [], ""
    ids = [fact.item_id for fact in facts]
    rows = MemoryItem.objects.filter(agent=agent, pk__in=ids)
    error = ""
    cosine: dict[str, float] = {}
    space_ok, space_message = vector_space_ok()
    if text.strip() and not space_ok:
        error = f"facts recalled by their words only: {space_message}"[:300]
    elif text.strip():
        try:
            vector = embed_query(text)
        except EmbedderError as exc:
            error = f"facts recalled by their words only: {exc}"[:300]
        else:
            near = rows.filter(embedding__isnull=False).annotate(distance=CosineDistance(F("embedding"), vector))
            cosine = {pk: 1.0 - float(d) for pk, d in near.values_list("id", "distance")}
    recorded = dict(rows.values_list("id", "recorded_at"))
    words = significant_words(text)
    relevance: dict[str, float] = {}
    for fact in facts:
        by_words = 0.0
        if words:
            held = set(significant_words(fact.text))
            by_words = sum(1 for w in words if w in held) / len(words)
        by_meaning = cosine.get(fact.item_id, 0.0)
        relevance[fact.item_id] = max(by_words, by_meaning if by_meaning >= FACT_MIN_SIMILARITY else 0.0)

    def rank(fact: ContextFact) -> tuple[float, float, str]:
        at = recorded.get(fact.item_id)
        return (-relevance[fact.item_id], -(at.timestamp() if at else 0.0), fact.item_id)

    ordered = sorted(facts, key=rank)
    return ordered[:count], ordered[count:], error

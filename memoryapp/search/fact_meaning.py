"""Facts found by meaning (002 `Memory.semantic`): the vector channel over an agent's facts.

`memoryapp.items.facts.fact_search` asks it through the finder memoryapp.apps provides (items sit
below search). The facts it is given are already the agent's, of one namespace and those inside
it: the distance is ordered within that filter (memoryapp.search.vector.vector_items).
"""

from __future__ import annotations

from django.db.models import QuerySet

from memoryapp.models import MemoryItem
from memoryapp.search.embedders import EmbedderError, embed_query
from memoryapp.search.retrieval import vector_space_ok
from memoryapp.search.vector import vector_items


def facts_nearest(facts: QuerySet[MemoryItem], text: str, limit: int) -> list[tuple[str, float]]:
    """The `limit` facts whose vector is nearest the text's: (item id, cosine), best first. Raises
    EmbedderError when the query cannot be embedded
    or the stored vectors are another model's."""
    ok, message = vector_space_ok()
    if not ok:  # the stored vectors are another model's: the words answer alone
        raise EmbedderError(message)
    vector = embed_query(text)
    return [(hit.id, hit.score) for hit in vector_items(items=facts, vector=vector, limit=limit)]

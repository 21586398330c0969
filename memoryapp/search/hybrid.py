"""Fusing the channels: weighted reciprocal rank fusion, neighbouring turns, then MMR.

1. RRF: each channel's list gives a row weight / (RRF_K + rank); a row found by both channels
   adds both, so agreement between words and meaning rises to the top.
2. Neighbours: a turn that answers or is answered by a hit is often the evidence itself ("Yes,
   last May!"), so each of the best entry hits pulls the turns next to it in its thread with a
   decayed share of its score (and a turn next to two hits gets both shares).
3. MMR: the final order trades relevance against the word overlap with what is already chosen,
   so ten near-copies of one turn do not fill the page.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from memoryapp.search.keyword import ChannelHit
from memoryapp.search.query import STOP_WORDS

RRF_K = 60


@dataclass
class Fused:
    kind: str  # "entry" | "item"
    id: str
    score: float = 0.0
    channels: list[str] = field(default_factory=list)


def rrf(ranked: Iterable[tuple[str, str, list[ChannelHit], float]], *, k: int = RRF_K) -> dict[tuple[str, str], Fused]:
    """`ranked` holds (kind, channel, hits best first, weight) lists; returns fused rows by (kind, id)."""
    fused: dict[tuple[str, str], Fused] = {}
    for kind, channel, hits, weight in ranked:
        for rank, hit in enumerate(hits, start=1):
            row = fused.setdefault((kind, hit.id), Fused(kind=kind, id=hit.id))
            row.score += weight / (k + rank)
            if channel not in row.channels:
                row.channels.append(channel)
    return fused


_WORD = re.compile(r"[^\W_]+")  # letters and digits of any script


def _words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS and len(w) > 1)


def pool_size(limit: int) -> int:
    """How many of the best rows MMR chooses from: a few more than the page, never 3x a big page."""
    return limit + max(10, min(limit, 30))


def mmr(rows: list[Fused], texts: dict[tuple[str, str], str], *, limit: int, lambda_: float = 0.8) -> list[Fused]:
    """Greedy maximal marginal relevance with word-set Jaccard similarity (no vectors needed).

    Each candidate keeps its highest overlap with what was chosen so far, updated only against
    the row chosen last: limit x pool comparisons, not limit^2 x pool.
    """
    if len(rows) <= 1:
        return rows[:limit]
    best = max(r.score for r in rows) or 1.0
    # Only the best few times `limit` can reach the page: the rest would cost time for nothing.
    pool = sorted(rows, key=lambda r: -r.score)[: pool_size(limit)]
    words = [_words(texts.get((r.kind, r.id), "")) for r in pool]
    overlap = [0.0] * len(pool)
    left = list(range(len(pool)))
    chosen: list[Fused] = []
    while left and len(chosen) < limit:
        pick = left[0]
        pick_value = float("-inf")
        for i in left:
            value = lambda_ * (pool[i].score / best) - (1 - lambda_) * overlap[i]
            if value > pick_value:
                pick, pick_value = i, value
        left.remove(pick)
        chosen.append(pool[pick])
        mine = words[pick]
        if not mine:
            continue
        for i in left:
            theirs = words[i]
            if theirs:
                shared = len(mine & theirs)
                if shared:
                    similarity = shared / (len(mine) + len(theirs) - shared)
                    if similarity > overlap[i]:
                        overlap[i] = similarity
    return chosen

"""The speakers of a conversation the question names, and what their names in others' turns mean.

In a conversation of two, the name of one speaker in the other's turn is nearly always the person
addressed ("Thanks, Melanie!", "Hey Caroline, guess what"), not what the turn is about. A question
naming one of them ("What does Melanie paint?") should not find the other's talk through those
vocatives: in the rerank by the share of the question's words (memoryapp.search.retrieval) the
name counts for a turn only when its sender is that person. Measured on LoCoMo's dev file: hybrid
R@10 75.0 -> 76.1, every category up. The keyword channel holds the same rule
(memoryapp.search.keyword.sender_only_terms): the name matches the turns its speaker sent, not the
words of the other's turns (hybrid R@10 80.9 -> 81.6, no category lower). In a
group chat a speaker's name in another's turn is as often about them ("Ben said he'd come"): there
it counts as any other word.

The same vocatives bend the question's embedding: "What activities does Melanie do?" lies close to
every turn of the other speaker that says "Melanie" to her, whatever it is about. The vector channel
ranks turns by the vector of the question without the names of its addressed speakers
(`without_addressed_names`: "What activities does do?"), which keeps what the question asks about;
the other channels keep the whole question's vector (an item names its subject, not whom it talks
to; the time and entity channels read a narrow set of turns already, where the name helps).
Measured on LoCoMo's dev file (see docs/recall-and-context.md).
"""

from __future__ import annotations

import re
import threading
import time
from typing import Any

from django.db import connection

from governance.crypto.blind import text_hashes
from governance.crypto.envelope import blind_key
from governance.crypto.keyring import encryption_enabled
from memoryapp.search.query import QueryAnalysis
from memoryapp.search.scope import EntryScope

_SENDERS_TTL = 60.0
_senders_cache: dict[tuple[Any, ...], tuple[float, frozenset[Any]]] = {}
_senders_lock = threading.Lock()


def senders_of(scope: EntryScope) -> frozenset[str]:
    """The lower-cased senders of the scope's turns (cached a minute per scope); none with encryption
    on, where the names are sealed (`sender_hashes_of` tells them apart then)."""
    if encryption_enabled():
        return frozenset()
    return _distinct_cached(scope, "senders", "lower(e.sender_name)", "e.sender_name <> ''", str)


def sender_hashes_of(scope: EntryScope) -> frozenset[Any]:
    """With encryption on, the senders of the scope's turns as the blind index of their names (its
    keyed word hashes, `Entry.sender_name_hashes`): the names are sealed. Cached as `senders_of`."""
    return _distinct_cached(scope, "sender hashes", "e.sender_name_hashes", "e.sender_name_hashes IS NOT NULL", tuple)


def _distinct_cached(scope: EntryScope, kind: str, column: str, present: str, convert: Any) -> frozenset[Any]:
    """The distinct non-empty values of `column` over the scope's turns (at most 1,000), cached a
    minute per scope and kind."""
    key = (kind, *scope.cache_key)
    now = time.monotonic()
    with _senders_lock:
        cached = _senders_cache.get(key)
        if cached and now - cached[0] < _SENDERS_TTL:
            return cached[1]
    where, params = scope.where("e")
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT DISTINCT {column} FROM memoryapp_entry e WHERE {where} AND {present} LIMIT 1000", params
        )
        values = frozenset(convert(r[0]) for r in cursor.fetchall() if r[0])
    with _senders_lock:
        if len(_senders_cache) > 10_000:
            _senders_cache.clear()
        _senders_cache[key] = (now, values)
    return values


def _addressed_blind(scope: EntryScope, analysis: QueryAnalysis) -> frozenset[str]:
    """addressed_speakers with encryption on: a name of the question is a sender's when its keyed
    hash is the whole blind index of that sender's name (a one-word name, as `senders_of` compares
    the whole lower-cased name)."""
    senders = sender_hashes_of(scope)
    if len(senders) != 2:
        return frozenset()
    key = blind_key(agent_id=scope.agent_id)
    return frozenset(name for name in analysis.names if tuple(text_hashes(name, key=key)) in senders)


def addressed_speakers(scope: EntryScope, analysis: QueryAnalysis) -> frozenset[str]:
    """The speakers the question names whose name, in the other speaker's turns, only addresses
    them: those of a conversation of exactly two senders (see the module's doc)."""
    if not analysis.names:
        return frozenset()
    if encryption_enabled():
        return _addressed_blind(scope, analysis)
    senders = senders_of(scope)
    if len(senders) != 2:
        return frozenset()
    return frozenset(analysis.names) & senders


def without_addressed_names(text: str, speakers: frozenset[str]) -> str:
    """The text without the names of `speakers` (whole words, a possessive "'s" with them), spaces
    tidied; the text as it is when nothing would be left."""
    if not speakers:
        return text
    names = "|".join(re.escape(name) for name in sorted(speakers, key=len, reverse=True))
    stripped = re.sub(rf"\b(?:{names})(?:['\u2019]s)?\b", " ", text, flags=re.IGNORECASE)
    stripped = " ".join(stripped.split())
    return stripped if re.search(r"\w", stripped) else text

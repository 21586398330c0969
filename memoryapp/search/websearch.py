"""Words a person types in a search box, over the blind index: the admin's entry search with
encryption on, where the plaintext full-text column is empty.

The syntax is the one the plaintext search reads (PostgreSQL's `websearch_to_tsquery`): words
must all be held, `"a phrase"` holds all its words, `-word` must not be held, `or` between terms
takes either side. The blind index keeps which words a row holds, not where, so a phrase finds
the rows holding its words in any order; and its light stemmer is not PostgreSQL's (governance.crypto.blind).

Each agent hashes words under a key of its own: the filter is one branch per agent that has a
blind-index key, each with that agent's hashes of the words.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from django.db.models import Q

from governance.crypto.blind import text_words, word_hash
from governance.crypto.envelope import blind_keys_of_agents

# A quoted phrase (the closing quote may be missing), or a run of anything but spaces and quotes;
# either may be negated by a leading minus.
_TOKEN = re.compile(r'(-?)"([^"]*)"?|(-?)([^\s"]+)')
# At most this many terms of a typed search count, and this many words in all (a phrase is a term
# of many words): a search box, not a document; the filter holds them once per agent.
MAX_TYPED_TERMS = 32
MAX_TYPED_WORDS = 64


@dataclass(frozen=True)
class Term:
    words: tuple[str, ...]  # normalised as the blind index normalises (several for a phrase)
    negated: bool


def typed_groups(text: str) -> list[list[Term]]:
    """The alternatives of a typed search (split at `or`), each the terms all of which must hold."""
    groups: list[list[Term]] = [[]]
    count = 0
    words_left = MAX_TYPED_WORDS
    for match in _TOKEN.finditer(text):
        negated = bool(match.group(1) or match.group(3))
        typed = match.group(2) if match.group(2) is not None else match.group(4)
        if match.group(4) is not None and not negated and typed.lower() == "or":
            if groups[-1]:
                groups.append([])
            continue
        words = tuple(text_words(typed))[:words_left]
        if words and count < MAX_TYPED_TERMS:
            groups[-1].append(Term(words=words, negated=negated))
            count += 1
            words_left -= len(words)
    return [group for group in groups if group]


def _group_q(group: list[Term], *, key: bytes, keys: list[bytes]) -> Q:
    """The rows hashed under `key` that hold what `group` asks for. A word it must not hold is
    asked under each of `keys` (a row hashed under another key holds none of `key`'s hashes: a
    group of negated words alone would match it otherwise)."""
    held = sorted({word_hash(w, key=key) for term in group if not term.negated for w in term.words})
    q = Q(keyword_hashes__contains=held) if held else Q(keyword_hashes__isnull=False)
    for term in group:
        if term.negated:
            for other in keys:
                q &= ~Q(keyword_hashes__contains=[word_hash(w, key=other) for w in term.words])
    return q


def entries_typed_match(text: str) -> Q:
    """A filter of Entry: the entries whose blind index holds what `text` asks for (see the module
    doc), across every agent; nothing when the text holds no word."""
    groups = typed_groups(text)
    found = Q(pk__in=[])
    if not groups:
        return found
    # An agent's words under each of its blind keys (one, but while a rotation with new keys walks
    # the rows: a row not reached yet holds hashes under the retired one).
    for agent_id, keys in blind_keys_of_agents().items():
        either = Q(pk__in=[])
        for group in groups:
            for key in keys:
                either |= _group_q(group, key=key, keys=keys)
        found |= Q(agent_id=agent_id) & either
    return found

"""The blind index: keyword search without plaintext in the database.

Each row keeps the set of keyed hashes of its normalised words (HMAC-SHA256 under the agent's
blind-index key, the first 8 bytes as a bigint); a query hashes its words the same way and asks
for rows holding them (a GIN index over the bigint array). Someone holding only the database sees
which rows share a word (within one agent), how many distinct words a row has, and never the
words themselves.

Normalisation, the same for rows and queries: Unicode NFKC, case folded, split into runs of
letters and digits, a light English suffix stripping (plural s, -ies, -ing, -ed, 's) so "cats"
finds "cat". Postgres' own stemmer is not used: it would need the plaintext in the database.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import itertools
import re
import unicodedata

_WORD = re.compile(r"[^\W_]+")
# Hash at most this many distinct words of one row (a large tool result is indexed by its first ones).
MAX_WORDS = 4000


@functools.lru_cache(maxsize=65536)
def word_stem(word: str) -> str:
    """A light, deterministic suffix stripping; the same on both sides is all that matters."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 5 and word.endswith("ing"):
        return word[:-3]
    if len(word) > 4 and word.endswith("ed") and not word.endswith("eed"):
        return word[:-2]
    if len(word) > 3 and word.endswith("es") and word[-3] in "sxz":
        return word[:-2]
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


def text_words(text: str) -> list[str]:
    """The normalised words of a text, each once, in order of first appearance (the first
    MAX_WORDS of them). One pass in C (findall, map, dict.fromkeys): a word-by-word loop costs twice
    as much, and an entry is at most 1 MB (memoryapp.threads.validation), so the whole text is split."""
    folded = text.lower() if text.isascii() else unicodedata.normalize("NFKC", text).casefold()
    words = dict.fromkeys(map(word_stem, _WORD.findall(folded)))
    return list(words) if len(words) <= MAX_WORDS else list(itertools.islice(words, MAX_WORDS))


class WordHasher:
    """HMAC-SHA256 under one key, the first 8 bytes as a signed bigint (RFC 2104, the same bytes as
    `hmac.digest(key, word, "sha256")`): the two padded key blocks are hashed once, and each word
    costs two copies of those states and two short hashes, about half of a one-shot HMAC, which
    sets the key up again for every word."""

    _BLOCK = 64  # SHA-256's block size

    def __init__(self, key: bytes) -> None:
        if len(key) > self._BLOCK:
            key = hashlib.sha256(key).digest()
        block = key.ljust(self._BLOCK, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))

    def __call__(self, word: str) -> int:
        return self.many([word])[0]

    def many(self, words: list[str]) -> list[int]:
        inner_start, outer_start, hashes = self._inner, self._outer, []
        for word in words:
            inner = inner_start.copy()
            inner.update(word.encode("utf-8"))
            outer = outer_start.copy()
            outer.update(inner.digest())
            hashes.append(int.from_bytes(outer.digest()[:8], "big", signed=True))
        return hashes


@functools.lru_cache(maxsize=1024)
def word_hasher(key: bytes) -> WordHasher:
    """The hasher of a blind-index key, made once per key (cleared with the data keys' caches)."""
    return WordHasher(key)


def word_hash(word: str, *, key: bytes) -> int:
    return word_hasher(key)(word)


def text_hashes(text: str, *, key: bytes) -> list[int]:
    return word_hasher(key).many(text_words(text))


EQUALITY_PREFIX = "bh:"


def equality_hash(text: str, *, key: bytes) -> str:
    """A keyed hash standing for a whole (already normalised) value, for equality and uniqueness in
    the database: `bh:` + the hex of its HMAC-SHA256. Equal values of one agent hash the same; the
    value cannot be read back, nor confirmed by someone without the key."""
    return EQUALITY_PREFIX + hmac.digest(key, text.encode("utf-8"), "sha256").hex()


def term_hash(term: str, *, key: bytes) -> int | None:
    """The hash of a query term (already a lower-case word), None when it normalises to nothing."""
    words = text_words(term)
    return word_hash(words[0], key=key) if words else None

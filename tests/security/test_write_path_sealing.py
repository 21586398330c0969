"""The write path's sealing: a batch seals each row under its own owner's key, as save() would, and
the blind index hashes words exactly as before (rows indexed earlier still match new queries)."""

from __future__ import annotations

import hmac

from governance.crypto.blind import MAX_WORDS, WordHasher, text_hashes, text_words, word_hash


def _one_shot(word: str, key: bytes) -> int:
    """The blind index's hash as rows written before were indexed: a one-shot HMAC-SHA256."""
    return int.from_bytes(hmac.digest(key, word.encode("utf-8"), "sha256")[:8], "big", signed=True)


def test_word_hashes_are_the_one_shot_hmac_for_every_key_length() -> None:
    words = ["cat", "zanzibarquill", "naïve", "", "x" * 300]
    for key in (b"", b"k", bytes(range(32)), bytes(range(64)), bytes(range(65)), bytes(200)):
        hasher = WordHasher(key)
        assert hasher.many(words) == [_one_shot(w, key) for w in words]
        assert word_hash("cat", key=key) == _one_shot("cat", key)


def test_text_hashes_of_a_text_are_its_words_one_shot_hmacs() -> None:
    key = bytes(range(32))
    text = "Cats and the cat's RUNNING shoes; the Café ﬁle, ΣΊΣΥΦΟΣ studies"
    assert text_words(text) == ["cat", "and", "the", "s", "runn", "shoe", "café", "file", "σίσυφοσ", "study"]
    assert text_hashes(text, key=key) == [_one_shot(w, key) for w in text_words(text)]
    assert text_words("?! --") == []


def test_text_words_keeps_the_first_max_words_distinct_words_in_order() -> None:
    words = [f"w{i}x" for i in range(MAX_WORDS + 100)]
    text = " ".join(words[:10] + words)  # the first ten twice: counted once
    assert text_words(text) == words[:MAX_WORDS]

"""The write path's sealing: a batch seals each row under its own owner's key, as save() would, and
the blind index hashes words exactly as before (rows indexed earlier still match new queries)."""

from __future__ import annotations

import hmac
from typing import Any

from django.db import connection

from governance.crypto.blind import MAX_WORDS, WordHasher, text_hashes, text_words, word_hash
from governance.crypto.envelope import blind_key, data_key_for
from governance.crypto.fields import BatchSealer, text_open, value_aad
from governance.crypto.sealing import is_sealed, sealed_key_id
from memoryapp.models import Entry, Thread
from memoryapp.threads.services import entry_add, thread_append
from tests.kit.factories import AgentFactory, ThreadFactory


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


def _unsaved(thread: Thread, text: str) -> Entry:
    return Entry(thread=thread, agent_id=thread.agent_id, role="user", content=text, text=text)


def test_a_batch_spanning_owners_seals_each_row_under_its_own_owners_key(encrypted: Any, db: None) -> None:
    agent, other = AgentFactory(), AgentFactory()
    ana = ThreadFactory(agent=agent, external_id="t-ana", user_id="u-ana")
    bo = ThreadFactory(agent=agent, external_id="t-bo", user_id="u-bo")
    nobody = ThreadFactory(agent=agent, external_id="t-none", user_id="")
    elsewhere = ThreadFactory(agent=other, external_id="t-ana", user_id="u-ana")
    threads = [ana, bo, ana, nobody, elsewhere, bo]
    entries = [_unsaved(t, f"note {i} about the quokkaparade") for i, t in enumerate(threads)]
    fields = [Entry._meta.get_field(name) for name in ("content", "text", "tool_calls", "keyword_hashes")]

    sealer = BatchSealer(fields)
    rows = [sealer.row(e) for e in entries]

    for entry, thread, (content, text, tool_calls, hashes) in zip(entries, threads, rows, strict=True):
        key_id = data_key_for(agent_id=thread.agent_id, user_id=thread.user_id).id
        assert sealed_key_id(content) == sealed_key_id(text) == key_id
        assert text_open(text, aad=value_aad("memoryapp_entry", "text")) == entry.text
        assert text_open(content, aad=value_aad("memoryapp_entry", "content")) == f'"{entry.text}"'
        assert tool_calls is None
        assert hashes == text_hashes(entry.text, key=blind_key(agent_id=thread.agent_id))
        # What save() would store: the same key, the same index.
        assert sealed_key_id(fields[1].pre_save(entry, True)) == key_id
        assert fields[3].pre_save(entry, True) == hashes
    assert len({sealed_key_id(row[1]) for row in rows}) == 4
    assert rows[0][3] != rows[4][3]  # the same words hash differently for another agent

    # A value sealed already, or no value, is stored as it is; an empty text has no index.
    sealed, empty = _unsaved(ana, ""), _unsaved(ana, "")
    sealed.text = rows[0][1]
    assert sealer.row(sealed)[1] == rows[0][1]
    assert sealer.row(empty)[1:] == ["", None, None]


def test_a_batch_append_stores_what_single_saves_store(encrypted: Any, db: None) -> None:
    agent = AgentFactory()
    thread = ThreadFactory(agent=agent, external_id="t-1", user_id="u-ana")
    batch = [
        {"role": "user", "content": "Plumbago vortex notes for the Marmalade Fjord"},
        {"role": "user", "content": "?!"},
        {
            "role": "assistant",
            "content": "Looking",
            "tool_calls": [{"id": "call-1", "name": "lookup", "arguments": {"q": "quokkaparade"}}],
        },
        {"type": "tool_result", "content": "tangerinecipher found", "tool_call_id": "call-1"},
    ]
    _, written = thread_append(agent=agent, external_id="t-1", entries=batch)
    single = entry_add(thread=thread, role="user", content="?!")

    key_id = data_key_for(agent_id=agent.pk, user_id="u-ana").id
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, text, content #>> '{}', tool_calls #>> '{}', keyword_hashes FROM memoryapp_entry"
            " WHERE thread_id = %s ORDER BY seq",
            [thread.pk],
        )
        stored = cursor.fetchall()
    assert [row[0] for row in stored] == [*(e.id for e in written), single.id]
    texts = [e.text for e in (*written, single)]
    assert texts[1] == texts[4] == "?!" and "quokkaparade" in texts[2]
    for (_, text, content, tool_calls, hashes), plain in zip(stored, texts, strict=True):
        assert sealed_key_id(text) == sealed_key_id(content) == key_id
        assert text_open(text, aad=value_aad("memoryapp_entry", "text")) == plain
        assert hashes == text_hashes(plain, key=blind_key(agent_id=agent.pk))
        assert tool_calls is None or sealed_key_id(tool_calls) == key_id
    assert stored[1][4] == stored[4][4] == []  # no words: an empty index from the COPY as from save()
    assert is_sealed(stored[2][3])
    assert [e.content for e in Entry.objects.filter(thread=thread).order_by("seq")] == [
        *(b["content"] for b in batch),
        "?!",
    ]

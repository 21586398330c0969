"""A branch's entries are loaded from their rows without Model.__init__
(memoryapp.threads.selectors._entries_read): the same instances as `Entry.objects.raw` gives, the
sealed fields opened and the JSON parsed, the heavy fields deferred."""

from __future__ import annotations

from typing import Any

import pytest

from memoryapp.models import Entry
from memoryapp.threads.branch import branch_rows_sql
from memoryapp.threads.columns import ENTRY_COLUMNS
from memoryapp.threads.selectors import path_after, path_entries
from memoryapp.threads.services import thread_append
from tests.kit.crypto import encrypted  # noqa: F401  (a fixture)
from tests.kit.factories import ThreadFactory, tool_round


def _as_raw(thread: Any) -> list[Entry]:
    sql = branch_rows_sql(columns=ENTRY_COLUMNS, types=False, limit=False)
    return list(Entry.objects.raw(sql, {"start": thread.active_leaf_id, "thread": thread.pk, "types": None}))


def _same(read: list[Entry], raw: list[Entry]) -> None:
    assert [e.pk for e in read] == [e.pk for e in raw] and read
    for mine, theirs in zip(read, raw, strict=True):
        assert {k: v for k, v in mine.__dict__.items() if k != "_state"} == {
            k: v for k, v in theirs.__dict__.items() if k != "_state"
        }
        assert (mine._state.adding, mine._state.db) == (theirs._state.adding, theirs._state.db) == (False, "default")
        assert mine.get_deferred_fields() == theirs.get_deferred_fields() and "embedding" in mine.get_deferred_fields()


def _thread(alice: Any) -> Any:
    thread = ThreadFactory(agent=alice.agent, external_id="t-read", turns=[("user", "Rome at eight")])
    tool_round(thread, 1)
    thread_append(
        agent=alice.agent,
        external_id="t-read",
        entries=[{"role": "assistant", "content": "Then the Forum", "metadata": {"k": [1, "é"]}, "sender": "guide"}],
    )
    thread.refresh_from_db()
    return thread


@pytest.mark.django_db
def test_a_branch_is_read_as_raw_loads_it(alice: Any) -> None:
    thread = _thread(alice)
    _same(path_entries(thread=thread, types=None), _as_raw(thread))
    _same(path_after(thread=thread, leaf_id=thread.active_leaf_id, after_seq=0, limit=100), _as_raw(thread))
    newest = path_entries(thread=thread, types=None, limit=2)
    assert [e.pk for e in newest] == [e.pk for e in _as_raw(thread)[-2:]]
    assert newest[-1].metadata == {"k": [1, "é"]} and newest[-1].thread_id == thread.pk


@pytest.mark.django_db
def test_a_sealed_branch_is_read_opened(encrypted: Any, alice: Any) -> None:  # noqa: F811
    thread = _thread(alice)
    read = path_entries(thread=thread, types=None)
    _same(read, _as_raw(thread))
    assert read[0].content == "Rome at eight" and read[-1].metadata == {"k": [1, "é"]}

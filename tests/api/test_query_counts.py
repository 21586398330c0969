"""What the agent path costs in queries, pinned through the API against the real database (issue 26).

Each figure is today's count: a change that adds a query to an append, a path read, a search or a
context build fails here, and must lower or raise the figure with its reason. The fixture's first
request pays what a key pays once a minute (its last-used stamp) and looks the key up (then kept in
the process, memoryapp.agents.keycache), so the pinned requests are steady ones, as under load. Counts are taken inside the test's transaction: every atomic block of the
request is a SAVEPOINT/RELEASE pair here (2 queries) that a served request does not send.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models.sql import compiler

from memoryapp.agents.limits import limits_breaker_reset
from memoryapp.events import webhooks
from memoryapp.models import Thread
from tests.kit.api import Caller, answered, build_context, post_entries, post_entry
from tests.kit.factories import ThreadFactory
from tests.kit.recall import embedded

TURNS = [
    ("user", "I adopted a puppy named Rex last May"),
    ("assistant", "How lovely! What breed is Rex?"),
    ("user", "A golden retriever, he loves swimming in the lake"),
    ("assistant", "Swimming is great exercise for retrievers."),
    ("user", "My sister lives in Lisbon and works as a nurse"),
]


@pytest.fixture
def thread_of_alice(alice: Caller, settings: Any, monkeypatch: pytest.MonkeyPatch) -> Thread:
    # The key's lookup and the agents with webhooks stay kept while the fixture warms up, however slow
    # the machine is today, and a slow answer of Redis (which would have the key looked up in the
    # database) is waited for.
    settings.API_KEY_CACHE_SECONDS = 3600
    monkeypatch.setattr(webhooks, "AGENTS_CACHE_SECONDS", 3600.0)
    settings.API_LIMITS_REDIS_TIMEOUT = 10.0
    limits_breaker_reset()
    thread: Thread = ThreadFactory(agent=alice.agent, external_id="t-1", turns=TURNS)
    embedded(alice.agent)
    # Warm what is paid once a minute or once a process, not per request: the key's last-used stamp,
    # the scope's size (cached), the context builder's first use.
    answered(alice.client.get("/api/v1/threads/t-1/path"), 200)
    search(alice, "hybrid")
    build_context(alice, strategy="hybrid", max_tokens=3000, current_input="lake")
    return thread


def search(caller: Caller, method: str) -> Any:
    return answered(
        caller.client.post("/api/v1/search", {"text": "lake retriever", "method": method}, format="json"), 200
    )


def test_a_single_append_is_one_statement(
    alice: Caller, thread_of_alice: Thread, django_assert_max_num_queries: Any
) -> None:
    # the thread locked, its leaf and counters moved, the entry and the change event inserted, in
    # one statement (+ its savepoint pair, here in the test's transaction only: a served append is
    # that statement in autocommit; 4 before, the lock a statement of its own)
    with django_assert_max_num_queries(3) as captured:
        post_entry(alice, "t-1", role="user", content="one more")
    assert [q["sql"].split()[0] for q in captured.captured_queries] == ["SAVEPOINT", "WITH", "RELEASE"]


def test_a_path_read_is_two_queries(alice: Caller, thread_of_alice: Thread, django_assert_max_num_queries: Any) -> None:
    # the thread, the branch from the leaf up (one recursive query)
    with django_assert_max_num_queries(2):
        path = answered(alice.client.get("/api/v1/threads/t-1/path"), 200)
    assert len(path["results"]) == len(TURNS)


def test_a_keyword_search_is_six_queries(
    alice: Caller, thread_of_alice: Thread, django_assert_max_num_queries: Any
) -> None:
    # whether any item is live, the ranked matches, their rows, the access log (+ its
    # savepoint pair); the scope's size is cached
    with django_assert_max_num_queries(6):
        answer = search(alice, "keyword")
    assert answer["results"]


def test_a_hybrid_search_is_eleven_queries(
    alice: Caller, thread_of_alice: Thread, django_assert_max_num_queries: Any
) -> None:
    # whether any item is live, the keyword channel's ranked matches, the vector channel (its two
    # SET LOCALs and the nearest rows in one statement, then the embedded scope's size; a core
    # channel, no savepoint), the entity turn channel (the entities the question's words name: none,
    # so nothing more, in a savepoint pair), the neighbours and the page's rows (one statement), the
    # access log (+ its savepoint pair). Not run: the time channel ("lake retriever" names and asks for
    # no time) and the graph channels (off unless SEARCH_GRAPH_CHANNELS). The savepoint pairs are the
    # test's transaction: a served search runs its channels in autocommit, without one (issue 26: 28
    # queries before, 12 before the page's rows came with the neighbours)
    with django_assert_max_num_queries(11):
        answer = search(alice, "hybrid")
    assert answer["results"]


def test_a_hybrid_context_build_is_twelve_queries(
    alice: Caller, thread_of_alice: Thread, django_assert_max_num_queries: Any
) -> None:
    # the thread, its compaction settings, then in one round trip the memory files (context documents
    # and observations in one statement), the items (whether any item is live for recall is what they
    # found) and the branch's newest rows (one chain: a range of seqs), the keyword channel, the
    # vector channel (one statement, then the embedded scope's size; in a table many times the
    # thread's size, the thread's rows read exactly in one), the entity turn channel (one query, in a
    # savepoint pair), the access log (+ its savepoint pair); no time channel, no graph channels (as
    # the search above; 33 before, 16 before the memory files were read at once, 15 before recall took
    # the items' liveness from the facts' read, 14 before the items and the branch were read with the
    # memory files)
    with django_assert_max_num_queries(12) as captured:
        context = build_context(alice, strategy="hybrid", max_tokens=3000, current_input="lake")
    # The branch's rows came with the memory files: no statement reads them alone.
    assert not any(q["sql"].lstrip().startswith("SELECT e.id, e.parent_id") for q in captured.captured_queries)
    assert context["messages"]


@pytest.fixture
def compilations(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The SQL statements the ORM compiles from here on (each compiler class's as_sql, counted)."""
    compiled: list[str] = []
    classes = {compiler.SQLCompiler, *_subclasses(compiler.SQLCompiler)}
    for cls in classes:
        if "as_sql" in vars(cls):
            original = vars(cls)["as_sql"]

            def counting(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
                sql, params = _original(self, *args, **kwargs)
                compiled.append(sql)
                return sql, params

            monkeypatch.setattr(cls, "as_sql", counting)
    return compiled


def _subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub, *_subclasses(sub)}
    return found


def test_a_steady_single_append_compiles_no_sql(
    alice: Caller, thread_of_alice: Thread, compilations: list[str]
) -> None:
    # The thread's lookup (memoryapp.precompiled), the entry's INSERT, the thread's UPDATE and the
    # event's INSERT are built once per process, not compiled by the ORM on every append (issue 26:
    # ~40% of an append's web CPU). The fixture's requests compiled the lookup already.
    post_entry(alice, "t-1", role="user", content="one more")
    assert compilations == []


@pytest.mark.parametrize("method", ["hybrid", "keyword"])
def test_a_steady_search_compiles_no_sql(
    alice: Caller, thread_of_alice: Thread, compilations: list[str], method: str
) -> None:
    # The entity turn channel's lookup of the entities the question's words name (the names as one
    # array parameter) and the check of whether the scope holds any item (one statement for each
    # shape of scope) are built once per process (memoryapp.precompiled), not compiled per search
    # (issue 26: the items' EXISTS was ~26% of a search's CPU); the scope holding no item, no
    # queryset of its items is built.
    search(alice, method)
    assert compilations == []
    Thread.objects.filter(pk=thread_of_alice.pk).exists()
    assert compilations  # the counting sees what the ORM compiles


def test_a_steady_context_build_compiles_no_facts_read(
    alice: Caller, thread_of_alice: Thread, compilations: list[str]
) -> None:
    # A context's facts (the items its scope sees holding now) are read by a statement built once per
    # process (memoryapp.precompiled, the scope's '' and the statuses its constants).
    build_context(alice, strategy="hybrid", max_tokens=3000, current_input="lake")
    assert not [sql for sql in compilations if 'ORDER BY "memoryapp_memoryitem"."valid_from" DESC' in sql]


def test_a_steady_context_build_compiles_no_memory_files_read(
    alice: Caller, thread_of_alice: Thread, compilations: list[str]
) -> None:
    # The heads of its context documents and observations are read by a statement built once per
    # process for each shape of the thread's scope (memoryapp.precompiled; issue 26: ~10% of a build's
    # CPU went to building it).
    build_context(alice, strategy="hybrid", max_tokens=3000, current_input="lake")
    assert not [sql for sql in compilations if "memoryapp_memoryfileversion" in sql]


def test_a_steady_context_build_compiles_no_compaction_settings_read(
    alice: Caller, thread_of_alice: Thread, compilations: list[str]
) -> None:
    # Its pre-step reads the agent's compaction settings by a statement built once per process
    # (memoryapp.compaction.auto, issue 26). (A steady build of this thread compiles no SQL at all:
    # the search test above shows the counting sees what is compiled.)
    build_context(alice, strategy="hybrid", max_tokens=3000, current_input="lake")
    assert not [sql for sql in compilations if "memoryapp_compactionsettings" in sql]


@pytest.mark.parametrize("size", [2, 40])
def test_a_batch_append_is_the_same_five_queries_at_any_size(
    alice: Caller, thread_of_alice: Thread, size: int, django_assert_max_num_queries: Any
) -> None:
    # the thread found and locked, the entries' COPY, the thread's counters and leaf moved with the
    # change event inserted (one statement), + the savepoint pair of the request's atomic block (here
    # in the test's transaction only): no statement a row, so 40 entries cost what 2 do
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} by the lake"} for i in range(size)]
    with django_assert_max_num_queries(5) as captured:
        assert len(post_entries(alice, "t-1", turns)) == size
    assert [q["sql"].split()[0] for q in captured.captured_queries] == [
        "SAVEPOINT",
        "SELECT",
        "COPY",
        "WITH",
        "RELEASE",
    ]
